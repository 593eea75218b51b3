"""The reference of lesson 09 (solutions/attnlab/flash.py) against float64 naive attention, its
Triton kernel under Triton's interpreter (in a subprocess, since the interpreter must be chosen
before the kernel is defined), the module without Triton, the learner's stub, and, where a CUDA
GPU exists, everything on the GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "solutions" / "attnlab" / "flash.py"
STUB = ROOT / "src" / "attnlab" / "flash.py"
CUDA = torch.cuda.is_available()


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def flash():
    """The reference module, loaded from its file under a private name."""
    return _load(REFERENCE, "_attnlab_flash_reference_for_tests")


@pytest.fixture(scope="module")
def stub():
    return _load(STUB, "_attnlab_flash_stub_for_tests")


def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def require_triton():
    """Skip with the reason where Triton is missing, except in CI, where it must be installed."""
    if not triton_importable():
        if os.environ.get("CI") == "true":
            pytest.fail("Triton is not installed, but CI must test the kernel: pip install triton==3.7.1")
        pytest.skip("Triton is not installed (pip install -e .[gpu], or triton==3.7.1)")


def naive(q, k, v, causal=False, scale=None):
    """(out, lse) in float64 from the full matrix; queries that see nothing: out 0, lse -inf."""
    q, k, v = (t.to("cpu", torch.float64) for t in (q, k, v))
    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    n_q, n_k = s.shape[-2:]
    if causal:
        s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
    return p @ v, lse


def assert_matches(out, lse, ref_out, ref_lse, tol):
    assert out.shape == ref_out.shape and lse.shape == ref_lse.shape
    assert torch.isfinite(out).all()
    assert not torch.isnan(lse).any()
    assert torch.equal(torch.isinf(lse.cpu()), torch.isinf(ref_lse))
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=tol, atol=tol)
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse.cpu().double()[finite], ref_lse[finite], rtol=tol, atol=tol)


def randn(*shape, seed=0, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)


# --------------------------------------------------------------------------------------------
# online_softmax
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [1, 3, 4, 16, 100])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_online_softmax_equals_softmax_and_logsumexp(flash, block, dtype):
    x = randn(2, 3, 37, seed=block, dtype=dtype, scale=4.0)
    before = x.clone()
    weights, lse = flash.online_softmax(x, block)
    assert torch.equal(x, before)
    assert weights.dtype == lse.dtype == dtype and lse.shape == (2, 3)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(weights, torch.softmax(x, -1), rtol=tol, atol=tol)
    torch.testing.assert_close(lse, torch.logsumexp(x, -1), rtol=tol, atol=tol)


def test_online_softmax_is_stable_for_extreme_and_masked_entries(flash):
    x = torch.tensor([[1e4, -1e4, 0.0, 9999.0, 5.0], [0.0, 1.0, 2.0, 3.0, 1e4],
                      [-math.inf, -math.inf, -math.inf, 2.0, 1.0], [-math.inf] * 5])
    weights, lse = flash.online_softmax(x, 2)
    assert torch.isfinite(weights).all() and not torch.isnan(lse).any()
    torch.testing.assert_close(weights[:3].double(), torch.softmax(x[:3].double(), -1))
    assert (weights[torch.isinf(x)] == 0).all()
    assert (weights[3] == 0).all() and lse[3] == -math.inf
    torch.testing.assert_close(lse[:3].double(), torch.logsumexp(x[:3].double(), -1))


def test_online_softmax_half_precision_and_bad_arguments(flash):
    x = randn(4, 21, dtype=torch.float16, scale=6.0)
    weights, lse = flash.online_softmax(x, 5)
    assert weights.dtype == lse.dtype == torch.float16
    torch.testing.assert_close(weights.double(), torch.softmax(x.double(), -1), rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="block_size"):
        flash.online_softmax(x, 0)
    with pytest.raises(TypeError, match="floating-point"):
        flash.online_softmax(torch.arange(3), 2)


# --------------------------------------------------------------------------------------------
# flash_attention_torch: forward
# --------------------------------------------------------------------------------------------

CASES = [  # n_q, n_k, causal, block_q, block_k
    (37, 37, False, 16, 16),
    (37, 37, True, 16, 8),
    (20, 53, True, 8, 16),  # bottom-right with fewer queries
    (53, 20, True, 16, 8),  # the first 33 queries see nothing
    (1, 1, True, 4, 4),
    (100, 33, False, 512, 512),  # one block bigger than everything
    (64, 64, True, 1, 1),
]


@pytest.mark.parametrize("n_q, n_k, causal, block_q, block_k", CASES)
def test_forward_matches_float64_naive(flash, n_q, n_k, causal, block_q, block_k):
    q, k, v = randn(2, 3, n_q, 24, seed=1), randn(2, 3, n_k, 24, seed=2), randn(2, 3, n_k, 7, seed=3)
    saved = [t.clone() for t in (q, k, v)]
    out, lse = flash.flash_attention_torch(q, k, v, causal, block_q=block_q, block_k=block_k)
    assert all(torch.equal(a, b) for a, b in zip(saved, (q, k, v)))
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    assert_matches(out, lse, *naive(q, k, v, causal), tol=2e-5)
    if causal and n_q > n_k:
        assert (out[..., : n_q - n_k, :] == 0).all()
        assert (lse[..., : n_q - n_k] == -math.inf).all()


def test_forward_float64_is_exact_and_scale_broadcast_work(flash):
    q, k, v = randn(2, 1, 30, 8, seed=4, dtype=torch.float64), randn(3, 45, 8, seed=5, dtype=torch.float64), \
        randn(3, 45, 5, seed=6, dtype=torch.float64)
    out, lse = flash.flash_attention_torch(q, k, v, True, block_q=7, block_k=11, scale=0.3)
    assert out.shape == (2, 3, 30, 5) and lse.shape == (2, 3, 30) and lse.dtype == torch.float64
    assert_matches(out, lse, *naive(q, k, v, True, 0.3), tol=1e-11)


def test_forward_half_precision_and_extreme_scores(flash):
    q, k, v = (randn(2, n, 32, seed=s, dtype=torch.float16) for s, n in ((7, 40), (8, 50), (9, 50)))
    out, lse = flash.flash_attention_torch(q, k, v, True, block_q=16, block_k=16)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    assert_matches(out, lse, *naive(q, k, v, True), tol=1e-2)
    q, k, v = randn(2, 30, 16, seed=10, scale=1000.0), randn(2, 30, 16, seed=11), randn(2, 30, 16, seed=12)
    out, lse = flash.flash_attention_torch(q, k, v, block_q=8, block_k=8)
    assert_matches(out, lse, *naive(q, k, v), tol=1e-3)


def test_forward_never_builds_the_full_matrix(flash):
    from attnlab.bench import peak_memory

    n = 2048
    q, k, v = (randn(1, n, 64, seed=s) for s in range(3))
    peak = peak_memory(lambda: flash.flash_attention_torch(q, k, v, block_q=128, block_k=256), "cpu")
    assert peak < n * n * 4 / 8, f"{peak / 2**20:.1f} MiB at n={n}"


@pytest.mark.parametrize("args, error, match", [
    ((torch.randn(2, 4, 8), torch.randn(2, 5, 6), torch.randn(2, 5, 8)), ValueError, "last dimension d"),
    ((torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 6, 8)), ValueError, "number of keys"),
    ((torch.randn(2, 4, 8), torch.randn(2, 5, 8).double(), torch.randn(2, 5, 8)), TypeError, "one dtype"),
    ((torch.randn(2, 4, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8)), ValueError, "broadcast"),
    ((torch.randn(8), torch.randn(5, 8), torch.randn(5, 8)), ValueError, r"\(\.\.\., n, d\)"),
])
def test_forward_refuses_bad_inputs_clearly(flash, args, error, match):
    with pytest.raises(error, match=match):
        flash.flash_attention_torch(*args)


def test_forward_refuses_bad_block_sizes(flash):
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="block_q"):
        flash.flash_attention_torch(q, q, q, block_q=0)


# --------------------------------------------------------------------------------------------
# flash_attention_torch: the grid of query blocks over threads
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_q, n_k, causal, block_q", [
    (37, 37, False, 8), (37, 45, True, 8), (50, 20, True, 16), (20, 50, True, 8), (9, 4, True, 3),
    (64, 64, True, 16), (5, 5, False, 512),
])
def test_the_grid_gives_the_same_result_as_one_call(flash, n_q, n_k, causal, block_q):
    q, k, v = randn(2, 3, n_q, 8, seed=80), randn(2, 3, n_k, 8, seed=81), randn(2, 3, n_k, 5, seed=82)
    one_out, one_lse = flash.flash_attention_torch(q, k, v, causal, block_q=block_q, block_k=8, threads=1)
    grid_out, grid_lse = flash.flash_attention_torch(q, k, v, causal, block_q=block_q, block_k=8, threads=3)
    assert grid_out.dtype == one_out.dtype and grid_lse.dtype == one_lse.dtype
    torch.testing.assert_close(grid_out, one_out, rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.isinf(grid_lse), torch.isinf(one_lse))
    finite = torch.isfinite(one_lse)
    torch.testing.assert_close(grid_lse[finite], one_lse[finite], rtol=1e-6, atol=1e-6)
    assert_matches(grid_out, grid_lse, *naive(q, k, v, causal), tol=2e-5)


def test_the_grid_hands_one_block_of_queries_per_call_to_several_threads(flash, monkeypatch):
    import threading

    calls = []
    reference = flash.flash_forward

    def recording(q, k, v, causal, scale, block_q, block_k):
        calls.append((threading.get_ident(), tuple(q.shape), tuple(k.shape), torch.get_num_threads(),
                      torch.is_grad_enabled()))
        return reference(q, k, v, causal, scale, block_q, block_k)

    monkeypatch.setattr(flash, "flash_forward", recording)
    q, k, v = (randn(2, 64, 8, seed=s).requires_grad_(True) for s in (90, 91, 92))
    before = torch.get_num_threads()
    out, lse = flash.flash_attention_torch(q, k, v, True, block_q=16, block_k=16, threads=2)
    assert torch.get_num_threads() == before  # restored
    assert len(calls) == 2 * 4 and {shape for _, shape, _, _, _ in calls} == {(1, 16, 8)}
    assert sorted(kshape[1] for _, _, kshape, _, _ in calls) == [16, 16, 32, 32, 48, 48, 64, 64]
    assert all(threads == 1 and not grad for _, _, _, threads, grad in calls)
    assert threading.get_ident() not in {ident for ident, *_ in calls}
    (out.sum() + lse.sum()).backward()  # gradients still flow through the autograd Function
    assert q.grad is not None and torch.isfinite(q.grad).all()
    calls.clear()
    flash.flash_attention_torch(q, k, v, True, block_q=16, block_k=16, threads=1)
    assert [shape for _, shape, _, _, _ in calls] == [(2, 64, 8)]


def test_gradcheck_through_the_grid(flash):
    # n_q < n_k: every query sees a key (a log-sum-exp of -inf has no finite difference)
    q = randn(2, 7, 4, seed=93, dtype=torch.float64).requires_grad_(True)
    k = randn(2, 9, 4, seed=94, dtype=torch.float64).requires_grad_(True)
    v = randn(2, 9, 3, seed=95, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash.flash_attention_torch(q, k, v, True, block_q=4, block_k=3, threads=2), (q, k, v))


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_are_refused(flash, threads):
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="threads"):
        flash.flash_attention_torch(q, q, q, threads=threads)


# --------------------------------------------------------------------------------------------
# flash_attention_torch: backward by recomputation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_q, n_k, causal, use_lse", [
    (11, 13, False, False), (9, 10, False, True), (7, 12, True, True), (12, 7, True, True),
])
def test_gradients_match_autograd_through_naive_attention(flash, n_q, n_k, causal, use_lse):
    base = [randn(2, n, d, seed=s, dtype=torch.float64) for s, n, d in ((20, n_q, 6), (21, n_k, 6), (22, n_k, 4))]
    g_out, g_lse = randn(2, n_q, 4, seed=23, dtype=torch.float64), randn(2, n_q, seed=24, dtype=torch.float64)

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_(True) for t in base]
        out, lse = fn(*leaves)
        loss = (out * g_out).sum()
        if use_lse:
            loss = loss + (lse.masked_fill(torch.isinf(lse), 0.0) * g_lse).sum()
        loss.backward()
        return [leaf.grad for leaf in leaves]

    mine = grads(lambda q, k, v: flash.flash_attention_torch(q, k, v, causal, block_q=5, block_k=4))
    want = grads(lambda q, k, v: naive(q, k, v, causal))
    for a, b in zip(mine, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_gradcheck_and_broadcast_gradients(flash):
    q = randn(2, 1, 6, 4, seed=30, dtype=torch.float64).requires_grad_(True)
    k = randn(3, 9, 4, seed=31, dtype=torch.float64).requires_grad_(True)
    v = randn(3, 9, 3, seed=32, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash.flash_attention_torch(q, k, v, True, block_q=4, block_k=5), (q, k, v))


def test_backward_float32(flash):
    base = [randn(2, n, 8, seed=s) for s, n in ((40, 16), (41, 24), (42, 24))]
    leaves = [t.clone().requires_grad_(True) for t in base]
    out, lse = flash.flash_attention_torch(*leaves, True, block_q=8, block_k=8)
    (out.sum() + lse.sum()).backward()
    ref = [t.double().requires_grad_(True) for t in base]
    r_out, r_lse = naive(*ref, True)
    (r_out.sum() + r_lse.sum()).backward()
    for a, b in zip(leaves, ref):
        assert a.grad.dtype == torch.float32
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------
# Triton: under the interpreter, in a fresh process; without Triton; the stub
# --------------------------------------------------------------------------------------------

_TRITON_SCRIPT = """
import json, math, torch
import attnlab
from attnlab import flash

