"""Every sentence of lesson 07 that reads a result off a computation, asserted with the lesson's own
numbers (one execution of the solution notebook, shared with the budget test).

Each test names the section whose prose it backs. The trainings are seeded and run on one thread,
and the course model is shipped, so the numbers repeat on this machine; the bounds leave room for
another CPU or torch version. Timings are asserted by ratios far from the measured ones (each
length's time is the fastest of five rounds over all lengths), never by milliseconds.
"""

from __future__ import annotations

import pytest

from tests.notebook_runs import solution_run


@pytest.fixture(scope="module")
def facts():
    return solution_run("07").facts


def _words(text: str) -> list[str]:
    return text.split()


# ------------------------------------------------------------------ The encoder at work: which bank?


def test_the_encoder_tells_the_senses_apart_whether_the_cue_comes_before_or_after(facts):
    # "The encoder gets both kinds right ... whether the telling words come before 'bank' or after it"
    accuracy = facts["sense_accuracy"]
    assert accuracy["cue before 'bank'"] >= 0.95 and accuracy["cue after 'bank'"] >= 0.95


# ------------------------------------------------------------------ An encoder cannot generate


def test_an_encoder_language_model_reads_the_answers_and_fails_without_the_future(facts):
    encoder_whole, encoder_past = facts["lm_losses"]["encoder"]
    decoder_whole, decoder_past = facts["lm_losses"]["decoder"]
    unigram = facts["unigram_entropy"]
    # "The encoder's loss reading the whole window is far below the decoder's"
    assert encoder_whole < 0.25 * decoder_whole
    # "Take the future away ... and its loss is about twice the decoder's"
    assert 1.6 <= encoder_past / decoder_past <= 2.4
    # "(It is still below the unigram entropy ...: from the words before, it picked up a little.)"
    assert encoder_past < unigram
    # "The decoder's two numbers are the same, by construction"
    assert decoder_whole == pytest.approx(decoder_past, abs=1e-4)
    # "so it learnt to predict from the past alone": well below the unigram entropy
    assert decoder_past < 0.6 * unigram


def test_the_encoder_writes_one_word_over_and_over(facts):
    # "The encoder soon writes one word over and over" (the prompt has 5 words, 20 are written)
    written = _words(facts["encoder_text"])[5:]
    assert len(written) == 20 and len(set(written[-10:])) == 1


# ------------------------------------------------------------------ A decoder writes: the course model


def test_the_course_model_is_the_one_the_lesson_describes(facts):
    # "a DecoderOnly with 4 layers of 4 heads, d_model 128, RoPE, pre-norm and tied embeddings"
    config = facts["course_config"]
    assert (config["n_layers"], config["n_heads"], config["d_model"]) == (4, 4, 128)
    assert config["rope_base"] and config["placement"] == "pre" and config["tie_embeddings"] is True


def test_greedy_decoding_repeats_a_sentence(facts):
    # "here it soon repeats a sentence word for word"
    sentences = [s.strip() for s in facts["samples"]["0.0"].split(".")]
    assert any(len(a.split()) >= 4 and a == b for a, b in zip(sentences, sentences[1:]))


def test_higher_temperatures_pick_less_likely_words(facts):
    # "the higher the temperature, the less likely the words it picks: the mean log-probabilities
    # printed above fall with every step up in temperature"
    lp = facts["mean_log_probability"]
    assert lp["0.0"] > lp["0.7"] > lp["1.5"]


# ------------------------------------------------------------------ A decoder cannot look ahead


def test_a_decoder_cannot_look_ahead(facts):
    # "Exactly 0 in the decoder ... In the encoder ... the two vectors of 'bank' differ"
    difference = facts["bank_difference"]
    assert difference["course model (decoder), every layer"] == 0.0
    assert difference["sense classifier (encoder), last layer"] > 0.1


