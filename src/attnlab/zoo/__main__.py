"""``python -m attnlab.zoo train`` trains and writes the course model; ``evaluate`` measures it.

    python -m attnlab.zoo train                  # writes src/attnlab/zoo/course_model.{pt,json}
    python -m attnlab.zoo train --steps 50 --out-dir /tmp/zoo   # a short run elsewhere
    python -m attnlab.zoo evaluate               # the shipped model's measurements
    python -m attnlab.zoo evaluate --update      # ... written into its metadata (weights unchanged)
    python -m attnlab.zoo phase                  # retrain, recording the induction-head phase change:
                                                 # writes src/attnlab/zoo/phase_change.json and
                                                 # phase_checkpoints.pt (the weights must come out the same)
    python -m attnlab.zoo phase --other-weights  # ... even where this processor rounds differently, the
                                                 # record saying so (its weights' hash and the shipped one)

The course model is trained on the course's reference modules (``attnlab.use_reference``), so
that it never depends on a learner's code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

import attnlab
from attnlab import corpus
from attnlab.lessons import exercise_modules
from attnlab.train import torch_threads
from attnlab.zoo import inspect, phase
from attnlab.zoo.loading import CHAIN, METADATA, WEIGHTS, load_state, metadata, probe_loss
from attnlab.zoo.training import ZooConfig, build_model, save, train_course_model, validation_loss, validation_windows

PROBE_TOKENS = 64


def _summary(meta: dict) -> str:
    m = meta["measurements"]
    heads, uniform = m["heads"], m["heads"]["uniform"]
    lines = [
        f"validation loss {meta['validation_loss']:.3f} nats per word; unigram entropy of the corpus "
        f"{meta['unigram_entropy']:.3f} nats",
        *(f"best {name.replace('_', ' ')} head: layer {heads[name]['layer']} head {heads[name]['head']}, "
          f"score {heads[name]['score']:.3f} (attending evenly: {uniform[name]:.3f})" for name in inspect.SCORES),
        "bank probe, held-out accuracy by point of the residual stream (0 = embeddings): "
        + ", ".join(f"{a:.3f}" for a in m["bank_probe"]),
        *(f"layer {n['layer']}: {n['consistent']} of {n['of']} neurons with >= {m['share']:.0%} of their top "
          f"{m['neuron_k']} contexts sharing a pattern; e.g. neuron {n['best'][0]['neuron']}: "
          f"{n['best'][0]['pattern']} ({n['best'][0]['share']:.0%})" for n in m["neurons"]),
    ]
    return "\n".join(lines)


def _references() -> None:
    attnlab.use_reference(*[m for m in CHAIN if m in exercise_modules()], quiet=True)


def train(steps: int | None, out_dir: Path | None) -> int:
    _references()
    config = ZooConfig() if steps is None else replace(ZooConfig(), steps=steps,
                                                       warmup_steps=min(ZooConfig.warmup_steps, steps))
    model, record = train_course_model(config)
    windows = validation_windows(config)
    probe = windows[0].tolist()[:PROBE_TOKENS]
    with torch_threads(1):
        measured = inspect.measurements(model, windows)
    meta = {
        "model": "attnlab.stacks.DecoderOnly",
        "config": asdict(config),
        "parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "vocab_size": len(corpus.VOCAB),
        "corpus": {"seed": config.corpus_seed, "train_passages": config.n_train_passages,
                   "validation_passages": config.n_validation_passages,
                   "validation_windows": int(windows.shape[0]), "window": config.context},
        "steps": record["steps_done"], "seconds": record["seconds"],
        "validation_loss": round(record["validation_loss"], 5),
        "unigram_entropy": round(record["unigram_entropy"], 5),
        "losses": [round(v, 5) for v in record["losses"]],
        "probe": {"tokens": probe, "loss": round(probe_loss(model, probe), 6)},
        "measurements": measured,
        "command": "python -m attnlab.zoo train" + ("" if steps is None else f" --steps {steps}"),
    }
    weights, meta_path = (WEIGHTS, METADATA) if out_dir is None else (out_dir / WEIGHTS.name, out_dir / METADATA.name)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save(model, meta, weights, meta_path)
    print(f"trained {meta['steps']} steps in {meta['seconds']:.0f} s; wrote {weights} "
          f"({weights.stat().st_size / 1e6:.2f} MB) and {meta_path}")
    print(_summary(meta))
    return 0


def evaluate(update: bool) -> int:
    _references()
    meta = metadata()
    config = ZooConfig.from_dict(meta["config"])
    model = build_model(config)
    model.load_state_dict(load_state())
    model.eval()
    windows = validation_windows(config)
    with torch_threads(1):
        measured = {"validation_loss": round(validation_loss(model, windows), 5),
                    "measurements": inspect.measurements(model, windows)}
    print(_summary({**meta, **measured}))
    if update:
        METADATA.write_text(json.dumps({**meta, "measurements": measured["measurements"]}, indent=1) + "\n")
        print(f"updated the measurements in {METADATA}")
    return 0


def record_phase(out_dir: Path | None, keep_all: Path | None, other_weights: bool = False) -> int:
    """Retrain the course model with its configuration, recording the phase change; write the
    record and the checkpoints around it. The retrained weights should be the shipped ones; where
    they differ (another torch, another processor rounding sums in another order), nothing is written
    into the package unless ``other_weights`` says to, and the record says that it describes a
    retrain with the course model's recipe and seed, not the shipped bits ("matches_course_model":
    false, "course_model_sha256")."""
    _references()
    meta = metadata()
    config = ZooConfig.from_dict(meta["config"])
    _, record, states = phase.record_phase_change(config)
    same = record["weights_sha256"] == meta["weights_sha256"]
    record["matches_course_model"] = same
    record["course_model_sha256"] = meta["weights_sha256"]
    if keep_all is not None:
        keep_all.mkdir(parents=True, exist_ok=True)
        for step, state in states.items():
            torch.save(state, keep_all / f"step_{step:04d}.pt")
    record_path, checkpoints_path = ((phase.RECORD, phase.CHECKPOINTS) if out_dir is None
                                     else (out_dir / phase.RECORD.name, out_dir / phase.CHECKPOINTS.name))
    formed = phase.formation(record)
    print(f"retrained {record['steps_done']} steps in {record['seconds']:.0f} s, measured at "
          f"{len(record['points'])} steps; weights {'the same as' if same else 'DIFFERENT from'} the shipped "
          f"course model's ({record['weights_sha256'][:12]} against {meta['weights_sha256'][:12]})")
    print(f"strongest induction head L{formed['head'][0]}H{formed['head'][1]}: score {formed['start']:.3f} at step 0, "
          f"{formed['end']:.3f} at the end; " + ", ".join(f"{f:.0%} of its rise by step {s}"
                                                           for f, s in formed["steps"].items()))
    if not same and out_dir is None and not other_weights:
        print("not written: the record must describe the shipped weights (retrain them first, use --out-dir, "
              "or --other-weights for a record that says it describes a retrain)")
        return 1
    record_path.parent.mkdir(parents=True, exist_ok=True)
    phase.save_record(record, phase.checkpoint_states(record, states), record_path, checkpoints_path)
    print(f"wrote {record_path} ({record_path.stat().st_size / 1e3:.0f} kB) and {checkpoints_path} "
          f"({checkpoints_path.stat().st_size / 1e6:.2f} MB)" + ("" if same else ": a record of a retrain whose "
                                                                  "weights differ from the shipped ones"))
    return 0 if same or other_weights else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.zoo", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("train", help="train the course model and write its weights and metadata")
    fit.add_argument("--steps", type=int, default=None, help=f"training steps (default {ZooConfig.steps})")
    fit.add_argument("--out-dir", type=Path, default=None, help="write here instead of the package")
    measure = commands.add_parser("evaluate", help="measure the shipped course model")
    measure.add_argument("--update", action="store_true",
                         help="write the measurements into the shipped metadata (the weights are not touched)")
    change = commands.add_parser("phase", help="retrain, recording the induction-head phase change")
    change.add_argument("--out-dir", type=Path, default=None, help="write here instead of the package")
    change.add_argument("--keep-all", type=Path, default=None, help="also save every measured step's weights here")
    change.add_argument("--other-weights", action="store_true",
                        help="write into the package even if the retrained weights differ from the shipped ones "
                             "(the record says so)")
    args = parser.parse_args(argv)
    if args.command == "phase":
        return record_phase(args.out_dir, args.keep_all, args.other_weights)
    return train(args.steps, args.out_dir) if args.command == "train" else evaluate(args.update)


if __name__ == "__main__":
    sys.exit(main())
