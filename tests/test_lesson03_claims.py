"""Every sentence of lesson 03 that reads a result off a computation, asserted with the lesson's own
numbers (the solution notebook, executed once per session by ``tests.notebook_runs``), and, for the
results that do not depend on the draw, again with other seeds (the ``*_other_seeds`` tests, which
rebuild the lesson's computations with the reference modules)."""

from __future__ import annotations

import math

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlab.lessons import lesson
from autograder import paths
from tests.helpers import borrowed_reference
from tests.notebook_runs import solution_run

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def facts():
    return solution_run("03").facts


@pytest.fixture(scope="module")
def attention_reference():
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def masking(attention_reference):
    yield from borrowed_reference("masking")


def _cell(cell_id: str) -> str:
    """The source of one cell of the solution notebook."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson("03").notebook, as_version=4)
    return next(cell.source for cell in notebook.cells if cell.get("id") == cell_id)


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


def test_encoder_against_decoder_over_ten_draws(facts):
    draws = np.array(facts["change_over_draws"])                  # (draw, query position)
    assert draws.shape == (10, 5)
    assert np.allclose(draws[0], facts["row_change"])             # draw 0 is the lesson's example
    assert draws[:, 4].max() < 1e-12                              # "the last row never changes"
    for position in range(4):                                     # "ranges from 0 to nearly 1"
        assert draws[:, position].min() < 0.01 and draws[:, position].max() > 0.9, draws[:, position]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_decoder_row_is_the_encoder_row_cut_at_the_diagonal_and_scaled_back_to_one_other_seeds(seed):
    """Every other row loses the weight the encoder gave to later tokens, and what remains is
    scaled back up to a total of 1 (the draw as the lesson's first cell makes it)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((5, 8))
    Q, K = X @ rng.standard_normal((8, 4)), X @ rng.standard_normal((8, 4))
    scores = Q @ K.T / 2
    causal = np.tril(np.ones((5, 5), dtype=bool))
    encoder = np.exp(scores - scores.max(1, keepdims=True))
    encoder /= encoder.sum(1, keepdims=True)
    masked = np.where(causal, scores, -np.inf)
    decoder = np.exp(masked - masked.max(1, keepdims=True))
    decoder /= decoder.sum(1, keepdims=True)
    assert (decoder[~causal] == 0).all() and np.allclose(decoder.sum(1), 1)
    cut = np.where(causal, encoder, 0.0)
    assert np.allclose(decoder, cut / cut.sum(1, keepdims=True))
    assert np.allclose(encoder[4], decoder[4])


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


def test_the_repair_with_nan_to_num(facts):
    counts = facts["repair_counts"]
    stages = ["forward: the softmax's output", "forward: after nan_to_num", "backward: gradient reaching nan_to_num",
              "backward: gradient leaving the softmax", "backward: gradient of the scores"]
    assert list(counts["masked_fill"]) == stages
    # 3 rows with nothing to see x 5 keys x 2 layers = 30: nan in the forward softmax, gone after nan_to_num,
    # back in the softmax's backward pass, and stopped by masked_fill
    assert [counts["masked_fill"][stage] for stage in stages] == [30, 0, 0, 30, 0]
    additive = [counts["additive"][stage] for stage in stages]
    assert additive[:2] == [30, 0] and additive[3] >= 30 and additive[4] >= 30   # it reaches the scores
    assert additive[2] > 0                                                         # and layer 1, from layer 2
    assert facts["repair_grad_nan_share"] == {"masked_fill": 0.0, "additive": 1.0}
    assert facts["repair_grad_vs_sdpa"]["masked_fill"] < 1e-12                     # "equals SDPA's up to rounding"
    assert facts["repair_grad_vs_sdpa"]["additive"] == "nan"
    assert all(difference < 1e-12 for difference in facts["repair_loss_vs_sdpa"].values())  # forward "just as fine"


def _two_layers(attend, x, allowed, real, weights):
    """The lesson's two attention layers with shared projections and a loss on the real tokens."""
    w_q, w_k, w_v = (w.clone().requires_grad_() for w in weights)
    h1 = attend(x @ w_q, x @ w_k, x @ w_v, allowed)
    h2 = attend(h1 @ w_q, h1 @ w_k, h1 @ w_v, allowed)
    loss = h2[real].pow(2).sum()
    loss.backward()
    return h1.detach(), h2.detach(), loss.detach(), w_q.grad


def _batch(seed):
    real = torch.tensor([[False, False, False, True, True], [True] * 5])
    allowed = torch.ones(5, 5, dtype=torch.bool).tril() & real[:, None, :]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    weights = [torch.randn(8, 8, generator=g, dtype=torch.float64) / math.sqrt(8) for _ in range(3)]
    return x, allowed, real, weights


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


@pytest.mark.parametrize("seed", SEEDS)
def test_nan_spreads_the_repair_depends_on_the_mask_and_the_fix_holds_other_seeds(seed, masking):
    x, allowed, real, weights = _batch(seed)
    naive = lambda q, k, v, m: torch.softmax(_scores(q, k).masked_fill(~m, -math.inf), -1) @ v  # noqa: E731
    h1, h2, loss, grad = _two_layers(naive, x, allowed, real, weights)
    assert int(h1.isnan().any(-1).sum()) == 3 and int(h2.isnan().any(-1)[real].sum()) == 2
    assert loss.isnan() and grad.isnan().all()

    sdpa = _two_layers(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), x, allowed, real, weights)
    filled = lambda q, k, v, m: torch.nan_to_num(torch.softmax(_scores(q, k).masked_fill(~m, -math.inf), -1)) @ v  # noqa: E731
    additive_mask = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, -math.inf)
    added = lambda q, k, v, m: torch.nan_to_num(torch.softmax(_scores(q, k) + additive_mask, -1)) @ v  # noqa: E731
    _, _, filled_loss, filled_grad = _two_layers(filled, x, allowed, real, weights)
    _, _, added_loss, added_grad = _two_layers(added, x, allowed, real, weights)
    assert torch.allclose(filled_grad, sdpa[3], atol=1e-12) and torch.allclose(filled_loss, sdpa[2])
    assert torch.allclose(added_loss, sdpa[2]) and added_grad.isnan().all()

    fixed = _two_layers(lambda q, k, v, m: masking.masked_attention(q, k, v, m)[0], x, allowed, real, weights)
    assert fixed[0][~allowed.any(-1)].abs().max() == 0 and fixed[3].isfinite().all()
    assert (fixed[1][1] - h2[1]).abs().max() < 1e-12      # the sentence without padding is unchanged
    assert torch.allclose(fixed[3], sdpa[3], atol=1e-12)


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


