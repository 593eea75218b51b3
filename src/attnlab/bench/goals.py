"""Performance goals of lesson 09 (printed by the benchmark command), measured and formatted.

- ``cpu_goals``, ``allocator_goals``: tiled attention against naive and SDPA attention on a CPU,
  under each allocator setting, at every thread count of ``goal_thread_counts``;
  ``format_cpu_goals`` prints them.
- ``gpu_goals``: the Triton forward against SDPA's flash and cuDNN backends, from the GPU grid;
  ``format_gpu_goals`` prints them.
"""

from __future__ import annotations

from attnlab.bench.comparisons import CPU_IMPLS, cpu_times, in_fresh_process, measure
from attnlab.bench.memory import ALLOCATOR_SETTINGS, MiB
from attnlab.bench.timing import torch_threads


# With memory reused, tiled attention in PyTorch must keep up with naive attention and come
# within reach of PyTorch's C++ kernel at every thread count measured; its extra memory at
# n = 16384 stays far below one n x n matrix (1 GiB in float32).
GOAL_VS_NAIVE = 0.95
GOAL_VS_SDPA = 0.6
GOAL_MEMORY_BYTES = 64 * MiB


def cpu_goals(flash, *, n: int = 4096, d: int = 64, memory_n: int | None = 16384,
              repeats: int = 7, threads: int | None = None) -> dict:
    """One thread count's CPU measurements for the goals, in this process (so under its
    allocator setting): at n, d, float32, batch 1, one head, the wall-clock median of naive,
    tiled and SDPA attention (``time_s``), the page faults of the median call (``page_faults``), and
    ``tiled_vs_naive`` = naive's time / tiled's and ``tiled_vs_sdpa`` = SDPA's time / tiled's
    (speeds relative to tiled's: above 1, tiled is faster). ``memory_n``: also the tiled
    version's peak extra memory there (``tiled_memory_bytes``; None: not measured).
    ``threads``: CPU threads for torch (None: its current setting)."""
    import torch

    with torch_threads(threads):
        records = cpu_times(flash, [n], d=d, repeats=repeats, threads=None, clock="wall")
        goals = {"n": n, "d": d, "dtype": "float32", "batch": 1, "heads": 1,
                 "threads": torch.get_num_threads(), "repeats": repeats,
                 "time_s": {r["impl"]: r["median_s"] for r in records if not r["error"]},
                 "page_faults": {r["impl"]: r["page_faults"] for r in records if not r["error"]},
                 "errors": {r["impl"]: r["error"] for r in records if r["error"]},
                 "memory_n": memory_n, "tiled_memory_bytes": None}
        if memory_n:
            big = measure("tiled PyTorch", flash.flash_attention_torch, batch=1, heads=1,
                          n=memory_n, d=d, repeats=1, warmup=0)
            goals["tiled_memory_bytes"] = big["memory_bytes"]
    t = goals["time_s"]
    if len(t) == len(CPU_IMPLS):
        goals["tiled_vs_naive"] = t["naive"] / t["tiled PyTorch"]
        goals["tiled_vs_sdpa"] = t["SDPA (CPU)"] / t["tiled PyTorch"]
    return goals


def goal_thread_counts() -> list[int]:
    """The thread counts the goals are measured at: torch's setting, and one thread."""
    import torch

    return sorted({torch.get_num_threads(), 1}, reverse=True)


def _goals_here(flash, quick: bool) -> list[dict]:
    """``cpu_goals`` at every count of ``goal_thread_counts``, in this process; the extra memory
    once (it is counted on one thread whatever the setting: see ``peak_memory``)."""
    sizes = dict(n=256, memory_n=512, repeats=1) if quick else {}
    goals = []
    for index, threads in enumerate(goal_thread_counts()):
        if index:
            sizes["memory_n"] = None
        goals.append(cpu_goals(flash, threads=threads, **sizes))
    return goals


def allocator_goals(*, quick: bool = False, implementation: str = "reference",
                    timeout: float = 1800) -> dict:
    """The CPU goals under each of ``ALLOCATOR_SETTINGS``, each in a fresh process
    (``python -m attnlab.bench cpu-goals``).

    Returns ``{"allocators": {setting: [cpu_goals at each thread count]}, "met": {goal: bool}}``.
    The speed goals are judged with memory reused (the algorithms, not the allocator); with the
    default allocator both are reported (``format_cpu_goals`` says what the difference is made of).
    """
    arguments = ["cpu-goals"] + (["--quick"] if quick else []) + (
        ["--yours"] if implementation == "yours" else [])
    allocators = {name: in_fresh_process(arguments, env, timeout)
                  for name, env in ALLOCATOR_SETTINGS.items()}
    met = {}
    for goals in allocators["memory reused"]:
        threads = f"{goals['threads']} thread{'s' if goals['threads'] > 1 else ''}"
        met[f"with memory reused, tiled at least {GOAL_VS_NAIVE}x naive's speed at {threads}"] = (
            goals.get("tiled_vs_naive", 0) >= GOAL_VS_NAIVE)
        met[f"with memory reused, tiled at least {GOAL_VS_SDPA}x CPU SDPA's speed at {threads}"] = (
            goals.get("tiled_vs_sdpa", 0) >= GOAL_VS_SDPA)
    for name, goals in allocators.items():
        memory = goals[0]["tiled_memory_bytes"]
        met[f"{name}: extra memory at n={goals[0]['memory_n']} under "
            f"{GOAL_MEMORY_BYTES // MiB} MiB"] = memory is not None and memory < GOAL_MEMORY_BYTES
    return {"allocators": allocators, "met": met}


