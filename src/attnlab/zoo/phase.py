"""The induction-head phase change of the course model, recorded while it trained, and replayed.

Olsson et al. (2022) found that induction heads form abruptly, early in training, and that the
loss shows it: a bump in the training curve, and a sudden drop of the loss late in a context
against early in it. ``record_phase_change()`` retrains the course model exactly as
``python -m attnlab.zoo train`` does (same seed, one thread: the same weights, bit for bit) and
measures it every ``PhaseConfig.every`` steps (``measure``):

- on two kinds of repeated sequences (``attnlab.zoo.induction``): ARENA's repeated random tokens,
  and random lists written and read back in the corpus's own words: the loss on the first and on
  the second half, every head's induction and previous-token score, and (lists) the share of items
  copied right;
- on validation windows of the course corpus: the loss, the in-context score (the loss on words
  100-127 minus the loss on words 10-19, as lesson 04 measures it) and the corpus's own
  previous-token and induction scores (``attnlab.zoo.inspect.head_scores``).

``python -m attnlab.zoo phase`` writes the record (``phase_change.json``, a few dozen kB) and the
weights at a few steps around the change (``phase_checkpoints.pt``, float16; both under 5 MB); ``load_record()``
and ``checkpoint_model(step)`` read them back.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.zoo import induction, inspect
from attnlab.zoo.training import ZooConfig, build_model, state_sha256, train_course_model, validation_windows

__all__ = ["CHECKPOINTS", "PhaseConfig", "RECORD", "checkpoint_model", "checkpoint_states", "copying_stretch",
           "formation", "load_record", "measure", "probes", "record_phase_change", "save_record"]

HERE = Path(__file__).resolve().parent
RECORD = HERE / "phase_change.json"
CHECKPOINTS = HERE / "phase_checkpoints.pt"
SIZE_LIMIT = 5_000_000  # bytes: the record and its checkpoints together, shipped with the course


@dataclass(frozen=True)
class PhaseConfig:
    """What the record measures, and how often."""

    every: int = 20               # measure every this many steps (and before the first)
    sequences: int = 32           # repeated random sequences (ARENA's test) ...
    half: int = 48                # ... of 2 x 48 words (the model reads windows of 128)
    lists: int = 64               # random lists written and read back ...
    list_items: int = 6           # ... of 6 items (the corpus's longest), 2 x 13 words
    seed: int = 2022              # the generator of both (apart from the training's own)
    validation_windows: int = 32  # the first windows of zoo.validation_windows()
    early: tuple[int, int] = (10, 20)    # in-context score: loss on words 100-127 minus words 10-19
    late: tuple[int, int] = (100, 128)
    checkpoint_fractions: tuple[float, ...] = (0.2, 0.8)  # formation()'s (the checkpoints of a run too short to copy)

    @classmethod
    def from_dict(cls, values: dict) -> "PhaseConfig":
        """The settings a record was made with (its "phase"), JSON's lists back to tuples."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _r(value: float) -> float:
    return round(float(value), 5)


def _grid(scores: torch.Tensor) -> list[list[float]]:
    return [[_r(v) for v in row] for row in scores.tolist()]


def probes(phase: PhaseConfig = PhaseConfig()) -> dict[str, torch.Tensor]:
    """The sequences the record measures on: {"random": ARENA's repeated random tokens (b, 2 * half),
    "lists": random lists written and read back (b, 2 * (list_items + 7))}, from ``phase.seed``."""
    generator = torch.Generator().manual_seed(phase.seed)
    random = induction.repeated_random_tokens(phase.sequences, phase.half, generator)
    return {"random": random, "lists": induction.random_lists(phase.lists, phase.list_items, generator)}


def _repeated(model: nn.Module, tokens: torch.Tensor) -> tuple[dict, torch.Tensor]:
    logits, weights = induction.attention_weights(model, tokens)
    halves = induction.repeated_loss(model, tokens, logits=logits)
    return {"first_half_loss": _r(halves.first), "second_half_loss": _r(halves.second),
            "induction": _grid(induction.induction_scores(model, tokens, weights)),
            "previous_token": _grid(induction.previous_token_scores(model, tokens, weights))}, logits


@torch.no_grad()
def measure(model: nn.Module, sequences: dict[str, torch.Tensor], windows: torch.Tensor,
            phase: PhaseConfig = PhaseConfig()) -> dict:
    """One point of the record: ``model`` measured on ``sequences`` (``probes(phase)``) and on the
    validation ``windows`` (N, n + 1). Returns {"random": ..., "lists": ...: each the loss on the
    first and second half and every head's induction and previous-token score, and for the lists
    the share of items copied right; "validation": the loss, the in-context score and every head's
    corpus scores (``inspect.head_scores``)}."""
    was_training = model.training
    model.eval()
    random, _ = _repeated(model, sequences["random"])
    lists, logits = _repeated(model, sequences["lists"])
    lists["copied"] = _r(induction.copied(model, sequences["lists"], phase.list_items, logits=logits))
    inputs = windows[:, :-1]
    position_loss = F.cross_entropy(model(inputs).transpose(1, 2), windows[:, 1:], reduction="none").mean(0)  # (n,)
    (a, b), (c, d) = phase.early, phase.late
    corpus_scores = inspect.head_scores(model, inputs)
    model.train(was_training)
    return {"random": random, "lists": lists,
            "validation": {"loss": _r(position_loss.mean()),
                           "in_context_score": _r(position_loss[c:d].mean() - position_loss[a:b].mean()),
                           "induction": _grid(corpus_scores["induction"]),
                           "previous_token": _grid(corpus_scores["previous_token"])}}


