"""Every sentence of lesson 08 that reads a result off a computation, asserted with the lesson's own
numbers (the solution notebook, executed once per session by ``tests.notebook_runs``).

Timings come from a shared 2-core machine: the notebook times CPU time of its own thread (the least
of several rounds), three times on inputs drawn with seeds 0, 1 and 2, and every timed claim is
asserted for each seed, as the lesson states it ("about 2", "about 1", "within a factor of 1.5"),
with tolerances that such a machine keeps. Memory and counts are exact or nearly so.
"""

from __future__ import annotations

import math
import statistics

import pytest

from attnlab.lessons import lesson as find_lesson
from tests.notebook_runs import solution_run
from tests.test_course_quizzes import lesson_quizzes
from tests.timed_claims import within

ABOUT_A_TENTH = (0.1 / 1.5, 0.1 * 1.5)  # "about a tenth": within a factor of 1.5 of it


@pytest.fixture(scope="module")
def facts():
    return solution_run("08").facts


def test_counting_flops(facts):
    assert facts["matmul_flops"] == 120 == 2 * 3 * 5 * 4
    # "counted as 0 FLOPs" for the fused kernel; the explicit products are counted in full
    assert facts["sdpa_counted_flops"] == 0
    assert facts["explicit_counted_flops"] == 4 * 4 * 256 * 256 * 64 == 67_108_864
    # "a CPU runs the fused attention as one operation, _scaled_dot_product_flash_attention_for_cpu,
    # and the counter has no formula for it: it has formulas only for the fused kernels PyTorch runs
    # on a GPU (flash, memory-efficient, cuDNN)"
    assert facts["sdpa_operations"] == ["aten._scaled_dot_product_flash_attention_for_cpu"]
    assert facts["sdpa_operations_counted"] == [False]
    assert facts["fused_attention_formulas"] == ["aten._scaled_dot_product_cudnn_attention",
                                                 "aten._scaled_dot_product_efficient_attention",
                                                 "aten._scaled_dot_product_flash_attention"]


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


def test_the_2017_decoder_layers_add_cross_attention(facts):
    # "a decoder layer's attention catches up with its rest at 2,731 tokens, and the whole model's
    # at 2,867: earlier than the encoder layer alone"
    assert facts["crossover_2017"] == {"encoder layer": 3072, "decoder layer": 2731, "whole model": 2867}
    # by hand: causal self-attention 2 d n (n + 1) plus cross-attention 4 d n^2 against 32 n d^2
    assert 6 * 2731 + 2 >= 32 * 512 > 6 * 2730 + 2
    # the whole model: 60 d n^2 + 12 d n against 336 n d^2
    assert 60 * 2867 + 12 >= 336 * 512 > 60 * 2866 + 12


def test_training_costs_about_six_n_per_token(facts):
    ns = facts["TRAIN_NS"]
    # "The backward pass counted exactly twice the forward pass at every length"
    assert all(facts["backward_over_forward"][str(n)] == 2.0 for n in ns)
    # "and the forward pass exactly 2Nn plus the attention products of every layer"
    assert facts["forward_as_predicted"] is True
    per_token = facts["training_per_token_over_N"]
    assert round(per_token["32"], 1) == 6.2 and round(per_token["512"], 1) == 9.0  # "6.2 ... 9.0"
    assert per_token["32"] < per_token["128"] < per_token["512"]  # attention's term grows with n
    assert ns[-1] == 4 * 128  # "at 512 tokens the context is four times its width"


def test_qwen_parameters_head_and_training(facts):
    # "3.09 billion parameters, 2.77 billion of them outside the embedding" (the model card)
    assert round(facts["qwen_non_embedding"] / 1e9, 2) == 2.77
    assert round(facts["qwen_N"] / 1e9, 2) == 3.09 and round(facts["qwen_embedding"] / 1e6) == 311
    # "0.62 GFLOP per token, 10.1% of a forward pass at a short context"
    assert round(facts["lm_head_flops"] / 1e9, 2) == 0.62 and round(facts["lm_head_share"], 3) == 0.101
    assert round(facts["qwen_forward_per_token"] / 1e9, 2) == 6.17
    assert round(facts["qwen_training_flops"] / 1e23, 1) == 3.3  # "about 3.3 x 10^23 FLOPs"


