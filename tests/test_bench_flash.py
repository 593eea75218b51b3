"""Lesson 09's benchmark helpers in attnlab.bench, and the command that records a benchmark."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnlab import bench

ROOT = Path(__file__).resolve().parents[1]


def test_naive_attention_matches_sdpa_and_aligns_causal_bottom_right():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (5, 9, 9))
    torch.testing.assert_close(bench.naive_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
    allowed = torch.ones(5, 9, dtype=torch.bool).tril(4)
    torch.testing.assert_close(bench.naive_attention(q, k, v, causal=True),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))


def test_time_call_takes_the_median_of_the_repeats():
    calls = []
    timing = bench.time_call(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and len(timing["times_s"]) == 4
    assert timing["min_s"] <= timing["median_s"] and all(t >= 0 for t in timing["times_s"])
    with pytest.raises(ValueError):
        bench.time_call(lambda: None, repeats=0)


def test_peak_memory_counts_what_a_call_allocates_on_the_cpu():
    existing = torch.ones(1_000_000)  # allocated before: not counted
    one = bench.peak_memory(lambda: existing * 2)
    assert 4_000_000 <= one < 4_001_000  # the result, float32 (and a scalar or two)
    # a temporary (torch.ones) and the result, both alive at the end of the addition
    assert 8_000_000 <= bench.peak_memory(lambda: torch.ones(1_000_000) + existing) < 8_001_000
    # temporaries freed before the end count at their peak: ones and its double, 16 MB each
    two = bench.peak_memory(lambda: (torch.ones(4_000_000) * 2).sum())
    assert 32_000_000 <= two < 32_001_000


def test_peak_memory_on_the_cpu_runs_on_one_thread_and_restores_the_setting():
    before = torch.get_num_threads()
    seen = []
    bench.peak_memory(lambda: seen.append(torch.get_num_threads()))
    assert seen == [1] and torch.get_num_threads() == before


def test_time_calls_interleaves_the_calls_and_restores_threads():
    order = []
    before = torch.get_num_threads()
    timings = bench.time_calls({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                               repeats=3, warmup=1, threads=1)
    assert order == ["a", "b"] * 4  # one warm-up round, then three timed rounds, in turn
    assert set(timings) == {"a", "b"} and all(len(t["times_s"]) == 3 for t in timings.values())
    assert all(t["min_s"] <= t["median_s"] for t in timings.values())
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        bench.time_calls({"a": lambda: None}, repeats=0)


def test_time_calls_settles_a_short_call_right_before_each_timed_run():
    import time

    order = []
    calls = {"short": lambda: order.append("short"), "long": lambda: (order.append("long"), time.sleep(0.03))}
    bench.time_calls(calls, repeats=2, warmup=0, settle_below_s=0.02)
    # the long call settles only before its first timed run, when no time is known yet
    assert order == ["short", "short", "long", "long", "short", "short", "long"]


def test_the_thread_clock_counts_only_the_threads_own_cpu_time():
    # Lesson 09 times its one-thread measurements with clock="thread" so that other programs
    # taking the core away do not count: a sleeping thread uses no CPU time, a working one does.
    import time

    def busy():
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass

    with bench.torch_threads(1):
        assert bench.cpu_clock("thread") is time.thread_time
        asleep = bench.time_call(lambda: time.sleep(0.05), repeats=2, warmup=0, clock="thread")
        working = bench.time_call(busy, repeats=2, warmup=0, clock="thread")
    assert max(asleep["times_s"]) < 0.01
    assert min(working["times_s"]) >= 0.02
    wall = bench.time_calls({"sleep": lambda: time.sleep(0.05)}, repeats=2, warmup=0, threads=1)
    assert min(wall["sleep"]["times_s"]) >= 0.05
    assert bench.cpu_clock() is time.perf_counter


def test_the_thread_clock_needs_one_thread_and_a_cpu():
    with bench.torch_threads(2):
        with pytest.raises(ValueError, match="threads=1"):
            bench.time_calls({"a": lambda: None}, clock="thread")
    with pytest.raises(ValueError, match="threads=1"):
        bench.cpu_comparison({"naive": bench.naive_attention}, [8], d=4, repeats=1, threads=2,
                             clock="thread")
    with pytest.raises(ValueError, match="clock must be one of"):
        bench.time_call(lambda: None, clock="cpu")
    with pytest.raises(ValueError, match="CUDA events"):
        bench.time_call(lambda: None, "cuda", clock="thread")


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with bench.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_flops_and_traffic_model():
    # lesson 08's attnlab.cost.attention_flops: causal counts the pairs the bottom-right mask allows
    assert bench.attention_flops(2, 100, 50, 8) == 4 * 2 * 100 * 50 * 8
    assert bench.attention_flops(2, 100, 50, 8, causal=True) == 4 * 2 * (50 * 51 // 2) * 8
    assert bench.attention_flops(2, 64, 64, 8, causal=True) == 4 * 2 * (64 * 65 // 2) * 8
    t = bench.attention_traffic(1024, 1024, 64, element_bytes=4, block_q=128)
    assert t["naive_bytes"] == 4 * (2 * 1024 * 64 + 2 * 1024 * 64 + 4 * 1024 * 1024)
    assert t["tiled_bytes"] == 4 * (2 * 1024 * 64 + 8 * 2 * 1024 * 64) + 4 * 1024
    assert t["tiled_flops_per_byte"] > 3 * t["naive_flops_per_byte"]
    assert math.isclose(t["naive_flops_per_byte"], t["flops"] / t["naive_bytes"])


def test_machine_profile_on_the_cpu():
    profile = bench.machine_profile("cpu", matmul_size=128, copy_bytes=1 << 20, threads=1, clock="thread")
    assert profile["threads"] == 1 and profile["clock"] == "thread"
    assert profile["matmul_flops_per_s"] > 0 and profile["copy_bytes_per_s"] > 0
    assert math.isclose(profile["balance_flops_per_byte"],
                        profile["matmul_flops_per_s"] / profile["copy_bytes_per_s"])
    assert isinstance(profile["caches"], dict)


def test_cpu_comparison_records_errors_and_goes_on():
    def unwritten(q, k, v, causal=False):
        raise NotImplementedError("Lesson 09: flash_forward() is not written yet")

    records = bench.cpu_comparison({"naive": bench.naive_attention, "yours": unwritten},
                                   [32, 64], d=8, repeats=1, threads=1)
    naive = [r for r in records if r["impl"] == "naive"]
    yours = [r for r in records if r["impl"] == "yours"]
    assert [r["n"] for r in naive] == [32, 64] and all(r["time_s"] > 0 for r in naive)
    assert naive[1]["memory_bytes"] >= 64 * 64 * 4  # the score matrix
    assert len(yours) == 1 and yours[0]["error"].startswith("NotImplementedError: Lesson 09")
    assert bench.series(records, "time_s") == {"naive": ([32, 64], [r["time_s"] for r in naive])}


def test_cpu_comparison_times_the_implementations_in_turn():
    order = []

    def logged(name):
        def fn(q, k, v, causal=False):
            order.append(name)
            return bench.naive_attention(q, k, v)
        return fn

    records = bench.cpu_comparison({"x": logged("x"), "y": logged("y")}, [16], d=4, repeats=3,
                                   memory=False, threads=1, clock="thread")
    assert order == ["x", "y"] + ["x", "y"] * 3  # warm-up of each, then three rounds in turn
    assert [r["impl"] for r in records] == ["x", "y"] and all(r["threads"] == 1 for r in records)
    assert all(r["clock"] == "thread" and r["time_s"] > 0 for r in records)


def _fake_recording() -> dict:
    """A small recording in the format of `python -m attnlab.bench flash` (numbers made up, for a
    test of the display only: never shipped)."""
    records = [{"impl": impl, "d": 64, "causal": False, "n": n, "dtype": "bfloat16", "error": None,
                "tflops": tflops * n / 1024, "memory_bytes": 2**20 * n / 1024, "time_s": 1e-3}
               for impl, tflops in (("Triton", 100.0), ("SDPA flash", 120.0)) for n in (1024, 2048)]
    return {
        "schema": bench.SCHEMA, "complete": True, "quick": False, "implementation": "reference",
        "created_utc": "2030-01-02T03:04:05+00:00",
        "environment": {"torch": "9.9", "cuda_version": "99.0", "cudnn_version": 99000, "triton": "9.9",
                        "cuda": True},
        "gpu": {"device": "Fake GPU 9000", "records": records,
                "goals": bench.gpu_goals(records, n=2048),
                "accuracy": [{"dtype": "bfloat16", "d": 64, "causal": False, "n": 2048,
                              "errors": {"Triton": {"max_abs": 0.01, "ratio_to_sdpa": 1.1}}}]},
    }


def _gpu_cell_source() -> str:
    import nbformat

    notebook = nbformat.read(ROOT / "solutions" / "notebooks" / "09_flash_attention.ipynb", as_version=4)
    return next(c.source for c in notebook.cells
                if c.cell_type == "code" and "bench.gpu_comparison(" in c.source)


def test_the_lessons_gpu_cell_without_a_gpu_measures_nothing_and_promises_nothing(capsys):
    """Issue 34: until a recorded GPU run ships, lesson 09 says only that it measures on a GPU
    when one is present."""
    import matplotlib.pyplot as plt

    from attnlab import plots

    plt.close("all")
    namespace = {"DEVICE": "cpu", "torch": torch, "bench": bench, "plots": plots, "plt": plt, "flash": None}
    exec(_gpu_cell_source(), namespace)
    figures = len(plt.get_fignums())
    plt.close("all")
    out = capsys.readouterr().out
    assert namespace["gpu_measured"] is False and figures == 0
    assert "No CUDA GPU here, so this lesson measures on the CPU only" in out
    assert "recorded" not in out.lower() and "load_recorded" not in _gpu_cell_source()


def test_format_recorded_describes_a_recording():
    out = bench.format_recorded(_fake_recording())
    assert "Recorded on Fake GPU 9000 on 2030-01-02: torch 9.9, CUDA 99.0" in out
    assert "GPU goals" in out and "bfloat16, d=64, causal=False: Triton 1.0e-02 (1.10x)" in out


def test_load_recorded_reads_only_real_recordings(tmp_path):
    assert bench.load_recorded("nothing_here", folder=tmp_path) is None
    (tmp_path / "flash_gpu.json").write_text(json.dumps({"schema": bench.SCHEMA, "gpu": {}}))
    assert bench.load_recorded("flash_gpu", folder=tmp_path)["gpu"] == {}
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ValueError, match="not a lesson 09 benchmark"):
        bench.load_recorded("other", folder=tmp_path)


def test_no_gpu_results_are_shipped_without_a_real_run():
    """Recorded GPU results come only from `python -m attnlab.bench flash` on a GPU."""
    recorded = bench.load_recorded("flash_gpu")
    if recorded is not None:
        assert recorded["gpu"] and recorded["gpu"]["records"], "a recording without GPU results"
        assert recorded["environment"]["cuda"] is True and recorded["quick"] is False


def test_the_benchmark_command_writes_valid_json(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "attnlab.bench", "flash", "--quick", "--no-gpu", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == bench.SCHEMA and data["implementation"] == "reference"
    assert data["quick"] is True and data["gpu"] is None and data["complete"] is True
    assert data["environment"]["torch"] == torch.__version__ and data["created_utc"]
    records = data["cpu"]["records"]
    assert {r["impl"] for r in records} == {"naive", "tiled PyTorch", "SDPA (CPU)"}
    assert all(r["error"] is None and r["time_s"] > 0 and r["memory_bytes"] > 0 for r in records)
    # the goals under both allocator settings, each at every thread count the bench measures
    goals = data["cpu"]["goals"]
    assert list(goals["allocators"]) == list(bench.ALLOCATOR_SETTINGS) == ["default", "memory reused"]
    for entries in goals["allocators"].values():
        assert [g["threads"] for g in entries] == sorted({entries[0]["threads"], 1}, reverse=True)
        for g in entries:
            assert set(g["time_s"]) == set(bench.CPU_IMPLS) and all(t > 0 for t in g["time_s"].values())
            assert set(g["page_faults"]) == set(bench.CPU_IMPLS)
            assert "tiled_vs_naive" in g and "tiled_vs_sdpa" in g
        assert entries[0]["tiled_memory_bytes"] > 0
    threads = [g["threads"] for g in goals["allocators"]["memory reused"]]
    assert len(goals["met"]) == 2 * len(threads) + 2 and all(isinstance(v, bool) for v in goals["met"].values())
    # printed side by side, with what the default allocator adds
    assert "CPU goals" in done.stdout and "default" in done.stdout and "memory reused" in done.stdout
    assert "What the default allocator adds" in done.stdout
    assert "(goal with memory reused: at least 0.95x)" in done.stdout


def _reference_flash():
    """The course's attnlab.flash, loaded from its file under a private name (the switch is left
    as it is for the other tests)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_attnlab_flash_reference_for_bench_tests",
                                                  ROOT / "solutions" / "attnlab" / "flash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_times_records_times_and_page_faults():
    records = bench.cpu_times(_reference_flash(), [32, 48], d=8, repeats=2, threads=1, clock="thread")
    assert [(r["n"], r["impl"]) for r in records] == [(n, impl) for n in (48, 32) for impl in bench.CPU_IMPLS]
    for record in records:
        assert record["error"] is None and record["threads"] == 1 and record["clock"] == "thread"
        assert 0 < record["min_s"] <= record["median_s"]
        assert record["page_faults"] is None or record["page_faults"] >= 0
    assert set(bench.times_by(records)) == set(bench.CPU_IMPLS)
    assert bench.times_by(records)["naive"].keys() == {32, 48}