def record_phase_change(config: ZooConfig = ZooConfig(), phase: PhaseConfig = PhaseConfig(), *,
                        stop_after: int | None = None, progress: bool = True,
                        keep_states: bool = True) -> tuple[nn.Module, dict, dict[int, dict]]:
    """Train the course model (``train_course_model``, the same run) and measure it every
    ``phase.every`` steps. Returns (model, record, states): the record as ``phase_change.json``
    holds it, and the state dict at every measured step (float32 copies; empty without
    ``keep_states``). stop_after: as ``train_course_model`` (a short rerun, for the tests)."""
    sequences = probes(phase)
    windows = validation_windows(config)[:phase.validation_windows]
    points: list[dict] = []
    states: dict[int, dict] = {}

    def observe(step: int, model: nn.Module, losses: list[float]) -> None:
        if step % phase.every:
            return
        recent = losses[max(0, step - phase.every):step]
        points.append({"step": step, "train_loss": _r(sum(recent) / len(recent)) if recent else None,
                       **measure(model, sequences, windows, phase)})
        if keep_states:
            states[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}

    model, run = train_course_model(config, stop_after=stop_after, progress=progress, observe=observe)
    record = {
        "config": asdict(config), "phase": asdict(phase), "steps_done": run["steps_done"],
        "seconds": run["seconds"], "weights_sha256": state_sha256(model.state_dict()),
        "probes_sha256": state_sha256(sequences),
        "points": points,
    }
    return model, record, states


def formation(record: dict, fractions: tuple[float, ...] | None = None, probe: str = "lists") -> dict:
    """When the induction heads formed, read off ``record``: the strongest induction head at the end
    (on the ``probe`` sequences: "lists" or "random"), its score at the first and last point, and
    for each fraction f of ``fractions`` (default ``phase.checkpoint_fractions``) the first recorded
    step at which its score had risen by f of its whole rise. Returns {"head": (layer, head),
    "start", "end", "steps": {f: step}}."""
    fractions = tuple(record["phase"]["checkpoint_fractions"] if fractions is None else fractions)
    points = record["points"]
    last = torch.tensor(points[-1][probe]["induction"])
    layer, head = divmod(int(last.argmax()), last.shape[1])
    curve = [p[probe]["induction"][layer][head] for p in points]
    start, end = curve[0], curve[-1]
    steps = {f: next(p["step"] for p, v in zip(points, curve) if v >= start + f * (end - start)) for f in fractions}
    return {"head": (layer, head), "start": start, "end": end, "steps": steps}


def copying_stretch(record: dict, low: float = 0.6, high: float = 0.95) -> tuple[int, int] | None:
    """The stretch of training in which the model learned to copy: (the last recorded step before
    the share of list items copied right reached ``low``, the first step at which it reached
    ``high``), or None if it never reached both."""
    points = record["points"]
    reached = [i for i, p in enumerate(points) if p["lists"]["copied"] >= low]
    done = [p["step"] for p in points if p["lists"]["copied"] >= high]
    if not reached or not done or reached[0] == 0:
        return None
    return points[reached[0] - 1]["step"], done[0]


def checkpoint_states(record: dict, states: dict[int, dict]) -> dict[int, dict]:
    """The state dicts to ship: the weights at the two ends of ``copying_stretch(record)`` (or, in a
    run too short to copy, at each step of ``formation(record)``), in float16 (half the size; the
    tied output weight is left out, it is the embedding's)."""
    stretch = copying_stretch(record)
    steps = stretch if stretch is not None else sorted(set(formation(record)["steps"].values()))
    return {step: {k: v.to(torch.float16) for k, v in states[step].items() if k != "lm_head.weight"}
            for step in steps}


def save_record(record: dict, checkpoints: dict[int, dict], record_path: Path = RECORD,
                checkpoints_path: Path = CHECKPOINTS) -> None:
    """Write the record (JSON) and the checkpoints ({step: state dict}, ``torch.save``)."""
    record = {**record, "checkpoints": sorted(checkpoints)}
    text = json.dumps(record, indent=None, separators=(",", ":")) + "\n"
    weights = sum(t.numel() * t.element_size() for state in checkpoints.values() for t in state.values())
    if len(text) + weights > SIZE_LIMIT:
        raise ValueError(f"the record and its checkpoints would take {(len(text) + weights) / 1e6:.2f} MB, more than "
                         f"{SIZE_LIMIT / 1e6:g} MB: ship fewer checkpoints (PhaseConfig.checkpoint_fractions)")
    record_path.write_text(text)
    torch.save(checkpoints, checkpoints_path)


def load_record(path: Path = RECORD) -> dict:
    """The shipped record of the phase change (``record_phase_change``'s, with "checkpoints": the
    steps whose weights ``phase_checkpoints.pt`` holds)."""
    if not path.is_file():
        raise FileNotFoundError(f"no phase-change record at {path}: make it with `python -m attnlab.zoo phase`")
    return json.loads(path.read_text())


def checkpoint_model(step: int, path: Path = CHECKPOINTS, record: dict | None = None) -> nn.Module:
    """The course model as it was after ``step`` steps of its training (one of the record's
    "checkpoints"), built by ``build_model`` from the classes the switch selects now (after
    ``zoo.load()``: the ones it settled on), in float32, in evaluation mode."""
    record = load_record() if record is None else record
    states = torch.load(path, map_location="cpu", weights_only=True)
    if step not in states:
        raise KeyError(f"no checkpoint of step {step}; the shipped ones are {sorted(states)}")
    model = build_model(ZooConfig.from_dict(record["config"]))
    state = {k: v.to(torch.float32) for k, v in states[step].items()}
    if "lm_head.weight" in model.state_dict() and "lm_head.weight" not in state:
        state["lm_head.weight"] = state["embed.weight"]
    model.load_state_dict(state)
    return model.eval()