def test_activation_memory(facts):
    fused_per_token = facts["fused_bytes_per_token"]
    assert len(set(fused_per_token)) == 1  # "the same number of bytes for every token, whatever the length"
    assert round(facts["fused_numbers_per_token_and_width"]) == 15  # "about 15 numbers per token"
    assert 1.95 <= facts["weights_kept_slope"] <= 2.05  # "that extra grows with slope 2"
    assert facts["explicit_weights_share"] > 0.5  # "at 2,048 tokens is most of what the layer keeps"
    assert facts["ACTIVATION_NS"][-1] == 2048


def test_measured_time_slopes(facts):
    assert facts["SEEDS"] == [0, 1, 2] and len(facts["seconds_by_seed"]) == 3
    # every seed, and the medians the tables show
    slopes, ratios_by_seed = facts["time_slope_by_seed"], facts["mean_time_ratio_by_seed"]
    for name, band in {"scores q kᵀ": (1.7, 2.4),  # "close to 2 on every seed"
                       "naive attention": (1.8, 2.8),  # "near 2 as well, often a little above"
                       "PyTorch's SDPA": (1.7, 2.5),  # "its time is still quadratic (slope about 2)"
                       "feed-forward block": (0.75, 1.25)}.items():  # "slope about 1"
        assert within(f"08: time slope of {name}, median and 3 seeds",
                      [facts["time_slope"][name], *slopes[name]], *band)
    # doubling n multiplies the scores' time "by about 4" and "about doubles" the feed-forward block's
    for name, band in {"scores q kᵀ": (3.0, 5.0), "feed-forward block": (1.6, 2.4)}.items():
        assert within(f"08: time ratio per doubling of {name}, mean and 3 seeds",
                      [facts["mean_time_ratio"][name], *ratios_by_seed[name]], *band)
    # the geometric mean is the one ratio that gives the same growth over the whole range
    mean_ratio = facts["mean_time_ratio"]
    for name, ratios in facts["time_ratios"].items():
        values = facts["seconds"][name]
        assert math.isclose(mean_ratio[name] ** len(ratios), values[-1] / values[0], rel_tol=1e-9)


def test_feed_forward_against_one_head(facts):
    # "At 256 tokens it takes longer than one head of naive attention; at 4,096 far less", every seed
    for run in facts["seconds_by_seed"]:
        assert run["feed-forward block"][0] > run["naive attention"][0]
        assert run["feed-forward block"][-1] < run["naive attention"][-1] / 3


def test_predict_then_measure(facts):
    # "The count predicts 512 tokens ... equal at n = d_ff whatever the number of heads"
    assert facts["predicted_overtake"] == facts["D_FF"] == 512
    assert facts["overtake_lengths"] == [128, 256, 512, 1024, 2048]  # a quarter to four times it
    # "within a factor of 1.5 of it on every seed, and naive attention took over at a shorter length
    # than PyTorch's SDPA on every seed"
    naive, sdpa = (facts["overtake_over_predicted"][name] for name in ("naive attention", "PyTorch's SDPA"))
    assert len(naive) == len(sdpa) == 3
    assert all(r is not None and 1 / 1.5 <= r <= 1.5 for r in naive + sdpa), (naive, sdpa)
    assert all(n < s for n, s in zip(naive, sdpa)), (naive, sdpa)


def test_measured_memory(facts):
    slope, ratio = facts["memory_slope"], facts["measured_to_formula"]
    assert 1.9 <= slope["naive attention"] <= 2.05  # "slope 2"
    assert 3.8 <= facts["naive_memory_ratio"] <= 4.1  # "quadruples with each doubling"
    assert 0.6 <= slope["PyTorch's SDPA"] <= 1.3  # "about linearly (slope near 1)"
    assert facts["sdpa_memory_ratio"] < 2.2
    assert all(1.9 <= r <= 2.4 for r in ratio)  # "close to twice one score matrix at every size"


def test_prefill_and_decode_counts(facts):
    # "9.66 GFLOP of attention with the cache, more than the 6.17 GFLOP of everything else ... and
    # re-reading would cost 16,384 times as much (n/2)"
    assert round(facts["decode_token_flops"] / 1e9, 2) == 9.66
    assert round(facts["rest_token_flops"] / 1e9, 2) == 6.17 < 9.66
    assert round(facts["reread_token_flops"] / facts["decode_token_flops"]) == 16384
    # "the cached steps add up to exactly the FLOPs of a causal prefill ... re-reading to 1,366 times that"
    assert facts["ANSWER"] == 4096 and facts["cached_answer_flops"] == facts["prefill_answer_flops"]
    assert round(facts["reread_answer_flops"] / facts["cached_answer_flops"]) == 1366 == (4096 + 2) // 3


