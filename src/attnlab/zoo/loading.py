"""Opening the shipped course model, in the learner's own classes when they can run it.

``load()`` reads the weights (a state dict, with ``weights_only=True``) and the metadata, builds an
``attnlab.stacks.DecoderOnly`` from the modules the course's switch selects (the learner's own
code by default: lessons 03 to 07), loads the weights by name and checks that the model reproduces
the loss recorded when it was trained, on a fixed validation text. If it does not (a lesson not
finished yet, a name that differs, a wrong result), it borrows the course's reference of just the
modules that keep it from working, says so, and tries again.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnlab import switch
from attnlab.lessons import exercise_modules, owner
from attnlab.train import torch_threads
from attnlab.zoo.training import ZooConfig, build_model

__all__ = ["METADATA", "WEIGHTS", "load", "load_state", "metadata", "probe_loss"]

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "course_model.pt"
METADATA = HERE / "course_model.json"
PROBE_TOLERANCE = 1e-3  # nats: float32 sums in another order differ by far less
# The modules the course model runs on, lowest first (attention: lesson 02's softmax in masking).
CHAIN = ("attention", "masking", "positions", "multihead", "feedforward", "stacks")


def metadata(path: Path = METADATA) -> dict:
    """The shipped metadata: configuration, corpus, training run, measurements."""
    if not path.is_file():
        raise FileNotFoundError(f"no course model metadata at {path}: train it with `python -m attnlab.zoo train`")
    return json.loads(path.read_text())


def load_state(path: Path = WEIGHTS) -> dict[str, torch.Tensor]:
    """The shipped state dict (read with ``weights_only=True``: tensors only, no code)."""
    if not path.is_file():
        raise FileNotFoundError(f"no course model weights at {path}: train it with `python -m attnlab.zoo train`")
    return torch.load(path, map_location="cpu", weights_only=True)


@torch.no_grad()
def probe_loss(model: nn.Module, tokens: list[int]) -> float:
    """Next-token cross-entropy of ``model`` on one text (a list of ids)."""
    ids = torch.tensor([tokens])
    model.eval()
    with torch_threads(1):
        logits = model(ids[:, :-1])
    return float(F.cross_entropy(logits[0], ids[0, 1:]))


def _build(meta: dict, state: dict) -> nn.Module:
    """The course model in the classes selected now; raises if it cannot reproduce the probe."""
    model = build_model(ZooConfig.from_dict(meta["config"]))
    model.load_state_dict(state, strict=True)
    loss = probe_loss(model, meta["probe"]["tokens"])
    if not abs(loss - meta["probe"]["loss"]) <= PROBE_TOLERANCE:
        raise ValueError(f"its loss on a validation text is {loss:.4f}, where the trained model's is "
                         f"{meta['probe']['loss']:.4f}")
    return model.eval()


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def load(verbose: bool = True) -> tuple[nn.Module, dict]:
    """The trained course model and its metadata: ``model, meta = zoo.load()``.

    The model is an ``attnlab.stacks.DecoderOnly`` in evaluation mode, built from your own modules
    when they can run it; otherwise the course's reference of the modules that cannot is borrowed
    (``attnlab.use_reference``), with a notice saying which and why, and ``attnlab.use_own(...)``
    switches back. Raises RuntimeError if even the references cannot run it.
    """
    meta, state = metadata(), load_state()
    try:
        model = _build(meta, state)
    except Exception as exc:  # noqa: BLE001 (any failure of the learner's code means: borrow)
        first_problem = _why(exc)
    else:
        if verbose:
            borrowed = [m for m in CHAIN if m in exercise_modules() and switch.source_of(m) == "reference"]
            whose = ("the course's reference modules" if borrowed else "your own code (lessons 03 to 07)")
            print(f"Loaded the course model ({meta['parameters']:,} parameters, trained {meta['steps']} steps) "
                  f"into {whose}.")
        return model, meta
    chain = [m for m in CHAIN if m in exercise_modules()]
    borrowed = []
    for module in chain:
        if switch.source_of(module) == "reference":
            continue
        try:
            switch.use_reference(module, quiet=True, purpose="the course model")
            borrowed.append(module)
        except ImportError:  # forbidden (this lesson is being graded) or no reference in this copy
            pass
    try:
        _build(meta, state)
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"the course model cannot run: with your code, {first_problem}; with the "
                           f"course's references of {', '.join(borrowed) or 'nothing'}, {_why(exc)}") from exc
    # Give back every module that works on its own, from the top of the chain down.
    for module in reversed(list(borrowed)):
        switch.use_own(module)
        try:
            _build(meta, state)
        except Exception:  # noqa: BLE001
            switch.use_reference(module, quiet=True, purpose="the course model")
        else:
            borrowed.remove(module)
    model = _build(meta, state)
    if verbose:
        lessons = ", ".join(f"attnlab.{m} (lesson {owner(m).number})" for m in borrowed)
        print(f"Note: your code cannot run the course model yet ({first_problem}). It runs on the "
              f"course's reference of {lessons}. When they are done, run "
              f"attnlab.use_own({', '.join(repr(m) for m in borrowed)}) and zoo.load() again.")
    return model, meta
