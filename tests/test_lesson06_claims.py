"""Every sentence of lesson 06 that reads a result off a computation, asserted with the lesson's own
numbers (the facts of one execution of the solution notebook, shared with the budget test), and the
empirical ones across seeds: the notebook's own seeds, and for the trainings (one seed in the
notebook, to keep it within its budget) seeds 1 and 2 run here with the notebook's own code."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter

import nbformat
import pytest

from attnlab.lessons import lesson
from autograder import paths
from tests.notebook_runs import solution_run

pytestmark = pytest.mark.timeout(1800)


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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_token_experiment_holds_for_other_seeds(seed):
    # The lesson's own cell, run with another seed: attention survives the shuffle up to rounding, and
    # removing the other tokens changes token 3's output by more than a typical entry of the inputs.
    import torch
    import torch.nn.functional as F

    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson("06").notebook, as_version=4)
    source = _lesson_cell(notebook, "def change_of_token_3(")
    assert source.count("torch.manual_seed(0)") == 1
    namespace = {"torch": torch, "F": F, "feedforward": None}
    exec(source.replace("torch.manual_seed(0)", f"torch.manual_seed({seed})").split("\ntry:")[0], namespace)
    shuffled, alone = namespace["change_of_token_3"](namespace["self_attention"])
    assert shuffled < 1e-5
    assert alone > 1                                    # "more than a typical entry of the inputs (size 1)"


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


def test_what_two_models_chose_for_their_swiglu_width(facts):
    matched = facts["matched_width"]
    # the solution's swiglu_width: the nearest whole width to 2/3 of 4 d_model
    assert matched == {"LLaMA-7B": 10923, "Qwen2.5-3B": 5461}
    assert facts["llama_rounded"] == facts["llama_width"] == 11008          # "rounds up to ... the 11008 it has"
    assert 0 < facts["llama_extra"] < 0.01                                   # "under 1 % more weights"
    # Qwen2.5-3B: "the weights of a GELU block about twice the usual width"
    assert facts["qwen_gelu_equivalent"] == 16512
    assert 3 * facts["hidden"] * facts["intermediate"] == 2 * facts["hidden"] * facts["qwen_gelu_equivalent"]
    assert round(facts["qwen_gelu_equivalent"] / (4 * facts["hidden"]), 1) == 2.0
    assert facts["intermediate"] / facts["hidden"] == 5.375                   # "(5.375 d_model)"


# ------------------------------------------------------------------ normalization


def test_five_fates_through_48_blocks_for_every_seed(facts):
    assert len(facts["STACK_SEEDS"]) >= 3
    rms, factor = facts["rms_after_last_block"], facts["factor_per_block"]
    scaled = "residual, scaled by 1/√48 (GPT-2)"
    for seed in range(len(facts["STACK_SEEDS"])):
        assert rms["plain: FFN(x)"][seed] < 1e-14                                    # "below 1e-14"
        assert 0.47 < factor["plain: FFN(x)"][seed] < 0.52                           # "each block halves it"
        assert rms["residual, no norm: x + FFN(x)"][seed] > 1e4                      # "explodes, past 1e4"
        assert factor["residual, no norm: x + FFN(x)"][seed] == pytest.approx(math.sqrt(1.5), abs=0.02)  # "about 1.22"
        assert 1.15 < rms[scaled][seed] < math.exp(0.25)                            # "stays near 1.2", "less than e^1/4"
        assert 1 < rms["pre-norm: x + FFN(LN(x))"][seed] < 5                         # "grows slowly, to under 5"
        assert rms["post-norm: LN(x + FFN(x))"][seed] == pytest.approx(1, abs=1e-3)  # "RMS 1"
        pre = facts["stream_rms"]["pre-norm: x + FFN(LN(x))"][seed]
        # "in proportion to the square root of the depth": the growth from 12 to 48 blocks is about 2
        assert 1.5 < pre[47] / pre[11] < 2.5
    plain_factors = [f for f in factor["plain: FFN(x)"]]
    assert round(min(plain_factors), 2) == 0.49 and round(max(plain_factors), 2) == 0.50   # "0.49 to 0.50"


def test_the_arithmetic_of_vanishing_and_exploding():
    from statistics import NormalDist

    assert NormalDist().cdf(0) == 0.5                                   # "its slope there is Phi(0) = 1/2"
    assert round(2 ** -48 / 1e-15, 1) == 3.6                            # "2^-48 ≈ 3.6e-15"
    assert round(math.sqrt(1.5), 2) == 1.22 and round(1.5 ** 24 / 1e4, 1) == 1.7   # "1.5^24 ≈ 1.7e4"
    for n in (6, 48, 1000):
        assert (1 + 1 / (2 * n)) ** n < math.exp(0.5)                   # "(1 + 1/2N)^N < e^1/2"
    assert round(math.exp(0.25), 2) == 1.28

    def log_odds(p):
        return math.log(p) - math.log1p(-p)

    # "0.998 and 0.9998 both print as 1.00, yet the second leaves ten times less to the other words";
    # "changes as much between 0.998 and 0.9998 as between 0.5 and 0.91"
    assert f"{0.998:.2f}" == f"{0.9998:.2f}" == "1.00"
    assert (1 - 0.998) / (1 - 0.9998) == pytest.approx(10)
    assert log_odds(0.9998) - log_odds(0.998) == pytest.approx(log_odds(0.91) - log_odds(0.5), abs=0.02)


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


def test_the_last_layer_gradient_against_depth(facts):
    assert facts["GRADIENT_DEPTHS"] == [3, 6, 12, 24] and len(facts["GRADIENT_SEEDS"]) == 8
    mean = facts["last_layer_mean"]
    # "pre-norm's last-layer gradient shrinks (from 0.29 with 3 layers to 0.18 with 24)"
    assert all(a > b for a, b in zip(mean["pre-norm"], mean["pre-norm"][1:]))
    assert round(mean["pre-norm"][0], 2) == 0.28 and round(mean["pre-norm"][-1], 2) == 0.18
    # "post-norm's does not shrink (it even grows a little, from 0.48 to 0.73)"
    assert all(a < b for a, b in zip(mean["post-norm"], mean["post-norm"][1:]))
    assert round(mean["post-norm"][0], 2) == 0.48 and round(mean["post-norm"][-1], 2) == 0.73
    ratios = facts["post_over_pre"]                                    # (seeds, depths)
    assert len(ratios) == 8
    # "1.65 to 1.75 times pre-norm's with 3 layers"; the written answer: "about 1.7 times"
    assert round(min(r[0] for r in ratios), 2) == 1.65 and round(max(r[0] for r in ratios), 2) == 1.75
    assert round(min(r[-1] for r in ratios), 1) == 3.5 and round(max(r[-1] for r in ratios), 1) == 4.5  # "3.5 to 4.5"
    # "the gap widens with depth in every one of the eight seeds"
    assert all(all(a < b for a, b in zip(r, r[1:])) for r in ratios)


def test_the_profile_inside_twelve_layers_is_noisy(facts):
    growth, by_seed = facts["gradient_growth"], facts["growth_by_seed"]
    assert round(growth["post-norm"], 2) == 1.28                       # "layer 12's are 1.28 times layer 1's"
    post = by_seed["post-norm"]
    assert round(min(post), 2) == 0.90 and round(max(post), 2) == 1.55   # "the ratio runs from 0.90 to 1.55"
    assert sum(r < 1 for r in post) == 1                               # "in one of the eight seeds"
    pre = by_seed["pre-norm"]
    assert all(r < 1 for r in pre)                                     # "Pre-norm's fall toward the output in every seed"
    assert round(min(pre), 2) == 0.57 and round(max(pre), 2) == 0.77   # "(0.57 to 0.77)"
    assert 0.6 < growth["pre-norm"] < 0.72                             # "to about two thirds of layer 1's"
    post_mean, pre_mean = facts["mean_gradient"]["post-norm"], facts["mean_gradient"]["pre-norm"]
    assert all(p < q for p, q in zip(pre_mean, post_mean))             # quiz: "post-norm's were the larger, in every layer on average"


def _smoothed(values, window=10):
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]


def test_post_norm_without_warm_up_gets_stuck_and_the_others_train(facts):
    loss, unigram = facts["validation_loss"], facts["unigram_entropy_nats"]
    assert facts["PEAK_LR"] == 5e-3 and facts["STEPS"] == 120 and facts["WARMUP"] == 40
    assert round(loss["post-norm, no warm-up"], 2) == 4.59 and round(unigram, 2) == 4.58
    assert abs(loss["post-norm, no warm-up"] - unigram) < 0.05               # "stays there"
    assert round(loss["post-norm, warm-up 40"], 2) in (2.93, 2.94)           # "trains, to about 2.9 (2.93 or 2.94 ...)"
    assert round(loss["pre-norm, no warm-up"], 2) == 2.12                    # "2.12 without warm-up"
    assert round(loss["pre-norm, warm-up 40"], 2) == 2.27                    # "2.27 with"
    for name in ("pre-norm, no warm-up", "pre-norm, warm-up 40"):
        assert loss[name] < loss["post-norm, warm-up 40"]                    # "ends lower than post-norm with warm-up"


def _lesson_cell(notebook, marker):
    found = [c.source for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"one code cell of lesson 06 contains {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def other_seeds():
    """The four trainings of the lesson with seeds 1 and 2, run by the lesson's own code (its set-up,
    model and training cells, without the seed-0 runs) in a fresh interpreter with the references."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson("06").notebook, as_version=4)
    training = _lesson_cell(notebook, "def train_lm(")
    assert "\nruns = {" in training
    code = "\n".join([
        _lesson_cell(notebook, 'attnlab.start_lesson("06")'),
        "from tqdm.auto import tqdm",
        _lesson_cell(notebook, "class TinyLM("),
        training.split("\nruns = {")[0],
        "import json",
        "found = {}",
        "for seed in (1, 2):",
        "    for placement in ('post', 'pre'):",
        "        for warmup in (0, WARMUP):",
        "            losses, validation = train_lm(placement, warmup, seed=seed)",
        "            found[f'{seed} {placement} {warmup}'] = [losses, validation]",
        "print('@@seeds@@' + json.dumps({'runs': found, 'unigram': unigram_entropy_nats}))",
    ])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_")}
    env.update(ATTNLAB_REFERENCE="all", MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.split("@@seeds@@", 1)[1])
    return found["runs"], found["unigram"]