def gpu_goals(records: list[dict], n: int = 8192) -> list[dict]:
    """The GPU goals from the grid: at n=8192 in bf16, the Triton forward at least 1.0x the SDPA
    flash backend's TFLOP/s and at least 0.7x cuDNN's (each d and causal setting)."""
    goals = []
    by_key = {(r["impl"], r["d"], r["causal"]): r for r in records
              if r["n"] == n and r["dtype"] == "bfloat16" and not r["error"]}
    for d in sorted({r["d"] for r in records}):
        for is_causal in (False, True):
            triton_ = by_key.get(("Triton", d, is_causal))
            entry = {"n": n, "d": d, "causal": is_causal,
                     "triton_tflops": triton_ and triton_["tflops"]}
            for name, key, floor in (("flash", "SDPA flash", 1.0), ("cudnn", "SDPA cudnn", 0.7)):
                other = by_key.get((key, d, is_causal))
                entry[f"{name}_tflops"] = other and other["tflops"]
                if triton_ and other:
                    entry[f"ratio_to_{name}"] = triton_["tflops"] / other["tflops"]
                    entry[f"at least {floor}x {name}"] = entry[f"ratio_to_{name}"] >= floor
            goals.append(entry)
    return goals


def format_cpu_goals(goals: dict) -> str:
    """``allocator_goals``'s result as a table, the two allocator settings side by side, then what
    the default allocator's extra time is made of, then each goal, met or missed."""
    settings = list(goals["allocators"])
    first = goals["allocators"][settings[0]][0]
    lines = [f"CPU goals: n={first['n']}, d={first['d']}, float32, batch 1, one head; wall-clock "
             f"median of {first['repeats']} runs; each allocator setting in a fresh process",
             f"  {'':24}" + "".join(f"{name:>27}" for name in settings),
             f"  {'threads  implementation':24}" + f"{'time (ms)':>14}{'page faults':>13}" * len(settings)]
    by_threads = [list(row) for row in zip(*(goals["allocators"][name] for name in settings))]
    for row in by_threads:
        threads = row[0]["threads"]
        for impl in CPU_IMPLS:
            cells = ""
            for entry in row:
                seconds, faults = entry["time_s"].get(impl), entry["page_faults"].get(impl)
                cells += (f"{seconds * 1e3:14.1f}" if seconds else f"{'error':>14}")
                cells += f"{faults:13,.0f}" if faults is not None else f"{'-':>13}"
            lines.append(f"  {threads:7d}  {impl:15}" + cells)
        for key, floor, label in (("tiled_vs_naive", GOAL_VS_NAIVE, "tiled vs naive"),
                                  ("tiled_vs_sdpa", GOAL_VS_SDPA, "tiled vs SDPA")):
            cells = "".join(f"{entry[key]:13.2f}x{'':13}" if key in entry else f"{'n/a':>27}"
                            for entry in row)
            lines.append(f"  {'':7}  {label:15}{cells}  (goal with memory reused: at least {floor}x)")
    if "default" in goals["allocators"] and "memory reused" in goals["allocators"]:
        lines.append("  What the default allocator adds (its time minus the time with memory reused):")
        for fresh, reused in zip(goals["allocators"]["default"], goals["allocators"]["memory reused"]):
            for impl in CPU_IMPLS:
                if impl not in fresh["time_s"] or impl not in reused["time_s"]:
                    continue
                extra_ms = (fresh["time_s"][impl] - reused["time_s"][impl]) * 1e3
                line = f"    {fresh['threads']} thread(s), {impl}: {extra_ms:+.1f} ms"
                faults = (fresh["page_faults"].get(impl), reused["page_faults"].get(impl))
                if None not in faults:
                    more = faults[0] - faults[1]
                    line += f", {more:+,.0f} page faults per call"
                    if more > 1000 and extra_ms > 0:
                        line += (f" ({extra_ms * 1e3 / more:.1f} µs each: fresh pages the operating "
                                 "system zeroes and maps at first touch)")
                lines.append(line)
    memory = [(name, entries[0]["memory_n"], entries[0]["tiled_memory_bytes"])
              for name, entries in goals["allocators"].items()]
    for name, memory_n, nbytes in memory:
        lines.append(f"  tiled extra memory at n={memory_n} ({name}): "
                     + (f"{nbytes / MiB:.2f} MiB" if nbytes is not None else "not measured")
                     + f" (goal: under {GOAL_MEMORY_BYTES // MiB} MiB)")
    for goal, met in goals["met"].items():
        lines.append(f"  [{'met' if met else 'MISSED'}] {goal}")
    return "\n".join(lines)


def format_gpu_goals(goals: list[dict]) -> str:
    lines = ["GPU goals (bf16; Triton against the SDPA flash and cuDNN backends, TFLOP/s):"]
    for g in goals:
        def fmt(x):
            return f"{x:6.1f}" if x else "   n/a"
        line = (f"  d={g['d']:3d} causal={g['causal']!s:5}  Triton {fmt(g['triton_tflops'])}  "
                f"flash {fmt(g['flash_tflops'])}  cuDNN {fmt(g['cudnn_tflops'])}")
        for key in ("ratio_to_flash", "ratio_to_cudnn"):
            if key in g:
                line += f"  {key.replace('ratio_to_', 'x')} {g[key]:.2f}"
        lines.append(line)
    return "\n".join(lines)
