"""Trusted cases of lesson 05 (sinusoidal_encoding, rope_angles, apply_rope).

Hidden cases vary what a hard-coded answer cannot: sizes, positions that do not start at 0 or are
scattered, batched positions, both layouts, bases from 100 to 1,000,000, integer dtypes of the
positions, float64/float32/float16/bfloat16 inputs, and RoPE inside the reference
``MultiHeadAttention`` decoding chunk by chunk with a KV cache (new positions continue from the
cache's length).
"""

from __future__ import annotations

import numpy as np

from autograder.cases import Case, Inputs


def _sinusoidal(grade_id, n_positions, d_model, label=""):
    return Case(grade_id, "sinusoidal_encoding", [int(n_positions), int(d_model)], {}, {}, label=label)


def _angles(grade_id, positions: np.ndarray, head_dim, base=None, label=""):
    inputs = Inputs()
    kwargs = {} if base is None else {"base": float(base)}
    return Case(grade_id, "rope_angles", [inputs.add(positions), int(head_dim)], kwargs, inputs.arrays, label=label)


def _rope(grade_id, rng, shape, positions: np.ndarray, base=None, layout=None, dtype=np.float64, spread=1.0,
          label=""):
    """apply_rope on x of ``shape``; bfloat16 travels as float32 and is cast by the recipe."""
    inputs = Inputs()
    travel = np.float32 if dtype == "bfloat16" else dtype
    x = (spread * rng.standard_normal(shape)).astype(travel)
    kwargs = {}
    if base is not None:
        kwargs["base"] = float(base)
    if layout is not None:
        kwargs["layout"] = layout
    args = [inputs.add(x), inputs.add(positions)]
    if dtype == "bfloat16":
        return Case(grade_id, "apply_rope", args, kwargs, inputs.arrays, recipe="positions_bfloat16", label=label)
    return Case(grade_id, "apply_rope", args, kwargs, inputs.arrays, label=label)


def _attention_with_cache(grade_id, rng, batch, chunks, d_model, n_heads, n_kv_heads, base, label=""):
    """The reference MultiHeadAttention with rope_base, fed chunk by chunk with a KV cache: the
    rotation (the learner's apply_rope) must continue the positions from the cache's length."""
    inputs = Inputs()
    h = d_model // n_heads
    shapes = {"q_proj": (n_heads * h, d_model), "k_proj": (n_kv_heads * h, d_model),
              "v_proj": (n_kv_heads * h, d_model), "o_proj": (d_model, n_heads * h)}
    parameters = {f"{name}.weight": inputs.add(rng.standard_normal(shape) / np.sqrt(shape[1]))["array"]
                  for name, shape in shapes.items()}
    x = inputs.add(rng.standard_normal((batch, sum(chunks), d_model)))
    return Case(grade_id, "apply_rope", [x], {}, inputs.arrays, recipe="rope_attention_with_cache",
                init={"d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "rope_base": float(base)},
                parameters=parameters, options={"chunks": list(chunks)}, label=label)


def _positions(rng, kind, n, lead=()):
    if kind == "from 0":
        found = np.broadcast_to(np.arange(n), (*lead, n))
    elif kind == "offset":
        found = np.broadcast_to(np.arange(n) + rng.integers(1, 5000), (*lead, n))
    elif kind == "scattered":
        found = rng.integers(0, 3000, size=(*lead, n))
    else:  # one offset per sequence of a batch
        found = np.arange(n) + rng.integers(0, 500, size=(*lead, 1))
    return np.ascontiguousarray(found).astype(np.int64)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260505)

    found: list[Case] = [
        _sinusoidal("sinusoidal_visible", 50, 16, label="50 positions, d_model=16"),
        _sinusoidal("sinusoidal_visible", 9, 6, label="d_model=6"),
        _sinusoidal("sinusoidal_visible", 1, 2, label="one position"),
    ]
    for index in range(6):
        found.append(_sinusoidal("sinusoidal_hidden", int(rng.integers(1, 48)), 2 * int(rng.integers(1, 33)),
                                 label=f"hidden {index}"))

    found += [
        _angles("rope_angles_visible", np.arange(6), 8, label="positions 0..5"),
        _angles("rope_angles_visible", np.array([7, 8, 9, 30]), 6, label="positions 7, 8, 9, 30"),
        _angles("rope_angles_visible", np.array([[0, 1, 2], [40, 41, 42]]), 16, 1e6, label="batched, base 1e6"),
        _angles("rope_angles_visible", np.array([0, 1000, 65535]), 128, 1e6, label="large positions"),
    ]
    kinds = ("from 0", "offset", "scattered", "per sequence")
    for index in range(8):
        n = int(rng.integers(1, 20))
        lead = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        positions = _positions(rng, kinds[index % 4], n, lead)
        if index == 5:
            positions = positions.astype(np.int32)
        base = (None, 1e6, 500000.0, 100.0)[index % 4]
        found.append(_angles("rope_angles_hidden", positions, 2 * int(rng.integers(1, 65)), base,
                             label=f"hidden {index}"))

    found += [
        _rope("apply_rope_visible", rng, (7, 8), np.arange(7), layout="half", label="half layout"),
        _rope("apply_rope_visible", rng, (7, 8), np.arange(7), layout="interleaved", label="interleaved layout"),
        _rope("apply_rope_visible", rng, (2, 3, 5, 12), np.arange(40, 45), label="positions 40..44"),
        _rope("apply_rope_visible", rng, (4, 16), np.array([3, 0, 900, 17]), base=1e6, layout="interleaved",
              label="base 1e6, scattered positions"),
        _rope("apply_rope_visible", rng, (2, 6, 8), np.arange(6), dtype=np.float32, label="float32 kept"),
    ]
    dtypes = (np.float64, np.float32, np.float64, np.float16, "bfloat16", np.float32, np.float64, np.float64)
    for index, dtype in enumerate(dtypes):
        n = int(rng.integers(1, 14))
        h = 2 * int(rng.integers(1, 17))
        batch = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        kind = kinds[index % 4]
        if kind == "per sequence" and batch:  # (batch, 1, n) against x (batch, heads, n, h)
            shape, positions = (batch[0], 3, n, h), _positions(rng, kind, n, (batch[0], 1))
        else:
            shape, positions = (*batch, n, h), _positions(rng, kind, n)
        found.append(_rope("apply_rope_hidden", rng, shape, positions,
                           base=(None, 1e6, 10000.0, 500000.0)[index % 4],
                           layout=("half", "interleaved")[index % 2] if index != 2 else None,
                           dtype=dtype, spread=(1.0, 50.0)[index == 6], label=f"hidden {index}"))
    found += [
        _attention_with_cache("apply_rope_hidden", rng, 2, (5, 1, 1, 3), 24, 4, 2, 10000.0,
                              label="attention decoding with a KV cache (GQA)"),
        _attention_with_cache("apply_rope_hidden", rng, 1, (3, 4, 2), 16, 2, 2, 1e6,
                              label="attention decoding with a KV cache, base 1e6"),
    ]
    return found
