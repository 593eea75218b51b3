"""Timing, memory, device detection and recorded results.

- ``environment_report()``: what this machine offers the course (lesson 00).
- ``torch_threads(n)``: run a block with n CPU threads for torch; ``fewer_cores(1)``: run a block
  with one core fewer than torch has threads (Linux), the busy machine of lesson 09, for certain.
- ``time_call(fn, device)``: median time of repeated calls after warm-up (CUDA events on a GPU; on
  a CPU the wall clock, or with ``clock="thread"`` the CPU time of the calling thread, which other
  programs on the machine barely change: see ``cpu_clock``).
- ``peak_memory(fn, device)``: the most bytes a call had allocated at once, beyond what existed
  before it (see its docstring for what exactly is counted on a CPU and on a GPU).
- ``attention_flops``, ``attention_traffic``, ``machine_profile``: the bytes-against-FLOPs model of
  lesson 09 and the measured figures of this machine that go with it. The FLOP count is lesson 08's
  ``attnlab.cost.attention_flops`` (see ``cost_function``).
- ``naive_attention``, ``cpu_comparison``, ``gpu_comparison``, ``gpu_accuracy``: lesson 09's grid;
  ``time_calls``: several calls timed interleaved, robust to other programs' load.
- ``ALLOCATOR_SETTINGS``, ``cpu_times``, ``allocator_comparison``: lesson 09's allocator
  experiment, naive, tiled and SDPA attention timed (with their page faults) under glibc's default
  allocator and with freed memory kept for reuse, each setting in a fresh Python process.
- ``python -m attnlab.bench flash --out FILE``: the whole benchmark of lesson 09 (CPU always, GPU
  when CUDA is available), written as JSON with the device, date and library versions; its CPU
  goals are measured under both allocator settings and printed side by side;
  ``load_recorded("flash_gpu")`` reads the GPU run shipped with the course, if one was recorded,
  and ``format_recorded`` describes it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Sequence

RECORDED = Path(__file__).resolve().parent / "recorded"
SCHEMA = "attnlab.bench.flash/1"
MiB = 2**20


def _version(module: str) -> str | None:
    """Version of an installed module, or None where it is not installed (or fails to import)."""
    try:
        return getattr(importlib.import_module(module), "__version__", "unknown")
    except Exception:  # a broken optional install (e.g. Triton without a compiler) is "absent"
        return None


def environment_report() -> dict:
    """What this machine offers the course.

    Returns a dict with keys: ``python``, ``torch``, ``numpy``, ``matplotlib``, ``ipywidgets``
    (version strings), ``cpu_threads`` (int, threads torch uses), ``cuda`` (bool, a CUDA GPU is
    usable), ``gpu`` (its name, or None), ``triton`` (version string, or None when not installed).
    """
    import torch

    cuda = torch.cuda.is_available()
    if not cuda:
        # Importing Triton (for its version) fixes its mode for the whole process: imported before
        # TRITON_INTERPRET is set, a kernel can never run in the interpreter afterwards, and the
        # learner's own Triton kernel would fail progress()'s check (lesson 00 calls both).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": _version("numpy"),
        "matplotlib": _version("matplotlib"),
        "ipywidgets": _version("ipywidgets"),
        "cpu_threads": torch.get_num_threads(),
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "triton": _version("triton"),
    }


# --------------------------------------------------------------------------------------------
# Timing and memory
# --------------------------------------------------------------------------------------------


def _is_cuda(device) -> bool:
    return str(device).startswith("cuda")


@contextlib.contextmanager
def torch_threads(count: int | None):
    """Run the block with ``torch.set_num_threads(count)`` (None: leave it), then restore it.

    One thread makes CPU comparisons about the algorithms rather than the parallelism, and stable
    on a shared machine, where an operation split over several threads waits for the slowest.
    """
    import torch

    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pin_every_thread(cores: set[int]) -> None:
    """Set the CPU affinity of every thread of this process (Linux: one entry per thread in
    /proc/self/task). Threads created later inherit the affinity of the thread that creates them."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:  # the thread ended in the meantime
            pass