def test_cpu_times_records_an_unwritten_implementation_once_and_goes_on():
    class Unwritten:
        @staticmethod
        def flash_attention_torch(q, k, v, causal=False):
            raise NotImplementedError("Lesson 09: flash_forward() is not written yet")

    records = bench.cpu_times(Unwritten, [16, 24], d=4, repeats=1, threads=1)
    failed = [r for r in records if r["error"]]
    assert len(failed) == 1 and failed[0]["error"].startswith("NotImplementedError: Lesson 09")
    assert "tiled PyTorch" not in bench.times_by(records)


def test_each_allocator_setting_runs_in_a_process_of_its_own(monkeypatch):
    """The default setting runs without glibc's variables (even if this process has them), the
    other with both; the working directory is inherited, so the child finds the same flash.py."""
    seen = []

    class Done:
        returncode = 0
        stderr = ""

        def __init__(self, payload):
            self.stdout = "a notice\n" + bench._RESULT_MARK + json.dumps(payload) + "\n"

    def fake_run(command, env, capture_output, text, timeout):
        seen.append((command, {k: env.get(k) for k in bench.MEMORY_REUSED_ENV}))
        return Done([{"impl": "naive", "n": 8, "median_s": 1.0, "error": None}])

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "123")
    monkeypatch.setattr(bench.comparisons.subprocess, "run", fake_run)
    result = bench.allocator_comparison([8, 16], repeats=2, implementation="yours")
    assert list(result) == ["default", "memory reused"]
    assert seen[0][1] == {"MALLOC_MMAP_THRESHOLD_": None, "MALLOC_TRIM_THRESHOLD_": None}
    assert seen[1][1] == bench.MEMORY_REUSED_ENV
    command = seen[0][0]
    assert command[:3] == [sys.executable, "-m", "attnlab.bench"] and command[3] == "cpu-times"
    assert command[command.index("--ns") + 1:command.index("--ns") + 3] == ["8", "16"] and "--yours" in command
    with pytest.raises(ValueError, match="implementation"):
        bench.allocator_comparison([8], implementation="mine")


