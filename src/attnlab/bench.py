"""Timing, memory and device detection; lesson 00 uses environment_report."""

from __future__ import annotations

import importlib
import platform


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
