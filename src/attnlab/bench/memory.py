"""How much memory a call takes: its peak, its page faults, and glibc's allocator settings.

- ``peak_memory(fn, device)``: the most bytes a call had allocated at once, beyond what existed
  before it (see its docstring for what exactly is counted on a CPU and on a GPU).
- ``page_faults()``: minor page faults so far, to count those of a call.
- ``MEMORY_REUSED_ENV``, ``ALLOCATOR_SETTINGS``: glibc's allocator with freed memory kept for
  reuse, against its default (lesson 09's allocator experiment; each needs a process of its own).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

from attnlab.bench.timing import _is_cuda, torch_threads

MiB = 2**20


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


# glibc's malloc serves a request above its mmap threshold (128 KiB at first, raised as large
# blocks are freed, to at most 32 MiB on 64-bit Linux) with fresh pages from the operating system
# and hands them back when the block is freed, so the next call's first write to each 4 KiB page
# faults. With these settings it keeps every freed block for reuse instead. glibc reads them when
# a process starts, so each setting needs a process of its own; other C libraries (macOS,
# Windows) ignore them, and there the two settings should measure the same.
MEMORY_REUSED_ENV = {"MALLOC_MMAP_THRESHOLD_": "2000000000", "MALLOC_TRIM_THRESHOLD_": "4000000000"}
ALLOCATOR_SETTINGS = {"default": {}, "memory reused": MEMORY_REUSED_ENV}


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