def test_the_senses_of_bank_separate_only_when_the_cue_comes_first(facts):
    probe = facts["probe_accuracy"]
    # "the probe separates them without a mistake"
    assert probe["before"] == 1.0
    # "all 200 vectors are one and the same ... and the probe does no better than a coin"
    assert facts["after_spread"] < 1e-6
    assert probe["after"] == pytest.approx(0.5, abs=0.05)
    # "the probe is right almost every time" on the validation passages
    assert facts["passages_probe"] >= 0.9


def test_the_head_drawn_for_bank_looks_at_the_telling_words_more_than_their_share(facts):
    # printed: "'bank' puts X% of its attention on the words that give the sense away, which are Y%"
    head = facts["cue_head"]
    assert head["share"] > 2 * head["cue_fraction"]


# ------------------------------------------------------------------ A pronoun and its noun


def test_a_head_of_the_first_layer_reads_the_noun_from_was(facts):
    pronoun = facts["pronoun"]
    # "The course model's next word fits the noun in every sentence"
    assert pronoun["sentences"] == 200 and pronoun["fits"] == pronoun["sentences"]
    # "one head of its first layer does the looking: from 'was' it puts almost all of its attention
    # on the noun"
    assert pronoun["layer"] == 0 and pronoun["was_on_noun"] > 0.8
    assert pronoun["was_on_noun"] > 5 * pronoun["evenly"]
    # "From 'it' the same head looks at the noun far less"
    assert pronoun["it_on_noun"] < 0.5 * pronoun["was_on_noun"]


# ------------------------------------------------------------------ Generation with and without the KV cache


def test_the_kv_cache_gives_the_same_tokens_and_a_flat_time_per_token(facts):
    # "The tokens are the same either way"
    assert facts["cache_same_tokens"] is True
    # "after 16 to 1024 tokens of text"
    assert facts["lengths"][0] == 16 and facts["lengths"][-1] == 1024
    growth = facts["growth"]
    # "Without the cache, the time per token grows with the length ...; with the cache it stays
    # about flat" (measured: about 70 times against 1.4 times on a 2-core machine)
    assert growth["without the cache"] > 5.0
    assert growth["with the KV cache"] < 2.5
    assert growth["without the cache"] > 4 * growth["with the KV cache"]
    without, with_cache = facts["step_ms"]["without the cache"], facts["step_ms"]["with the KV cache"]
    assert without[-1] > without[len(without) // 2] > without[0]


def test_the_interactive_figure_draws_in_the_executed_notebook():
    shown = solution_run("07").output_text("plots.generation_view(watch_generation)")
    assert "The course model writes" in shown and "Error" not in shown, shown


# ------------------------------------------------------------------ The encoder-decoder against lesson 01's GRU


def test_both_seq2seq_models_learn_and_the_gru_is_ahead_on_the_longest_strings(facts):
    accuracy = facts["accuracy_by_length"]
    lengths = facts["lengths_01"]
    shortest, longest = str(lengths[0]), str(lengths[-1])
    transformer, gru = accuracy["encoder-decoder transformer"], accuracy["attention GRU (lesson 01)"]
    # "both learn the task, and both are less accurate on the longest strings than on the shortest"
    for model in (transformer, gru):
        assert model[shortest] >= 0.8 and model[longest] < model[shortest]
    # "At this small budget the GRU is ahead, most of all on the longest strings"
    assert gru[longest] > transformer[longest]
    assert gru[longest] - transformer[longest] > gru[shortest] - transformer[shortest]
    # "with less than half the transformer's parameters"
    counts = facts["parameter_counts"]
    assert counts["attention GRU (lesson 01)"] < 0.5 * counts["encoder-decoder transformer"]


def test_the_encoder_decoder_reverses_and_its_cross_attention_reads_the_mirrored_digit(facts):
    # "Every head's bright cells run along the anti-diagonal"
    shares = facts["anti_diagonal"]["shares"]
    assert len(shares) >= 2 and min(shares) > 0.6
    # "change the source ... and what it writes changes with it"
    assert facts["output_changed"] is True and facts["rolled_accuracy"] >= 0.6
