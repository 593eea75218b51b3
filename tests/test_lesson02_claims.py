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
from tests.timed_claims import within


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
# The settings are the lengths n and the two batch sizes; the JSON facts key the batch sizes "1", "32".


def _at(facts, name, batch, n):
    return facts[name][str(batch)][facts["recurrence_ns"][str(batch)].index(n)]


def test_the_gru_time_grows_in_proportion_to_n(facts):
    assert within("02: the GRU's time slope against n, batch 1", facts["gru_slope"], 0.85, 1.2)
    seconds = facts["recurrence_seconds"]["1"]["GRU"]
    per_step = [t / n for n, t in zip(facts["recurrence_ns"]["1"], seconds)]
    # "every step costs about the same"
    assert within("02: the GRU's slowest over fastest step, n = 32 to 4096", max(per_step) / min(per_step),
                  high=2.0), per_step


def test_batch_1_attention_is_several_times_faster_at_a_few_hundred_positions_despite_more_arithmetic(facts):
    ns, flops = facts["recurrence_ns"]["1"], facts["flop_ratio"]
    assert within("02: attention over the GRU, batch 1, n = 32 to 256",
                  [_at(facts, "attention_speedup", 1, n) for n in (32, 64, 128, 256)], low=3), facts["attention_speedup"]
    assert flops[ns.index(64)] < 1 < flops[ns.index(128)]    # more arithmetic from n = 128 on
    assert flops[ns.index(256)] > 1.5
    assert within("02: attention over the GRU, batch 1, n = 512 (quiz)", _at(facts, "attention_speedup", 1, 512),
                  low=1)


def test_batch_1_the_core_runs_attentions_arithmetic_many_times_faster(facts):
    gru, attention = facts["recurrence_gflops"]["1"]["GRU"], facts["recurrence_gflops"]["1"]["self-attention"]
    assert within("02: attention's FLOP/s over the GRU's, batch 1, every n", [a / g for a, g in zip(attention, gru)],
                  low=3), (attention, gru)


def test_batch_1_attention_catches_up_with_the_gru_at_a_few_thousand_positions(facts):
    assert facts["crossover"]["1"] in (1024, 2048, 4096), facts["attention_speedup"]["1"]
    assert facts["attention_speedup"]["1"][-1] < 1


def test_batch_32_one_gru_step_costs_only_a_few_times_one_sequences_step(facts):
    # "only a few times as long", for 32 times the work
    assert within("02: one GRU step for 32 sequences over one for 1, median over n", facts["gru_step_ratio"], 1, 8)
    seconds, ns = facts["recurrence_seconds"], facts["recurrence_ns"]
    steps = [32 * seconds["32"]["GRU"][i] / seconds["1"]["GRU"][ns["1"].index(n)] for i, n in enumerate(ns["32"])]
    assert within("02: one GRU step for 32 sequences over one for 1, every n", steps, 1, 12)  # not only the median


def test_batch_32_makes_the_gru_about_ten_times_cheaper_and_attention_hardly_cheaper(facts):
    gain = facts["gru_batching_gain"]
    assert within("02: batch 32 over batch 1, the GRU's gain per sequence", gain["GRU"], low=4)  # "many times cheaper"
    assert within("02: batch 32 over batch 1, attention's gain per sequence", gain["self-attention"],
                  high=2)  # "gains almost nothing"


def test_batch_32_the_gru_is_faster_from_a_few_hundred_positions(facts):
    speedup = facts["attention_speedup"]["32"]
    assert speedup[0] > 1, speedup                                  # attention ahead only on short sequences
    assert facts["crossover"]["32"] in (128, 256, 512), speedup
    crossing = facts["recurrence_ns"]["32"].index(facts["crossover"]["32"])
    assert all(s < 1 for s in speedup[crossing:]), speedup          # and the GRU stays ahead after it
    assert _at(facts, "attention_speedup", 32, 512) < 1             # quiz: at 512 positions, batch 32
    assert _at(facts, "attention_speedup", 32, 512) < 0.5           # twice as fast at the longest length timed


# ---------------------------------------------------------------- cells "path-length" and "path-length-read"


