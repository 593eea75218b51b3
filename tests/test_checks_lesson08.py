"""The visible checks of lesson 08 pass on the reference and fail, with the right diagnostic, on
typical wrong versions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab import checks
from tests.helpers import borrowed_reference, fails, load_stub

CHECKS = {
    "attention_flops": checks.check_attention_flops,
    "layer_flops": checks.check_layer_flops,
    "attention_memory_bytes": checks.check_attention_memory_bytes,
    "patchify": checks.check_patchify,
    "audio_tokens": checks.check_audio_tokens,
    "attention_overtakes_ffn": checks.check_attention_overtakes_ffn,
}


@pytest.fixture(scope="module")
def reference():
    yield from borrowed_reference("cost")


@pytest.fixture(scope="module")
def stub():
    return load_stub("cost")


def test_all_checks_pass_on_the_reference(reference, capsys):
    for name, check in CHECKS.items():
        check(getattr(reference, name))
    assert capsys.readouterr().out.strip().splitlines() == [
        "✓ attention_flops: 7 checks passed",
        "✓ layer_flops: 6 checks passed",
        "✓ attention_memory_bytes: 5 checks passed",
        "✓ patchify: 9 checks passed",
        "✓ audio_tokens: 7 checks passed",
        "✓ attention_overtakes_ffn: 8 checks passed",
    ]


@pytest.mark.parametrize("name", CHECKS)
def test_stub_not_implemented_error_passes_through_unchanged(stub, name):
    with pytest.raises(NotImplementedError) as caught:
        CHECKS[name](getattr(stub, name))
    assert str(caught.value).startswith(f"Lesson 08: {name}()")
    assert "attnlab.use_reference('cost')" in str(caught.value)


# ---------------------------------------------------------------------------- attention_flops


def one_product(n_q, n_k, d, n_heads=1, causal=False):
    return 2 * n_heads * n_q * n_k * d


def no_heads(n_q, n_k, d, n_heads=1, causal=False):
    return 4 * n_q * n_k * d


def halved(n_q, n_k, d, n_heads=1, causal=False):
    return 4 * n_heads * d * (n_q * n_k // 2 if causal else n_q * n_k)


def top_left(n_q, n_k, d, n_heads=1, causal=False):
    pairs = sum(min(n_k, i + 1) for i in range(n_q)) if causal else n_q * n_k
    return 4 * n_heads * d * pairs


def ignores_causal(n_q, n_k, d, n_heads=1, causal=False):
    return 4 * n_heads * n_q * n_k * d


def returns_text(n_q, n_k, d, n_heads=1, causal=False):
    return f"{4 * n_heads * n_q * n_k * d} FLOPs"


@pytest.mark.parametrize("wrong, patterns", [
    (one_product, [r"is 210, expected 420", "two products", "2 FLOPs per multiply-add"]),
    (no_heads, [r"several heads", "multiply by n_heads"]),
    (halved, [r"causal, n_q == n_k", "you halved n_q \\* n_k", r"n \(n \+ 1\) / 2"]),
    (top_left, [r"n_q < n_k", "top-left corner", "bottom-right"]),
    (ignores_causal, [r"causal=True is ignored"]),
    (returns_text, ["must be an int", "got str"]),
])
def test_attention_flops_mistakes(wrong, patterns):
    fails(checks.check_attention_flops, wrong, *patterns)


@pytest.mark.parametrize("as_count", [int, np.int64, lambda flops: torch.tensor(flops)],
                         ids=["int", "numpy int64", "0-d int64 tensor"])
def test_any_integer_count_passes(reference, capsys, as_count):
    checks.check_attention_flops(lambda *args, **kwargs: as_count(reference.attention_flops(*args, **kwargs)))
    assert capsys.readouterr().out.startswith("✓ attention_flops")


@pytest.mark.parametrize("as_float", [float, np.float64, lambda flops: torch.tensor(flops, dtype=torch.float64)],
                         ids=["float", "numpy float64", "0-d float64 tensor"])
def test_a_count_that_is_a_float_fails_though_it_is_whole(reference, as_float):
    fails(checks.check_attention_flops, lambda *args, **kwargs: as_float(reference.attention_flops(*args, **kwargs)),
          "must be an int, got float", "use //")


# ---------------------------------------------------------------------------- layer_flops


def layer_from(reference, change):
    def layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False):
        parts = dict(reference.layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=n_kv_heads, ffn=ffn,
                                           causal=causal))
        change(parts, n, d_model, d_ff, n_heads, n_kv_heads or n_heads, ffn)
        return parts
    return layer_flops


def kv_full_width(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["projections"] = 2 * n * d_model * 4 * d_model
    parts["total"] = parts["projections"] + parts["attention"] + parts["feedforward"]


def swiglu_two_matrices(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["feedforward"] = 2 * 2 * n * d_model * d_ff
    parts["total"] = parts["projections"] + parts["attention"] + parts["feedforward"]


def attention_with_d_model(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["attention"] = 4 * heads * n * n * d_model
    parts["total"] = parts["projections"] + parts["attention"] + parts["feedforward"]


def attention_with_kv_heads(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["attention"] = 4 * kv * n * n * (d_model // heads)
    parts["total"] = parts["projections"] + parts["attention"] + parts["feedforward"]


def no_output_projection(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["projections"] -= 2 * n * d_model * d_model
    parts["total"] = parts["projections"] + parts["attention"] + parts["feedforward"]


def total_forgets_attention(parts, n, d_model, d_ff, heads, kv, ffn):
    parts["total"] = parts["projections"] + parts["feedforward"]


def missing_total(parts, *args):
    del parts["total"]


@pytest.mark.parametrize("change, patterns", [
    (kv_full_width, [r"SwiGLU block, grouped-query", r"\[\"projections\"\]",
                     "key and value projections have d_model outputs"]),
    (swiglu_two_matrices, [r"\[\"feedforward\"\]", "three matrices"]),
    (attention_with_d_model, [r"\[\"attention\"\]", "head size d_model // n_heads"]),
    (attention_with_kv_heads, [r"grouped-query", "count n_heads heads, not n_kv_heads"]),
    (no_output_projection, ["count four projections"]),
    (total_forgets_attention, [r"\[\"total\"\]", "sum of projections, attention and feedforward"]),
    (missing_total, ["without \\['total'\\]", "needs the keys"]),
])
def test_layer_flops_mistakes(reference, change, patterns):
    fails(checks.check_layer_flops, layer_from(reference, change), *patterns)


def test_a_layer_that_ignores_causal_hears_that_and_nothing_about_heads(reference):
    """Without causal, its count equals "n_kv_heads instead of n_heads" when the two are equal:
    a hint whose count coincides with the right one, or another's, is never given."""
    def ignores_causal(n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False):
        return reference.layer_flops(n, d_model, d_ff, n_heads, n_kv_heads=n_kv_heads, ffn=ffn)

    message = fails(checks.check_layer_flops, ignores_causal, "causal self-attention", "causal=True is ignored")
    assert "n_kv_heads" not in message.split("expected")[-1]