def test_the_warm_up_story_holds_for_seeds_0_to_2(facts, other_seeds):
    runs, unigram = other_seeds
    assert round(unigram, 2) == round(facts["unigram_entropy_nats"], 2)
    validation = {(0, name): value for name, value in facts["validation_loss"].items()}
    names = {("post", 0): "post-norm, no warm-up", ("post", 40): "post-norm, warm-up 40",
             ("pre", 0): "pre-norm, no warm-up", ("pre", 40): "pre-norm, warm-up 40"}
    for key, (losses, value) in runs.items():
        seed, placement, warmup = key.split()
        validation[int(seed), names[placement, int(warmup)]] = value
    for seed in (0, 1, 2):
        loss = {name: validation[seed, name] for name in names.values()}
        stuck = loss["post-norm, no warm-up"]
        # "post-norm without warm-up ends within 0.3 nats of the unigram entropy and far above the three other runs"
        assert abs(stuck - unigram) < 0.3
        assert all(stuck > value + 1 for name, value in loss.items() if name != "post-norm, no warm-up")
        # "and pre-norm ends below post-norm with warm-up"
        assert max(loss["pre-norm, no warm-up"], loss["pre-norm, warm-up 40"]) < loss["post-norm, warm-up 40"]
    # "how far post-norm gets with a warm-up ... varies more than any other run"
    spread = {name: max(validation[s, name] for s in (0, 1, 2)) - min(validation[s, name] for s in (0, 1, 2))
              for name in names.values()}
    assert spread["post-norm, warm-up 40"] == max(spread.values())
    # "the burst ... is not always there": a seed whose stuck run never jumps 2 nats above the entropy
    bursts = [max(losses[20:60]) > unigram + 2 for key, (losses, _) in runs.items() if key.endswith("post 0")]
    assert not all(bursts)
    # "reaches the unigram entropy within about 15 steps, faster than the runs with a warm-up", in every seed
    for seed in (1, 2):
        curves = {name: _smoothed(runs[f"{seed} {p} {w}"][0]) for (p, w), name in names.items()}
        assert curves["post-norm, no warm-up"][14] < unigram + 0.15
        assert all(curves[name][14] > unigram + 0.2 for name in ("post-norm, warm-up 40", "pre-norm, warm-up 40"))


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
    assert sum(sure) == 18                                              # "On 18 of the 32 prompts ... over 0.95"
    # "such as roles after 'fined the'"
    assert any(s and p["pattern"] == "token is 'the'" and p["examples"][0].endswith("fined the")
               for s, (_, p) in zip(sure, effects))


