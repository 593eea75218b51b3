"""Visible checks of lesson 03: ``check_causal_mask``, ``check_padding_mask``,
``check_document_mask``, ``check_sliding_window_mask``, ``check_combine_masks``,
``check_masked_attention``, and ``check_future_leak`` (exercise 2b, not graded).

The masks are compared with masks built here entry by entry from their definitions (plain Python
loops over positions); ``masked_attention`` with ``torch.nn.functional.scaled_dot_product_attention``
given the same boolean mask, in float64, and with invariants (masked weights exactly 0, rows with
nothing to see all 0, finite gradients).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from attnlab.checks.common import (
    _seeded,
    assert_close,
    assert_dtype,
    assert_finite,
    assert_not_modified,
    assert_pair,
    assert_rows_sum_to_one,
    assert_shape,
    assert_zero_where,
    causal_allowed,
    explain_mismatch,
    run_checks,
)
from attnlab.checks.lesson02 import _fill_hint as masked_weights_hint
from attnlab.shortcuts import police

__all__ = [
    "check_causal_mask",
    "check_combine_masks",
    "check_document_mask",
    "check_future_leak",
    "check_masked_attention",
    "check_padding_mask",
    "check_sliding_window_mask",
]

# --------------------------------------------------------------------------------------------
# Masks, built from their definitions
# --------------------------------------------------------------------------------------------


def _grid(n_q: int, n_k: int, allowed: Callable[[int, int], bool]) -> torch.Tensor:
    """(n_q, n_k) boolean tensor with entry (i, j) = allowed(i, j)."""
    return torch.tensor([[bool(allowed(i, j)) for j in range(n_k)] for i in range(n_q)],
                        dtype=torch.bool).reshape(n_q, n_k)


def _window_allowed(n_q: int, n_k: int, window: int) -> torch.Tensor:
    offset = n_k - n_q
    return _grid(n_q, n_k, lambda i, j: 0 <= i + offset - j < window)


def _picture(mask: torch.Tensor) -> str:
    """A small 2-D mask as rows of 1 (may attend) and 0; "" when too large to read."""
    if mask.dim() != 2 or mask.shape[0] > 12 or mask.shape[1] > 16:
        return ""
    return "\n".join("    " + " ".join(str(int(x)) for x in row) for row in mask.tolist())


def _assert_mask(got: Any, want: torch.Tensor, *, what: str, meaning: str,
                 mistakes: Mapping[str, torch.Tensor] | None = None, hint: str = "") -> None:
    """``got`` is a boolean tensor equal to ``want``; the message shows where it differs, both
    masks when they are small, and the hint of a known mistake ``got`` matches."""
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what} returned a {type(got).__name__}; return a torch.Tensor of "
                             "dtype torch.bool (True = may attend)")
    if got.dtype != torch.bool:
        raise AssertionError(f"{what} has dtype {got.dtype}, expected torch.bool. A comparison "
                             "such as a <= b gives booleans; ones(...).tril() gives floats "
                             "(True = may attend)")
    assert_shape(got, want.shape, what=what, meaning=meaning, hint=hint)
    if torch.equal(got, want):
        return
    for known, candidate in (mistakes or {}).items():
        if candidate.shape == got.shape and torch.equal(got, candidate):
            hint = known
            break
    wrong = (got != want).nonzero()
    first = tuple(int(i) for i in wrong[0])
    message = (f"{what} differs from the expected mask in {len(wrong)} of {want.numel()} entries; "
               f"the first at index {first}: yours {bool(got[first])}, expected {bool(want[first])}")
    if hint:
        message += f". {hint[0].upper()}{hint[1:]}"
    pictures = _picture(got.cpu()), _picture(want)
    if all(pictures):
        message += f"\n  yours (1 = may attend):\n{pictures[0]}\n  expected:\n{pictures[1]}"
    raise AssertionError(message)


def _calls(fn: Callable, *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


# --------------------------------------------------------------------------------------------
# The mask builders
# --------------------------------------------------------------------------------------------


def check_causal_mask(fn: Callable) -> None:
    """Check ``causal_mask(n_q, n_k=None)``: bottom-right aligned, boolean, (n_q, n_k)."""

    def compare(n_q: int, n_k: int | None):
        shown = f"causal_mask({n_q})" if n_k is None else f"causal_mask({n_q}, {n_k})"
        width = n_q if n_k is None else n_k
        want = causal_allowed(n_q, width)
        top_left = torch.ones(n_q, width, dtype=torch.bool).tril()
        mistakes = {
            "you masked the allowed keys: True means 'may attend', so the past and the "
            "diagonal are True": ~want,
            "the diagonal is missing: each position may attend to itself (j <= i, not j < i)":
                torch.ones(n_q, width, dtype=torch.bool).tril(diagonal=width - n_q - 1),
            "this is the transpose: a row is a query, a column a key, and query i sees keys "
            "j <= i (the lower triangle)": want.T if n_q == width else want,
        }
        if n_q != width:
            mistakes["your mask is aligned to the top-left corner; align it to the bottom-right, "
                     f"so that query i sees keys j <= i + (n_k - n_q) = i + {width - n_q} and the "
                     "last query sees every key"] = top_left
        args = (n_q,) if n_k is None else (n_q, n_k)
        _assert_mask(fn(*args), want, what=shown, meaning="(n_q, n_k)", mistakes=mistakes)

    def fully_masked_rows():
        got = fn(5, 2)
        _assert_mask(got, causal_allowed(5, 2), what="causal_mask(5, 2)", meaning="(n_q, n_k)",
                     mistakes={"your mask is aligned to the top-left corner; with n_q > n_k the "
                               "first n_q - n_k queries come before every key and see nothing (their "
                               "rows are all False)": torch.ones(5, 2, dtype=torch.bool).tril()})

    run_checks("causal_mask", [
        ("square, n_k omitted", lambda: compare(5, None)),
        ("one token", lambda: compare(1, None)),
        ("n_q < n_k, bottom-right aligned", lambda: compare(3, 7)),
        ("n_q > n_k: the first rows see nothing", fully_masked_rows),
    ])


def check_padding_mask(fn: Callable) -> None:
    """Check ``padding_mask(lengths, max_len)``: (..., max_len), True at the real positions."""

    def compare(lengths, max_len: int, label: str):
        flat = torch.as_tensor(lengths).reshape(-1).tolist()
        shape = tuple(torch.as_tensor(lengths).shape)
        want = torch.tensor([[j < length for j in range(max_len)] for length in flat],
                            dtype=torch.bool).reshape(*shape, max_len)
        mistakes = {
            "you marked the padding instead of the real tokens: True means 'may attend', so the "
            "first lengths[b] positions of row b are True": ~want,
            "one position too many per row: position j is real when j < length (positions "
            "count from 0)": torch.tensor([[j <= length for j in range(max_len)] for length in flat],
                                          dtype=torch.bool).reshape(*shape, max_len),
            "you marked the last lengths[b] positions: the real tokens come first, the padding "
            "fills the end of each row": torch.tensor([[j >= max_len - length for j in range(max_len)]
                                                       for length in flat], dtype=torch.bool).reshape(*shape, max_len),
        }
        got = assert_not_modified(fn, lengths, max_len)
        hint = ("return shape (..., max_len), one row per sequence: the caller adds the query axis "
                "([..., None, :]) when it needs one") if isinstance(got, torch.Tensor) and got.dim() == want.dim() + 1 else ""
        _assert_mask(got, want, what=f"padding_mask({label}, {max_len})", meaning="(..., max_len)",
                     mistakes=mistakes, hint=hint)

    run_checks("padding_mask", [
        ("lengths [3, 1, 5], max_len 5", lambda: compare(torch.tensor([3, 1, 5]), 5, "[3, 1, 5]")),
        ("lengths as a list, with a 0", lambda: compare([2, 0, 4], 6, "[2, 0, 4]")),
        ("lengths of shape (2, 2)", lambda: compare(torch.tensor([[1, 4], [3, 2]]), 4, "[[1, 4], [3, 2]]")),
        ("int32 lengths", lambda: compare(torch.tensor([2, 3], dtype=torch.int32), 3, "int32 [2, 3]")),
        ("max_len 1, and empty sequences in a list", lambda: (
            compare(torch.tensor([1]), 1, "[1]"), compare([0, 0, 3], 3, "[0, 0, 3]"))),
    ])


def check_document_mask(fn: Callable) -> None:
    """Check ``document_mask(doc_ids)``: (..., n, n), True where two tokens share a document."""

    def compare(doc_ids, label: str):
        ids = torch.as_tensor(doc_ids)  # a list is an input too
        rows = ids.reshape(-1, ids.shape[-1]).tolist()
        n = ids.shape[-1]
        want = torch.tensor([[[row[i] == row[j] for j in range(n)] for i in range(n)] for row in rows],
                            dtype=torch.bool).reshape(*ids.shape, n)
        got = assert_not_modified(fn, doc_ids)
        _assert_mask(got, want, what=f"document_mask({label})", meaning="(..., n, n)", mistakes={
            "you masked each token's own document: True means 'may attend', which is where the "
            "two document ids are equal": ~want,
            "your mask is causal too: document_mask alone lets a token see its whole document, "
            "later tokens included (combine it with causal_mask when a decoder needs both)": want.tril(),
        }, hint="compare every pair of positions: doc_ids[..., :, None] against doc_ids[..., None, :]")

    run_checks("document_mask", [
        ("three documents in one row", lambda: compare(torch.tensor([0, 0, 0, 1, 1, 2]), "[0, 0, 0, 1, 1, 2]")),
        ("ids that are not 0, 1, 2", lambda: compare(torch.tensor([7, 7, 3, 3, 3, 9, 9]), "[7, 7, 3, 3, 3, 9, 9]")),
        ("a batch of two rows", lambda: compare(torch.tensor([[0, 0, 1, 1, 1], [4, 5, 5, 5, 5]]), "a batch (2, 5)")),
        ("int32 ids", lambda: compare(torch.tensor([1, 2, 2], dtype=torch.int32), "int32 [1, 2, 2]")),
        ("ids as a list", lambda: compare([4, 4, 1, 1, 1, 8], "[4, 4, 1, 1, 1, 8]")),
        ("one token", lambda: compare(torch.tensor([3]), "[3]")),
    ])


def check_sliding_window_mask(fn: Callable) -> None:
    """Check ``sliding_window_mask(n_q, n_k, window)``: causal, at most ``window`` keys, bottom-right."""

    def compare(n_q: int, n_k: int, window: int):
        want = _window_allowed(n_q, n_k, window)
        offset = n_k - n_q
        mistakes = {
            f"each query sees {window + 1} keys: the window counts the query's own position, so "
            "key j is visible when 0 <= i + (n_k - n_q) - j < window": _window_allowed(n_q, n_k, window + 1),
            "keys after the query are visible: the window is causal, it looks only back "
            "(0 <= i + (n_k - n_q) - j, not |i + (n_k - n_q) - j| < window)":
                _grid(n_q, n_k, lambda i, j: abs(i + offset - j) < window),
            "keys after the query are visible: the window is causal, so the distance "
            "i + (n_k - n_q) - j must be >= 0 as well as < window":
                _grid(n_q, n_k, lambda i, j: i + offset - j < window),
            "the window is missing: with a window, only the last `window` positions are visible":
                causal_allowed(n_q, n_k),
            "the query's own position is missing: distance 0 (the query itself) is inside the "
            "window": _grid(n_q, n_k, lambda i, j: 0 < i + offset - j <= window),
            f"your mask is aligned to the top-left corner: query i sits at position i + (n_k - "
            f"n_q) = i + {offset}": _grid(n_q, n_k, lambda i, j: 0 <= i - j < window),
        }
        _assert_mask(fn(n_q, n_k, window), want, what=f"sliding_window_mask({n_q}, {n_k}, {window})",
                     meaning="(n_q, n_k)", mistakes=mistakes)

    run_checks("sliding_window_mask", [
        ("square, window 3", lambda: compare(7, 7, 3)),
        ("window 1: each token sees only itself", lambda: compare(4, 4, 1)),
        ("n_q < n_k, bottom-right aligned", lambda: compare(3, 8, 2)),
        ("window wider than the sequence: plain causal", lambda: compare(5, 5, 9)),
        ("n_q > n_k", lambda: compare(6, 4, 2)),
    ])


def check_combine_masks(fn: Callable) -> None:
    """Check ``combine_masks(*masks)``: broadcasting AND, None skipped, inputs unchanged."""

    def random_mask(seed: int, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=_seeded(seed)) < 0.6

    def both(label: str, *masks: torch.Tensor | None):
        present = [m for m in masks if m is not None]
        shape = torch.broadcast_shapes(*(m.shape for m in present))
        expanded = [m.expand(shape).reshape(-1).tolist() for m in present]
        want = torch.tensor([all(column) for column in zip(*expanded)], dtype=torch.bool).reshape(shape)
        union = torch.tensor([any(column) for column in zip(*expanded)], dtype=torch.bool).reshape(shape)
        saved = [None if m is None else m.clone() for m in masks]
        got = fn(*masks)
        for index, (mask, before) in enumerate(zip(masks, saved)):
            if mask is not None and not torch.equal(mask, before):
                raise AssertionError(f"your function changed its input in place: mask {index + 1} is "
                                     "different after the call. Build a new tensor (a & b, not a &= b)")
        if got is None:
            raise AssertionError(f"combine_masks returned None for {label}; return None only when "
                                 "every mask is None")
        mistakes = {"you combined with OR: a key must be allowed by every mask (AND, &)": union}
        if len(present) > 2:
            first_two = present[0] & present[1]
            if first_two.shape == shape:
                mistakes["you combined only the first two masks: loop over every mask given"] = first_two
        _assert_mask(got, want, what=f"combine_masks of {label}", meaning="the broadcast shape "
                     + str(tuple(shape)), mistakes=mistakes)

    def all_none():
        try:
            got = fn(None, None)
        except (IndexError, TypeError, AttributeError) as error:  # present[0] of an empty list, ...
            raise AssertionError(f"combine_masks(None, None) raised {type(error).__name__}: {error}. "
                                 "With no mask at all there is nothing to combine: return None") from error
        if got is not None:
            raise AssertionError(f"combine_masks(None, None) returned {type(got).__name__}, expected "
                                 "None (no mask at all)")

    def new_tensor():
        mask = random_mask(5, 3, 3)
        got = fn(mask)
        _assert_mask(got, mask, what="combine_masks of one mask", meaning="its shape")
        if got is mask or (isinstance(got, torch.Tensor) and got.data_ptr() == mask.data_ptr()):
            raise AssertionError("combine_masks of one mask returned the mask itself; return a new "
                                 "tensor (mask.clone()), so that changing the result cannot change "
                                 "the caller's mask")

    run_checks("combine_masks", [
        ("two masks of one shape", lambda: both("two (4, 4) masks", random_mask(0, 4, 4), random_mask(1, 4, 4))),
        ("None is skipped", lambda: both("(5, 5), None and (5, 5)", random_mask(2, 5, 5), None, random_mask(3, 5, 5))),
        ("broadcast: causal (5, 5) and padding (2, 1, 5)",
         lambda: both("(5, 5) and (2, 1, 5)", causal_allowed(5), random_mask(4, 2, 1, 5))),
        ("three masks", lambda: both("(3, 1, 4), (1, 2, 4) and (4,)", random_mask(6, 3, 1, 4),
                                     random_mask(7, 1, 2, 4), random_mask(8, 4))),
        ("only None: None", all_none),
        ("one mask: a new tensor", new_tensor),
    ])


# --------------------------------------------------------------------------------------------
# masked_attention
# --------------------------------------------------------------------------------------------


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, weights) in float64, differentiable: PyTorch's ``scaled_dot_product_attention`` with
    the boolean mask; rows with no allowed key get weights 0 and output 0 (the result is multiplied
    by 0 there, so they pass no gradient)."""
    q, k, v = q.double(), k.double(), v.double()
    d = q.shape[-1]
    if mask is None:
        logits = q @ k.transpose(-2, -1) / math.sqrt(d)
        return F.scaled_dot_product_attention(q, k, v), torch.softmax(logits, dim=-1)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], mask.shape[:-2])
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    allowed = mask.expand(*batch, q.shape[-2], k.shape[-2])
    keeps = allowed.any(dim=-1, keepdim=True)
    usable = allowed | ~keeps  # a row with nothing to see: any keys, then multiplied by 0
    logits = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~usable, -math.inf)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=usable) * keeps
    return out, torch.softmax(logits, dim=-1) * keeps


