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

One job per module, all of it importable from here: ``timing`` (threads, cores, clocks),
``memory`` (peak memory, page faults, allocator settings), ``machine`` (versions, device, measured
speeds), ``costs`` (FLOP and byte counts), ``comparisons`` (the implementations and the CPU
comparisons), ``gpu_comparisons`` (the GPU grid), ``goals`` (lesson 09's goals), ``recorded``
(results recorded on real hardware), ``cli`` (``python -m attnlab.bench``). None of them imports
torch or ``attnlab.cost`` before it is needed.
"""

from __future__ import annotations

from attnlab.bench.cli import main, run_flash_benchmark
from attnlab.bench.comparisons import (
    _RESULT_MARK,  # private, but tests read the line that marks a child process's result
    CPU_IMPLS,
    allocator_comparison,
    cpu_comparison,
    cpu_times,
    in_fresh_process,
    measure,
    naive_attention,
    sdpa_attention,
    series,
    times_by,
)
from attnlab.bench.costs import attention_flops, attention_traffic, cost_function
from attnlab.bench.goals import (
    GOAL_MEMORY_BYTES,
    GOAL_VS_NAIVE,
    GOAL_VS_SDPA,
    allocator_goals,
    cpu_goals,
    format_cpu_goals,
    format_gpu_goals,
    goal_thread_counts,
    gpu_goals,
)
from attnlab.bench.gpu_comparisons import SDPA_BACKENDS, gpu_accuracy, gpu_comparison, gpu_implementations
from attnlab.bench.machine import environment_report, machine_profile, system_report
from attnlab.bench.memory import ALLOCATOR_SETTINGS, MEMORY_REUSED_ENV, MiB, page_faults, peak_memory
from attnlab.bench.recorded import RECORDED, SCHEMA, format_recorded, load_recorded
from attnlab.bench.timing import CLOCKS, cpu_clock, fewer_cores, time_call, time_calls, torch_threads

__all__ = [
    "ALLOCATOR_SETTINGS", "CLOCKS", "CPU_IMPLS", "GOAL_MEMORY_BYTES", "GOAL_VS_NAIVE", "GOAL_VS_SDPA",
    "MEMORY_REUSED_ENV", "MiB", "RECORDED", "SCHEMA", "SDPA_BACKENDS",
    "allocator_comparison", "allocator_goals", "attention_flops", "attention_traffic", "cost_function",
    "cpu_clock", "cpu_comparison", "cpu_goals", "cpu_times", "environment_report", "fewer_cores",
    "format_cpu_goals", "format_gpu_goals", "format_recorded", "goal_thread_counts", "gpu_accuracy",
    "gpu_comparison", "gpu_goals", "gpu_implementations", "in_fresh_process", "load_recorded",
    "machine_profile", "main", "measure", "naive_attention", "page_faults", "peak_memory",
    "run_flash_benchmark", "sdpa_attention", "series", "system_report", "time_call", "time_calls",
    "times_by", "torch_threads",
]
