"""The repeated-random-tokens test of induction (Olsson et al., 2022, as ARENA's course runs it), for
any model that returns its attention weights like ``attnlab.stacks.DecoderOnly``
(``model(tokens, return_weights=True) -> (logits (b, n, vocab), [weights (b, H, n, n) per layer])``).

Sequences of 2T words whose second half repeats the first: word i of the second half is word
i - T of the first, so the word after it is written one place after that earlier copy. A model
that copies (with an induction head) predicts the second half far better than the first.

- ``repeated_random_tokens(n_sequences, half, generator)``: ARENA's sequences, T random words
  twice. The course model, trained on a small grammar, was never shown such a thing;
- ``random_lists(n_sequences, n_items, generator)``: the same test in the course corpus's own
  words: a person writes a list of random items, then reads it back ("anna ross wrote a list :
  kite pie saw . anna ross read the list : kite pie saw ."), two halves of n_items + 7 words that
  differ only in "wrote a" and "read the";
- ``repeated_loss(model, tokens)``: the mean next-word loss on each half (``HalfLosses``);
- ``induction_scores(model, tokens)``: (n_layers, n_heads), each head's mean weight, from every
  query of the second half, on the word right after the earlier copy of the query's word;
- ``previous_token_scores(model, tokens)``: (n_layers, n_heads), the mean weight on the word just
  before the query;
- ``copied(model, tokens)``: the share of the items read back that the model predicts right;
- ``ablated(model, heads)``: a copy of the model with some heads knocked out.

These are the course's reference of exercise 7 of lesson 04 and what ``attnlab.zoo.phase``
records while the course model trains.
"""

from __future__ import annotations

import copy
from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnlab import corpus

__all__ = ["HalfLosses", "LIST_FRAME", "WORDS", "ablated", "attention_weights", "copied", "induction_scores",
           "previous_token_scores", "random_lists", "repeated_loss", "repeated_random_tokens"]

# The words random sequences are drawn from: the whole vocabulary but <pad>, <unk> and <eos>.
WORDS = torch.tensor([i for i, word in enumerate(corpus.VOCAB) if word not in corpus.SPECIALS])


class HalfLosses(NamedTuple):
    """Mean next-word cross-entropy (nats) on the first and on the second half of repeated sequences."""

    first: float
    second: float


# The words around a list in the corpus: "<first name> <surname> wrote a list : <items> ." and
# "<first name> <surname> read the list : <items> ." (attnlab.corpus.passage).
LIST_FRAME = (("wrote", "a", "list", ":"), ("read", "the", "list", ":"))
_ITEMS = torch.tensor(corpus.TOKENIZER.encode(list(corpus.LIST_ITEMS)))
_FIRST = torch.tensor(corpus.TOKENIZER.encode(list(corpus.FIRST_NAMES)))
_SURNAMES = torch.tensor(corpus.TOKENIZER.encode(list(corpus.SURNAMES)))
_STOP = corpus.TOKENIZER.ids["."]


def repeated_random_tokens(n_sequences: int, half: int, generator: torch.Generator) -> torch.Tensor:
    """(n_sequences, 2 * half) word ids: ``half`` words drawn uniformly (with replacement) from
    ``WORDS``, then the same ``half`` words again, in the same order."""
    if n_sequences < 1 or half < 2:
        raise ValueError(f"need at least one sequence of at least 2 words, got {n_sequences} of {half}")
    drawn = torch.randint(len(WORDS), (n_sequences, half), generator=generator)
    return WORDS[drawn].repeat(1, 2)  # (n_sequences, 2 * half): the draw, then the draw again


def random_lists(n_sequences: int, n_items: int, generator: torch.Generator) -> torch.Tensor:
    """(n_sequences, 2 * (n_items + 7)) word ids: in each sequence one person (a random first name
    and surname) writes a list of ``n_items`` different random items and reads it back, as the
    corpus's passages do: "<name> <surname> wrote a list : <items> . <name> <surname> read the list
    : <items> .". Word i of the second half is word i - T of the first (T = n_items + 7) except
    "read the" for "wrote a"."""
    if not 1 <= n_items <= len(_ITEMS):
        raise ValueError(f"n_items must be in 1..{len(_ITEMS)}, got {n_items}")
    written, read = (torch.tensor(corpus.TOKENIZER.encode(list(words))) for words in LIST_FRAME)
    rows = []
    for _ in range(n_sequences):
        person = torch.stack([_FIRST[torch.randint(len(_FIRST), (), generator=generator)],
                              _SURNAMES[torch.randint(len(_SURNAMES), (), generator=generator)]])
        items = _ITEMS[torch.randperm(len(_ITEMS), generator=generator)[:n_items]]
        stop = torch.tensor([_STOP])
        rows.append(torch.cat([person, written, items, stop, person, read, items, stop]))
    return torch.stack(rows)


