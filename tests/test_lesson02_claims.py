"""Every sentence of lesson 02 that reads a result off a computation, asserted with the lesson's own
numbers (one execution of the solution notebook, shared with the budget test).

Each test names the cell whose prose it backs. Timings are CPU times of one thread, the fastest of
five runs, so the assertions about them leave room for a busy machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab import plots
from tests.notebook_runs import solution_run


@pytest.fixture(scope="module")
def facts():
    return solution_run("02").facts


# ---------------------------------------------------------------- cells "trace" and "trace-read"


def test_the_worked_trace(facts):
    weights = facts["trace_weights"]
    assert [round(w, 2) for w in weights] == [0.84, 0.11, 0.04]
    assert round(facts["trace_output"], 1) == 12.0
    assert 10 < facts["trace_output"] < 20                  # close to 10, pulled toward 20 and 30
    assert np.allclose(facts["shifted_trace_weights"], weights, atol=1e-6)  # only differences matter


# ---------------------------------------------------------------- cells "overflow" and "ex1-explain"


def test_exp_overflows_and_the_shift_does_not(facts):
    assert round(math.log(facts["largest_float32"]), 2) == 88.72
    assert facts["naive"] == ["nan", "nan", "nan"]          # inf / inf
    assert np.allclose(facts["shifted"], [0.6652, 0.2447, 0.0900], atol=1e-4)


# ---------------------------------------------------------------- cell "causal-pattern"


def test_the_bottom_right_pattern_lets_the_last_query_see_every_key(facts):
    allowed = np.array(facts["allowed"])                     # the last pattern printed: 3 queries, 5 keys
    assert allowed.shape == (3, 5) and allowed[-1].all()
    assert (allowed == np.tril(np.ones((3, 5), dtype=bool), k=2)).all()


# ---------------------------------------------------------------- cells "is-causal" and "is-causal-read"


def test_pytorch_is_causal_is_aligned_top_left(facts):
    weights = np.array(facts["pytorch_is_causal"])
    expected = np.tril(np.ones((3, 5)))
    expected /= expected.sum(axis=1, keepdims=True)          # rows 1; 1/2 1/2; 1/3 1/3 1/3
    assert np.allclose(weights, expected, atol=1e-6)
    assert (weights[:, 3:] == 0).all()                       # keys 4 and 5 are seen by no query
    assert (weights[-1] > 0).sum() == 3


def test_an_explicit_bottom_right_mask_gives_this_lessons_pattern(facts):
    weights = np.array(facts["with_bottom_right_mask"])
    assert ((weights > 0) == np.array(facts["bottom_right"])).all()
    assert (weights[-1] > 0).all()


# ---------------------------------------------------------------- cells "recurrence" and "recurrence-read"


def test_the_gru_time_grows_in_proportion_to_n(facts):
    assert 0.85 <= facts["gru_slope"] <= 1.2, facts["gru_slope"]
    per_step = [t / n for n, t in zip(facts["recurrence_ns"], facts["recurrence_seconds"]["GRU"])]
    assert max(per_step) / min(per_step) < 2.0, per_step  # "about the same few microseconds"


def test_attention_is_several_times_faster_at_a_few_hundred_positions_despite_more_arithmetic(facts):
    ns, speedup, flops = facts["recurrence_ns"], facts["attention_speedup"], facts["flop_ratio"]
    for n in (32, 64, 128, 256):
        assert speedup[ns.index(n)] >= 3, (n, speedup)
    assert flops[ns.index(64)] < 1 < flops[ns.index(128)]    # more arithmetic from n = 128 on
    assert flops[ns.index(256)] > 1.5


def test_the_core_runs_attentions_arithmetic_many_times_faster(facts):
    gru, attention = facts["recurrence_gflops"]["GRU"], facts["recurrence_gflops"]["self-attention"]
    assert all(a > 3 * g for a, g in zip(attention, gru)), (attention, gru)


def test_attention_catches_up_with_the_gru_at_a_few_thousand_positions(facts):
    assert facts["crossover"] in (1024, 2048, 4096), facts["attention_speedup"]
    assert facts["attention_speedup"][-1] < 1


# ---------------------------------------------------------------- cells "sqrt-dk" and "sqrt-dk-read"


def test_the_score_variance_grows_with_d_k_and_the_scale_brings_it_back_to_one(facts):
    variance = np.array(facts["score_variance"]).mean(axis=0)  # (d_k, [raw, scaled])
    d_ks = np.array(facts["d_ks"])
    assert np.all(np.abs(variance[:, 0] / d_ks - 1) < 0.15), variance[:, 0]
    assert np.all(np.abs(variance[:, 1] - 1) < 0.1), variance[:, 1]


def test_unscaled_softmax_saturates_and_its_jacobian_vanishes(facts):
    largest = np.array(facts["largest_weight"]["unscaled"]).mean(axis=0)
    gradient = np.array(facts["gradient_norm"]["unscaled"]).mean(axis=0)
    assert np.all(np.diff(largest) > 0) and largest[-1] > 0.99
    assert gradient[0] / gradient[-1] > 1e3                    # orders of magnitude


def test_scaled_curves_stay_flat(facts):
    for name in ("largest_weight", "gradient_norm"):
        curve = np.array(facts[name]["scaled by 1/√d_k"]).mean(axis=0)
        assert curve.max() / curve.min() < 1.3, (name, curve)


# ---------------------------------------------------------------- the interactive figure's text


def test_the_interactive_figure_says_what_it_shows():
    equal = np.full(16, 1 / 16)                                 # "0.24 when all 16 weights are equal"
    assert round(float(np.linalg.norm(np.diag(equal) - np.outer(equal, equal))), 2) == 0.24
    unscaled = plots.saturation_numbers(1024, scaled=False)
    scaled = plots.saturation_numbers(1024, scaled=True)
    assert unscaled["largest_weight"] > 0.99 and unscaled["jacobian_norm"] < 0.01
    assert scaled["largest_weight"] < 0.9


# ---------------------------------------------------------------- cells "sentence-heatmap" and "sentence-read"


def test_bank_reads_loan_and_approved_and_moves_toward_money(facts):
    tokens, weights = facts["tokens"], np.array(facts["weights"])
    bank = tokens.index("bank")
    top_two = [tokens[j] for j in np.argsort(-weights[bank])[:2]]
    assert top_two == ["loan", "approved"]
    assert weights[bank, tokens.index("loan")] + weights[bank, tokens.index("approved")] > 0.8
    assert weights[bank, bank] < 1 / len(tokens)                # quiz: it does not match itself best
    money, river = facts["COLUMN"]["money"], facts["COLUMN"]["river"]
    embedding, out = facts["X"][bank], facts["out"][bank]
    assert out[money] > embedding[money] and out[river] < embedding[river]


def test_in_the_river_sentence_bank_moves_toward_river(facts):
    money, river = facts["COLUMN"]["money"], facts["COLUMN"]["river"]
    river_bank = facts["river_out"][facts["river_tokens"].index("bank")]
    assert river_bank[river] > 0.5 > river_bank[money]


def test_uniform_rows_and_approved_finds_my(facts):
    tokens, weights = facts["tokens"], np.array(facts["weights"])
    for word in ("the", "my", "loan"):
        assert np.allclose(weights[tokens.index(word)], 1 / len(tokens))
    approved = weights[tokens.index("approved")]
    assert tokens[int(approved.argmax())] == "my"