def test_prefill_and_decode_on_the_roofline(facts):
    prefill_ns, decode_ns = facts["PREFILL_NS"], facts["DECODE_NS"]
    assert len(facts["prefill_rate"]) == len(facts["decode_rate"]) == 3  # three seeds
    for share in facts["prefill_share_of_peak"]:  # "over half of it from 1,024 tokens on, on every seed"
        assert all(s > 0.5 for n, s in zip(prefill_ns, share) if n >= 1024) and all(s <= 1.05 for s in share)
    # "about a tenth of prefill's FLOP/s on every seed (from 0.075 to 0.125 in our runs)" (24 seeds on a
    # 32 MiB-L3 EPYC): about a tenth read as within a factor of 1.5 of it
    assert within("08: decode over prefill FLOP/s, 3 seeds", facts["decode_over_prefill"], *ABOUT_A_TENTH)
    assert decode_ns[-2:] == [1_048_576, 2_097_152]  # "the two longest caches, 1,048,576 and 2,097,152 tokens"
    assert [n * 64 * 4 * 2 for n in decode_ns[-2:]] == [512 * 2**20, 2**30]  # "512 MiB and 1 GiB of keys and values"
    # "close to 1 ... their median came out between 0.95 and 1.1 in our runs; single seeds mostly between
    # 0.9 and 1.1, the extremes 0.7 and 1.35" (ten runs on a 32 MiB-L3 EPYC, the two lengths timed in
    # turn): bands widened for noise
    assert within("08: decode slope between the two longest caches, median of 3 seeds",
                  statistics.median(facts["decode_slope_longest"]), 0.8, 1.4)
    assert within("08: decode slope between the two longest caches, each seed", facts["decode_slope_longest"], 0.6, 1.8)
    # "comes out above 1" over the whole range
    assert within("08: decode slope over all caches", facts["decode_slope"], low=1.0)
    short_over_longest = []
    for share in facts["decode_share_of_roof"]:
        roofed = dict(zip(decode_ns, share))
        assert roofed[1_048_576] < 1 and roofed[2_097_152] < 1  # "their points lie under the memory roof"
        short = [roofed[n] for n in decode_ns if n <= 16384]
        short_over_longest.append(max(short) / max(roofed[1_048_576], roofed[2_097_152]))
        # "its share of the roof varies most from run to run, at 1,024 tokens from about 0.5 to 1.5"
        # (0.51 to 1.45 on the EPYC with and without another job, 0.64 on CI): that spread, widened
        # for noise. "Above the memory roof in most of our runs" is a record of runs (the table
        # prints this one's).
        assert within("08: decode at 1,024 tokens, share of roof", roofed[1024], 0.45, 1.9), roofed
    # "on every seed the best of them reaches a larger share of the roof than the longest caches do, on
    # the median seed more than one and a half times as large (single seeds from about 1.5 to 2.7 times in our
    # runs)": 1.48 to 2.71 over 15 seeds on a 32 MiB-L3 EPYC, best short share 0.92 to 1.41 against
    # 0.54 to 0.64 for the longest; a seed whose short caches were evicted by another program is the low end
    assert within("08: best short cache over the longest, share of roof, each seed", short_over_longest, low=1.0)
    assert within("08: best short cache over the longest, share of roof, median of 3 seeds",
                  statistics.median(short_over_longest), low=1.5)
    assert 16384 * 64 * 4 * 2 == 8 * 2**20  # "at most 8 MiB of keys and values"
    assert all(abs(i - 0.5) < 0.001 for i in facts["decode_intensity"])  # "0.5 FLOP per byte"
    assert facts["prefill_intensity"] == [n / 4 for n in prefill_ns]  # "n/4 FLOPs per byte"


def test_decoding_on_a_gpu(facts):
    assert round(facts["h200_balance"]) == 206  # "a balance of 206 FLOPs per byte"
    assert round(facts["qwen_decode_intensity"], 1) == 8.0  # "8 FLOPs per byte of cache it reads"
    assert facts["qwen_decode_intensity"] / facts["h200_balance"] < 0.04  # "under 4% of the H200's balance"
    assert round(facts["qwen_weight_bytes"] / 1e9, 2) == 6.17 and round(facts["qwen_cache_bytes"] / 1e9, 2) == 1.21
    assert round(facts["qwen_decode_seconds"] * 1e3, 1) == 1.5  # "about 1.5 ms per token"
    assert round(1 / facts["qwen_decode_seconds"], -1) == 650  # "some 650 tokens per second"


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
    recurrent = "linear attention, recurrent"  # "slope about 1"
    assert within("08: time slope of recurrent linear attention, median and 3 seeds",
                  [facts["time_slope"][recurrent], *facts["time_slope_by_seed"][recurrent]], 0.7, 1.3)  # 0.77 once
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



