"""Input checks shared by the exercise modules: a clear error that names the problem, before any
arithmetic. They sit outside the solution regions, so learners' stubs keep them."""

from __future__ import annotations

import math

import torch


def check_qkv(q, k, v, same_head_dim: bool = False) -> tuple[int, ...]:
    """Check attention inputs q (..., n_q, d), k (..., n_k, d), v (..., n_k, d_v); return the
    broadcast batch shape. ``same_head_dim``: v must also have last dimension d."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., n, d), got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share their last dimension d: q is {tuple(q.shape)}, k is {tuple(k.shape)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same number of keys n_k: k is {tuple(k.shape)}, v is {tuple(v.shape)}"
        )
    if same_head_dim and v.shape[-1] != q.shape[-1]:
        raise ValueError(f"this kernel needs v of the same last dimension d as q and k, got "
                         f"q {tuple(q.shape)}, v {tuple(v.shape)}")
    try:
        return tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} do not broadcast"
        ) from None


def check_mask(mask, q: torch.Tensor, k: torch.Tensor) -> None:
    """Check an optional boolean mask (True = may attend) against the scores' shape (..., n_q, n_k)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(
            f"mask must be a boolean torch.Tensor (True = may attend), got {got}; "
            "an additive float mask is not supported here"
        )
    scores_shape = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    try:
        torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' shape "
            f"{scores_shape} = (..., n_q, n_k)"
        ) from None


def check_scale(scale, d: int) -> float:
    """The scale as a float: ``1 / sqrt(d)`` when None."""
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a number or None, got {type(scale).__name__}")
    return 1.0 / math.sqrt(d) if scale is None else float(scale)
