"""Visible checks of lesson 04: ``check_split_heads``, ``check_merge_heads``, ``check_repeat_kv``,
``check_multi_head_attention``, ``check_kv_cache``, ``check_kv_cache_bytes``; and, for the ungraded
exercise 6 (uptraining), ``check_share_kv_heads`` and ``check_kv_heads_choice``, which accept any
answer that meets the exercise's conditions and say which condition another answer breaks; and,
for the ungraded exercise 7, ``check_induction_test`` (the repeated-random-tokens test of
induction), against the course's reference ``attnlab.zoo.induction``.

The references are PyTorch's own ``torch.nn.MultiheadAttention`` (weights copied across) and
``F.scaled_dot_product_attention(..., enable_gqa=True)``, and ``reference_multi_head_attention``
below: multi-head attention written out in float64, with switches for the usual mistakes so that a
failing check can say which one it sees.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.checks.common import (
    _as_float64,
    _seeded,
    _shape,
    assert_close,
    assert_dtype,
    assert_finite,
    assert_not_modified,
    assert_pair,
    assert_rows_sum_to_one,
    assert_shape,
    causal_allowed,
    explain_mismatch,
    run_checks,
)

__all__ = [
    "check_kv_cache",
    "check_kv_cache_bytes",
    "check_induction_test",
    "check_kv_heads_choice",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_repeat_kv",
    "check_share_kv_heads",
    "check_split_heads",
    "reference_multi_head_attention",
    "reference_rope",
]

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


# --------------------------------------------------------------------------------------------
# Trusted references (float64)
# --------------------------------------------------------------------------------------------


def reference_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary positions, "half" layout, in float64: pairs (i, i + h/2) turn by position * base^(-2i/h)."""
    x = _as_float64(x)
    h = x.shape[-1]
    angles = positions.to(torch.float64)[..., None] * base ** (-torch.arange(h // 2, dtype=torch.float64) * 2 / h)
    first, second = x[..., : h // 2], x[..., h // 2:]
    return torch.cat([first * angles.cos() - second * angles.sin(), first * angles.sin() + second * angles.cos()], -1)


def _heads(t: torch.Tensor, n_heads: int, interleaved: bool = False) -> torch.Tensor:
    """(b, n, H*h) -> (b, H, n, h); ``interleaved``: the mistake of giving head i every H-th feature."""
    b, n, width = t.shape
    if interleaved:
        return t.reshape(b, n, width // n_heads, n_heads).permute(0, 3, 1, 2)
    return t.reshape(b, n, n_heads, width // n_heads).transpose(1, 2)


def reference_multi_head_attention(
    params: dict[str, torch.Tensor], x, n_heads: int, n_kv_heads: int | None = None, *, memory=None,
    mask=None, causal: bool = False, head_mask=None, positions=None, rope_base: float | None = None,
    tiled_kv: bool = False, interleaved_heads: bool = False, skip_o_proj: bool = False,
    top_left_causal: bool = False, causal_memory: bool = False, model_scale: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (b, n, d_model), weights (b, H, n, n_k)) of multi-head attention, in float64.

    params: the module's state dict (``q_proj.weight``, ``q_proj.bias`` if any, ...). Keys and
    values come from ``memory`` when given (cross-attention: no rotation, no causal mask). Query
    rows with no key allowed get weights 0 and output 0 before ``o_proj``. The last six switches
    reproduce mistakes: key/value heads tiled (0, 1, 0, 1) instead of repeated (0, 0, 1, 1), head i
    given every H-th feature, no output projection, a causal mask aligned to the top-left corner,
    a causal mask applied to cross-attention, scores divided by sqrt(d_model) instead of sqrt(h).
    """
    p = {name: _as_float64(value) for name, value in params.items()}
    x = _as_float64(x)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads

    def project(name, t):
        out = t @ p[f"{name}.weight"].T
        return out + p[f"{name}.bias"] if f"{name}.bias" in p else out

    source = x if memory is None else _as_float64(memory)
    q = _heads(project("q_proj", x), n_heads, interleaved_heads)
    k = _heads(project("k_proj", source), n_kv_heads, interleaved_heads)
    v = _heads(project("v_proj", source), n_kv_heads, interleaved_heads)
    n, n_k = q.shape[-2], k.shape[-2]
    if rope_base is not None and memory is None:
        where = torch.arange(n) if positions is None else positions
        where = where[:, None, :] if where.dim() == 2 else where
        q, k = reference_rope(q, where, rope_base), reference_rope(k, where, rope_base)
    rep = n_heads // n_kv_heads
    k, v = ((t.repeat(1, rep, 1, 1) if tiled_kv else t.repeat_interleave(rep, dim=1)) for t in (k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1] if model_scale else q.shape[-1])
    allowed = torch.ones(scores.shape, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & torch.as_tensor(mask, dtype=torch.bool)
    if causal and (memory is None or causal_memory):
        allowed = allowed & (torch.ones(n, n_k, dtype=torch.bool).tril() if top_left_causal
                             else causal_allowed(n, n_k))
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(0.0)
    out = weights @ v
    if head_mask is not None:
        out = out * _as_float64(head_mask)[:, None, None]
    b = out.shape[0]
    if interleaved_heads:
        merged = out.permute(0, 2, 3, 1).reshape(b, n, -1)
    else:
        merged = out.transpose(1, 2).reshape(b, n, -1)
    return (merged if skip_o_proj else project("o_proj", merged)), weights


# --------------------------------------------------------------------------------------------
# split_heads, merge_heads, repeat_kv
# --------------------------------------------------------------------------------------------


def _random(seed: int, *shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=_seeded(seed), dtype=torch.float64).to(dtype)


_SPLIT_MEANING = "(..., n_heads, n, h)"


def check_split_heads(fn: Callable) -> None:
    """Check ``split_heads(x, n_heads)``: (..., n, H*h) -> (..., H, n, h), consecutive slices."""

    def hints(x, n_heads):
        *lead, n, width = x.shape
        h = width // n_heads
        return {
            "you reshaped to (..., n_heads, n, h) in one step, which cuts the flat features in the "
            "wrong places: reshape to (..., n, n_heads, h) first, then swap the token and head axes "
            "(transpose(-3, -2))": x.reshape(*lead, n_heads, n, h),
            "head i got every n_heads-th feature (reshape to (..., n, h, n_heads)): head i must get the "
            "consecutive slice i*h ... i*h + h - 1, so reshape to (..., n, n_heads, h)":
                x.reshape(*lead, n, h, n_heads).movedim(-1, -3),
        }

    def compare(x, n_heads, label):
        got = assert_not_modified(fn, x, n_heads)
        *lead, n, width = x.shape
        want = x.reshape(*lead, n, n_heads, width // n_heads).transpose(-3, -2)
        shape_hint = ("the head axis must come before the token axis: (..., n_heads, n, h), so that "
                      "each head is a separate batch of attention" if _shape(got) == (*lead, n, n_heads, width // n_heads)
                      else "")
        assert_shape(got, want.shape, what=f"split_heads{label}", meaning=_SPLIT_MEANING, hint=shape_hint)
        assert_close(got, want, what=f"split_heads{label}", hint=explain_mismatch(got, hints(x, n_heads)))

    def one_sequence():
        x = _random(0, 5, 12)
        compare(x, 3, " of a (5, 12) input, 3 heads")
        for i in range(3):
            assert_close(fn(x, 3)[i], x[:, 4 * i: 4 * i + 4], what=f"head {i} of split_heads(x, 3)",
                         hint=f"head {i} must hold features {4 * i} to {4 * i + 3} of every token")

    def batched():
        compare(_random(1, 2, 3, 7, 8), 2, " of a (2, 3, 7, 8) input, 2 heads")

    def one_head():
        compare(_random(2, 2, 4, 6), 1, " with n_heads=1")

    def size_one():
        compare(_random(4, 1, 5), 5, " of a (1, 5) input: one token, 5 heads of size 1")

    def keeps_dtype():
        x = _random(3, 2, 5, 8, dtype=torch.float32)
        got = fn(x, 4)
        assert_dtype(got, torch.float32, what="split_heads of a float32 input")
        assert_close(got, x.reshape(2, 5, 4, 2).transpose(-3, -2), what="split_heads of a float32 input")

    run_checks("split_heads", [
        ("head i holds features i*h ... i*h+h-1", one_sequence),
        ("leading batch dimensions", batched),
        ("one head", one_head),
        ("one token, heads of size 1", size_one),
        ("float32 kept", keeps_dtype),
    ])


_MERGE_HINT = ("you reshaped without first swapping the head and token axes back: transpose(-3, -2), "
               "then reshape to (..., n, n_heads * h)")


def check_merge_heads(fn: Callable) -> None:
    """Check ``merge_heads(x)``: (..., H, n, h) -> (..., n, H*h), the inverse of splitting."""

    def compare(x, label):
        got = assert_not_modified(fn, x)
        *lead, n_heads, n, h = x.shape
        want = x.transpose(-3, -2).reshape(*lead, n, n_heads * h)
        assert_shape(got, want.shape, what=f"merge_heads{label}", meaning="(..., n, n_heads * h)")
        assert_close(got, want, what=f"merge_heads{label}", hint=explain_mismatch(got, {
            _MERGE_HINT: x.reshape(*lead, n, n_heads * h)}))

    def inverse():
        x = _random(10, 5, 12)
        split = x.reshape(5, 3, 4).transpose(0, 1)
        got = assert_not_modified(fn, split)
        assert_shape(got, x.shape, what="merge_heads of a (3, 5, 4) input", meaning="(n, n_heads * h)")
        assert_close(got, x, what="merge_heads(split_heads(x, 3))", hint=explain_mismatch(got, {
            _MERGE_HINT: split.reshape(5, 12)}) or "merging must put every feature back where split_heads took it from")

    def batched():
        compare(_random(11, 2, 3, 4, 7, 5), " of a (2, 3, 4, 7, 5) input")

    def one_head():
        compare(_random(12, 2, 1, 6, 8), " with one head")

    def size_one():
        compare(_random(13, 4, 1, 1), " of a (4, 1, 1) input: 4 heads, one token, heads of size 1")

    def keeps_dtype():
        x = _random(14, 2, 3, 5, 4, dtype=torch.float32)
        assert_dtype(fn(x), torch.float32, what="merge_heads of a float32 input")
        compare(x, " of a float32 input")

    run_checks("merge_heads", [
        ("undoes split_heads", inverse),
        ("leading batch dimensions", batched),
        ("one head", one_head),
        ("one token, heads of size 1", size_one),
        ("float32 kept", keeps_dtype),
    ])


def check_repeat_kv(fn: Callable) -> None:
    """Check ``repeat_kv(k, n_rep)``: (..., G, n, h) -> (..., G*n_rep, n, h), each head repeated
    consecutively."""

    def compare(k, n_rep, label):
        got = assert_not_modified(fn, k, n_rep)
        want = k.repeat_interleave(n_rep, dim=-3)
        assert_shape(got, want.shape, what=f"repeat_kv{label}", meaning="(..., n_kv_heads * n_rep, n, h)",
                     hint="repeat along the head axis, dim=-3")
        reps = [1] * k.dim()
        reps[-3] = n_rep
        assert_close(got, want, what=f"repeat_kv{label}", hint=explain_mismatch(got, {
            "you tiled the heads (0, 1, 0, 1, ...) instead of repeating each one consecutively "
            "(0, 0, 1, 1, ...): key/value head j serves query heads j*n_rep ... j*n_rep + n_rep - 1; "
            "use repeat_interleave(n_rep, dim=-3)": k.repeat(*reps),
        }))

    def groups():
        k = _random(20, 2, 2, 5, 3)
        compare(k, 3, " of 2 key/value heads, n_rep=3")
        got = fn(k, 3)
        for query_head in range(6):
            assert_close(got[:, query_head], k[:, query_head // 3],
                         what=f"query head {query_head}'s keys",
                         hint=f"query head {query_head} belongs to group {query_head // 3}")

    def one_head():
        compare(_random(21, 2, 1, 4, 8), 4, " of 1 key/value head (multi-query), n_rep=4")

    def no_repeat():
        compare(_random(22, 3, 4, 5, 2), 1, " with n_rep=1")

    def batched():
        compare(_random(23, 2, 3, 2, 6, 4), 2, " with two batch dimensions")

    def unbatched():
        compare(_random(24, 3, 4, 5), 2, " of a (3, 4, 5) input with no batch dimension")

    def keeps_dtype():
        k = _random(25, 2, 2, 3, 4, dtype=torch.float32)
        assert_dtype(fn(k, 3), torch.float32, what="repeat_kv of a float32 input")
        compare(k, 3, " of a float32 input")

    run_checks("repeat_kv", [
        ("each key/value head serves a group of consecutive query heads", groups),
        ("multi-query attention (one key/value head)", one_head),
        ("n_rep=1 changes nothing", no_repeat),
        ("two batch dimensions", batched),
        ("no batch dimension", unbatched),
        ("float32 kept", keeps_dtype),
    ])


# --------------------------------------------------------------------------------------------
# MultiHeadAttention
# --------------------------------------------------------------------------------------------


def _build(cls: Callable, seed: int, *args, dtype=torch.float64, **kwargs) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = cls(*args, **kwargs)
    if not isinstance(module, nn.Module):
        raise AssertionError(f"{cls.__name__}(...) is a {type(module).__name__}, not an nn.Module")
    return module.to(dtype)


def _check_projections(module: nn.Module, d_model: int, n_heads: int, n_kv_heads: int, bias: bool) -> None:
    """The four projections exist under their names, as nn.Linear of the right shapes."""
    h = d_model // n_heads
    label = f"MultiHeadAttention({d_model}, {n_heads}, n_kv_heads={n_kv_heads}, bias={bias})"
    shapes = {"q_proj": (n_heads * h, d_model), "k_proj": (n_kv_heads * h, d_model),
              "v_proj": (n_kv_heads * h, d_model), "o_proj": (d_model, n_heads * h)}
    for name, shape in shapes.items():
        layer = getattr(module, name, None)
        if not isinstance(layer, nn.Linear):
            raise AssertionError(
                f"{label} has no nn.Linear called {name}: the course model's saved weights use the "
                f"names {', '.join(PROJECTIONS)}, so create self.{name} = nn.Linear(...)")
        assert_shape(layer.weight, shape, what=f"{name}.weight",
                     meaning=f"(out_features, in_features) = {'(n_kv_heads * h, d_model)' if name in ('k_proj', 'v_proj') else '(n_heads * h, d_model)' if name == 'q_proj' else '(d_model, n_heads * h)'}",
                     hint="keys and values have n_kv_heads heads, queries n_heads" if name in ("k_proj", "v_proj") else "")
        if (layer.bias is not None) != bias:
            raise AssertionError(f"{label}: {name} {'has no' if bias else 'has a'} bias; pass bias=bias to nn.Linear")


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach() for name, value in module.state_dict().items()}


def _call(module, x, **kwargs):
    """``module(x, ..., return_weights=True)``, checked to be a pair."""
    return assert_pair(module(x, return_weights=True, **kwargs), what="forward(..., return_weights=True)")


def _mha_hints(params, x, n_heads, n_kv_heads, **kwargs) -> dict[str, torch.Tensor]:
    """What the output would be with the usual mistakes (for ``explain_mismatch``)."""
    wrong = {
        "you attended with one wide head (scores of all d_model features at once): split the "
        "queries, keys and values into heads first (split_heads), attend per head, then merge_heads":
            dict(n_heads=1, n_kv_heads=1),
        "head i got every n_heads-th feature: split_heads must give head i a consecutive slice":
            dict(interleaved_heads=True),
        "the output projection o_proj is missing: apply it to merge_heads(...)": dict(skip_o_proj=True),
        "you divided the scores by sqrt(d_model): each head divides by sqrt(h), the size of its own "
        "vectors (h = d_model // n_heads); masked_attention on the split heads does that for you":
            dict(model_scale=True),
    }
    if n_kv_heads not in (None, n_heads, 1):
        wrong["your key/value heads are tiled (0, 1, 0, 1) instead of repeated in groups (0, 0, 1, 1): "
              "use repeat_kv"] = dict(tiled_kv=True)
    found = {}
    for hint, change in wrong.items():
        options = {**kwargs, **change}
        heads = options.pop("n_heads", n_heads)
        kv = options.pop("n_kv_heads", n_kv_heads)
        try:
            found[hint] = reference_multi_head_attention(params, x, heads, kv, **options)[0]
        except RuntimeError:  # the mistake does not fit these shapes
            pass
    return found


def check_multi_head_attention(cls: Callable) -> None:
    """Check ``MultiHeadAttention``: projections, torch.nn.MultiheadAttention, GQA, cross-attention,
    masks, head_mask, rotary positions, bad head counts."""
    d_model, n_heads = 12, 3

    def projections():
        for kv, bias in ((None, False), (None, True), (1, False)):
            module = _build(cls, 0, d_model, n_heads, n_kv_heads=kv, bias=bias)
            _check_projections(module, d_model, n_heads, n_heads if kv is None else kv, bias)

    def bad_head_counts():
        for args, problem in (((10, 3), "d_model=10 is not divisible by n_heads=3"),
                              ((12, 4, 3), "n_heads=4 is not a multiple of n_kv_heads=3"),
                              ((12, 4, 0), "there are no key/value heads (n_kv_heads=0)")):
            try:
                cls(*args)
            except ValueError:
                continue
            except Exception as error:  # e.g. ZeroDivisionError from n_heads % 0
                raise AssertionError(f"MultiHeadAttention{args} raised {type(error).__name__} ({error}), not "
                                     f"ValueError, although {problem}; keep the input checks at the top of "
                                     "__init__") from None
            raise AssertionError(f"MultiHeadAttention{args} did not raise ValueError although {problem}; "
                                 "keep the input checks at the top of __init__")

    def matches_torch(bias: bool, padded: bool, causal: bool):
        def case():
            torch_mha = _build(nn.MultiheadAttention, 1, d_model, n_heads, bias=bias, batch_first=True)
            module = _build(cls, 2, d_model, n_heads, bias=bias)
            with torch.no_grad():
                for name, weight in zip(("q_proj", "k_proj", "v_proj"), torch_mha.in_proj_weight.chunk(3)):
                    getattr(module, name).weight.copy_(weight)
                module.o_proj.weight.copy_(torch_mha.out_proj.weight)
                if bias:
                    for name, b in zip(("q_proj", "k_proj", "v_proj"), torch_mha.in_proj_bias.chunk(3)):
                        getattr(module, name).bias.copy_(b)
                    module.o_proj.bias.copy_(torch_mha.out_proj.bias)
            x = _random(3, 2, 6, d_model)
            lengths = torch.tensor([6, 4])
            keep = torch.arange(6)[None, :] < lengths[:, None]            # (b, n_k): True = real token
            mask = keep[:, None, None, :] if padded else None
            kwargs = {"mask": mask} if padded else {}
            if causal:
                kwargs["causal"] = True
            out, weights = _call(module, x, **kwargs)
            ref_out, ref_weights = torch_mha(
                x, x, x, key_padding_mask=~keep if padded else None, average_attn_weights=False,
                attn_mask=~causal_allowed(6) if causal else None)  # torch: True = may NOT attend
            assert_shape(out, (2, 6, d_model), what="out", meaning="(batch, n, d_model)")
            assert_shape(weights, (2, n_heads, 6, 6), what="weights", meaning="(batch, n_heads, n_q, n_k)",
                         hint="one row of weights per head: did you attend with one wide head? Split the "
                              "queries, keys and values into heads first (split_heads)"
                         if _shape(weights)[1:2] == (1,) else "")
            assert_rows_sum_to_one(weights, what="weights")
            params = _state(module)
            hints = _mha_hints(params, x, n_heads, None, mask=mask, causal=causal)
            if padded:
                hints["the mask is ignored: pass it to masked_attention"] = reference_multi_head_attention(
                    params, x, n_heads, causal=causal)[0]
            if causal:
                hints["causal=True is ignored: build masking.causal_mask(n, n_k) and combine it with mask"] = (
                    reference_multi_head_attention(params, x, n_heads, mask=mask)[0])
            assert_close(weights, ref_weights, what="weights", hint=explain_mismatch(out, hints))
            assert_close(out, ref_out, what="out", hint=explain_mismatch(out, hints)
                         or "the weights are right: check merge_heads and o_proj")
        return case

    def grouped_query():
        n_h, n_kv = 4, 2
        module = _build(cls, 4, 16, n_h, n_kv_heads=n_kv)
        x = _random(5, 2, 7, 16)
        out, weights = _call(module, x, causal=True)
        params = _state(module)
        q = x @ params["q_proj.weight"].T
        k = x @ params["k_proj.weight"].T
        v = x @ params["v_proj.weight"].T
        split = lambda t, heads: t.reshape(2, 7, heads, 4).transpose(1, 2)  # noqa: E731
        merged = F.scaled_dot_product_attention(split(q, n_h), split(k, n_kv), split(v, n_kv), is_causal=True,
                                                enable_gqa=True).transpose(1, 2).reshape(2, 7, 16)
        ref_out = merged @ params["o_proj.weight"].T
        assert_shape(weights, (2, n_h, 7, 7), what="weights", meaning="(batch, n_heads, n_q, n_k): one row of "
                     "weights per query head, after repeat_kv")
        assert_close(out, ref_out, what="out of grouped-query attention (4 query heads, 2 key/value heads)",
                     hint=explain_mismatch(out, _mha_hints(params, x, n_h, n_kv, causal=True))
                     or "repeat each key/value head for its group of query heads with repeat_kv")

    def multi_query():
        module = _build(cls, 6, 16, 4, n_kv_heads=1, bias=True)
        x = _random(7, 3, 5, 16)
        out, weights = _call(module, x)
        ref_out, ref_weights = reference_multi_head_attention(_state(module), x, 4, 1)
        assert_close(weights, ref_weights, what="weights of multi-query attention (1 key/value head)")
        assert_close(out, ref_out, what="out of multi-query attention")

    def cross_attention():
        module = _build(cls, 8, 16, 4, n_kv_heads=2)
        x, memory = _random(9, 2, 3, 16), _random(10, 2, 6, 16)
        out, weights = _call(module, x, memory=memory, causal=True)
        params = _state(module)
        ref_out, ref_weights = reference_multi_head_attention(params, x, 4, 2, memory=memory)
        assert_shape(weights, (2, 4, 3, 6), what="weights of cross-attention", meaning="(batch, n_heads, n, m)",
                     hint="keys and values come from memory, queries from x")
        assert_close(weights, ref_weights, what="weights of cross-attention", hint=explain_mismatch(weights, {
            "causal must be ignored in cross-attention: every query may see all of memory":
                reference_multi_head_attention(params, x, 4, 2, memory=memory, causal=True, causal_memory=True)[1],
        }))
        assert_close(out, ref_out, what="out of cross-attention")

    def head_mask():
        module = _build(cls, 11, d_model, n_heads, bias=True)
        x = _random(12, 2, 5, d_model)
        keep = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
        out, _ = _call(module, x, head_mask=keep)
        ref_out, _ = reference_multi_head_attention(_state(module), x, n_heads, head_mask=keep)
        assert_close(out, ref_out, what="out with head_mask (1, 0, 0.5)", hint=explain_mismatch(out, {
            "head_mask was ignored: multiply each head's output (b, H, n, h) by its number, before "
            "merge_heads and o_proj": reference_multi_head_attention(_state(module), x, n_heads)[0],
        }) or "multiply head i's output by head_mask[i] before merge_heads and o_proj")

    def query_without_keys():
        module = _build(cls, 21, d_model, n_heads, bias=True)
        x = _random(22, 2, 5, d_model)
        allowed = torch.rand(5, 5, generator=_seeded(23)) < 0.6
        allowed[torch.arange(5), torch.tensor([0, 3, 1, 4, 2])] = True
        allowed[2] = False                                            # query 2 may see no key at all
        out, weights = _call(module, x, mask=allowed)
        ref_out, ref_weights = reference_multi_head_attention(_state(module), x, n_heads, mask=allowed)
        hint = ("query 2 may see no key: its weights must be 0 and its output 0 before o_proj (no nan); "
                "lesson 03's masked_attention does that, so attend with it")
        assert_finite(weights, what="weights with an (n, n_k) mask whose row 2 allows no key", hint=hint)
        assert_finite(out, what="out with an (n, n_k) mask whose row 2 allows no key", hint=hint)
        assert_close(weights, ref_weights, what="weights with an (n, n_k) mask", hint=explain_mismatch(out, {
            "the mask is ignored: pass it to masked_attention": reference_multi_head_attention(
                _state(module), x, n_heads)[0]}) or "a mask of shape (n, n_k) broadcasts over batch and heads")
        assert_close(out, ref_out, what="out with an (n, n_k) mask whose row 2 allows no key", hint=hint)

    def keeps_dtype():
        module = _build(cls, 13, d_model, n_heads, dtype=torch.float32)
        x = _random(14, 2, 4, d_model, dtype=torch.float32)
        out, weights = _call(module, x)
        assert_dtype(out, torch.float32, what="out of a float32 module")
        ref_out, ref_weights = reference_multi_head_attention(_state(module), x, n_heads)
        assert_close(out, ref_out.float(), what="out of a float32 module")

    def rotary():
        # Runs lesson 05's apply_rope: before lesson 05 is written, its stub's NotImplementedError
        # makes this case wait (run_checks), and lesson 05 runs it again (checks.rerun_waiting).
        module = _build(cls, 15, 16, 4, n_kv_heads=2, rope_base=100.0)
        x = _random(16, 2, 6, 16)
        params = _state(module)
        out, _ = _call(module, x, causal=True)
        ref_out, _ = reference_multi_head_attention(params, x, 4, 2, causal=True, rope_base=100.0)
        assert_close(out, ref_out, what="out with rope_base=100", hint=explain_mismatch(out, {
            "rope_base is ignored: rotate the queries and keys with positions.apply_rope":
                reference_multi_head_attention(params, x, 4, 2, causal=True)[0],
            "you rotated with apply_rope's default base 10000: pass base=self.rope_base":
                reference_multi_head_attention(params, x, 4, 2, causal=True, rope_base=10000.0)[0],
        }) or "rotate q and k (after split_heads, before repeat_kv) at positions 0 ... n-1, "
              "with base=rope_base and layout='half', and nothing else (not v)")
        # One row of positions per sequence, with gaps (as with left padding): only their
        # differences matter, so positions 5, 6, 7, ... would not tell whether they are used.
        given = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 3, 4, 9, 10]])
        out, _ = _call(module, x, causal=True, positions=given)
        ref_out, _ = reference_multi_head_attention(params, x, 4, 2, causal=True, rope_base=100.0, positions=given)
        assert_close(out, ref_out, what="out with positions [[0, 1, 2, 3, 4, 5], [0, 0, 3, 4, 9, 10]] of shape (b, n)",
                     hint=explain_mismatch(out, {
                         "the positions argument is ignored: rotate at the positions given, when they are given":
                             reference_multi_head_attention(params, x, 4, 2, causal=True, rope_base=100.0)[0],
                     }) or "rotate at the positions given; positions of shape (b, n) hold one row per sequence: "
                           "make them (b, 1, n) so that they broadcast over the heads")

    run_checks("MultiHeadAttention", [
        ("q_proj, k_proj, v_proj, o_proj of the right shapes", projections),
        ("bad head counts raise ValueError", bad_head_counts),
        ("equals torch.nn.MultiheadAttention (float64, no bias)", matches_torch(False, False, False)),
        ("equals torch.nn.MultiheadAttention with biases and a padding mask", matches_torch(True, True, False)),
        ("equals torch.nn.MultiheadAttention, causal", matches_torch(False, False, True)),
        ("grouped-query attention equals F.scaled_dot_product_attention(enable_gqa=True)", grouped_query),
        ("multi-query attention (one key/value head)", multi_query),
        ("cross-attention to a memory of another length", cross_attention),
        ("head_mask scales each head's output", head_mask),
        ("a query that may see no key gets weights 0, not nan", query_without_keys),
        ("float32 kept", keeps_dtype),
        ("rotary positions (rope_base)", rotary),
    ])


# --------------------------------------------------------------------------------------------
# KVCache and decoding with it
# --------------------------------------------------------------------------------------------


def check_kv_cache(cache_cls: Callable, attention_cls: Callable) -> None:
    """Check ``KVCache`` (append, length, keys, values), and that decoding token by token with
    ``MultiHeadAttention(..., cache=...)`` equals the full causal forward pass (of the float64
    reference, not only of your own module), with the cache holding the rotated keys."""

    def empty():
        cache = cache_cls()
        if cache.length != 0 or cache.keys is not None or cache.values is not None:
            raise AssertionError(f"a new KVCache must have length 0 and keys = values = None, got length "
                                 f"{cache.length!r}")

    def appends():
        cache = cache_cls()
        k1, v1 = _random(30, 2, 3, 4, 5), _random(31, 2, 3, 4, 5)
        k2, v2 = _random(32, 2, 3, 1, 5), _random(33, 2, 3, 1, 5)
        keys, values = assert_pair(assert_not_modified(cache.append, k1, v1), what="append(k, v)",
                                   names="(keys, values)")
        assert_close(keys, k1, what="keys after the first append")
        if cache.length != 4:
            raise AssertionError(f"length is {cache.length!r} after appending 4 tokens, expected 4: the "
                                 "number of tokens is keys.shape[-2]")
        keys, values = assert_pair(assert_not_modified(cache.append, k2, v2), what="append(k, v)",
                                   names="(keys, values)")
        assert_shape(keys, (2, 3, 5, 5), what="keys after appending 4 tokens, then 1",
                     meaning="(batch, n_kv_heads, length, head_dim)", hint="concatenate along the token axis, dim=-2")
        assert_close(keys, torch.cat([k1, k2], -2), what="keys after two appends",
                     hint="the old tokens come first: torch.cat([old, new], dim=-2)")
        assert_close(values, torch.cat([v1, v2], -2), what="values after two appends",
                     hint="keep keys and values apart: values go into cache.values")
        assert_close(cache.keys, keys, what="cache.keys", hint="store the concatenation in self.keys")
        assert_close(cache.values, values, what="cache.values", hint="store the concatenation in self.values")
        if cache.length != 5:
            raise AssertionError(f"length is {cache.length!r} after 5 tokens, expected 5: the number of "
                                 "tokens is keys.shape[-2]")

    def one_at_a_time_float32():
        cache = cache_cls()
        steps = [(_random(34 + 2 * i, 1, 1, 1, 8, dtype=torch.float32),
                  _random(35 + 2 * i, 1, 1, 1, 8, dtype=torch.float32)) for i in range(3)]
        for count, (k, v) in enumerate(steps, start=1):
            keys, values = assert_pair(assert_not_modified(cache.append, k, v), what="append(k, v)",
                                       names="(keys, values)")
            if cache.length != count:
                raise AssertionError(f"length is {cache.length!r} after appending {count} single tokens, "
                                     f"expected {count}: the number of tokens is keys.shape[-2]")
        assert_dtype(keys, torch.float32, what="keys of a float32 cache")
        assert_close(keys, torch.cat([k for k, _ in steps], -2), what="keys after three single tokens")
        assert_close(values, torch.cat([v for _, v in steps], -2), what="values after three single tokens")

    def decoding(n_heads, n_kv, rope, chunks, seed):
        # With rope, this runs lesson 05's apply_rope: before lesson 05 is written, its stub's
        # NotImplementedError makes the case wait, and lesson 05 runs it again.
        def case():
            n = sum(chunks)
            base = 10000.0 if rope else None
            module = _build(attention_cls, seed, 16, n_heads, n_kv_heads=n_kv, bias=True, rope_base=base)
            x = _random(seed + 1, 2, n, 16)
            params = _state(module)
            right = reference_multi_head_attention(params, x, n_heads, n_kv, causal=True, rope_base=base)[0]
            full = module(x, causal=True)
            cache, outs, start = cache_cls(), [], 0
            for size in chunks:
                outs.append(module(x[:, start:start + size], causal=True, cache=cache))
                start += size
                if cache.length != start:
                    raise AssertionError(f"after decoding {start} tokens the cache holds {cache.length!r}: "
                                         "extend it with every call's keys and values (cache.append)")
            assert_shape(cache.keys, (2, n_kv or n_heads, n, 16 // n_heads), what="cache.keys",
                         meaning="(batch, n_kv_heads, length, head_dim): the cache holds the key/value heads "
                                 "before repeat_kv")
            stepwise = torch.cat(outs, 1)
            hints = {
                "decoding with the cache gives your own full forward pass, but that pass is wrong: fix "
                "MultiHeadAttention first (its check says what is wrong)":
                    full.detach() if not torch.allclose(_as_float64(full), right, rtol=1e-6, atol=1e-6) else None,
                "each new token saw only itself: append to the cache before attending, and attend to all "
                "the keys it returns": torch.cat([reference_multi_head_attention(
                    params, x[:, i:i + 1], n_heads, n_kv, rope_base=10000.0 if rope else None,
                    positions=torch.arange(i, i + 1))[0] for i in range(n)], 1) if set(chunks) == {1} else None,
                "the causal mask is aligned to the top-left corner: with a cache there are more keys than "
                "queries, and the new tokens are the last ones, so build causal_mask(n, n_k) after "
                "extending the cache": _stepwise_reference(params, x, chunks, n_heads, n_kv, rope, top_left=True),
                "the rotary positions restart at 0 in every call: start them at cache.length":
                    _stepwise_reference(params, x, chunks, n_heads, n_kv, rope, restart=True) if rope else None,
            }
            assert_close(stepwise, right, what=f"outputs decoded in chunks {list(chunks)} with a cache",
                         hint=explain_mismatch(stepwise, {h: c for h, c in hints.items() if c is not None})
                         or "decoding with the cache must give exactly the full causal forward pass")
            keys, values = _reference_keys_values(params, x, n_kv or n_heads, base)
            unrotated = {"the cache holds keys before their rotation: rotate the new keys at their positions, "
                         "then append them, so that cached keys never need rotating again":
                         _reference_keys_values(params, x, n_kv or n_heads, None)[0]} if rope else {}
            assert_close(cache.keys, keys, what="cache.keys after decoding", hint=explain_mismatch(cache.keys, unrotated)
                         or "append the keys of every call, after rotating them, to the cache")
            assert_close(cache.values, values, what="cache.values after decoding",
                         hint="append every call's values (v_proj, split into key/value heads) to the cache")
        return case

    def cross():
        module = _build(attention_cls, 40, 16, 4, n_kv_heads=2)
        x, memory = _random(41, 2, 3, 16), _random(42, 2, 5, 16)
        params = _state(module)
        right = reference_multi_head_attention(params, x, 4, 2, memory=memory)[0]
        cache = cache_cls()
        steps = [module(x[:, i:i + 1], memory=memory, cache=cache) for i in range(3)]
        if cache.length != 5:
            raise AssertionError(f"a cross-attention cache holds the memory's {5} keys once, got length "
                                 f"{cache.length!r}: append the memory's keys and values only while the cache is empty")
        assert_close(torch.cat(steps, 1), right, what="cross-attention decoded step by step with a cache")
        keys, values = _reference_keys_values(params, memory, 2, None)
        assert_close(cache.keys, keys, what="cache.keys of cross-attention", hint="cache the memory's keys")
        assert_close(cache.values, values, what="cache.values of cross-attention", hint="cache the memory's values")

    run_checks("KVCache", [
        ("a new cache is empty", empty),
        ("append concatenates along the tokens and returns all so far", appends),
        ("one token at a time, float32 kept", one_at_a_time_float32),
        ("one token at a time equals the full causal pass (4 heads)", decoding(4, None, False, (1,) * 6, 50)),
        ("a prompt of 4, then single tokens, grouped-query (4 heads, 2 KV heads)", decoding(4, 2, False, (4, 1, 1, 1), 52)),
        ("with rotary positions, positions continue where the cache ends", decoding(4, 1, True, (3, 1, 2, 1), 54)),
        ("cross-attention: the memory's keys and values are cached once", cross),
    ])


def _reference_keys_values(params, source, n_kv, rope_base):
    """What a right cache holds after all of ``source`` (b, n, d_model): the keys (rotated at
    positions 0 ... n-1 when ``rope_base`` is given) and values, (b, n_kv, n, h), in float64."""
    p = {name: _as_float64(value) for name, value in params.items()}
    source = _as_float64(source)

    def project(name):
        out = source @ p[f"{name}.weight"].T
        return _heads(out + p[f"{name}.bias"] if f"{name}.bias" in p else out, n_kv)

    keys, values = project("k_proj"), project("v_proj")
    if rope_base is not None:
        keys = reference_rope(keys, torch.arange(source.shape[1]), rope_base)
    return keys, values


def _stepwise_reference(params, x, chunks, n_heads, n_kv, rope, *, top_left=False, restart=False):
    """What decoding in ``chunks`` gives with a top-left causal mask or positions restarting at 0."""
    outs, start = [], 0
    p = {name: _as_float64(value) for name, value in params.items()}
    h = x.shape[-1] // n_heads
    base = 10000.0 if rope else None
    keys, values = [], []
    for size in chunks:
        piece = _as_float64(x[:, start:start + size])
        q = _heads(piece @ p["q_proj.weight"].T + p["q_proj.bias"], n_heads)
        k = _heads(piece @ p["k_proj.weight"].T + p["k_proj.bias"], n_kv or n_heads)
        v = _heads(piece @ p["v_proj.weight"].T + p["v_proj.bias"], n_kv or n_heads)
        if base is not None:
            where = torch.arange(size) if restart else torch.arange(start, start + size)
            q, k = reference_rope(q, where, base), reference_rope(k, where, base)
        keys.append(k)
        values.append(v)
        start += size
        rep = n_heads // (n_kv or n_heads)
        kk = torch.cat(keys, -2).repeat_interleave(rep, 1)
        vv = torch.cat(values, -2).repeat_interleave(rep, 1)
        allowed = torch.ones(size, start, dtype=torch.bool).tril() if top_left else causal_allowed(size, start)
        scores = (q @ kk.transpose(-2, -1) / math.sqrt(h)).masked_fill(~allowed, -math.inf)
        out = (torch.softmax(scores, -1) @ vv).transpose(1, 2).reshape(x.shape[0], size, -1)
        outs.append(out @ p["o_proj.weight"].T + p["o_proj.bias"])
    return torch.cat(outs, 1)


# --------------------------------------------------------------------------------------------
# kv_cache_bytes
# --------------------------------------------------------------------------------------------


def check_kv_cache_bytes(fn: Callable) -> None:
    """Check ``kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, dtype_bytes, batch=1)``
    against the ``nbytes`` of real key and value tensors."""

    def measured(n_layers, n_kv_heads, head_dim, seq_len, dtype, batch=1):
        one = torch.zeros(batch, n_kv_heads, seq_len, head_dim, dtype=dtype)
        return n_layers * 2 * one.nbytes  # keys and values, in every layer

    def compare(n_layers, n_kv_heads, head_dim, seq_len, dtype, batch=1):
        dtype_bytes = torch.tensor([], dtype=dtype).element_size()
        args = (n_layers, n_kv_heads, head_dim, seq_len, dtype_bytes)
        got = fn(*args) if batch == 1 else fn(*args, batch=batch)  # batch=1 by default
        want = measured(n_layers, n_kv_heads, head_dim, seq_len, dtype, batch)
        if not isinstance(got, int) or isinstance(got, bool):
            raise AssertionError(f"kv_cache_bytes returned a {type(got).__name__}, expected an int (a number of bytes)")
        if got != want:
            candidates = {
                "you counted the keys only: the cache holds keys and values (a factor 2)": want // 2,
                "you left out n_layers: every layer has its own cache": want // n_layers,
                "you left out the batch: every sequence has its own cache": want // batch,
                "you left out dtype_bytes: the result is in bytes, not numbers": want // dtype_bytes,
            }
            hint = next((h for h, c in candidates.items() if c == got), "")
            raise AssertionError(
                f"kv_cache_bytes({n_layers}, {n_kv_heads}, {head_dim}, {seq_len}, {dtype_bytes}, batch={batch}) "
                f"= {got}, but the key and value tensors of that cache take {want} bytes"
                + (f". {hint[0].upper()}{hint[1:]}" if hint else ""))

    run_checks("kv_cache_bytes", [
        ("float32, one sequence", lambda: compare(3, 2, 8, 10, torch.float32)),
        ("bfloat16, a batch of 3", lambda: compare(2, 4, 16, 7, torch.bfloat16, batch=3)),
        ("float64, one layer, one head", lambda: compare(1, 1, 4, 5, torch.float64)),
        ("an empty cache is 0 bytes", lambda: compare(2, 2, 8, 0, torch.float16)),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 6 (not graded): uptraining to grouped-query attention
# --------------------------------------------------------------------------------------------


def _not_written(fn: Callable, name: str, *args, exercise: int = 6) -> bool:
    """True (and says so) if ``fn(*args)`` still raises the notebook stub's NotImplementedError."""
    try:
        fn(*args)
    except NotImplementedError:
        print(f"… {name} is not written yet (exercise {exercise}, not graded): what uses it below waits for it")
        return True
    except Exception:  # noqa: BLE001 (any other error is reported by the check's own cases)
        return False
    return False


def _head_rows(weight: torch.Tensor, head: int, h: int) -> torch.Tensor:
    return weight[head * h:(head + 1) * h]


def check_share_kv_heads(fn: Callable, attention_cls: Callable) -> bool:
    """Check ``share_kv_heads(attention, n_kv_heads)`` (exercise 6): any construction is accepted in
    which shared key/value head j is made from the heads of group j alone (those that ``repeat_kv``
    gives its query heads), no larger than the largest of them, with queries and output projection
    unchanged, the layer given left as it was, and nothing changed when n_kv_heads = n_heads.
    Returns True when every case passes, False (with a line saying so) while ``fn`` is not written."""
    d_model, n_heads, h = 16, 4, 4

    def layer(seed: int = 0, bias: bool = False) -> nn.Module:
        return _build(attention_cls, seed, d_model, n_heads, bias=bias)

    if _not_written(fn, "share_kv_heads", layer(), 2):
        return False

    def shared_of(attention: nn.Module, n_kv: int) -> nn.Module:
        out = fn(attention, n_kv)
        if not isinstance(out, nn.Module):
            raise AssertionError(f"share_kv_heads returned a {type(out).__name__}, not a new attention layer")
        if out is attention:
            raise AssertionError("share_kv_heads returned the layer it was given: return a new layer")
        for name in ("k_proj", "v_proj"):
            weight = getattr(getattr(out, name, None), "weight", None)
            if weight is None or tuple(weight.shape) != (n_kv * h, d_model):
                got = None if weight is None else tuple(weight.shape)
                raise AssertionError(
                    f"share_kv_heads(layer, {n_kv}): {name}.weight has shape {got}; with {n_kv} key/value "
                    f"heads of {h} features it must be ({n_kv * h}, {d_model})")
        return out

    def shapes_and_untouched(n_kv: int, bias: bool = False) -> None:
        attention = layer(1, bias)
        before = {k: v.clone() for k, v in _state(attention).items()}
        out = shared_of(attention, n_kv)
        for name, value in _state(attention).items():
            if not torch.equal(value, before[name]):
                raise AssertionError(f"share_kv_heads changed {name} of the layer it was given: build a new layer "
                                     "and leave the trained one as it is")
        for name in ("q_proj", "o_proj"):
            if not torch.equal(getattr(out, name).weight.detach(), getattr(attention, name).weight.detach()):
                raise AssertionError(f"{name} differs from the trained layer's: only keys and values are shared, "
                                     "queries and the output projection stay as they are")
        if bias and any(getattr(out, name).bias is None or getattr(out, name).bias.shape != (n_kv * h,)
                        for name in ("k_proj", "v_proj")):
            raise AssertionError(f"with bias=True, k_proj and v_proj of the new layer need biases of {n_kv * h} "
                                 "entries (one per feature of the shared heads)")

    def nothing_changes_with_every_head() -> None:
        attention = layer(2)
        out = shared_of(attention, n_heads)
        x = torch.randn(2, 5, d_model, generator=_seeded(3), dtype=torch.float64)
        with torch.no_grad():
            assert_close(out(x, causal=True), attention(x, causal=True), what=f"share_kv_heads(layer, {n_heads})(x)",
                         hint=f"with as many groups as heads ({n_heads}), each group is one head: the new layer "
                              "must compute exactly what the trained one does")

    def groups_and_scale(n_kv: int) -> None:
        group = n_heads // n_kv
        attention = layer(4)
        base = shared_of(attention, n_kv)
        again = shared_of(attention, n_kv)
        for name in ("k_proj", "v_proj"):
            trained = getattr(attention, name).weight.detach()
            shared = getattr(base, name).weight.detach()
            if not torch.equal(shared, getattr(again, name).weight.detach()):
                raise AssertionError(
                    f"share_kv_heads gave a different {name} twice for the same layer: the shared heads should come "
                    "from the trained heads alone, not from random numbers (Ainslie et al. found random starting "
                    "weights the worst)")
            used = set()
            for head in range(n_heads):
                nudged = copy_layer(attention)
                with torch.no_grad():
                    _head_rows(getattr(nudged, name).weight, head, h).add_(0.5)
                moved = getattr(shared_of(nudged, n_kv), name).weight.detach()
                changed = [j for j in range(n_kv) if not torch.equal(_head_rows(moved, j, h), _head_rows(shared, j, h))]
                wrong = [j for j in changed if j != head // group]
                if wrong:
                    raise AssertionError(
                        f"share_kv_heads(layer, {n_kv}): changing {name} of head {head} changed shared head "
                        f"{wrong[0]}, but head {head} belongs to group {head // group}: repeat_kv gives query heads "
                        f"{head // group * group} to {head // group * group + group - 1} shared head {head // group}, "
                        f"so build shared head j from heads j*{group} to j*{group} + {group - 1} only")
                used.update(changed)
            unused = sorted(set(range(n_kv)) - used)
            if unused:
                raise AssertionError(
                    f"share_kv_heads(layer, {n_kv}): shared {name[0]} head {unused[0]} does not depend on the trained "
                    f"heads of its group: it throws away what the model learned (Ainslie et al. found random "
                    "starting weights the worst); make it from the heads of its group")
            for j in range(n_kv):
                largest = max(float(_head_rows(trained, i, h).norm()) for i in range(j * group, (j + 1) * group))
                size = float(_head_rows(shared, j, h).norm())
                if size > largest * (1 + 1e-6):
                    raise AssertionError(
                        f"share_kv_heads(layer, {n_kv}): shared {name[0]} head {j} is larger (norm {size:.3f}) than "
                        f"any head of its group (at most {largest:.3f}): a sum of {group} heads makes the scores "
                        f"(or the values) about {group} times too large; average them instead")

    run_checks("share_kv_heads", [
        ("a new layer with 2 shared key/value heads; the trained one unchanged", lambda: shapes_and_untouched(2)),
        ("1 shared key/value head (multi-query), with biases", lambda: shapes_and_untouched(1, bias=True)),
        ("with as many groups as heads, nothing changes", nothing_changes_with_every_head),
        ("each shared head made from its own group, on its scale (2 groups)", lambda: groups_and_scale(2)),
        ("each shared head made from its own group, on its scale (1 group)", lambda: groups_and_scale(1)),
    ])
    return True


def copy_layer(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` (so the check can nudge one head's weights)."""
    import copy

    return copy.deepcopy(module)


def check_kv_heads_choice(fn: Callable, measured: dict, *, budget_mib: float, tolerance: float):
    """Check ``choose_kv_heads(measured)`` (exercise 6): any choice whose cache fits ``budget_mib`` and
    whose loss is at most ``tolerance`` above the original model's (the largest number of key/value
    heads in ``measured``) is accepted; None is accepted only when no choice meets both. Returns the
    choice (None while ``fn`` is not written).

    measured: {key/value heads: {"cache_mib": ..., "loss": ... (the model you would serve), and
    optionally "converted": the loss before the fine-tune}}."""
    if _not_written(fn, "choose_kv_heads", measured):
        return None
    original = max(measured)
    limit = measured[original]["loss"] + tolerance

    def reasons(G) -> list[str]:
        m = measured[G]
        found = []
        if m["cache_mib"] > budget_mib:
            found.append(f"its cache, {m['cache_mib']:g} MiB, is over the budget of {budget_mib:g} MiB")
        if m["loss"] > limit:
            found.append(f"its loss, {m['loss']:.3f}, is {m['loss'] - measured[original]['loss']:.3f} nats above the "
                         f"original's {measured[original]['loss']:.3f}, more than the {tolerance:g} you accept")
        return found

    allowed = [G for G in measured if not reasons(G)]
    choice = {}

    def decide() -> None:
        got = fn(measured)
        choice["value"] = got
        if got is None:
            if allowed:
                converted = [f"{G} ({measured[G]['converted'] - measured[original]['loss']:+.2f} as converted)"
                             for G in allowed if "converted" in measured[G]]
                raise AssertionError(
                    f"you chose none, but {', '.join(str(G) for G in allowed)} key/value head(s) meet both limits"
                    + (f"; the loss before the fine-tune does not count, you serve the fine-tuned model: "
                       f"{', '.join(converted)}" if converted else ""))
            return
        if got not in measured:
            raise AssertionError(f"choose_kv_heads returned {got!r}: choose one of {sorted(measured, reverse=True)} "
                                 "(key/value heads per layer), or None")
        why = reasons(got)
        if why:
            raise AssertionError(f"{got} key/value head(s) per layer: " + "; and ".join(why)
                                 + (f". Meeting both limits: {' or '.join(str(G) for G in allowed)} key/value head(s)" if allowed else ""))

    run_checks("choose_kv_heads", [(f"a cache of at most {budget_mib:g} MiB, a loss at most {tolerance:g} nats "
                                    "above the original's", decide)])
    return choice.get("value")


# --------------------------------------------------------------------------------------------
# Exercise 7 (not graded): the repeated-random-tokens test of induction
# --------------------------------------------------------------------------------------------


def _two_numbers(value, what: str) -> tuple[float, float]:
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        raise AssertionError(f"{what} returned {type(value).__name__} {value!r:.80}: return two numbers, "
                             "(loss on the first half, loss on the second half)")
    try:
        return float(value[0]), float(value[1])
    except (TypeError, ValueError):
        raise AssertionError(f"{what} returned {value!r:.80}: return two numbers (Python floats or 0-d tensors)") from None


def _half_loss_variants(logits: torch.Tensor, tokens: torch.Tensor) -> dict[str, tuple[float, float]]:
    """What the usual mistakes of half_losses give, with the hint that names each."""
    T = tokens.shape[1] // 2
    shifted = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")   # predicts i + 1
    same = F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")                      # predicts i
    return {
        "the logits at position i predict word i + 1: compare logits[:, :-1] with tokens[:, 1:], not logits "
        "with the same positions' words":
            (float(same[:, 1:T].mean()), float(same[:, T + 1:].mean())),
        "word T, the first of the repeat, belongs to neither half: nothing before it says the sequence starts "
        "again; score words 1 .. T-1 and T+1 .. 2T-1":
            (float(shifted[:, :T].mean()), float(shifted[:, T - 1:].mean())),
        "your two numbers are the right ones, swapped: first the first half, then the second":
            (float(shifted[:, T:].mean()), float(shifted[:, :T - 1].mean())),
        "that is a sum; take the mean over the words and the sequences":
            (float(shifted[:, :T - 1].sum()), float(shifted[:, T:].sum())),
    }


def _score_variants(weights: torch.Tensor, T: int) -> dict[str, torch.Tensor]:
    """What the usual mistakes of induction_scores give, with the hint that names each."""
    q = torch.arange(T, 2 * T)
    return {
        "that is the weight on the earlier copy of the word itself (key i - T, a duplicate-token score); an "
        "induction head looks one word further, at key i - T + 1, the word that came next":
            weights[..., q, q - T].mean(dim=(0, -1)),
        "that is the weight on the previous word (key i - 1); the induction score is the weight on key i - T + 1":
            weights[..., q, q - 1].mean(dim=(0, -1)),
        "the queries are the positions of the second half, T .. 2T-1 (counting from 0), each on key i - T + 1":
            weights[..., q - 1, q - T].mean(dim=(0, -1)),
        "rows are layers and columns heads: (n_layers, n_heads), not (n_heads, n_layers)":
            weights[..., q, q - T + 1].mean(dim=(0, -1)).T,
    }


def check_induction_test(repeated_tokens: Callable, half_losses: Callable, induction_scores: Callable,
                         model: nn.Module, heads) -> dict | None:
    """Check exercise 7's ``repeated_tokens(n_sequences, half, generator)``, ``half_losses(model,
    tokens)`` and ``induction_scores(model, tokens)`` against the course's reference
    (``attnlab.zoo.induction``), on ``model`` and on a copy of it with ``heads`` ((layer, head)
    pairs) knocked out (``zoo.induction.ablated``), both reading the same 64 random lists written
    and read back (``zoo.induction.random_lists``, 6 items). Returns the learner's measurements
    there, {"model": {"first", "second", "scores"}, "knocked out": {...}}, or None (with a line
    saying so) while a function is not written."""
    from attnlab.zoo import induction

    tokens = induction.random_lists(64, 6, torch.Generator().manual_seed(7))
    T = tokens.shape[1] // 2
    if (_not_written(repeated_tokens, "repeated_tokens", 2, 4, torch.Generator().manual_seed(0), exercise=7)
            or _not_written(half_losses, "half_losses", model, tokens[:2], exercise=7)
            or _not_written(induction_scores, "induction_scores", model, tokens[:2], exercise=7)):
        return None
    knocked = induction.ablated(model, heads)
    found: dict = {}
    named = ", ".join(f"L{layer}H{head}" for layer, head in heads)

    def tokens_drawn() -> None:
        got = repeated_tokens(4, 24, torch.Generator().manual_seed(0))
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"repeated_tokens returned a {type(got).__name__}: return a tensor of word ids")
        assert_shape(got, (4, 48), what="repeated_tokens(4, 24, generator)",
                     hint="4 sequences, each 24 random words and then the same 24 again")
        if got.dtype != torch.long:
            raise AssertionError(f"repeated_tokens returned {got.dtype}: word ids are integers (torch.long), "
                                 "the dtype an embedding table is indexed with")
        if not torch.equal(got[:, 24:], got[:, :24]):
            raise AssertionError("the second half of each sequence must repeat the first, word for word and in the "
                                 "same order (torch.cat([first, first], dim=1))")
        if not torch.isin(got, induction.WORDS).all():
            bad = sorted(set(got[~torch.isin(got, induction.WORDS)].tolist()))[:3]
            raise AssertionError(f"ids {bad} are not among zoo.induction.WORDS (the vocabulary without <pad>, <unk> "
                                 "and <eos>): index WORDS with random positions, WORDS[torch.randint(len(WORDS), ...)]")

    def tokens_random() -> None:
        a, b = (repeated_tokens(4, 24, torch.Generator().manual_seed(s)) for s in (0, 0))
        c = repeated_tokens(4, 24, torch.Generator().manual_seed(1))
        if not torch.equal(a, b):
            raise AssertionError("two generators seeded alike gave different words: draw with the generator you are "
                                 "given (generator=generator), not from torch's global one")
        if torch.equal(a, c):
            raise AssertionError("generators with different seeds gave the same words: draw them with the generator")
        if min(len(set(row[:24].tolist())) for row in a) < 12:
            raise AssertionError("a sequence of 24 random words has fewer than 12 different ones: draw every word "
                                 "at random, uniformly over zoo.induction.WORDS")

    def losses_on(label: str, which: nn.Module) -> None:
        with torch.no_grad():
            logits = which(tokens)
        expected = induction.repeated_loss(which, tokens, logits=logits)
        got = _two_numbers(half_losses(which, tokens), "half_losses")
        if all(abs(g - e) <= 1e-4 for g, e in zip(got, expected)):
            found.setdefault(label, {}).update(first=got[0], second=got[1])
            return
        hint = next((h for h, v in _half_loss_variants(logits.detach(), tokens).items()
                     if all(abs(g - x) <= 1e-4 for g, x in zip(got, v))), "")
        raise AssertionError(f"half_losses on {label}: yours ({got[0]:.4f}, {got[1]:.4f}), expected "
                             f"({expected.first:.4f}, {expected.second:.4f})" + (f": {hint}" if hint else ""))

    def scores_on(label: str, which: nn.Module) -> None:
        _, weights = induction.attention_weights(which, tokens)
        expected = induction.induction_scores(which, tokens, weights)
        got = induction_scores(which, tokens)
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got)
        hint = next((h for h, v in _score_variants(weights, T).items()
                     if got.shape == v.shape and torch.allclose(got.double(), v.double(), atol=1e-4)), "")
        assert_close(got.double(), expected.double(), what=f"induction_scores on {label}", atol=1e-4, rtol=0,
                     hint=hint or "the score of a head is its weight from each query i of the second half on key "
                                  "i - T + 1, averaged over those queries and over the sequences")
        found.setdefault(label, {})["scores"] = got.detach().double()

    run_checks("induction test", [
        ("repeated_tokens: two halves of random words, the second repeating the first", tokens_drawn),
        ("repeated_tokens: drawn with the generator given", tokens_random),
        ("half_losses on the course model, reading random lists", lambda: losses_on("model", model)),
        ("induction_scores on the course model, reading random lists", lambda: scores_on("model", model)),
        (f"half_losses with {named} knocked out", lambda: losses_on("knocked out", knocked)),
        (f"induction_scores with {named} knocked out", lambda: scores_on("knocked out", knocked)),
    ])
    return found
