"""Trusted cases of lesson 09 (online_softmax, flash_attention_torch forward and backward,
flash_attention_triton under Triton's interpreter where there is no GPU).

The online softmax may not call PyTorch's softmax or logsumexp, and the tiled attention not
PyTorch's fused attention (``attnlab.shortcuts``); the forward pass must never hold the whole
score matrix (recipe ``flash_peak_memory``)."""

from __future__ import annotations

import numpy as np

from attnlab.shortcuts import forbidden
from autograder.cases import Case, Inputs

import torch

ONLINE = forbidden("flash.online_softmax")
TILED = forbidden("flash.flash_attention_torch")

# Without a GPU, Triton runs only through its interpreter, which must be on before kernels are defined.
WORKER_ENV = {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}


def _online(grade_id, rng, shape, block, dtype=np.float64, spread=3.0, holes=False, label="",
            empty_rows=False):
    """holes: about 30 % of the entries -inf, every row keeping a finite first entry; empty_rows:
    the first row all -inf, and the first block of the second row all -inf."""
    inputs = Inputs()
    x = (spread * rng.standard_normal(shape)).astype(dtype)
    if holes:
        x[rng.random(shape) < 0.3] = -np.inf
        x[..., 0] = 0.0  # every row keeps a finite entry
    if empty_rows:
        x[0] = -np.inf
        x[1, :block] = -np.inf
    return Case(grade_id, "online_softmax", [inputs.add(x)], {"block_size": block}, inputs.arrays, label=label,
                forbidden=ONLINE)


def _qkv(inputs, rng, batch, n_q, n_k, d, d_v, dtype, spread=1.0):
    q = (spread * rng.standard_normal((*batch, n_q, d))).astype(dtype)
    k = (spread * rng.standard_normal((*batch, n_k, d))).astype(dtype)
    v = rng.standard_normal((*batch, n_k, d_v)).astype(dtype)
    return [inputs.add(a) for a in (q, k, v)]


def _forward(grade_id, rng, batch, n_q, n_k, d, d_v, causal, block, dtype=np.float64, spread=1.0, label="",
             target="flash_attention_torch", threads=None, scale=None):
    """threads (flash_attention_torch): 1 calls flash_forward once on the whole batch; 2 once per
    (slice, block of queries), on two threads; None leaves the worker's default."""
    inputs = Inputs()
    args = _qkv(inputs, rng, batch, n_q, n_k, d, d_v, dtype, spread)
    kwargs = {"causal": causal}
    if scale is not None:
        kwargs["scale"] = scale
    if target == "flash_attention_torch":
        kwargs.update(block_q=block, block_k=block)
        if threads is not None:
            kwargs["threads"] = threads
        return Case(grade_id, target, args, kwargs, inputs.arrays, label=label, forbidden=TILED)
    return Case(grade_id, target, args, kwargs, inputs.arrays, label=label)


