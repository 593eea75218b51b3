"""Trusted cases of lesson 08 (attention_flops, layer_flops, attention_memory_bytes, patchify,
audio_tokens).

The cases of each ``..._visible`` cell are those of the notebook's visible check (``attnlab.checks``,
lesson 08), so that a mistake the check reports also costs that cell here; the ``..._hidden`` cells
add random sizes, causal and grouped-query variants and edge cases.

Counts go through the ``cost_count`` recipe (``autograder.recipes``): a count must be an int (a
float, even a whole one, fails the case, as in the visible check), and comes back as a float64;
``layer_flops``'s dict comes back as a tuple in the order of ``LAYER_PARTS``. ``patchify`` may not
cut its patches with PyTorch's unfold or pixel_unshuffle (``attnlab.shortcuts``), and is called in
float64, float32, float16, bfloat16 (through the ``positions_bfloat16`` recipe: numpy has no
bfloat16) and on uint8 pixels, as the visible check does.
"""

from __future__ import annotations

import numpy as np

from attnlab.shortcuts import forbidden
from autograder.cases import Case, Inputs

NO_UNFOLD = forbidden("cost.patchify")

LAYER_PARTS = ["projections", "attention", "feedforward", "total"]


def _count(grade_id: str, target: str, args: list, kwargs: dict | None = None, label: str = "",
           keys: list[str] | None = None) -> Case:
    return Case(grade_id, target, list(args), dict(kwargs or {}), recipe="cost_count",
                options={"keys": keys} if keys else {}, label=label)


def _attention(grade_id, n_q, n_k, d, n_heads=1, causal=False, label=""):
    return _count(grade_id, "attention_flops", [n_q, n_k, d], {"n_heads": n_heads, "causal": causal},
                  label=label)


def _layer(grade_id, n, d_model, d_ff, n_heads, n_kv_heads=None, ffn="gelu", causal=False, label=""):
    kwargs = {"ffn": ffn, "causal": causal}
    if n_kv_heads is not None:
        kwargs["n_kv_heads"] = n_kv_heads
    return _count(grade_id, "layer_flops", [n, d_model, d_ff, n_heads], kwargs, label=label, keys=LAYER_PARTS)