def test_the_gru_gradient_from_the_first_input_vanishes_for_every_seed(facts):
    ns, gru = facts["path_ns"], np.array(facts["path_gradient"]["GRU"])   # (seeds, n)
    assert gru.shape == (3, len(ns))
    assert np.all(np.diff(gru, axis=1) < 0)                  # shrinks with every longer sequence
    assert np.all(gru[:, ns.index(64)] < 1e-12)              # "below 1e-12 at 64 positions"
    assert np.all(gru[:, ns.index(256)] < 1e-49)             # "below 1e-49 at 256"
    assert np.all(gru[:, ns.index(256)] / gru[:, ns.index(4)] < 1e-45)   # quiz: some 50 orders of magnitude


def test_attentions_gradient_from_the_first_input_stays_above_a_hundredth(facts):
    ns, attention = facts["path_ns"], np.array(facts["path_gradient"]["self-attention"])
    assert np.all(attention > 1e-2), attention               # "above 1e-2 at every length measured"
    assert np.all(attention[:, -1] < attention[:, 0])        # "it shrinks somewhat with n"


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
    for name in ("largest_weight", "gradient_norm", "query_gradient_norm"):
        curve = np.array(facts[name]["scaled by 1/√d_k"]).mean(axis=0)
        assert curve.max() / curve.min() < 1.3, (name, curve)


def test_unscaled_query_gradient_first_grows_then_collapses(facts):
    d_ks = facts["d_ks"]
    unscaled = np.array(facts["query_gradient_norm"]["unscaled"])     # (seeds, d_k)
    scaled = np.array(facts["query_gradient_norm"]["scaled by 1/√d_k"])
    mean = unscaled.mean(axis=0)
    peak = int(mean.argmax())
    assert 0 < peak and d_ks[peak] <= 64 and mean[peak] > 1.5 * mean[0], mean  # "first grows with d_k"
    assert np.all(unscaled[:, 0] < unscaled[:, d_ks.index(16)])                 # for every seed
    ratio = unscaled[:, -1] / scaled[:, -1]                                     # "about three orders of magnitude"
    assert np.all((1e-4 < ratio) & (ratio < 1e-2)), ratio


# ---------------------------------------------------------------- cells "saturation-numbers" and the interactive figure


def test_the_softmax_jacobians_landmarks(facts):
    assert facts["jacobian_norm_one_hot"] == 0.0
    assert round(facts["jacobian_norm_equal"], 2) == 0.24 and math.isclose(facts["jacobian_norm_equal"], 15**0.5 / 16)
    assert facts["jacobian_norm_two_equal"] == pytest.approx(0.5)
    assert 0.45 < facts["jacobian_norm_largest_found"] <= 0.5 + 1e-12        # nothing above 0.5
    assert facts["jacobian_norm_starting_view"] > facts["jacobian_norm_equal"]  # "a little above"
    assert facts["jacobian_norm_starting_view"] < 0.3


def test_the_peak_is_two_equal_weights_by_the_bound():
    """||J||^2 = a - 2b + a^2 <= a - a^2 <= 1/4 (the prose's argument), checked on random rows."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 16, 64):
        w = rng.dirichlet(np.full(n, 0.3), size=2000)
        jac = np.einsum("rj,jl->rjl", w, np.eye(n)) - w[:, :, None] * w[:, None, :]
        norm2 = (jac**2).sum(axis=(1, 2))
        a, b = (w**2).sum(1), (w**3).sum(1)
        assert np.allclose(norm2, a - 2 * b + a**2)
        assert np.all(b >= a**2 - 1e-15) and norm2.max() <= 0.25 + 1e-12


def test_the_interactive_figure_says_what_it_shows():
    equal = np.full(16, 1 / 16)                                 # "0.24 for 16 equal weights"
    assert round(float(np.linalg.norm(np.diag(equal) - np.outer(equal, equal))), 2) == 0.24
    for seed in (0, 1, 2):
        unscaled = plots.saturation_numbers(1024, scaled=False, seed=seed)
        scaled = plots.saturation_numbers(1024, scaled=True, seed=seed)
        assert unscaled["largest_weight"] > 0.99 and unscaled["jacobian_norm"] < 0.01
        assert scaled["largest_weight"] < 0.9
    title = plots.softmax_saturation(64).get_suptitle()
    assert "‖∂w/∂s‖ = 0.272" in title and "0.24 for 16 equal weights" in title and "at most 0.5" in title


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