def _never_the_whole_matrix(grade_id, rng, n, d, block_q, block_k):
    """Whether the forward pass at n x n stays under a quarter of the float32 score matrix of
    memory allocated at once (the reference holds about a twentieth of it)."""
    inputs = Inputs()
    args = _qkv(inputs, rng, (1,), n, n, d, d, np.float32)
    return Case(grade_id, "flash_attention_torch", args, {"causal": False, "block_q": block_q, "block_k": block_k},
                inputs.arrays, recipe="flash_peak_memory", options={"limit_bytes": n * n * 4 // 4},
                label=f"never builds the n x n score matrix (n={n})", forbidden=TILED)


def _backward(grade_id, rng, batch, n_q, n_k, d, d_v, causal, block, label="", dtype=np.float64):
    inputs = Inputs()
    args = _qkv(inputs, rng, batch, n_q, n_k, d, d_v, dtype)
    d_out = inputs.add(rng.standard_normal((*batch, n_q, d_v)).astype(dtype))["array"]
    d_lse = inputs.add(rng.standard_normal((*batch, n_q)).astype(dtype))["array"]
    return Case(grade_id, "flash_attention_torch", args, {"causal": causal, "block_q": block, "block_k": block},
                inputs.arrays, recipe="grad", grad_args=[0, 1, 2], cotangents=[d_out, d_lse], label=label,
                forbidden=TILED)


def cases() -> list[Case]:
    rng = np.random.default_rng(20260909)
    found = [
        _online("online_softmax_visible", rng, (3, 10), 4, label="blocks of 4"),
        _online("online_softmax_visible", rng, (2, 7), 3, dtype=np.float32, spread=300.0, label="large, float32"),
        _online("online_softmax_hidden", rng, (4, 3, 13), 5, holes=True, label="-inf entries"),
        _online("online_softmax_hidden", rng, (2, 33), 8, spread=1e4, label="extreme"),
        _online("online_softmax_hidden", rng, (5, 1), 2, dtype=np.float32, label="one column"),
        _online("online_softmax_hidden", rng, (3, 11), 4, empty_rows=True,
                label="a row all -inf, and a row whose first block is all -inf"),
        _online("online_softmax_hidden", rng, (2, 3, 17), 5, dtype=np.float16, label="float16"),
        _forward("flash_forward_visible", rng, (2,), 17, 17, 8, 8, False, 8, label="unaligned n", threads=1),
        _forward("flash_forward_visible", rng, (1, 2), 12, 12, 4, 6, True, 5, label="causal", threads=2),
        _forward("flash_forward_hidden", rng, (3,), 5, 19, 8, 3, True, 4, label="causal, n_q < n_k", threads=1),
        _forward("flash_forward_hidden", rng, (2,), 9, 4, 4, 4, True, 3, label="causal, n_q > n_k", threads=2),
        _forward("flash_forward_hidden", rng, (2, 2), 21, 30, 8, 5, True, 6,
                 label="causal, one call on the whole batch", threads=1),
        _forward("flash_forward_hidden", rng, (2,), 11, 5, 4, 4, True, 4,
                 label="causal, n_q > n_k, one call on the whole batch", threads=1),
        _forward("flash_forward_hidden", rng, (2,), 11, 23, 16, 8, False, 7, dtype=np.float16, label="float16"),
        _forward("flash_forward_hidden", rng, (), 13, 6, 8, 5, False, 4, spread=20.0, label="extreme scores"),
        _forward("flash_forward_hidden", rng, (2,), 14, 9, 4, 6, False, 5, scale=0.7, label="custom scale"),
        _forward("flash_forward_hidden", rng, (3,), 19, 26, 8, 8, True, 8, dtype=np.float32,
                 label="causal, float32", threads=1),
        _never_the_whole_matrix("flash_forward_visible", rng, 1024, 32, 64, 128),
        _backward("flash_backward_visible", rng, (2,), 9, 9, 4, 4, False, 4, label="gradients"),
        _backward("flash_backward_hidden", rng, (2,), 7, 13, 8, 3, True, 5, label="causal gradients"),
        _backward("flash_backward_hidden", rng, (), 6, 6, 4, 4, True, 4, label="square causal"),
        _backward("flash_backward_hidden", rng, (2,), 11, 6, 4, 5, True, 4, label="causal, n_q > n_k"),
        _backward("flash_backward_hidden", rng, (2,), 8, 10, 4, 4, True, 3, dtype=np.float32,
                  label="causal gradients, float32"),
        _forward("flash_triton_visible", rng, (1,), 16, 16, 16, 16, False, 0, dtype=np.float32,
                 target="flash_attention_triton", label="interpreter, small"),
        _forward("flash_triton_hidden", rng, (2,), 20, 33, 16, 16, True, 0, dtype=np.float32,
                 target="flash_attention_triton", label="causal, unaligned"),
        _forward("flash_triton_hidden", rng, (1,), 24, 24, 16, 16, False, 0, dtype=np.float16,
                 target="flash_attention_triton", label="float16"),
        _forward("flash_triton_hidden", rng, (2,), 37, 70, 16, 16, False, 0, dtype=np.float32,
                 target="flash_attention_triton", label="three blocks of keys, the last one short"),
        _forward("flash_triton_hidden", rng, (1,), 45, 18, 16, 16, True, 0, dtype=np.float32,
                 target="flash_attention_triton", label="causal, n_q > n_k"),
        _forward("flash_triton_hidden", rng, (2,), 21, 29, 24, 24, True, 0, dtype=np.float32,
                 target="flash_attention_triton", label="head dimension 24"),
    ]
    return found
