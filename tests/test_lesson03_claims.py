"""Every sentence of lesson 03 that reads a result off a computation, asserted with the lesson's own
numbers (the solution notebook, executed once per session by ``tests.notebook_runs``)."""

from __future__ import annotations

import math

import pytest

from tests.notebook_runs import solution_run


@pytest.fixture(scope="module")
def facts():
    return solution_run("03").facts


def test_seed_example_masked_weights_are_exactly_zero_and_rows_sum_to_one(facts):
    weights = facts["causal_weights"]
    assert facts["above_diagonal_max"] == 0.0  # "the largest such weight printed is 0.0"
    assert all(weights[i][j] == 0.0 for i in range(5) for j in range(i + 1, 5))
    assert facts["row_sum_error"] < 1e-12  # "every row sums to 1 up to rounding"
    assert weights[0][0] == 1.0  # "The" gives its whole weight, 1.00, to itself
    assert 0 < weights[4][4] < 0.005  # "twice" gives itself a weight that rounds to 0.00, not masked
    assert facts["causal"][0][4] is False and all(not facts["causal"][i][4] for i in range(4))


def test_fill_values(facts):
    results = facts["fill_results"]
    for dtype in ("float32", "float16", "bfloat16"):
        for fill in ("-inf", "-1e9", "-1e4", "finfo.min"):
            entry = results[f"{dtype} {fill}"]
            if dtype == "float16" and fill == "-1e9":  # "-1e9 does not fit in float16"
                assert "overflow" in entry["error"]
                continue
            assert "error" not in entry  # every other fill fits its dtype
            assert entry["partial"] == 0.0  # "where the row has other keys, every choice works"
            if fill == "-inf":
                assert all(w == "nan" for w in entry["full"])  # "the row is nan"
            else:
                assert entry["full"] == [0.25] * 4  # "equal weights, 0.25 for each of the four keys"
    assert facts["float16_max"] == 65504.0  # "whose largest magnitude is 65504"


def test_encoder_against_decoder(facts):
    encoder, decoder = facts["encoder_weights"], facts["causal_weights"]
    assert facts["encoder_first_to_charged"] > 0.5  # "The" puts most of its weight on "charged"
    assert max(encoder[0]) == encoder[0][3]
    assert facts["decoder_first_to_charged"] == 0.0
    assert all(math.isclose(a, b, abs_tol=1e-12) for a, b in zip(encoder[4], decoder[4]))  # last row the same
    change = facts["row_change"]
    assert change == [max(abs(a - b) for a, b in zip(e, d)) for e, d in zip(encoder, decoder)]
    assert change[4] < 1e-12
    assert change[0] == max(change) > 0.99  # "the first row changes most"
    assert all(c > 1e-3 for c in change[1:4])  # "the rows in between change too"
    assert round(max(change[1:4]), 3) == 0.032  # "but only a little (no weight moves by more than 0.032)"
    for i in (1, 2, 3):  # "put almost all their weight on earlier words anyway"
        assert sum(encoder[i][: i + 1]) > 0.96


def test_top_left_against_bottom_right(facts):
    assert facts["is_causal_pattern"] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]  # query 0 sees only key 0
    assert facts["lower_right_pattern"] == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]  # the last query sees all 5
    assert facts["decode_keys_top_left"] == 1
    assert facts["decode_keys_bottom_right"] == 5
    assert facts["alignments_agree_when_square"] is True  # "with n_q = n_k the two agree"


def test_rows_with_nothing_to_see_spread_nan(facts):
    assert facts["nothing_to_see"] == [[True, True, True, False, False], [False] * 5]
    assert facts["naive_nan_rows_layer1"] == 3  # "the three padded queries of layer 1 are nan"
    assert facts["naive_nan_real_layer2"] == 2  # "both real tokens of 'thank you' become nan"
    assert facts["naive_loss_is_nan"] is True
    assert facts["naive_grad_nan_fraction"] == 1.0  # "every entry of the gradient of W_Q"


def test_pytorch_sdpa_returns_zero_for_rows_with_nothing_to_see(facts):
    for dtype in ("float32", "float16", "bfloat16"):
        measured = facts["sdpa_empty_rows"][dtype]
        assert measured["largest |output| on rows with nothing to see"] == 0.0
        assert measured["any nan in the output"] is False
        assert measured["gradients finite"] is True


def test_the_fix(facts):
    assert facts["fixed_empty_rows_max"] == 0.0
    assert facts["fixed_nan_anywhere"] is False
    assert facts["fixed_grad_finite"] is True
    assert facts["fixed_full_sentence_difference"] < 1e-12  # "to within float64 rounding"


def test_no_token_sees_the_future(facts):
    assert facts["decoder_unchanged"] == [True, True, True, False, False]
    assert facts["encoder_unchanged"] == [False] * 5
    assert facts["jacobian_future_max"] == 0.0
    assert facts["jacobian_past_min"] > 0.0
    norms = facts["block_norms"]
    assert all(norms[i][j] == 0.0 for i in range(5) for j in range(i + 1, 5))
    assert all(norms[i][j] > 0.0 for i in range(5) for j in range(i + 1))


def test_padding(facts):
    assert facts["pad_weight_max"] == 0.0
    assert 0.0 <= facts["padded_vs_alone"] < 1e-14  # "the largest difference printed is below 1e-14"
    assert facts["lengths"] == [5, 3, 2]
    thank_you = facts["padded_weights"][2]
    assert all(row[2:] == [0.0, 0.0, 0.0] for row in thank_you)
    assert all(sum(row) > 0.999 for row in thank_you[2:])  # padding rows still attend to the real tokens


def test_packed_documents(facts):
    assert facts["cross_document_weight_max"] == 0.0
    assert facts["packed_vs_alone"] < 1e-14
    assert facts["document_2_unchanged"] is True
    assert facts["document_2_unchanged_causal_only"] is False


def test_sliding_window(facts):
    assert facts["keys_per_query"] == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4]  # at most 4, fewer at the start
    assert facts["farthest_back"] == [3, 6, 9, 12]  # grows by window - 1 per layer
    assert facts["mistral_reach"] == 131_040 == 32 * (4096 - 1)  # counted as this lesson counts a window
    assert facts["mistral_paper_span"] == 131_072  # "approximately 131K tokens", as the paper counts
    assert facts["farthest_back"][-1] == 4 * (facts["window"] - 1)  # the same rule as the 40-token example


def test_dense_mask_size(facts):
    assert round(facts["dense_mask_megabytes"]) == 17  # "about 17 MB for one 4096-token sequence"
