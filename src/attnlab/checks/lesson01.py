"""Visible checks of lesson 01: ``check_additive_scores``, ``check_additive_attention``,
``check_additive_attention_module``, ``check_attention_decoder_step``; and the float64 references
they compare with (``reference_additive_scores``, ``reference_additive_attention``,
``reference_gru_cell``), written independently of the learner's module."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.checks.common import (
    Array,
    _as_float64,
    _index,
    _num,
    _seeded,
    _shape,
    assert_close,
    assert_dtype,
    assert_finite,
    assert_nonnegative,
    assert_not_modified,
    assert_pair,
    assert_shape,
    explain_mismatch,
    run_checks,
)

__all__ = [
    "check_additive_scores",
    "check_additive_attention",
    "check_additive_attention_module",
    "check_attention_decoder_step",
    "reference_additive_scores",
    "reference_additive_attention",
    "reference_gru_cell",
]


# --------------------------------------------------------------------------------------------
# float64 references
# --------------------------------------------------------------------------------------------


def _float64(x: Array) -> torch.Tensor:
    """``x`` as a float64 tensor, on the autograd graph of ``x`` (so that a check can take
    gradients of a reference made from float64 leaves; comparisons detach anyway)."""
    return x.to(torch.float64) if isinstance(x, torch.Tensor) else _as_float64(x)


def reference_additive_scores(query: Array, keys: Array, W_q: Array, W_k: Array, v: Array,
                              nonlinearity: Callable = torch.tanh) -> torch.Tensor:
    """float64 scores (..., n): ``nonlinearity(query @ W_q + keys[j] @ W_k) @ v`` for every key j.

    Written with ``torch.einsum`` (leading dimensions broadcast), not with the learner's module.
    ``nonlinearity`` exists so that checks can show what a mistake would give.
    """
    q, k, Wq, Wk, vv = (_float64(t) for t in (query, keys, W_q, W_k, v))
    projected_query = torch.einsum("...d,da->...a", q, Wq)        # (..., d_attn)
    projected_keys = torch.einsum("...nd,da->...na", k, Wk)       # (..., n, d_attn)
    hidden = nonlinearity(projected_query[..., None, :] + projected_keys)
    return torch.einsum("...na,a->...n", hidden, vv)


def reference_additive_attention(query: Array, keys: Array, values: Array, W_q: Array, W_k: Array,
                                 v: Array, mask: Array | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (context (..., d_v), weights (..., n)) of additive attention.

    weights: ``torch.softmax`` of the scores with masked keys (mask False) set to -inf; every row
    must allow at least one key. context: the weighted sum of the values.
    """
    logits = reference_additive_scores(query, keys, W_q, W_k, v)
    allowed = torch.ones(logits.shape[-1:], dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    logits = logits.masked_fill(~allowed, -math.inf)
    probabilities = torch.softmax(logits, dim=-1)
    return torch.einsum("...n,...nd->...d", probabilities, _float64(values)), probabilities


def reference_gru_cell(x: Array, h: Array, cell: nn.GRUCell) -> torch.Tensor:
    """float64 new state of ``cell`` (an ``nn.GRUCell``) for input ``x`` and state ``h``, from its
    weights and the GRU equations (PyTorch's gate order: reset, update, new)."""
    W_ih, W_hh = _as_float64(cell.weight_ih), _as_float64(cell.weight_hh)
    b_ih = _as_float64(cell.bias_ih) if cell.bias_ih is not None else torch.zeros(W_ih.shape[0], dtype=torch.float64)
    b_hh = _as_float64(cell.bias_hh) if cell.bias_hh is not None else torch.zeros(W_hh.shape[0], dtype=torch.float64)
    return _gru_cell(_as_float64(x), _as_float64(h), W_ih, W_hh, b_ih, b_hh)


def _gru_cell(x, h, W_ih, W_hh, b_ih, b_hh) -> torch.Tensor:
    """The GRU equations (PyTorch's gate order: reset, update, new), on whatever tensors it is
    given (float64 leaves keep their graph)."""
    gi_r, gi_z, gi_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    gh_r, gh_z, gh_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    reset = torch.sigmoid(gi_r + gh_r)
    update = torch.sigmoid(gi_z + gh_z)
    candidate = torch.tanh(gi_n + reset * gh_n)
    return (1 - update) * candidate + update * h


# --------------------------------------------------------------------------------------------
# Inputs and lesson-specific assertions
# --------------------------------------------------------------------------------------------


def _problem(seed: int, q_batch: tuple[int, ...], k_batch: tuple[int, ...], n: int, d_q: int,
             d_k: int, d_attn: int, d_v: int, dtype=torch.float64, v_scale: float = 1.0):
    """query, keys, values, W_q, W_k, v drawn from ``seed`` (float64 draws, then cast)."""
    g = _seeded(seed)
    draw = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    query, keys, values = draw(*q_batch, d_q), draw(*k_batch, n, d_k), draw(*k_batch, n, d_v)
    W_q, W_k = draw(d_q, d_attn) / math.sqrt(d_q), draw(d_k, d_attn) / math.sqrt(d_k)
    v = v_scale * draw(d_attn)
    return tuple(t.to(dtype) for t in (query, keys, values, W_q, W_k, v))


def _padding(lengths: list[int], n: int) -> torch.Tensor:
    """(len(lengths), n) boolean: True for the first lengths[b] positions of row b."""
    return torch.arange(n) < torch.tensor(lengths)[:, None]


def _assert_zero_at_padding(weights: Array, mask: torch.Tensor, *, what: str = "your weights",
                            hint: str = "") -> None:
    """Weights are exactly 0 where ``mask`` is False, with the issue's style of message."""
    w = _as_float64(weights)
    padding = ~mask.expand_as(w)
    leaked = w.abs().masked_fill(~padding, 0.0).nan_to_num(nan=math.inf)
    if (leaked != 0).any():
        flat = int(torch.argmax(leaked.reshape(-1)))
        where = _index(flat, tuple(w.shape))
        largest = leaked.reshape(-1)[flat].item()
        if not hint:
            if largest < 1e-6:
                hint = ("you filled the masked scores with a large negative number: exp of it is "
                        "tiny but not 0. Fill them with -inf (float('-inf') or -math.inf)")
            else:
                hint = "set their scores to -inf before the softmax"
        raise AssertionError(
            f"padding positions got weight {_num(largest)} ({what} at index {where}, where the mask "
            f"is False; {int((leaked != 0).sum())} of {int(padding.sum())} padding weights are "
            f"nonzero); {hint}")


def _assert_sum_to_one_over_unmasked(weights: Array, *, what: str = "your weights",
                                     hint: str = "") -> None:
    w = _as_float64(weights)
    sums = w.sum(dim=-1)
    if not torch.isfinite(sums).all() or ((sums - 1).abs() > 1e-5).any():
        finite = sums[torch.isfinite(sums)]
        spread = (f"row sums range from {_num(finite.min())} to {_num(finite.max())}"
                  if finite.numel() else "every row sum is nan or inf")
        raise AssertionError(f"{what} do not sum to 1 over the unmasked keys (dim=-1): {spread}"
                             + (f"; {hint}" if hint else ""))


_KEEP_THE_GRAPH = ("the computation must stay in torch and keep the graph (no .detach(), .item(), "
                   ".numpy(), torch.no_grad() or torch.tensor(...) of intermediate results)")


def _backward(loss: torch.Tensor, *, where: str) -> None:
    """``loss.backward()``, with a diagnostic when the result is cut off from its inputs."""
    try:
        loss.backward()
    except RuntimeError as error:
        if "does not require grad" not in str(error):
            raise
        raise AssertionError(f"no gradient can flow back through {where}: {_KEEP_THE_GRAPH}") from None


def _assert_gradients(parameters: dict[str, torch.Tensor], *, where: str,
                      expected: dict[str, torch.Tensor] | None = None) -> None:
    """Every tensor of ``parameters`` got a finite, nonzero gradient (its ``.grad``), equal to
    ``expected[name]`` (float64 gradients of the reference) when given."""
    for name, parameter in parameters.items():
        grad = parameter.grad
        if grad is None or not torch.isfinite(grad).all() or not grad.abs().sum() > 0:
            state = "no gradient" if grad is None else "a zero or non-finite gradient"
            raise AssertionError(f"{name} got {state} from a loss on {where}: {_KEEP_THE_GRAPH}")
        if expected is not None and name in expected:
            assert_close(grad, expected[name], what=f"the gradient of {name} (a loss on {where})",
                         hint="the forward values are right, so something between them and the "
                              f"inputs is cut off or replaced: {_KEEP_THE_GRAPH}")


def _float64_leaves(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """float64 copies of ``tensors`` that require a gradient (for reference gradients)."""
    return {name: t.detach().to(torch.float64).requires_grad_() for name, t in tensors.items()}


def _reference_gradients(loss: torch.Tensor, leaves: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return dict(zip(leaves, grads))


def _squeezed(actual: Array, expected_shape) -> str:
    """A hint when ``actual`` has the expected shape but for a size-1 dimension dropped or kept."""
    found, wanted = _shape(actual), tuple(expected_shape)
    if found != wanted and [d for d in found if d != 1] == [d for d in wanted if d != 1]:
        return (f"a size-1 dimension went missing or appeared (shape {found}, expected {wanted}): "
                ".squeeze() without an axis removes every axis of size 1, a batch of one or a single "
                "key too; name the axis, as in .squeeze(-2)")
    return ""


_SCORES_MEANING = "(..., n)"


def _score_mistakes(query, keys, W_q, W_k, v) -> dict[str, torch.Tensor]:
    """What the scores would be with the usual mistakes (for ``explain_mismatch``)."""
    candidates = {
        "you left out the tanh: the score is tanh(query @ W_q + keys[j] @ W_k) @ v":
            reference_additive_scores(query, keys, W_q, W_k, v, nonlinearity=lambda x: x),
        "you applied tanh after multiplying by v; apply it to query @ W_q + keys[j] @ W_k first, "
        "then multiply by v": torch.tanh(reference_additive_scores(
            query, keys, W_q, W_k, v, nonlinearity=lambda x: x)),
        "you summed over the attention axis instead of multiplying by v (… @ v)":
            reference_additive_scores(query, keys, W_q, W_k, torch.ones_like(_as_float64(v))),
        "you used a sigmoid or another nonlinearity instead of tanh":
            reference_additive_scores(query, keys, W_q, W_k, v, nonlinearity=torch.sigmoid),
    }
    if W_q.shape == W_k.shape:
        candidates["you swapped the matrices: W_q projects the query and W_k the keys"] = (
            reference_additive_scores(query, keys, W_k, W_q, v))
    return candidates


# --------------------------------------------------------------------------------------------
# Exercise 1: additive_scores
# --------------------------------------------------------------------------------------------


def check_additive_scores(fn: Callable) -> None:
    """Check ``additive_scores(query, keys, W_q, W_k, v)`` against a float64 reference."""

    def compare(problem, label):
        query, keys, _, W_q, W_k, v = problem
        scores = assert_not_modified(fn, query, keys, W_q, W_k, v)
        if not isinstance(scores, torch.Tensor):
            raise AssertionError(f"additive_scores must return a torch.Tensor, got {type(scores).__name__}")
        expected = reference_additive_scores(query, keys, W_q, W_k, v)
        d_attn = v.shape[0]
        hint = _squeezed(scores, expected.shape)
        if _shape(scores) == (*expected.shape, d_attn) and d_attn != 1:
            hint = "you did not reduce the attention axis: multiply the tanh by v (… @ v)"
        elif len(_shape(scores)) > len(expected.shape):
            hint = ("add the query's projection to every key's: (query @ W_q).unsqueeze(-2) has "
                    "shape (..., 1, d_attn) and broadcasts against keys @ W_k, (..., n, d_attn)")
        assert_shape(scores, expected.shape, what=f"scores{label}", meaning=_SCORES_MEANING, hint=hint)
        assert_finite(scores, what=f"scores{label}")
        assert_dtype(scores, query.dtype, what=f"scores of {str(query.dtype)[6:]} inputs")
        assert_close(scores, expected, what=f"scores{label}",
                     hint=explain_mismatch(scores, _score_mistakes(query, keys, W_q, W_k, v)))
        return scores

    def one_query_per_batch_element():
        compare(_problem(100, (3,), (3,), 7, 5, 4, 6, 2), "")

    def matrices_on_the_right_place():
        compare(_problem(101, (2,), (2,), 5, 4, 4, 4, 3), " with d_q == d_k (W_q and W_k both (4, 4))")

    def batch_dimensions():
        compare(_problem(102, (2, 3), (2, 3), 6, 5, 4, 3, 2), " for batch dimensions (2, 3)")

    def single_query():
        compare(_problem(103, (), (), 6, 5, 4, 3, 2), " for one query (d_q,) and keys (n, d_k)")

    def keys_shared_by_queries():
        compare(_problem(104, (4,), (), 6, 5, 3, 2, 2),
                " for queries (4, d_q) scoring the same keys (n, d_k) (the batch dimensions broadcast)")

    def against_linear_layers():
        query, keys, _, W_q, W_k, v = _problem(105, (3,), (3,), 5, 4, 6, 7, 2)
        project_query = nn.Linear(4, 7, bias=False, dtype=torch.float64)
        project_keys = nn.Linear(6, 7, bias=False, dtype=torch.float64)
        with torch.no_grad():  # nn.Linear stores the transpose: x @ W == F.linear(x, W.T)
            project_query.weight.copy_(W_q.T)
            project_keys.weight.copy_(W_k.T)
        with torch.no_grad():
            expected = torch.tanh(project_query(query)[:, None, :] + project_keys(keys)) @ v
        assert_close(fn(query, keys, W_q, W_k, v), expected,
                     what="scores compared with nn.Linear layers holding W_q and W_k")

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            problem = _problem(106, (2,), (2,), 5, 4, 3, 6, 2, dtype=dtype)
            scores = compare(problem, f" ({str(dtype)[6:]})")
            assert_dtype(scores, dtype, what=f"scores of {str(dtype)[6:]} inputs")

    def size_one():
        compare(_problem(107, (1,), (1,), 1, 3, 2, 1, 2), " for a batch of one, one key and d_attn = 1")
        compare(_problem(108, (1, 2), (1, 2), 3, 1, 1, 4, 2, dtype=torch.float32),
                " for batch dimensions (1, 2) and d_q = d_k = 1")

    run_checks("additive_scores", [
        ("W_q for the query, W_k for the keys", matrices_on_the_right_place),
        ("shapes and values, d_q != d_k != d_attn", one_query_per_batch_element),
        ("batch dimensions (2, 3)", batch_dimensions),
        ("one query without batch dimensions", single_query),
        ("several queries scoring shared keys", keys_shared_by_queries),
        ("agrees with nn.Linear layers (weights copied across)", against_linear_layers),
        ("float32 and float64 kept", keeps_dtype),
        ("size-1 dimensions: a batch of one, one key, d_q = d_k = d_attn = 1", size_one),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 2: additive_attention
# --------------------------------------------------------------------------------------------


def _attention_mistakes(query, keys, values, W_q, W_k, v, mask) -> dict[str, torch.Tensor]:
    """What the weights would be with the usual mistakes (for ``explain_mismatch``)."""
    scores = reference_additive_scores(query, keys, W_q, W_k, v)
    candidates = {}
    if isinstance(mask, torch.Tensor):
        allowed = mask.expand_as(scores)
        candidates["the mask is ignored: set the scores to -inf where the mask is False, before "
                   "the softmax"] = torch.softmax(scores, dim=-1)
        candidates["you zeroed the padding weights after the softmax, so the rest no longer sum "
                   "to 1: set the masked scores to -inf before the softmax instead"] = (
            torch.softmax(scores, dim=-1) * allowed)
        prefix = torch.arange(allowed.shape[-1]) < allowed.sum(-1, keepdim=True)
        if not torch.equal(prefix, allowed):  # only a mask that is no padding mask tells these apart
            candidates["you read the mask as a padding mask (its first mask.sum() keys), but any "
                       "pattern may be masked: fill -inf exactly where the mask is False "
                       "(scores.masked_fill(~mask, -inf))"] = (
                torch.softmax(scores.masked_fill(~prefix, -math.inf), dim=-1))
        if bool((~allowed).any()):  # rows the mask allows entirely become nan: all -inf
            candidates["you masked the keys that may be used: True means 'may be used' "
                       "(PyTorch's convention), so fill -inf where the mask is False (~mask)"] = (
                torch.softmax(scores.masked_fill(allowed, -math.inf), dim=-1))
        scores = scores.masked_fill(~allowed, -math.inf)
    if scores.dim() >= 2 and scores.shape[0] > 1:
        candidates["your softmax runs over the batch axis (dim=0) instead of the key axis (dim=-1)"] = (
            torch.softmax(scores, dim=0))
    candidates["you returned the scores, not the weights: apply a softmax over the key axis"] = scores
    return candidates


def check_additive_attention(fn: Callable) -> None:
    """Check ``additive_attention(query, keys, values, W_q, W_k, v, mask=None)``."""
    meaning_context, meaning_weights = "(..., d_v)", "(..., n)"

    def compare(problem, mask=None, label=""):
        query, keys, values, W_q, W_k, v = problem
        kwargs = {} if mask is None else {"mask": mask}
        context, weights = assert_pair(assert_not_modified(fn, query, keys, values, W_q, W_k, v, **kwargs),
                                       what="additive_attention", names="(context, weights)")
        ref_context, ref_weights = reference_additive_attention(query, keys, values, W_q, W_k, v, mask)
        swapped = ("did you return (weights, context) instead of (context, weights)?"
                   if _shape(context) == tuple(ref_weights.shape) else "")
        assert_shape(context, ref_context.shape, what=f"context{label}", meaning=meaning_context,
                     hint=swapped or _squeezed(context, ref_context.shape)
                     or ("the context averages the values (..., n, d_v), not the keys"
                         if _shape(context)[-1:] == (keys.shape[-1],) else ""))
        assert_shape(weights, ref_weights.shape, what=f"weights{label}", meaning=meaning_weights,
                     hint=_squeezed(weights, ref_weights.shape))
        mistake = explain_mismatch(weights, _attention_mistakes(query, keys, values, W_q, W_k, v, mask))
        assert_finite(weights, what=f"weights{label}", hint=mistake)
        assert_nonnegative(weights, what=f"weights{label}", hint=mistake)
        if isinstance(mask, torch.Tensor):
            _assert_zero_at_padding(weights, mask, what=f"weights{label}", hint=mistake)
        _assert_sum_to_one_over_unmasked(weights, what=f"your weights{label}",
                                         hint=mistake or "take the softmax over the key axis (dim=-1)")
        for name, value in (("context", context), ("weights", weights)):
            assert_dtype(value, query.dtype, what=f"{name} of {str(query.dtype)[6:]} inputs")
        assert_close(weights, ref_weights, what=f"weights{label}", hint=mistake)
        assert_close(context, ref_context, what=f"context{label}",
                     hint="the weights are right, so check the weighted average of the values: "
                          "(weights.unsqueeze(-2) @ values).squeeze(-2)")
        return context, weights

    def plain():
        compare(_problem(200, (3,), (3,), 7, 5, 4, 6, 2))

    def padding_mask():
        compare(_problem(201, (4,), (4,), 6, 5, 4, 3, 2), mask=_padding([6, 4, 2, 1], 6),
                label=" with a padding mask (lengths 6, 4, 2, 1)")

    def any_mask():
        mask = torch.tensor([[True, False, True, False, True], [False, False, False, True, False],
                             [True, True, False, True, True]])
        compare(_problem(202, (3,), (3,), 5, 4, 3, 5, 3), mask=mask, label=" with a scattered mask")

    def shared_mask():
        compare(_problem(203, (3,), (3,), 5, 4, 3, 5, 3), mask=torch.tensor([True, True, True, False, False]),
                label=" with one mask (n,) for the whole batch")

    def batch_dimensions():
        mask = _padding([5, 3, 1, 4, 2, 5], 5).reshape(2, 3, 5)
        compare(_problem(204, (2, 3), (2, 3), 5, 4, 6, 3, 2), mask=mask, label=" for batch dimensions (2, 3)")

    def large_scores():
        problem = _problem(205, (3,), (3,), 6, 4, 4, 5, 2, v_scale=1000.0)
        context, weights = fn(*problem, mask=_padding([6, 3, 1], 6))
        assert_finite(weights, what="weights for scores in the thousands",
                      hint="nan for scores in the thousands: exp overflows. Use torch.softmax, or "
                           "subtract the largest score before exp")
        compare(problem, mask=_padding([6, 3, 1], 6), label=" for scores in the thousands")

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            problem = _problem(206, (2,), (2,), 5, 4, 3, 6, 2, dtype=dtype)
            context, weights = compare(problem, mask=_padding([5, 2], 5), label=f" ({str(dtype)[6:]})")
            assert_dtype(context, dtype, what=f"context of {str(dtype)[6:]} inputs")
            assert_dtype(weights, dtype, what=f"weights of {str(dtype)[6:]} inputs")

    def gradients():
        query, keys, values, W_q, W_k, v = _problem(207, (3,), (3,), 5, 4, 3, 6, 2)
        params = {"W_q": W_q.requires_grad_(), "W_k": W_k.requires_grad_(), "v": v.requires_grad_(),
                  "query": query.requires_grad_(), "keys": keys.requires_grad_(),
                  "values": values.requires_grad_()}
        target = torch.randn(3, 2, generator=_seeded(208), dtype=torch.float64)
        mask = _padding([5, 3, 2], 5)
        context, _ = fn(query, keys, values, W_q, W_k, v, mask=mask)
        _backward((context * target).sum(), where="the context")
        leaves = _float64_leaves(params)
        ref_context, _ = reference_additive_attention(
            leaves["query"], leaves["keys"], leaves["values"], leaves["W_q"], leaves["W_k"], leaves["v"], mask)
        expected = _reference_gradients((ref_context * target).sum(), leaves)
        _assert_gradients(params, where="the context", expected=expected)

    def size_one():
        compare(_problem(209, (1,), (1,), 1, 3, 2, 2, 1), mask=torch.tensor([[True]]),
                label=" for a batch of one, one key (mask [[True]]) and d_v = 1")
        compare(_problem(210, (1,), (1,), 4, 2, 1, 1, 1, dtype=torch.float32), mask=_padding([2], 4),
                label=" for a batch of one and d_k = d_v = d_attn = 1")
        compare(_problem(211, (2, 1), (2, 1), 3, 1, 2, 3, 2), label=" for batch dimensions (2, 1) and d_q = 1")

    run_checks("additive_attention", [
        ("shapes and values, no mask", plain),
        ("padding mask: 0 on padding, sum 1 over the rest", padding_mask),
        ("a scattered boolean mask", any_mask),
        ("one mask broadcast over the batch", shared_mask),
        ("batch dimensions (2, 3)", batch_dimensions),
        ("scores in the thousands", large_scores),
        ("float32 and float64 kept", keeps_dtype),
        ("gradients reach W_q, W_k, v and the inputs", gradients),
        ("size-1 dimensions: a batch of one, one key, d_v = d_attn = 1", size_one),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 3: AdditiveAttention
# --------------------------------------------------------------------------------------------


def _parameters_of(module: nn.Module, what: str) -> dict[str, nn.Parameter]:
    named = dict(module.named_parameters())
    expected = {"W_q", "W_k", "v"}
    missing = sorted(expected - set(named))
    if missing:
        found = ", ".join(sorted(named)) or "none"
        hint = ""
        if any("." in name for name in named):
            hint = (" (W_q, W_k and v are nn.Parameters of their own, applied on the right as "
                    "query @ W_q, not nn.Linear layers)")
        raise AssertionError(
            f"{what} has no parameter named {', '.join(missing)} (its parameters: {found}){hint}; "
            "create them in __init__ as nn.Parameter attributes of the shapes in the docstring")
    extra = sorted(set(named) - expected)
    if extra:
        raise AssertionError(f"{what} has parameters {', '.join(extra)} besides W_q, W_k and v; "
                             "additive attention needs only those three")
    return {name: named[name] for name in ("W_q", "W_k", "v")}


def check_additive_attention_module(cls: Callable) -> None:
    """Check the ``AdditiveAttention(d_q, d_k, d_attn)`` module."""
    d_q, d_k, d_attn, d_v = 5, 4, 6, 3
    label = f"AdditiveAttention({d_q}, {d_k}, {d_attn})"

    def build(seed=0, sizes=(d_q, d_k, d_attn)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(*sizes)

    def parameters():
        module = build()
        if not isinstance(module, nn.Module):
            raise AssertionError(f"{label} is a {type(module).__name__}, not an nn.Module")
        params = _parameters_of(module, label)
        for name, shape, meaning in (("W_q", (d_q, d_attn), "(d_q, d_attn)"),
                                     ("W_k", (d_k, d_attn), "(d_k, d_attn)"),
                                     ("v", (d_attn,), "(d_attn,)")):
            p = params[name]
            transposed = (f"{name} is applied on the right ({'query' if name == 'W_q' else 'keys'} "
                          f"@ {name}), so its shape is {meaning}: the transpose of an nn.Linear weight"
                          if len(shape) == 2 and _shape(p) == shape[::-1] else "")
            assert_shape(p, shape, what=f"parameter {name}", meaning=meaning, hint=transposed)
            assert_dtype(p, torch.float32, what=f"parameter {name}",
                         hint="create it with torch.empty(...) in the default dtype, float32")
            if not p.requires_grad:
                raise AssertionError(f"parameter {name} does not require a gradient; wrap it in nn.Parameter")

    def initialised():
        for seed, sizes in ((7, (d_q, d_k, d_attn)), (3, (1, 6, 7))):
            params = _parameters_of(build(seed, sizes), f"AdditiveAttention{sizes}")
            for name, fan_in in zip(("W_q", "W_k", "v"), (sizes[0], sizes[1], sizes[2])):
                p = params[name].detach()
                bound = 1 / math.sqrt(fan_in)
                assert_finite(p, what=f"parameter {name}",
                              hint="torch.empty leaves memory uninitialised: keep the call to reset_parameters")
                if not (p != 0).any() or p.abs().max() > bound + 1e-6:
                    raise AssertionError(
                        f"parameter {name} of AdditiveAttention{sizes} is not initialised by "
                        f"reset_parameters (its entries should be drawn uniformly in ±1/sqrt({fan_in}) "
                        f"= ±{bound:.3g}, but range from {_num(p.min())} to {_num(p.max())}); keep the "
                        "call to reset_parameters at the end of __init__, after creating the parameters")
        first, second = _parameters_of(build(7), label), _parameters_of(build(7), label)
        different = _parameters_of(build(8), label)
        for name in first:
            if not torch.equal(first[name], second[name]):
                raise AssertionError(f"two modules built after torch.manual_seed(7) differ in {name}: "
                                     "draw the parameters from torch's global generator")
        if all(torch.equal(first[n], different[n]) for n in first):
            raise AssertionError("modules built with different seeds have identical parameters: let "
                                 "reset_parameters draw them from torch's global generator")

    def forward():
        module = build(1)
        params = {name: p.detach() for name, p in _parameters_of(module, label).items()}
        query, keys, values, *_ = _problem(300, (4,), (4,), 6, d_q, d_k, d_attn, d_v, dtype=torch.float32)
        mask = _padding([6, 4, 2, 1], 6)
        context, weights = assert_pair(assert_not_modified(module.forward, query, keys, values, mask),
                                       what=f"{label}(query, keys, values, mask)", names="(context, weights)")
        ref_context, ref_weights = reference_additive_attention(
            query, keys, values, params["W_q"], params["W_k"], params["v"], mask)
        assert_shape(context, ref_context.shape, what="context", meaning="(..., d_v)")
        assert_shape(weights, ref_weights.shape, what="weights", meaning="(..., n)")
        _assert_zero_at_padding(weights, mask, hint="pass the mask on to additive_attention")
        assert_close(weights, ref_weights, what="weights of the module",
                     hint="forward must call additive_attention with self.W_q, self.W_k, self.v and the mask")
        assert_close(context, ref_context, what="context of the module")
        for name, value in (("context", context), ("weights", weights)):
            assert_dtype(value, torch.float32, what=f"{name} of the float32 module and inputs",
                         hint="keep the dtype of the inputs: no .double() or .float() in forward")

    def without_mask():
        module = build(2)
        query, keys, values, *_ = _problem(301, (2, 3), (2, 3), 5, d_q, d_k, d_attn, d_v, dtype=torch.float32)
        context, weights = module(query, keys, values)
        params = {name: p.detach() for name, p in _parameters_of(module, label).items()}
        ref_context, _ = reference_additive_attention(query, keys, values, params["W_q"], params["W_k"], params["v"])
        assert_close(context, ref_context, what="context without a mask, batch dimensions (2, 3)")

    def gradients():
        module = build(3)
        query, keys, values, *_ = _problem(302, (3,), (3,), 5, d_q, d_k, d_attn, d_v, dtype=torch.float32)
        mask = _padding([5, 2, 4], 5)
        context, _ = module(query, keys, values, mask)
        target = torch.randn(context.shape, generator=_seeded(303))
        _backward((context * target).sum(), where="the context")
        params = _parameters_of(module, label)
        leaves = _float64_leaves(params)
        ref_context, _ = reference_additive_attention(
            query, keys, values, leaves["W_q"], leaves["W_k"], leaves["v"], mask)
        expected = _reference_gradients((ref_context * target.double()).sum(), leaves)
        _assert_gradients({f"parameter {n}": p for n, p in params.items()}, where="the module's context",
                          expected={f"parameter {n}": g for n, g in expected.items()})

    def size_one():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(4)
            module = cls(1, 2, 1)
        params = {name: p.detach() for name, p in _parameters_of(module, "AdditiveAttention(1, 2, 1)").items()}
        query, keys, values, *_ = _problem(305, (1,), (1,), 3, 1, 2, 1, 1, dtype=torch.float32)
        for mask in (_padding([2], 3), None):
            args = (query, keys, values) if mask is None else (query, keys, values, mask)
            context, weights = assert_pair(module(*args), what="AdditiveAttention(1, 2, 1)", names="(context, weights)")
            ref_context, ref_weights = reference_additive_attention(
                query, keys, values, params["W_q"], params["W_k"], params["v"], mask)
            for name, value, expected in (("context", context, ref_context), ("weights", weights, ref_weights)):
                what = (f"{name} of AdditiveAttention(1, 2, 1) for a batch of one and d_v = 1"
                        + (" without a mask" if mask is None else ""))
                assert_shape(value, expected.shape, what=what, hint=_squeezed(value, expected.shape))
                assert_close(value, expected, what=what)

    def double():
        module = build(4).double()
        params = {name: p.detach() for name, p in _parameters_of(module, label).items()}
        for name, p in params.items():
            assert_dtype(p, torch.float64, what=f"parameter {name} after module.double()",
                         hint="register it as an nn.Parameter (a plain tensor attribute is not converted)")
        query, keys, values, *_ = _problem(304, (2,), (2,), 4, d_q, d_k, d_attn, d_v)
        context, weights = module(query, keys, values)
        assert_dtype(context, torch.float64, what="context of the float64 module")
        ref_context, _ = reference_additive_attention(query, keys, values, params["W_q"], params["W_k"], params["v"])
        assert_close(context, ref_context, what="context of the float64 module")

    run_checks("AdditiveAttention", [
        ("parameters W_q, W_k, v of the right shapes", parameters),
        ("initialised by reset_parameters, reproducible with a seed", initialised),
        ("forward equals additive_attention with the module's parameters", forward),
        ("forward without a mask, batch dimensions (2, 3)", without_mask),
        ("gradients reach W_q, W_k and v", gradients),
        ("module.double() works", double),
        ("size-1 dimensions: d_q = d_attn = 1, a batch of one, d_v = 1", size_one),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 4: AttentionDecoderStep
# --------------------------------------------------------------------------------------------


def _step_weights(step: nn.Module) -> dict[str, torch.Tensor]:
    """The weights of a decoder step by ``named_parameters`` name, read from its attributes."""
    attention, cell = step.attention, step.cell
    return {"embedding.weight": step.embedding.weight, "attention.W_q": attention.W_q,
            "attention.W_k": attention.W_k, "attention.v": attention.v,
            "cell.weight_ih": cell.weight_ih, "cell.weight_hh": cell.weight_hh, "cell.bias_ih": cell.bias_ih,
            "cell.bias_hh": cell.bias_hh, "output.weight": step.output.weight, "output.bias": step.output.bias}


def _reference_step(weights: dict[str, torch.Tensor], prev, hidden, states, mask, *, swap_cell_input=False,
                    swap_output_input=False, output_from_old_hidden=False):
    """float64 (logits, new_hidden, weights) of Bahdanau's decoder step from the step's
    ``weights`` (``_step_weights``; float64 leaves keep their graph)."""
    w = {name: _float64(t) for name, t in weights.items()}
    context, attention = reference_additive_attention(
        hidden, states, states, w["attention.W_q"], w["attention.W_k"], w["attention.v"], mask)
    embedded = w["embedding.weight"][prev]
    cell_input = torch.cat([context, embedded] if swap_cell_input else [embedded, context], dim=-1)
    new_hidden = _gru_cell(cell_input, _float64(hidden), w["cell.weight_ih"], w["cell.weight_hh"],
                           w["cell.bias_ih"], w["cell.bias_hh"])
    read = _float64(hidden) if output_from_old_hidden else new_hidden
    output_input = torch.cat([context, read] if swap_output_input else [read, context], dim=-1)
    logits = output_input @ w["output.weight"].T + w["output.bias"]
    return logits, new_hidden, attention  # float64 references


def check_attention_decoder_step(cls: Callable) -> None:
    """Check ``AttentionDecoderStep(vocab_size, d_embed, d_hidden, d_enc, d_attn).forward``."""
    vocab, d_embed, d_hidden, d_enc, d_attn = 9, 3, 5, 6, 4
    batch, n = 4, 7
    label = f"AttentionDecoderStep({vocab}, {d_embed}, {d_hidden}, {d_enc}, {d_attn})"

    def build(seed=0, dtype=torch.float32, sizes=(vocab, d_embed, d_hidden, d_enc, d_attn)):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            step = cls(*sizes).to(dtype)
        # Weights of the check's own, as the grader sets them: this checks the step, not how
        # AdditiveAttention draws its parameters (exercise 3 checks that).
        g = _seeded(1000 + seed)
        with torch.no_grad():
            for parameter in step.parameters():
                parameter.copy_(0.5 * torch.randn(parameter.shape, generator=g, dtype=torch.float64))
        return step

    def inputs(seed, dtype=torch.float32, lengths=(7, 5, 3, 1)):
        g = _seeded(seed)
        prev = torch.randint(vocab, (batch,), generator=g)
        hidden = torch.randn(batch, d_hidden, generator=g, dtype=torch.float64).to(dtype)
        states = torch.randn(batch, n, d_enc, generator=g, dtype=torch.float64).to(dtype)
        return prev, hidden, states, _padding(list(lengths), n)

    def run(step, prev, hidden, states, mask, label_="", name=label):
        args = (prev, hidden, states) if mask is None else (prev, hidden, states, mask)
        result = assert_not_modified(step.forward, *args)
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise AssertionError(f"{name}.forward must return three things (logits, new_hidden, "
                                 f"weights), got {type(result).__name__}"
                                 + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""))
        logits, new_hidden, weights = result
        order = "return them in the order (logits, new_hidden, weights)"
        size, vocab_, d_hidden_ = len(prev), step.output.out_features, step.cell.hidden_size
        for value, shape, what, meaning in ((logits, (size, vocab_), "logits", "(batch, vocab_size)"),
                                            (new_hidden, (size, d_hidden_), "new_hidden", "(batch, d_hidden)"),
                                            (weights, (size, states.shape[1]), "weights", "(batch, n)")):
            assert_shape(value, shape, what=f"{what}{label_}", meaning=meaning,
                         hint=_squeezed(value, shape) or order)
        for what, value in (("logits", logits), ("new_hidden", new_hidden), ("weights", weights)):
            assert_dtype(value, hidden.dtype, what=f"{what} of a {str(hidden.dtype)[6:]} module and inputs",
                         hint="keep the dtype of the inputs: no .double() or .float() in forward")
        return logits, new_hidden, weights

    def shapes():
        run(build(), *inputs(400))

    def matches_reference(dtype=torch.float32):
        def case():
            step = build(1, dtype)
            prev, hidden, states, mask = inputs(401, dtype)
            logits, new_hidden, weights = run(step, prev, hidden, states, mask)
            with torch.no_grad():
                w = _step_weights(step)
                ref_logits, ref_hidden, ref_weights = _reference_step(w, prev, hidden, states, mask)
                mistakes = {
                    "the cell's input is (embedding, context), in that order: the embedding of "
                    "prev_tokens first, then the context, concatenated along the last axis":
                        _reference_step(w, prev, hidden, states, mask, swap_cell_input=True)[1],
                }
                logit_mistakes = {
                    "the output layer reads (new_hidden, context), in that order":
                        _reference_step(w, prev, hidden, states, mask, swap_output_input=True)[0],
                    "the output layer must read the new state (the cell's output), not the old one":
                        _reference_step(w, prev, hidden, states, mask, output_from_old_hidden=True)[0],
                }
            _assert_zero_at_padding(weights, mask, hint="pass the mask on to self.attention")
            _assert_sum_to_one_over_unmasked(weights)
            assert_close(weights, ref_weights, what="weights",
                         hint="attend with the previous state: self.attention with hidden as the "
                              "query, the encoder states as keys and values, and the mask")
            old = ("your new_hidden is the hidden state you were given: return the GRU cell's output"
                   if torch.equal(_as_float64(new_hidden), _as_float64(hidden)) else "")
            assert_close(new_hidden, ref_hidden, what="new_hidden",
                         hint=old or explain_mismatch(new_hidden, mistakes))
            assert_close(logits, ref_logits, what="logits", hint=explain_mismatch(logits, logit_mistakes))
        return case

    def without_mask():
        step = build(2)
        prev, hidden, states, _ = inputs(402)
        logits, new_hidden, weights = run(step, prev, hidden, states, None, " without a mask")
        with torch.no_grad():
            ref_logits, ref_hidden, ref_weights = _reference_step(_step_weights(step), prev, hidden, states, None)
        assert_close(weights, ref_weights, what="weights without a mask")
        assert_close(logits, ref_logits, what="logits without a mask")

    def gradients():
        step = build(3)
        prev, hidden, states, mask = inputs(403)
        logits, new_hidden, _ = step(prev, hidden, states, mask)
        target = torch.randn(logits.shape, generator=_seeded(404))
        _backward((logits * target).sum(), where="the logits")
        leaves = _float64_leaves(_step_weights(step))
        ref_logits, _, _ = _reference_step(leaves, prev, hidden, states, mask)
        expected = _reference_gradients((ref_logits * target.double()).sum(), leaves)
        params = {f"parameter {name}": p for name, p in _step_weights(step).items()}
        _assert_gradients(params, where="the logits",
                          expected={f"parameter {name}": g for name, g in expected.items()})

    def several_steps():
        step = build(5)
        prev, hidden, states, mask = inputs(405, lengths=(2, 7, 1, 4))
        ref_hidden = hidden
        for t in range(3):
            logits, hidden, weights = step(prev, hidden, states, mask)
            with torch.no_grad():
                ref_logits, ref_hidden, _ = _reference_step(_step_weights(step), prev, ref_hidden, states, mask)
            assert_close(hidden, ref_hidden, what=f"new_hidden after {t + 1} steps", rtol=1e-4, atol=1e-5)
            prev = logits.argmax(dim=-1)

    def size_one():
        sizes = (4, 1, 2, 1, 1)
        step = build(6, sizes=sizes)
        name = f"AttentionDecoderStep{sizes}"
        g = _seeded(406)
        for n_source, lengths in ((1, [1]), (3, [2]), (2, None)):
            prev = torch.randint(sizes[0], (1,), generator=g)
            hidden = torch.randn(1, sizes[2], generator=g)
            states = torch.randn(1, n_source, sizes[3], generator=g)
            mask = None if lengths is None else _padding(lengths, n_source)
            label_ = f" for a batch of one and n = {n_source}" + (" without a mask" if mask is None else "")
            for _ in range(2):  # two steps in a row
                logits, new_hidden, weights = run(step, prev, hidden, states, mask, label_, name)
                with torch.no_grad():
                    expected = _reference_step(_step_weights(step), prev, hidden, states, mask)
                for what, value, reference in zip(("logits", "new_hidden", "weights"),
                                                  (logits, new_hidden, weights), expected):
                    assert_close(value, reference, what=f"{what} of {name}{label_}")
                prev, hidden = logits.argmax(dim=-1), new_hidden.detach()

    run_checks("AttentionDecoderStep", [
        ("returns (logits, new_hidden, weights) of the right shapes and dtype", shapes),
        ("matches an independent float64 computation", matches_reference()),
        ("float64 module and inputs", matches_reference(torch.float64)),
        ("no mask", without_mask),
        ("gradients reach every parameter", gradients),
        ("three steps in a row, feeding back the state", several_steps),
        ("size-1 dimensions: a batch of one, one source position, d_embed = d_enc = d_attn = 1", size_one),
    ])
