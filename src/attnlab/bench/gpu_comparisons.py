"""Lesson 09's GPU grid: naive, tiled, Triton and SDPA's backends timed, and their errors.

- ``gpu_implementations(flash)``: the implementations compared, SDPA forced to each backend.
- ``gpu_comparison``: their speed in FlashAttention-2's setting; ``gpu_accuracy``: their errors
  against a float32 reference.
"""

from __future__ import annotations

from typing import Callable, Sequence

from attnlab.bench.comparisons import _error_text, _first, _inputs, measure, naive_attention, sdpa_attention


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
