"""The pronoun sentences of lesson 07: "mia hale bought a green kite at the market . it was".

The word after "it was" describes the thing, and which words fit depends on its kind
(``attnlab.corpus.THINGS``: a toy is fun, loud or colorful; food fresh, tasty or sweet; ...). To
predict it, a model has to look back at the noun. The course corpus always puts the noun 6 words
before "was", so a head that finds the noun by *what it is* and a head that simply looks 6 words
back do the same on the corpus's own sentences. ``sentences(n, distance)`` writes them with the
noun 3, 6, 9 or 12 words before "was" (0 to 3 three-word phrases between the noun and the full
stop): the control that tells the two apart.

    from attnlab.tasks import pronoun
    found = pronoun.sentences(200, distance=9, seed=0)
    ids = pronoun.token_ids(found)                      # (200, 15), every sentence the same length
    with pronoun.head_masks(model, masks):              # masks (n_layers, n_heads): 0 switches a head off
        logits = model(ids)
    pronoun.count_fits(logits[:, -1], found)            # how many next words fit the noun's kind
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import nn

from attnlab import corpus

__all__ = ["DISTANCES", "NOUN", "PronounSentence", "count_fits", "head_masks", "sentences", "token_ids"]

NOUN = 5                      # the noun's position (counting from 0) in every sentence
DISTANCES = (3, 6, 9, 12)     # words from the noun to "was"; the corpus's own sentences have 6
# The phrases that stand between the noun and the full stop: the first is the corpus's own ("at the
# market"); each adds 3 words of distance.
_PHRASES = (("at", "the", "market"), ("near", "the", None), ("in", "the", None))
_TIMES = ("morning", "evening")


@dataclass(frozen=True)
class PronounSentence:
    """One sentence up to "it was": its words, the kind of its thing ("toy", ...), and where the
    noun and "was" stand (counting from 0)."""

    words: tuple[str, ...]
    kind: str

    @property
    def noun(self) -> int:
        return NOUN

    @property
    def was(self) -> int:
        return len(self.words) - 1

    @property
    def fitting(self) -> tuple[str, ...]:
        """The words that may follow "it was" for this kind of thing."""
        return corpus.THINGS[self.kind][1]


def sentences(n: int = 200, distance: int = 6, seed: int = 0) -> list[PronounSentence]:
    """``n`` sentences "<first> <last> bought a <colour> <noun> ... . it was" with the noun
    ``distance`` words before "was" (one of ``DISTANCES``), names, colours and things drawn from
    ``seed``. All have the same length, 9 + (distance - 3) words."""
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES} (words from the noun to 'was'), got {distance!r}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive number of sentences, got {n!r}")
    rng = random.Random(seed)
    found = []
    for _ in range(n):
        kind = rng.choice(sorted(corpus.THINGS))
        places = [p for p in corpus.PLACES if p != "market"]
        fill = {1: rng.choice(places), 2: rng.choice(_TIMES)}
        words = [rng.choice(corpus.FIRST_NAMES), rng.choice(corpus.SURNAMES), "bought", "a",
                 rng.choice(corpus.COLORS), rng.choice(corpus.THINGS[kind][0])]
        for index in range((distance - 3) // 3):
            words += [w if w is not None else fill[index] for w in _PHRASES[index]]
        found.append(PronounSentence(tuple(words + [".", "it", "was"]), kind))
    return found


def token_ids(found: Sequence[PronounSentence]) -> torch.Tensor:
    """(len(found), n) token ids of sentences of one length n (``sentences`` makes them so)."""
    lengths = {len(s.words) for s in found}
    if len(lengths) != 1:
        raise ValueError(f"the sentences must all have one length (one distance), got lengths {sorted(lengths)}")
    return torch.tensor([corpus.TOKENIZER.encode(list(s.words)) for s in found])


def count_fits(last_logits: torch.Tensor, found: Sequence[PronounSentence]) -> int:
    """How many sentences' most likely next word (``last_logits`` (n, vocab): the logits at "was")
    fits the kind of their thing."""
    if last_logits.dim() != 2 or last_logits.shape[0] != len(found):
        raise ValueError(f"last_logits must be (n_sentences, vocab) = ({len(found)}, vocab), "
                         f"got {tuple(last_logits.shape)} (take the logits at the last position: logits[:, -1])")
    best = last_logits.argmax(dim=-1).tolist()
    return sum(corpus.TOKENIZER.vocab[i] in s.fitting for i, s in zip(best, found))


@contextlib.contextmanager
def head_masks(model: nn.Module, masks: torch.Tensor) -> Iterator[None]:
    """While inside, every self-attention layer ``i`` of ``model`` (a ``DecoderOnly``) multiplies
    each head's output by ``masks[i]`` (``masks``: (n_layers, n_heads); 0 switches a head off),
    through lesson 04's ``head_mask`` argument."""
    blocks = list(model.blocks)
    n_heads = blocks[0].self_attn.n_heads
    if tuple(masks.shape) != (len(blocks), n_heads):
        raise ValueError(f"masks must have shape (n_layers, n_heads) = ({len(blocks)}, {n_heads}), "
                         f"got {tuple(masks.shape)}")

    def hook_for(layer):
        def hook(module, args, kwargs):
            return args, {**kwargs, "head_mask": masks[layer]}
        return hook

    hooks = [block.self_attn.register_forward_pre_hook(hook_for(i), with_kwargs=True)
             for i, block in enumerate(blocks)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
