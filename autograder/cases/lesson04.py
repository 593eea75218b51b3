"""Trusted cases of lesson 04 (split_heads, merge_heads, repeat_kv, MultiHeadAttention, KVCache,
kv_cache_bytes)."""

from __future__ import annotations

import numpy as np

from autograder.cases import Case, Inputs


def _draw(rng, *shape, dtype=np.float32, spread=1.0):
    return (spread * rng.standard_normal(shape)).astype(dtype)


def _split(grade_id, rng, lead, n, n_heads, h, dtype=np.float64, label=""):
    inputs = Inputs()
    x = _draw(rng, *lead, n, n_heads * h, dtype=dtype)
    return Case(grade_id, "split_heads", [inputs.add(x), n_heads], {}, inputs.arrays, label=label)


def _merge(grade_id, rng, lead, n_heads, n, h, dtype=np.float64, label=""):
    inputs = Inputs()
    x = _draw(rng, *lead, n_heads, n, h, dtype=dtype)
    return Case(grade_id, "merge_heads", [inputs.add(x)], {}, inputs.arrays, label=label)


def _repeat(grade_id, rng, lead, n_kv, n, h, n_rep, dtype=np.float64, label=""):
    inputs = Inputs()
    k = _draw(rng, *lead, n_kv, n, h, dtype=dtype)
    return Case(grade_id, "repeat_kv", [inputs.add(k), n_rep], {}, inputs.arrays, label=label)


def _parameters(rng, inputs, d_model, n_heads, n_kv_heads, bias):
    h = d_model // n_heads
    shapes = {"q_proj": (n_heads * h, d_model), "k_proj": (n_kv_heads * h, d_model),
              "v_proj": (n_kv_heads * h, d_model), "o_proj": (d_model, n_heads * h)}
    found = {}
    for name, shape in shapes.items():
        found[f"{name}.weight"] = inputs.add(_draw(rng, *shape, spread=shape[1] ** -0.5))["array"]
        if bias:
            found[f"{name}.bias"] = inputs.add(_draw(rng, shape[0], spread=0.1))["array"]
    return found


