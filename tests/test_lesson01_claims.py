"""Every sentence of lesson 01 that reads a result off a computation, asserted with the lesson's own
numbers and across seeds.

The lesson trains one seed (``config.seed``, 0) and says only what held for each of the seeds 0 to
3: the numbers of seed 0 come from one execution of the solution notebook (shared with the budget
test), seeds 1 to 3 are trained here the same way (``measured``), and every test of a result runs
over all four. Each test names the cell whose prose it backs.
"""

from __future__ import annotations

import functools
import math

import pytest

from attnlab import data, seq2seq
from tests.helpers import borrowed_reference
from tests.notebook_runs import solution_run
from tests.timed_claims import within

PLAIN = "without attention (fixed-length vector)"
ATTENTION = "with additive attention"
SEEDS = (0, 1, 2, 3)  # "each of the seeds 0 to 3"


@functools.cache
def measured(seed: int) -> dict:
    """What the lesson computes, for one seed: from the executed notebook for its own seed, else
    trained here exactly as the notebook trains (the same settings but the seed, the same held-out
    strings, the same functions)."""
    if seed == seq2seq.Seq2SeqConfig().seed:
        facts = solution_run("01").facts
        return {key: facts[key] for key in ("plain_accuracy", "attention_accuracy", "by_position", "alignment_summary")}
    reference = borrowed_reference("additive")
    next(reference)
    try:
        config = seq2seq.Seq2SeqConfig(seed=seed)
        lengths = list(range(config.min_len, config.max_len + 1, 2))
        held_out = data.evaluation_set(config.task, lengths, per_length=200)
        found = {"by_position": {}}
        for kind, name in (("plain", PLAIN), ("attention", ATTENTION)):
            model, _ = seq2seq.train_model(kind, config, progress=False)
            accuracy = seq2seq.accuracy_by_length(model, held_out)
            found[f"{kind}_accuracy"] = {k: {str(n): v for n, v in by.items()} for k, by in accuracy.items()}
            found["by_position"][name] = {
                "greedy": seq2seq.accuracy_by_position(model, held_out[config.max_len]),
                "teacher forcing": seq2seq.accuracy_by_position(model, held_out[config.max_len], teacher_forcing=True)}
            if kind == "attention":
                found["alignment_summary"] = {str(n): seq2seq.alignment_summary(seq2seq.predict(model, held_out[n])[1])
                                              for n in lengths}
        return found
    finally:
        next(reference, None)


@pytest.fixture(scope="module")
def facts():
    return solution_run("01").facts


every_seed = pytest.mark.parametrize("seed", SEEDS)


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
    assert config.seed == 0                   # "the seeds 0 to 3": the lesson's own is 0


def test_a_16_digit_string_holds_53_bits(facts):
    assert round(facts["bits_longest"]) == 53
    assert facts["position_length"] == 16


def test_the_decoder_writes_as_many_digits_as_the_source_has():
    # "The decoder is told how long the output is": no end token to write, one step per source digit.
    assert data.VOCAB == ("<pad>", "<bos>", *"0123456789")
    reference = borrowed_reference("additive")
    next(reference)
    try:
        for kind in seq2seq.KINDS:
            model = seq2seq.build_model(kind, seq2seq.Seq2SeqConfig())
            for n in (4, 11):
                batch = data.evaluation_set("reverse", [n], per_length=3)[n]
                predicted, _ = seq2seq.predict(model, batch)
                assert predicted.shape == batch.target.shape == (3, n)
    finally:
        next(reference, None)


# ---------------------------------------------------------------- cell "accuracy-read", panel (a)


@every_seed
def test_short_strings_are_nearly_perfect_for_both_models(seed):
    run = measured(seed)
    assert run["plain_accuracy"]["token"]["4"] >= 0.97 and run["attention_accuracy"]["token"]["4"] >= 0.97


@every_seed
def test_the_plain_model_gets_more_and_more_digits_wrong_fewer_than_half_right_at_16(seed):
    plain = measured(seed)["plain_accuracy"]["token"]
    values = [plain[str(n)] for n in range(4, 17, 2)]
    assert all(later < earlier for earlier, later in zip(values, values[1:])), values
    assert plain["16"] < 0.5


@every_seed
def test_the_attention_model_stays_close_to_the_top(seed):
    run = measured(seed)
    attention, plain = run["attention_accuracy"]["token"], run["plain_accuracy"]["token"]
    assert min(attention.values()) >= 0.85, attention
    assert attention["16"] - plain["16"] >= 0.4                   # "the gap"


@every_seed
def test_whole_strings_fall_faster_and_the_plain_model_gets_almost_none_right_at_16(seed):
    run = measured(seed)
    for accuracy in (run["plain_accuracy"], run["attention_accuracy"]):
        for n, token in accuracy["token"].items():
            assert accuracy["sequence"][n] <= token + 1e-9
    assert run["plain_accuracy"]["sequence"]["16"] <= 0.05
    assert run["attention_accuracy"]["token"]["16"] - run["attention_accuracy"]["sequence"]["16"] > 0.1


