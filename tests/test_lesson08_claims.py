"""Every sentence of lesson 08 that reads a result off a computation, asserted with the lesson's own
numbers (the solution notebook, executed once per session by ``tests.notebook_runs``).

Timings come from a shared 2-core machine: the notebook times CPU time of its own thread (the least
of several rounds), and the slopes are asserted as the lesson states them, "about 2" and "about
1", with tolerances that such a machine keeps. Memory and counts are exact or nearly so.
"""

from __future__ import annotations

import math

import pytest

from attnlab.lessons import lesson as find_lesson
from tests.notebook_runs import solution_run
from tests.test_course_quizzes import lesson_quizzes


@pytest.fixture(scope="module")
def facts():
    return solution_run("08").facts


def test_counting_flops(facts):
    assert facts["matmul_flops"] == 120 == 2 * 3 * 5 * 4
    # "it reports 0 FLOPs" for the fused kernel; the explicit products are counted in full
    assert facts["sdpa_counted_flops"] == 0
    assert facts["explicit_counted_flops"] == 4 * 4 * 256 * 256 * 64 == 67_108_864


def test_crossover_lengths_and_shares(facts):
    crossover, causal = facts["crossover"], facts["crossover_causal"]
    assert crossover["2017 base"] == 3072 == 6 * 512
    assert crossover["ViT-B/16"] == 4608 == 6 * 768
    assert crossover["Qwen2.5-3B"] == 18816
    assert causal["Qwen2.5-3B"] == 37631 > 32768  # beyond its own context
    share = facts["context_share"]
    assert round(share["ViT-B/16"], 3) == 0.041  # "a small part of its FLOPs, 4.1%"
    assert round(share["Qwen2.5-3B"], 3) == 0.465 < 0.5  # "a little under half (46.5%)"
    qwen = facts["qwen_share"]
    assert round(qwen["512"], 3) == 0.013 and round(qwen["1000000"], 3) == 0.964


def test_measured_time_slopes(facts):
    slope = facts["time_slope"]
    assert 1.7 <= slope["scores q kᵀ"] <= 2.4  # "close to 2"
    assert 1.8 <= slope["naive attention"] <= 2.8  # "near 2 as well, often a little above"
    assert 1.7 <= slope["PyTorch's SDPA"] <= 2.5  # "its time is still quadratic (slope about 2)"
    assert 0.75 <= slope["feed-forward block"] <= 1.25  # "slope about 1"
    mean_ratio = facts["mean_time_ratio"]
    assert 3.0 <= mean_ratio["scores q kᵀ"] <= 5.0  # doubling n multiplies their time "by about 4"
    assert 1.6 <= mean_ratio["feed-forward block"] <= 2.4  # "about doubles its time (about 2)"
    # the geometric mean is the one ratio that gives the same growth over the whole range
    for name, ratios in facts["time_ratios"].items():
        values = facts["seconds"][name]
        assert math.isclose(mean_ratio[name] ** len(ratios), values[-1] / values[0], rel_tol=1e-9)


def test_feed_forward_against_attention(facts):
    seconds = facts["seconds"]
    assert seconds["feed-forward block"][0] > seconds["naive attention"][0]  # at 256 tokens
    assert facts["ffn_flops_equal_at"] == 1024
    assert facts["attention_overtakes_ffn_at"] in (512, 1024, 2048)  # "cross near there"


def test_measured_memory(facts):
    slope, ratio = facts["memory_slope"], facts["measured_to_formula"]
    assert 1.9 <= slope["naive attention"] <= 2.05  # "slope 2"
    assert 3.8 <= facts["naive_memory_ratio"] <= 4.1  # "quadruples with each doubling"
    assert 0.6 <= slope["PyTorch's SDPA"] <= 1.3  # "about linearly (slope near 1)"
    assert facts["sdpa_memory_ratio"] < 2.2
    assert all(1.9 <= r <= 2.4 for r in ratio)  # "close to twice one score matrix at every size"


