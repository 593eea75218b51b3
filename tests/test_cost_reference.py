"""The reference of lesson 08 (solutions/attnlab/cost.py), its stub, and attnlab.bench's use of it.

Counts are compared with independent computations: FLOPs counted by ``FlopCounterMode`` on real
products, allowed pairs enumerated from the mask, bytes from real tensors, patches from
``torch.nn.functional.unfold`` and from a plain loop over pixels in float64, frames from exact
fractions; the model sizes with the values their sources give.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests import helpers
from tests.helpers import borrowed_reference, load_stub

FUNCTIONS = ("attention_flops", "layer_flops", "attention_memory_bytes", "patchify", "audio_tokens")


@pytest.fixture(scope="module")
def ref():
    yield from borrowed_reference("cost")


@pytest.fixture(scope="module")
def stub():
    return load_stub("cost")


def counted(fn) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


# ---------------------------------------------------------------------------- attention_flops


@pytest.mark.parametrize("n_q, n_k, d, heads", [(1, 1, 1, 1), (5, 7, 3, 1), (9, 4, 8, 6), (33, 33, 16, 2)])
def test_attention_flops_equals_flop_counter_on_two_products(ref, n_q, n_k, d, heads):
    q, k, v = torch.randn(heads, n_q, d), torch.randn(heads, n_k, d), torch.randn(heads, n_k, d)
    assert ref.attention_flops(n_q, n_k, d, n_heads=heads) == counted(lambda: torch.softmax(q @ k.mT, -1) @ v)


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (6, 6), (3, 8), (8, 3), (17, 5), (5, 17), (64, 64)])
def test_causal_flops_count_the_pairs_the_bottom_right_mask_allows(ref, n_q, n_k):
    i, j = np.indices((n_q, n_k))
    allowed = int((j <= i + (n_k - n_q)).sum())
    assert ref.attention_flops(n_q, n_k, 4, n_heads=3, causal=True) == 4 * 3 * 4 * allowed


def test_flops_are_exact_integers_for_a_million_tokens(ref):
    n = 10**6
    full = ref.attention_flops(n, n, 128, n_heads=16)
    causal = ref.attention_flops(n, n, 128, n_heads=16, causal=True)
    assert isinstance(full, int) and full == 4 * 16 * n * n * 128
    assert isinstance(causal, int) and causal == 4 * 16 * (n * (n + 1) // 2) * 128


# ---------------------------------------------------------------------------- layer_flops


def explicit_layer_parts(n, d_model, d_ff, heads, kv_heads, ffn) -> dict[str, int]:
    """FlopCounterMode on a layer written out with plain weights (no attnlab code)."""
    h = d_model // heads
    x = torch.randn(n, d_model)
    wq, wo = torch.randn(d_model, d_model), torch.randn(d_model, d_model)
    wk, wv = torch.randn(d_model, kv_heads * h), torch.randn(d_model, kv_heads * h)
    projections = counted(lambda: (x @ wq, x @ wk, x @ wv, x @ wo))
    q = (x @ wq).reshape(n, heads, h).transpose(0, 1)
    k = (x @ wk).reshape(n, kv_heads, h).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    attention = counted(lambda: torch.softmax(q @ k.mT, -1) @ k)
    up, down, gate = torch.randn(d_model, d_ff), torch.randn(d_ff, d_model), torch.randn(d_model, d_ff)
    if ffn == "gelu":
        feedforward = counted(lambda: F.gelu(x @ up) @ down)
    else:
        feedforward = counted(lambda: (F.silu(x @ gate) * (x @ up)) @ down)
    return {"projections": projections, "attention": attention, "feedforward": feedforward,
            "total": projections + attention + feedforward}


@pytest.mark.parametrize("n, d_model, d_ff, heads, kv_heads, ffn", [
    (7, 16, 24, 4, 4, "gelu"), (13, 48, 40, 6, 2, "swiglu"), (5, 12, 8, 3, 1, "swiglu"), (1, 8, 8, 1, 1, "gelu"),
])
def test_layer_flops_equals_the_flop_counter_on_an_explicit_layer(ref, n, d_model, d_ff, heads, kv_heads, ffn):
    got = ref.layer_flops(n, d_model, d_ff, heads, n_kv_heads=kv_heads, ffn=ffn)
    assert got == explicit_layer_parts(n, d_model, d_ff, heads, kv_heads, ffn)
    assert all(isinstance(value, int) for value in got.values())


def test_layer_flops_defaults_and_causal(ref):
    assert ref.layer_flops(9, 16, 32, 4) == ref.layer_flops(9, 16, 32, 4, n_kv_heads=4, ffn="gelu")
    full, causal = ref.layer_flops(9, 16, 32, 4), ref.layer_flops(9, 16, 32, 4, causal=True)
    assert causal["attention"] == ref.attention_flops(9, 9, 4, 4, causal=True) < full["attention"]
    assert causal["projections"] == full["projections"] and causal["feedforward"] == full["feedforward"]


@pytest.mark.parametrize("args, kwargs, message", [
    ((10, 30, 64, 4), {}, "not divisible by n_heads"),
    ((10, 32, 64, 6), {}, "not divisible by n_heads"),
    ((10, 32, 64, 8), {"n_kv_heads": 3}, "not a multiple of n_kv_heads"),
    ((10, 32, 64, 8), {"ffn": "relu"}, "ffn must be one of"),
    ((0, 32, 64, 8), {}, "n must be an integer >= 1"),
    ((10.0, 32, 64, 8), {}, "n must be an integer"),
])
def test_layer_flops_rejects_bad_sizes_clearly(ref, args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref.layer_flops(*args, **kwargs)


# ---------------------------------------------------------------------------- models and crossover


def test_model_sizes_are_those_of_their_sources(ref):
    qwen = ref.MODELS["Qwen2.5-3B"]  # Qwen2.5-3B's config.json
    assert (qwen.d_model, qwen.d_ff, qwen.n_layers, qwen.n_heads, qwen.n_kv_heads, qwen.head_size,
            qwen.context, qwen.ffn, qwen.causal) == (2048, 11008, 36, 16, 2, 128, 32768, "swiglu", True)
    base = ref.MODELS["2017 base"]  # Vaswani et al. (2017), Table 3
    assert (base.d_model, base.d_ff, base.n_heads, base.head_size, base.n_layers) == (512, 2048, 8, 64, 12)
    vit = ref.MODELS["ViT-B/16"]  # Dosovitskiy et al. (2020), Table 1
    assert (vit.d_model, vit.d_ff, vit.n_heads, vit.n_layers, vit.context) == (768, 3072, 12, 12, 197)
    assert all(model.source for model in ref.MODELS.values())


def test_crossover_is_where_the_per_token_costs_meet(ref):
    # A block four times as wide costs 24 d² per token, attention 4 n d: equal at n = 6 d.
    assert ref.crossover_length(ref.MODELS["2017 base"]) == 6 * 512
    assert ref.crossover_length(ref.MODELS["ViT-B/16"]) == 6 * 768
    qwen = ref.MODELS["Qwen2.5-3B"]
    rest_per_token = 2 * 2048 * (2 * 2048 + 2 * 2 * 128) + 3 * 2 * 2048 * 11008
    assert ref.crossover_length(qwen) == math.ceil(rest_per_token / (4 * 2048)) == 18816
    # causal: 4 d (n + 1) / 2 per token reaches the rest at n + 1 = rest / (2 d)
    assert ref.crossover_length(qwen, causal=True) == math.ceil(rest_per_token / (2 * 2048)) - 1 == 37631


def test_the_crossover_search_never_asks_about_lengths_far_beyond_the_answer(ref, monkeypatch):
    # A learner's attention_flops may count the pairs in a Python loop (right, and slow at long
    # lengths): the search may only ask about lengths up to twice the answer, so lesson 08's cell
    # answers in a moment instead of counting the pairs of 2**39 tokens.
    asked = []
    layer_flops = ref.layer_flops

    def recording(n, *args, **kwargs):
        asked.append(n)
        return layer_flops(n, *args, **kwargs)

    monkeypatch.setattr(ref, "layer_flops", recording)
    for name, model in ref.MODELS.items():
        for causal in (False, True):
            asked.clear()
            answer = ref.crossover_length(model, causal=causal)
            assert max(asked) < 2 * answer and len(asked) < 40, (name, causal, answer, max(asked))


def test_a_crossover_that_never_comes_is_an_error_naming_attention_flops(ref, monkeypatch):
    monkeypatch.setattr(ref, "attention_flops", lambda *args, **kwargs: 0)
    with pytest.raises(ValueError, match="attention_flops grow like n_q"):
        ref.crossover_length(ref.MODELS["2017 base"])


# ---------------------------------------------------------------------------- attention_memory_bytes


@pytest.mark.parametrize("n, heads, dtype",
                         [(10, 1, torch.float32), (300, 4, torch.bfloat16), (7, 3, torch.float64)])
def test_memory_is_the_size_of_the_score_tensor_or_the_float32_lse(ref, n, heads, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    assert ref.attention_memory_bytes(n, heads, size) == torch.empty(heads, n, n, dtype=dtype).nbytes
    assert ref.attention_memory_bytes(n, heads, size, materialized=False) == torch.empty(heads, n).nbytes


def test_memory_rejects_bad_counts(ref):
    with pytest.raises(ValueError, match="dtype_bytes must be an integer >= 1"):
        ref.attention_memory_bytes(10, 2, 0)


# ---------------------------------------------------------------------------- patchify


def patches_by_loops(images: torch.Tensor, p: int) -> torch.Tensor:
    """Patches in float64 by plain loops: patch (r, c) in reading order, values channel, row, column."""
    b, c, h, w = images.shape
    out = torch.empty(b, (h // p) * (w // p), c * p * p, dtype=torch.float64)
    for r in range(h // p):
        for col in range(w // p):
            block = images[:, :, r * p:(r + 1) * p, col * p:(col + 1) * p].double()
            out[:, r * (w // p) + col] = block.reshape(b, -1)
    return out


@pytest.mark.parametrize("shape, p, dtype", [
    ((1, 1, 4, 4), 2, torch.float64), ((2, 3, 8, 12), 4, torch.float32), ((3, 2, 5, 10), 5, torch.float16),
    ((1, 3, 6, 6), 1, torch.float64), ((2, 4, 6, 6), 6, torch.bfloat16), ((1, 3, 32, 48), 16, torch.float32),
])
def test_patchify_equals_unfold_and_a_loop(ref, shape, p, dtype):
    images = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)
    before = images.clone()
    got = ref.patchify(images, p)
    assert got.dtype == dtype and torch.equal(images, before)
    assert torch.equal(got.double(), patches_by_loops(images, p))
    assert torch.equal(got, F.unfold(images.float(), p, stride=p).transpose(1, 2).to(dtype))


def test_patchify_counts_vit_and_dit_tokens(ref):
    assert ref.patchify(torch.zeros(1, 3, 224, 224), 16).shape == (1, 196, 768)
    assert [ref.patchify(torch.zeros(1, 4, 32, 32), p).shape[1] for p in (2, 4, 8)] == [256, 64, 16]


def test_patchify_keeps_integer_images(ref):
    images = torch.arange(2 * 3 * 4 * 4, dtype=torch.uint8).reshape(2, 3, 4, 4)
    assert torch.equal(ref.patchify(images, 2).double(), patches_by_loops(images, 2))


@pytest.mark.parametrize("images, p, error, message", [
    (torch.zeros(1, 3, 10, 16), 4, ValueError, r"10 x 16 is not a multiple of patch_size=4"),
    (torch.zeros(3, 16, 16), 4, ValueError, r"shape \(B, C, H, W\)"),
    (np.zeros((1, 3, 4, 4)), 2, TypeError, "must be a torch.Tensor"),
    (torch.zeros(1, 3, 4, 4), 0, ValueError, "patch_size must be an integer >= 1"),
])
def test_patchify_rejects_bad_input_clearly(ref, images, p, error, message):
    with pytest.raises(error, match=message):
        ref.patchify(images, p)


# ---------------------------------------------------------------------------- audio_tokens


@pytest.mark.parametrize("seconds, hop, stride", [
    (30.0, 0.01, 2), (30.0, 0.01, 1), (0.0, 0.01, 2), (0.05, 0.01, 2), (0.095, 0.01, 1), (12.345, 0.01, 2),
    (45.6, 0.015, 2), (9.99, 0.01, 4), (1.5, 0.025, 1), (600.0, 0.02, 3), (0.29, 0.01, 1), (4.35, 0.01, 1),
])
def test_audio_tokens_equal_exact_fractions(ref, seconds, hop, stride):
    frames = math.floor(Fraction(str(seconds)) / Fraction(str(hop)))
    assert ref.audio_tokens(seconds, hop_s=hop, stride=stride) == -(-frames // stride)


def test_whisper_thirty_seconds(ref):
    assert (ref.audio_tokens(30.0, stride=1), ref.audio_tokens(30.0)) == (3000, 1500)


@pytest.mark.parametrize("kwargs, message", [
    ({"seconds": -1.0}, "seconds must be >= 0"), ({"seconds": 1.0, "hop_s": 0.0}, "hop_s must be > 0"),
    ({"seconds": 1.0, "stride": 0}, "stride must be an integer >= 1"), ({"seconds": math.nan}, "finite"),
])
def test_audio_tokens_rejects_bad_input_clearly(ref, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref.audio_tokens(**kwargs)


# ---------------------------------------------------------------------------- attention_overtakes_ffn


def counted_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("d_model, d_ff, heads", [(128, 512, 2), (96, 320, 3), (64, 5, 4), (32, 33, 1), (24, 7, 6)])
@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_overtakes_ffn_is_the_first_length_where_the_counts_cross(ref, d_model, d_ff, heads, ffn, causal):
    """Independent: FLOPs counted by FlopCounterMode on real products (meta tensors), n by n."""
    found = ref.attention_overtakes_ffn(d_model, d_ff, heads, ffn=ffn, causal=causal)
    assert isinstance(found, int)

    def attention(n):
        q = torch.empty(heads, n, d_model // heads, device="meta")
        full = counted_flops(lambda: (q @ q.transpose(-2, -1)) @ q)
        return full * (n + 1) // (2 * n) if causal else full

    def block(n):
        x, up, down = (torch.empty(*shape, device="meta") for shape in ((n, d_model), (d_model, d_ff), (d_ff, d_model)))
        return counted_flops(lambda: (x @ up, (x @ up) @ down) if ffn == "swiglu" else (x @ up) @ down)  # gate, up, down

    assert attention(found) >= block(found) and (found == 1 or attention(found - 1) < block(found - 1))


def test_attention_overtakes_ffn_for_the_lessons_layer_and_qwen(ref):
    assert ref.attention_overtakes_ffn(128, 512, 2) == 512  # n = d_ff, whatever the heads
    assert ref.attention_overtakes_ffn(128, 512, 1) == ref.attention_overtakes_ffn(128, 512, 8) == 512
    assert ref.attention_overtakes_ffn(2048, 11008, 16, ffn="swiglu") == 16512
    assert ref.attention_overtakes_ffn(2048, 11008, 16, ffn="swiglu", causal=True) == 3 * 11008 - 1


@pytest.mark.parametrize("args, kwargs, message", [
    ((128, 512, 3), {}, "not divisible by n_heads=3"),
    ((128, 512, 2), {"ffn": "relu"}, "ffn must be one of"),
    ((128, 0, 2), {}, "d_ff must be an integer >= 1"),
    ((128.0, 512, 2), {}, "d_model must be an integer"),
])
def test_attention_overtakes_ffn_rejects_bad_sizes_clearly(ref, args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ref.attention_overtakes_ffn(*args, **kwargs)


# ---------------------------------------------------------------------------- the stub


@pytest.mark.parametrize("name, args", [
    ("attention_flops", (4, 4, 8)), ("layer_flops", (4, 16, 32, 4)), ("attention_memory_bytes", (4, 2, 2)),
    ("patchify", (torch.zeros(1, 1, 4, 4), 2)), ("audio_tokens", (1.0,)),
    ("attention_overtakes_ffn", (128, 512, 2)),
])
def test_stub_raises_naming_the_lesson_and_keeps_the_input_checks(stub, name, args):
    with pytest.raises(NotImplementedError, match=f"Lesson 08: {name}\\(\\)"):
        getattr(stub, name)(*args)
    with pytest.raises(ValueError, match="not a multiple of patch_size"):
        stub.patchify(torch.zeros(1, 1, 5, 4), 2)
    assert stub.crossover_length and stub.MODELS["Qwen2.5-3B"].d_model == 2048


# ---------------------------------------------------------------------------- attnlab.bench uses cost.py


def test_bench_imports_and_counts_with_the_blank_stub_through_the_reference(python):
    done = python(
        "import attnlab.bench as bench\n"
        "import attnlab\n"
        "assert attnlab.source_of('cost') == 'yours'\n"
        "print(bench.attention_flops(2, 100, 50, 8), bench.attention_flops(2, 10, 10, 4, causal=True))\n"
        "print(bench.attention_flops(1, 8, 8, 2))\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("Note: attnlab.bench counts FLOPs with the course's reference of attnlab.cost")
    assert "Lesson 08: attention_flops()" in lines[0] and len(lines) == 3  # the notice is printed once
    assert lines[1:] == [f"{4 * 2 * 100 * 50 * 8} {4 * 2 * 55 * 4}", f"{4 * 8 * 8 * 2}"]


def test_bench_uses_the_learners_own_count_once_written(python, tmp_path):
    (tmp_path / "cost.py").write_text("def attention_flops(n_q, n_k, d, n_heads=1, causal=False):\n"
                                      "    return 12345\n")
    done = python("import attnlab.bench as bench; print(bench.attention_flops(2, 100, 50, 8))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "12345"


def test_without_a_reference_bench_raises_the_lessons_error_and_measure_keeps_the_time(python):
    done = python(
        "import attnlab.bench as bench\n"
        "record = bench.measure('naive', bench.naive_attention, batch=1, heads=1, n=16, d=8,\n"
        "                       repeats=1, memory=False)\n"
        "print(record['error'], record['tflops'], record['time_s'] > 0)\n"
        "try:\n"
        "    bench.attention_flops(1, 4, 4, 2)\n"
        "except NotImplementedError as error:\n"
        "    print('raised:', error)\n",
        env={"ATTNLAB_NO_REFERENCE": "cost"})
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first == "None None True"
    assert second.startswith("raised: Lesson 08: attention_flops()")


# ---------------------------------------------------------------------------- the trusted cases of the grader


def trusted_verdicts(module) -> dict[str, str]:
    return helpers.trusted_verdicts("08", module)


def with_mistake(ref, **functions):
    """The reference cost module with some functions replaced."""
    return helpers.with_mistake(ref, FUNCTIONS, **functions)


def _halved_causal(n_q, n_k, d, n_heads=1, causal=False):
    return 4 * n_heads * d * (n_q * n_k // 2 if causal else n_q * n_k)


def _causal_without_clipping(n_q, n_k, d, n_heads=1, causal=False):
    """Right when n_q <= n_k; when n_q > n_k it forgets that the first queries see no key."""
    pairs = n_q * n_k if not causal else n_q * (n_k - n_q) + n_q * (n_q + 1) // 2
    return 4 * n_heads * d * pairs


def _one_head(n_q, n_k, d, n_heads=1, causal=False):
    return _causal_without_clipping(n_q, n_k, d, 1, causal) if n_q <= n_k else 4 * d * (n_k * (n_k + 1) // 2)


def _layer_full_kv(ref):
    def layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False):
        return ref.layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn=ffn, causal=causal)
    return layer_flops


def _layer_swiglu_two_matrices(ref):
    def layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False):
        return ref.layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=n_kv_heads, ffn="gelu", causal=causal)
    return layer_flops


def _lse_in_input_dtype(n, n_heads, dtype_bytes, materialized=True):
    return n * n * n_heads * dtype_bytes if materialized else n * n_heads * dtype_bytes


def _channel_last(images, patch_size):
    b, c, h, w = images.shape
    p = patch_size
    return (images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
            .reshape(b, (h // p) * (w // p), c * p * p))


def _floor_without_rounding(seconds, hop_s=0.01, stride=2):
    return -(-math.floor(seconds / hop_s) // stride)


CELLS = FUNCTIONS


def test_trusted_cases_pass_the_reference_and_cover_every_grade_cell(ref):
    verdicts = trusted_verdicts(with_mistake(ref))
    assert sorted(verdicts) == sorted(f"{name}_{kind}" for name in CELLS for kind in ("visible", "hidden"))
    assert all(why == "" for why in verdicts.values()), verdicts


@pytest.mark.parametrize("mistake, make, failing, reason", [
    ("causal pairs halved", lambda ref: {"attention_flops": _halved_causal}, {"attention_flops"}, "values differ"),
    ("n_q > n_k not clipped", lambda ref: {"attention_flops": _causal_without_clipping}, {"attention_flops"},
     "values differ"),
    ("heads forgotten", lambda ref: {"attention_flops": _one_head}, {"attention_flops"}, "values differ"),
    ("key/value projections at full width", lambda ref: {"layer_flops": _layer_full_kv(ref)}, {"layer_flops"},
     "values differ"),
    ("SwiGLU with two matrices", lambda ref: {"layer_flops": _layer_swiglu_two_matrices(ref)}, {"layer_flops"},
     "values differ"),
    ("log-sum-exp in the input dtype", lambda ref: {"attention_memory_bytes": _lse_in_input_dtype},
     {"attention_memory_bytes"}, "values differ"),
    ("channel last", lambda ref: {"patchify": _channel_last}, {"patchify"}, "values differ"),
    ("torch.nn.Unfold's layout without the transpose",
     lambda ref: {"patchify": lambda images, p: F.unfold(images, p, stride=p)}, {"patchify"},
     "calls F.unfold, nn.Unfold or Tensor.unfold"),
    ("torch.nn.Unfold, transposed: the layout is right, the shortcut forbidden",
     lambda ref: {"patchify": lambda images, p: torch.nn.Unfold(p, stride=p)(images).transpose(1, 2)},
     {"patchify"}, "calls F.unfold, nn.Unfold or Tensor.unfold"),
    ("a float count of the right value",
     lambda ref: {"attention_flops": lambda *args, **kw: float(ref.attention_flops(*args, **kw))},
     {"attention_flops"}, "must be an int"),
    ("no rounding before the floor", lambda ref: {"audio_tokens": _floor_without_rounding}, {"audio_tokens"},
     "values differ"),
    ("a dict instead of a count", lambda ref: {"audio_tokens": lambda seconds, **kw: {"tokens": 1}},
     {"audio_tokens"}, "must be an int"),
])
def test_trusted_cases_fail_a_mistake_in_its_cells_only(ref, mistake, make, failing, reason):
    """A library with one mistake loses exactly the points of that function, visible and hidden: the
    visible cells' cases are those of the notebook's checks, so a mistake the check reports costs
    the visible cell too."""
    verdicts = trusted_verdicts(with_mistake(ref, **make(ref)))
    lost = {grade_id for grade_id, why in verdicts.items() if why}
    assert lost == {f"{name}_{kind}" for name in failing for kind in ("visible", "hidden")}, (mistake, verdicts)
    assert any(reason in why for why in verdicts.values()), (mistake, verdicts)


def test_trusted_cases_take_any_integer_count(ref):
    """A NumPy integer or a 0-d integer tensor is a count too, as in the visible check."""
    def as_numpy(name):
        return lambda *args, **kwargs: np.int64(getattr(ref, name)(*args, **kwargs))

    verdicts = trusted_verdicts(with_mistake(
        ref, attention_flops=as_numpy("attention_flops"), audio_tokens=as_numpy("audio_tokens"),
        attention_memory_bytes=lambda *args, **kwargs: torch.tensor(ref.attention_memory_bytes(*args, **kwargs))))
    assert all(why == "" for why in verdicts.values()), verdicts


@pytest.mark.parametrize("mistake, make", [
    ("n_q > n_k not clipped", lambda ref: {"attention_flops": _causal_without_clipping}),
    ("key/value projections at full width", lambda ref: {"layer_flops": _layer_full_kv(ref)}),
    ("log-sum-exp in the input dtype", lambda ref: {"attention_memory_bytes": _lse_in_input_dtype}),
    ("channel last", lambda ref: {"patchify": _channel_last}),
    ("no rounding before the floor", lambda ref: {"audio_tokens": _floor_without_rounding}),
])
def test_the_notebook_check_and_the_trusted_visible_cases_agree(ref, mistake, make):
    """What the learner's visible check reports in the notebook, the grader's visible cell scores."""
    from attnlab import checks

    ((name, wrong),) = make(ref).items()
    with pytest.raises(AssertionError):
        getattr(checks, f"check_{name}")(wrong)
    assert trusted_verdicts(with_mistake(ref, **{name: wrong}))[f"{name}_visible"]
