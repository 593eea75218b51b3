"""Lesson 09: FlashAttention, from online softmax to a Triton kernel.

You fill in four pieces here; the notebook ``09_flash_attention.ipynb`` explains each one and checks
it. Shapes use ``...`` for any number of leading batch dimensions.

- ``online_softmax(x, block_size)``: softmax and log-sum-exp from one streaming pass over blocks,
  keeping only a running maximum and a running normaliser per row.
- ``flash_forward(...)``: tiled attention in PyTorch that never builds the n_q x n_k score matrix,
  returning the output and the log-sum-exp of every row of scaled scores.
- ``flash_backward(...)``: its backward pass, recomputing the scores block by block from the saved
  log-sum-exp instead of storing the attention matrix.
- ``flash_forward_kernel``: the same forward pass as a Triton kernel.

``flash_attention_torch`` (tiled PyTorch, with gradients) and ``flash_attention_triton`` (forward
only) are the functions to call; they check their inputs and then use your pieces. On a CPU with
several threads, ``flash_attention_torch`` runs your ``flash_forward`` once per block of queries,
the blocks spread over a pool of threads, each working alone (see ``forward_grid``).
``softmax_triton`` (with ``softmax_rows_kernel``) is a small, finished Triton kernel to read first,
and ``online_softmax_triton`` (with ``online_softmax_kernel``) the finished step between it and
exercise 4: the online softmax over rows longer than one block.

Conventions, the same as lessons 02 and 03:

- ``q`` is (..., n_q, d), ``k`` is (..., n_k, d), ``v`` is (..., n_k, d_v); leading dimensions
  broadcast; the scores are ``scale * q @ k^T`` with ``scale = 1 / sqrt(d)`` unless given.
- ``causal=True`` lets query i see key j only if ``j <= i + (n_k - n_q)``: the mask is aligned to
  the bottom-right corner, so the last query sees every key. When n_q > n_k, the first
  ``n_q - n_k`` queries see no key at all: their output is 0 and their log-sum-exp is ``-inf``
  (the log of an empty sum), never nan.
- The log-sum-exp ``lse`` has shape (..., n_q): ``lse[i] = log(sum_j exp(s[i, j]))`` in natural
  log, over the keys query i may see, of the *scaled* scores ``s``. It is float32 for half-precision
  and float32 inputs (float64 for float64 inputs), as in FlashAttention.

Triton is optional: this module imports without it, and ``flash_attention_triton`` then says how to
install it (``pip install -e .[gpu]``, or ``pip install triton==3.7.1``). Without a CUDA GPU, Triton
runs kernels through its interpreter (numpy on the CPU, slow, small sizes only), which must be
switched on *before* this module is imported, because ``@triton.jit`` decides at definition time
whether to compile a kernel or to interpret it::

    import os; os.environ["TRITON_INTERPRET"] = "1"   # before: from attnlab import flash
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import math
import os
import textwrap
from concurrent.futures import ThreadPoolExecutor

import torch

from attnlab.shortcuts import carried
from attnlab.validate import check_qkv, check_scale

try:  # Triton is optional: everything but flash_attention_triton works without it
    import triton
    import triton.language as tl
except ImportError as error:  # pragma: no cover - depends on the installation
    triton = tl = None
    _TRITON_IMPORT_ERROR: ImportError | None = error
else:
    _TRITON_IMPORT_ERROR = None

# Read once, like @triton.jit does: the kernels below are interpreted if and only if this was set
# before the module was imported.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Tile sizes chosen for CPUs (measured with `python -m attnlab.bench flash`): a 512 x 512 block
# of float32 scores is 1 MiB, the size of a core's L2 cache on many CPUs.
DEFAULT_BLOCK_Q = 512
DEFAULT_BLOCK_K = 512
# At most this many CPU threads share the blocks of queries of one call (see forward_grid).
MAX_GRID_THREADS = 16
_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2


# --------------------------------------------------------------------------------------------
# 1. Online softmax
# --------------------------------------------------------------------------------------------


def online_softmax(x: torch.Tensor, block_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax and log-sum-exp along the last dimension, from one streaming pass over blocks.

    x: floating-point tensor (..., n); entries may be ``-inf`` (masked), not ``+inf`` or nan.
    block_size: how many entries of a row are read at a time.
    Returns ``(weights, lse)``: weights (..., n), equal to ``torch.softmax(x, -1)``, and lse (...),
    equal to ``torch.logsumexp(x, -1)``, both in x's dtype. x itself is left unchanged.

    The pass reads x one block of ``block_size`` columns at a time and keeps, per row, only the
    maximum m seen so far and the normaliser l = sum exp(x_j - m) over the entries seen so far.
    When a block raises the maximum from m to m', the old normaliser is rescaled by exp(m - m').
    A second, elementwise pass writes exp(x - m) / l. A row whose entries are all ``-inf`` gets
    weights 0 and lse ``-inf`` (nothing to normalise; never nan).
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise TypeError(f"x must be a floating-point torch.Tensor of shape (..., n), got {x!r:.80}")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    ### BEGIN SOLUTION
    work = x.to(torch.promote_types(x.dtype, torch.float32))  # half precision: accumulate in fp32
    m = torch.full(x.shape[:-1], -math.inf, dtype=work.dtype, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        block = work[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        # A row that has seen only -inf keeps m = -inf; shift it by 0 so exp(-inf - -inf) = nan
        # never happens (its terms are exp(-inf) = 0 either way).
        shift = m_new.masked_fill(m_new == -math.inf, 0.0)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    shift = m.masked_fill(m == -math.inf, 0.0)
    empty = l == 0
    safe_l = l.masked_fill(empty, 1.0)
    weights = torch.exp(work - shift[..., None]) / safe_l[..., None]
    lse = (shift + torch.log(safe_l)).masked_fill(empty, -math.inf)
    return weights.to(x.dtype), lse.to(x.dtype)
    ### END SOLUTION


# --------------------------------------------------------------------------------------------
# 2. Tiled attention in PyTorch, forward and backward
# --------------------------------------------------------------------------------------------


def _accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype accumulates in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def flash_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
    block_q: int, block_k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention forward pass (FlashAttention's algorithm) on 3-d tensors.

    q: (B, n_q, d); k: (B, n_k, d); v: (B, n_k, d_v): the batch dimensions are already flattened
    into B and the inputs checked by ``flash_attention_torch``, which calls this function.
    causal: bottom-right aligned (query i sees key j iff j <= i + n_k - n_q); scale: a float.
    Returns ``(out, lse)``: out (B, n_q, d_v) in q's dtype; lse (B, n_q), float32 (float64 for
    float64 inputs), ``-inf`` for a query that sees no key, whose output is 0.

    Loop over blocks of ``block_q`` queries; for each, loop over blocks of ``block_k`` keys. Keep
    per query row a running maximum m, a running normaliser l and an unnormalised output acc,
    rescaled by exp(m_old - m_new) whenever the maximum grows (the online softmax of exercise 1).
    Never build the (n_q, n_k) score matrix: only (B, block_q, block_k) blocks. With ``causal``,
    skip key blocks that lie entirely above the diagonal, and mask only the blocks it crosses.
    """
    ### BEGIN SOLUTION
    work = _accumulator_dtype(q.dtype)
    n_q, n_k, d_v = q.shape[1], k.shape[1], v.shape[2]
    batch = q.shape[0]
    k_t = k.to(work).transpose(1, 2)  # (B, d, n_k); no copy when k is already in `work`
    v_w = v.to(work)
    out = torch.empty(batch, n_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, n_q, dtype=work, device=q.device)
    offset = n_k - n_q  # query i sees keys j <= i + offset when causal
    for i0 in range(0, n_q, block_q):
        i1 = min(i0 + block_q, n_q)
        q_block = q[:, i0:i1].to(work) * scale
        # Per query row, kept as (B, bq, 1) so they broadcast against (B, bq, bk) blocks.
        m = torch.full((batch, i1 - i0, 1), -math.inf, dtype=work, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(batch, i1 - i0, d_v, dtype=work, device=q.device)
        # The last query of the block sees keys up to i1 - 1 + offset: later key blocks are skipped.
        hi = min(n_k, i1 + offset) if causal else n_k
        for j0 in range(0, max(hi, 0), block_k):
            j1 = min(j0 + block_k, hi)
            s = torch.bmm(q_block, k_t[:, :, j0:j1])  # (B, bq, bk) scaled scores
            if causal and j1 - 1 > i0 + offset:  # the block crosses the diagonal: mask it
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)
                s.masked_fill_(cols > rows + offset, -math.inf)
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
                # a row that has seen only -inf so far: shift by 0, not by -inf (no nan)
                shift = m_new.masked_fill(m_new == -math.inf, 0.0)
            else:
                m_new = shift = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            p = s.sub_(shift).exp_()  # in place: the scores are not needed any more
            alpha = (m - shift).exp_()  # rescales what was accumulated under the old maximum
            l = torch.addcmul(p.sum(dim=-1, keepdim=True), l, alpha)
            acc = torch.baddbmm(acc.mul_(alpha), p, v_w[:, j0:j1])
            m = m_new
        empty = l == 0
        out[:, i0:i1] = acc / l.masked_fill(empty, 1.0)
        lse[:, i0:i1] = (m + torch.log(l)).masked_fill(empty, -math.inf).squeeze(-1)
    return out, lse
    ### END SOLUTION


