"""Every sentence of lesson 04 that reads a result off a computation, asserted with the lesson's own
numbers (the facts of one execution of the solution notebook, shared with the budget test).

The two-facts experiment runs three seeds in the lesson, and its sentences are asserted for each.
The course-model numbers are deterministic (fixed weights, fixed validation windows, one thread),
except the fine-tunes of exercise 6, which the lesson runs with seed 0 and ``other_seeds`` runs
again, with the lesson's own code, with seeds 1 and 2. Timings are CPU time of one thread
(``bench.time_calls(clock="thread")``), the least of several runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest

from attnlab.lessons import lesson as find_lesson
from autograder import paths
from tests.notebook_runs import solution_run
from tests.test_course_quizzes import lesson_quizzes
from tests.timed_claims import within

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def facts():
    return solution_run("04").facts


# ------------------------------------------------------------------ 8 heads of 64 make 512


def test_splitting_into_heads_costs_no_parameters_and_no_flops(facts):
    assert facts["base_parameters"] == 4 * 512 * 512 == 1_048_576
    assert 8 * facts["per_head_parameters"] + 512 * 512 == facts["base_parameters"]
    assert facts["flops_8_heads"] == facts["flops_1_head"] > 0


def test_qwen_groups_of_eight(facts):
    assert facts["qwen_head_dim"] == 128 and facts["qwen_group"] == 8
    assert facts["qwen_kv_projection_mha"] == 8 * facts["qwen_kv_projection"] == 2048 * 2048


# ------------------------------------------------------------------ one head against several


def test_same_parameters_for_every_head_count(facts):
    assert len(set(facts["two_facts_parameters"].values())) == 1
    assert sorted(facts["two_facts_parameters"]) == ["1", "2", "4"]
    assert facts["SEEDS"] == [0, 1, 2] and facts["TRAIN_STEPS"] == {"1": 1200, "2": 150, "4": 150}


def test_several_heads_learn_at_once_in_every_seed(facts):
    for heads in ("2", "4"):                            # "both facts right on 99% ... by step 100 (four heads too)"
        assert all(step is not None and step <= 100 for step in facts["several_heads_all_right"][heads])
    for tops in facts["two_heads_top_weight"].values():  # "each head with almost all of its weight on one source"
        assert sorted(distance for distance, _ in tops.values()) == [1, 3]
        assert all(weight > 0.95 for _, weight in tops.values())


def test_one_head_is_stuck_then_learns_to_decode_the_blend_in_every_seed(facts):
    for accuracy in facts["one_head_at_plateau"].values():        # after 300 steps
        assert accuracy["first"] > 0.95                           # "the first fact right almost everywhere"
        assert 0.12 < accuracy["both"] < 0.25                     # "both facts on only about one position in five"
    for one, three in facts["one_head_plateau_weights"].values():
        assert one > 0.5 and three > 0.3 and one + three > 0.9    # "more than half ... nearly all the rest"
    half = facts["one_head_half"]
    assert all(step is not None for step in half)                 # every seed climbs
    assert max(half) - min(half) >= 300                           # "changes a lot from seed to seed"
    assert min(half) >= 5 * 100                                   # "many times more updates" than step 100
    assert all(0.6 < value < 0.97 for value in facts["one_head_final"])   # "most positions, though not yet all"
    for one, three in facts["one_head_final_weights"].values():  # "still split about evenly ... at the end"
        assert 0.4 < one < 0.6 and 0.4 < three < 0.6
        assert abs(one - three) > 0.03                            # "the two weights are not equal"


def test_the_stuck_head_hedges_and_leans_to_the_wrong_token(facts):
    p_first, p_second = facts["blend_probabilities"]["1"]        # seed 0, at the example position
    assert p_first > p_second > 0.1
    for name, (on_first, on_right, answers_first) in facts["second_fact_split"].items():
        if name.startswith("1 head"):                             # every seed, after 300 steps
            assert on_first + on_right > 0.5                      # "spreads its probability over the two tokens"
            assert on_first > on_right                            # "leans to the wrong one"
            assert answers_first > 0.5                            # "picks it ... at most positions"
    _, sure, _ = facts["second_fact_split"]["2 heads, seed 0"]
    assert sure > 0.95                                            # "sure of the right one"


# ------------------------------------------------------------------ the KV cache of Qwen2.5-3B


def test_qwen_cache_sizes(facts):
    assert facts["qwen_bytes_per_token"] == 36 * 1024          # "36 KiB of cache per token"
    gqa, mha = facts["qwen_cache_gib"].values()
    assert [round(v, 3) for v in gqa] == [0.141, 1.125, 4.5]   # 4k, 32k, 128k
    assert [round(v, 3) for v in mha] == [1.125, 9.0, 36.0]
    weights = facts["qwen_weights_gib"]
    assert round(weights, 1) == 5.8
    assert gqa[1] < weights / 5                                # "less than a fifth of its weights"
    assert mha[1] > weights                                    # "more than the weights themselves"


# ------------------------------------------------------------------ the course model's heads


def markdown() -> str:
    """The prose of the solution notebook, every markdown cell joined."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / find_lesson("04").notebook, as_version=4)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown").replace("\n", " ")