def _attention(grade_id, rng, batch, n, d_model, n_heads, n_kv_heads=None, bias=False, *, memory=None,
               mask=None, causal=False, head_mask=False, rope_base=None, positions=None, label=""):
    """A MultiHeadAttention call returning (out, weights). mask: None, "padding", "random" or
    "empty row" (one query allowed no key at all)."""
    inputs = Inputs()
    kv = n_heads if n_kv_heads is None else n_kv_heads
    init = {"d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "bias": bias, "rope_base": rope_base}
    parameters = _parameters(rng, inputs, d_model, n_heads, kv, bias)
    x = inputs.add(_draw(rng, batch, n, d_model))
    kwargs: dict = {"return_weights": True, "causal": causal}
    n_k = n if memory is None else memory
    if memory is not None:
        kwargs["memory"] = inputs.add(_draw(rng, batch, memory, d_model))
    if mask == "padding":
        lengths = rng.integers(1, n_k + 1, size=batch)
        lengths[0] = n_k
        kwargs["mask"] = inputs.add((np.arange(n_k) < lengths[:, None])[:, None, None, :])
    elif mask in ("random", "empty row"):
        allowed = rng.random((n, n_k)) < 0.6
        allowed[np.arange(n), rng.integers(0, n_k, n)] = True
        if mask == "empty row":
            allowed[n // 2] = False
        kwargs["mask"] = inputs.add(allowed)
    if head_mask:
        kwargs["head_mask"] = inputs.add(rng.choice([0.0, 0.5, 1.0], size=n_heads).astype(np.float32))
    if positions is not None:
        kwargs["positions"] = inputs.add(np.asarray(positions, dtype=np.int64))
    return Case(grade_id, "MultiHeadAttention", [x], kwargs, inputs.arrays, recipe="module", init=init,
                parameters=parameters, label=label)


def _bad_heads(grade_id, init, label):
    return Case(grade_id, "MultiHeadAttention", [], {}, {}, recipe="raises_value_error", init=init, label=label)


def _decode(grade_id, rng, batch, chunks, d_model, n_heads, n_kv_heads=None, bias=True, rope_base=None,
            memory=None, label=""):
    inputs = Inputs()
    kv = n_heads if n_kv_heads is None else n_kv_heads
    init = {"d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "bias": bias, "rope_base": rope_base}
    parameters = _parameters(rng, inputs, d_model, n_heads, kv, bias)
    x = inputs.add(_draw(rng, batch, sum(chunks), d_model))
    kwargs = {"causal": True} if memory is None else {"memory": inputs.add(_draw(rng, batch, memory, d_model))}
    return Case(grade_id, "MultiHeadAttention", [x], kwargs, inputs.arrays, recipe="decode_with_cache", init=init,
                parameters=parameters, options={"chunks": list(chunks)}, label=label)


def _appends(grade_id, rng, batch, n_kv, h, news, dtype=np.float32, label=""):
    inputs = Inputs()
    args = []
    for n_new in news:
        args += [inputs.add(_draw(rng, batch, n_kv, n_new, h, dtype=dtype)),
                 inputs.add(_draw(rng, batch, n_kv, n_new, h, dtype=dtype))]
    return Case(grade_id, "KVCache", args, {}, inputs.arrays, recipe="kv_cache_appends", label=label)


def _bytes(grade_id, n_layers, n_kv_heads, head_dim, seq_len, dtype_bytes, batch=None, label=""):
    kwargs = {} if batch is None else {"batch": batch}
    return Case(grade_id, "kv_cache_bytes", [n_layers, n_kv_heads, head_dim, seq_len, dtype_bytes], kwargs, {},
                label=label)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260404)
    found: list[Case] = [
        _split("split_merge_visible", rng, (), 5, 3, 4, label="split (5, 12) into 3 heads"),
        _split("split_merge_visible", rng, (2, 3), 7, 2, 4, label="split, two batch dimensions"),
        _merge("split_merge_visible", rng, (2,), 3, 5, 4, label="merge 3 heads"),
    ]
    for index in range(6):
        lead = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        n, heads, h = (int(v) for v in rng.integers(1, 8, size=3))
        dtype = (np.float32, np.float64)[index % 2]
        found.append(_split("split_merge_hidden", rng, lead, n, heads, h, dtype, label=f"hidden split {index}"))
        found.append(_merge("split_merge_hidden", rng, lead, heads, n, h, dtype, label=f"hidden merge {index}"))

    found += [
        _repeat("repeat_kv_visible", rng, (2,), 2, 5, 3, 3, label="2 KV heads, n_rep=3"),
        _repeat("repeat_kv_visible", rng, (2,), 1, 4, 8, 4, label="multi-query"),
        _repeat("repeat_kv_visible", rng, (3,), 4, 5, 2, 1, label="n_rep=1"),
    ]
    for index in range(5):
        lead = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        n_kv, n, h, n_rep = (int(v) for v in rng.integers(1, 6, size=4))
        found.append(_repeat("repeat_kv_hidden", rng, lead, n_kv, n, h, n_rep,
                             (np.float32, np.float64)[index % 2], label=f"hidden {index}"))

    found += [
        _attention("mha_visible", rng, 2, 6, 12, 3, label="multi-head, no bias"),
        _attention("mha_visible", rng, 2, 6, 12, 3, bias=True, mask="padding", label="biases, padding mask"),
        _attention("mha_visible", rng, 2, 7, 16, 4, 2, causal=True, label="grouped-query, causal"),
        _attention("mha_visible", rng, 2, 3, 16, 4, 2, memory=6, causal=True, label="cross-attention"),
        _attention("mha_visible", rng, 2, 5, 12, 3, bias=True, head_mask=True, label="head_mask"),
        _bad_heads("mha_visible", {"d_model": 10, "n_heads": 3}, "d_model not divisible by n_heads"),
    ]
    combos = [(24, 6, 3), (20, 5, 1), (18, 3, None), (32, 8, 2), (12, 4, 4), (30, 6, 2), (16, 2, 1), (28, 7, None)]
    for index, (d_model, n_heads, n_kv) in enumerate(combos):
        n = int(rng.integers(1, 10))
        memory = int(rng.integers(1, 10)) if index in (2, 5) else None
        found.append(_attention(
            "mha_hidden", rng, int(rng.integers(1, 4)), n, d_model, n_heads, n_kv, bias=bool(index % 2),
            memory=memory, mask=("random", "padding", None, "empty row")[index % 4], causal=index % 3 != 1,
            head_mask=index in (3, 6), rope_base=(None, 10000.0, None, 500.0)[index % 4] if d_model // n_heads % 2 == 0
            else None, label=f"hidden {index}: d_model={d_model}, heads={n_heads}, kv={n_kv}, n={n}, memory={memory}"))
    found += [
        _attention("mha_hidden", rng, 2, 5, 16, 4, 2, causal=True, rope_base=10000.0, positions=[7, 8, 9, 10, 11],
                   label="rotary positions starting at 7"),
        # Positions with gaps, one row per sequence (as with left padding): ignoring them, or not
        # broadcasting (b, n) over the heads, changes the scores. Its own generator keeps the
        # other cases' inputs as they were.
        _attention("mha_hidden", np.random.default_rng(20260414), 2, 6, 24, 4, 2, causal=True, rope_base=500.0,
                   positions=[[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3]], label="rotary positions (b, n) with gaps"),
        _bad_heads("mha_hidden", {"d_model": 12, "n_heads": 5}, "d_model not divisible by n_heads"),
        _bad_heads("mha_hidden", {"d_model": 24, "n_heads": 6, "n_kv_heads": 4}, "n_heads not a multiple of n_kv_heads"),
        _bad_heads("mha_hidden", {"d_model": 24, "n_heads": 6, "n_kv_heads": 0}, "no key/value heads"),
    ]

    found += [
        _appends("kv_cache_visible", rng, 2, 3, 5, (4, 1), label="4 tokens, then 1"),
        _appends("kv_cache_visible", rng, 1, 1, 8, (1, 1, 1), label="one token at a time"),
        _decode("kv_cache_visible", rng, 2, (1,) * 6, 16, 4, label="decoding one token at a time"),
        _decode("kv_cache_visible", rng, 2, (4, 1, 1), 16, 4, 2, label="prompt, then tokens, grouped-query"),
    ]
    for index in range(3):
        found.append(_appends("kv_cache_hidden", rng, int(rng.integers(1, 4)), int(rng.integers(1, 4)),
                              int(rng.integers(1, 9)), tuple(int(v) for v in rng.integers(1, 6, size=3)),
                              dtype=(np.float32, np.float64)[index % 2], label=f"hidden appends {index}"))
    found += [
        _decode("kv_cache_hidden", rng, 3, (5, 1, 1, 2, 1), 24, 6, 3, label="prompt of 5, GQA 6/3"),
        _decode("kv_cache_hidden", rng, 1, (2, 3, 1), 20, 5, 1, bias=False, label="multi-query, chunks 2, 3, 1"),
        _decode("kv_cache_hidden", rng, 2, (3, 1, 1, 1), 16, 4, 2, rope_base=10000.0,
                label="rotary: positions continue where the cache ends"),
        _decode("kv_cache_hidden", rng, 2, (1, 1, 1), 16, 4, 2, memory=5, label="cross-attention cache"),
    ]

    found += [
        _bytes("kv_cache_bytes_visible", 3, 2, 8, 10, 4, label="float32"),
        _bytes("kv_cache_bytes_visible", 2, 4, 16, 7, 2, batch=3, label="bfloat16, batch 3"),
    ]
    for index in range(4):
        values = [int(v) for v in rng.integers(1, 50, size=4)]
        found.append(_bytes("kv_cache_bytes_hidden", *values, int(rng.choice([1, 2, 4, 8])),
                            batch=None if index == 0 else int(rng.integers(1, 9)), label=f"hidden {index}"))
    found += [
        _bytes("kv_cache_bytes_hidden", 36, 2, 128, 32768, 2, label="Qwen2.5-3B at 32k tokens, bfloat16"),
        _bytes("kv_cache_bytes_hidden", 4, 2, 8, 0, 2, batch=2, label="empty"),
    ]
    return found