def test_layer_flops_must_return_a_dict():
    fails(checks.check_layer_flops, lambda *args, **kwargs: 123, "must return a dict", "got a int")


# ---------------------------------------------------------------------------- attention_memory_bytes


@pytest.mark.parametrize("wrong, patterns", [
    (lambda n, h, b, materialized=True: n * n * b if materialized else n * h * 4,
     ["32 heads in bfloat16", "multiply by n_heads"]),
    (lambda n, h, b, materialized=True: n * n * h * b if materialized else n * h * b,
     ["not materialized", "float32 whatever the inputs' dtype"]),
    (lambda n, h, b, materialized=True: n * n * h * b,
     ["not materialized", "nothing of size n x n is stored"]),
])
def test_attention_memory_bytes_mistakes(wrong, patterns):
    fails(checks.check_attention_memory_bytes, wrong, *patterns)


# ---------------------------------------------------------------------------- patchify


def grid(images, p):
    b, c, h, w = images.shape
    return images.reshape(b, c, h // p, p, w // p, p), b, (h // p) * (w // p), c * p * p


def channels_last(images, p):
    g, b, n, size = grid(images, p)
    return g.permute(0, 2, 4, 3, 5, 1).reshape(b, n, size)


def columns_first(images, p):
    g, b, n, size = grid(images, p)
    return g.permute(0, 4, 2, 1, 3, 5).reshape(b, n, size)


def reshape_only(images, p):
    _, b, n, size = grid(images, p)
    return images.reshape(b, n, size)


def no_batch(images, p):
    g, b, n, size = grid(images, p)
    return g.permute(0, 2, 4, 1, 3, 5).reshape(n * b, size)


def upcasts(images, p):
    g, b, n, size = grid(images, p)
    return g.permute(0, 2, 4, 1, 3, 5).reshape(b, n, size).double()


def in_place(images, p):
    g, b, n, size = grid(images, p)
    out = g.permute(0, 2, 4, 1, 3, 5).reshape(b, n, size).clone()
    images.zero_()
    return out


def with_unfold(images, p):
    return torch.nn.Unfold(p, stride=p)(images).transpose(1, 2)


def with_tensor_unfold(images, p):
    b, c = images.shape[:2]
    return images.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)


def to_float(images, p):
    g, b, n, size = grid(images, p)
    return g.permute(0, 2, 4, 1, 3, 5).reshape(b, n, size) * 1.0


@pytest.mark.parametrize("wrong, patterns", [
    (with_unfold, ["one 4 x 4 image", r"calls F\.unfold, nn\.Unfold or Tensor\.unfold"]),
    (with_tensor_unfold, ["one 4 x 4 image", r"calls F\.unfold, nn\.Unfold or Tensor\.unfold"]),
    (to_float, ["uint8 pixels", "expected torch.uint8", "uint8 pixels stay uint8"]),
    (channels_last, ["RGB, not square", "channel first", "channel last"]),
    (columns_first, ["reading order", "rows first|each row of patches first"]),
    (reshape_only, ["a reshape alone mixes pixels"]),
    (no_batch, [r"has shape \(\d+, \d+\), expected", r"\(B, N, C\*P\*P\)"]),
    (upcasts, ["float32 kept", "dtype torch.float64, expected torch.float32"]),
    (in_place, ["changed its input in place", "images"]),
])
def test_patchify_mistakes(wrong, patterns):
    fails(checks.check_patchify, wrong, *patterns)