def test_no_memory_beyond_the_context(facts):
    # "bit for bit the same after reading 512 tokens and differ after one step of training"
    assert facts["weights_unchanged_by_reading"] is True and facts["weights_unchanged_by_training"] is False
    lookup = facts["lookup"]
    assert sorted(lookup) == ["0", "1", "2"]
    for found in lookup.values():
        assert found["conversation 1's cache"] == 1.0  # "answers every question ... on every seed"
        assert found["conversation 2's cache"] <= 3 / 8  # "at most 3 of 8 on these seeds"


def test_attention_thins_out(facts):
    predicted, ns = facts["planted_predicted"], facts["planted_ns"]
    assert ns[0] == 8 and ns[-1] == 2**20 and len(facts["planted_weight_by_seed"]) == 3
    for weights in facts["planted_weight_by_seed"]:  # every seed
        assert weights[0] > 0.5  # "most of the weight" among 8
        assert 5e-6 < weights[-1] < 2e-5  # "about a hundred-thousandth" among a million
        errors = [abs(w / p - 1) for w, p in zip(weights, predicted)]
        # "within 30% below 1,024 keys, 10% from 1,024 on and 4% from 4,096 on"
        assert max(errors) < 0.3
        assert max(e for n, e in zip(ns, errors) if n >= 1024) < 0.1
        assert max(e for n, e in zip(ns, errors) if n >= 4096) < 0.04
    assert facts["planted_error"]["8"] < 0.3 and facts["planted_error"]["1024"] < 0.1 and facts["planted_error"]["4096"] < 0.04
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
    """The quiz's prompts and explanations quote results of the lesson: each must be what the lesson
    computed."""
    texts = quiz_text()

    def question(starting: str) -> str:
        (text,) = [t for prompt, t in texts.items() if prompt.startswith(starting)]
        return text

    first = question("You double")
    assert "quadrupled with each doubling" in first and 3.8 <= facts["naive_memory_ratio"] <= 4.1
    assert "the time of the scores about quadrupled" in first
    assert all(3.0 <= r <= 5.0 for r in facts["mean_time_ratio_by_seed"]["scores q kᵀ"])
    sharing = question("Qwen2.5-3B's 16 query heads share 2")
    qwen = dict(zip(("name", "d_model", "d_ff", "n_heads", "n_kv_heads"), facts["qwen"]))  # a ModelShape
    assert qwen["name"] == "Qwen2.5-3B" and qwen["n_heads"] // qwen["n_kv_heads"] == 8
    cache = facts["kv_cache"]["1000000"]
    assert f"{cache / 1e9:.1f} GB instead of {facts['kv_cache_without_sharing'] / 1e9:.0f} GB" in sharing
    crossover = facts["crossover"]["2017 base"]
    assert f"{crossover:,} tokens, six times d_model" in question("At which length")
    # the measured gap: naive attention overtook the block at a shorter length than SDPA, every seed
    assert "at a shorter length than PyTorch's fused SDPA did, on every seed" in question("On this machine, naive")
    overtakes = facts["overtake_over_predicted"]
    assert all(n < s for n, s in zip(overtakes["naive attention"], overtakes["PyTorch's SDPA"]))
    assert "in proportion to a cache held in main memory" in question("A model with a KV cache")
    assert 0.8 <= statistics.median(facts["decode_slope_longest"]) <= 1.4
    decode = question("Why did one decode step")
    assert "only about a tenth of prefill's FLOP/s on this CPU" in decode
    assert all(ABOUT_A_TENTH[0] <= r <= ABOUT_A_TENTH[1] for r in facts["decode_over_prefill"])
    assert "About 0.5 FLOP per byte" in decode and "one head of 64" in decode
    assert "counted backward = 2 × forward exactly" in question("A transformer has N weights")
    assert set(facts["backward_over_forward"].values()) == {2.0}
    memory = question("You tell a chat model")
    assert "bit for bit the same after 512 tokens" in memory and facts["weights_unchanged_by_reading"] is True
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
