# Generated from solutions/attnlab/masking.py by `python -m autograder release`; maintainers edit that file, not this one.
# Learners: fill in the bodies marked YOUR CODE HERE (lesson 03).
"""Lesson 03: masking.

You fill in six functions here; the notebook ``03_masking.ipynb`` explains each one and checks it.
Every mask is a boolean tensor and ``True`` means "may attend", as in PyTorch's
``torch.nn.functional.scaled_dot_product_attention``. A mask for scores of shape (..., n_q, n_k)
has a row per query and a column per key; any leading dimensions broadcast.

- ``causal_mask(n_q, n_k=None)``: each query sees itself and the past, aligned to the bottom-right
  corner when there are fewer queries than keys.
- ``padding_mask(lengths, max_len)``: which positions of each padded sequence are real tokens.
- ``document_mask(doc_ids)``: several documents packed into one row see only themselves.
- ``sliding_window_mask(n_q, n_k, window)``: causal, and only the last ``window`` positions.
- ``combine_masks(*masks)``: a key is visible only if every mask allows it.
- ``masked_attention(q, k, v, mask)``: attention that also survives rows with nothing to see.
"""

from __future__ import annotations

import importlib
import math
import numbers

import torch

from attnlab.validate import check_mask, check_qkv


def _count(name: str, value, low: int = 0) -> int:
    """``value`` as an int, or a clear error when it is not a whole number >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return int(value)


def _integer_tensor(name: str, value) -> torch.Tensor:
    """``value`` (a tensor, or a list of whole numbers) as an integer tensor."""
    tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    if not isinstance(value, torch.Tensor) and tensor.numel() == 0:
        tensor = tensor.long()  # an empty list has no integers to tell its dtype
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"{name} must hold integers, got dtype {tensor.dtype}")
    return tensor


def _softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Your softmax of lesson 02 (``attnlab.attention.softmax``). It is looked up at each call, so
    borrowing the reference of lesson 02 later takes effect here at once."""
    return importlib.import_module("attnlab.attention").softmax(x, dim=dim)


def causal_mask(n_q: int, n_k: int | None = None) -> torch.Tensor:
    """(n_q, n_k) boolean mask: query i may attend to key j if j <= i + (n_k - n_q).

    n_k defaults to n_q: then each position sees itself and every earlier position. The mask is
    aligned to the bottom-right corner: the queries are the *last* n_q positions of a sequence of
    n_k keys (new tokens attending to a cache of earlier ones), so the last query sees every key.
    With n_q > n_k the first n_q - n_k queries see no key at all (their rows are all False).
    """
    n_q = _count("n_q", n_q)
    n_k = n_q if n_k is None else _count("n_k", n_k)
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: causal_mask() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )


def padding_mask(lengths, max_len: int) -> torch.Tensor:
    """(..., max_len) boolean mask: True at the first ``lengths[...]`` positions of each sequence.

    lengths: integers of shape (...,) (a tensor or a list), the true length of each sequence of a
       padded batch, each between 0 and max_len.
    As a mask over keys, give it a query axis: ``padding_mask(lengths, n)[..., None, :]`` has shape
    (..., 1, n) and broadcasts against scores (..., n_q, n).
    """
    max_len = _count("max_len", max_len)
    lengths = _integer_tensor("lengths", lengths)
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must not be negative, got {int(lengths.min())}")
    if lengths.numel() and int(lengths.max()) > max_len:
        raise ValueError(f"a sequence of length {int(lengths.max())} does not fit in max_len={max_len}")
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: padding_mask() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )


def document_mask(doc_ids) -> torch.Tensor:
    """(..., n, n) boolean mask: token i may attend to token j only if both belong to one document.

    doc_ids: integers of shape (..., n), the document each token of a packed row comes from (for
       example [0, 0, 0, 1, 1, 2]). Documents stored one after another give a block-diagonal mask.
    Combine it with ``causal_mask(n)`` for a decoder trained on packed sequences.
    """
    doc_ids = _integer_tensor("doc_ids", doc_ids)
    if doc_ids.dim() < 1:
        raise ValueError("doc_ids must have shape (..., n): one document id per token, got a scalar")
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: document_mask() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )


def sliding_window_mask(n_q: int, n_k: int, window: int) -> torch.Tensor:
    """(n_q, n_k) boolean mask of causal local attention: each query sees itself and the
    ``window - 1`` positions before it, ``window`` keys at most (as in Mistral 7B or Gemma 2).

    Aligned to the bottom-right corner like ``causal_mask``: query i sits at position
    i + (n_k - n_q) and may attend to key j if 0 <= i + (n_k - n_q) - j < window.
    """
    n_q, n_k = _count("n_q", n_q), _count("n_k", n_k)
    window = _count("window", window, low=1)
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: sliding_window_mask() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks, broadcast to a common shape; ``None`` entries are skipped.

    A key is visible only where every mask allows it: ``combine_masks(causal_mask(n), pad)`` is
    causal *and* hides padding. Returns a new tensor (None when every mask is None or none given).
    """
    present = [mask for mask in masks if mask is not None]
    for index, mask in enumerate(present):
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"combine_masks takes boolean tensors (True = may attend) or None, got {got}")
    try:
        torch.broadcast_shapes(*(mask.shape for mask in present))
    except RuntimeError:
        shapes = ", ".join(str(tuple(mask.shape)) for mask in present)
        raise ValueError(f"the masks' shapes {shapes} do not broadcast to one shape") from None
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: combine_masks() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )


def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention with a boolean mask that may hide every key of a row.

    q: (..., n_q, d); k: (..., n_k, d); v: (..., n_k, d_v); leading dimensions broadcast.
    mask: boolean, broadcastable to (..., n_q, n_k), True = may attend; or None (no mask).
    Returns ``(out, weights)``: out (..., n_q, d_v), weights (..., n_q, n_k), in the inputs' dtype;
    scores are scaled by 1 / sqrt(d). Masked keys get weight exactly 0. A query whose row of the
    mask is all False gets weights 0 and output 0 (not nan), and the gradients stay finite.
    Uses your ``softmax`` of lesson 02 (through ``_softmax`` above). The inputs are left unchanged.
    """
    check_qkv(q, k, v)
    check_mask(mask, q, k)
    # YOUR CODE HERE
    raise NotImplementedError(
        "Lesson 03: masked_attention() in attnlab/masking.py is not written yet. "
        "Fill in its body, or borrow the course's reference with attnlab.use_reference('masking')"
    )