def test_a_million_tokens(facts):
    assert facts["scores_per_head"] == 10**12
    assert facts["million_one_head_bytes"] == 2 * 10**12  # 2 TB
    assert facts["million_layer_bytes"] == 32 * 10**12  # 32 TB
    assert facts["million_flash_bytes"] == 64 * 10**6  # 64 MB
    assert 4.0e15 <= facts["million_attention_flops"] <= 4.2e15  # "about 4 x 10^15"
    cache = facts["kv_cache"]
    assert round(cache["1000000"] / 1e9, 1) == 36.9 and round(cache["32768"] / 1e9, 2) == 1.21
    assert 30 <= cache["1000000"] / cache["32768"] < 31  # "30 times its 1.21 GB" (written answer)
    without_sharing = facts["kv_cache_without_sharing"]  # 16 key/value heads instead of 2
    assert without_sharing == 8 * cache["1000000"] and round(without_sharing / 1e9) == 295
    without_sharing = facts["kv_cache_without_sharing"]  # 16 key/value heads instead of 2
    assert without_sharing == 8 * cache["1000000"] and round(without_sharing / 1e9) == 295


def test_linear_time_recurrence(facts):
    assert facts["recurrence_difference"] < 1e-12  # "agree to rounding error"
    assert 0.8 <= facts["time_slope"]["linear attention, recurrent"] <= 1.2  # "slope about 1"
    seconds = facts["seconds"]
    assert seconds["linear attention, recurrent"][0] > 3 * seconds["naive attention"][0]  # "far slower" at 256


def test_tokens_that_are_not_words(facts):
    assert [len(facts["patches"]), len(facts["patches"][0]), len(facts["patches"][0][0])] == [1, 16, 768]
    assert facts["vit_tokens"] == {"224": 196, "384": 576, "1024": 4096}
    assert facts["token_counts"]["ViT-B/16, 224 x 224 image (196 patches + class token)"] == 197
    assert (facts["whisper_frames"], facts["whisper_tokens"]) == (3000, 1500)
    dit = facts["dit_tokens"]
    assert dit == {"2": 256, "4": 64, "8": 16} and dit["2"] == 4 * dit["4"]  # halving p: 4x the tokens
    counts = facts["token_counts"]
    p2, p4 = (counts[f"DiT latent of a 256 x 256 image, p={p}"] for p in (2, 4))
    assert p2**2 == 16 * p4**2  # "... and the attention by 16"


def test_limits(facts):
    assert facts["context_error"].startswith("IndexError")
    assert facts["order_difference"] < 1e-12  # "equal to rounding error"
    assert facts["same_output"] is True  # "equal to the last bit"
    assert facts["weight_on_great"] == {"mostly on 'great'": 0.75, "mostly on 'the' and 'was'": 0.125}
    assert facts["softmax_gives_back"] < 1e-15  # "a softmax of the scores log w gives back these weights"
    assert facts["free_directions"] == 1  # "4 tokens, a sum and 2 features leave 4 - 1 - 2 = 1 such direction"
    difference = [a - b for a, b in zip(*facts["patterns"].values())]  # the two patterns differ along it
    assert abs(sum(difference)) == 0 and all(
        sum(d * v[f] for d, v in zip(difference, facts["values"])) == 0 for f in range(2))
    assert facts["remembers_between_inputs"] is False


def test_attention_thins_out(facts):
    weights, predicted, ns = facts["planted_weight"], facts["planted_predicted"], facts["planted_ns"]
    assert ns[0] == 8 and ns[-1] == 2**20
    assert weights[0] > 0.5  # "most of the weight" among 8
    assert 5e-6 < weights[-1] < 2e-5  # "about a hundred-thousandth" among a million
    errors = [abs(w / p - 1) for w, p in zip(weights, predicted)]
    assert max(errors) < 0.3 and max(e for n, e in zip(ns, errors) if n >= 64) < 0.1  # closer as n grows
    assert facts["position_spread"] < 1e-15  # moving the key "changes nothing"
    # "a margin of 0.5 + ln(n - 1), 2.4 among 8 keys but 14.4 among a million ... half of the weight"
    margins = facts["margin_for_half"]
    assert round(margins["8"], 1) == 2.4 and round(margins[str(2**20)], 1) == 14.4
    assert round(facts["weight_at_margin_for_half"], 2) == 0.5


