"""The "who came last?" task of lesson 05: train short, test long.

A sequence is a stream of words, some of them parties ("customer", "store", ... as in
``who_paid``), the others filler words ("then", "and", "so", "also"), ending with "?". The answer is
the party mentioned last. The rule is the same at every length, so a model that learned it on
streams of 8 to 16 words should also answer on streams of 128; whether it does depends on how it
sees positions. That is *length extrapolation* (Press et al., 2022).

``LengthModel`` is a one-block causal transformer that reads the answer off the final "?" token.
``kind`` chooses its positions:

- "learned": a trained table of absolute position vectors added to the embeddings (GPT-2, BERT);
- "sinusoidal": ``attnlab.positions.sinusoidal_encoding`` added to the embeddings (yours);
- "rope": queries and keys rotated by ``attnlab.positions.apply_rope`` (yours);
- "alibi": ALiBi (Press et al., 2022), ``-slope * distance`` added to each head's scores, one fixed
  slope per head (``alibi_slopes``), no parameters;
- "bias": any bias of the distance, ``bias_fn(distance)``, added to every head's scores (the
  lesson's design exercise).

The attention adds the biases to the scores before the softmax (lesson 04's ``MultiHeadAttention``
takes boolean masks only). With one block and the answer read off the last token, only the last
token's row of attention reaches the answer, so only that row is computed: the same numbers as a
full causal layer, and quick to train. Everything is drawn from seeded generators, so one seed gives
one model.
"""

from __future__ import annotations

import importlib
from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from attnlab.tasks.who_paid import PARTIES
from attnlab.train import seeded, train

__all__ = ["FILLERS", "KINDS", "PARTIES", "TRAIN_LENGTHS", "VOCAB", "LengthModel", "accuracies", "accuracy",
           "alibi_slopes", "bias_values", "decode", "far_weight", "loss", "make_batch", "test_set",
           "train_length_model"]

FILLERS = ("then", "and", "so", "also")
VOCAB = ("?", *FILLERS, *PARTIES)
QUESTION, FIRST_FILLER, FIRST_PARTY = 0, 1, 1 + len(FILLERS)
KINDS = ("learned", "sinusoidal", "rope", "alibi", "bias")
TRAIN_LENGTHS = (8, 16)      # training streams have 8 to 16 tokens, "?" included
PARTY_RATE = 0.2             # the chance that a word of the stream is a party


def decode(tokens) -> str:
    return " ".join(VOCAB[int(t)] for t in tokens)


def make_batch(batch_size: int, length: int, generator: torch.Generator | None = None):
    """``batch_size`` streams of ``length`` tokens, the last one "?", with at least one party.

    Returns tokens (batch, length) int64 and answers (batch,) int64: the index in ``VOCAB`` of the
    last party before "?".
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if length < 2:
        raise ValueError(f"length must be at least 2 (a party and the '?'), got {length}")
    words = length - 1
    is_party = torch.rand(batch_size, words, generator=generator) < PARTY_RATE
    is_party[torch.arange(batch_size), torch.randint(words, (batch_size,), generator=generator)] = True
    parties = FIRST_PARTY + torch.randint(len(PARTIES), (batch_size, words), generator=generator)
    fillers = FIRST_FILLER + torch.randint(len(FILLERS), (batch_size, words), generator=generator)
    stream = torch.where(is_party, parties, fillers)
    last = (torch.arange(words) * is_party).argmax(dim=1)          # the last True of each row
    answers = stream[torch.arange(batch_size), last]
    tokens = torch.cat([stream, torch.full((batch_size, 1), QUESTION)], dim=1)
    return tokens, answers


def test_set(length: int, size: int = 512, seed: int = 1000):
    """A fixed evaluation set of ``size`` streams of ``length`` tokens: the same for every model."""
    return make_batch(size, length, torch.Generator().manual_seed(seed + length))


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's fixed slopes, a geometric sequence 2^(-8/H), 2^(-16/H), ..., 2^(-8) (Press et al.,
    2022, section 3): (n_heads,) float32."""
    return torch.tensor([2.0 ** (-8.0 * (head + 1) / n_heads) for head in range(n_heads)])


def bias_values(bias_fn: Callable, n: int) -> torch.Tensor:
    """(n,) float32: ``bias_fn`` at the distances 0, 1, ..., n - 1, with a clear error when it
    returns something unusable."""
    distance = torch.arange(n)
    value = bias_fn(distance)
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value)
    if value.shape != distance.shape:
        raise ValueError(f"the bias function must return one number per distance, a tensor of the shape it "
                         f"was given {tuple(distance.shape)}, got shape {tuple(value.shape)}")
    value = value.float()
    if torch.isnan(value).any() or (value == float("inf")).any():
        raise ValueError("the bias function returned nan or +inf; return finite numbers (or -inf to forbid "
                         "a distance)")
    if not torch.isfinite(value[0]):
        raise ValueError("the bias at distance 0 must be finite: a token may always see itself, and a query "
                         "that may see nothing has no attention weights")
    return value