@contextlib.contextmanager
def fewer_cores(missing: int = 1):
    """Run the block on ``missing`` fewer cores than PyTorch has threads (its setting unchanged).

    Every thread of the process (PyTorch's pool included, and threads started inside the block) is
    pinned to the first ``min(cores, torch.get_num_threads()) - missing`` of the cores it may use,
    and unpinned after the block. So two of PyTorch's threads share a core, as when another program
    (a browser, a second notebook) keeps a core busy, except that it happens for certain instead of
    when the operating system's scheduler happens to put them there. Linux only
    (``os.sched_setaffinity``): RuntimeError elsewhere, and when no core would be left.
    """
    import torch

    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        raise RuntimeError("fewer_cores needs Linux (os.sched_setaffinity and /proc/self/task)")
    if isinstance(missing, bool) or not isinstance(missing, int) or missing < 1:
        raise ValueError(f"missing must be a positive int, got {missing!r}")
    cores = sorted(os.sched_getaffinity(0))
    keep = min(len(cores), torch.get_num_threads()) - missing
    if keep < 1:
        raise RuntimeError(f"torch uses {torch.get_num_threads()} thread(s) on {len(cores)} core(s): "
                           f"none left after taking away {missing}")
    _pin_every_thread(set(cores[:keep]))
    try:
        yield
    finally:
        _pin_every_thread(set(cores))


CLOCKS = ("wall", "thread")


def cpu_clock(clock: str = "wall") -> Callable[[], float]:
    """The timer that times CPU calls: ``"wall"``, ``time.perf_counter``; ``"thread"``,
    ``time.thread_time``, the CPU time (user and system, page faults included) of the calling
    thread.

    The wall clock also counts the time other programs (a browser, a second notebook) take the
    core away; the thread's CPU time does not, so on a busy machine it still measures the work
    itself. It sees only the calling thread, though, so it is right only for a call that runs on
    that thread alone: ``"thread"`` needs torch set to one thread (``torch_threads(1)``).
    """
    import torch

    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    if clock == "wall":
        return time.perf_counter
    if torch.get_num_threads() != 1:
        raise ValueError(f"clock='thread' counts only the calling thread's CPU time, but torch uses "
                         f"{torch.get_num_threads()} threads: time with threads=1, or with clock='wall'")
    return time.thread_time


def time_call(fn: Callable[[], object], device="cpu", *, repeats: int = 5, warmup: int = 1,
              clock: str = "wall") -> dict:
    """Run ``fn()`` ``warmup`` times untimed, then ``repeats`` times timed.

    On a CPU each call is timed with ``cpu_clock(clock)``; on a CUDA device with CUDA events around
    the call, after synchronising, so the time is the GPU's and not the launch's (``clock`` must
    then be ``"wall"``). Returns ``{"median_s", "min_s", "times_s"}`` (seconds).
    """
    import torch

    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if _is_cuda(device) and clock != "wall":
        raise ValueError(f"a GPU call is timed by CUDA events: clock must be 'wall', got {clock!r}")
    now = cpu_clock(clock)
    for _ in range(warmup):
        fn()
    times = []
    if _is_cuda(device):
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            start = now()
            fn()
            times.append(now() - start)
    return {"median_s": statistics.median(times), "min_s": min(times), "times_s": times}


