"""Every sentence of lesson 06 that reads a result off a computation, asserted with the lesson's own
numbers (the facts of one execution of the solution notebook, shared with the budget test)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.notebook_runs import solution_run

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def facts():
    return solution_run("06").facts


# ------------------------------------------------------------------ one token at a time


def test_the_feed_forward_block_ignores_the_other_tokens(facts):
    # "the differences are 0, or below 1e-6 (float32 rounding ...)"
    assert facts["ffn_shuffled"] < 1e-6 and facts["ffn_alone"] < 1e-6


def test_attention_output_changes_when_the_others_are_removed_but_not_when_shuffled(facts):
    assert facts["attention_shuffled"] < 1e-5                 # "survives the shuffle too, up to rounding"
    assert round(facts["attention_alone"], 1) == 3.6          # "changes it by 3.6 in its largest entry"


# ------------------------------------------------------------------ where the parameters are


def test_the_counts_of_the_2017_base_model(facts):
    assert facts["base_attention"] == 4 * 512 * 512 == 1_048_576
    assert facts["base_ffn"] == 2 * 512 * 2048 == 2_097_152
    share = facts["ffn_share"]
    assert share["2017 base: one encoder layer"] == pytest.approx(2 / 3)      # "exact for one encoder layer"
    assert share["2017 base: one decoder layer"] == pytest.approx(1 / 2)      # "half and half"
    assert round(100 * share["2017 base: whole model"]) == 40                 # "40 %"
    assert round(100 * facts["base_ffn_share_without_embeddings"]) == 57      # "57 % without the embeddings"
    assert round(facts["base_embeddings"] / 1e6) == 19                        # "about 19 million"
    assert round(facts["base_total"] / 1e6) == 63                             # "of its 63 million counted here"
    assert facts["base_left_out"] / facts["base_total"] < 0.005               # "biases and norms ... under 0.5 %"


def test_the_counts_of_qwen(facts):
    share = facts["ffn_share"]
    assert round(100 * share["Qwen2.5-3B: one layer"]) == 88                  # "a layer is 88 % feed-forward"
    assert round(100 * share["Qwen2.5-3B: whole model"]) == 79                # "the whole model 79 %"
    assert round(facts["qwen_embeddings"] / 1e6) == 311                       # "311 million embedding weights"
    assert round(facts["qwen_total"] / 1e9, 2) == 3.09                        # "3.09 billion parameters"
    assert round(facts["qwen_non_embedding"] / 1e9, 2) == 2.77                # "2.77 billion without"
    # "grouped-query attention shrinks the key and value maps to an eighth"
    assert facts["heads"] // facts["kv_heads"] == 8
    assert facts["intermediate"] / facts["hidden"] == 5.375                   # "Qwen2.5-3B uses 5.375 d_model"


def test_the_learner_feed_forward_gives_the_same_counts(facts):
    assert facts["yours"] == [facts["base_ffn"], facts["qwen_ffn"]]


# ------------------------------------------------------------------ normalization


def test_four_fates_through_48_blocks(facts):
    rms = facts["rms_after_last_block"]
    assert rms["plain: FFN(x)"] < 1e-14                          # "falls below 1e-14"
    assert rms["residual, no norm: x + FFN(x)"] > 1e4            # "explodes, passing 1e4"
    assert 1 < rms["pre-norm: x + FFN(LN(x))"] < 5               # "grows slowly, to under 5"
    assert rms["post-norm: LN(x + FFN(x))"] == pytest.approx(1, abs=1e-3)   # "RMS 1"
    pre = facts["stream_rms"]["pre-norm: x + FFN(LN(x))"]
    # "in proportion to the square root of the depth": the growth from 12 to 48 blocks is about 2
    assert 1.5 < pre[47] / pre[11] < 2.5


def test_what_each_norm_removes(facts):
    stats = facts["norm_statistics"]
    assert stats["input"]["mean"] == pytest.approx(3, abs=0.05) and stats["input"]["std"] == pytest.approx(2, abs=0.05)
    assert abs(stats["LayerNorm"]["mean"]) < 1e-3 and stats["LayerNorm"]["rms"] == pytest.approx(1, abs=1e-3)
    assert stats["RMSNorm"]["rms"] == pytest.approx(1, abs=1e-3)
    assert round(stats["RMSNorm"]["mean"], 2) == 0.83                  # "its mean stays at about 0.83"
    assert round(stats["input"]["rms"], 1) == 3.6                      # "sqrt(3² + 2²) ≈ 3.6", the inputs' RMS
    assert stats["RMSNorm"]["mean"] == pytest.approx(3 / stats["input"]["rms"], abs=0.01)


def test_the_precautions_of_the_norm_exercises():
    import torch

    # "the square of 300 is already larger than the largest float16 number, 65504"
    assert torch.finfo(torch.float16).max == 65504
    assert torch.isinf(torch.tensor(300.0, dtype=torch.float16) ** 2)
    # limits: "x.var(-1) divides by d - 1; LayerNorm divides by d. For d = 8 the difference is 7 %"
    x = torch.randn(1000, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    centred = x - x.mean(-1, keepdim=True)
    right = centred / torch.sqrt(x.var(-1, keepdim=True, correction=0) + 1e-5)
    wrong = centred / torch.sqrt(x.var(-1, keepdim=True) + 1e-5)
    assert round(100 * ((right / wrong).mean().item() - 1)) == 7


# ------------------------------------------------------------------ pre-norm against post-norm


def test_post_norm_gradients_grow_toward_the_output_and_pre_norm_ones_do_not(facts):
    growth, by_seed = facts["gradient_growth"], facts["growth_by_seed"]
    assert round(growth["post-norm"], 1) == 1.3              # "layer 12's are about 1.3 times layer 1's"
    assert 0.6 < growth["pre-norm"] < 0.72                   # "fall ... to about two thirds of layer 1's"
    post, pre = facts["mean_gradient"]["post-norm"], facts["mean_gradient"]["pre-norm"]
    assert all(p < q for p, q in zip(pre, post))             # "Pre-norm's are smaller in every layer"
    assert len(by_seed["post-norm"]) == len(by_seed["pre-norm"]) == 8
    assert min(by_seed["post-norm"]) > max(by_seed["pre-norm"])  # "post-norm's lowest ratio is above pre-norm's highest"


def _smoothed(values, window=10):
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]


def test_post_norm_without_warm_up_gets_stuck_and_the_others_train(facts):
    loss, unigram = facts["validation_loss"], facts["unigram_entropy_nats"]
    assert facts["PEAK_LR"] == 5e-3 and facts["STEPS"] == 120 and facts["WARMUP"] == 40
    assert round(loss["post-norm, no warm-up"], 2) == 4.59 and round(unigram, 2) == 4.58
    assert abs(loss["post-norm, no warm-up"] - unigram) < 0.05               # "stays there"
    assert round(loss["post-norm, warm-up 40"], 2) == 2.94                   # "trains, to 2.94"
    assert round(loss["pre-norm, no warm-up"], 2) == 2.12                    # "2.12 without warm-up"
    assert round(loss["pre-norm, warm-up 40"], 2) == 2.27                    # "2.27 with"
    for name in ("pre-norm, no warm-up", "pre-norm, warm-up 40"):
        assert loss[name] < loss["post-norm, warm-up 40"]                    # "ends lower than post-norm with warm-up"


def test_the_training_curves_look_as_described(facts):
    unigram = facts["unigram_entropy_nats"]
    curves = {name: _smoothed(losses) for name, losses in facts["training_losses"].items()}
    stuck = curves["post-norm, no warm-up"]
    # "reaches the unigram entropy within about 15 steps, faster than the runs with a warm-up"
    assert stuck[14] < unigram + 0.15
    assert all(curves[name][14] > unigram + 0.2 for name in ("post-norm, warm-up 40", "pre-norm, warm-up 40"))
    # "apart from a burst of instability around step 32 (the bump in the curve), its loss stays there"
    raw = facts["training_losses"]["post-norm, no warm-up"]
    burst = max(range(20, 60), key=lambda i: raw[i])
    assert raw[burst] > unigram + 2 and 30 <= burst + 1 <= 34
    assert max(stuck[20:60]) > unigram + 0.5
    assert all(abs(value - unigram) < 0.15 for value in stuck[50:])
    assert min(stuck[15:]) > unigram - 0.05                                  # "it never gets further"


# ------------------------------------------------------------------ the course model: key-value memories


def test_the_course_model_is_the_one_described(facts):
    config = facts["config"]
    # "4 layers, d_model = 128, a GELU feed-forward block of 512 neurons per layer, pre-norm, rotary positions,
    # trained for 1600 steps on windows of 128 words"
    assert (config["n_layers"], config["d_model"], config["d_ff"]) == (4, 128, 512)
    assert config["activation"] == "gelu" and config["placement"] == "pre" and config["norm"] == "layer"
    assert config["rope_base"] > 0 and facts["course_steps"] == 1600 and config["context"] == 128
    # "cut into 289 windows of 128 words (36,992 positions)"
    assert len(facts["inputs"]) == 289 and all(len(window) == 128 for window in facts["inputs"])
    assert sum(map(len, facts["inputs"])) == 36_992


def test_a_third_to_a_half_of_the_neurons_are_consistent(facts):
    n = facts["n_neurons"]
    assert facts["SHARE"] == 0.9 and facts["K_CONTEXTS"] == 20      # "at least 18 of its 20 top contexts"
    for count in facts["consistent_counts"]:
        assert 1 / 3 <= count / n <= 1 / 2                           # "between a third and a half"
    # "the same counts as the model's own measurements"
    assert facts["consistent_counts"] == facts["measured_consistent"]


def test_what_the_consistent_neurons_share(facts):
    kinds = facts["pattern_kinds"]
    assert sum(kinds.values()) == sum(facts["consistent_counts"]) == 870
    assert kinds["its word"] == 457 and kinds["its word's category"] == 315        # "457 ... or its category (315)"
    assert kinds["the word before"] + kinds["the category of the word before"] == 98   # "rarely ... (98)"


def test_values_promote_the_words_that_follow_their_keys_contexts(facts):
    agreement, baseline = facts["agreement_mean"], facts["agreement_shuffled"]
    assert round(100 * min(agreement)) == 44 and round(100 * max(agreement)) == 70   # "between 44 % and 70 %"
    assert all(b < 0.1 for b in baseline)                                            # "under a tenth"


def _follow(words_before):
    """The words that follow any of ``words_before`` in the course's training passages."""
    from attnlab import corpus

    stream = corpus.token_stream(corpus.splits()["train"]).tolist()
    vocab = corpus.TOKENIZER.vocab
    return Counter(vocab[b] for a, b in zip(stream, stream[1:]) if vocab[a] in words_before)


