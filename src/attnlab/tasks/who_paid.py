"""The "who paid?" task of lesson 05: a question only word order can answer.

Every sentence is ``the X VERB the Y ?`` with two different parties X and Y ("customer",
"store", ...) and a verb that says who pays: with "paid", "tipped", "reimbursed" or "refunded" the
subject X pays; with "charged", "billed", "fined" or "invoiced" the object Y does. The answer is
the payer's word. "the customer charged the store ?" and "the store charged the customer ?" hold
the same six tokens in a different order and have different answers, so a model that cannot see
order can get at most one of each such pair right: at most half of a balanced set.

``WhoPaidModel`` is a small transformer encoder (no causal mask) that reads the answer off the
final "?" token. ``positions`` chooses how it learns word order: "none", "sinusoidal" (encodings
added to the embeddings once) or "rope" (queries and keys rotated in every layer, through lesson
04's ``MultiHeadAttention(rope_base=...)``). Everything else, parameters included, is identical,
so the three compare fairly. The attention layers are ``attnlab.multihead`` and the positions
``attnlab.positions``: your own code, unless you borrowed the references.
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["PARTIES", "PAYER_VERBS", "PAYEE_VERBS", "VOCAB", "WhoPaidBatch", "WhoPaidModel", "accuracy",
           "all_sentences", "decode", "encode", "loss", "make_batch"]

PARTIES = ("customer", "store", "tenant", "landlord", "client", "lawyer", "patient", "doctor",
           "student", "school", "guest", "hotel")
PAYER_VERBS = ("paid", "tipped", "reimbursed", "refunded")   # the subject pays
PAYEE_VERBS = ("charged", "billed", "fined", "invoiced")     # the object pays
VOCAB = ("the", "?", *PARTIES, *PAYER_VERBS, *PAYEE_VERBS)
INDEX = {word: i for i, word in enumerate(VOCAB)}
LENGTH = 6  # the X VERB the Y ?
POSITION_KINDS = ("none", "sinusoidal", "rope")


@dataclass
class WhoPaidBatch:
    """tokens (batch, 6) int64 indices into ``VOCAB``; answers (batch,) the payer's index."""

    tokens: torch.Tensor
    answers: torch.Tensor


def encode(sentence: str) -> torch.Tensor:
    """Token indices (6,) of a sentence such as "the customer charged the store ?"."""
    words = sentence.split()
    unknown = [w for w in words if w not in INDEX]
    if unknown:
        raise ValueError(f"unknown words {unknown}; the vocabulary is {VOCAB}")
    return torch.tensor([INDEX[w] for w in words])


def decode(tokens) -> str:
    return " ".join(VOCAB[int(t)] for t in tokens)


def _batch(subjects, verbs, objects) -> WhoPaidBatch:
    subjects, verbs, objects = (torch.as_tensor(t, dtype=torch.long) for t in (subjects, verbs, objects))
    n = subjects.shape[0]
    the, question = torch.full((n,), INDEX["the"]), torch.full((n,), INDEX["?"])
    tokens = torch.stack([the, subjects, verbs, the, objects, question], dim=1)
    subject_pays = verbs < INDEX[PAYEE_VERBS[0]]  # payer verbs come first in VOCAB
    return WhoPaidBatch(tokens, torch.where(subject_pays, subjects, objects))


def make_batch(batch_size: int, generator: torch.Generator | None = None) -> WhoPaidBatch:
    """``batch_size`` random sentences: two different parties, a random verb."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    first = INDEX[PARTIES[0]]
    subjects = torch.randint(len(PARTIES), (batch_size,), generator=generator)
    shift = torch.randint(1, len(PARTIES), (batch_size,), generator=generator)  # never the subject
    objects = (subjects + shift) % len(PARTIES)
    verbs = torch.randint(len(PAYER_VERBS) + len(PAYEE_VERBS), (batch_size,), generator=generator)
    return _batch(subjects + first, verbs + INDEX[PAYER_VERBS[0]], objects + first)


def all_sentences() -> WhoPaidBatch:
    """Every sentence of the task once (12 · 11 parties · 8 verbs = 1056): balanced, since each
    sentence's mirror image (X and Y swapped) is in it with the other answer."""
    rows = [(INDEX[x], INDEX[v], INDEX[y]) for x, y in itertools.permutations(PARTIES, 2)
            for v in (*PAYER_VERBS, *PAYEE_VERBS)]
    subjects, verbs, objects = zip(*rows)
    return _batch(subjects, verbs, objects)


class _Block(nn.Module):
    """Pre-norm encoder block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, d_model: int, n_heads: int, rope_base: float | None):
        super().__init__()
        multihead = importlib.import_module("attnlab.multihead")  # yours, or the reference if borrowed
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = multihead.MultiHeadAttention(d_model, n_heads, rope_base=rope_base)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        mixed, weights = self.attn(self.attn_norm(x), return_weights=True)
        x = x + mixed
        x = x + self.mlp(self.mlp_norm(x))
        return (x, weights) if return_weights else x


class WhoPaidModel(nn.Module):
    """Embeddings, ``n_layers`` encoder blocks, a read-out of the last token ("?").

    positions: "none", "sinusoidal" (``attnlab.positions.sinusoidal_encoding`` added to the
    embeddings) or "rope" (``MultiHeadAttention(..., rope_base=rope_base)`` in every block).
    forward(tokens (b, 6)) -> logits (b, len(VOCAB)); ``attention(tokens)`` also returns each
    block's weights (b, n_heads, 6, 6).
    """

    def __init__(self, positions: str = "none", d_model: int = 32, n_heads: int = 4, n_layers: int = 2,
                 rope_base: float = 10000.0):
        super().__init__()
        if positions not in POSITION_KINDS:
            raise ValueError(f"positions must be one of {POSITION_KINDS}, got {positions!r}")
        self.positions = positions
        self.embed = nn.Embedding(len(VOCAB), d_model)
        rope = rope_base if positions == "rope" else None
        self.blocks = nn.ModuleList(_Block(d_model, n_heads, rope) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(VOCAB))
        if positions == "sinusoidal":  # fixed, not learned: a buffer, not a parameter
            encoding = importlib.import_module("attnlab.positions").sinusoidal_encoding(LENGTH, d_model)
            self.register_buffer("encoding", encoding, persistent=False)

    def attention(self, tokens: torch.Tensor):
        x = self.embed(tokens)
        if self.positions == "sinusoidal":
            x = x + self.encoding[: tokens.shape[1]]
        weights = []  # one (batch, heads, n, n) tensor per block
        for layer in self.blocks:
            x, w = layer(x, return_weights=True)
            weights.append(w)
        return self.readout(self.final_norm(x[:, -1])), weights

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.attention(tokens)[0]


def loss(model: WhoPaidModel, batch: WhoPaidBatch) -> torch.Tensor:
    """Cross-entropy of the payer's word."""
    return F.cross_entropy(model(batch.tokens), batch.answers)


@torch.no_grad()
def accuracy(model: WhoPaidModel, batch: WhoPaidBatch | None = None) -> float:
    """Fraction of sentences whose payer the model names (every sentence of the task by default)."""
    batch = all_sentences() if batch is None else batch
    model.eval()
    return (model(batch.tokens).argmax(-1) == batch.answers).float().mean().item()