@torch.no_grad()
def attention_weights(model: nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (b, n, vocab), weights (b, n_layers, n_heads, n, n)) of ``model`` on ``tokens`` (b, n)."""
    model.eval()
    logits, weights = model(tokens, return_weights=True)
    return logits, torch.stack(list(weights), dim=1)


def _halves(tokens: torch.Tensor) -> int:
    n = tokens.shape[-1]
    if tokens.dim() != 2 or n % 2 or n < 4:
        raise ValueError(f"tokens must be (b, 2T) sequences of two halves, got shape {tuple(tokens.shape)}")
    return n // 2


@torch.no_grad()
def repeated_loss(model: nn.Module, tokens: torch.Tensor, logits: torch.Tensor | None = None) -> HalfLosses:
    """Mean next-word loss (nats) on each half of ``tokens`` (b, 2T), sequences whose second half
    repeats the first (``repeated_random_tokens``, ``random_lists``). The logits at position i predict word i + 1: the first half is scored on
    words 1 .. T-1 (positions 0 .. T-2), the second on words T+1 .. 2T-1 (positions T .. 2T-2), the
    same number of words each. Word T, the start of the repeat, is left out of both: nothing before
    it says the sequence starts again. logits: the model's (b, 2T, vocab), if already computed."""
    T = _halves(tokens)
    if logits is None:
        model.eval()
        logits = model(tokens)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (b, 2T - 1)
    return HalfLosses(float(losses[:, :T - 1].mean()), float(losses[:, T:].mean()))


def induction_scores(model: nn.Module, tokens: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """(n_layers, n_heads): each head's attention weight from query i of the second half
    (T <= i < 2T) on key i - T + 1, the word right after the earlier copy of word i, averaged over
    the queries and the sequences (Olsson et al.'s and ARENA's induction score). tokens: (b, 2T),
    second half repeating the first; weights: the
    model's (b, n_layers, n_heads, 2T, 2T), if already computed."""
    T = _halves(tokens)
    if weights is None:
        weights = attention_weights(model, tokens)[1]
    # query T + i (second half) attending to key i + 1 (the token after its earlier copy): the
    # diagonal of the block of rows T..2T-1 and columns 1..T
    return torch.diagonal(weights[..., T:2 * T, 1:T + 1], dim1=-2, dim2=-1).mean(dim=(0, -1))


def previous_token_scores(model: nn.Module, tokens: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """(n_layers, n_heads): each head's attention weight from query i on key i - 1, averaged over
    every query but the first and over the sequences. tokens: (b, n); weights as ``induction_scores``."""
    if weights is None:
        weights = attention_weights(model, tokens)[1]
    queries = torch.arange(1, tokens.shape[-1])
    return weights[..., queries, queries - 1].mean(dim=(0, -1))


@torch.no_grad()
def copied(model: nn.Module, lists: torch.Tensor, n_items: int, logits: torch.Tensor | None = None) -> float:
    """The share of the items read back in ``lists`` (``random_lists(..., n_items, ...)``) that the
    model predicts right (its most likely next word, at ":" and at every item but the last)."""
    T = _halves(lists)
    if logits is None:
        model.eval()
        logits = model(lists)
    where = torch.arange(T + 5, T + 5 + n_items)          # ":" of the read list, and the items but the last
    return float((logits[:, where].argmax(-1) == lists[:, where + 1]).double().mean())


def ablated(model: nn.Module, heads: Sequence[tuple[int, int]]) -> nn.Module:
    """A copy of ``model`` (a ``DecoderOnly``) with each (layer, head) of ``heads`` knocked out: its
    query weights zeroed, so that it spreads its attention evenly over the words it may see, and its
    columns of the output projection zeroed, so that what it reads never reaches the residual
    stream. ``model`` itself is not changed."""
    knocked = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in heads:
            attention = knocked.blocks[layer].self_attn
            h = attention.head_dim
            attention.q_proj.weight[head * h:(head + 1) * h] = 0
            if attention.q_proj.bias is not None:
                attention.q_proj.bias[head * h:(head + 1) * h] = 0
            attention.o_proj.weight[:, head * h:(head + 1) * h] = 0
    return knocked.eval()