def test_the_showcase_has_the_neurons_the_text_describes(facts):
    from attnlab import corpus

    showcase = facts["showcase_summary"]
    assert all(p["share"] >= 0.9 for p in showcase)
    the = [p for p in showcase if p["pattern"] == "token is 'the'"]

    def shown(words, ending):
        return any(len(set(p["promoted"]) & set(words)) >= 4 and p["examples"][0].endswith(ending) for p in the)

    # "places after 'in the', colours after 'found the', roles after 'fined the'"
    assert shown(corpus.PLACES, " in the")
    assert shown(corpus.COLORS, " found the")
    assert shown(corpus.ROLES, " fined the")

    # "Neurons that fire on a role ('the tailor') promote the verbs that follow a role in the corpus
    # ('visited', 'thanked', 'fined')"
    roles = [p for p in showcase if p["pattern"] == "token is a role"]
    assert any(p["examples"][0].endswith("the tailor") for p in roles)
    after_a_role = set(_follow(set(corpus.ROLES))) - {"."}
    assert roles and all(len(set(p["promoted"]) & after_a_role) >= 6 for p in roles)
    assert any({"visited", "thanked", "fined"} <= set(p["promoted"]) for p in roles)

    # "neurons that fire on a surname promote what a person does next ('said', 'found', 'went')"
    surnames = [p for p in showcase if p["pattern"] == "token is a surname"]
    after_a_surname = set(_follow(set(corpus.SURNAMES))) - {"."}
    assert surnames and all(len(set(p["promoted"]) & after_a_surname) >= 4 for p in surnames)
    assert any({"said", "found", "went"} <= set(p["promoted"]) for p in surnames)


