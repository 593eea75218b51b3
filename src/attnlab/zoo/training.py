"""Training the course model: its configuration, the seeded training run, and what it records.

``train_course_model(config)`` builds an ``attnlab.stacks.DecoderOnly`` from ``config`` under a
fixed seed and trains it on the course corpus (``attnlab.corpus``) with AdamW, a short linear
warm-up and a cosine decay, on one CPU thread (the same seed then gives the same model on the same
machine and torch version). It returns the model and a record of the run: the loss of every step,
the validation loss, the corpus's unigram entropy, the time taken. ``save`` writes the weights
(a state dict) and the metadata next to each other.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from attnlab import corpus
from attnlab.train import seeded, torch_threads

__all__ = ["ZooConfig", "build_model", "model_settings", "save", "state_sha256", "train_course_model",
           "validation_loss", "validation_windows"]


@dataclass(frozen=True)
class ZooConfig:
    """Everything that decides the course model: its sizes, its corpus and its training run."""

    # the model (arguments of attnlab.stacks.DecoderOnly)
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int = 512
    activation: str = "gelu"
    norm: str = "layer"
    placement: str = "pre"
    rope_base: float = 10000.0
    tie_embeddings: bool = True
    # the corpus
    corpus_seed: int = corpus.CORPUS_SEED
    n_train_passages: int = 8000
    n_validation_passages: int = 500
    # the training run
    context: int = 128  # long enough that a list written and read back often falls in one window
    batch_size: int = 16
    steps: int = 1600
    lr: float = 3e-3
    warmup_steps: int = 40
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0

    @classmethod
    def from_dict(cls, values: dict) -> "ZooConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown settings of the course model: {sorted(unknown)}")
        return cls(**values)


def model_settings(config: ZooConfig) -> dict:
    """Keyword arguments of ``DecoderOnly`` for ``config`` (with the corpus's vocabulary size)."""
    return {
        "vocab_size": len(corpus.VOCAB), "d_model": config.d_model, "n_layers": config.n_layers,
        "n_heads": config.n_heads, "d_ff": config.d_ff, "n_kv_heads": config.n_kv_heads,
        "activation": config.activation, "norm": config.norm, "placement": config.placement,
        "rope_base": config.rope_base, "tie_embeddings": config.tie_embeddings,
    }


def build_model(config: ZooConfig = ZooConfig()) -> nn.Module:
    """A freshly initialised course model (``attnlab.stacks.DecoderOnly``, as the switch selects
    it), seeded by ``config.seed``."""
    stacks = importlib.import_module("attnlab.stacks")
    with seeded(config.seed):
        return stacks.DecoderOnly(**model_settings(config))


def _lr_factor(step: int, config: ZooConfig) -> float:
    """Linear warm-up to 1, then a cosine decay to ``final_lr_fraction`` at the last step."""
    warm = min(1.0, (step + 1) / max(1, config.warmup_steps))
    progress = min(1.0, max(0, step - config.warmup_steps) / max(1, config.steps - config.warmup_steps))
    low = config.final_lr_fraction
    return warm * (low + (1 - low) * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimizer(model: nn.Module, config: ZooConfig) -> torch.optim.Optimizer:
    # Weight decay on the matrices only (not on norms' scales and shifts or biases), as in GPT-2.
    unique = {id(p): p for p in model.parameters()}.values()  # tied weights once
    matrices = [p for p in unique if p.dim() >= 2]
    others = [p for p in unique if p.dim() < 2]
    return torch.optim.AdamW([{"params": matrices, "weight_decay": config.weight_decay},
                              {"params": others, "weight_decay": 0.0}], lr=config.lr, betas=(0.9, 0.95))


def validation_windows(config: ZooConfig = ZooConfig(), length: int | None = None) -> torch.Tensor:
    """The validation passages as consecutive, non-overlapping windows: (n_windows, length + 1) ids
    (inputs are ``[:, :-1]``, next-token targets ``[:, 1:]``). length: config.context by default."""
    length = config.context if length is None else int(length)
    stream = corpus.token_stream(
        corpus.splits(config.n_train_passages, config.n_validation_passages, config.corpus_seed)["validation"])
    n = (stream.numel() - 1) // length
    starts = torch.arange(n) * length
    return stream[starts[:, None] + torch.arange(length + 1)]


@torch.no_grad()
def validation_loss(model: nn.Module, windows: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy (nats per token) of ``model`` over ``windows``."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, windows.shape[0], batch_size):
        chunk = windows[start:start + batch_size]
        logits = model(chunk[:, :-1])
        total += float(F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum"))
        count += chunk[:, 1:].numel()
    return total / count


def train_course_model(config: ZooConfig = ZooConfig(), *, stop_after: int | None = None,
                       progress: bool = True, threads: int = 1,
                       observe: Callable[[int, nn.Module, list[float]], None] | None = None) -> tuple[nn.Module, dict]:
    """Build and train the course model; returns (model, record).

    stop_after: stop after this many steps of the same schedule (a short rerun of the start of the
    training, for the reproducibility test), None for all ``config.steps``.
    observe: called as ``observe(steps_done, model, losses)`` before the first step (0) and after
    every step, to measure the model while it trains (``attnlab.zoo.phase``). It must not change
    the model or draw from torch's global generator; the model is put back in training mode after
    it, so the training (and the weights it ends with) is the same with or without it.
    record: {"losses": loss of every step, "validation_loss", "unigram_entropy", "seconds",
    "steps_done"}; the validation loss is measured only for a complete run.
    """
    steps = config.steps if stop_after is None else min(int(stop_after), config.steps)
    data = corpus.splits(config.n_train_passages, config.n_validation_passages, config.corpus_seed)
    stream = corpus.token_stream(data["train"])
    model = build_model(config)
    optimizer = _optimizer(model, config)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    generator = torch.Generator().manual_seed(config.seed + 1)
    losses: list[float] = []
    begin = time.perf_counter()
    model.train()
    with torch_threads(threads), tqdm(total=steps, desc="course model", disable=not progress,
                                      mininterval=1.0) as bar:
        if observe is not None:
            observe(0, model, losses)
            model.train()
        for step in range(steps):
            inputs, targets = corpus.lm_batch(stream, config.batch_size, config.context, generator)
            loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
            value = float(loss.detach())
            if not math.isfinite(value):
                raise FloatingPointError(f"the loss became {value} at step {step}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.clip)
            optimizer.step()
            schedule.step()
            losses.append(value)
            if observe is not None:
                observe(step + 1, model, losses)
                model.train()
            bar.update(1)
            if step % 20 == 0 or step == steps - 1:
                recent = losses[-20:]
                bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
    seconds = time.perf_counter() - begin
    model.eval()
    record = {"losses": losses, "steps_done": steps, "seconds": round(seconds, 1),
              "unigram_entropy": corpus.unigram_entropy(stream)}
    if steps == config.steps:
        with torch_threads(threads):
            record["validation_loss"] = validation_loss(model, validation_windows(config))
    return model, record


def state_sha256(state: dict[str, torch.Tensor]) -> str:
    """A fingerprint of a state dict's names, shapes and values (independent of how it was saved)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def save(model: nn.Module, metadata: dict, weights_path: Path, metadata_path: Path) -> None:
    """Write the weights (``torch.save`` of the state dict) and the metadata (JSON)."""
    state = model.state_dict()  # tied weights stay one tensor: torch.save keeps shared storage
    torch.save(state, weights_path)
    metadata = {**metadata, "weights_sha256": state_sha256(state), "torch": torch.__version__,
                "python": platform.python_version()}
    metadata_path.write_text(json.dumps(metadata, indent=1) + "\n")


def config_dict(config: ZooConfig) -> dict:
    return asdict(config)