def head(pair) -> tuple[int, int]:
    return tuple(pair)


def test_the_course_model_is_the_one_described(facts):
    config = facts["config"]
    assert (facts["n_layers"], facts["n_heads"], config["d_model"], config["context"]) == (4, 4, 128, 128)
    assert len(facts["inputs"]) == 289 and len(facts["inputs"][0]) == config["context"]


def test_measured_heads(facts):
    best, even = facts["best_head"], facts["even_score"]
    previous = best["previous_token"]
    assert (previous["layer"], previous["head"]) == (1, 1)
    assert round(previous["score"], 2) == 0.40 and previous["times_even"] > 11      # "0.40 ... more than 11 times"
    assert [head(h) for h in facts["previous_heads"]] == [(1, 1), (1, 0)]
    assert round(facts["head_score"]["previous_token"][1][0], 2) == 0.32             # "head 0 ... puts 0.32"
    induction = facts["head_score"]["induction"]
    assert sorted(head(h) for h in facts["induction_heads"]) == [(2, 0), (2, 3)]      # "heads 0 and 3" of layer 2
    scores = sorted((v for row in induction for v in row), reverse=True)
    assert all(0.22 < induction[2][h] < 0.28 for h in (0, 3))                         # "about a quarter (0.25)"
    assert all(9.5 < induction[2][h] / even["induction"] < 11.5 for h in (0, 3))      # "ten times"
    assert scores[2] < scores[1] / 2                                                  # "no other head reaches half"
    topic = best["topic"]
    assert (topic["layer"], topic["head"]) == (2, 2)
    assert 0.35 < topic["score"] < 0.45 and topic["times_even"] > 4                   # "about 0.4 ... more than 4 times"
    assert best["duplicate_token"]["score"] < 0.1                                     # "less than 0.1"


def test_the_list_passage_shows_a_list_written_and_read_back(facts):
    words = facts["sentence_words"]
    assert "wrote" in words and "read" in words and len(words) <= 32
    first, second = [i for i, w in enumerate(words) if w == ":"]
    n = words.index(".", first) - first - 1
    assert n >= 4 and words[first + 1:first + 1 + n] == words[second + 1:second + 1 + n]


# ------------------------------------------------------------------ pruning


def test_importances(facts):
    ablation, gradient = facts["ablation_importance"], facts["gradient_importance"]
    assert 0.09 < min(ablation[0]) and max(ablation[0]) < 0.25                  # "0.1 to 0.24 nats"
    assert 0.18 < ablation[1][3] < 0.23                                           # "head 3 of layer 1 (+0.21)"
    others = [ablation[l][h] for l in range(1, 4) for h in range(4) if (l, h) != (1, 3)]
    assert max(others) < 0.07                                                     # "no other head more than 0.07"
    flat = sorted(((v, (l, h)) for l, row in enumerate(gradient) for h, v in enumerate(row)), reverse=True)
    gradient_rank = {lh: rank for rank, (_, lh) in enumerate(flat)}
    assert all(gradient_rank[(0, h)] < 6 for h in range(4))                      # layer 0 "among the most important"
    assert gradient_rank[(1, 3)] > gradient_rank[(0, 2)]                          # "which the gradient ranks lower"
    assert 0.6 < facts["importance_rank_agreement"] < 0.9                         # "mostly agree"