def test_a_child_without_a_result_is_a_clear_error(monkeypatch):
    class Done:
        returncode = 1
        stdout = ""
        stderr = "Traceback ...\nImportError: no torch"

    monkeypatch.setattr(bench.comparisons.subprocess, "run", lambda *a, **k: Done())
    with pytest.raises(RuntimeError, match="gave no result .exit 1.: Traceback"):
        bench.in_fresh_process(["cpu-times", "--ns", "8"])


def test_format_cpu_goals_says_what_the_default_allocator_adds():
    def entry(threads, naive, faults, memory):
        return {"n": 4096, "d": 64, "repeats": 7, "threads": threads, "memory_n": 16384,
                "tiled_memory_bytes": memory,
                "time_s": {"naive": naive, "tiled PyTorch": 0.05, "SDPA (CPU)": 0.035},
                "page_faults": {"naive": faults, "tiled PyTorch": 0, "SDPA (CPU)": 0},
                "tiled_vs_naive": naive / 0.05, "tiled_vs_sdpa": 0.7}

    goals = {"allocators": {"default": [entry(1, 0.1, 32768, 3 * 2**20)],
                            "memory reused": [entry(1, 0.065, 0, 3 * 2**20)]},
             "met": {"with memory reused, tiled at least 0.95x naive's speed at 1 thread": True}}
    text = bench.format_cpu_goals(goals)
    assert "naive: +35.0 ms, +32,768 page faults per call (1.1 µs each" in text
    assert "2.00x" in text and "1.30x" in text and "[met] with memory reused" in text
    assert "tiled extra memory at n=16384 (default): 3.00 MiB (goal: under 64 MiB)" in text


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two cores")
def test_fewer_cores_pins_every_thread_and_lets_go_after():
    import threading

    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        pytest.skip("one core: none to take away")
    seen = {}
    # as many torch threads as cores, whatever OMP_NUM_THREADS says, so that one can be taken away
    with bench.torch_threads(len(cores)), bench.fewer_cores(1):
        seen["main"] = os.sched_getaffinity(0)
        worker = threading.Thread(target=lambda: seen.setdefault("new thread", os.sched_getaffinity(0)))
        worker.start()
        worker.join()
        torch.ones(1 << 16).sum()  # PyTorch's own threads, too
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        pinned = {tid: os.sched_getaffinity(tid) for tid in tids}
    keep = len(cores) - 1
    assert seen["main"] == seen["new thread"] == set(sorted(cores)[:keep])
    assert all(len(c) == keep for c in pinned.values()), pinned
    assert all(os.sched_getaffinity(tid) == cores for tid in map(int, os.listdir("/proc/self/task")))
    with pytest.raises(RuntimeError, match="none left"):
        with bench.fewer_cores(len(cores)):
            pass
    with bench.torch_threads(1), pytest.raises(RuntimeError, match="none left"):
        with bench.fewer_cores(1):  # one thread: no core to take away
            pass
    with pytest.raises(ValueError, match="positive int"):
        with bench.fewer_cores(0):
            pass
