"""Lesson 09's benchmark helpers in attnlab.bench, and the command that records a benchmark."""

from __future__ import annotations

import json
import math
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


def test_torch_threads_restores_the_setting():
    before = torch.get_num_threads()
    with bench.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_flops_and_traffic_model():
    assert bench.attention_flops(2, 100, 50, 8) == 4 * 2 * 100 * 50 * 8
    assert bench.attention_flops(2, 100, 50, 8, causal=True) == 2 * 2 * 100 * 50 * 8
    t = bench.attention_traffic(1024, 1024, 64, element_bytes=4, block_q=128)
    assert t["naive_bytes"] == 4 * (2 * 1024 * 64 + 2 * 1024 * 64 + 4 * 1024 * 1024)
    assert t["tiled_bytes"] == 4 * (2 * 1024 * 64 + 8 * 2 * 1024 * 64) + 4 * 1024
    assert t["tiled_flops_per_byte"] > 3 * t["naive_flops_per_byte"]
    assert math.isclose(t["naive_flops_per_byte"], t["flops"] / t["naive_bytes"])


def test_machine_profile_on_the_cpu():
    profile = bench.machine_profile("cpu", matmul_size=128, copy_bytes=1 << 20, threads=1)
    assert profile["threads"] == 1
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
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == bench.SCHEMA and data["implementation"] == "reference"
    assert data["quick"] is True and data["gpu"] is None and data["complete"] is True
    assert data["environment"]["torch"] == torch.__version__ and data["created_utc"]
    records = data["cpu"]["records"]
    assert {r["impl"] for r in records} == {"naive", "tiled PyTorch", "SDPA (CPU)"}
    assert all(r["error"] is None and r["time_s"] > 0 and r["memory_bytes"] > 0 for r in records)
    for key in ("goals", "goals_one_thread"):
        goals = data["cpu"][key]
        assert set(goals["time_s"]) == {"naive", "tiled PyTorch", "SDPA (CPU)"}
        assert goals["tiled_memory_bytes"] > 0 and "met" in goals
    assert data["cpu"]["goals_one_thread"]["threads"] == 1
    assert "CPU goals" in done.stdout
