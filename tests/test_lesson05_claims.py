"""Every sentence of lesson 05 that reads a result off a computation, asserted with the lesson's own
numbers (one execution of the solution notebook, shared with the budget test).

Each test names the section whose prose it backs. The trainings are seeded and run on one thread,
so the numbers repeat on this machine; the bounds leave room for another CPU or torch version.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab import plots
from tests.notebook_runs import solution_run


@pytest.fixture(scope="module")
def facts():
    return solution_run("05").facts


# ------------------------------------------------------------------ Attention cannot see order


def test_outputs_are_the_same_vectors_reordered(facts):
    # "the differences printed are 0 or at the level of float32 rounding ... the same holds
    # through the two encoder layers"; "the vector computed for 'customer' is the same"
    assert facts["equivariance_error_layer"] < 1e-5
    assert facts["customer_output_difference"] < 1e-5
    assert facts["equivariance_error_encoder"] < 1e-5


def test_model_without_positions_scores_half(facts):
    # "Without positions the model scores 50%: it answers a sentence and its mirror image
    # identically (the answer scores printed are equal to float precision)"; "at most 50%"
    assert 0.45 <= facts["accuracy_none"] <= 0.5
    assert facts["mirror_logit_difference_none"] < 1e-5
    assert facts["accuracy"]["none"] == facts["accuracy_none"]
    # "Its loss stays above ln 2 ≈ 0.69 nats (printed)"
    assert facts["loss_none_all"] >= math.log(2)


def test_same_size_steps_and_seed(facts):
    # "They have the same size, the same 150 training steps of 64 sentences and the same seed."
    assert (facts["STEPS"], facts["BATCH"], facts["SEED"]) == (150, 64, 0)
    assert sorted(facts["losses"]) == ["none", "rope", "sinusoidal"]
    assert all(len(values) == 150 for values in facts["losses"].values())
    # "All three have the same number of trainable parameters (printed)"
    counts = facts["parameter_counts"]
    assert sorted(counts) == ["none", "rope", "sinusoidal"] and len(set(counts.values())) == 1


# ------------------------------------------------------------------ Sinusoidal encodings


def test_sinusoidal_figure_numbers(facts):
    # "wavelengths ... from 2π up toward 10000·2π (with d_model = 32 the last is about 35,000)"
    assert facts["shortest_wavelength"] == pytest.approx(2 * math.pi)
    assert facts["longest_wavelength"] < 10000 * 2 * math.pi
    assert round(facts["longest_wavelength"], -3) == 35000
    # "(a) The first columns flicker ..., the last ones barely change over 64 positions"
    assert facts["first_column_range"] > 1.9
    assert facts["last_column_range"] < 1e-3
    # "(c) The curves for different m coincide (the printed difference is at float32 level)"
    assert facts["dot_product_anchor_difference"] < 1e-5
    # "It peaks at Δ = 0 with d_model/2 and is symmetric"
    assert facts["dot_at_distance_0"] == pytest.approx(facts["d_model"] / 2, abs=1e-5)
    assert facts["dot_peak_distance"] == 0
    assert facts["dot_is_symmetric"] is True


# ------------------------------------------------------------------ RoPE


def test_rope_properties_measured(facts):
    # "Rotations keep lengths (the change printed is float64 rounding), and moving the query and
    # the key together by 1000 positions leaves every score equal to float precision: the
    # differences are below 1e-12 in float64, and below 1e-4 in float32"
    assert facts["norm_change"] < 1e-12
    assert facts["shift_score_difference"] < 1e-12
    assert facts["shift_score_difference_float32"] < 1e-4
    assert facts["score_scale"] > 1


def test_long_range_decay(facts):
    ten_thousand, million = facts["decay_at"]["base 10,000"], facts["decay_at"]["base 1,000,000"]
    # "At distance 0 ... the bound is at its largest, (h/2 + 1)/2 = 32.5"
    assert ten_thousand["0"] == pytest.approx(32.5) and million["0"] == pytest.approx(32.5)
    # "With base 10,000 it falls to about a third of that within 100 tokens"
    assert 0.25 < ten_thousand["100"] / 32.5 < 0.4
    # "With base 1,000,000 it falls more slowly (compare the values printed at 1,000 tokens)"
    assert million["1000"] > 2 * ten_thousand["1000"]
    assert all(million[r] > ten_thousand[r] for r in ("100", "1000", "10000"))


def test_models_with_positions_answer_every_sentence(facts):
    # "With either kind of position the model answers essentially every sentence right"
    assert facts["accuracy_sinusoidal"] >= 0.98
    assert facts["accuracy_rope"] >= 0.98
    # "The RoPE model now names the store as the payer in 'the customer charged the store' and the
    # customer in its mirror image."
    assert facts["answers_rope"] == ["store", "customer"]


# ------------------------------------------------------------------ Two layouts


def test_layouts_agree_exactly_and_mixing_them_up_costs_accuracy(facts):
    # "The two layouts agree exactly once the coordinates are reordered"
    assert facts["layout_equivalence_error"] == 0.0
    # "the trained model read with the wrong one loses much of its accuracy"
    assert facts["accuracy_mixed_layout"] < facts["accuracy_rope"] - 0.2


# ------------------------------------------------------------------ The base


def test_qwen_wavelengths(facts):
    ten_thousand, million = "base 10,000 (RoFormer)", "base 1,000,000 (Qwen2.5)"
    assert facts["qwen_head_dim"] == 128 and facts["context"] == 32768
    # "only the last 4 of the 64 pairs ... turn less than once over 32,768 tokens, and the slowest
    # repeats after about 54,000 tokens. With 1,000,000, 24 pairs do and the slowest needs about
    # 5 million tokens for one turn."
    assert facts["slow_pairs_by_base"] == {ten_thousand: 4, million: 24}
    assert round(facts["longest_wavelength_by_base"][ten_thousand], -3) == 54000
    assert round(facts["longest_wavelength_by_base"][million], -6) == 5_000_000
    # "pair 0 always turns 1 radian per token"
    assert plots.rope_wavelengths(128, 1e4)[0] == plots.rope_wavelengths(128, 1e6)[0] == pytest.approx(2 * math.pi)


# ------------------------------------------------------------------ The KV cache


def test_decoding_with_the_cache(facts):
    # "Decoding with the cache gives the same outputs as the full pass (float32 rounding), and the
    # cached keys are the keys rotated at positions 0 to 9"
    assert facts["cache_output_difference"] < 1e-5
    assert facts["rotated_keys_difference"] < 1e-5
    # "Rotating the new token at position 0 instead of 7 moves its output by about a tenth of its size"
    assert 0.05 < facts["restart_relative_error"] < 0.2


# ------------------------------------------------------------------ Limits


def test_float32_angles_at_position_100000(facts):
    # "float32 angles there are off by up to about 0.007 radians"; "2^-7 ≈ 0.008 apart"
    assert 0.005 < facts["float32_angle_error"] < 0.008
    assert np.spacing(np.float32(100_000)) == 2.0 ** -7


# ------------------------------------------------------------------ Explore


def test_interactive_figure_score_stays_put(facts):
    # "move the query's position and the key's position by the same amount: ... the score stays put"
    assert facts["pair_score_near"] == pytest.approx(facts["pair_score_shifted"], abs=1e-9)
    # "Switch the base to 1,000,000, and pick a slower pair (pair 4 or 7): it barely turns"
    for pair in (4, 7):
        assert 64 * 1e6 ** (-2 * pair / 16) < 0.1   # radians over the slider's 64 positions
