"""Every sentence of lesson 01 that reads a result off a computation, asserted with the lesson's own
numbers (one execution of the solution notebook, shared with the budget test).

Each test names the cell whose prose it backs. Where the prose quotes a number ("0.37 at 16
digits"), the test allows the last printed digit to move (training is seeded and runs on one
thread, so the numbers repeat on this machine; another CPU or torch version may round differently).
"""

from __future__ import annotations

import math

import pytest

from attnlab import seq2seq
from tests.notebook_runs import solution_run

PLAIN = "without attention (fixed-length vector)"
ATTENTION = "with additive attention"
ROUNDING = 0.015  # a quoted two-digit number may differ by one in its last digit


@pytest.fixture(scope="module")
def facts():
    return solution_run("01").facts


def near(value: float, quoted: float) -> bool:
    return abs(value - quoted) <= ROUNDING


# ---------------------------------------------------------------- cell "padding-demo" and exercise 2


def test_only_masking_the_scores_gives_zeros_that_still_sum_to_one(facts):
    masked, zeroed, ignored = facts["masked"], facts["zeroed_after"], facts["ignored"]
    assert masked[3:] == [0.0, 0.0] and math.isclose(sum(masked), 1.0, rel_tol=1e-6)
    assert zeroed[3:] == [0.0, 0.0] and sum(zeroed) < 0.9          # zeros, but no distribution
    assert min(ignored[3:]) > 0.05 and math.isclose(sum(ignored), 1.0, rel_tol=1e-6)  # reads padding


# ---------------------------------------------------------------- cell "task": the settings


def test_the_settings_and_the_bits_the_prose_quotes():
    config = seq2seq.Seq2SeqConfig()
    assert config.d_enc == 64                 # "c holds 64 real numbers", "(64 in the settings above)"
    assert (config.min_len, config.max_len) == (4, 16)


def test_a_16_digit_string_holds_53_bits(facts):
    assert round(facts["bits_longest"]) == 53
    assert facts["position_length"] == 16


# ---------------------------------------------------------------- cell "accuracy-read", panel (a)


def test_short_strings_are_nearly_perfect_for_both_models(facts):
    plain, attention = facts["plain_accuracy"]["token"], facts["attention_accuracy"]["token"]
    assert near(plain["4"], 0.99) and near(attention["4"], 1.00)
    assert plain["4"] >= 0.97 and attention["4"] >= 0.97


def test_the_plain_model_gets_more_and_more_digits_wrong(facts):
    plain = facts["plain_accuracy"]["token"]
    values = [plain[str(n)] for n in facts["lengths"]]
    assert all(later < earlier for earlier, later in zip(values, values[1:])), values
    assert near(plain["16"], 0.37)


def test_the_attention_model_stays_close_to_the_top(facts):
    attention = facts["attention_accuracy"]["token"]
    assert min(attention.values()) >= 0.94, attention
    assert near(attention["16"], 0.95)


# ---------------------------------------------------------------- panel (b): where the errors are


def test_with_teacher_forcing_the_plain_model_is_best_at_both_ends_and_worst_between(facts):
    forced = facts["by_position"][PLAIN]["teacher forcing"]
    assert len(forced) == 16
    lowest = min(range(16), key=forced.__getitem__)
    assert 0 < lowest < 15, f"the lowest accuracy is at an end (position {lowest + 1}): {forced}"
    assert lowest + 1 == 13 and near(forced[lowest], 0.38)
    assert near(forced[0], 0.85) and near(forced[-1], 0.56)
    assert forced[0] == max(forced)                                # "its best position"
    assert forced[-1] - forced[lowest] >= 0.1                      # "more again at the end"
    assert forced[0] - forced[lowest] >= 0.3


def test_greedy_decoding_falls_faster_and_loses_the_rise_at_the_end(facts):
    greedy = facts["by_position"][PLAIN]["greedy"]
    forced = facts["by_position"][PLAIN]["teacher forcing"]
    assert near(greedy[0], 0.85)                                   # the first step has no earlier mistake
    assert all(g <= f + 1e-9 for g, f in zip(greedy, forced)), (greedy, forced)
    tail = greedy[7:]                                              # positions 8 to 16
    assert 0.18 - ROUNDING <= min(tail) and max(tail) <= 0.25 + ROUNDING, tail
    assert greedy[-1] - min(greedy) < 0.05                         # "the rise at the end is gone"


def test_the_attention_model_stays_near_the_top_at_every_position(facts):
    greedy = facts["by_position"][ATTENTION]["greedy"]
    forced = facts["by_position"][ATTENTION]["teacher forcing"]
    assert min(greedy) >= 0.8 and min(forced) >= 0.9
    # "its few errors gather at the end of greedy decoding"
    assert min(range(16), key=greedy.__getitem__) >= 12
    assert sum(greedy[12:]) / 4 < sum(greedy[:12]) / 12


# ---------------------------------------------------------------- cell "heatmap-read"


def test_the_bright_cells_follow_the_anti_diagonal(facts):
    summary = facts["alignment_summary"]
    assert set(summary) == {str(n) for n in facts["lengths"]}
    bands = [row["band weight"] for row in summary.values()]
    assert near(min(bands), 0.87) and near(max(bands), 0.93), bands
    for row in summary.values():
        assert row["on"] + row["left"] + row["right"] >= 0.95     # the peak is within one column


def test_the_peak_mostly_sits_one_column_to_the_right(facts):
    summary = facts["alignment_summary"]
    for n, row in summary.items():
        assert row["right"] > 0.5 and row["right"] > row["on"], (n, row)
    assert near(summary["16"]["right"], 0.78) and near(summary["16"]["on"], 0.17)


# ---------------------------------------------------------------- quiz and cell "bridge-timing"


def test_attention_adds_only_a_small_fraction_of_parameters(facts):
    config = seq2seq.Seq2SeqConfig()
    extra = facts["attention_parameters"] - facts["plain_parameters"]
    assert extra == config.d_hidden * config.d_attn + config.d_enc * config.d_attn + config.d_attn  # W_q, W_k, v
    assert extra / facts["attention_parameters"] < 0.1


def test_held_out_batches_have_no_padding_and_training_covers_every_tested_length():
    config = seq2seq.Seq2SeqConfig()
    from attnlab import data

    for n, batch in data.evaluation_set(config.task, range(config.min_len, config.max_len + 1, 2), 5).items():
        assert batch.mask.all() and batch.source.shape[1] == n
        assert config.min_len <= n <= config.max_len


def test_whole_strings_fail_more_often_than_digits(facts):
    for accuracy in (facts["plain_accuracy"], facts["attention_accuracy"]):
        for n, token in accuracy["token"].items():
            assert accuracy["sequence"][n] <= token + 1e-9
    attention = facts["attention_accuracy"]
    assert attention["token"]["16"] - attention["sequence"]["16"] > 0.1


def test_additive_scores_are_much_slower_than_the_dot_product(facts):
    assert facts["additive_seconds"] > 5 * facts["dot_seconds"], (facts["additive_seconds"], facts["dot_seconds"])
