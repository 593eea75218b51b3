"""Synthetic tasks the course generates itself: nothing is downloaded.

Sequence-to-sequence tasks on random digit strings (lesson 01 and later lessons):

- ``"reverse"``: the target is the source backwards ("3 1 4 1" -> "1 4 1 3");
- ``"copy"``: the target is the source itself.

Every batch is padded to its longest source and carries boolean masks that follow PyTorch's
convention, ``True`` = a real token (may be attended to), ``False`` = padding. Targets have the
same length as their sources, so a decoder knows how many tokens to write. Everything is drawn
from a ``torch.Generator`` the caller seeds, so the same seed gives the same batches everywhere.

Token ids: 0 is padding, 1 marks the beginning of the output (the decoder's first input), and the
digits 0 to 9 are ids 2 to 11 (``VOCAB`` lists them in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

__all__ = [
    "PAD", "BOS", "VOCAB", "VOCAB_SIZE", "TASKS", "Seq2SeqBatch", "make_batch", "evaluation_set",
    "to_text", "padding_mask", "batch_from_text",
]

VOCAB: tuple[str, ...] = ("<pad>", "<bos>", *(str(d) for d in range(10)))
PAD, BOS = 0, 1
VOCAB_SIZE = len(VOCAB)
_FIRST_DIGIT = 2


def _reverse(source: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's first ``length`` tokens in reverse order (padding stays where it is)."""
    positions = torch.arange(source.shape[-1])
    mirrored = (lengths[:, None] - 1 - positions).clamp(min=0)
    return torch.gather(source, 1, mirrored)


def _copy(source: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return source.clone()


TASKS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "reverse": _reverse,
    "copy": _copy,
}


@dataclass(frozen=True)
class Seq2SeqBatch:
    """A padded batch of a sequence-to-sequence task.

    source:  (batch, n) token ids, padded with ``PAD`` after each sequence's end.
    target:  (batch, n) token ids of the answers, padded the same way.
    mask:    (batch, n) boolean, True at real tokens, False at padding (for sources and targets).
    lengths: (batch,) the number of real tokens of each sequence (at least 1).
    """

    source: torch.Tensor
    target: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return int(self.source.shape[0])


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(batch, max_len) boolean mask, True for the first ``lengths[b]`` positions of row b."""
    lengths = torch.as_tensor(lengths)
    max_len = int(lengths.max()) if max_len is None else int(max_len)
    return torch.arange(max_len) < lengths[:, None]


def make_batch(task: str, batch_size: int, min_len: int, max_len: int,
               generator: torch.Generator) -> Seq2SeqBatch:
    """A batch of ``task`` ("reverse" or "copy") with lengths drawn uniformly in [min_len, max_len].

    Each source is a string of random digits. Use ``min_len == max_len`` for a batch of one length.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)
    n = int(lengths.max())
    digits = torch.randint(0, 10, (batch_size, n), generator=generator) + _FIRST_DIGIT
    mask = padding_mask(lengths, n)
    source = digits.masked_fill(~mask, PAD)
    target = TASKS[task](source, lengths).masked_fill(~mask, PAD)
    return Seq2SeqBatch(source, target, mask, lengths)


def evaluation_set(task: str, lengths: list[int] | range, per_length: int,
                   seed: int = 1234) -> dict[int, Seq2SeqBatch]:
    """Held-out batches, one per source length: ``{length: batch of per_length sequences}``.

    Drawn from its own seed, so it does not overlap the training stream by construction of the
    seeds (a random string of 8 digits may of course occur in both, as in any synthetic task).
    """
    generator = torch.Generator().manual_seed(seed)
    return {int(n): make_batch(task, per_length, int(n), int(n), generator) for n in lengths}


def batch_from_text(text: str, task: str = "reverse") -> Seq2SeqBatch:
    """A batch of one sequence of ``task`` from a string of digits ("31415" or "3 1 4 1 5").

    Spaces are ignored; anything else that is not a digit is a ValueError naming it.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    digits = "".join(str(text).split())
    if not digits:
        raise ValueError("type at least one digit")
    wrong = sorted({c for c in digits if c not in "0123456789"})
    if wrong:
        raise ValueError(f"only the digits 0 to 9 can be used, not {', '.join(repr(c) for c in wrong)}")
    source = torch.tensor([[int(c) + _FIRST_DIGIT for c in digits]])
    lengths = torch.tensor([len(digits)])
    return Seq2SeqBatch(source, TASKS[task](source, lengths), padding_mask(lengths), lengths)


def to_text(tokens: torch.Tensor | list[int], mask: torch.Tensor | None = None) -> str:
    """A row of token ids as readable text ("3 1 4"), leaving out padding (or where mask is False)."""
    ids = torch.as_tensor(tokens).tolist()
    keep = [True] * len(ids) if mask is None else torch.as_tensor(mask).tolist()
    return " ".join(VOCAB[i] for i, k in zip(ids, keep) if k and i != PAD)
