"""GRU encoder-decoders with and without attention: lesson 01's measurement of the bottleneck.

Two models of the same size, differing in one thing only, the context the decoder reads:

- ``"plain"`` (Cho et al., 2014; Sutskever et al., 2014): the encoder's final states, concatenated,
  form one fixed-length vector; the decoder reads that same vector at every step;
- ``"attention"`` (Bahdanau et al., 2014): at every step the decoder attends over all encoder
  states with additive attention and reads their weighted average. Its decoder step is
  ``attnlab.additive.AttentionDecoderStep``, the learner's own code (or the borrowed reference).

Both use the same bidirectional GRU encoder, the same decoder sizes, the same initial decoder state
(``tanh`` of a linear map of the fixed-length vector), the same training stream and budget.
Decoding writes exactly as many tokens as the source has (the tasks of ``attnlab.data`` keep the
length), feeding back the correct previous token while training (teacher forcing) and the model's
own prediction when evaluating (greedy decoding).

Command line (the course's own training command; the notebook trains the same way)::

    python -m attnlab.seq2seq train --kind attention --out attention.pt
    python -m attnlab.seq2seq evaluate --kind attention --weights attention.pt
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnlab import data
from attnlab.train import seeded, torch_threads, train

__all__ = [
    "Seq2SeqConfig", "Encoder", "PlainDecoderStep", "Seq2Seq", "build_model", "sequence_loss",
    "train_model", "predict", "accuracy_by_length", "accuracy_by_position", "alignment_summary", "count_parameters",
    "save", "load", "KINDS",
]

KINDS = ("plain", "attention")


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Sizes, task and training budget shared by both models (one place, so they stay equal)."""

    task: str = "reverse"
    min_len: int = 4
    max_len: int = 16
    d_embed: int = 32
    d_enc: int = 64          # encoder state size: two directions of d_enc // 2 each
    d_hidden: int = 64       # decoder state size
    d_attn: int = 32         # additive attention size (the attention model only)
    batch_size: int = 32
    steps: int = 600
    lr: float = 5e-3
    seed: int = 0
    vocab_size: int = field(default=data.VOCAB_SIZE)

    def __post_init__(self):
        if self.d_enc % 2:
            raise ValueError(f"d_enc must be even (two directions), got {self.d_enc}")