def test_michel_normalisation_demotes_layer_0_and_hurts_here(facts):
    norms = facts["layer_norms"]
    assert norms[0] > 2 * max(norms[1:])                                          # "more than twice any other layer's"
    michel = "least important first (gradient, per layer: Michel et al.)"
    raw = "least important first (gradient, not normalised)"
    normalised_order = [head(h) for h in facts["orders"][michel]]
    raw_order = [head(h) for h in facts["orders"][raw]]
    assert (normalised_order.index((0, 2)), normalised_order.index((0, 1))) == (4, 5)   # "the 5th and 6th"
    assert (raw_order.index((0, 2)), raw_order.index((0, 1))) == (11, 13)              # "12th and 14th"
    six = facts["removed_counts"].index(6)
    assert round(facts["prune_losses"][michel][six], 2) == 1.70                  # "1.70 instead of 1.45"
    assert round(facts["prune_losses"][raw][six], 2) == 1.45
    assert normalised_order[:2] == [(3, 2), (3, 3)]                              # quiz: "heads 2 and 3 of the last layer first"
    assert list(facts["prune_losses"]).index(michel) == 1 and list(facts["prune_losses"]).index(raw) == 2  # orange, green


def test_pruning_curve(facts):
    full, least_first = facts["full_loss"], facts["least_first"]
    assert facts["heads_removable"] == 4                                          # "4 of the 16 (25%) ... within 5%"
    assert least_first[3] > 1.05 * full                                           # "then it climbs"
    assert 1.15 < facts["loss_half_pruned"] / full < 1.25                         # "about a fifth higher"
    assert 2.6 < facts["loss_all_pruned"] / full < 3.0                            # "almost three times"
    most_first = facts["prune_losses"]["most important first"]
    assert most_first[1] > 1.3 * full                                             # "jumps at once"


# ------------------------------------------------------------------ the induction circuit


def test_masking_the_circuit_cuts_copying_and_a_control_does_not(facts):
    copied = facts["copied"]
    assert facts["copied_all"] > 0.97                                             # "almost every word"
    assert 0.1 < facts["copied_without_induction"] < 0.2                          # "about one word in seven"
    assert 0.55 < facts["copied_without_previous"] < 0.75                         # "about two in three"
    assert abs(facts["copied_without_least"] - facts["copied_all"]) < 0.03        # control: "changes nothing"
    assert sorted(head(h) for h in facts["least_heads"]) == [(3, 2), (3, 3)]
    l2h3, l2h0 = copied["induction head L2H3"], copied["induction head L2H0"]
    assert 0.25 < facts["copied_all"] - l2h3 < 0.4                                # "about a third of the copies"
    assert facts["copied_all"] - l2h0 < 0.06                                      # "only a few"
    assert head(facts["key_induction_head"]) == (2, 3)
    assert min(facts["example_weight_on_next_item"]) > 0.5                        # "most of its weight on the next"


def test_the_induction_heads_depend_on_the_previous_token_heads_in_part(facts):
    for before, after in facts["induction_score_drop"].values():
        assert 0.22 < before < 0.28 and 0.13 < after < 0.155                       # "from about 0.25 to about 0.14"
    assert all(5.5 < times < 6.5 for times in facts["induction_after_times_even"].values())   # "about 6 times"
    assert round(facts["copied_all"], 2) == 0.99 and round(facts["copied_without_previous"], 2) == 0.64
    assert round(facts["head_score"]["previous_token"][1][3], 2) == 0.19          # "head 3 of layer 1 scores 0.19"


def test_pruning_by_the_loss_removes_the_copying(facts):
    counts, copied = facts["removed_counts"], facts["pruned_copied"]
    assert all(c > 0.97 for c in copied[:counts.index(4) + 1])                    # "the first 4 leave copying intact"
    assert copied[counts.index(8)] < 0.5                                          # "fewer than half"
    order = [head(h) for h in facts["orders"]["least important first (masking one head)"]]
    assert {(1, 0), (1, 1)} <= set(order[:8])                                    # "both ... among its first 8"
    assert max(facts["ablation_importance"][1][h] for h in (0, 1)) < 0.03         # "at most 0.03 nats"