def _effects(facts):
    return [({float(scale): value for scale, value in effect.items()}, p) for effect, p in facts["effects"]]


def test_silencing_and_boosting_the_neuron_shown(facts):
    p = {float(scale): value for scale, value in facts["probability_of_promoted"].items()}
    assert [round(p[s], 2) for s in (0.0, 1.0, 3.0, 6.0)] == [0.43, 0.45, 0.49, 0.56]   # "from 0.45 to 0.43 ..."
    # the neuron shown is the one whose promoted words move most between x 0 and x 6
    assert p[6.0] - p[0.0] == pytest.approx(max(e[6.0] - e[0.0] for e, _ in _effects(facts)))


def test_the_32_neurons_tried_tell_the_same_story(facts):
    effects, silencing, boosting = _effects(facts), facts["silencing"], facts["boosting"]
    assert len(effects) == len(silencing) == 32
    assert sum(c < 0 for c in silencing) == 26                          # "lowered ... for 26 of the 32"
    assert round(sum(silencing) / 32, 3) == -0.003                      # "by 0.003 on average"
    assert round(min(silencing), 2) == -0.02                            # "and by 0.02 at most"
    assert max(silencing) < 1e-3                                        # quiz: "never raised ... beyond rounding"
    assert round(sum(boosting) / 32, 3) == 0.017                        # "raised them by 0.017 on average"
    sure = facts["already_sure"]
    assert sum(sure) == 18                                              # "18 of the 32 ... over 0.95"
    assert all(abs(b) < 0.005 for b, s in zip(boosting, sure) if s)     # "and not at all where ... already sure"
    # "such as roles after 'fined the'"
    assert any(s and p["pattern"] == "token is 'the'" and p["examples"][0].endswith("fined the")
               for s, (_, p) in zip(sure, effects))


