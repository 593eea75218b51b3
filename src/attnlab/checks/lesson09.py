"""Visible checks of lesson 09: ``check_online_softmax``, ``check_flash_attention_torch``,
``check_flash_backward``, ``check_flash_attention_triton``. They run the properties the grader's
trusted cases grade, on other inputs, and police the same shortcuts
(``attnlab.shortcuts``: PyTorch's softmax and logsumexp in the online softmax, its fused attention
in the tiled one); a wrong result is compared with what common mistakes give, to name the mistake.

The trusted reference is ``reference_flash``: attention and its log-sum-exp in float64, built from
the whole score matrix (small sizes only), with the lesson's conventions (bottom-right causal
mask; a query that sees no key gets output 0 and log-sum-exp -inf).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from attnlab.checks.common import (  # noqa: F401 (shared assertions and references)
    _as_float64,
    _seeded,
    _shape,
    assert_close,
    assert_dtype,
    assert_finite,
    assert_not_modified,
    assert_pair,
    assert_shape,
    assert_zero_where,
    causal_allowed,
    explain_mismatch,
    run_checks,
    tolerances,
)
from attnlab.shortcuts import ForbiddenCalls, forbidden, police

__all__ = [
    "check_flash_attention_torch",
    "check_flash_attention_triton",
    "check_flash_backward",
    "check_online_softmax",
    "reference_flash",
]

_NAN_HINT = (
    "a row that has seen only -inf has maximum -inf, and exp(-inf - (-inf)) = exp(nan): shift "
    "such rows by 0 instead (e.g. m.masked_fill(m == -inf, 0)), and divide by l only where l > 0"
)
_LAST_BLOCK_HINT = (
    "the last, shorter block is left out: loop with range(0, {n}, {block}) and cut each block "
    "at min(start + {block}, {n}), so that the last block may be shorter"
)
_RESCALE_HINT = (
    "when a block raises the running maximum from m to m_new, multiply what you have summed so "
    "far (l, and the output accumulator) by exp(m - m_new) before adding the new block"
)


def _keep_graph_float64(t) -> torch.Tensor:
    """A float64 CPU version of ``t`` that autograd can still differentiate through."""
    if isinstance(t, torch.Tensor):
        return t.to(device="cpu", dtype=torch.float64)
    return _as_float64(t)


def reference_flash(q, k, v, causal: bool = False, scale: float | None = None, *,
                    allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention in float64, from the full score matrix (for checks only).

    q (..., n_q, d), k (..., n_k, d), v (..., n_k, d_v); causal bottom-right aligned. A query
    that may see no key gets out 0 and lse -inf. ``allowed`` (n_q, n_k), boolean: another mask
    instead of the causal one (the checks use it to describe mistakes).
    """
    q, k, v = (_keep_graph_float64(t) for t in (q, k, v))
    factor = q.shape[-1] ** -0.5 if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * factor
    if allowed is None and causal:
        allowed = causal_allowed(q.shape[-2], k.shape[-2])
    scores = scores if allowed is None else scores.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    safe = lse.masked_fill(lse == -math.inf, 0.0)
    weights = torch.exp(scores - safe[..., None])
    return weights @ v, lse


def _randn(seed: int, *shape: int, spread: float = 1.0, dtype=torch.float32) -> torch.Tensor:
    return (spread * torch.randn(*shape, generator=_seeded(seed), dtype=torch.float64)).to(dtype)


def _distinct(candidates: dict, right: torch.Tensor) -> dict:
    """``candidates`` (hint -> what that mistake gives) made fit to name a mistake on this input:
    a candidate equal to the right answer is dropped (it cannot have been made), and candidates
    equal to each other become one, whose hint names each (they cannot be told apart here)."""

    def same(a, b):
        return a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True)

    right = _as_float64(right)
    groups: list[tuple[list[str], torch.Tensor, object]] = []  # (hints, as float64, as given)
    for hint, value in candidates.items():
        as_float64 = _as_float64(value)
        if same(as_float64, right):
            continue
        group = next((g for g in groups if same(g[1], as_float64)), None)
        if group is None:
            groups.append(([hint], as_float64, value))
        else:
            group[0].append(hint)
    return {"; or else, ".join(hints): value for hints, _, value in groups}