def test_whole_string_accuracy_moves_the_most_from_seed_to_seed():
    def spread(kind, column, n):
        values = [measured(seed)[f"{kind}_accuracy"][column][n] for seed in SEEDS]
        return max(values) - min(values)

    lengths = [str(n) for n in range(4, 17, 2)]
    digits = max(spread(kind, "token", n) for kind in ("plain", "attention") for n in lengths)
    strings = max(spread(kind, "sequence", n) for kind in ("plain", "attention") for n in lengths)
    assert strings > digits, (strings, digits)
    assert spread("attention", "sequence", "16") > digits       # "the number to compare"


# ---------------------------------------------------------------- panel (b): where the errors are


@every_seed
def test_with_teacher_forcing_the_plain_model_is_best_first_worst_before_the_end_and_lopsided(seed):
    forced = measured(seed)["by_position"][PLAIN]["teacher forcing"]
    assert len(forced) == 16
    lowest = min(range(16), key=forced.__getitem__)
    assert forced[0] == max(forced), forced                        # "best on the first digits it writes"
    assert 9 <= lowest <= 13, f"lowest at position {lowest + 1}: {forced}"   # "a few positions before the end"
    assert forced[-1] - forced[lowest] >= 0.04, forced             # "a little better again on the last ones"
    assert forced[0] - forced[-1] >= 0.2, forced                   # "lopsided, not a symmetric U"


@every_seed
def test_greedy_decoding_falls_to_one_digit_in_five_and_the_rise_at_the_end_is_small(seed):
    greedy = measured(seed)["by_position"][PLAIN]["greedy"]
    forced = measured(seed)["by_position"][PLAIN]["teacher forcing"]
    assert all(g <= f + 1e-9 for g, f in zip(greedy, forced)), (greedy, forced)
    second_half = greedy[8:]
    assert 0.12 <= min(second_half) and max(second_half) <= 0.3, second_half
    assert 0.15 <= sum(second_half) / 8 <= 0.25, second_half      # "about one digit in five"
    assert greedy[-1] - min(second_half) < 0.1, greedy             # "the rise at the end is small or gone"


@every_seed
def test_the_attention_model_stays_above_the_plain_one_with_errors_at_the_end(seed):
    runs = measured(seed)["by_position"]
    greedy, forced = runs[ATTENTION]["greedy"], runs[ATTENTION]["teacher forcing"]
    assert all(a - p >= 0.05 for a, p in zip(greedy, runs[PLAIN]["greedy"]))      # "above ... at every position"
    assert all(a - p >= 0.05 for a, p in zip(forced, runs[PLAIN]["teacher forcing"]))
    # "near the top (0.85 or more) over the first twelve positions, and above 0.7 at the last ones"
    # (seed 1 on a 32 MiB-L3 EPYC: 0.755 and 0.75 at positions 14 and 15)
    assert min(forced[:12]) >= 0.85 and min(forced) > 0.7, forced
    assert min(range(16), key=greedy.__getitem__) >= 12, greedy                    # "errors gather at the end"
    assert sum(greedy[12:]) / 4 < sum(greedy[:12]) / 12


# ---------------------------------------------------------------- cell "heatmap-read"


@every_seed
def test_most_of_the_weight_is_on_the_mirrored_position_and_its_neighbours(seed):
    summary = measured(seed)["alignment_summary"]
    assert set(summary) == {str(n) for n in range(4, 17, 2)}
    for n, row in summary.items():
        assert row["band weight"] > 0.8, (n, row)                  # "more than four fifths"


@every_seed
def test_the_peak_mostly_sits_one_column_to_the_right_and_hardly_ever_left(seed):
    for n, row in measured(seed)["alignment_summary"].items():
        assert row["right"] > 0.5 and row["right"] > row["on"], (seed, n, row)
        assert row["left"] < 0.1, (seed, n, row)


def test_the_notebook_prints_the_summary_it_keeps(facts):
    printed = solution_run("01").output_text("alignment_summary = {}")
    row = facts["alignment_summary"]["16"]
    assert f"16 digits: on it {row['on']:4.0%}, one to the left {row['left']:4.0%}, one to the right {row['right']:4.0%}" in printed


# ---------------------------------------------------------------- quiz and cell "bridge-timing"


def test_attention_adds_only_a_small_fraction_of_parameters(facts):
    config = seq2seq.Seq2SeqConfig()
    extra = facts["attention_parameters"] - facts["plain_parameters"]
    assert extra == config.d_hidden * config.d_attn + config.d_enc * config.d_attn + config.d_attn  # W_q, W_k, v
    assert extra / facts["attention_parameters"] < 0.1


def test_held_out_batches_have_no_padding_and_training_covers_every_tested_length():
    config = seq2seq.Seq2SeqConfig()
    for n, batch in data.evaluation_set(config.task, range(config.min_len, config.max_len + 1, 2), 5).items():
        assert batch.mask.all() and batch.source.shape[1] == n
        assert config.min_len <= n <= config.max_len


def test_additive_scores_are_much_slower_than_the_dot_product(facts):
    assert within("01: additive scores' time over the dot product's", facts["additive_seconds"] / facts["dot_seconds"],
                  low=5)