class Encoder(nn.Module):
    """Embedding and a bidirectional GRU over the padded source.

    forward(source (batch, n), lengths (batch,)) -> (states (batch, n, d_enc), summary (batch, d_enc)).
    states: one vector per position (both directions concatenated; zeros at padding).
    summary: the fixed-length vector, the forward direction's last state and the backward
    direction's first, concatenated. Padding never reaches either (packed sequences).
    """

    def __init__(self, vocab_size: int, d_embed: int, d_enc: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_embed, padding_idx=data.PAD)
        self.rnn = nn.GRU(d_embed, d_enc // 2, batch_first=True, bidirectional=True)

    def forward(self, source: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embedding(source), lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, last = self.rnn(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=source.shape[1])
        return states, torch.cat([last[0], last[1]], dim=-1)


class PlainDecoderStep(nn.Module):
    """The decoder step without attention: the same layers as ``AttentionDecoderStep``, but the
    context is always the encoder's fixed-length summary.

    forward(prev_tokens (batch,), hidden (batch, d_hidden), context (batch, d_enc))
    -> (logits (batch, vocab_size), new_hidden (batch, d_hidden)).
    """

    def __init__(self, vocab_size: int, d_embed: int, d_hidden: int, d_enc: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_embed)
        self.cell = nn.GRUCell(d_embed + d_enc, d_hidden)
        self.output = nn.Linear(d_hidden + d_enc, vocab_size)

    def forward(self, prev_tokens, hidden, context):
        new_hidden = self.cell(torch.cat([self.embedding(prev_tokens), context], dim=-1), hidden)
        return self.output(torch.cat([new_hidden, context], dim=-1)), new_hidden


class Seq2Seq(nn.Module):
    """Encoder, bridge (initial decoder state) and a decoder step, plain or with attention.

    forward(batch, teacher_forcing=True) -> (logits (batch, n, vocab_size), weights or None).
    weights: (batch, n_out, n_src) attention weights of every output step (attention model only).
    """

    def __init__(self, kind: str, config: Seq2SeqConfig):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind, self.config = kind, config
        c = config
        self.encoder = Encoder(c.vocab_size, c.d_embed, c.d_enc)
        self.bridge = nn.Linear(c.d_enc, c.d_hidden)
        if kind == "plain":
            self.decoder = PlainDecoderStep(c.vocab_size, c.d_embed, c.d_hidden, c.d_enc)
        else:
            # Looked up now, not at import: attnlab.use_reference / use_own may have switched it.
            additive = importlib.import_module("attnlab.additive")
            self.decoder = additive.AttentionDecoderStep(c.vocab_size, c.d_embed, c.d_hidden, c.d_enc, c.d_attn)

    def forward(self, batch: data.Seq2SeqBatch, teacher_forcing: bool = True):
        states, summary = self.encoder(batch.source, batch.lengths)
        hidden = torch.tanh(self.bridge(summary))
        prev = torch.full_like(batch.source[:, 0], data.BOS)
        logits, weights = [], []
        for step in range(batch.source.shape[1]):
            if self.kind == "plain":
                step_logits, hidden = self.decoder(prev, hidden, summary)
            else:
                step_logits, hidden, step_weights = self.decoder(prev, hidden, states, batch.mask)
                weights.append(step_weights)
            logits.append(step_logits)
            prev = batch.target[:, step] if teacher_forcing else step_logits.argmax(dim=-1)
        return torch.stack(logits, dim=1), (torch.stack(weights, dim=1) if weights else None)


def build_model(kind: str, config: Seq2SeqConfig = Seq2SeqConfig()) -> Seq2Seq:
    """A freshly initialised model of ``kind`` ("plain" or "attention"), seeded by ``config.seed``."""
    with seeded(config.seed):
        return Seq2Seq(kind, config)


def sequence_loss(model: Seq2Seq, batch: data.Seq2SeqBatch) -> torch.Tensor:
    """Mean cross-entropy of the target tokens under teacher forcing (padding left out)."""
    logits, _ = model(batch, teacher_forcing=True)
    return F.cross_entropy(logits.flatten(0, 1), batch.target.flatten(), ignore_index=data.PAD)


def train_model(kind: str, config: Seq2SeqConfig = Seq2SeqConfig(), progress: bool = True,
                desc: str | None = None) -> tuple[Seq2Seq, list[float]]:
    """Build and train a model of ``kind`` on ``config``'s task and budget; returns (model, losses).

    Both kinds see exactly the same batches (same seed) for the same number of steps.
    """
    model = build_model(kind, config)

    def make_batch(generator):
        return data.make_batch(config.task, config.batch_size, config.min_len, config.max_len, generator)

    losses = train(model, make_batch, sequence_loss, steps=config.steps, lr=config.lr,
                   seed=config.seed + 1, desc=desc or f"{kind} GRU encoder-decoder", progress=progress)
    return model, losses


@torch.no_grad()
def predict(model: Seq2Seq, batch: data.Seq2SeqBatch, teacher_forcing: bool = False):
    """(predicted tokens (batch, n), attention weights (batch, n, n) or None).

    Greedy decoding by default: each step is fed the model's own previous prediction, as in use.
    ``teacher_forcing=True`` feeds the correct previous token instead, so that one mistake cannot
    cause the next: the accuracy then measures each step on its own.
    """
    model.eval()
    with torch_threads(1):
        logits, weights = model(batch, teacher_forcing=teacher_forcing)
    return logits.argmax(dim=-1).masked_fill(~batch.mask, data.PAD), weights


def accuracy_by_length(model: Seq2Seq, evaluation: dict[int, data.Seq2SeqBatch]) -> dict[str, dict[int, float]]:
    """Accuracy of greedy decoding on held-out batches of one length each (``data.evaluation_set``).

    Returns {"token": {length: fraction of output tokens right},
             "sequence": {length: fraction of outputs entirely right}}.
    """
    token, sequence = {}, {}
    for length, batch in evaluation.items():
        predicted, _ = predict(model, batch)
        right = (predicted == batch.target) | ~batch.mask
        token[length] = float(right[batch.mask].float().mean()) if batch.mask.any() else float("nan")
        sequence[length] = float(right.all(dim=-1).float().mean())
    return {"token": token, "sequence": sequence}


def accuracy_by_position(model: Seq2Seq, batch: data.Seq2SeqBatch, teacher_forcing: bool = False) -> list[float]:
    """Fraction of right tokens at each output position of ``batch`` (greedy decoding, or with
    ``teacher_forcing`` the correct previous token fed at every step; see ``predict``).

    Position i counts only the sequences that have an i-th token.
    """
    predicted, _ = predict(model, batch, teacher_forcing=teacher_forcing)
    right = ((predicted == batch.target) & batch.mask).sum(dim=0).double()
    present = batch.mask.sum(dim=0).double()
    return (right / present).tolist()


def alignment_summary(weights: torch.Tensor) -> dict[str, float]:
    """Where a reversal model's attention peaks, relative to the mirrored position.

    weights: (strings, n, n), the attention weights of every output step over the source positions
    (``predict`` on a batch of strings of one length n, task "reverse"). Output step i (0-based)
    writes source digit n - 1 - i, the mirrored position. Returns the fraction of steps whose
    largest weight sits on it ("on"), one position to its left ("left") or right ("right"), and the
    mean weight on the mirrored position and its two neighbours ("band weight").
    """
    if weights.dim() != 3 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"need weights of shape (strings, n, n), one length per batch; got {tuple(weights.shape)}")
    n = weights.shape[-1]
    mirrored = n - 1 - torch.arange(n)                                   # (steps,)
    offsets = weights.argmax(dim=-1) - mirrored                          # (strings, steps)
    shares = {k: (offsets == k).double().mean().item() for k in (-1, 0, 1)}
    band = (torch.arange(n)[None, :] - mirrored[:, None]).abs() <= 1    # (steps, positions)
    return {"on": shares[0], "left": shares[-1], "right": shares[1],
            "band weight": (weights * band).sum(-1).mean().item()}


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (the attention model's include the additive attention's)."""
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def save(model: Seq2Seq, path: Path) -> None:
    torch.save({"kind": model.kind, "config": asdict(model.config), "state": model.state_dict()}, path)


def load(path: Path) -> Seq2Seq:
    saved = torch.load(path, map_location="cpu", weights_only=True)
    model = build_model(saved["kind"], Seq2SeqConfig(**saved["config"]))
    model.load_state_dict(saved["state"])
    return model.eval()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.seq2seq", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("train", help="train one model and save its weights")
    fit.add_argument("--kind", choices=KINDS, required=True)
    fit.add_argument("--out", type=Path, required=True)
    fit.add_argument("--steps", type=int, default=Seq2SeqConfig.steps)
    fit.add_argument("--seed", type=int, default=Seq2SeqConfig.seed)
    evaluate = commands.add_parser("evaluate", help="accuracy against source length of saved weights")
    evaluate.add_argument("--weights", type=Path, required=True)
    evaluate.add_argument("--per-length", type=int, default=200)
    args = parser.parse_args(argv)
    if args.command == "train":
        model, losses = train_model(args.kind, Seq2SeqConfig(steps=args.steps, seed=args.seed))
        save(model, args.out)
        print(f"{args.kind}: final loss {sum(losses[-25:]) / len(losses[-25:]):.3f}; saved {args.out}")
        return 0
    model = load(args.weights)
    c = model.config
    result = accuracy_by_length(model, data.evaluation_set(c.task, range(c.min_len, c.max_len + 1), args.per_length))
    for length, accuracy in result["token"].items():
        print(f"length {length:3d}: token accuracy {accuracy:.3f}, sequence accuracy {result['sequence'][length]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