def time_calls(calls: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1,
               threads: int | None = None, clock: str = "wall") -> dict[str, dict]:
    """Time several CPU calls interleaved: ``warmup`` untimed rounds, then ``repeats`` rounds in
    which every call runs once in turn, so that load from other programs slows them alike.

    threads: CPU threads for torch while timing (None: its current setting).
    clock: ``"wall"``, or ``"thread"`` for the calling thread's CPU time, which other programs
    barely change (needs ``threads=1``; see ``cpu_clock``).
    Returns name -> ``{"median_s", "min_s", "times_s"}`` (seconds), like ``time_call``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times: dict[str, list[float]] = {name: [] for name in calls}
    with torch_threads(threads):
        now = cpu_clock(clock)
        for _ in range(warmup):
            for fn in calls.values():
                fn()
        for _ in range(repeats):
            for name, fn in calls.items():
                start = now()
                fn()
                times[name].append(now() - start)
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "times_s": t}
            for name, t in times.items()}


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 for a moment: the profiler's C++ side (Kineto) prints a line
    at every start and stop, which would fill a notebook's output."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real stderr: nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _cpu_peak_bytes(fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.start()
    try:
        result = fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    try:
        raw = prof.profiler.kineto_results.events()
    except AttributeError as error:  # pragma: no cover - a future torch may move it
        raise RuntimeError(f"this torch's profiler does not expose memory events ({error})") from None
    changes = sorted((event.start_ns(), event.nbytes()) for event in raw if event.name() == "[memory]")
    del result
    running = peak = 0
    for _, nbytes in changes:
        running += nbytes
        peak = max(peak, running)
    return peak


def peak_memory(fn: Callable[[], object], device="cpu") -> int:
    """The most bytes ``fn()`` had allocated at one time beyond what existed before, in bytes.

    What returned tensors hold is included (the result is alive when the call ends).

    - CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was
      allocated before: every tensor made through PyTorch's caching allocator (not cuBLAS or cuDNN
      workspaces outside it).
    - CPU: tensors allocated and freed by PyTorch's CPU allocator during the call, replayed in
      order from ``torch.profiler``'s memory events (``profile_memory=True``) and summed to find
      the peak. ``tracemalloc`` cannot see these allocations, and the process's resident size mixes
      them with everything else; scratch memory that a math library (oneDNN, MKL) allocates on
      its own is not counted. The call runs with PyTorch set to one thread: the profiler sees
      only the allocations of the thread it was started in, so work handed to other threads
      (``attnlab.flash``'s grid of query blocks) would be missed.
    """
    import torch

    if _is_cuda(device):
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    with torch_threads(1):
        return int(_cpu_peak_bytes(fn))


# --------------------------------------------------------------------------------------------
# The bytes-against-FLOPs model and this machine's figures
# --------------------------------------------------------------------------------------------


_reference_cost = None  # the course's attnlab.cost, loaded on first need (see cost_function)


def cost_function(name: str) -> Callable:
    """``attnlab.cost.<name>`` (lesson 08's counts) as it is at the moment of each call.

    The learner's own function when it is written ("you built this"); while it still raises the
    stub's ``NotImplementedError``, the course's reference, with a one-time notice, so that lesson
    09's benchmark does not wait for lesson 08. Where no reference can be borrowed (a class before
    lesson 08's deadline, or while lesson 08 is being graded), the learner's error is raised.
    ``attnlab.cost`` is imported at the call, not with this module: ``import attnlab.bench``
    works whatever state the exercise module is in.
    """

    def call(*args, **kwargs):
        global _reference_cost
        cost = importlib.import_module("attnlab.cost")
        try:
            return getattr(cost, name)(*args, **kwargs)
        except NotImplementedError as unwritten:
            if _reference_cost is None:
                _reference_cost = _load_reference_cost(unwritten)
            return getattr(_reference_cost, name)(*args, **kwargs)

    call.__name__ = name
    return call


def _load_reference_cost(unwritten: NotImplementedError):
    import importlib.util

    from attnlab import switch

    try:
        path = switch.reference_path("cost")
    except ImportError:
        raise unwritten from None
    spec = importlib.util.spec_from_file_location("attnlab._bench_reference_cost", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a module must be registered while it runs (dataclasses look it up)
    spec.loader.exec_module(module)
    print(f"Note: attnlab.bench counts FLOPs with the course's reference of attnlab.cost until you "
          f"write yours (lesson 08): {unwritten}")
    return module


def attention_flops(batch_heads: int, n_q: int, n_k: int, d: int, causal: bool = False) -> int:
    """Floating-point operations of an attention forward pass over ``batch_heads`` heads (all
    sequences of the batch together): ``attnlab.cost.attention_flops`` of lesson 08.

    Two matrix products (scores q k^T, then weights times v), each 2 * n_q * n_k * d operations
    (a multiply and an add), as FlashAttention's authors count: 4 * B*H * n_q * n_k * d; causal
    counts only the query-key pairs the mask allows, a little over half when n_q == n_k. The
    softmax's exponentials are not counted.
    """
    return cost_function("attention_flops")(n_q, n_k, d, n_heads=batch_heads, causal=causal)


def attention_traffic(n_q: int, n_k: int, d: int, *, element_bytes: int, block_q: int,
                      batch_heads: int = 1) -> dict:
    """Bytes moved between main memory and the fast on-chip memory, naive against tiled.

    naive (each step reads its inputs from memory and writes its result back):
       S = q k^T reads q and k, writes S (n_q x n_k); P = softmax(S) reads S and writes P;
       O = P v reads P and v, writes O: (2 n_q d + 2 n_k d + 4 n_q n_k) elements.
    tiled (FlashAttention): each block of ``block_q`` queries is read once and reads all of k and v
       once; O is written once, and the float32 log-sum-exp (n_q numbers):
       (2 n_q d + ceil(n_q / block_q) * 2 n_k d) elements + 4 n_q bytes.
    Returns a dict: ``flops``, ``naive_bytes``, ``tiled_bytes``, ``naive_flops_per_byte``,
    ``tiled_flops_per_byte``. A model: caches between the two levels can only lower the traffic.
    """
    flops = attention_flops(batch_heads, n_q, n_k, d)
    naive = batch_heads * element_bytes * (2 * n_q * d + 2 * n_k * d + 4 * n_q * n_k)
    tiled = batch_heads * (element_bytes * (2 * n_q * d + math.ceil(n_q / block_q) * 2 * n_k * d)
                           + 4 * n_q)
    return {"flops": flops, "naive_bytes": naive, "tiled_bytes": tiled,
            "naive_flops_per_byte": flops / naive, "tiled_flops_per_byte": flops / tiled}


def _cpu_caches() -> dict:
    """Cache sizes of CPU 0 from Linux's sysfs, e.g. {"L1d": 49152, "L2": 2097152}; {} elsewhere."""
    caches = {}
    for folder in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (folder / "level").read_text().strip()
            kind = (folder / "type").read_text().strip()
            size = (folder / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1024, "M": 1024**2, "G": 1024**3}
        value = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
        caches[f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")] = value
    return caches


def machine_profile(device="cpu", *, matmul_size: int | None = None,
                    copy_bytes: int | None = None, threads: int | None = None,
                    clock: str = "wall") -> dict:
    """Measured compute and memory speed of ``device``, for the bytes-against-FLOPs model.

    - ``matmul_flops_per_s``: a square matrix product (float32 on a CPU, bfloat16 on a GPU), the
      best of a few runs: roughly the highest arithmetic rate attention's products can reach;
    - ``copy_bytes_per_s``: bytes read plus written per second by copying a tensor much larger
      than the caches: the main-memory bandwidth;
    - ``balance_flops_per_byte``: their ratio. Code doing fewer operations per byte moved than
      this waits for memory; code doing more waits for arithmetic.
    Also the device's name and, on a CPU, its cache sizes (``caches``, bytes). ``threads``: CPU
    threads to measure with (None: torch's current setting); ``clock``: how a CPU call is timed
    (``"thread"``, with ``threads=1``: the thread's CPU time, see ``cpu_clock``).
    """
    with torch_threads(None if _is_cuda(device) else threads):
        return _machine_profile(device, matmul_size, copy_bytes, clock)


def _machine_profile(device, matmul_size, copy_bytes, clock="wall") -> dict:
    import torch

    cuda = _is_cuda(device)
    size = matmul_size or (8192 if cuda else 1024)
    nbytes = copy_bytes or ((2**30) if cuda else 128 * MiB)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    matmul = time_call(lambda: a @ b, device, repeats=5, warmup=2, clock=clock)["min_s"]
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    copy = time_call(lambda: dst.copy_(src), device, repeats=5, warmup=1, clock=clock)["min_s"]
    profile = {
        "device": torch.cuda.get_device_name(device) if cuda else (platform.processor() or platform.machine()),
        "matmul_dtype": str(dtype).replace("torch.", ""),
        "matmul_flops_per_s": 2.0 * size**3 / matmul,
        "copy_bytes_per_s": 2.0 * src.numel() * 4 / copy,
        "threads": torch.get_num_threads(),
        "clock": clock,
    }
    profile["balance_flops_per_byte"] = profile["matmul_flops_per_s"] / profile["copy_bytes_per_s"]
    if cuda:
        props = torch.cuda.get_device_properties(device)
        profile["multiprocessors"] = props.multi_processor_count
        profile["memory_bytes"] = props.total_memory
        profile["l2_cache_bytes"] = getattr(props, "L2_cache_size", None)
    else:
        profile["caches"] = _cpu_caches()
    return profile


# --------------------------------------------------------------------------------------------
# The implementations compared in lesson 09
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# GPU grid
# --------------------------------------------------------------------------------------------

SDPA_BACKENDS = ("MATH", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "CUDNN_ATTENTION")


def _sdpa_backend(name: str) -> Callable:
    """SDPA forced to one backend with ``torch.nn.attention.sdpa_kernel``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, name)

    def run(q, k, v, causal=False):
        with sdpa_kernel(backend):
            return sdpa_attention(q, k, v, causal=causal)

    return run


def gpu_implementations(flash) -> dict[str, Callable]:
    """name -> fn(q, k, v, causal) for the GPU grid, given the ``attnlab.flash`` module to use."""
    impls = {
        "naive": naive_attention,
        "tiled PyTorch": lambda q, k, v, causal=False: flash.flash_attention_torch(
            q, k, v, causal, block_q=1024, block_k=1024),
        "Triton": lambda q, k, v, causal=False: flash.flash_attention_triton(q, k, v, causal),
    }
    for backend in SDPA_BACKENDS:
        impls[f"SDPA {backend.lower().replace('_attention', '')}"] = _sdpa_backend(backend)
    return impls


def gpu_comparison(flash, *, ns: Sequence[int] = (512, 1024, 2048, 4096, 8192, 16384),
                   head_dims: Sequence[int] = (64, 128), causal: Sequence[bool] = (False, True),
                   dtype: str = "bfloat16", tokens: int = 16384, hidden: int = 2048,
                   repeats: int = 10, progress: bool = True) -> list[dict]:
    """Lesson 09's GPU grid, in FlashAttention-2's setting: batch x n = ``tokens`` tokens, and
    ``hidden / d`` heads (Dao, 2023, section 4.1). Naive attention, the SDPA math backend and the
    tiled PyTorch version are skipped where their memory would pass half the GPU's."""
    import torch

    budget = torch.cuda.get_device_properties(0).total_memory / 2
    impls = gpu_implementations(flash)
    records = []
    for d in head_dims:
        for is_causal in causal:
            for n in ns:
                batch, heads = max(1, tokens // n), hidden // d
                square = batch * heads * n * n  # elements of one n x n tensor per head
                for name, fn in impls.items():
                    if name in ("naive", "SDPA math") and square * 12 > budget:
                        continue  # several n x n tensors at once, some in float32
                    if name == "tiled PyTorch" and n > 8192:
                        continue  # Python loops over 1024-blocks: minutes, and no new insight
                    record = measure(name, fn, batch=batch, heads=heads, n=n, d=d, dtype=dtype,
                                     device="cuda", causal=is_causal, repeats=repeats, warmup=2)
                    records.append(record)
                    if progress:
                        shown = (f"{record['tflops']:7.1f} TFLOP/s  {record['time_s'] * 1e3:9.3f} ms"
                                 if not record["error"] else record["error"][:80])
                        print(f"  gpu {name:>16}  d={d:3d} causal={is_causal!s:5} n={n:6d}  {shown}",
                              flush=True)
                torch.cuda.empty_cache()
    return records


def gpu_accuracy(flash, *, n: int = 2048, batch: int = 2, heads: int = 8,
                 head_dims: Sequence[int] = (64, 128), causal: Sequence[bool] = (False, True),
                 dtypes: Sequence[str] = ("bfloat16",)) -> list[dict]:
    """Errors judged as FlashAttention's authors do: each low-precision output against a float32
    reference (SDPA's math backend on float32 copies of the same inputs, TF32 off), set against
    the error of PyTorch's own attention in the same low precision: ``ratio_to_sdpa`` divides by
    the error of SDPA as PyTorch dispatches it, ``ratio_to_naive`` by that of naive attention
    (FlashAttention's tests compare with the latter and accept up to 2)."""
    import torch

    impls = {"SDPA (default)": sdpa_attention, **gpu_implementations(flash)}
    results = []
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for dtype in dtypes:
            torch_dtype = getattr(torch, dtype)
            for d in head_dims:
                for is_causal in causal:
                    q, k, v = _inputs(batch, heads, n, d, torch_dtype, "cuda", seed=1)
                    with torch.no_grad():
                        reference = _sdpa_backend("MATH")(q.float(), k.float(), v.float(), is_causal)
                        errors = {}
                        for name, fn in impls.items():
                            try:
                                out = _first(fn(q, k, v, causal=is_causal)).float()
                                errors[name] = {
                                    "max_abs": (out - reference).abs().max().item(),
                                    "mean_abs": (out - reference).abs().mean().item(),
                                }
                            except Exception as error:  # noqa: BLE001
                                errors[name] = {"error": _error_text(error)}
                    for baseline_name, key in (("SDPA (default)", "ratio_to_sdpa"),
                                               ("naive", "ratio_to_naive")):
                        baseline = errors.get(baseline_name, {}).get("max_abs")
                        for error in errors.values():
                            if baseline and "max_abs" in error:
                                error[key] = error["max_abs"] / baseline
                    results.append({"dtype": dtype, "d": d, "causal": is_causal, "n": n,
                                    "batch": batch, "heads": heads, "errors": errors})
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return results


# --------------------------------------------------------------------------------------------
# glibc's allocator: fresh memory against memory reused (lesson 09), one process per setting
# --------------------------------------------------------------------------------------------

# glibc's malloc serves a request above its mmap threshold (128 KiB at first, raised as large
# blocks are freed, to at most 32 MiB on 64-bit Linux) with fresh pages from the operating system
# and hands them back when the block is freed, so the next call's first write to each 4 KiB page
# faults. With these settings it keeps every freed block for reuse instead. glibc reads them when
# a process starts, so each setting needs a process of its own; other C libraries (macOS,
# Windows) ignore them, and there the two settings should measure the same.
MEMORY_REUSED_ENV = {"MALLOC_MMAP_THRESHOLD_": "2000000000", "MALLOC_TRIM_THRESHOLD_": "4000000000"}
ALLOCATOR_SETTINGS = {"default": {}, "memory reused": MEMORY_REUSED_ENV}
CPU_IMPLS = ("naive", "tiled PyTorch", "SDPA (CPU)")
_RESULT_MARK = "@@attnlab.bench result@@ "


def page_faults() -> int | None:
    """Minor page faults so far: the calling thread's when torch uses one thread (it then does all
    the work), else the whole process's; None where ``resource.getrusage`` is missing (Windows)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    import torch

    who = resource.RUSAGE_THREAD if (torch.get_num_threads() == 1
                                     and hasattr(resource, "RUSAGE_THREAD")) else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_minflt


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


# --------------------------------------------------------------------------------------------
# Performance goals of lesson 09 (printed by the benchmark command)
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# The command: python -m attnlab.bench flash --out FILE
# --------------------------------------------------------------------------------------------


def _flash_module(implementation: str):
    """attnlab.flash: the course's reference (default) or the learner's own (``yours``)."""
    import attnlab

    if implementation == "reference":
        attnlab.use_reference("flash")
    return importlib.import_module("attnlab.flash")


def system_report() -> dict:
    """environment_report() plus what a recorded benchmark needs to be read later."""
    import torch

    report = environment_report()
    report.update({
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "attnlab": _version("attnlab"),
    })
    return report


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


if __name__ == "__main__":
    sys.exit(main())