def _patchify(grade_id, rng, shape, patch_size, dtype="float64", label=""):
    """dtype: a numpy dtype name, or "bfloat16" (float32 images cast by the recipe)."""
    inputs = Inputs()
    travels_as = "float32" if dtype == "bfloat16" else dtype
    if np.dtype(travels_as).kind == "u":
        images = rng.integers(0, 256, size=shape).astype(travels_as)
    else:
        images = rng.standard_normal(shape).astype(travels_as)
    return Case(grade_id, "patchify", [inputs.add(images), patch_size], {}, inputs.arrays, label=label,
                recipe="positions_bfloat16" if dtype == "bfloat16" else "call", forbidden=NO_UNFOLD)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260808)
    found: list[Case] = [
        _attention("attention_flops_visible", 5, 7, 3, label="one head"),
        _attention("attention_flops_visible", 9, 4, 8, 6, label="several heads"),
        _attention("attention_flops_visible", 6, 6, 4, 2, causal=True, label="causal"),
        _attention("attention_flops_visible", 3, 8, 5, causal=True, label="causal, n_q < n_k"),
        _attention("attention_flops_visible", 7, 4, 2, 3, causal=True, label="causal, n_q > n_k"),
        _attention("attention_flops_visible", 10**6, 10**6, 128, 16, label="a million tokens"),
        _attention("attention_flops_visible", 10**6, 10**6, 128, 16, causal=True, label="a million tokens, causal"),
    ]
    for index in range(8):
        n_q, n_k = (int(n) for n in rng.integers(1, 3000, size=2))
        if index == 5:
            n_q = n_k  # square causal
        if index == 6:
            n_q, n_k = n_k + 17, n_k  # more queries than keys: the first see nothing
        found.append(_attention("attention_flops_hidden", n_q, n_k, int(rng.integers(1, 257)),
                                int(rng.integers(1, 65)), causal=bool(index % 2 or index == 6),
                                label=f"hidden {index}"))
    found.append(_attention("attention_flops_hidden", 1, 1, 1, label="smallest"))
    found.append(_attention("attention_flops_hidden", 131071, 131071, 128, 40, causal=True,
                            label="131071 tokens, causal"))

    found += [
        _layer("layer_flops_visible", 37, 48, 96, 4, label="GELU, multi-head"),
        _layer("layer_flops_visible", 29, 64, 80, 8, n_kv_heads=2, ffn="swiglu", label="SwiGLU, GQA"),
        _layer("layer_flops_visible", 11, 24, 40, 6, n_kv_heads=1, ffn="swiglu", label="multi-query"),
        _layer("layer_flops_visible", 13, 32, 64, 2, causal=True, label="causal"),
        _layer("layer_flops_visible", 21, 48, 72, 6, n_kv_heads=3, ffn="swiglu", causal=True,
               label="causal, grouped-query"),
        _layer("layer_flops_visible", 32768, 2048, 11008, 16, n_kv_heads=2, ffn="swiglu", label="Qwen2.5-3B"),
    ]
    for index in range(8):
        head = int(rng.integers(1, 129))
        n_heads = int(rng.choice([1, 2, 3, 4, 6, 8, 12, 16]))
        n_kv = int(rng.choice([g for g in range(1, n_heads + 1) if n_heads % g == 0]))
        found.append(_layer(
            "layer_flops_hidden", int(rng.integers(1, 40000)), head * n_heads, int(rng.integers(1, 20000)),
            n_heads, n_kv_heads=(None, n_kv)[index % 2], ffn=("gelu", "swiglu")[index % 3 == 1],
            causal=index in (2, 5), label=f"hidden {index}"))

    found += [
        _count("attention_memory_bytes_visible", "attention_memory_bytes", [1000, 1, 4],
               label="one head, float32"),
        _count("attention_memory_bytes_visible", "attention_memory_bytes", [4096, 32, 2],
               label="32 heads, bfloat16"),
        _count("attention_memory_bytes_visible", "attention_memory_bytes", [10**6, 2, 8],
               label="a million tokens, float64"),
        _count("attention_memory_bytes_visible", "attention_memory_bytes", [4096, 32, 2], {"materialized": False},
               label="not materialized"),
        _count("attention_memory_bytes_visible", "attention_memory_bytes", [777, 3, 8], {"materialized": False},
               label="not materialized, float64"),
    ]
    for index in range(6):
        found.append(_count(
            "attention_memory_bytes_hidden", "attention_memory_bytes",
            [int(rng.integers(1, 10**6)), int(rng.integers(1, 65)), int(rng.choice([1, 2, 4, 8]))],
            {"materialized": bool(index % 2)}, label=f"hidden {index}"))

    found += [
        _patchify("patchify_visible", rng, (1, 1, 4, 4), 2, label="one channel"),
        _patchify("patchify_visible", rng, (2, 3, 8, 12), 4, label="RGB, not square"),
        _patchify("patchify_visible", rng, (1, 2, 3, 5), 1, label="P=1"),
        _patchify("patchify_visible", rng, (2, 3, 6, 6), 6, label="one patch"),
        _patchify("patchify_visible", rng, (1, 3, 16, 16), 8, "float32", label="float32"),
        _patchify("patchify_visible", rng, (2, 2, 6, 4), 2, "float16", label="float16"),
        _patchify("patchify_visible", rng, (1, 4, 8, 8), 2, "bfloat16", label="bfloat16"),
        _patchify("patchify_visible", rng, (2, 3, 9, 6), 3, "uint8", label="uint8 pixels"),
        _patchify("patchify_visible", rng, (1, 3, 224, 224), 16, "float32", label="224 x 224, P=16"),
    ]
    for index in range(10):
        p = int(rng.integers(1, 7))
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)), p * int(rng.integers(1, 6)),
                 p * int(rng.integers(1, 6)))
        dtype = ("float64", "float32", "float16", "uint8", "bfloat16")[index % 5]
        found.append(_patchify("patchify_hidden", rng, shape, p, dtype, label=f"hidden {index}"))
    found.append(_patchify("patchify_hidden", rng, (2, 3, 384, 384), 16, "uint8", label="384 x 384 pixels, P=16"))

    found += [
        _count("audio_tokens_visible", "audio_tokens", [30.0], label="Whisper, 30 s"),
        _count("audio_tokens_visible", "audio_tokens", [30.0], {"stride": 1}, label="frames"),
        _count("audio_tokens_visible", "audio_tokens", [0.29], {"stride": 1}, label="0.29 s: floating point"),
        _count("audio_tokens_visible", "audio_tokens", [0.095], {"stride": 1}, label="a partial frame"),
        _count("audio_tokens_visible", "audio_tokens", [0.05], label="odd frame count"),
        _count("audio_tokens_visible", "audio_tokens", [12.8], {"hop_s": 0.02, "stride": 4}, label="other hop"),
        _count("audio_tokens_visible", "audio_tokens", [0.0], label="no sound"),
    ]
    for index, (seconds, hop, stride) in enumerate(
            [(12.345, 0.01, 2), (7.0, 0.02, 3), (0.0, 0.01, 2), (600.0, 0.01, 2), (1.5, 0.025, 1),
             (9.99, 0.01, 4), (45.6, 0.015, 2), (4.35, 0.01, 1), (2.03, 0.01, 1)]):
        found.append(_count("audio_tokens_hidden", "audio_tokens", [seconds], {"hop_s": hop, "stride": stride},
                            label=f"hidden {index}"))
    return found
