"""What machine this is: the versions the course runs on, the device, and its measured speeds.

- ``environment_report()``: what this machine offers the course (lesson 00); ``system_report()``:
  that plus what a recorded benchmark needs to be read later.
- ``machine_profile(device)``: this machine's measured compute and memory speed, for lesson 09's
  bytes-against-FLOPs model (``attnlab.bench.costs``).
"""

from __future__ import annotations

import importlib
import os
import platform
from pathlib import Path

from attnlab.bench.memory import MiB
from attnlab.bench.timing import _is_cuda, time_call, torch_threads


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