def test_tokenizer_hides_letters(facts):
    assert len(facts["apple_ids"]) == 1 and facts["strawberry_is_unknown"] is True
    ratio = facts["character_tokens"] / facts["word_tokens"]
    assert round(ratio, 1) == 3.8 and round(ratio**2) == 14


def test_vit_numbers_are_those_of_table_5(facts):
    table = {key.split()[0]: row for key, row in facts["VIT_TABLE5"].items()}
    assert table == {"ImageNet": {"ViT-B/16": 77.91, "ViT-L/16": 76.53},
                     "ImageNet-21k": {"ViT-B/16": 83.97, "ViT-L/16": 85.15},
                     "JFT-300M": {"ViT-B/16": 84.15, "ViT-L/16": 87.12}}
    assert facts["large_minus_base"]["ImageNet"] < 0 < facts["large_minus_base"]["JFT-300M"]
    assert math.isclose(facts["large_minus_base"]["JFT-300M"], 2.97)  # "almost 3 points"


def quiz_text() -> dict[str, str]:
    """Each question's prompt -> its prompt, options and explanations, as the quiz shows them."""
    (quiz,) = lesson_quizzes(find_lesson("08"))
    return {q.prompt: " ".join([q.prompt] + [f"{o.text} {o.explain}" for o in q.options]) for q in quiz.questions}


def test_the_quiz_states_the_lessons_numbers(facts):
    """The quiz's explanations quote results of the lesson: each must be what the lesson computed."""
    texts = quiz_text()

    def question(starting: str) -> str:
        (text,) = [t for prompt, t in texts.items() if prompt.startswith(starting)]
        return text

    first = question("You double")
    assert "quadrupled with each doubling" in first and 3.8 <= facts["naive_memory_ratio"] <= 4.1
    assert "the time of the scores about quadrupled" in first
    assert 3.0 <= facts["mean_time_ratio"]["scores q kᵀ"] <= 5.0
    qwen = dict(zip(("name", "d_model", "d_ff", "n_heads", "n_kv_heads"), facts["qwen"]))  # a ModelShape
    assert qwen["name"] == "Qwen2.5-3B" and qwen["n_heads"] // qwen["n_kv_heads"] == 8
    assert "by a factor of 8" in question("Qwen2.5-3B has 16 query heads sharing 2")
    crossover = facts["crossover"]["2017 base"]
    assert f"At {crossover:,} tokens" in question("At which length")
    vit = question("A vision transformer")
    patches = facts["patches"]
    assert f"{facts['vit_tokens']['224']} tokens of {len(patches[0][0])} numbers" in vit
    assert f"instead of {facts['vit_tokens']['224'] ** 2:,}" in vit  # scores per head of 196 patches
    assert f"{224**4 / 1e9:.1f} billion scores" in vit and "224² = 50,176" in vit  # one token per pixel
    great, spread = facts["weight_on_great"].values()
    assert f"{great:.0%} of the weight in one pattern and {spread:.1%} in the other" in question("In this lesson two")
    data = question("Why did ViT-L/16")
    table = {key.split()[0]: row for key, row in facts["VIT_TABLE5"].items()}
    assert f"{table['JFT-300M']['ViT-L/16']}% against {table['JFT-300M']['ViT-B/16']}%" in data
    assert f"about {facts['context_share']['ViT-B/16']:.0%} of a ViT-B/16 layer's FLOPs" in data
