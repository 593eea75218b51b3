"""The command: ``python -m attnlab.bench flash --out FILE`` and its helpers.

- ``flash``: the whole benchmark of lesson 09 (CPU always, GPU when CUDA is available), written as
  JSON with the device, date and library versions (``run_flash_benchmark``); its CPU goals are
  measured under both allocator settings and printed side by side;
- ``env``: the environment report;
- ``cpu-times``, ``cpu-goals``: one allocator setting's measurements in this process, printed for
  the process that started it (``attnlab.bench.comparisons.in_fresh_process``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

from attnlab.bench.comparisons import _RESULT_MARK, cpu_comparison, cpu_times, naive_attention, sdpa_attention
from attnlab.bench.goals import _goals_here, allocator_goals, format_cpu_goals, format_gpu_goals, gpu_goals
from attnlab.bench.gpu_comparisons import gpu_accuracy, gpu_comparison
from attnlab.bench.machine import machine_profile, system_report
from attnlab.bench.memory import MiB
from attnlab.bench.recorded import SCHEMA
from attnlab.bench.timing import CLOCKS


def _flash_module(implementation: str):
    """attnlab.flash: the course's reference (default) or the learner's own (``yours``)."""
    import attnlab

    if implementation == "reference":
        attnlab.use_reference("flash")
    return importlib.import_module("attnlab.flash")


def run_flash_benchmark(*, quick: bool = False, gpu: bool = True, implementation: str = "reference",
                        progress: bool = True, flash=None,
                        checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Lesson 09's benchmark: the CPU grid and goals always, the GPU grid, accuracy and goals when
    CUDA is available (and ``gpu``). ``quick``: tiny sizes, to test the command itself.
    ``flash``: the module to benchmark (default: ``attnlab.flash``, the reference unless
    ``implementation="yours"``). ``checkpoint(result)`` is called after each part with what is
    done so far (``result["complete"]`` is False until the end), so a run cut short keeps it."""
    import torch

    def save():
        if checkpoint:
            checkpoint(result)

    flash = flash or _flash_module(implementation)
    started = time.perf_counter()
    result = {
        "schema": SCHEMA,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m attnlab.bench " + " ".join(sys.argv[1:]) if sys.argv[1:] else None,
        "implementation": implementation,
        "quick": quick,
        "complete": False,
        "environment": system_report(),
    }
    cpu_ns = (64, 128) if quick else (256, 512, 1024, 2048, 4096, 8192)
    cpu_impls = {"naive": naive_attention, "tiled PyTorch": flash.flash_attention_torch,
                 "SDPA (CPU)": sdpa_attention}
    if progress:
        print(f"CPU grid (float32, d=64, batch 1, one head, {torch.get_num_threads()} threads):",
              flush=True)
    result["cpu"] = {
        "settings": {"d": 64, "dtype": "float32", "batch": 1, "heads": 1, "causal": False,
                     "threads": torch.get_num_threads(),
                     "block_q": flash.DEFAULT_BLOCK_Q, "block_k": flash.DEFAULT_BLOCK_K},
        "machine": machine_profile("cpu", matmul_size=256 if quick else None,
                                   copy_bytes=8 * MiB if quick else None),
        "records": cpu_comparison(cpu_impls, cpu_ns, repeats=1 if quick else 3, progress=progress),
    }
    if progress:
        print("CPU goals, under glibc's default allocator and with memory reused "
              "(a fresh process each):", flush=True)
    result["cpu"]["goals"] = allocator_goals(quick=quick, implementation=implementation)
    if progress:
        print(format_cpu_goals(result["cpu"]["goals"]), flush=True)
    result["gpu"] = None
    save()
    if gpu and torch.cuda.is_available():
        if progress:
            print(f"GPU grid on {torch.cuda.get_device_name(0)}:", flush=True)
        gpu_part = {"device": torch.cuda.get_device_name(0),
                    "machine": machine_profile("cuda", matmul_size=1024 if quick else None,
                                               copy_bytes=64 * MiB if quick else None)}
        if quick:
            gpu_part["records"] = gpu_comparison(flash, ns=(256,), head_dims=(64,), causal=(False,),
                                                 tokens=512, repeats=2, progress=progress)
            gpu_part["accuracy"] = gpu_accuracy(flash, n=256, batch=1, heads=2, head_dims=(64,),
                                                causal=(False,), dtypes=("bfloat16",))
        else:
            result["gpu"] = gpu_part
            gpu_part["records"] = gpu_comparison(flash, progress=progress)
            save()
            gpu_part["accuracy"] = gpu_accuracy(flash)
        gpu_part["goals"] = gpu_goals(gpu_part["records"], n=256 if quick else 8192)
        result["gpu"] = gpu_part
        if progress:
            print(format_gpu_goals(gpu_part["goals"]), flush=True)
    result["seconds"] = time.perf_counter() - started
    result["complete"] = True
    save()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnlab.bench",
                                     description="Benchmarks of the attention course.")
    commands = parser.add_subparsers(dest="command", required=True)
    flash = commands.add_parser("flash", help="lesson 09: naive, tiled, Triton and SDPA attention")
    flash.add_argument("--out", type=Path, required=True, help="JSON file to write")
    flash.add_argument("--quick", action="store_true", help="tiny sizes (tests the command)")
    flash.add_argument("--no-gpu", action="store_true", help="skip the GPU grid")
    flash.add_argument("--yours", action="store_true",
                       help="benchmark your attnlab.flash instead of the course's reference")
    commands.add_parser("env", help="print the environment report")
    times = commands.add_parser("cpu-times", help="lesson 09: naive, tiled and SDPA times and page "
                                "faults in this process (see allocator_comparison)")
    times.add_argument("--ns", type=int, nargs="+", required=True)
    times.add_argument("--d", type=int, default=64)
    times.add_argument("--repeats", type=int, default=5)
    times.add_argument("--threads", type=int, default=1)
    times.add_argument("--clock", choices=CLOCKS, default="thread")
    times.add_argument("--yours", action="store_true", help="your attnlab.flash, not the course's")
    goals = commands.add_parser("cpu-goals", help="lesson 09's CPU goals in this process, at every "
                                "thread count (see allocator_goals)")
    goals.add_argument("--quick", action="store_true", help="tiny sizes (tests the command)")
    goals.add_argument("--yours", action="store_true", help="your attnlab.flash, not the course's")
    args = parser.parse_args(argv)
    if args.command == "env":
        print(json.dumps(system_report(), indent=2))
        return 0
    if args.command in ("cpu-times", "cpu-goals"):
        flash = _flash_module("yours" if args.yours else "reference")
        if args.command == "cpu-times":
            result = cpu_times(flash, args.ns, d=args.d, repeats=args.repeats, threads=args.threads,
                               clock=args.clock)
        else:
            result = _goals_here(flash, args.quick)
        print(_RESULT_MARK + json.dumps(result), flush=True)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(result: dict) -> None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")

    result = run_flash_benchmark(quick=args.quick, gpu=not args.no_gpu,
                                 implementation="yours" if args.yours else "reference",
                                 checkpoint=write)
    print(f"wrote {args.out} ({result['seconds']:.0f} s)")
    return 0
