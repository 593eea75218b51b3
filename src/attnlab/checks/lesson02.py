"""Visible checks of lesson 02: ``check_softmax``, ``check_attention_numpy``,
``check_scaled_dot_product_attention``."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from attnlab.shortcuts import police
from attnlab.checks.common import (  # noqa: F401 (shared assertions and references)
    Array,
    _as_float64,
    _seeded,
    _shape,
    assert_close,
    assert_dtype,
    assert_finite,
    assert_nonnegative,
    assert_not_modified,
    assert_pair,
    assert_rows_sum_to_one,
    assert_shape,
    assert_zero_where,
    causal_allowed,
    explain_mismatch,
    reference_attention,
    reference_softmax,
    run_checks,
)

__all__ = ["check_attention_numpy", "check_scaled_dot_product_attention", "check_softmax"]

# --------------------------------------------------------------------------------------------
# Lesson 02: softmax, attention_numpy, scaled_dot_product_attention
# --------------------------------------------------------------------------------------------

_MAX_HINT = "subtract the maximum before exp"


def check_softmax(fn: Callable) -> None:
    """Check a stable ``softmax(x, dim=-1)``: values, normalisation, dim, dtype, extremes, inputs,
    and no call of PyTorch's softmax (the trusted cases forbid it too)."""
    fn = police(fn, "attention.softmax")

    def matches_torch():
        x = torch.randn(3, 5, generator=_seeded(0), dtype=torch.float64)
        y = assert_not_modified(fn, x)
        assert_shape(y, x.shape, what="softmax(x)", meaning="x.shape")
        exps = torch.exp(x - x.amax(dim=-1, keepdim=True))
        hint = explain_mismatch(y, {
            "you divided by the largest exp, not by the sum of the exps along dim":
                exps / exps.amax(dim=-1, keepdim=True),
            "did you normalise over the wrong dimension?": reference_softmax(x, 0),
        }) or "divide exp(x - max) by its sum along dim (keepdim=True)"
        assert_rows_sum_to_one(y, dim=-1, what="the entries of softmax(x)", axis="the last axis",
                               hint=hint)
        assert_close(y, reference_softmax(x), what="softmax(x)",
                     hint="softmax(x) is exp(x - max) / sum(exp(x - max)) along dim")

    def probabilities():
        x = 4 * torch.randn(4, 6, generator=_seeded(1), dtype=torch.float64)
        y = fn(x)
        assert_nonnegative(y, what="softmax(x)")
        assert_rows_sum_to_one(y, dim=-1, what="the entries of softmax(x)", axis="the last axis")

    def other_dims():
        x = torch.randn(4, 3, 5, generator=_seeded(2), dtype=torch.float64)
        for dim in (0, 1, -2):
            y = fn(x, dim=dim)
            assert_shape(y, x.shape, what=f"softmax(x, dim={dim})", meaning="x.shape")
            assert_rows_sum_to_one(
                y, dim=dim, what=f"the entries of softmax(x, dim={dim})",
                axis="the requested dimension",
                hint="did you normalise over the wrong dimension? Use dim=dim (and keepdim=True) "
                     "in both the max and the sum, not a fixed -1")
            assert_close(y, reference_softmax(x, dim), what=f"softmax(x, dim={dim})")

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(2, 3, 4, generator=_seeded(3)).to(dtype)
            y = fn(x)
            assert_dtype(y, dtype, what=f"softmax of a {str(dtype)[6:]} tensor")
            assert_close(y, reference_softmax(x), what=f"softmax of a {str(dtype)[6:]} tensor")

    def large_scores():
        x = torch.tensor([[1000.0, 0.0, -1000.0], [1000.0, 1000.0, 999.0]], dtype=torch.float64)
        y = fn(x)
        assert_finite(y, what="softmax(x)",
                      hint=f"softmax returned nan or inf for inputs as large as 1000: "
                           f"{_MAX_HINT} (exp(1000) overflows to inf, and inf/inf is nan)")
        assert_close(y, reference_softmax(x), what="softmax of scores as large as 1000")

    def rows_far_apart():
        x = torch.tensor([[1000.0, 999.0, 998.0], [-1000.0, -999.0, -1001.0]], dtype=torch.float64)
        y = fn(x)
        assert_finite(y, what="softmax(x)",
                      hint="the row far below the largest entry of x became 0/0 = nan: subtract "
                           "the maximum of each row along dim (x.amax(dim=dim, keepdim=True)), "
                           "not the maximum of the whole tensor")
        assert_close(y, reference_softmax(x), what="softmax of rows 2000 apart")

    def one_dimensional():
        # a 1-D tensor, and a dimension of size 1 (its softmax is all ones)
        for x, dim in ((torch.randn(5, generator=_seeded(4), dtype=torch.float64), 0),
                       (torch.randn(5, generator=_seeded(4), dtype=torch.float64), -1),
                       (torch.randn(3, 1, 4, generator=_seeded(5), dtype=torch.float64), 1)):
            y = fn(x, dim=dim)
            what = f"softmax(x, dim={dim}) for x of shape {tuple(x.shape)}"
            assert_shape(y, x.shape, what=what, meaning="x.shape")
            assert_close(y, reference_softmax(x, dim), what=what)

    def very_negative_scores():
        x = torch.full((2, 4), -1000.0, dtype=torch.float64)
        x[1, 2] = -1e4
        y = fn(x)
        assert_finite(y, what="softmax(x)",
                      hint=f"softmax returned nan for a row whose entries are all about -1000: "
                           f"exp(-1000) underflows to 0 and 0/0 is nan; {_MAX_HINT}, so the "
                           "largest entry becomes exp(0) = 1")
        assert_close(y, reference_softmax(x), what="softmax of scores near -1000")

    def minus_infinity():
        x = torch.tensor([[2.0, -math.inf, 0.5, -math.inf], [-math.inf, 1.0, 1.0, 3.0]],
                         dtype=torch.float64)
        y = assert_not_modified(fn, x)
        assert_finite(y, what="softmax(x) with -inf entries (masked scores)",
                      hint="a -inf score must give weight exactly 0, not nan")
        assert_zero_where(y, torch.isinf(x), what="the weights", region="where x is -inf",
                          hint="a -inf score must give weight exactly 0")
        assert_close(y, reference_softmax(x), what="softmax(x) with -inf entries")

    run_checks("softmax", [
        ("matches torch.softmax (float64)", matches_torch),
        ("non-negative, rows sum to 1", probabilities),
        ("dim=0, dim=1, dim=-2", other_dims),
        ("float32 and float64 kept", keeps_dtype),
        ("scores as large as 1000", large_scores),
        ("rows far apart: each row's own maximum", rows_far_apart),
        ("a 1-D tensor, a dimension of size 1", one_dimensional),
        ("scores near -1000", very_negative_scores),
        ("-inf entries get weight 0", minus_infinity),
    ])