@pytest.mark.parametrize("seed", SEEDS)
def test_perturbation_and_jacobian_padding_and_packing_other_seeds(seed, masking):
    """The results of cells "future", "padding" and "packed" hold for other draws of the vectors."""
    rng = np.random.default_rng(seed)
    x = torch.tensor(rng.standard_normal((5, 8)))
    W = [torch.tensor(rng.standard_normal((8, 4))) for _ in range(3)]

    def layer(inputs, mask):
        return masking.masked_attention(*(inputs @ w for w in W), mask)[0]

    replaced = x.clone()
    replaced[3] = torch.tensor(np.random.default_rng(100 + seed).standard_normal(8))
    decoder = [bool(torch.equal(a, b)) for a, b in zip(layer(x, masking.causal_mask(5)), layer(replaced, masking.causal_mask(5)))]
    encoder = [bool(torch.equal(a, b)) for a, b in zip(layer(x, None), layer(replaced, None))]
    assert decoder == [True, True, True, False, False] and encoder == [False] * 5
    blocks = torch.autograd.functional.jacobian(lambda z: layer(z, masking.causal_mask(5)), x).pow(2).sum(dim=(1, 3)).sqrt()
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert blocks[future].max() == 0 and blocks[~future].min() > 0

    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 2])
    padded = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    keep = masking.padding_mask(lengths, 5)[:, None, :]
    out, weights = masking.masked_attention(*(padded @ w for w in W), keep)
    assert weights.masked_select(~keep.expand_as(weights)).max() == 0
    alone = max(float((out[b, :n] - layer(padded[b, :n], None)).abs().max()) for b, n in enumerate(lengths.tolist()))
    assert alone < 1e-14                                   # "below 1e-14"

    doc_ids = torch.repeat_interleave(torch.arange(3), torch.tensor([4, 3, 5]))
    packed = torch.randn(12, 8, generator=g, dtype=torch.float64)
    mask = masking.combine_masks(masking.causal_mask(12), masking.document_mask(doc_ids))
    out, weights = masking.masked_attention(*(packed @ w for w in W), mask)
    assert weights[doc_ids[:, None] != doc_ids[None, :]].max() == 0
    starts = [0, 4, 7, 12]
    assert max(float((out[a:b] - layer(packed[a:b], masking.causal_mask(b - a))).abs().max())
               for a, b in zip(starts, starts[1:])) < 1e-14
    other = packed.clone()
    other[4:7] = torch.randn(3, 8, generator=g, dtype=torch.float64)
    assert torch.equal(masking.masked_attention(*(other @ w for w in W), mask)[0][7:], out[7:])
    causal_only = [masking.masked_attention(*(inputs @ w for w in W), masking.causal_mask(12))[0][7:]
                   for inputs in (packed, other)]
    assert not torch.equal(*causal_only)


# ---------------------------------------------------------------- exercise 2b (cells "leak-candidates" ... "leak-read")


@pytest.fixture(scope="module")
def candidate_masks():
    namespace = {"torch": torch}
    exec(_cell("leak-candidates"), namespace)
    return namespace["candidate_masks"]


def _keys_after(mask, n_q, n_k):
    """How many (query, key) pairs of the mask put the key after the query's position i + n_k - n_q."""
    after = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + n_k - n_q
    return int((mask & after).sum())


def test_the_reference_answer_passes_the_check():
    assert "✓ future_leak: 13 checks passed" in solution_run("03").output_text("check_future_leak")
    assert "return \"b\"" in _cell("future_leak")


def test_mask_b_leaks_only_with_two_or_more_queries(candidate_masks):
    mask_b = candidate_masks["b"]
    assert all(_keys_after(mask_b(1, n_k), 1, n_k) == 0 for n_k in range(1, 10))   # one decoding step: no leak
    assert all(_keys_after(mask_b(n_q, n_k), n_q, n_k) > 0 for n_q in range(2, 6) for n_k in range(n_q, 10))


def test_mask_a_hides_the_newest_keys_without_leaking_and_mask_c_is_causal_mask(candidate_masks, masking):
    for n_q in range(1, 6):
        for n_k in range(n_q, 10):
            mask_a, mask_c = candidate_masks["a"](n_q, n_k), candidate_masks["c"](n_q, n_k)
            right = masking.causal_mask(n_q, n_k)
            assert _keys_after(mask_a, n_q, n_k) == 0 and _keys_after(mask_c, n_q, n_k) == 0
            assert torch.equal(mask_c, right)                       # "the bottom-right alignment of causal_mask"
            if n_q < n_k:
                assert (right & ~mask_a).any() and not (mask_a & ~right).any()   # hides keys it should see, only