# --------------------------------------------------------------------------------------------
# Exercise 1: online softmax
# --------------------------------------------------------------------------------------------


def _without_rescaling(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax as a streaming pass would give it if it never rescaled l (a common mistake)."""
    x = _as_float64(x)
    running_max = torch.full(x.shape[:-1], -math.inf, dtype=torch.float64)
    total = torch.zeros_like(running_max)
    for begin in range(0, x.shape[-1], block_size):
        block = x[..., begin:begin + block_size]
        running_max = torch.maximum(running_max, block.amax(-1))
        total = total + torch.exp(block - running_max[..., None]).sum(-1)
    return torch.exp(x - running_max[..., None]) / total[..., None]


def _without_last_block(x: torch.Tensor, block_size: int) -> torch.Tensor | None:
    """Softmax normalised over the whole blocks only, as a loop that stops before the last,
    shorter block gives it (a common mistake); None when n is a multiple of ``block_size``."""
    x = _as_float64(x)
    whole = x.shape[-1] // block_size * block_size
    if whole in (0, x.shape[-1]):
        return None
    seen = x[..., :whole]
    m = seen.amax(-1, keepdim=True)
    return torch.exp(x - m) / torch.exp(seen - m).sum(-1, keepdim=True)


def check_online_softmax(fn: Callable) -> None:
    """Check ``online_softmax(x, block_size) -> (weights, lse)`` against torch in float64, without
    PyTorch's softmax or logsumexp (``attnlab.shortcuts``)."""
    fn = police(fn, "flash.online_softmax")

    def run(x, block_size, label):
        weights, lse = assert_pair(assert_not_modified(fn, x, block_size),
                                   what="online_softmax", names="(weights, lse)")
        assert_shape(weights, x.shape, what=f"weights{label}", meaning="(..., n), like x")
        assert_shape(lse, x.shape[:-1], what=f"lse{label}", meaning="(...): one number per row",
                     hint="reduce over the last dimension (no keepdim)")
        assert_dtype(weights, x.dtype, what=f"weights{label}")
        assert_dtype(lse, x.dtype, what=f"lse{label}")
        want = torch.softmax(_as_float64(x), dim=-1).nan_to_num(nan=0.0)
        want_lse = torch.logsumexp(_as_float64(x), dim=-1)
        assert_finite(weights, what=f"weights{label}", hint=_NAN_HINT)
        candidates = {_RESCALE_HINT: _without_rescaling(x, block_size)}
        if (short := _without_last_block(x, block_size)) is not None:
            candidates[_LAST_BLOCK_HINT.format(n="n", block="block_size")] = short
        assert_close(weights, want, what=f"weights{label}",
                     hint=explain_mismatch(weights, _distinct(candidates, want)))
        assert_close(lse, want_lse, what=f"lse{label}",
                     hint=explain_mismatch(lse, {
                         "lse is log(l) + m, the log of the normaliser plus the maximum it was "
                         "taken under: you left out m": torch.log(
                             torch.exp(_as_float64(x) - _as_float64(x).amax(-1, keepdim=True)).sum(-1)),
                     }) or "lse = m + log(l) with the final m and l")
        return weights, lse

    def unaligned():
        run(_randn(90, 2, 3, 10, spread=3.0), 4, " (n=10, block_size=4)")

    def one_block_or_one_entry():
        x = _randn(91, 3, 7, spread=3.0)
        run(x, 100, " (block_size > n)")
        run(x, 1, " (block_size=1)")
        run(_randn(97, 4, 1), 2, " (rows of one entry)")

    def maximum_arrives_late():
        x = _randn(92, 4, 12)
        x[:, 9] += torch.tensor([30.0, 300.0, 3000.0, 30000.0])  # the largest entry, in block 3
        run(x, 4, " when the largest entry comes in a late block")

    def extreme():
        run(_randn(93, 3, 9, spread=1e4), 4, " for entries of size 1e4 (float32)")
        run(_randn(94, 3, 9, spread=1e4, dtype=torch.float64), 2, " (float64)")

    def half_precision():
        run(_randn(98, 3, 20, spread=3.0, dtype=torch.float16), 6,
            " (float16: accumulate in float32, return float16)")

    def minus_infinity():
        x = _randn(95, 3, 10)
        x[0, :4] = -math.inf  # a whole first block masked
        x[1, ::3] = -math.inf
        weights, _ = run(x, 4, " with -inf entries (a whole first block of row 0)")
        assert_zero_where(weights, torch.isinf(x), what="weights", region="where x is -inf")

    def all_masked_row():
        x = _randn(96, 3, 6)
        x[1] = -math.inf
        weights, lse = fn(x, 4)
        assert_finite(weights, what="weights when a whole row is -inf",
                      hint="such a row has nothing to normalise: give it weights 0. " + _NAN_HINT)
        assert_zero_where(weights[1], torch.ones(6, dtype=torch.bool),
                          what="weights of a row that is all -inf", region="")
        if not (lse[1] == -math.inf):
            raise AssertionError(f"lse of a row that is all -inf is {lse[1].item():.3g}, expected "
                                 "-inf (the log of an empty sum)")
        run(x[[0, 2]], 4, " (the other rows)")

    run_checks("online_softmax", [
        ("n not a multiple of block_size, batched", unaligned),
        ("one block, and blocks of one entry", one_block_or_one_entry),
        ("the maximum arrives in a late block", maximum_arrives_late),
        ("entries in the ten thousands", extreme),
        ("float16 inputs", half_precision),
        ("-inf entries, and a first block all -inf", minus_infinity),
        ("a row that is all -inf", all_masked_row),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 2: tiled forward pass
# --------------------------------------------------------------------------------------------


def _top_left(q, k, v, scale=None):
    """What a causal mask aligned to the top-left corner would give (a common mistake)."""
    q, k, v = _as_float64(q), _as_float64(k), _as_float64(v)
    factor = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * factor
    allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1).nan_to_num(nan=0.0)
    return weights @ v


def _block_ends(n_q: int, block_q: int, clamped: bool) -> torch.Tensor:
    """(n_q,): for each query, the end of its block of ``block_q`` queries (i1), cut at n_q when
    ``clamped`` (PyTorch slices), not cut when the block's rows past n_q exist (a Triton block)."""
    ends = (torch.arange(n_q) // block_q + 1) * block_q
    return torch.clamp(ends, max=n_q) if clamped else ends


def _causal_by_blocks(q, k, v, query_blocks, scale=None, inside=False):
    """Causal attention as a tiled pass with a mistake about the blocks (a common one):

    inside=False: the key loop stops at the block's own diagonal, at key i1 (its end) instead of
    i1 + (n_k - n_q): each query sees the keys j <= i + (n_k - n_q) that are also j < i1;
    inside=True: the blocks the diagonal crosses are computed but not masked inside: each query
    sees every key j < i1 + (n_k - n_q), the last key its block's last query sees.
    query_blocks: (block_q, clamped), as for ``_block_ends``.
    """
    q, k, v = _as_float64(q), _as_float64(k), _as_float64(v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    ends = _block_ends(n_q, *query_blocks)
    keys = torch.arange(n_k)[None, :]
    if inside:
        allowed = keys < (ends + n_k - n_q)[:, None]
    else:
        allowed = causal_allowed(n_q, n_k) & (keys < ends[:, None])
    return reference_flash(q, k, v, False, scale, allowed=allowed)[0]


def _attention_hints(q, k, v, causal, options, extra=None, query_blocks=None):
    """Hint -> what attention with that mistake returns, for ``explain_mismatch`` on ``out``.
    query_blocks: (block_q, clamped) of the implementation (see ``_block_ends``), or None."""
    scale = options.get("scale")
    n_k = k.shape[-2]
    hints = {}
    if causal:
        hints["your causal mask is aligned to the top-left corner; align it to the bottom-right: "
              "query i may see key j iff j <= i + (n_k - n_q)"] = _top_left(q, k, v, scale)
        hints["causal=True is ignored: mask the scores of keys j > i + (n_k - n_q) with -inf"] = (
            reference_flash(q, k, v, False, scale)[0])
        if query_blocks is not None:
            hints["inside the blocks that the diagonal crosses, keys after the diagonal are not "
                  "masked: set the scores of keys j > i + (n_k - n_q) to -inf there"] = (
                _causal_by_blocks(q, k, v, query_blocks, scale, inside=True))
            hints["the loop over keys stops too early: the last query of a block of queries "
                  "i0:i1 sees the keys up to i1 - 1 + (n_k - n_q), not only up to i1 - 1"] = (
                _causal_by_blocks(q, k, v, query_blocks, scale))
    elif "block_k" in options and n_k > options["block_k"] and n_k % options["block_k"]:
        whole = n_k // options["block_k"] * options["block_k"]
        hints[_LAST_BLOCK_HINT.format(n="n_k", block="block_k")] = (
            reference_flash(q, k[..., :whole, :], v[..., :whole, :], False, scale)[0])
    if scale is not None:
        hints["the scale argument is ignored: multiply the scores by the scale given (1/sqrt(d) "
              "only when it is None)"] = reference_flash(q, k, v, causal)[0]
    if q.shape[-1] > 1:
        hints["the scores are not scaled: multiply q k^T by scale (1/sqrt(d) when None)"] = (
            reference_flash(q, k, v, causal, 1.0)[0])
    hints.update(extra or {})
    return hints


def _wrong_query_blocks(out, ref_out, query_blocks, rtol=None, atol=None) -> str:
    """A hint when the rows of ``out`` that disagree with ``ref_out`` are whole blocks of queries
    and the other blocks are right (a loop over blocks of queries that misses some), else ""."""
    if query_blocks is None or out.shape != ref_out.shape:
        return ""
    default_rtol, default_atol = tolerances(out.dtype)
    a, e = _as_float64(out), _as_float64(ref_out)
    bad = ~torch.isclose(a, e, rtol=rtol or default_rtol, atol=atol or default_atol)
    rows = bad.reshape(-1, *bad.shape[-2:]).any(dim=0).any(dim=-1)  # (n_q,): a wrong query
    block_q = query_blocks[0]
    blocks = [rows[i0:i0 + block_q] for i0 in range(0, rows.numel(), block_q)]
    wrong = [index for index, block in enumerate(blocks) if block.all()]
    if not wrong or len(wrong) == len(blocks) or any(block.any() and not block.all() for block in blocks):
        return ""
    names = ", ".join(f"{i * block_q}:{min((i + 1) * block_q, rows.numel())}" for i in wrong)
    return (f"the rows of the blocks of queries {names} are wrong while the other blocks are right: "
            "check the loop over blocks of queries (range(0, n_q, block_q), each block ending at "
            "min(i0 + block_q, n_q)) and where each block's output is written")


def _lse_tolerance(q, tol):
    """rtol = atol for lse: ``tol`` for float32 and float64 inputs, float32's own for half precision
    (the log-sum-exp is accumulated and returned in float32, whatever the inputs)."""
    if q.dtype in (torch.float16, torch.bfloat16):
        return tolerances(torch.float32)
    return (tol, tol) if tol is not None else (None, None)


def _compare_attention(fn, q, k, v, label, causal=False, tol=None, hints=None, query_blocks=None,
                       **options):
    """Call fn(q, k, v, causal, **options) and compare (out, lse) with reference_flash.

    tol: rtol = atol for out (None: the dtype's), and for lse of float32 and float64 inputs;
    hints: more candidate mistakes (hint -> the out it gives) besides the usual ones;
    query_blocks: (block_q, clamped) for the hints about blocks (see ``_block_ends``); None:
    ``(options["block_q"], True)`` when given.
    """
    if query_blocks is None and "block_q" in options:
        query_blocks = (options["block_q"], True)
    out, lse = assert_pair(assert_not_modified(fn, q, k, v, causal, **options),
                           what="the function", names="(out, lse)")
    ref_out, ref_lse = reference_flash(q, k, v, causal, options.get("scale"))
    assert_shape(out, ref_out.shape, what=f"out{label}", meaning="(..., n_q, d_v)")
    assert_shape(lse, ref_lse.shape, what=f"lse{label}", meaning="(..., n_q): one per query",
                 hint="reduce over the keys without keepdim")
    assert_dtype(out, q.dtype, what=f"out{label}")
    want_lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    assert_dtype(lse, want_lse_dtype, what=f"lse{label}",
                 hint="keep the log-sum-exp in float32 (float64 for float64 inputs), as "
                      "FlashAttention does")
    assert_finite(out, what=f"out{label}", hint=_NAN_HINT)
    rtol, atol = (None, None) if tol is None else (tol, tol)
    candidates = _distinct(_attention_hints(q, k, v, causal, options, hints, query_blocks), ref_out)
    assert_close(out, ref_out, what=f"out{label}", rtol=rtol, atol=atol,
                 hint=explain_mismatch(out, candidates) or
                 _wrong_query_blocks(out, ref_out, query_blocks, rtol, atol) or
                 "check the rescaling by exp(m_old - m_new) of both l and the accumulator, and "
                 "the final division by l")
    sees = torch.isfinite(ref_lse)  # queries that see at least one key
    lse_cpu = lse.detach().cpu()
    if (torch.isinf(lse_cpu) != ~sees).any() or torch.isnan(lse_cpu).any():
        raise AssertionError(f"lse{label} must be -inf exactly for the queries that see no key "
                             "(and finite, not nan, for all others)")
    lse_rtol, lse_atol = _lse_tolerance(q, tol)
    assert_close(lse_cpu[sees], ref_lse[sees], what=f"lse{label}", rtol=lse_rtol, atol=lse_atol,
                 hint=explain_mismatch(lse_cpu[sees], _distinct({
                     "lse is in base 2: multiply by ln(2) to get the natural log":
                         ref_lse[sees] / math.log(2.0),
                     "lse is log(l) without the maximum m: return m + log(l)":
                         ref_lse[sees] - (reference_max(q, k, causal, options.get("scale"))[sees]),
                 }, ref_lse[sees])) or "lse = m + log(l), with m and l after the last key block")
    return (out, lse)


def reference_max(q, k, causal=False, scale=None) -> torch.Tensor:
    """Row maxima of the scaled (masked) scores in float64."""
    q, k = _as_float64(q), _as_float64(k)
    factor = q.shape[-1] ** -0.5 if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * factor
    allowed = causal_allowed(q.shape[-2], k.shape[-2]) if causal else None
    return (scores if allowed is None else scores.masked_fill(~allowed, -math.inf)).amax(-1)


def _peak_bytes(call) -> int:
    from attnlab.bench import peak_memory

    return peak_memory(call, "cpu")


def check_flash_attention_torch(fn: Callable) -> None:
    """Check ``flash_attention_torch(q, k, v, causal, block_q, block_k, scale) -> (out, lse)``:
    values, log-sum-exp and dtypes against float64 attention, without PyTorch's fused attention
    (``attnlab.shortcuts``), and without ever building the whole score matrix."""
    fn = police(fn, "flash.flash_attention_torch")
    d, d_v = 8, 5

    def inputs(seed, batch, n_q, n_k, dtype=torch.float32, spread=1.0):
        return (_randn(seed, *batch, n_q, d, spread=spread, dtype=dtype),
                _randn(seed + 1, *batch, n_k, d, dtype=dtype),
                _randn(seed + 2, *batch, n_k, d_v, dtype=dtype))

    def plain():
        _compare_attention(fn, *inputs(100, (2,), 37, 45), " (n_q=37, n_k=45, blocks 16)",
                           block_q=16, block_k=16)

    def one_call_and_grid():
        # threads=1: one call of flash_forward loops over every block of queries of the batch;
        # threads=2: one call per (slice, query block), on two threads (forward_grid)
        q, k, v = inputs(110, (3,), 29, 41)
        for threads, label in ((1, " (causal, threads=1: one call, every query block)"),
                               (2, " (causal, threads=2: one call per block of queries)")):
            _compare_attention(fn, q, k, v, label, causal=True, block_q=8, block_k=16,
                               threads=threads)

    def blocks():
        q, k, v = inputs(101, (2, 3), 9, 7)
        for bq, bk in ((1, 1), (4, 3), (64, 64)):
            _compare_attention(fn, q, k, v, f" with block_q={bq}, block_k={bk}", block_q=bq, block_k=bk)

    def scaled():
        _compare_attention(fn, *inputs(102, (2,), 12, 20), " with scale=0.3", scale=0.3,
                           block_q=8, block_k=8)

    def double_precision():
        # float64 stays float64 all the way (lse too); no batch dimensions at all
        q, k, v = (t[0] for t in inputs(111, (1,), 10, 14, dtype=torch.float64))
        _compare_attention(fn, q, k, v, " (float64, q of shape (10, 8))", causal=True,
                           block_q=4, block_k=6)

    def causal(n_q, n_k, seed):
        def case():
            _compare_attention(fn, *inputs(seed, (2,), n_q, n_k), f" (causal, n_q={n_q}, n_k={n_k})",
                               causal=True, block_q=8, block_k=8)
        return case

    def queries_that_see_nothing():
        # n_q - n_k = 7 is not a multiple of block_q: the first block of queries holds queries
        # that see no key next to one that sees key 0
        q, k, v = inputs(106, (2,), 20, 13)
        hidden = torch.zeros(20, dtype=torch.bool)
        hidden[:7] = True
        for threads in (1, 2):
            out, lse = _compare_attention(fn, q, k, v, f" (causal, n_q=20 > n_k=13, threads={threads})",
                                          causal=True, block_q=8, block_k=8, threads=threads)
            assert_zero_where(out, hidden[:, None].expand(20, d_v), what="out",
                              region="for the first n_q - n_k = 7 queries, which see no key")

    def half_precision():
        q, k, v = inputs(107, (2,), 33, 40, dtype=torch.float16)
        _compare_attention(fn, q, k, v, " (float16)", causal=True, block_q=16, block_k=16, tol=1e-2)

    def extreme():
        # float32 scores in the hundreds carry absolute rounding errors of about 1e-5, which
        # exp turns into relative errors of the weights: a looser tolerance, for any method
        _compare_attention(fn, *inputs(108, (2,), 21, 30, spread=300.0),
                           " for scores in the hundreds", block_q=8, block_k=8, tol=1e-3)

    def no_full_matrix():
        n = 1024
        q, k, v = (_randn(109 + i, 1, n, 32) for i in range(3))
        peak = _peak_bytes(lambda: fn(q, k, v, False, block_q=64, block_k=128))
        full = n * n * 4
        if peak >= full / 4:
            raise AssertionError(
                f"at n={n} with block_q=64, block_k=128 the call allocated up to "
                f"{peak / 2**20:.2f} MiB at once, while the whole float32 score matrix is "
                f"{full / 2**20:.0f} MiB: something of size n x n is built. Only (block_q, "
                "block_k) blocks of scores may exist at a time")

    run_checks("flash_attention_torch", [
        ("values and lse, n not a multiple of the blocks, d != d_v", plain),
        ("one call on the whole batch, and one call per block of queries", one_call_and_grid),
        ("batched (2, 3), blocks of 1, uneven and larger than n", blocks),
        ("custom scale", scaled),
        ("float64 inputs without batch dimensions (lse in float64)", double_precision),
        ("causal, n_q == n_k", causal(24, 24, 103)),
        ("causal, n_q < n_k (bottom-right aligned)", causal(13, 30, 104)),
        ("causal, n_q > n_k: the first queries see no key (out 0, lse -inf)",
         queries_that_see_nothing),
        ("float16 inputs (lse in float32)", half_precision),
        ("scores in the hundreds", extreme),
        ("never builds the n x n score matrix (peak memory at n=1024)", no_full_matrix),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 3: backward pass by recomputation
# --------------------------------------------------------------------------------------------


def _reference_grads(q, k, v, causal, g_out, g_lse, scale=None):
    """Gradients of sum(out * g_out) + sum(lse * g_lse) in float64 by autograd, naive attention."""
    leaves = [_as_float64(t).requires_grad_(True) for t in (q, k, v)]
    out, lse = reference_flash(*leaves, causal=causal, scale=scale)
    finite = torch.isfinite(lse)
    loss = (out * _as_float64(g_out)).sum() + (lse.masked_fill(~finite, 0.0) * _as_float64(g_lse)).sum()
    return torch.autograd.grad(loss, leaves)


def check_flash_backward(fn: Callable) -> None:
    """Check the gradients of ``flash_attention_torch`` (its ``flash_backward``) against autograd
    through float64 naive attention, without PyTorch's fused attention, forward or backward."""
    fn = police(fn, "flash.flash_attention_torch")
    d, d_v = 6, 4

    def compare(seed, n_q, n_k, causal, label, use_lse=False, dtype=torch.float64, tol=None):
        q, k, v = (_randn(seed, 2, n_q, d, dtype=dtype), _randn(seed + 1, 2, n_k, d, dtype=dtype),
                   _randn(seed + 2, 2, n_k, d_v, dtype=dtype))
        g_out = _randn(seed + 3, 2, n_q, d_v)
        g_lse = _randn(seed + 4, 2, n_q) if use_lse else torch.zeros(2, n_q)
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out, lse = assert_pair(fn(*leaves, causal, block_q=5, block_k=4), what="the function",
                               names="(out, lse)")
        loss = (out * g_out.to(out.dtype)).sum()
        loss = loss + (lse.masked_fill(torch.isinf(lse), 0.0) * g_lse.to(lse.dtype)).sum()
        if loss.grad_fn is None:
            raise AssertionError("out has no gradient: flash_attention_torch must go through "
                                 "FlashAttentionFunction.apply")
        with ForbiddenCalls(forbidden("flash.flash_attention_torch")) as watch:
            loss.backward()
        if watch.seen:
            raise AssertionError(f"your flash_backward {watch.message()}")
        wanted = _reference_grads(q, k, v, causal, g_out, g_lse)
        for name, leaf, want in zip("qkv", leaves, wanted):
            if leaf.grad is None:
                raise AssertionError(f"d{name}{label} is None: flash_backward must return "
                                     "(dq, dk, dv)")
            assert_shape(leaf.grad, want.shape, what=f"d{name}{label}")
            assert_finite(leaf.grad, what=f"d{name}{label}", hint=_NAN_HINT)
            hints = {}
            if use_lse and g_lse.any():
                no_lse = _reference_grads(q, k, v, causal, g_out, torch.zeros(2, n_q))
                hints["grad_lse is ignored: subtract it from D = rowsum(grad_out * out)"] = (
                    no_lse["qkv".index(name)])
            if name in "qk":
                hints["the scale is missing from dq or dk: both are scale * (ds @ k) and "
                      "scale * (ds^T @ q)"] = want / (d ** -0.5)
            assert_close(leaf.grad, want, what=f"d{name}{label}",
                         rtol=tol, atol=tol,
                         hint=explain_mismatch(leaf.grad, hints) or (
                             "recompute p = exp(s - lse) with the same scale and mask as the "
                             "forward pass; ds = p * (grad_out v^T - D)"))

    run_checks("flash_backward", [
        ("gradients of out, n not a multiple of the blocks", lambda: compare(200, 11, 13, False, "")),
        ("gradients through lse as well", lambda: compare(210, 9, 10, False, " (loss uses lse)",
                                                          use_lse=True)),
        ("causal, n_q < n_k", lambda: compare(220, 7, 12, True, " (causal, n_q=7, n_k=12)")),
        ("causal, n_q > n_k (queries that see nothing get zero gradients)",
         lambda: compare(230, 12, 7, True, " (causal, n_q=12, n_k=7)", use_lse=True)),
        ("float32 inputs", lambda: compare(240, 10, 9, True, " (float32)", dtype=torch.float32,
                                           tol=1e-4)),
    ])


# --------------------------------------------------------------------------------------------
# Exercise 4: the Triton kernel
# --------------------------------------------------------------------------------------------


TRITON_MISSING = (
    "flash_attention_triton: not checked on this machine, because Triton is not installed here "
    "({error}). Triton has no wheels for macOS or Windows. Your kernel is still graded (the grader "
    "runs on Linux); to run and check it yourself, use a Linux machine (on Windows, WSL 2 is "
    "one), or a hosted notebook on Linux: see \"Exercise 4 without Triton\" in the lesson. The "
    "rest of this notebook runs without it."
)


# In Triton's interpreter, flash_attention_triton launches blocks of 32 queries and 32 keys
# (BLOCK_M = BLOCK_N = 32); the hints about blocks use it
_INTERPRETER_BLOCK = 32


def _padded_keys(q, k, v, block_n):
    """Non-causal attention whose keys and values are padded with zeros to a multiple of
    ``block_n``: what a kernel gives that loads the lanes past n_k as 0 but does not mask their
    scores (a common mistake)."""
    q, k, v = _as_float64(q), _as_float64(k), _as_float64(v)
    extra = -k.shape[-2] % block_n
    pad = (0, 0, 0, extra)
    return reference_flash(q, torch.nn.functional.pad(k, pad), torch.nn.functional.pad(v, pad))[0]


def check_flash_attention_triton(fn: Callable) -> None:
    """Check ``flash_attention_triton(q, k, v, causal)`` at small sizes: on a GPU if there is one,
    else on the CPU through Triton's interpreter (float32 and float16).

    Where Triton cannot be imported (no wheels for macOS or Windows), print why nothing was
    checked and return, so that the rest of the notebook runs; the trusted grader, on Linux,
    still grades the kernel.
    """
    try:
        import triton  # noqa: F401
    except ImportError as error:
        print("! " + TRITON_MISSING.format(error=error))
        return
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def compare(seed, batch, n_q, n_k, d, causal, label, dtype=torch.float32, tol=None):
        q = _randn(seed, *batch, n_q, d, dtype=dtype).to(device)
        k = _randn(seed + 1, *batch, n_k, d, dtype=dtype).to(device)
        v = _randn(seed + 2, *batch, n_k, d, dtype=dtype).to(device)
        # float32 on a GPU uses TF32 tensor cores by default: a looser tolerance there
        tol = tol or (2e-3 if (device.type == "cuda" or dtype != torch.float32) else 1e-4)
        scale = d ** -0.5
        hints = {
            "the scores are not multiplied by qk_scale = scale * log2(e) before tl.math.exp2":
                reference_flash(q, k, v, causal, math.log(2.0))[0],
            "tl.exp of scores multiplied by qk_scale: qk_scale = scale * log2(e) is made for "
            "tl.math.exp2 (base 2); with tl.exp the scores are log2(e) times too large":
                reference_flash(q, k, v, causal, scale / math.log(2.0))[0],
        }
        if device.type == "cpu" and not causal and n_k % _INTERPRETER_BLOCK:
            hints["keys past n_k (the lanes after the end of the last block of keys) take part in "
                  "the softmax: mask their scores with -inf (cols < n_k), not only their "
                  "loads"] = _padded_keys(q, k, v, _INTERPRETER_BLOCK)
        # a Triton block of queries has rows past n_q: its end is not cut at n_q
        blocks = (_INTERPRETER_BLOCK, False) if device.type == "cpu" else None
        return _compare_attention(fn, q, k, v, label, causal=causal, tol=tol, hints=hints,
                                  query_blocks=blocks)

    def one_block():
        compare(305, (2,), 20, 20, 16, False, " (n=20, d=16: one block of keys)")

    def plain():
        compare(300, (2,), 40, 40, 16, False, " (n=40, d=16)")

    def unaligned():
        compare(310, (1, 2), 37, 50, 32, False, " (n_q=37, n_k=50, d=32)")

    def causal_fewer_queries():
        compare(320, (2,), 24, 56, 16, True, " (causal, n_q=24, n_k=56)")

    def causal_more_queries():
        out, _ = compare(330, (1,), 50, 20, 16, True, " (causal, n_q=50 > n_k=20)")
        hidden = torch.zeros(50, dtype=torch.bool)
        hidden[:30] = True
        assert_zero_where(out[0].cpu(), hidden[:, None].expand(50, 16), what="out",
                          region="for the first 30 queries, which see no key")

    def head_dim_not_power_of_two():
        compare(340, (2,), 33, 33, 24, True, " (d=24: BLOCK_D=32, mask the extra columns)")

    def half():
        compare(350, (2,), 40, 45, 32, True, " (float16)", dtype=torch.float16, tol=1e-2)

    run_checks("flash_attention_triton", [
        ("values and lse, one block of keys", one_block),
        ("values and lse, n=40", plain),
        ("n not a multiple of the block, n_q != n_k", unaligned),
        ("causal, n_q < n_k (bottom-right aligned)", causal_fewer_queries),
        ("causal, n_q > n_k: the first queries see no key", causal_more_queries),
        ("head dimension 24 (not a power of two)", head_dim_not_power_of_two),
        ("float16 inputs", half),
    ])
