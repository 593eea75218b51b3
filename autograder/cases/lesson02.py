"""Trusted cases of lesson 02 (softmax, attention_numpy, scaled_dot_product_attention)."""

from __future__ import annotations

import numpy as np

from attnlab.shortcuts import forbidden
from autograder.cases import Case, Inputs

# The lesson asks learners to write these themselves; calling PyTorch's versions fails the case
# (the visible checks police the same table).
NO_SOFTMAX = forbidden("attention.softmax")
NO_SDPA = forbidden("attention.scaled_dot_product_attention")


def _softmax(grade_id: str, rng: np.random.Generator, shape, dim, dtype, spread=3.0, minus_inf=False, label=""):
    inputs = Inputs()
    x = (spread * rng.standard_normal(shape)).astype(dtype)
    if minus_inf:  # some masked entries, never a whole row along dim
        holes = rng.random(shape) < 0.3
        first = [slice(None)] * len(shape)
        first[dim] = 0
        holes[tuple(first)] = False
        x[holes] = -np.inf
    return Case(grade_id, "softmax", [inputs.add(x)], {"dim": dim}, inputs.arrays, label=label, forbidden=NO_SOFTMAX)


def _numpy_attention(grade_id, rng, batch, n_q, n_k, d, d_v, causal, dtype=np.float64, spread=1.0, label=""):
    inputs = Inputs()
    arrays = [(spread * rng.standard_normal((*batch, n, width))).astype(dtype)
              for n, width in ((n_q, d), (n_k, d), (n_k, d_v))]
    args = [inputs.add(a, as_="numpy") for a in arrays]
    # numpy_result: an answer in torch tensors fails, as the visible check says ("numpy only")
    return Case(grade_id, "attention_numpy", args, {"causal": causal}, inputs.arrays, recipe="numpy_result",
                label=label)


def _sdpa(grade_id, rng, q_batch, k_batch, n_q, n_k, d, d_v, dtype=np.float64, mask=None, scale=None,
          spread=1.0, exact_zeros=False, label=""):
    """A call of scaled_dot_product_attention; with ``exact_zeros``, also where its weights are
    exactly 0 (masked weights must be 0, not merely within a tolerance of it, as the visible check
    asserts)."""
    inputs = Inputs()
    q = (spread * rng.standard_normal((*q_batch, n_q, d))).astype(dtype)
    k = (spread * rng.standard_normal((*k_batch, n_k, d))).astype(dtype)
    v = rng.standard_normal((*k_batch, n_k, d_v)).astype(dtype)
    kwargs = {}
    if mask == "random":
        allowed = rng.random((n_q, n_k)) < 0.6
        allowed[np.arange(n_q), rng.integers(0, n_k, n_q)] = True  # every query sees a key
        kwargs["mask"] = inputs.add(allowed)
    elif mask == "causal":
        kwargs["mask"] = inputs.add(np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q))
    if scale is not None:
        kwargs["scale"] = scale
    recipe, options = ("exact_zeros", {"weights_at": 1}) if exact_zeros else ("call", {})
    return Case(grade_id, "scaled_dot_product_attention", [inputs.add(q), inputs.add(k), inputs.add(v)],
                kwargs, inputs.arrays, recipe=recipe, options=options, label=label, forbidden=NO_SDPA)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260202)
    found: list[Case] = [
        _softmax("softmax_visible", rng, (3, 5), -1, np.float64, label="values"),
        _softmax("softmax_visible", rng, (4, 3, 5), 1, np.float64, label="dim=1"),
        _softmax("softmax_visible", rng, (2, 6), -1, np.float32, label="float32 kept"),
        _softmax("softmax_visible", rng, (2, 4), -1, np.float64, spread=1000.0, label="large scores"),
    ]
    for index in range(6):
        shape = tuple(int(n) for n in rng.integers(1, 7, size=int(rng.integers(1, 4))))
        dim = int(rng.integers(-len(shape), len(shape)))
        dtype = (np.float32, np.float64)[index % 2]
        found.append(_softmax("softmax_hidden", rng, shape, dim, dtype, spread=(1.0, 1e4)[index % 3 == 0],
                              minus_inf=index in (1, 4), label=f"hidden {index}"))

    found += [
        _numpy_attention("attention_numpy_visible", rng, (), 4, 6, 8, 3, False, label="plain"),
        _numpy_attention("attention_numpy_visible", rng, (), 5, 5, 4, 2, True, label="causal"),
        _numpy_attention("attention_numpy_visible", rng, (2, 3), 3, 4, 5, 2, False, label="batched"),
    ]
    for index in range(6):
        n_k = int(rng.integers(2, 9))
        n_q = int(rng.integers(1, n_k + 1))
        batch = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        found.append(_numpy_attention("attention_numpy_hidden", rng, batch, n_q, n_k, int(rng.integers(1, 9)),
                                      int(rng.integers(1, 6)), causal=bool(index % 2),
                                      spread=(1.0, 30.0)[index == 4], label=f"hidden {index}"))

    found += [
        _sdpa("sdpa_visible", rng, (2,), (2,), 3, 5, 4, 6, label="plain"),
        _sdpa("sdpa_visible", rng, (2,), (2,), 4, 4, 8, 3, mask="causal", label="causal mask"),
        _sdpa("sdpa_visible", rng, (), (), 3, 6, 4, 2, mask="random", scale=0.3, label="mask and scale"),
        _sdpa("sdpa_visible", rng, (2,), (2,), 3, 4, 5, 2, dtype=np.float32, label="float32 kept"),
    ]
    for index in range(8):
        n_q, n_k = (int(n) for n in rng.integers(1, 10, size=2))
        q_batch = tuple(int(b) for b in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        k_batch = (1,) * len(q_batch) if index == 3 else q_batch  # broadcasting
        found.append(_sdpa(
            "sdpa_hidden", rng, q_batch, k_batch, n_q, n_k, int(rng.integers(1, 17)), int(rng.integers(1, 9)),
            dtype=(np.float64, np.float32)[index % 2], mask=("random", None, "causal" if n_q <= n_k else None)[index % 3],
            scale=(None, 0.05, None, 2.0)[index % 4], spread=(1.0, 40.0)[index == 5], label=f"hidden {index}",
        ))
    found += [
        _sdpa("sdpa_hidden", rng, (2,), (2,), 5, 7, 4, 3, mask="random", exact_zeros=True,
              label="masked weights exactly 0"),
        _numpy_attention("attention_numpy_hidden", rng, (2,), 3, 5, 4, 2, False, spread=1000.0,
                         label="scores in the thousands"),
    ]
    return found