def flash_backward(
    grad_out: torch.Tensor, grad_lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
    v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, causal: bool, scale: float,
    block_q: int, block_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward pass of ``flash_forward`` by recomputation, on 3-d tensors.

    grad_out: (B, n_q, d_v), the gradient of the loss with respect to ``out``; grad_lse: (B, n_q),
    with respect to ``lse`` (zeros when lse was not used). q, k, v, causal, scale, block sizes: as
    given to ``flash_forward``; out, lse: what it returned (saved by ``FlashAttentionFunction``).
    Returns ``(dq, dk, dv)`` with the shapes and dtypes of q, k and v.

    The attention weights are not stored: for each pair of blocks, recompute the scaled scores
    s = scale * q_i k_j^T (masked as in the forward pass) and the weights p = exp(s - lse_i).
    With D_i = sum(grad_out_i * out_i) - grad_lse_i (one number per query):
    dv_j += p^T grad_out_i;  dp = grad_out_i v_j^T;  ds = p * (dp - D_i);
    dq_i += scale * ds k_j;  dk_j += scale * ds^T q_i.
    """
    ### BEGIN SOLUTION
    work = _accumulator_dtype(q.dtype)
    n_q, n_k = q.shape[1], k.shape[1]
    q_w, k_w, v_w = q.to(work), k.to(work), v.to(work)
    g_w = grad_out.to(work)
    delta = (g_w * out.to(work)).sum(dim=-1) - grad_lse.to(work)  # (B, n_q)
    lse_w = lse.to(work).masked_fill(lse == -math.inf, 0.0)  # rows that see nothing: p = 0
    dq = torch.zeros_like(q_w)
    dk = torch.zeros_like(k_w)
    dv = torch.zeros_like(v_w)
    offset = n_k - n_q
    for j0 in range(0, n_k, block_k):
        j1 = min(j0 + block_k, n_k)
        k_block, v_block = k_w[:, j0:j1], v_w[:, j0:j1]
        # Only queries i with i + offset >= j0 see any key of this block.
        first = max(0, j0 - offset) if causal else 0
        for i0 in range(first, n_q, block_q):
            i1 = min(i0 + block_q, n_q)
            q_block, g_block = q_w[:, i0:i1], g_w[:, i0:i1]
            s = torch.bmm(q_block, k_block.transpose(1, 2)).mul_(scale)
            if causal and j1 - 1 > i0 + offset:
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)
                s.masked_fill_(cols > rows + offset, -math.inf)
            p = s.sub_(lse_w[:, i0:i1, None]).exp_()
            dv[:, j0:j1].baddbmm_(p.transpose(1, 2), g_block)
            dp = torch.bmm(g_block, v_block.transpose(1, 2))
            ds = p.mul_(dp.sub_(delta[:, i0:i1, None]))
            dq[:, i0:i1].baddbmm_(ds, k_block, alpha=scale)
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), q_block, alpha=scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
    ### END SOLUTION


@contextlib.contextmanager
def _one_thread_per_operation():
    """PyTorch operations use one CPU thread each inside the block (threads started in it too)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def forward_grid(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
    block_q: int, block_k: int, threads: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``flash_forward`` run once per (slice b, block of queries i), the calls spread over threads.

    q: (B, n_q, d); k: (B, n_k, d); v: (B, n_k, d_v), as for ``flash_forward``, which this returns
    the result of. The blocks of queries are independent problems, as in the grid of programs of
    FlashAttention-2 and of the Triton kernel: each thread takes the next block as soon as it is
    free and runs all of that block's operations on its own (PyTorch set to one thread per
    operation). A thread on a core that another program keeps busy then simply does fewer blocks;
    with the operations themselves split over threads, each of the many small operations would wait
    for its slowest thread. ``threads < 2`` (or a single block): one call of ``flash_forward`` on
    the whole batch.
    """
    batch, n_q, n_k = q.shape[0], q.shape[1], k.shape[1]
    tasks = [(b, i0, min(i0 + block_q, n_q)) for b in range(batch) for i0 in range(0, n_q, block_q)]
    workers = min(threads, len(tasks), MAX_GRID_THREADS)
    if workers < 2 or n_k == 0 or q.device.type != "cpu":
        return flash_forward(q, k, v, causal, scale, block_q, block_k)
    offset = n_k - n_q  # causal: query i sees the keys j <= i + offset

    def run(task):
        b, i0, i1 = task
        # Causal: keys past the block's last query's view are cut off, and the block stays a
        # bottom-right-aligned problem of its own (its offset becomes i0 + offset).
        seen = max(0, min(n_k, i1 + offset)) if causal else n_k
        if seen == 0:
            return None  # none of these queries sees a key: output 0, lse -inf (filled in below)
        with torch.no_grad():  # grad mode is per thread; the autograd Function does the rest
            return flash_forward(q[b:b + 1, i0:i1], k[b:b + 1, :seen], v[b:b + 1, :seen],
                                 causal, scale, block_q, block_k)

    with _one_thread_per_operation(), ThreadPoolExecutor(workers) as pool:
        # carried: a check that forbids fused attention watches the workers too
        results = list(pool.map(carried(run), tasks))
    some_out, some_lse = next(result for result in results if result is not None)
    rows = [[] for _ in range(batch)]
    for (b, i0, i1), result in zip(tasks, results):
        if result is None:
            result = (some_out.new_zeros(1, i1 - i0, some_out.shape[2]),
                      some_lse.new_full((1, i1 - i0), -math.inf))
        rows[b].append(result)
    out = torch.cat([torch.cat([o for o, _ in row], dim=1) for row in rows])
    lse = torch.cat([torch.cat([l for _, l in row], dim=1) for row in rows])
    return out, lse


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: ``flash_forward`` forward (through ``forward_grid``), ``flash_backward``
    backward.

    Saves only q, k, v, out and lse (O(n) per query, not the O(n_q * n_k) weights).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, block_q, block_k, threads=1):
        outputs = forward_grid(q, k, v, causal, scale, block_q, block_k, threads)
        ctx.save_for_backward(q, k, v, *outputs)
        ctx.settings = (causal, scale, block_q, block_k)
        return outputs

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_backward(grad_out, grad_lse, q, k, v, out, lse, *ctx.settings)
        return dq, dk, dv, None, None, None, None, None


def _flatten(t: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    """(..., n, d) expanded to the common batch shape, as (B, n, d)."""
    return t.expand(*batch, *t.shape[-2:]).reshape(-1, *t.shape[-2:])


def flash_attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K, scale: float | None = None,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled (FlashAttention) attention in PyTorch, with gradients by recomputation.

    q: (..., n_q, d); k: (..., n_k, d); v: (..., n_k, d_v); leading dimensions broadcast; one
    dtype and device for all three. causal: bottom-right aligned (see the module docstring).
    block_q, block_k: tile sizes; any n works, multiples or not. scale: ``1/sqrt(d)`` when None.
    threads: CPU threads that share the blocks of queries of the forward pass (``forward_grid``);
    None: ``torch.get_num_threads()``; 1: a single call of ``flash_forward`` on the whole batch.
    Returns ``(out, lse)``: out (..., n_q, d_v) in the inputs' dtype, lse (..., n_q) (float32, or
    float64 for float64 inputs). Both are differentiable; the backward pass recomputes the
    scores from lse (``flash_backward``). Uses this module's ``flash_forward``.
    """
    batch = check_qkv(q, k, v)
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{name} must be a positive int, got {size!r}")
    if threads is None:
        threads = torch.get_num_threads()
    elif isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    scale = check_scale(scale, q.shape[-1])
    n_q, d_v = q.shape[-2], v.shape[-1]
    out, lse = FlashAttentionFunction.apply(
        _flatten(q, batch), _flatten(k, batch), _flatten(v, batch), bool(causal), scale,
        block_q, block_k, threads,
    )
    return out.reshape(*batch, n_q, d_v), lse.reshape(*batch, n_q)


# --------------------------------------------------------------------------------------------
# 3. The Triton kernel (forward only)
# --------------------------------------------------------------------------------------------


def _jit(fn):
    """``triton.jit`` when Triton is installed; otherwise the plain function (never launched)."""
    return triton.jit(fn) if triton is not None else fn


def _python_function(kernel):
    """The Python function inside a Triton kernel object (JITFunction, InterpretedFunction, ...)."""
    while hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


def kernel_source(kernel) -> str:
    """The source code of a kernel of this module from its ``def`` line on (without the decorator
    that makes it a Triton kernel), e.g. ``kernel_source(softmax_rows_kernel)``."""
    lines = textwrap.dedent(inspect.getsource(_python_function(kernel))).splitlines(keepends=True)
    while lines and lines[0].startswith("@"):
        lines.pop(0)
    return "".join(lines)


@_jit
def softmax_rows_kernel(X, Y, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # The warm-up kernel: softmax of each row of a 2-d tensor, one program per row.
    # Program r (tl.program_id(0)) reads row r whole as one block of BLOCK lanes (BLOCK: n_cols
    # rounded up to a power of two). Lanes past the end of the row are masked: they read -inf,
    # which changes neither the maximum nor the sum (exp(-inf) = 0), and they are not stored.
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride can pass 2**31 in large tensors
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=inside, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)  # stable: the largest exponent is 0
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=inside)