class _LastQueryAttention(nn.Module):
    """Causal multi-head attention of the last token only: with one block and a read-out of the
    last token, no other row of the attention matrix reaches the answer, so only it is computed
    (the same numbers as the full causal layer's last row, n times cheaper)."""

    def __init__(self, d_model: int, n_heads: int, kind: str, bias_fn: Callable | None):
        super().__init__()
        self.n_heads, self.head_dim, self.kind, self.bias_fn = n_heads, d_model // n_heads, kind, bias_fn
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key_value = nn.Linear(d_model, 2 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (b, n, d) -> the last token's output (b, d) and its attention weights (b, H, n)."""
        b, n, d = x.shape
        q = self.query(x[:, -1:]).view(b, 1, self.n_heads, self.head_dim).transpose(1, 2)         # (b, H, 1, h)
        k, v = self.key_value(x).view(b, n, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, H, n, h)
        if self.kind == "rope":
            rotary = importlib.import_module("attnlab.positions")  # yours, or the reference if borrowed
            q, k = rotary.apply_rope(q, torch.tensor([n - 1])), rotary.apply_rope(k, torch.arange(n))
        scores = (q @ k.transpose(-2, -1)).squeeze(-2) / self.head_dim ** 0.5                     # (b, H, n)
        back = torch.arange(n - 1, -1, -1)                          # how far back each key lies
        if self.kind == "alibi":
            scores = scores - self.slopes[:, None] * back
        elif self.kind == "bias":
            scores = scores + bias_values(self.bias_fn, n).flip(0)
        weights = torch.softmax(scores, dim=-1)
        mixed = (weights[..., None, :] @ v).reshape(b, d)                                          # (b, H*h)
        return self.out(mixed), weights


class LengthModel(nn.Module):
    """Embeddings (plus absolute positions for "learned" and "sinusoidal"), one pre-norm causal
    block (attention, then a feed-forward layer), a read-out of the last token ("?").

    forward(tokens (b, n)) -> logits (b, len(VOCAB)); with ``return_weights`` also the "?" token's
    attention weights (b, n_heads, n). ``max_len``: rows of the "learned" table, the longest input it
    can take. ``bias_fn``: for kind "bias", distances (int64) -> a float tensor of their shape,
    added to every head's scores.
    """

    def __init__(self, kind: str, d_model: int = 32, n_heads: int = 4, max_len: int = 128,
                 bias_fn: Callable | None = None):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if (kind == "bias") != (bias_fn is not None):
            raise ValueError("give bias_fn exactly when kind is 'bias'")
        self.kind, self.max_len = kind, max_len
        self.embed = nn.Embedding(len(VOCAB), d_model)
        if kind == "learned":
            self.position = nn.Embedding(max_len, d_model)   # row p: the vector of position p
        self.attn_norm = nn.LayerNorm(d_model)
        self.attn = _LastQueryAttention(d_model, n_heads, kind, bias_fn)
        self.mlp_norm = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.final_norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(VOCAB))

    def forward(self, tokens: torch.Tensor, return_weights: bool = False):
        n = tokens.shape[1]
        x = self.embed(tokens)
        if self.kind == "learned":
            if n > self.max_len:
                raise ValueError(f"this model's table of learned positions has {self.max_len} rows: it has no "
                                 f"vector for position {self.max_len} or later, and the input has {n} tokens")
            x = x + self.position.weight[:n]
        elif self.kind == "sinusoidal":
            x = x + importlib.import_module("attnlab.positions").sinusoidal_encoding(n, x.shape[-1])
        mixed, weights = self.attn(self.attn_norm(x))
        last = x[:, -1] + mixed
        last = last + self.mlp(self.mlp_norm(last))
        logits = self.readout(self.final_norm(last))
        if return_weights:
            return logits, weights
        return logits


def loss(model: LengthModel, batch) -> torch.Tensor:
    tokens, answers = batch
    return F.cross_entropy(model(tokens), answers)


@torch.no_grad()
def accuracy(model: LengthModel, length: int, size: int = 512) -> float:
    """Fraction of the fixed test streams of ``length`` tokens whose last party the model names."""
    tokens, answers = test_set(length, size)
    model.eval()
    return (model(tokens).argmax(-1) == answers).float().mean().item()


def train_length_model(kind: str, seed: int, *, steps: int = 150, batch_size: int = 64,
                       bias_fn: Callable | None = None, progress: bool = True) -> tuple[LengthModel, list[float]]:
    """Build (seeded) and train a ``LengthModel`` on streams of ``TRAIN_LENGTHS`` tokens, a length
    drawn per step; returns the model and its losses."""
    low, high = TRAIN_LENGTHS

    def batch(generator):
        length = int(torch.randint(low, high + 1, (1,), generator=generator))
        return make_batch(batch_size, length, generator)

    with seeded(seed):
        model = LengthModel(kind, bias_fn=bias_fn)
    losses = train(model, batch, loss, steps=steps, seed=seed, desc=f"{kind}, seed {seed}", progress=progress)
    return model, losses


def accuracies(model: LengthModel, lengths: Sequence[int]) -> list[float]:
    """``accuracy`` at each length."""
    return [accuracy(model, n) for n in lengths]


@torch.no_grad()
def far_weight(model: LengthModel, length: int, beyond: int = TRAIN_LENGTHS[1]) -> list[float]:
    """Per head, the share of the "?" token's attention (mean over the test streams) on keys at
    least ``beyond`` tokens back: distances no training stream had. A list of n_heads floats."""
    tokens, _ = test_set(length)
    model.eval()
    _, weights = model(tokens, return_weights=True)           # (b, H, n)
    far = torch.arange(length - 1, -1, -1) >= beyond           # keys that far back from the "?"
    return weights[..., far].sum(-1).mean(0).tolist()
