"""The attention implementations lesson 09 compares, and their timed comparisons on a CPU.

- ``naive_attention``, ``sdpa_attention``: the baselines; ``measure``: one timed record.
- ``cpu_comparison``: lesson 09's CPU grid; ``series``: a grid's records, by implementation.
- ``cpu_times``, ``allocator_comparison``: lesson 09's allocator experiment, naive, tiled and SDPA
  attention timed (with their page faults) under each of ``ALLOCATOR_SETTINGS``, each setting in a
  fresh Python process (``in_fresh_process``); ``times_by``: their times, by implementation.

The GPU grid is in ``attnlab.bench.gpu_comparisons``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from typing import Callable, Iterable, Sequence

from attnlab.bench.costs import attention_flops
from attnlab.bench.memory import ALLOCATOR_SETTINGS, MEMORY_REUSED_ENV, MiB, page_faults, peak_memory
from attnlab.bench.timing import _is_cuda, cpu_clock, time_call, time_calls, torch_threads


def naive_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """Attention that builds the whole (..., n_q, n_k) score matrix: the baseline of lesson 09.

    ``softmax(scale * q k^T) v`` in the inputs' dtype, with separate PyTorch operations (each
    reading and writing an n_q x n_k tensor). causal: bottom-right aligned; needs n_q <= n_k.
    """
    import torch

    factor = q.shape[-1] ** -0.5 if scale is None else scale
    # scaling q (n_q x d numbers) rather than the scores saves a pass over n_q x n_k of them
    logits = torch.matmul(q * factor, k.transpose(-2, -1))
    if not causal:
        return torch.softmax(logits, dim=-1) @ v
    rows, cols = logits.shape[-2:]  # bottom-right: query i sees keys j <= i + n_k - n_q
    allowed = torch.ones(rows, cols, dtype=torch.bool, device=q.device).tril(cols - rows)
    return torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1) @ v


def sdpa_attention(q, k, v, causal: bool = False, scale: float | None = None):
    """``torch.nn.functional.scaled_dot_product_attention`` (PyTorch's fused attention).

    Its ``is_causal`` aligns the mask to the top-left corner, the same as bottom-right when n_q
    equals n_k, which is what the benchmark grid uses.
    """
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _inputs(batch: int, heads: int, n: int, d: int, dtype, device, seed: int = 0):
    import torch

    # drawn where they are used: large GPU inputs are not worth generating on the CPU
    g = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(batch, heads, n, d, generator=g, device=device).to(dtype) for _ in range(3)]


def _first(result):
    """The output tensor of an implementation that returns (out, lse) or out."""
    return result[0] if isinstance(result, tuple) else result


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if len(text) < 300 else text[:297] + "..."


def measure(name: str, fn: Callable, *, batch: int, heads: int, n: int, d: int, dtype="float32",
            device="cpu", causal: bool = False, repeats: int = 3, warmup: int = 1,
            memory: bool = True, seed: int = 0) -> dict:
    """Time (and measure the peak memory of) ``fn(q, k, v, causal=...)`` on random inputs.

    Returns one record: the settings, ``time_s`` (median), ``tflops`` (forward FLOPs per second /
    1e12), ``memory_bytes`` (peak extra memory, or None when not measured), and ``error`` (None,
    or the error the implementation raised, e.g. a NotImplementedError of an unwritten exercise).
    """
    import torch

    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    record = {"impl": name, "device": "cuda" if _is_cuda(device) else "cpu", "batch": batch,
              "heads": heads, "n": n, "d": d, "dtype": str(torch_dtype).replace("torch.", ""),
              "causal": bool(causal), "time_s": None, "tflops": None, "memory_bytes": None,
              "error": None}
    q, k, v = _inputs(batch, heads, n, d, torch_dtype, device, seed)
    call = lambda: _first(fn(q, k, v, causal=causal))  # noqa: E731
    try:
        with torch.no_grad():
            timing = time_call(call, device, repeats=repeats, warmup=warmup)
            record["time_s"] = timing["median_s"]
            record["tflops"] = _tflops(batch * heads, n, d, causal, timing["median_s"])
            if memory:
                record["memory_bytes"] = peak_memory(call, device)
    except Exception as error:  # noqa: BLE001 - recorded, the grid goes on
        record["error"] = _error_text(error)
        if _is_cuda(device):
            torch.cuda.empty_cache()
    return record


def _tflops(batch_heads: int, n: int, d: int, causal: bool, seconds: float) -> float | None:
    """Forward TFLOP/s of self-attention over n tokens taking ``seconds``; None where lesson 08's
    count is neither written nor borrowable (the time is still recorded)."""
    try:
        return attention_flops(batch_heads, n, n, d, causal) / seconds / 1e12
    except NotImplementedError:
        return None


def cpu_comparison(implementations: dict[str, Callable], ns: Sequence[int], *, d: int = 64,
                   batch: int = 1, heads: int = 1, repeats: int = 3, memory: bool = True,
                   max_n: dict[str, int] | None = None, progress: bool = False,
                   threads: int | None = None, clock: str = "wall") -> list[dict]:
    """Lesson 09's CPU grid: every implementation at every n (float32, not causal).

    implementations: name -> ``fn(q, k, v, causal=False)``, returning out or (out, lse).
    max_n: name -> largest n to run it at (e.g. keep naive attention away from huge n).
    threads: CPU threads for torch while measuring (None: its current setting).
    clock: ``"wall"``, or ``"thread"`` (with ``threads=1``) for the CPU time of the one thread that
    does the work, which other programs on the machine barely change (``cpu_clock``); each record
    says which (``"clock"``).
    Returns a list of records (see ``measure``); an implementation that raises gets its error
    recorded once and is not run at larger n.
    """
    with torch_threads(threads):
        return _cpu_comparison(implementations, ns, d, batch, heads, repeats, memory, max_n,
                               progress, clock)


def _cpu_comparison(implementations, ns, d, batch, heads, repeats, memory, max_n, progress,
                    clock="wall"):
    """For each n: one untimed call of each implementation, then ``repeats`` rounds in which every
    implementation runs once in turn (interleaved, so that a burst of load from other programs
    slows all of them alike rather than one), then the peak memory of each."""
    import torch

    now = cpu_clock(clock)
    records, failed = [], set()
    for n in ns:
        q, k, v = _inputs(batch, heads, n, d, torch.float32, "cpu")
        timed = {}  # name -> (call, record, times)
        for name, fn in implementations.items():
            if name in failed or n > (max_n or {}).get(name, n):
                continue
            record = {"impl": name, "device": "cpu", "batch": batch, "heads": heads, "n": n,
                      "d": d, "dtype": "float32", "causal": False, "time_s": None, "tflops": None,
                      "memory_bytes": None, "error": None, "threads": torch.get_num_threads(),
                      "clock": clock}
            records.append(record)
            call = lambda fn=fn: _first(fn(q, k, v, causal=False))  # noqa: E731
            try:
                with torch.no_grad():
                    call()  # warm-up
            except Exception as error:  # noqa: BLE001 - recorded, the grid goes on
                record["error"] = _error_text(error)
                failed.add(name)
            else:
                timed[name] = (call, record, [])
        with torch.no_grad():
            for _ in range(repeats):
                for call, _, times in timed.values():
                    start = now()
                    call()
                    times.append(now() - start)
        for name, (call, record, times) in timed.items():
            record["time_s"] = statistics.median(times)
            record["tflops"] = _tflops(batch * heads, n, d, False, record["time_s"])
            if memory:
                with torch.no_grad():
                    record["memory_bytes"] = peak_memory(call)
            if progress:
                print(f"  cpu {name:>22}  n={n:6d}  {record['time_s'] * 1e3:9.2f} ms  "
                      f"{(record['memory_bytes'] or 0) / MiB:9.2f} MiB", flush=True)
    return records


def series(records: Iterable[dict], value: str, **where) -> dict[str, tuple[list, list]]:
    """impl -> (ns, values) of ``value`` over the records that match ``where`` and have no error."""
    out: dict[str, tuple[list, list]] = {}
    for record in records:
        if record.get("error") or record.get(value) is None:
            continue
        if any(record.get(key) != wanted for key, wanted in where.items()):
            continue
        ns, values = out.setdefault(record["impl"], ([], []))
        ns.append(record["n"])
        values.append(record[value])
    return out


CPU_IMPLS = ("naive", "tiled PyTorch", "SDPA (CPU)")
_RESULT_MARK = "@@attnlab.bench result@@ "


def _cpu_impls(flash) -> dict[str, Callable]:
    return dict(zip(CPU_IMPLS, (naive_attention, flash.flash_attention_torch, sdpa_attention)))


def cpu_times(flash, ns: Sequence[int], *, d: int = 64, repeats: int = 5, threads: int | None = 1,
              clock: str = "thread", seed: int = 0) -> list[dict]:
    """Naive, tiled (``flash.flash_attention_torch``) and SDPA attention at each n, in this
    process (so under its allocator setting): float32, batch 1, one head, not causal, timed in
    turn by ``time_calls`` after four rounds of warm-up, each timed call's minor page faults
    counted as well. The largest n goes first: by the time the timing starts, an allocator that
    keeps freed memory has grown its heap enough to serve nearly every later call from it.

    Returns one record per (n, implementation): ``impl``, ``n``, ``d``, ``threads``, ``clock``,
    ``median_s``, ``min_s``, ``page_faults`` (of the median timed call: the median of the
    counts, see ``page_faults``; None where not counted) and ``error`` (what the implementation raised, once; it is then
    skipped at the other n).
    """
    import torch

    records, failed = [], {}
    with torch_threads(threads), torch.no_grad():
        for n in sorted(ns, reverse=True):
            q, k, v = _inputs(1, 1, n, d, torch.float32, "cpu", seed)
            calls = {}
            for name, fn in _cpu_impls(flash).items():
                call = lambda fn=fn: _first(fn(q, k, v, causal=False))  # noqa: E731
                if name not in failed:
                    try:
                        call()  # warm-up, and does it run at all?
                    except Exception as error:  # noqa: BLE001 - recorded, the others go on
                        failed[name] = _error_text(error)
                        records.append({"impl": name, "n": n, "d": d, "error": failed[name]})
                        continue
                    calls[name] = call
            for _ in range(3):
                for call in calls.values():
                    call()
            faults = {name: [] for name in calls}

            def counted(name, call):
                def run():
                    before = page_faults()
                    call()
                    if before is not None:
                        faults[name].append(page_faults() - before)
                return run

            timings = time_calls({name: counted(name, call) for name, call in calls.items()},
                                 repeats=repeats, warmup=0, clock=clock)
            for name, timing in timings.items():
                records.append({"impl": name, "n": n, "d": d, "threads": torch.get_num_threads(),
                                "clock": clock, "median_s": timing["median_s"],
                                "min_s": timing["min_s"],
                                "page_faults": statistics.median(faults[name]) if faults[name] else None,
                                "error": None})
    return records


def in_fresh_process(arguments: Sequence[str], env: dict[str, str] | None = None,
                     timeout: float = 900) -> object:
    """Run ``python -m attnlab.bench <arguments>`` in a new Python process, with this process's
    environment less glibc's allocator settings, plus ``env``; return the JSON result it prints.

    A fresh process is the only way to change the allocator's settings, which glibc reads once at
    start. It inherits the working directory, so it finds the same ``attnlab.flash``."""
    environment = {name: value for name, value in os.environ.items() if name not in MEMORY_REUSED_ENV}
    environment.update(env or {})
    command = [sys.executable, "-m", "attnlab.bench", *map(str, arguments)]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_RESULT_MARK):
            return json.loads(line[len(_RESULT_MARK):])
    raise RuntimeError(f"`python -m attnlab.bench {' '.join(command[3:])}` gave no result (exit "
                       f"{done.returncode}): {(done.stderr or done.stdout)[-1500:]}")


def allocator_comparison(ns: Sequence[int], *, d: int = 64, repeats: int = 5, threads: int = 1,
                         clock: str = "thread", implementation: str = "reference",
                         timeout: float = 900) -> dict[str, list[dict]]:
    """``cpu_times`` under each of ``ALLOCATOR_SETTINGS``, each in a fresh Python process
    (``python -m attnlab.bench cpu-times``): setting name -> its records.

    implementation: ``"reference"``, the course's ``attnlab.flash``, or ``"yours"``, the one the
    import finds (your file, beside the notebook or in ``src/attnlab``).
    """
    if implementation not in ("reference", "yours"):
        raise ValueError(f"implementation must be 'reference' or 'yours', got {implementation!r}")
    arguments = ["cpu-times", "--ns", *ns, "--d", d, "--repeats", repeats, "--threads", threads,
                 "--clock", clock] + (["--yours"] if implementation == "yours" else [])
    return {name: in_fresh_process(arguments, env, timeout) for name, env in ALLOCATOR_SETTINGS.items()}


def times_by(records: Iterable[dict], value: str = "min_s") -> dict[str, dict[int, float]]:
    """impl -> {n: value} over the records of ``cpu_times`` that ran."""
    out: dict[str, dict[int, float]] = {}
    for record in records:
        if not record.get("error"):
            out.setdefault(record["impl"], {})[record["n"]] = record[value]
    return out
