"""The watcher of forbidden shortcuts sees them wherever the exercise's work runs: in the thread that
entered it, and in the worker threads it was carried into (lesson 09's forward grid uses them)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from attnlab.shortcuts import ForbiddenCalls, carried, forbidden


def _softmax_in_a_worker(wrap) -> list[str]:
    with ForbiddenCalls(forbidden("attention.softmax")) as watch:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(wrap(lambda x: torch.softmax(x, dim=-1)), [torch.randn(3)] * 4))
    return watch.seen


def test_a_call_in_a_worker_thread_is_unseen_unless_carried():
    assert _softmax_in_a_worker(lambda fn: fn) == []  # why carried exists: PyTorch's modes are per thread
    assert "_softmax" in _softmax_in_a_worker(carried)


def test_carried_outside_a_watcher_is_the_function_itself():
    def fn():
        return 1
    assert carried(fn) is fn


def test_the_forward_grid_carries_the_watcher(monkeypatch):
    """lesson 09: flash_forward on two threads that calls F.scaled_dot_product_attention is seen."""
    from attnlab import flash

    def fused(q, k, v, causal, scale, block_q, block_k):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=causal)
        return out, torch.zeros(q.shape[:-1], dtype=q.dtype)

    monkeypatch.setattr(flash, "flash_forward", fused)
    q = torch.randn(2, 8, 4)
    with ForbiddenCalls(forbidden("flash.flash_attention_torch")) as watch:
        flash.forward_grid(q, q, q, False, 0.5, 2, 2, threads=2)
    assert "scaled_dot_product_attention" in watch.seen