def test_the_quiz_colour_neuron_barely_moves(facts):
    # quiz: a neuron promoting colours, on a prompt ending in "found the", where the model gives them 0.999
    from attnlab import corpus

    colour = [(p["layer"], p["neuron"]) for p in facts["showcase_summary"]
              if len(set(p["promoted"]) & set(corpus.COLORS)) >= 4 and p["examples"][0].endswith("found the")]
    effects = {(p["layer"], p["neuron"]): e for e, p in _effects(facts)}
    assert colour and all(neuron in effects for neuron in colour)
    for neuron in colour:
        e = effects[neuron]
        assert round(e[1.0], 3) == 0.999 and abs(e[0.0] - e[1.0]) < 0.002


# ------------------------------------------------------------------ the course model: the residual stream


def test_the_stream_grows_and_later_updates_are_edits(facts):
    stream, attention = facts["stream_norm"], facts["attention_update"]
    middle, ffn = facts["stream_after_attention"], facts["ffn_update"]
    final = facts["final_stream_norm"]
    assert all(a < b for a, b in zip(stream + [final], stream[1:] + [final]))   # "grows from layer to layer"
    assert round(stream[0], 1) == 1.2 and round(final) == 64                    # "from 1.2 ... to 64"
    for layer in range(1, len(stream)):                       # "after the first layer every update is shorter"
        assert attention[layer] < stream[layer] and ffn[layer] < middle[layer]
    ratios = [a / s for a, s in zip(attention, stream)]
    assert all(a > b for a, b in zip(ratios[1:], ratios[2:]))                  # "Attention's edits shrink"
    assert round(ratios[1], 2) == 0.43 and round(ratios[3], 2) == 0.21         # "from 0.43 ... to 0.21"
    ffn_ratios = [f / m for f, m in zip(ffn, middle)]
    assert round(ffn_ratios[3], 2) == 0.68                                     # "0.68 of the stream it joins"
    assert ffn_ratios[3] == max(ratios[1:] + ffn_ratios[1:])                   # "the largest edit after the first layer"
    # "The first layer is the exception": both its updates are longer than the stream they join
    assert attention[0] > stream[0] and ffn[0] > middle[0]
    assert round(facts["first_ffn_vs_embedding"]) == 18                        # "18 times as long"
    assert round(stream[1], 1) == 22.7 and round(ffn[0], 1) == 22.0            # "(22.7) ... (22.0)"


def test_the_interactive_figure_starts_at_the_intervention_neuron(facts):
    assert facts["start_label"].startswith(f"layer {facts['chosen']['layer']}, neuron {facts['chosen']['neuron']}:")