def test_in_context_learning_score(facts):
    score = facts["in_context_score"]
    full = score["all heads"]
    assert round(full, 2) == -0.40
    without = score["both induction heads (L2H0 and L2H3)"]
    assert round(without, 2) == -0.28 and 0.25 < (without - full) / full * -1 < 0.4   # "about a third"
    assert abs(score["the 2 least important heads (L3H3 and L3H2)"] - full) < 0.03    # "almost nothing"


# ------------------------------------------------------------------ the cost per token


def test_decoding_cost_grows_with_the_context_and_what_a_step_writes(facts):
    megabytes = facts["decode_mb"]
    mha, gqa, mqa = "MHA, 4 key/value heads", "GQA, 2 key/value heads", "MQA, 1 key/value head"
    assert megabytes[mha][-1] == 2 * megabytes[gqa][-1] == 4 * megabytes[mqa][-1]       # "2 times ... 4 times"
    assert round(megabytes[mha][-1] / megabytes[mha][0]) == 64                          # "64 times"
    assert all(growth > 2 for growth in facts["decode_growth"].values())                # "several times over"
    assert facts["bytes_spread"] == 4
    # "(b) does get faster with them, but by less than the bytes": faster by more than the noise of
    # a measurement (CI measured 1.49, this machine about 2), less than the 4 times fewer bytes
    assert within("04: grouped attention's decode speedup (b)", facts["grouped_speedup"], 1.2, 4)
    # "(a) gains little or nothing ... at most about 1.3 times"
    assert within("04: whole-model decode time spread (a)", facts["time_spread"]["whole model (a)"], high=1.45)
    written = {label: round(values[-1]) for label, values in facts["decode_copied_mb"].items()}
    assert written == {mha: 67, gqa: 101, mqa: 84}     # "67 MB ... 101 MB ... 84 MB"


def test_prefix_caching_gives_the_same_logits_faster(facts):
    assert facts["prefix_logits_max_difference"] < 1e-4                   # "up to float32 rounding"
    assert round(facts["prefix_token_ratio"], 1) == 2.9                   # "2.9 times fewer tokens"
    # "saves time ... less than 2.9"
    assert within("04: prefix caching speedup", facts["prefix_speedup"], 1.3, facts["prefix_token_ratio"])


# ------------------------------------------------------------------ what the prose and the quiz quote


def test_the_prose_quotes_the_computed_numbers(facts):
    text = markdown()
    best = facts["best_head"]
    assert f"puts {best['previous_token']['score']:.2f} of its weight" in text
    assert f"puts {facts['head_score']['previous_token'][1][0]:.2f}" in text
    assert f"−{-facts['in_context_score']['all heads']:.2f} nats with every" in text
    assert f"(−{-facts['in_context_score']['both induction heads (L2H0 and L2H3)']:.2f})" in text
    assert f"{facts['heads_removable']} of the 16 ({facts['heads_removable'] / 16:.0%})" in text
    assert f"{facts['prefix_token_ratio']:.1f} times fewer tokens" in text
    assert "1.125 GiB instead of 9 GiB at 32k" in text                       # the written answer
    up, full = facts["uptraining"], facts["uptrain_full_loss"]
    assert f"rises from {full:.2f} to {up['2']['converted']:.2f} nats, with 1 to {up['1']['converted']:.2f}" in text
    recovered = facts["uptrain_recovered"]
    assert f"take back {recovered['2']:.0%} and {recovered['1']:.0%} of those rises" in text
    rise = {g: up[g]["fine-tuned"] - full for g in up}
    assert f"leaving the converted models {rise['2']:.2f}\nand {rise['1']:.2f} nats above".replace("\n", " ") in text
    assert (f"raised its loss by {up['2']['converted'] - full:.2f} nats, and 30 steps of fine-tuning brought that "
            f"down to {rise['2']:.2f}; with 1 key/value head {rise['1']:.2f} remained") in text   # the written answer
    assert facts["UPTRAIN_STEPS"] == 30 and facts["chosen_kv_heads"] == 2