def _qkv(seed: int, q_batch, k_batch, n_q: int, n_k: int, d: int, d_v: int,
         dtype=torch.float64, spread: float = 1.0):
    g = _seeded(seed)
    q = spread * torch.randn(*q_batch, n_q, d, generator=g, dtype=torch.float64)
    k = torch.randn(*k_batch, n_k, d, generator=g, dtype=torch.float64)
    v = torch.randn(*k_batch, n_k, d_v, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _empty_rows(mask: torch.Tensor) -> torch.Tensor:
    return ~mask.any(dim=-1, keepdim=True)


def _scale_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """What the weights would be with the usual scaling mistakes (for ``explain_mismatch``): the
    scores q·k scaled by a wrong factor are those of q times (factor · sqrt(d))."""
    d, d_v = q.shape[-1], v.shape[-1]
    wrong = {
        "you did not divide the scores by sqrt(d)": 1.0,
        "you divided the scores by d instead of sqrt(d)": 1.0 / d,
        "you multiplied the scores by sqrt(d) instead of dividing": math.sqrt(d),
    }
    if d_v != d:
        wrong["you divided by sqrt(d_v) (the value size) instead of sqrt(d) (the query/key size, "
              "q.shape[-1])"] = 1.0 / math.sqrt(d_v)
    return {hint: _reference(q.double() * (factor * math.sqrt(d)), k, v, mask)[1]
            for hint, factor in wrong.items()}


def _fill_hint(weights: torch.Tensor, mask: torch.Tensor, uniform: bool) -> str:
    """What to do about masked weights that are not 0 (``uniform``: rows with nothing to see got
    equal weights)."""
    if uniform:
        return ("a row with nothing to see got equal weights 1/n_k: its scores were all equal "
                "(all 0, or all one large negative number in place of -inf), so the row attends "
                "uniformly to keys it may not see. Set the weights of such rows to 0 after the "
                "softmax (torch.where with the mask)")
    return masked_weights_hint(weights, mask)


def check_masked_attention(fn: Callable) -> None:
    """Check ``masked_attention(q, k, v, mask)`` against PyTorch in float64, with rows that see
    nothing, gradients and half precision, and that it does not call PyTorch's attention (the
    trusted cases forbid it too)."""
    fn = police(fn, "masking.masked_attention")
    meaning_out, meaning_w = "(..., n_q, d_v)", "(..., n_q, n_k)"

    def compare(q, k, v, mask, label: str):
        out, weights = assert_pair(assert_not_modified(fn, q, k, v, mask), what="masked_attention")
        ref_out, ref_w = _reference(q, k, v, mask)
        swapped = ("did you return (weights, out) instead of (out, weights)?"
                   if tuple(out.shape) == tuple(ref_w.shape) else "")
        assert_shape(out, ref_out.shape, what=f"out{label}", meaning=meaning_out, hint=swapped)
        assert_shape(weights, ref_w.shape, what=f"weights{label}", meaning=meaning_w)
        assert_dtype(out, q.dtype, what=f"out{label}")
        assert_dtype(weights, q.dtype, what=f"weights{label}")
        if mask is not None:
            empty = _empty_rows(mask).expand_as(ref_w)
            nan_hint = ("a row whose keys are all masked is softmax(-inf, ..., -inf) = 0/0 = nan. "
                        "Find those rows (mask.any(dim=-1, keepdim=True)), give them finite "
                        "scores before the softmax, and set their weights to 0 after it")
            assert_finite(weights, what=f"weights{label}", hint=nan_hint)
            assert_finite(out, what=f"out{label}", hint=nan_hint)
            uniform = bool(empty.any()) and torch.allclose(
                weights.detach().double()[empty], torch.tensor(1.0 / k.shape[-2], dtype=torch.float64),
                atol=1e-3)
            assert_zero_where(weights, ~mask, what=f"weights{label}",
                              hint=_fill_hint(weights, mask, uniform))
        # Rows that see a key sum to 1: weights zeroed after the softmax (times the mask) do not.
        sees = ~(_empty_rows(mask).expand_as(ref_w)[..., 0]) if mask is not None else (
            torch.ones(ref_w.shape[:-1], dtype=torch.bool))
        assert_rows_sum_to_one(
            weights.detach()[sees], what=f"the weights{label} of the rows that see a key",
            hint="the softmax must see the mask: set the scores to -inf where the mask is False "
                 "before the softmax. Multiplying the weights by the mask after it (or zeroing "
                 "them) takes weight away without renormalising the rest")
        assert_close(weights, ref_w, what=f"weights{label}",
                     hint=explain_mismatch(weights, _scale_mistakes(q, k, v, mask))
                     or "scale the scores by 1/sqrt(d) with d = q.shape[-1], and use your softmax "
                        "along the key axis (dim=-1)")
        assert_close(out, ref_out, what=f"out{label}", hint="the weights are right, so check weights @ v")
        return out, weights

    def causal_rectangle():
        compare(*_qkv(30, (2,), (2,), 4, 7, 5, 3), causal_allowed(4, 7), " with a causal mask (n_q=4, n_k=7)")

    def random_mask_broadcast():
        q, k, v = _qkv(31, (2, 1), (3,), 5, 6, 4, 2)
        mask = torch.rand(3, 5, 6, generator=_seeded(32)) < 0.5
        mask[..., 0] = True
        compare(q, k, v, mask, " for q (2, 1, 5, 4), k and v of batch (3,), mask (3, 5, 6)")

    def no_mask():
        try:
            compare(*_qkv(33, (2,), (2,), 3, 5, 4, 6), None, " with mask=None")
        except (AttributeError, TypeError) as error:  # mask.any(...) on None, ~None, ...
            raise AssertionError(f"masked_attention(q, k, v, None) raised {type(error).__name__}: "
                                 f"{error}. mask=None means no mask at all: every query sees every "
                                 "key") from error

    def head_axis():
        q, k, v = _qkv(34, (2, 3), (2, 3), 4, 4, 8, 8)
        pad = torch.tensor([[True, True, True, False], [True, True, False, False]])[:, None, None, :]
        compare(q, k, v, pad & causal_allowed(4), " with a (2, 1, 4, 4) mask and 3 heads")

    def nothing_to_see():
        q, k, v = _qkv(35, (2,), (2,), 5, 3, 4, 2)
        mask = causal_allowed(5, 3)  # its first two rows see no key
        out, weights = compare(q, k, v, mask, " with rows that see no key (causal, n_q=5, n_k=3)")
        zeros = _empty_rows(mask).expand_as(out)
        if out[zeros].abs().max() != 0:
            raise AssertionError("the output of a row that sees no key must be exactly 0")

    def one_query_one_key():
        q, k, v = _qkv(43, (2,), (2,), 1, 1, 4, 3, dtype=torch.float32)
        compare(q, k, v, torch.tensor([[[True]], [[False]]]),
                " for one query and one key (float32; the second row sees nothing)")

    def gradients_match(q, k, v, mask, label: str):
        """The gradients of q, k and v through ``fn`` against the float64 reference's, for random
        cotangents of out and weights; half precision within a half-precision tolerance."""
        theirs = [t.detach().double().requires_grad_() for t in (q, k, v)]
        ref_out, ref_w = _reference(*theirs, mask)
        g = _seeded(37)
        d_out = torch.randn(ref_out.shape, generator=g, dtype=torch.float64)
        d_w = torch.randn(ref_w.shape, generator=g, dtype=torch.float64)
        ref_grads = torch.autograd.grad((ref_out * d_out).sum() + (ref_w * d_w).sum(), theirs)
        mine = [t.clone().requires_grad_() for t in (q, k, v)]
        out, weights = fn(*mine, mask)
        loss = (out.double() * d_out).sum() + (weights.double() * d_w).sum()
        grads = torch.autograd.grad(loss, mine, allow_unused=True)
        # bfloat16 keeps 8 bits of mantissa: its sums of products stray further (as graded)
        rtol, atol = (3e-2, 3e-2) if q.dtype == torch.bfloat16 else (None, None)
        for name, grad, ref in zip("qkv", grads, ref_grads):
            what = f"the gradient{label} with respect to {name}"
            if grad is None:
                raise AssertionError(f"the output does not depend on {name}: keep the computation "
                                     "differentiable (no .detach(), no .numpy())")
            assert_finite(grad, what=what, hint=(
                "a nan in the forward pass (even one multiplied by 0 or replaced afterwards) can "
                "make backward nan: keep the scores of rows with nothing to see finite, and mask "
                "with torch.where or masked_fill rather than by adding -inf"))
            assert_close(grad, ref, what=what, rtol=rtol, atol=atol)

    def gradients():
        # left padding: rows 0 and 1 see nothing
        mask = causal_allowed(5, 4) & torch.tensor([False, True, True, True])
        for dtype in (torch.float64, torch.float32):
            gradients_match(*_qkv(36, (2,), (2,), 5, 4, 4, 3, dtype=dtype), mask,
                            f" ({str(dtype)[6:]}, rows that see nothing)")

    def half_precision():
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v = _qkv(38, (2,), (2,), 6, 6, 8, 4, dtype=dtype)
            mask = causal_allowed(6) & torch.tensor([False, False, True, True, True, True])
            name = str(dtype).replace("torch.", "")
            try:
                compare(q, k, v, mask, f" ({name}, left padding)")
            except RuntimeError as error:
                raise AssertionError(f"{name} inputs raised {error}; a fill value such as -1e9 does "
                                     "not fit in float16 (largest 65504): use -inf") from error

    def half_precision_gradients():
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v = _qkv(38, (2,), (2,), 6, 6, 8, 4, dtype=dtype)
            mask = causal_allowed(6) & torch.tensor([False, False, True, True, True, True])
            gradients_match(q, k, v, mask, f" ({str(dtype)[6:]}, left padding)")

    def large_scores():
        compare(*_qkv(39, (2,), (2,), 4, 5, 4, 3, spread=300.0), causal_allowed(4, 5),
                " for scores in the thousands")
        # q and k both large: whole rows of scores in the hundreds, far below a finite fill value
        q, k, v = _qkv(41, (2,), (2,), 6, 7, 4, 3, spread=20.0)
        mask = torch.rand(2, 6, 7, generator=_seeded(42)) < 0.4
        mask[1, 2] = False  # a row with nothing to see
        compare(q, 20.0 * k, v, mask, " for scores in the hundreds and a random mask")

    run_checks("masked_attention", [
        ("causal mask, n_q != n_k, d != d_v (float64, against PyTorch)", causal_rectangle),
        ("random mask, broadcast batch dimensions", random_mask_broadcast),
        ("mask=None", no_mask),
        ("padding and causal mask with a head axis of 1", head_axis),
        ("rows with nothing to see: weights 0, output 0, no nan", nothing_to_see),
        ("one query, one key, float32", one_query_one_key),
        ("gradients finite and equal to PyTorch's (float64, float32)", gradients),
        ("float16 and bfloat16 kept, fully masked rows still 0", half_precision),
        ("float16 and bfloat16 gradients equal to PyTorch's", half_precision_gradients),
        ("scores in the hundreds and thousands", large_scores),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 2b (not graded): which mask leaks the future?
# --------------------------------------------------------------------------------------------

# Shapes (n_q, n_k) on which the known masks below are judged; n_q <= n_k, the queries being the
# last n_q positions. Every leaking mask of the battery leaks on at least one of them.
_LEAK_SHAPES = ((1, 1), (1, 5), (2, 2), (2, 5), (3, 3), (3, 7), (4, 9), (5, 5), (6, 6))


def _first_leak(make_mask: Callable[[int, int], torch.Tensor]) -> tuple[int, int, int, int] | None:
    """(n_q, n_k, i, j): the first query i that a mask lets see a key j after its own position
    i + n_k - n_q, over ``_LEAK_SHAPES``; None when no query ever does."""
    for n_q, n_k in _LEAK_SHAPES:
        mask = torch.as_tensor(make_mask(n_q, n_k)).to(torch.bool).expand(n_q, n_k)
        after = _grid(n_q, n_k, lambda i, j: j > i + n_k - n_q)
        found = (mask & after).nonzero()
        if len(found):
            return (n_q, n_k, *(int(x) for x in found[0]))
    return None


def _bottom_right(n_q: int, n_k: int) -> torch.Tensor:
    return causal_allowed(n_q, n_k)


def _one_extra_key(n_q: int, n_k: int) -> torch.Tensor:
    mask = causal_allowed(n_q, n_k).clone()
    if n_q >= 3:
        mask[n_q - 2, n_k - 1] = True  # a query in the middle also sees the last key
    return mask


def _off_by_one_with_a_cache(n_q: int, n_k: int) -> torch.Tensor:
    offset = n_k - n_q
    return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=offset + 1 if offset else 0)


# name -> (make_mask, what it is, a hint for a test that judges it wrongly). Whether a mask leaks
# is not written here: ``_first_leak`` decides it from the definition.
_KNOWN_MASKS: dict[str, tuple[Callable[[int, int], torch.Tensor], str, str]] = {
    "the bottom-right causal mask (causal_mask's)": (
        _bottom_right,
        "query i sits at position i + n_k - n_q and sees the keys up to there, none after",
        "Does your test take the queries for the first n_q positions instead of the last?"),
    "the top-left causal mask (is_causal=True's)": (
        lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(),
        "with n_q < n_k it hides the newest keys from the queries, a bug (lost context), but no query "
        "sees a key after its own position i + n_k - n_q",
        "Does your test take the queries for the first n_q positions instead of the last?"),
    "strictly earlier keys (no query sees itself)": (
        lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q - 1),
        "its first query sees no key at all, so masked_attention gives it output 0 whatever the keys "
        "are: a row with nothing to see is not a leak", ""),
    "a causal sliding window of 2": (
        lambda n_q, n_k: _window_allowed(n_q, n_k, 2),
        "each query sees itself and the key before it, nothing later", ""),
    "no mask at all (an encoder's)": (
        lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool),
        "every query sees every key, so every query but the last sees the future",
        "Try more than one query."),
    "a window of 3 in both directions": (
        lambda n_q, n_k: (torch.arange(n_q)[:, None] + n_k - n_q - torch.arange(n_k)[None, :]).abs() < 3,
        "it leaks only when there are two or more queries: a single query (n_q = 1, one decoding step) "
        "is the last position, with nothing after it",
        "Try n_q >= 2."),
    "the diagonal one step too high (tril(diagonal=1))": (
        lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=1),
        "each query sees the next position: with n_q = n_k = 3 query 0 sees key 1",
        "Try a square shape with a few queries."),
    "one extra key for a query in the middle": (
        _one_extra_key,
        "only one entry leaks: with three or more queries, query n_q - 2 also sees the last key",
        "Test every query against every later key, not only the first query."),
    "off by one only with a cache (tril(diagonal=n_k - n_q + 1) when n_q < n_k)": (
        _off_by_one_with_a_cache,
        "it is right when n_q = n_k, and leaks only with fewer queries than keys and more than one "
        "query, as when a prompt's last tokens are processed against a cache",
        "Try n_q = 2, n_k = 5."),
}


