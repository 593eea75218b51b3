"""Benchmarks recorded on real hardware and shipped with the course (``src/attnlab/recorded/``).

``load_recorded("flash_gpu")`` reads the GPU run of ``python -m attnlab.bench flash``, if one was
recorded, and ``format_recorded`` describes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnlab.bench.goals import format_gpu_goals

RECORDED = Path(__file__).resolve().parent.parent / "recorded"  # src/attnlab/recorded
SCHEMA = "attnlab.bench.flash/1"


def format_recorded(recorded: dict) -> str:
    """What a recorded GPU benchmark (``load_recorded``) says, in a few lines: where and when it was
    recorded, with which versions, its GPU goals, and the errors against a float32 reference."""
    env, gpu = recorded["environment"], recorded["gpu"]
    lines = [f"Recorded on {gpu['device']} on {recorded['created_utc'][:10]}: torch {env['torch']}, "
             f"CUDA {env['cuda_version']}, cuDNN {env['cudnn_version']}, Triton {env['triton']}; "
             f"implementation: the course's {recorded['implementation']}",
             format_gpu_goals(gpu["goals"]),
             "Error against a float32 reference: max |error|, and its ratio to the error of SDPA "
             "in the same dtype:"]
    for entry in gpu["accuracy"]:
        shown = ", ".join(f"{name} {e['max_abs']:.1e} ({e.get('ratio_to_sdpa', float('nan')):.2f}x)"
                          for name, e in entry["errors"].items() if "max_abs" in e)
        lines.append(f"  {entry['dtype']}, d={entry['d']}, causal={entry['causal']}: {shown}")
    return "\n".join(lines)


def load_recorded(name: str = "flash_gpu", folder: Path | None = None) -> dict | None:
    """A benchmark recorded on real hardware and shipped with the course, or None if none was.

    ``name``: file stem in ``src/attnlab/recorded/`` (``flash_gpu``: ``python -m attnlab.bench
    flash --out src/attnlab/recorded/flash_gpu.json`` run on a GPU). Numbers are never made up: no
    file, no results.
    """
    path = (folder or RECORDED) / f"{name}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a lesson 09 benchmark (schema {data.get('schema')!r})")
    if data.get("complete") is False:
        raise ValueError(f"{path} is the record of a run cut short; record a complete one")
    return data