def test_the_quiz_states_the_lessons_numbers(facts):
    (quiz,) = lesson_quizzes(find_lesson("04"))
    texts = {q.prompt: " ".join([q.prompt] + [f"{o.text} {o.explain}" for o in q.options]) for q in quiz.questions}

    def about(start):
        (text,) = [t for p, t in texts.items() if p.startswith(start)]
        return text

    heads = about("On the two-facts task")
    half = facts["one_head_half"]
    assert f"after {min(half)} to {max(half):,} steps" in heads and "by step 1,200" in heads
    assert all(step <= 100 for steps in facts["several_heads_all_right"].values() for step in steps)
    circuit = about("Masking the course model's two previous-token")
    drops = [after for _, after in facts["induction_score_drop"].values()]
    assert f"from {facts['copied_all']:.2f} to {facts['copied_without_previous']:.2f}" in circuit
    assert "from 0.25 to 0.14, still 6 times" in circuit and all(0.13 < after < 0.155 for after in drops)
    assert "left the copying unchanged" in circuit
    assert abs(facts["copied_without_least"] - facts["copied_all"]) < 0.03
    cache = about("Qwen2.5-3B's KV cache")
    gqa, mha = facts["qwen_cache_gib"].values()
    assert "about 1.1 GiB" in cache and round(gqa[1], 1) == 1.1 and round(mha[1]) == 9
    assert "0.14 GiB" in cache and round(gqa[0], 2) == 0.14
    assert "5.8 GiB of weights" in cache and round(facts["qwen_weights_gib"], 1) == 5.8
    uptrain = about("Mean-pooling the course model's key/value heads")
    up, full = facts["uptraining"]["2"], facts["uptrain_full_loss"]
    assert round(up["converted"] - full, 1) == 0.8 and f"left {up['fine-tuned'] - full:.2f}" in uptrain
    assert f"{up['converted'] - full:.2f} nats worse" in uptrain and f"the {up['fine-tuned']:.2f} reached here" in uptrain
    assert f"still at {facts['from_scratch_loss']:.1f} nats after 30 steps" in uptrain
    assert facts["uptrain_recovered"]["2"] > 0.8                                  # "over four fifths of the rise"


# ------------------------------------------------------------------ exercise 6, with seeds 1 and 2