def _numpy_inputs(seed: int, batch: tuple[int, ...], n_q: int, n_k: int, d: int, d_v: int,
                  spread: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (spread * rng.standard_normal((*batch, n_q, d)), rng.standard_normal((*batch, n_k, d)),
            rng.standard_normal((*batch, n_k, d_v)))


def _scale_candidates(q: Array, k: Array, v: Array, mask: Array | None = None,
                      scale: float | None = None) -> dict[str, torch.Tensor]:
    """What the weights would be with the usual scaling mistakes (for ``explain_mismatch``)."""
    d, d_v = _shape(q)[-1], _shape(v)[-1]
    wrong = {
        "you did not divide the scores by sqrt(d)": 1.0,
        "you divided the scores by d instead of sqrt(d)": 1.0 / d,
        "you multiplied the scores by sqrt(d) instead of dividing": math.sqrt(d),
    }
    if d_v != d:
        wrong["you divided by sqrt(d_v) (the value size) instead of sqrt(d) (the query/key "
              "size, q.shape[-1])"] = 1.0 / math.sqrt(d_v)
    if scale is not None:
        wrong["you ignored the scale argument (used 1/sqrt(d) although scale was given)"] = (
            1.0 / math.sqrt(d))
    candidates = {hint: reference_attention(q, k, v, mask, s)[1] for hint, s in wrong.items()}
    right_scale = 1.0 / math.sqrt(d) if scale is None else scale
    candidates["your softmax runs over the query axis (dim=-2) instead of the key axis"] = (
        torch.softmax(_as_float64(q) @ _as_float64(k).transpose(-2, -1) * right_scale, dim=-2))
    if mask is None:
        return candidates
    candidates["the mask is ignored: set the scores to -inf where the mask is False, before "
               "the softmax"] = reference_attention(q, k, v, None, scale)[1]
    return candidates


def check_attention_numpy(fn: Callable) -> None:
    """Check ``attention_numpy(Q, K, V, causal=False)`` against a float64 torch reference."""
    n_q, n_k, d, d_v = 3, 5, 4, 2
    meaning_out, meaning_w = "(..., n_q, d_v)", "(..., n_q, n_k)"

    def returns_arrays():
        Q, K, V = _numpy_inputs(10, (), n_q, n_k, d, d_v)
        out, weights = assert_pair(fn(Q, K, V), what="attention_numpy")
        for name, value in (("out", out), ("weights", weights)):
            if not isinstance(value, np.ndarray):
                raise AssertionError(f"{name} is a {type(value).__name__}; attention_numpy must "
                                     "return numpy arrays (use numpy only, no torch)")
        swapped = "did you return (weights, out) instead of (out, weights)?"
        assert_shape(out, (n_q, d_v), what="out", meaning=meaning_out,
                     hint=swapped if _shape(out) == (n_q, n_k) else "")
        assert_shape(weights, (n_q, n_k), what="weights", meaning=meaning_w)

    def matches_reference():
        Q, K, V = _numpy_inputs(11, (), n_q, n_k, d, d_v)
        out, weights = assert_not_modified(fn, Q, K, V)
        ref_out, ref_w = reference_attention(Q, K, V)
        assert_rows_sum_to_one(weights)
        assert_close(weights, ref_w, what="weights",
                     hint=explain_mismatch(weights, _scale_candidates(Q, K, V)))
        assert_close(out, ref_out, what="out", hint="weights are right, so check weights @ V")

    def batched():
        Q, K, V = _numpy_inputs(12, (2, 3), n_q, n_k, d, d_v)
        try:
            out, weights = fn(Q, K, V)
        except ValueError as error:  # K.T reverses the batch axes too: matmul cannot pair them
            raise AssertionError(
                f"attention_numpy raised ValueError for batched inputs (2, 3, n, d): {error}. "
                "Transpose only the last two axes of K (np.swapaxes(K, -1, -2)), not K.T") from error
        assert_shape(out, (2, 3, n_q, d_v), what="out for batched inputs", meaning=meaning_out,
                     hint="transpose only the last two axes of K (np.swapaxes(K, -1, -2)), not K.T")
        assert_shape(weights, (2, 3, n_q, n_k), what="weights for batched inputs",
                     meaning=meaning_w)
        ref_out, ref_w = reference_attention(Q, K, V)
        assert_close(weights, ref_w, what="batched weights")
        assert_close(out, ref_out, what="batched out")

    def causal(n_q_: int, n_k_: int, seed: int):
        def case():
            Q, K, V = _numpy_inputs(seed, (2,), n_q_, n_k_, d, d_v)
            out, weights = assert_not_modified(fn, Q, K, V, causal=True)
            allowed = causal_allowed(n_q_, n_k_)
            top_left = reference_attention(Q, K, V, torch.ones(n_q_, n_k_, dtype=torch.bool).tril())
            hint = explain_mismatch(weights, {
                "your causal mask is aligned to the top-left corner; align it to the "
                "bottom-right with np.tril(..., k=n_k - n_q), so that the last query sees every "
                "key": top_left[1],
                "causal=True is ignored: set the scores above the diagonal to -inf before the "
                "softmax": reference_attention(Q, K, V)[1],
            })
            assert_zero_where(
                weights, ~allowed, what="causal weights",
                region=f"above the diagonal (query i may see keys j <= i + n_k - n_q = i + "
                       f"{n_k_ - n_q_})",
                hint=hint or "set those scores to -inf before the softmax")
            assert_rows_sum_to_one(weights, what="causal weights")
            ref_out, ref_w = reference_attention(Q, K, V, allowed)
            assert_close(weights, ref_w, what="causal weights", hint=hint)
            assert_close(out, ref_out, what="causal out")
        return case

    def large_scores():
        Q, K, V = _numpy_inputs(13, (), n_q, n_k, d, d_v, spread=1000.0)
        out, weights = fn(Q, K, V)
        assert_finite(weights, what="weights",
                      hint=f"attention_numpy returned nan for scores in the thousands: "
                           f"{_MAX_HINT} in your numpy softmax")
        ref_out, ref_w = reference_attention(Q, K, V)
        assert_close(weights, ref_w, what="weights for scores in the thousands")
        assert_close(out, ref_out, what="out for scores in the thousands")

    run_checks("attention_numpy", [
        ("returns (out, weights) numpy arrays of the right shapes", returns_arrays),
        ("matches the float64 torch reference, n_q != n_k", matches_reference),
        ("batched inputs (2, 3, n, d)", batched),
        ("causal, n_q == n_k", causal(4, 4, 14)),
        ("causal, n_q < n_k (bottom-right aligned)", causal(3, 6, 15)),
        ("scores in the thousands", large_scores),
    ])


def _torch_inputs(seed: int, q_batch: tuple[int, ...], k_batch: tuple[int, ...], n_q: int,
                  n_k: int, d: int, d_v: int, dtype=torch.float64, spread: float = 1.0):
    g = _seeded(seed)
    q = spread * torch.randn(*q_batch, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(*k_batch, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*k_batch, n_k, d_v, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _random_mask(seed: int, shape: tuple[int, ...]) -> torch.Tensor:
    """A boolean mask with about half True, and at least one True in every row."""
    g = _seeded(seed)
    mask = torch.rand(*shape, generator=g) < 0.5
    keep = torch.randint(shape[-1], shape[:-1], generator=g)
    return mask | F.one_hot(keep, shape[-1]).bool()


def _fill_hint(weights: Array, mask: torch.Tensor) -> str:
    """What to do about masked weights that are not 0: tiny ones come from a large negative fill."""
    leaked = _as_float64(weights).abs().masked_fill(mask, 0.0).nan_to_num(nan=1.0).max()
    if 0 < leaked < 1e-6:
        return ("fill -inf, not a large negative number: the exp of a score like -100 is tiny, "
                "but not the exact 0 a masked key must get")
    return "set the scores to -inf where the mask is False, before the softmax"


def check_scaled_dot_product_attention(fn: Callable) -> None:
    """Check batched ``scaled_dot_product_attention(q, k, v, mask=None, scale=None)``, and that it
    calls neither PyTorch's softmax nor its fused attention (the trusted cases forbid both)."""
    fn = police(fn, "attention.scaled_dot_product_attention")
    n_q, n_k, d, d_v = 5, 7, 4, 3
    meaning_out, meaning_w = "(..., n_q, d_v)", "(..., n_q, n_k)"

    def compare(q, k, v, mask=None, scale=None, label=""):
        kwargs = {} if mask is None else {"mask": mask}
        if scale is not None:
            kwargs["scale"] = scale
        out, weights = assert_pair(assert_not_modified(fn, q, k, v, **kwargs),
                                   what="scaled_dot_product_attention")
        ref_out, ref_w = reference_attention(q, k, v, mask, scale)
        swapped = "did you return (weights, out) instead of (out, weights)?" if (
            _shape(out) == tuple(ref_w.shape)) else ""
        assert_shape(out, ref_out.shape, what=f"out{label}", meaning=meaning_out, hint=swapped)
        assert_shape(weights, ref_w.shape, what=f"weights{label}", meaning=meaning_w)
        hints = _scale_candidates(q, k, v, mask, scale)
        if mask is None:
            assert_rows_sum_to_one(weights, what=f"weights{label}")
        else:
            inverted = reference_attention(q, k, v, ~mask, scale)[1] if bool(
                (~mask).any(-1).all()) else None
            if inverted is not None:
                hints["you masked the allowed keys: True means 'may attend' (PyTorch's "
                      "convention), so fill -inf where the mask is False (~mask)"] = inverted
            assert_zero_where(weights, ~mask, what=f"weights{label}",
                              hint=explain_mismatch(weights, hints) or _fill_hint(weights, mask))
            assert_rows_sum_to_one(weights, what=f"weights{label}",
                                   hint="apply the mask to the scores before the softmax, not to "
                                        "the weights after it")
        assert_close(weights, ref_w, what=f"weights{label}",
                     hint=explain_mismatch(weights, hints))
        assert_close(out, ref_out, what=f"out{label}",
                     hint="the weights are right, so check weights @ v")
        return out, weights

    def plain():
        compare(*_torch_inputs(20, (2,), (2,), n_q, n_k, d, d_v))

    def custom_scale():
        compare(*_torch_inputs(21, (2,), (2,), n_q, n_k, d, d_v), scale=0.3, label=" (scale=0.3)")

    def with_mask():
        compare(*_torch_inputs(22, (2,), (2,), n_q, n_k, d, d_v),
                mask=_random_mask(23, (n_q, n_k)), label=" with a mask")

    def causal_mask():
        compare(*_torch_inputs(24, (2,), (2,), 3, 6, d, d_v), mask=causal_allowed(3, 6),
                label=" with a causal mask (n_q=3, n_k=6)")

    def broadcast():
        q, k, v = _torch_inputs(25, (2, 1), (3,), n_q, n_k, d, d_v)
        compare(q, k, v, label=" for q of shape (2, 1, 5, 4) and k, v of batch (3,)")

    def transposes_last_two(case: Callable[[], Any], shapes: str) -> Callable[[], None]:
        """``case``, with a hint when transposing k fails for these shapes (k.transpose(1, 2)
        and k.T fit only 3-D inputs)."""
        def run():
            try:
                case()
            except (IndexError, RuntimeError) as error:
                raise AssertionError(
                    f"scaled_dot_product_attention raised {type(error).__name__} for {shapes}: "
                    f"{error}. Does every step work for any number of leading dimensions? "
                    "Transpose k with k.transpose(-2, -1): k.transpose(1, 2) and k.T fit only "
                    "3-D inputs") from error
        return run

    def unbatched():
        q, k, v = _torch_inputs(28, (), (), 1, n_k, d, d_v)
        compare(q, k, v, mask=_random_mask(29, (1, n_k)),
                label=" for unbatched q (1, 4), k (7, 4), v (7, 3) and a mask")

    def two_batch_dims():
        compare(*_torch_inputs(30, (2, 3), (2, 3), n_q, n_k, d, d_v), scale=2.0,
                label=" for q, k, v of batch (2, 3), scale=2.0")

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            q, k, v = _torch_inputs(26, (2,), (2,), n_q, n_k, d, d_v, dtype=dtype)
            out, weights = fn(q, k, v)
            name = str(dtype)[6:]
            assert_dtype(out, dtype, what=f"out for {name} inputs")
            assert_dtype(weights, dtype, what=f"weights for {name} inputs")
            compare(q, k, v, label=f" ({name})")

    def large_scores():
        q, k, v = _torch_inputs(27, (2,), (2,), n_q, n_k, d, d_v, spread=1000.0)
        out, weights = fn(q, k, v)
        assert_finite(weights, what="weights",
                      hint=f"nan for scores in the thousands: use your stable softmax "
                           f"({_MAX_HINT})")
        compare(q, k, v, label=" for scores in the thousands")

    run_checks("scaled_dot_product_attention", [
        ("shapes and values, n_q != n_k, d != d_v", plain),
        ("custom scale", custom_scale),
        ("boolean mask (True = may attend)", with_mask),
        ("causal mask, bottom-right aligned", causal_mask),
        ("broadcast batch dimensions", broadcast),
        ("no batch dimension, one query", transposes_last_two(unbatched, "2-D inputs (n, d)")),
        ("two batch dimensions", transposes_last_two(two_batch_dims, "4-D inputs (2, 3, n, d)")),
        ("float32 and float64 kept", keeps_dtype),
        ("scores in the thousands", large_scores),
    ])