@_jit
def online_softmax_kernel(X, Y, Lse, n_rows, n_cols, stride_x, stride_y,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # The step between the warm-up and exercise 4: softmax and log-sum-exp of rows longer than
    # one block. Program i takes rows i*BLOCK_M ... i*BLOCK_M + BLOCK_M - 1 and walks along them
    # in blocks of BLOCK_N columns, keeping per row only the running maximum (row_max) and
    # normaliser (row_sum): the online softmax of exercise 1, one lane per row. A second walk
    # writes exp(x - row_max) / row_sum. Exercise 4's kernel makes the same first walk over
    # scores q.k that it computes block by block, and multiplies by V instead of writing weights.
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_m < n_rows
    x_rows = X + offs_m[:, None].to(tl.int64) * stride_x  # 64-bit: rows * stride can pass 2**31
    y_rows = Y + offs_m[:, None].to(tl.int64) * stride_y
    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    row_sum = tl.zeros([BLOCK_M], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        inside = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_rows + cols[None, :], mask=inside, other=float("-inf")).to(tl.float32)
        max_new = tl.maximum(row_max, tl.max(x, 1))
        offset = tl.where(max_new == float("-inf"), 0.0, max_new)  # a row that is all -inf so far
        row_sum = row_sum * tl.exp(row_max - offset) + tl.sum(tl.exp(x - offset[:, None]), 1)
        row_max = max_new
    any_key = row_sum > 0.0
    row_sum_or_1 = tl.where(any_key, row_sum, 1.0)
    offset = tl.where(any_key, row_max, 0.0)
    tl.store(Lse + offs_m, tl.where(any_key, row_max + tl.log(row_sum_or_1), float("-inf")), mask=row_ok)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        inside = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_rows + cols[None, :], mask=inside, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - offset[:, None]) / row_sum_or_1[:, None]
        tl.store(y_rows + cols[None, :], y.to(Y.dtype.element_ty), mask=inside)