def test_log_odds_show_what_probabilities_near_1_hide(facts):
    sure, boosting = facts["already_sure"], facts["boosting"]
    log_odds = [{float(s): v for s, v in odds.items()} for odds in facts["log_odds"]]
    # the log-odds agree with the probabilities where both are precise
    for odds, (effect, _) in zip(log_odds, _effects(facts)):
        for scale, p in effect.items():
            if 1e-3 < p < 1 - 1e-3:
                assert odds[scale] == pytest.approx(math.log(p) - math.log1p(-p), abs=1e-3)
    sure_boost = [b for b, s in zip(facts["log_odds_boosting"], sure) if s]
    # "there boosting changed the probability by at most 0.002 ... but the log-odds moved by up to 1.8,
    # and they fell for 10 of the 18"
    assert round(max(abs(b) for b, s in zip(boosting, sure) if s), 3) <= 0.002
    assert round(max(abs(b) for b in sure_boost), 1) == 1.8
    assert facts["sure_boosting_lowered"] == sum(b < 0 for b in sure_boost) == 12
    # "a neuron of layer 1 that fires on surnames and promotes what follows one ('.', 'paid', 'charged', ...).
    # After 'said hello to dora ross', ... from 0.9996 to 0.9976: a fall of 1.8 in log-odds, six times the
    # probability left to the other words"; the quiz: "1 - p went from 0.0004 to 0.0024"
    from attnlab import corpus

    example = facts["sure_example"]
    assert example["context"].endswith("said hello to dora ross")
    assert [round(p, 4) for p in example["probability"]] == [0.9996, 0.9976]
    before, after = example["log_odds"]
    assert round(before - after, 1) == 1.8
    assert round(math.exp(before - after)) == 6
    assert [round(1 - p, 4) for p in example["probability"]] == [0.0004, 0.0024]
    assert example["layer"] == 1 and example["pattern"] == "token is a surname"
    assert example["promoted"][:3] == [".", "paid", "charged"]
    # "what follows one": the promoted words follow a surname in the training passages
    after_a_surname = _follow(set(corpus.SURNAMES))
    assert all(word in after_a_surname for word in example["promoted"][:3])


