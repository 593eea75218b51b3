"""The two-facts task of lesson 04: every position must report two tokens from two earlier places.

A sequence of random symbols; at position i the answer is the pair (token at i - offsets[0],
token at i - offsets[1]), by default the tokens 1 and 3 places back. Both facts sit at different
positions, so an attention head that fetches both at once must split its weights between them,
and what it returns is a blend of the two (Vaswani et al., 2017, section 3.2.2: "with a single
attention head, averaging inhibits this"). With two heads, each fetches one fact. One head is not
hopeless: if its two weights differ, or change with the tokens, the blend still tells which token
sat where, and a read-out can learn to decode it; lesson 04 measures how much longer that takes
(``train_with_curve``).

``TwoFactsModel`` is the smallest model that can show it: embeddings (token plus learned position),
one causal ``attnlab.multihead.MultiHeadAttention`` layer (yours, unless you borrowed the
reference) with a residual connection, and a linear read-out of both facts. Its parameter count
does not depend on the number of heads, so 1, 2 or 4 heads compare fairly.
"""

from __future__ import annotations

import copy
import importlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from attnlab.train import train

__all__ = ["TwoFactsBatch", "TwoFactsModel", "accuracy", "loss", "make_batch", "train_with_curve"]

IGNORE = -100  # target of the first positions, which have no fact that far back


@dataclass
class TwoFactsBatch:
    """tokens (batch, n) int64; targets (batch, n, 2) int64, ``IGNORE`` where position i has no
    token ``offsets[j]`` places back; offsets: how far back each fact is."""

    tokens: torch.Tensor
    targets: torch.Tensor
    offsets: tuple[int, int]


def make_batch(batch_size: int, length: int = 16, vocab: int = 16, offsets: tuple[int, int] = (1, 3),
               generator: torch.Generator | None = None) -> TwoFactsBatch:
    """A batch of random sequences of ``length`` symbols out of ``vocab``, with both facts as targets."""
    if len(offsets) != 2 or min(offsets) < 1 or offsets[0] == offsets[1] or max(offsets) >= length:
        raise ValueError(f"offsets must be two different distances between 1 and length - 1 = {length - 1}, "
                         f"got {offsets}")
    if batch_size < 1 or vocab < 2:
        raise ValueError(f"need batch_size >= 1 and vocab >= 2, got {batch_size} and {vocab}")
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)
    targets = torch.full((batch_size, length, 2), IGNORE, dtype=torch.long)
    for j, offset in enumerate(offsets):
        targets[:, offset:, j] = tokens[:, :-offset]
    return TwoFactsBatch(tokens, targets, tuple(offsets))


class TwoFactsModel(nn.Module):
    """Embeddings, one causal attention layer with ``n_heads`` heads and a residual, a read-out.

    forward(tokens (b, n)) -> logits (b, n, 2, vocab): scores for the first and the second fact.
    ``attend(tokens)`` also returns the attention weights (b, n_heads, n, n) and the attention
    layer's output before the residual (b, n, d_model).
    """

    def __init__(self, vocab: int = 16, length: int = 16, d_model: int = 32, n_heads: int = 1):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(length, d_model)
        # Looked up now, not at import: the learner's class, or the reference if borrowed since.
        multihead = importlib.import_module("attnlab.multihead")
        self.attn = multihead.MultiHeadAttention(d_model, n_heads)
        self.readout = nn.Linear(d_model, 2 * vocab)

    def attend(self, tokens: torch.Tensor):
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        mixed, weights = self.attn(x, causal=True, return_weights=True)
        logits = self.readout(x + mixed).unflatten(-1, (2, self.vocab))
        return logits, weights, mixed

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.attend(tokens)[0]


def loss(model: TwoFactsModel, batch: TwoFactsBatch) -> torch.Tensor:
    """Mean cross-entropy over both facts of every position that has them."""
    logits = model(batch.tokens)
    return F.cross_entropy(logits.reshape(-1, model.vocab), batch.targets.reshape(-1), ignore_index=IGNORE)


@torch.no_grad()
def accuracy(model: TwoFactsModel, batch: TwoFactsBatch) -> dict[str, float]:
    """Fractions right over the positions that have both facts: "first", "second" and "both"."""
    start = max(batch.offsets)
    predicted = model(batch.tokens).argmax(-1)[:, start:]
    right = predicted == batch.targets[:, start:]
    return {"first": right[..., 0].float().mean().item(), "second": right[..., 1].float().mean().item(),
            "both": right.all(-1).float().mean().item()}


def train_with_curve(model: TwoFactsModel, steps: int, held_out: TwoFactsBatch, *, every: int = 50,
                     batch_size: int = 64, lr: float = 3e-3, seed: int = 0, keep_at: tuple[int, ...] = (),
                     desc: str = "training") -> tuple[list[tuple[int, dict[str, float]]], dict[int, TwoFactsModel]]:
    """Train ``model`` in place (``attnlab.train.train``: Adam, fresh batches seeded by ``seed``) and
    measure its accuracy on ``held_out`` every ``every`` steps.

    Returns (curve, kept): curve, a list of (steps done, ``accuracy(model, held_out)``) from 0 to
    ``steps``; kept, a copy of the model after each number of steps in ``keep_at``.
    """
    if every < 1 or steps < 1:
        raise ValueError(f"steps and every must be at least 1, got {steps} and {every}")
    curve: list[tuple[int, dict[str, float]]] = []
    kept: dict[int, TwoFactsModel] = {}
    done = 0

    # train() calls the loss once per step, before that step's update: the model has then had
    # `done` updates, which is when to measure it (the held-out batch is never trained on).
    def measured_loss(model: TwoFactsModel, batch: TwoFactsBatch) -> torch.Tensor:
        nonlocal done
        if done % every == 0:
            curve.append((done, accuracy(model, held_out)))
        if done in keep_at:
            kept[done] = copy.deepcopy(model)
        done += 1
        return loss(model, batch)

    length, vocab = model.position.num_embeddings, model.vocab
    train(model, lambda g: make_batch(batch_size, length, vocab, held_out.offsets, generator=g), measured_loss,
          steps=steps, lr=lr, seed=seed, desc=desc)
    curve.append((steps, accuracy(model, held_out)))  # the loop measured up to steps - 1
    if steps in keep_at:
        kept[steps] = copy.deepcopy(model)
    return curve, kept