@_jit
def flash_forward_kernel(
    Q, K, V, Out, Lse,
    stride_qb, stride_qm, stride_qd,
    stride_kb, stride_kn, stride_kd,
    stride_vb, stride_vn, stride_vd,
    stride_ob, stride_om, stride_od,
    stride_lb, stride_lm,
    n_q, n_k, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    # One program computes BLOCK_M rows of the output of one (batch x head) slice:
    #   tl.program_id(0): which block of queries; tl.program_id(1): which slice b.
    # Q, K, V, Out: pointers to (B, n, d) tensors; element (b, i, c) of Q sits at
    #   Q + b * stride_qb + i * stride_qm + c * stride_qd (likewise for K, V, Out); Lse: (B, n_q).
    # HEAD_DIM = d; BLOCK_D = d rounded up to a power of two (tl.arange needs one): mask c < d.
    # qk_scale = scale * log2(e): work in base 2 (exp2, log2 are cheaper), so
    #   p = exp2(qk_scale * q.k - m) and, at the end, lse = (m + log2(l)) * ln(2) in natural log.
    # Rows i >= n_q and keys j >= n_k lie outside the tensors: mask them in loads and stores.
    # CAUSAL: key j is allowed for query i iff j <= i + (n_k - n_q); skip key blocks above it.
    # Rows that see no key: store 0 and lse = -inf.
    ### BEGIN SOLUTION
    start_m = tl.program_id(0) * BLOCK_M
    b = tl.program_id(1).to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    row_ok = offs_m < n_q
    q = tl.load(Q + b * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = K + b * stride_kb + offs_d[None, :] * stride_kd
    v_base = V + b * stride_vb + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    offset = n_k - n_q
    if CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M + offset)  # keys the last row of the block sees
        full = tl.minimum(hi, start_m + offset + 1)  # keys every row of the block sees
    else:
        hi = n_k
        full = n_k
    full = (tl.maximum(full, 0) // BLOCK_N) * BLOCK_N

    # Blocks every row sees in full: no mask at all (the fast path).
    for start_n in range(0, full, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        if BLOCK_D == HEAD_DIM:
            k = tl.load(k_base + cols[:, None] * stride_kn)
            v = tl.load(v_base + cols[:, None] * stride_vn)
        else:
            k = tl.load(k_base + cols[:, None] * stride_kn, mask=d_ok[None, :], other=0.0)
            v = tl.load(v_base + cols[:, None] * stride_vn, mask=d_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # rescale, then add p @ v
        m_i = m_new

    # The rest: the block past n_k and the blocks the causal diagonal crosses, masked.
    for start_n in range(full, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < n_k
        kv_ok = col_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + cols[:, None] * stride_kn, mask=kv_ok, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vn, mask=kv_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        allowed = col_ok[None, :]
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= offs_m[:, None] + offset)
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen nothing
        p = tl.math.exp2(s - shift[:, None])
        alpha = tl.math.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])  # rescale, then add p @ v
        m_i = m_new

    seen = l_i > 0.0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(seen, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf"))
    tl.store(Out + b * stride_ob + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    tl.store(Lse + b * stride_lb + offs_m * stride_lm, lse, mask=row_ok)
    ### END SOLUTION


def _unwritten(kernel) -> str | None:
    """The stub's message if ``kernel`` still raises NotImplementedError, else None.

    A Triton kernel cannot raise: the compiler rejects ``raise``. So the learner's copy of the
    kernel keeps the stub's ``raise NotImplementedError(...)`` until it is written, and this
    function finds it in the kernel's source before anything is compiled or interpreted.
    """
    try:
        tree = ast.parse(kernel_source(kernel))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            if getattr(node.exc.func, "id", "") == "NotImplementedError":
                try:
                    return str(ast.literal_eval(node.exc.args[0]))
                except (IndexError, ValueError):
                    return "flash_forward_kernel is not written yet"
    return None


def triton_status() -> str | None:
    """Why ``flash_attention_triton`` cannot run here, or None when it can (on some device)."""
    if triton is None:
        return (
            f"Triton is not installed ({_TRITON_IMPORT_ERROR}). On Linux, install it with "
            "`pip install -e .[gpu]` in the course folder, or `pip install triton==3.7.1` (the "
            "version that matches torch 2.13); Triton has no wheels for macOS or Windows, so there "
            "see \"Exercise 4 without Triton\" in lesson 09"
        )
    if not torch.cuda.is_available() and not INTERPRETED:
        return (
            "there is no CUDA GPU, so Triton must run through its interpreter: set the "
            "environment variable TRITON_INTERPRET=1 before importing attnlab.flash (in a "
            "notebook: import os; os.environ['TRITON_INTERPRET'] = '1' as the first line, then "
            "restart the kernel), because @triton.jit decides at definition time"
        )
    return None


# On a GPU, Triton's autotuner tries these configurations once per shape and keeps the fastest
# (it does not work in the interpreter): BLOCK_M x BLOCK_N tiles, warps per program, pipelining
# stages. ATTNLAB_TRITON_AUTOTUNE=0 uses one fixed configuration instead (quicker to compile).
_GPU_CONFIGS = [
    (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 4, 3),
    (128, 32, 4, 3), (64, 64, 4, 3), (64, 32, 4, 2),
]
AUTOTUNE = os.environ.get("ATTNLAB_TRITON_AUTOTUNE", "1") != "0"
_autotuned: dict = {}


def _gpu_launch(kernel, grid_rows: int, slices: int, arguments: tuple, constants: dict,
                element_size: int) -> None:
    """Launch ``kernel`` on the GPU: autotuned, or with one configuration that fits in memory."""
    if AUTOTUNE:
        if kernel not in _autotuned:
            configs = [
                triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                for bm, bn, w, s in _GPU_CONFIGS
            ]
            _autotuned.clear()  # an edited (reloaded) kernel replaces the old one
            # the autotuner adds the tensors' dtypes to this key by itself
            _autotuned[kernel] = triton.autotune(
                configs=configs, key=["n_q", "n_k", "HEAD_DIM", "CAUSAL"]
            )(kernel)

        def grid(meta):
            return (triton.cdiv(grid_rows, meta["BLOCK_M"]), slices)

        _autotuned[kernel][grid](*arguments, **constants)
        return
    # float32 tiles of d >= 128 take twice the shared memory: smaller tiles, fewer stages
    small = element_size * constants["BLOCK_D"] > 256
    block_m, block_n, warps, stages = (64, 32, 4, 2) if small else (128, 64, 4, 3)
    kernel[(triton.cdiv(grid_rows, block_m), slices)](
        *arguments, **constants, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps,
        num_stages=stages,
    )


def _check_triton_device(device: torch.device, dtype: torch.dtype, name: str) -> None:
    """Raise a clear error where a Triton kernel cannot run on tensors of this device and dtype."""
    problem = triton_status()
    if problem:
        raise RuntimeError(f"{name} cannot run: {problem}")
    on_gpu = device.type == "cuda"
    if INTERPRETED and on_gpu:
        raise RuntimeError("TRITON_INTERPRET=1 is set, so the kernel runs in the interpreter, "
                           "which needs CPU tensors: move them to the CPU, or unset it and "
                           "restart to compile for the GPU")
    if not INTERPRETED and not on_gpu:
        raise RuntimeError(f"the tensors are on {device}, but compiled Triton kernels run on a "
                           "CUDA GPU: move them with .cuda(), or use the interpreter "
                           "(TRITON_INTERPRET=1 before importing attnlab.flash)")
    if INTERPRETED and dtype == torch.bfloat16:
        raise TypeError("Triton's interpreter computes bfloat16 dot products wrongly: use float16 "
                        "or float32 on the CPU (bfloat16 works on a GPU)")


def softmax_triton(x: torch.Tensor) -> torch.Tensor:
    """Softmax along the last dimension of a 2-d tensor x (rows, n), with ``softmax_rows_kernel``.

    Launches a grid of ``rows`` programs, one per row; each holds its whole row in one block, so n
    may be at most 65536 here. float16, bfloat16 or float32 (bfloat16 only on a GPU); every row
    needs at least one finite entry. Returns a new tensor like x. Runs where
    ``flash_attention_triton`` runs (a CUDA GPU, or Triton's interpreter on the CPU).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-d torch.Tensor (rows, n), got {getattr(x, 'shape', x)!r:.80}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"softmax_triton takes float16, bfloat16 or float32, got {x.dtype}")
    if not 1 <= x.shape[1] <= 2**16:
        raise ValueError(f"rows must have 1 to 65536 entries for one block per row, got {x.shape[1]}")
    _check_triton_device(x.device, x.dtype, "softmax_triton")
    x = x if x.stride(1) == 1 else x.contiguous()
    y = torch.empty_like(x)
    if x.shape[0]:
        grid = (x.shape[0],)  # one program per row
        softmax_rows_kernel[grid](x, y, x.shape[1], x.stride(0), y.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def online_softmax_triton(x: torch.Tensor, block_n: int = 128,
                          block_m: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax and log-sum-exp along the last dimension of a 2-d tensor x (rows, n), with
    ``online_softmax_kernel``: rows of any length, read in blocks of ``block_n`` columns.

    Launches ``ceil(rows / block_m)`` programs, each holding ``block_m`` rows and walking along
    them block by block (``block_n``, ``block_m``: powers of two, at least 16). float16, bfloat16
    or float32 (bfloat16 only on a GPU). Returns ``(weights, lse)``: weights like x, lse (rows,)
    float32; a row that is all ``-inf`` gets weights 0 and lse ``-inf``. Runs where
    ``flash_attention_triton`` runs (a CUDA GPU, or Triton's interpreter on the CPU).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-d torch.Tensor (rows, n), got {getattr(x, 'shape', x)!r:.80}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"online_softmax_triton takes float16, bfloat16 or float32, got {x.dtype}")
    for name, size in (("block_n", block_n), ("block_m", block_m)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two of at least 16, got {size!r}")
    _check_triton_device(x.device, x.dtype, "online_softmax_triton")
    x = x if x.stride(1) == 1 else x.contiguous()
    y = torch.empty_like(x)
    lse = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    if x.numel():
        grid = (triton.cdiv(x.shape[0], block_m),)  # one program per block of rows
        online_softmax_kernel[grid](x, y, lse, x.shape[0], x.shape[1], x.stride(0), y.stride(0),
                                    BLOCK_M=block_m, BLOCK_N=block_n)
    elif x.shape[0]:
        lse.fill_(-math.inf)  # rows without entries: an empty sum
    return y, lse


def flash_attention_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward pass with the Triton kernel ``flash_forward_kernel``.

    q: (..., n_q, d); k, v: (..., n_k, d) (the same d for v here); leading dimensions broadcast;
    float16, bfloat16 or float32 (on a GPU, float32 dots use TF32 tensor cores, Triton's default).
    causal: bottom-right aligned, as ``flash_attention_torch``. scale: ``1/sqrt(d)`` when None.
    Returns ``(out, lse)``: out (..., n_q, d) in the inputs' dtype, lse (..., n_q) float32.
    Forward only: no gradients flow through it (use ``flash_attention_torch`` to train).

    On a CUDA GPU the kernel is compiled (and autotuned once per shape). On a CPU it runs through
    Triton's interpreter, which must be on before this module is imported (``TRITON_INTERPRET=1``):
    slow, for small sizes only, and without bfloat16 (the interpreter computes bf16 dots wrongly).
    """
    batch = check_qkv(q, k, v, same_head_dim=True)
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"flash_attention_triton takes float16, bfloat16 or float32, got {q.dtype}")
    scale = check_scale(scale, q.shape[-1])
    _check_triton_device(q.device, q.dtype, "flash_attention_triton")
    on_gpu = q.device.type == "cuda"
    message = _unwritten(flash_forward_kernel)
    if message:
        raise NotImplementedError(message)

    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    q3, k3, v3 = (_flatten(t, batch) for t in (q, k, v))
    q3, k3, v3 = (t if t.stride(-1) == 1 else t.contiguous() for t in (q3, k3, v3))
    out = torch.empty(q3.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q3.shape[:2], dtype=torch.float32, device=q.device)
    if out.numel() and q3.shape[0]:
        arguments = (
            q3, k3, v3, out, lse,
            *q3.stride(), *k3.stride(), *v3.stride(), *out.stride(), *lse.stride(),
            n_q, n_k, scale * _LOG2E,
        )
        constants = dict(HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)), CAUSAL=bool(causal))
        if on_gpu:
            with torch.cuda.device(q.device):
                _gpu_launch(flash_forward_kernel, n_q, q3.shape[0], arguments, constants,
                            q.element_size())
        else:
            block = 32
            grid = (triton.cdiv(n_q, block), q3.shape[0])
            flash_forward_kernel[grid](*arguments, **constants, BLOCK_M=block, BLOCK_N=block)
    return out.reshape(*batch, n_q, d), lse.reshape(*batch, n_q)