# ---------------------------------------------------------------------------- audio_tokens


def plain_floor(seconds, hop_s=0.01, stride=2):
    return -(-math.floor(seconds / hop_s) // stride)


def floor_of_tokens(seconds, hop_s=0.01, stride=2):
    return math.floor(round(seconds / hop_s, 6)) // stride


def rounds_frames(seconds, hop_s=0.01, stride=2):
    return -(-math.ceil(round(seconds / hop_s, 6)) // stride)


def ignores_stride(seconds, hop_s=0.01, stride=2):
    return math.floor(round(seconds / hop_s, 6))


@pytest.mark.parametrize("wrong, patterns", [
    (plain_floor, ["0.29 s -> 29 frames", "28.999999999999996", "round it"]),
    (floor_of_tokens, ["odd number of frames", "ceil\\(frames / stride\\)"]),
    (rounds_frames, ["partial frame", "fit entirely"]),
    (ignores_stride, ["Whisper", "divide the frames by the stride"]),
])
def test_audio_tokens_mistakes(wrong, patterns):
    fails(checks.check_audio_tokens, wrong, *patterns)


def test_check_references_agree_with_pytorch_on_a_million_tokens():
    """The checks' own references: FlopCounterMode on meta tensors, exact pair counts."""
    from attnlab.checks.lesson08 import reference_attention_flops, reference_layer_flops

    n = 10**6
    assert reference_attention_flops(n, n, 128, 16) == 4 * 16 * n * n * 128
    assert reference_attention_flops(n, n, 128, 16, causal=True) == 4 * 16 * 128 * (n * (n + 1) // 2)
    parts = reference_layer_flops(32768, 2048, 11008, 16, 2, "swiglu")
    assert parts["feedforward"] == 3 * 2 * 32768 * 2048 * 11008
    assert torch.empty(0, device="meta").device.type == "meta"


# ---------------------------------------------------------------------------- attention_overtakes_ffn (not graded)


def _matrices(ffn):
    return 2 if ffn == "gelu" else 3


def by_search(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    """A right answer written another way: a loop over n with the counts of the lesson's table."""
    n = 1
    while 4 * d_model * (n * (n + 1) // 2 if causal else n * n) < _matrices(ffn) * 2 * n * d_model * d_ff:
        n += 1
    return n


def as_numpy_int(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return np.int64(by_search(d_model, d_ff, n_heads, ffn, causal))


def n_is_d_model(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return d_model


def head_size_only(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return -(-_matrices(ffn) * d_ff * n_heads // 2)


def one_product_only(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return _matrices(ffn) * d_ff if not causal else 2 * _matrices(ffn) * d_ff - 1


def with_projections(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    n = 1
    while 4 * d_model * n * n < _matrices(ffn) * 2 * n * d_model * d_ff + 8 * n * d_model**2:
        n += 1
    return n


def always_gelu(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return by_search(d_model, d_ff, n_heads, "gelu", causal)


def ignores_causal_mask(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return by_search(d_model, d_ff, n_heads, ffn, False)


def rounds_down(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return by_search(d_model, d_ff, n_heads, ffn, causal) - (0 if causal else _matrices(ffn) * d_ff % 2)


def a_float(d_model, d_ff, n_heads, ffn="gelu", causal=False):
    return float(by_search(d_model, d_ff, n_heads, ffn, causal))


@pytest.mark.parametrize("right", [by_search, as_numpy_int], ids=["a search", "a numpy int"])
def test_any_correct_prediction_passes(right, capsys):
    checks.check_attention_overtakes_ffn(right)
    assert capsys.readouterr().out.startswith("✓ attention_overtakes_ffn: 8 checks passed")


@pytest.mark.parametrize("wrong, patterns", [
    (n_is_d_model, ["is 96, expected 320", "d_ff wide", "two products"]),
    (head_size_only, ["is 960, expected 320", "count every head", "heads cancels"]),
    (one_product_only, ["is 640, expected 320", "both of attention's products"]),
    (with_projections, ["is 512, expected 320", "feed-forward block alone"]),
    (always_gelu, ["SwiGLU block has three matrices"]),
    (ignores_causal_mask, ["causal=True", "about twice the length"]),
    (rounds_down, ["is 7, expected 8", "smallest n is wanted", "round up"]),
    (a_float, ["must be an int, got float"]),
])
def test_attention_overtakes_ffn_mistakes(wrong, patterns):
    fails(checks.check_attention_overtakes_ffn, wrong, *patterns)


def test_the_overtake_reference_is_a_count_not_a_formula():
    from attnlab.checks.lesson08 import reference_attention_overtakes_ffn

    for args in [(96, 320, 3, "gelu", False), (64, 5, 4, "swiglu", False), (128, 512, 2, "gelu", True),
                 (32, 33, 1, "swiglu", True)]:
        assert reference_attention_overtakes_ffn(*args) == by_search(*args)

