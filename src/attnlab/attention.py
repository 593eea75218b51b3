# Generated from solutions/attnlab/attention.py by `python -m autograder release`; maintainers edit that file, not this one.
# Learners: fill in the bodies marked YOUR CODE HERE (lesson 02).
"""Lesson 02: scaled dot-product attention.

You fill in three functions here; the notebook ``02_scaled_dot_product_attention.ipynb`` explains
each one and checks it. Shapes use ``...`` for any number of leading batch dimensions.

- ``softmax(x, dim=-1)``: a numerically stable softmax of a torch tensor.
- ``attention_numpy(Q, K, V, causal=False)``: the whole of attention in a dozen lines of numpy.
- ``scaled_dot_product_attention(q, k, v, mask=None, scale=None)``: batched torch attention that
  returns the output and the attention weights.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab.validate import check_mask, check_qkv


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``, stable for very large and very small entries.

    x: a floating-point tensor of any shape; entries may be ``-inf`` (a masked score), but not all
       of them along ``dim``. Returns a new tensor of the same shape and dtype whose entries along
       ``dim`` are non-negative and sum to 1. ``x`` itself is left unchanged.

    Subtract the maximum along ``dim`` before exponentiating: softmax does not change when the
    same number is subtracted from every entry, and ``exp`` can then no longer overflow.
    """
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 02: softmax() in attnlab/attention.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('attention')"
    )


def attention_numpy(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention in plain numpy.

    Q: (..., n_q, d) queries; K: (..., n_k, d) keys; V: (..., n_k, d_v) values.
    causal: if True, query i may attend only to keys j <= i + (n_k - n_q): the mask is aligned to
       the bottom-right corner, so with n_q == n_k each position sees itself and the past. Needs
       n_q <= n_k (otherwise the first queries would see no key at all; lesson 03 handles that).
    Returns ``(out, weights)``: out (..., n_q, d_v) and weights (..., n_q, n_k), each row of
    weights summing to 1, in the inputs' floating-point dtype. Uses numpy only (no torch), with
    its own stable softmax.
    """
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if Q.shape[-1] != K.shape[-1] or K.shape[-2] != V.shape[-2]:
        raise ValueError(
            f"shapes do not fit: Q {Q.shape}, K {K.shape}, V {V.shape}; need Q (..., n_q, d), "
            "K (..., n_k, d), V (..., n_k, d_v)"
        )
    if causal and Q.shape[-2] > K.shape[-2]:
        raise ValueError(f"causal attention needs n_q <= n_k, got n_q={Q.shape[-2]}, n_k={K.shape[-2]}")
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 02: attention_numpy() in attnlab/attention.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('attention')"
    )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched scaled dot-product attention in torch.

    q: (..., n_q, d); k: (..., n_k, d); v: (..., n_k, d_v); leading dimensions broadcast.
    mask: optional boolean tensor broadcastable to (..., n_q, n_k); True means "may attend", as in
       ``torch.nn.functional.scaled_dot_product_attention``. Every query must be allowed at least
       one key (lesson 03 deals with rows that are fully masked).
    scale: multiplies the scores; ``1 / sqrt(d)`` when None.
    Returns ``(out, weights)``: out (..., n_q, d_v), weights (..., n_q, n_k). Uses this module's
    ``softmax``. The inputs are left unchanged.
    """
    check_qkv(q, k, v)
    check_mask(mask, q, k)
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 02: scaled_dot_product_attention() in attnlab/attention.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('attention')"
    )
