"""How long a call takes: torch's CPU threads, the cores they run on, and the clocks.

- ``torch_threads(n)``: run a block with n CPU threads for torch; ``fewer_cores(1)``: run a block
  with one core fewer than torch has threads (Linux), the busy machine of lesson 09, for certain.
- ``time_call(fn, device)``: median time of repeated calls after warm-up (CUDA events on a GPU; on
  a CPU the wall clock, or with ``clock="thread"`` the CPU time of the calling thread, which other
  programs on the machine barely change: see ``cpu_clock``).
- ``time_calls``: several calls timed interleaved, robust to other programs' load.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from typing import Callable, Hashable, Mapping


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


def time_calls(calls: Mapping[Hashable, Callable[[], object]], *, repeats: int = 5, warmup: int = 1,
               threads: int | None = None, clock: str = "wall", settle_below_s: float | None = None) -> dict:
    """Time several CPU calls interleaved: ``warmup`` untimed rounds, then ``repeats`` rounds in
    which every call runs once in turn, so that load from other programs slows them alike.

    threads: CPU threads for torch while timing (None: its current setting).
    clock: ``"wall"``, or ``"thread"`` for the calling thread's CPU time, which other programs
    barely change (needs ``threads=1``; see ``cpu_clock``).
    settle_below_s: a call not timed yet, or whose fastest time so far is under this many seconds,
    runs once untimed right before each timed run: a short call right after a much larger one ran
    up to twice as slow on the course's machine (lesson 02), while a long one hardly notices.
    Returns name -> ``{"median_s", "min_s", "times_s"}`` (seconds), like ``time_call``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times: dict = {name: [] for name in calls}
    with torch_threads(threads):
        now = cpu_clock(clock)
        for _ in range(warmup):
            for fn in calls.values():
                fn()
        for _ in range(repeats):
            for name, fn in calls.items():
                if settle_below_s is not None and min(times[name], default=0.0) < settle_below_s:
                    fn()
                start = now()
                fn()
                times[name].append(now() - start)
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "times_s": t}
            for name, t in times.items()}
