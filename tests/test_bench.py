"""Tests of attnlab.bench."""

import platform

import torch

from attnlab.bench import environment_report


def test_environment_report_keys_and_types():
    report = environment_report()
    assert set(report) == {
        "python", "torch", "numpy", "matplotlib", "ipywidgets",
        "cpu_threads", "cuda", "gpu", "triton",
    }
    assert report["python"] == platform.python_version()
    assert report["torch"] == torch.__version__
    for key in ("numpy", "matplotlib", "ipywidgets"):
        assert isinstance(report[key], str) and report[key]
    assert isinstance(report["cpu_threads"], int) and report["cpu_threads"] >= 1
    assert report["cuda"] is torch.cuda.is_available()
    if report["cuda"]:
        assert isinstance(report["gpu"], str) and report["gpu"]
    else:
        assert report["gpu"] is None
    assert report["triton"] is None or isinstance(report["triton"], str)