def _lesson_cell(notebook, marker: str) -> str:
    found = [c.source for c in notebook.cells if c.cell_type == "code" and marker in c.source]
    assert len(found) == 1, f"one code cell of lesson 04 contains {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def other_seeds():
    """The fine-tunes of exercise 6 with seeds 1 and 2, run by the lesson's own code (set-up, the
    course model, share_kv_heads, the uptraining cell up to its runs) in a fresh interpreter with
    the references."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / find_lesson("04").notebook, as_version=4)
    uptraining = _lesson_cell(notebook, "def uptrain(")
    assert "\nuptraining = {}" in uptraining
    code = "\n".join([
        _lesson_cell(notebook, 'attnlab.start_lesson("04")'),
        _lesson_cell(notebook, "course_model, course_meta = zoo.load()"),
        _lesson_cell(notebook, "def share_kv_heads("),
        uptraining.split("\nuptraining = {}")[0],
        "import json",
        "train_stream = training_text()",
        "found = {seed: {G: uptrain(G, seed) for G in (2, 1)} for seed in (1, 2)}",
        "print('@@seeds@@' + json.dumps({'runs': found, 'full': validation_loss_of(course_model)}))",
    ])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_")}
    env.update(ATTNLAB_REFERENCE="all", MPLBACKEND="Agg", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TQDM_DISABLE="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("@@seeds@@", 1)[1])


def test_uptraining_tells_the_same_story_for_seeds_0_to_2(facts, other_seeds):
    full = facts["uptrain_full_loss"]
    assert other_seeds["full"] == pytest.approx(full, abs=1e-6)
    runs = {"0": facts["uptraining"], **other_seeds["runs"]}
    for seed, run in runs.items():
        two, one = run["2"], run["1"]
        assert two["converted"] == pytest.approx(facts["uptraining"]["2"]["converted"], abs=1e-6)  # no seed in pooling
        assert two["converted"] - full > 0.5 and one["converted"] - full > 1.5    # "costs a lot at first"
        for loss in (two, one):                                                   # "take back" most of the rise
            assert (loss["converted"] - loss["fine-tuned"]) / (loss["converted"] - full) > 0.75, seed
        # the decision: 2 key/value heads within 0.2 nats, 1 above it; fewer heads cost more quality
        assert two["fine-tuned"] - full < 0.2 < one["fine-tuned"] - full, seed
    assert [round(facts["uptrain_recovered"][g], 2) for g in ("2", "1")] == [0.83, 0.87]   # "83% and 87%"
    assert facts["cache_mib"] == {"4": 32.0, "2": 16.0, "1": 8.0}                           # "halves and quarters"


# ------------------------------------------------------------------ the explorer, and exercise 7 (ARENA's test)


def prose() -> str:
    """The prose of the solution notebook, whitespace collapsed."""
    return " ".join(markdown().split())


def test_the_explorer_shows_the_induction_heads_before_they_are_measured(facts):
    words, token, copy = facts["sentence_words"], facts["explorer_token"], facts["explorer_copy"]
    assert words[token] == words[copy] == "coat" and words[copy + 1] == "puzzle"      # "the second 'coat'"
    assert copy < words.index("read") < token                                         # ... "read back"
    weights = facts["explorer_weight_after_copy"]
    ranked = sorted(((v, (l, h)) for l, row in enumerate(weights) for h, v in enumerate(row)), reverse=True)
    assert sorted(lh for _, lh in ranked[:2]) == sorted(head(h) for h in facts["induction_heads"])
    assert (round(weights[2][0], 2), round(weights[2][3], 2)) == (0.57, 0.66)
    assert round(ranked[2][0], 2) == 0.16                                             # "no other head more than"
    assert ('they put 0.57 and 0.66 of their weight on "puzzle", the word after the first "coat", and no other '
            'head more than 0.16') in prose()


def test_the_course_model_fails_arenas_test_and_passes_it_in_its_own_words(facts):
    halves = facts["test_halves"]
    first, second = halves["random tokens (ARENA)"]
    assert (round(second, 1), round(first, 1)) == (12.8, 12.7) and second >= first        # "no less than the first"
    assert round(facts["uniform_guess_loss"], 1) == 5.5 and min(first, second) > 2 * facts["uniform_guess_loss"]
    assert round(facts["arena_best_score"], 2) == 0.01
    first, second = halves["random lists"]
    assert (round(second, 2), round(first, 2)) == (0.24, 2.17)
    assert [head(h) for h in facts["lists_top_heads"]] == [(2, 3), (2, 0)]
    scores = facts["lists_induction_scores"]
    assert (round(scores["L2H3"], 2), round(scores["L2H0"], 2), round(facts["lists_third_score"], 2)) == (0.43, 0.36, 0.21)
    assert min(scores.values()) > 1.5 * facts["lists_third_score"]                         # "well above"
    _, knocked = halves["random lists, L2H0 and L2H3 knocked out"]
    assert round(knocked, 2) == 1.24 and 0.4 < (knocked - second) / (first - second) < 0.6   # "about half ... lost"
    text = prose()
    for quoted in ("costs 12.8 nats per word, no less than the first (12.7)", "the 5.5 nats of a uniform guess",
                   "no head puts more than 0.01", "costs 0.24 nats per word against 2.17 for the first",
                   "L2H3 (0.43) and L2H0 (0.36), well above the next head's 0.21", "costs 1.24 nats"):
        assert quoted in text, quoted


def test_the_quiz_on_arenas_test_states_the_lessons_numbers(facts):
    (quiz,) = lesson_quizzes(find_lesson("04"))
    (question,) = [q for q in quiz.questions if q.prompt.startswith("The course model reads 48 random words")]
    text = " ".join([question.prompt] + [f"{o.text} {o.explain}" for o in question.options])
    first, second = facts["test_halves"]["random lists"]
    knocked = facts["test_halves"]["random lists, L2H0 and L2H3 knocked out"][1]
    assert f"{second:.2f} nats per word against {first:.2f}" in text and f"raised it to {knocked:.2f}" in text
    assert f"from {second:.2f} to {knocked:.2f} nats per word" in text
    assert f"more than {facts['arena_best_score']:.2f} of its weight" in text
    assert "Twice 48 is 96 words, within the 128-word windows" in text and facts["config"]["context"] == 128
    assert [o.correct for o in question.options] == [True, False, False, False]


# ------------------------------------------------------------------ the phase change, from the record


def test_the_phase_change_section_reads_the_shipped_record(facts):
    from attnlab import zoo
    from attnlab.zoo import phase

    record = phase.load_record()
    # "its final weights came out the shipped ones, bit for bit"; "every 20 steps"; "64 random lists"
    assert record["matches_course_model"] is True and record["weights_sha256"] == zoo.metadata()["weights_sha256"]
    assert record["phase"]["every"] == 20 and record["phase"]["lists"] == 64 and record["steps_done"] == 1600
    assert facts["copying_from"] == 1120 and facts["copying_to"] == 1260 and facts["span"] == 140  # "1,120 to 1,260"
    assert facts["previous_heads"][0] == [1, 1] and facts["previous_half_step"] <= 100     # "halfway ... within 100 steps"
    points = {p["step"]: p for p in record["points"]}
    # "... while the loss was still falling fast everywhere"
    assert points[100]["validation"]["loss"] < 0.5 * points[0]["validation"]["loss"]
    assert facts["induction_while_waiting"] <= 0.21                                          # "to about 0.2 at most"
    copied_before, copied_after = facts["phase_copied"]
    assert round(copied_before, 2) == 0.60 and copied_after >= 0.95                          # "from 60% ... almost all"
    assert copied_before > 0.5                                                               # "more than half"
    second_before, second_after = facts["phase_second_half"]
    assert round(second_before, 1) == 0.7 and second_after < 0.4                             # "about 0.7 to under 0.4"
    assert second_after <= 0.5 * second_before                                               # "fell by half"
    first_before, first_after = facts["phase_first_half"]
    assert abs(first_after - first_before) < 0.1                                             # "barely moved"
    for before, after in facts["phase_induction"].values():                    # "rose by 70% or more"
        assert after / before >= 1.7 and before <= 0.21
    val_before, val_after = facts["phase_validation"]
    assert val_before - val_after > facts["validation_drop_before"] > 0                     # "fell more in those 140 steps"
    assert facts["phase_in_context"][1] < facts["phase_in_context"][0] - 0.05              # "fell with it"
    assert facts["phase_random_second_half"] > 12                                            # "over 12 nats per word"
    # "The weights at the two ends of the stretch, steps 1,120 and 1,260, ship with the record:
    # measured again, they copy what the record says they copied"
    assert record["checkpoints"] == [facts["copying_from"], facts["copying_to"]] == [1120, 1260]
    for step, copied in facts["checkpoint_copied"].items():                                 # float16 weights
        assert abs(copied - points[int(step)]["lists"]["copied"]) <= 0.03, step
    assert points[1300]["lists"]["copied"] >= 0.98                                           # quiz: "by step 1,300"
    text = prose()
    for quoted in ("from step 1,120 to step 1,260 of 1,600", "went from 60% of the items", "fell more in those 140 steps than in the 280"):
        assert " ".join(quoted.split()) in " ".join(text.split()), quoted


def test_the_quiz_on_the_phase_change_states_the_records_numbers(facts):
    (quiz,) = lesson_quizzes(find_lesson("04"))
    (question,) = [q for q in quiz.questions if q.prompt.startswith("The course model's training was recorded")]
    text = " ".join([question.prompt] + [f"{o.text} {o.explain}" for o in question.options])
    assert [o.correct for o in question.options] == [True, False, False, False]
    assert f"From step {facts['copying_from']:,} to {facts['copying_to']:,} of 1,600" in text
    assert f"about {facts['span']} steps" in text and f"{facts['phase_copied'][0]:.0%} of the items" in text