def test_superposition_in_the_toy_model(facts):
    dense, sparse = list(facts["SPARSITY"])
    assert facts["SPARSITY"][sparse] == 0.95 and facts["TOY_MODELS"] == 4
    stored, angles, biases = facts["toy_stored"], facts["toy_angles"], facts["toy_biases"]
    # "it keeps the two most important features, at right angles, and drops the other three"
    assert stored[dense] == [[True, True, False, False, False]] * 4
    assert all(abs(gap - 90) < 5 for model in angles[dense] for gap in model)
    # "every model stores all five, 72° apart"
    assert stored[sparse] == [[True] * 5] * 4
    assert all(abs(gap - 72) < 5 for model in angles[sparse] for gap in model)
    # "a negative bias (about -0.25)"
    stored_biases = [b for model in biases[sparse] for b in model]
    assert all(-0.3 < b < -0.2 for b in stored_biases)


def test_between_half_and_two_thirds_of_the_neurons_are_not_consistent(facts):
    for count in facts["consistent_counts"]:
        assert 1 / 2 <= 1 - count / facts["n_neurons"] <= 2 / 3


def test_geva_et_al_is_cited_as_2021_everywhere():
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson("06").notebook, as_version=4)
    text = "\n".join(c.source for c in notebook.cells)
    assert "Geva et al. (2021)" in text and "Geva et al., 2021" in text
    assert "Geva et al. (2020)" not in text and "Geva et al., 2020" not in text
    assert "R. Schuster, J. Berant, O. Levy (2021)" in text


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