def _same_as_known(make_mask: Callable[[int, int], torch.Tensor]) -> tuple[str, str]:
    """(what it is, hint) of the known mask equal to ``make_mask`` on every shape, or a plain
    description when none is."""
    for known, what, hint in _KNOWN_MASKS.values():
        if all(torch.equal(torch.as_tensor(known(a, b)), torch.as_tensor(make_mask(a, b))) for a, b in _LEAK_SHAPES):
            return what, hint
    return "compare its entries with the positions: query i sits at position i + n_k - n_q", ""


def _verdict_of(sees_the_future: Callable, make_mask: Callable, name: str) -> bool:
    """The learner's test on one mask, as a bool, or an AssertionError that says what went wrong."""
    try:
        said = sees_the_future(make_mask)
    except NotImplementedError:
        raise
    except Exception as error:
        raise AssertionError(f"your test raised {type(error).__name__} on {name}: {error}") from error
    if isinstance(said, torch.Tensor) and said.numel() == 1:
        said = said.item()
    if not isinstance(said, (bool, int)) or said not in (0, 1):
        raise AssertionError(f"sees_the_future returned {said!r} for {name}; return True or False")
    return bool(said)


def _judge(sees_the_future: Callable, make_mask: Callable, name: str, what: str, hint: str) -> None:
    said, leak = _verdict_of(sees_the_future, make_mask, name), _first_leak(make_mask)
    hint = f" {hint}" if hint else ""
    if said and leak is None:
        raise AssertionError(f"your test says {name} leaks the future, but it does not: {what}.{hint}")
    if not said and leak is not None:
        n_q, n_k, i, j = leak
        raise AssertionError(
            f"your test says {name} does not leak, but with n_q = {n_q}, n_k = {n_k} query {i} (position "
            f"{i + n_k - n_q}) may attend to key {j}, which comes after it: {what}.{hint}")


