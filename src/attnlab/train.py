"""A small, seeded training loop with a progress bar, for the course's little models.

``train(model, make_batch, loss_fn, steps=...)`` runs Adam for a fixed number of steps (not for a
fixed time, so a slow machine gets the same model, only later), clips the gradient norm, shows a
tqdm progress bar with the running loss, and returns the loss of every step.

Reproducible: batches come from a ``torch.Generator`` seeded with ``seed``, and the loop runs on a
fixed number of CPU threads (``threads``, 1 by default). For models this small one thread is as
fast as several, and on a busy machine it is much faster; a fixed thread count also keeps the sums
in the same order, so the same seed gives the same model. Build the model under ``seeded(...)`` to
fix its initial weights.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import torch
from torch import nn
from tqdm.auto import tqdm

__all__ = ["train", "seeded", "torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block on ``n`` CPU threads (None: leave torch's setting), then restore it."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed torch's global generator for the block (e.g. to build a model), then restore its state.

    The weights a model gets at construction come from the global generator; this fixes them
    without disturbing anything random that runs after the block.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def train(
    model: nn.Module,
    make_batch: Callable[[torch.Generator], Any],
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    *,
    steps: int,
    lr: float = 3e-3,
    clip: float | None = 1.0,
    seed: int = 0,
    threads: int | None = 1,
    desc: str = "training",
    progress: bool = True,
) -> list[float]:
    """Train ``model`` in place for ``steps`` Adam steps; returns the loss of each step.

    make_batch(generator): a fresh training batch, drawn from ``generator`` (seeded with ``seed``).
    loss_fn(model, batch): a scalar loss tensor to minimise.
    clip: largest gradient norm (None: no clipping). threads: CPU threads while training.
    desc: the progress bar's label. progress: False hides the bar (tests).
    Raises FloatingPointError, naming the step, if the loss becomes nan or inf.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    parameters = [p for p in model.parameters() if p.requires_grad]
    if not parameters:
        raise ValueError("the model has no trainable parameters")
    optimizer = torch.optim.Adam(parameters, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    model.train()
    with torch_threads(threads), tqdm(total=steps, desc=desc, disable=not progress,
                                      mininterval=0.5) as bar:
        for step in range(steps):
            loss = loss_fn(model, make_batch(generator))
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"{desc}: the loss became {value} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(parameters, clip)
            optimizer.step()
            losses.append(value)
            bar.update(1)
            if step % 25 == 0 or step == steps - 1:
                recent = losses[-25:]
                bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
    model.eval()
    return losses