def naive(q, k, v, causal):
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    n_q, n_k = s.shape[-2:]
    if causal:
        s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q), -math.inf)
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None]) @ v, lse

results = []
cases = [((2,), 40, 40, 16, False, "float32"), ((1, 2), 37, 50, 32, True, "float32"),
         ((2,), 24, 56, 16, True, "float32"), ((1,), 50, 20, 16, True, "float32"),
         ((2,), 33, 33, 24, True, "float32"), ((2,), 40, 45, 32, True, "float16"),
         ((3,), 1, 1, 16, False, "float32"), ((2,), 65, 70, 64, True, "float16")]
for batch, n_q, n_k, d, causal, dtype in cases:
    g = torch.Generator().manual_seed(n_q * 100 + n_k)
    q, k, v = (torch.randn(*batch, n, d, generator=g).to(getattr(torch, dtype)) for n in (n_q, n_k, n_k))
    out, lse = flash.flash_attention_triton(q, k, v, causal)
    ref_out, ref_lse = naive(q, k, v, causal)
    finite = torch.isfinite(ref_lse)
    results.append({
        "case": [batch, n_q, n_k, d, causal, dtype],
        "out_dtype": str(out.dtype), "lse_dtype": str(lse.dtype),
        "out_error": (out.double() - ref_out).abs().max().item(),
        "lse_error": (lse.double()[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0,
        "inf_pattern_ok": bool(torch.equal(torch.isinf(lse), ~finite)) and not bool(torch.isnan(lse).any()),
        "zero_rows_ok": bool((out[..., : max(n_q - n_k, 0), :] == 0).all()) if causal else True,
    })
try:
    flash.flash_attention_triton(q.bfloat16(), k.bfloat16(), v.bfloat16())
    bf16 = "no error"
except TypeError as error:
    bf16 = str(error)
print(json.dumps({"results": results, "bf16": bf16, "interpreted": flash.INTERPRETED}))
"""


@pytest.mark.skipif(CUDA, reason="the interpreter test is for machines without a GPU")
def test_triton_kernel_under_the_interpreter_matches_naive_attention(python):
    require_triton()
    done = python(_TRITON_SCRIPT, env={"TRITON_INTERPRET": "1", "ATTNLAB_REFERENCE": "flash"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["interpreted"] is True
    for result in report["results"]:
        tol = 1e-4 if result["case"][-1] == "float32" else 1e-2
        assert result["out_error"] < tol and result["lse_error"] < tol, result
        assert result["inf_pattern_ok"] and result["zero_rows_ok"], result
        assert result["lse_dtype"] == "torch.float32"
        assert result["out_dtype"] == f"torch.{result['case'][-1]}"
    assert "interpreter" in report["bf16"] and "bfloat16" in report["bf16"]


@pytest.mark.skipif(CUDA, reason="on a GPU the kernel is compiled, with or without the variable")
def test_triton_on_cpu_without_the_interpreter_says_to_set_it_before_import(python):
    require_triton()
    code = textwrap.dedent("""
        import torch
        from attnlab import flash
        q = torch.randn(1, 8, 16)
        try:
            flash.flash_attention_triton(q, q, q)
        except RuntimeError as error:
            print(error)
    """)
    done = python(code, env={"ATTNLAB_REFERENCE": "flash", "TRITON_INTERPRET": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TRITON_INTERPRET=1" in done.stdout and "before importing" in done.stdout


def test_module_imports_without_triton_and_says_how_to_install_it(python):
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # makes `import triton` raise ImportError
        sys.modules["triton.language"] = None
        import torch
        from attnlab import flash
        try:
            flash.flash_attention_triton(torch.randn(5, 4), torch.randn(6, 4), torch.randn(6, 4))
        except RuntimeError as error:
            print("RAISED", error)
        if attnlab_reference:
            out, lse = flash.flash_attention_torch(torch.randn(5, 4), torch.randn(6, 4), torch.randn(6, 4))
            print("TORCH VERSION WORKS", tuple(out.shape), tuple(lse.shape))
    """)
    for reference in (True, False):  # the reference and the learner's stub
        env = {"ATTNLAB_REFERENCE": "flash"} if reference else {}
        done = python(f"attnlab_reference = {reference}\n" + code, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "RAISED flash_attention_triton cannot run: Triton is not installed" in done.stdout
        assert "pip install -e .[gpu]" in done.stdout and "triton==3.7.1" in done.stdout
        assert ("TORCH VERSION WORKS (5, 4) (5,)" in done.stdout) is reference


def test_stub_raises_not_implemented_naming_lesson_09(stub):
    x = torch.randn(3, 5)
    q = torch.randn(2, 6, 4)
    for call, name in [(lambda: stub.online_softmax(x, 2), "online_softmax"),
                       (lambda: stub.flash_attention_torch(q, q, q), "flash_forward")]:
        with pytest.raises(NotImplementedError, match=rf"Lesson 09: {name}\(\) in attnlab/flash.py"):
            call()
    with pytest.raises(NotImplementedError, match=r"use_reference\('flash'\)"):
        stub.flash_backward(q, q[..., 0], q, q, q, q, q[..., 0], False, 0.5, 4, 4)
    message = stub._unwritten(stub.flash_forward_kernel)
    assert message and message.startswith("Lesson 09: flash_forward_kernel()")


def test_the_reference_kernel_is_not_taken_for_a_stub(flash):
    assert flash._unwritten(flash.flash_forward_kernel) is None


def test_the_warm_up_kernel_is_complete_in_the_stub_and_its_source_readable(flash, stub):
    for module in (flash, stub):
        source = module.kernel_source(module.softmax_rows_kernel)
        assert source.startswith("def softmax_rows_kernel(")  # the decorator is left out
        assert "tl.program_id(0)" in source and "tl.store" in source
        assert module._unwritten(module.softmax_rows_kernel) is None
    assert "NotImplementedError" in stub.kernel_source(stub.flash_forward_kernel)


@pytest.mark.parametrize("x, error, match", [
    (torch.randn(3, 4, 5), ValueError, "2-d"),
    (torch.randn(3, 5).double(), TypeError, "float64"),
    (torch.randn(3, 0), ValueError, "1 to 65536"),
])
def test_the_warm_up_launcher_refuses_bad_input(flash, x, error, match):
    with pytest.raises(error, match=match):
        flash.softmax_triton(x)


_WARMUP_SCRIPT = """
import json, math, torch
from attnlab import flash
results = {}
for rows, cols, dtype in ((5, 37, "float32"), (1, 1, "float32"), (3, 1000, "float16"), (0, 8, "float32")):
    x = (4 * torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))).to(getattr(torch, dtype))
    if rows > 1:
        x[1, : cols // 2] = -math.inf  # masked entries in one row
    y = flash.softmax_triton(x)
    want = torch.softmax(x.double(), -1)
    results[f"{rows}x{cols} {dtype}"] = {"dtype": str(y.dtype), "shape": list(y.shape),
                                         "error": (y.double() - want).abs().max().item() if rows else 0.0}
strided = torch.randn(4, 40)[:, ::2]
results["strided"] = {"error": (flash.softmax_triton(strided) - torch.softmax(strided, -1)).abs().max().item()}
print(json.dumps(results))
"""


@pytest.mark.skipif(CUDA, reason="the interpreter test is for machines without a GPU")
def test_the_warm_up_kernel_under_the_interpreter_matches_torch_softmax(python):
    require_triton()
    done = python(_WARMUP_SCRIPT, env={"TRITON_INTERPRET": "1"})  # the stub's kernel is complete
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, result in results.items():
        assert result["error"] < (2e-3 if "float16" in name else 1e-6), (name, result)
    assert results["3x1000 float16"]["dtype"] == "torch.float16"
    assert results["0x8 float32"]["shape"] == [0, 8]


def test_the_online_softmax_kernel_is_complete_in_the_stub_and_its_launcher_refuses_bad_input(flash, stub):
    # the step between the warm-up and exercise 4 is finished code to read, in the learner's file too
    for module in (flash, stub):
        source = module.kernel_source(module.online_softmax_kernel)
        assert source.startswith("def online_softmax_kernel(") and "for start in range(0, n_cols, BLOCK_N)" in source
        assert module._unwritten(module.online_softmax_kernel) is None
    for x, block_n, error, match in [(torch.randn(3, 4, 5), 16, ValueError, "2-d"),
                                     (torch.randn(3, 5).double(), 16, TypeError, "float64"),
                                     (torch.randn(3, 5), 24, ValueError, "power of two"),
                                     (torch.randn(3, 5), 8, ValueError, "at least 16")]:
        with pytest.raises(error, match=match):
            flash.online_softmax_triton(x, block_n=block_n)


_ONLINE_SOFTMAX_SCRIPT = """
import json, math, torch
from attnlab import flash
results = {}
for rows, cols, block_n, dtype in ((5, 1000, 128, "float32"), (33, 37, 16, "float32"), (3, 300, 64, "float16"),
                                   (1, 1, 16, "float32"), (4, 0, 16, "float32")):
    x = (4 * torch.randn(rows, cols, generator=torch.Generator().manual_seed(cols))).to(getattr(torch, dtype))
    if rows > 2 and cols > 2:
        x[1, : cols // 2] = -math.inf  # masked entries in one row
        x[2] = -math.inf               # a row that sees nothing
    y, lse = flash.online_softmax_triton(x, block_n=block_n)
    want_y = torch.softmax(x.double(), -1).nan_to_num(0.0)
    want_lse = torch.logsumexp(x.double(), -1)
    finite = torch.isfinite(want_lse)
    results[f"{rows}x{cols}/{block_n} {dtype}"] = {
        "dtype": str(y.dtype), "lse_dtype": str(lse.dtype), "shape": list(y.shape),
        "error": (y.double() - want_y).abs().max().item() if x.numel() else 0.0,
        "lse_error": (lse.double()[finite] - want_lse[finite]).abs().max().item() if finite.any() else 0.0,
        "empty_rows_right": bool((lse[~finite] == -math.inf).all()) and bool((y[~finite] == 0).all()),
    }
print(json.dumps(results))
"""


@pytest.mark.skipif(CUDA, reason="the interpreter test is for machines without a GPU")
def test_the_online_softmax_kernel_under_the_interpreter_matches_torch(python):
    require_triton()
    done = python(_ONLINE_SOFTMAX_SCRIPT, env={"TRITON_INTERPRET": "1"})  # the stub's kernel is complete
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name, result in results.items():
        tolerance = 2e-3 if "float16" in name else 1e-6
        assert result["error"] < tolerance and result["lse_error"] < 1e-5, (name, result)
        assert result["empty_rows_right"] and result["lse_dtype"] == "torch.float32", (name, result)
    assert results["3x300/64 float16"]["dtype"] == "torch.float16"
    assert results["4x0/16 float32"]["shape"] == [4, 0]


_COMPILE_SCRIPT = """
import triton
from triton.backends.compiler import GPUTarget
from attnlab import flash
compiled = {}
for name, kernel, signature, constants in (
    ("online_softmax_kernel", flash.online_softmax_kernel,
     {"X": "*fp16", "Y": "*fp16", "Lse": "*fp32", "n_rows": "i32", "n_cols": "i32", "stride_x": "i32",
      "stride_y": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}, {"BLOCK_M": 16, "BLOCK_N": 128}),
    ("softmax_rows_kernel", flash.softmax_rows_kernel,
     {"X": "*fp32", "Y": "*fp32", "n_cols": "i32", "stride_x": "i32", "stride_y": "i32", "BLOCK": "constexpr"},
     {"BLOCK": 1024}),
):
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constants)
    compiled[name] = sorted(triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm)
print(compiled)
"""


def test_the_finished_kernels_compile_for_a_gpu_without_one(python):
    """Compiled for an H100/H200 (sm_90) by Triton's own compiler, which needs no GPU: a kernel that
    only the interpreter has run could still fail to type-check where learners compile it."""
    require_triton()
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        pytest.skip("Triton's NVIDIA backend is not installed")
    done = python(_COMPILE_SCRIPT, env={"TRITON_INTERPRET": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("'cubin'") == 2, done.stdout[-2000:]


@pytest.mark.skipif(CUDA, reason="the interpreter test is for machines without a GPU")
def test_triton_stub_raises_not_implemented_error_under_the_interpreter(python):
    require_triton()
    code = textwrap.dedent("""
        import torch
        from attnlab import flash
        q = torch.randn(1, 8, 16)
        try:
            flash.flash_attention_triton(q, q, q)
        except NotImplementedError as error:
            print("NotImplementedError:", error)
    """)
    done = python(code, env={"TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NotImplementedError: Lesson 09: flash_forward_kernel()" in done.stdout


# --------------------------------------------------------------------------------------------
# On a CUDA GPU (skipped elsewhere): `scripts/gpu_flash_check.sh` runs these on the H200
# --------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("d", [64, 128, 80])
@pytest.mark.parametrize("n_q, n_k, causal", [(256, 256, False), (300, 300, True), (200, 517, True),
                                              (517, 200, True)])
def test_gpu_triton_and_tiled_match_float32_reference(flash, dtype, d, n_q, n_k, causal):
    require_triton()
    q, k, v = (randn(2, 3, n, d, seed=s, dtype=dtype).cuda() for s, n in ((50, n_q), (51, n_k), (52, n_k)))
    ref_out, ref_lse = naive(q, k, v, causal)
    low = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 5e-3}[dtype]  # fp32: TF32 dots
    for name, fn in (("triton", flash.flash_attention_triton),
                     ("tiled", lambda *a: flash.flash_attention_torch(*a, block_q=128, block_k=128))):
        out, lse = fn(q, k, v, causal)
        assert out.dtype == dtype and out.device.type == "cuda", name
        tol = low if name == "triton" else {torch.float32: 1e-4}.get(dtype, low)
        assert_matches(out, lse, ref_out, ref_lse, tol)


@gpu
def test_gpu_triton_error_is_within_twice_sdpa_low_precision_error(flash):
    require_triton()
    q, k, v = (randn(2, 8, 1024, 64, seed=s, dtype=torch.bfloat16).cuda() for s in (60, 61, 62))
    reference = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    ours = flash.flash_attention_triton(q, k, v, True)[0].float()
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    assert (ours - reference).abs().max() <= 2 * (theirs - reference).abs().max() + 1e-6


@gpu
def test_gpu_warm_up_kernel(flash):
    require_triton()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = randn(33, 1000, seed=99, dtype=dtype).cuda()
        y = flash.softmax_triton(x)
        assert y.dtype == dtype and y.device.type == "cuda"
        torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1e-2, atol=1e-2)


@gpu
def test_gpu_online_softmax_kernel(flash):
    require_triton()
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = randn(33, 1000, seed=98, dtype=dtype).cuda()
        x[1, :500] = -math.inf
        y, lse = flash.online_softmax_triton(x, block_n=128)
        assert y.dtype == dtype and lse.dtype == torch.float32 and y.device.type == "cuda"
        torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(lse.double(), torch.logsumexp(x.double(), -1), rtol=1e-4, atol=1e-4)


@gpu
def test_gpu_backward_of_the_tiled_version(flash):
    base = [randn(2, n, 64, seed=s).cuda() for s, n in ((70, 200), (71, 300), (72, 300))]
    leaves = [t.clone().requires_grad_(True) for t in base]
    out, lse = flash.flash_attention_torch(*leaves, True, block_q=64, block_k=64)
    (out.sum() + lse.sum()).backward()
    ref = [t.double().requires_grad_(True) for t in base]
    r_out, r_lse = naive(*ref, True)
    (r_out.sum() + r_lse.sum()).backward()
    for a, b in zip(leaves, ref):
        torch.testing.assert_close(a.grad.cpu().double(), b.grad.cpu(), rtol=1e-3, atol=1e-3)