def check_future_leak(sees_the_future: Callable, my_verdict: Callable[[], str],
                      candidates: Mapping[str, Callable[[int, int], torch.Tensor]]) -> None:
    """Check (not graded) exercise 2b: ``my_verdict()`` names the candidate that leaks the future,
    and ``sees_the_future(make_mask) -> bool`` tells leaking masks from the others, on the
    candidates and on the known masks above. Accepts any test that judges every mask right; an
    unanswered exercise (the stub's ``NotImplementedError``) is reported and passes on."""
    try:
        verdict = my_verdict()
        sees_the_future(next(iter(candidates.values())))
    except NotImplementedError as error:
        waiting = f" ({error})" if str(error) else ""
        print(f"○ future_leak: not answered yet{waiting}. This exercise is not graded.")
        return
    leaking = sorted(name for name, make_mask in candidates.items() if _first_leak(make_mask) is not None)

    def the_verdict():
        if verdict not in candidates:
            raise AssertionError(f"my_verdict() returned {verdict!r}; return one of "
                                 f"{', '.join(repr(name) for name in candidates)}")
        if verdict not in leaking:
            what, _ = _same_as_known(candidates[verdict])
            raise AssertionError(f"mask_{verdict} does not leak: {what}. Your test should find the one that does")

    def your_test_on(name: str) -> Callable[[], None]:
        return lambda: _judge(sees_the_future, candidates[name], f"mask_{name}", *_same_as_known(candidates[name]))

    def known(name: str) -> Callable[[], None]:
        make_mask, what, hint = _KNOWN_MASKS[name]
        return lambda: _judge(sees_the_future, make_mask, name, what, hint)

    run_checks("future_leak", [
        ("your verdict names the candidate that leaks", the_verdict),
        *((f"your test on mask_{name}", your_test_on(name)) for name in candidates),
        *((f"your test on {name}", known(name)) for name in _KNOWN_MASKS),
    ])
