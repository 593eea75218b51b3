"""The visible checks of lesson 09: they pass on the reference and fail, with the right diagnostic,
on deliberately broken implementations; a stub's NotImplementedError passes through unchanged."""

from __future__ import annotations

import importlib.util
import math
import os
import textwrap
from pathlib import Path

import pytest
import torch

from tests.helpers import fails
from attnlab import checks

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def flash():
    """A fresh copy of the reference (tests may patch its pieces)."""
    return _load(ROOT / "solutions" / "attnlab" / "flash.py", "_attnlab_flash_reference_for_checks")


@pytest.fixture(scope="module")
def stub():
    return _load(ROOT / "src" / "attnlab" / "flash.py", "_attnlab_flash_stub_for_checks")




# ---------------------------------------------------------------------------- the reference passes


def test_the_checks_pass_on_the_reference(flash, capsys):
    checks.check_online_softmax(flash.online_softmax)
    checks.check_flash_attention_torch(flash.flash_attention_torch)
    checks.check_flash_backward(flash.flash_attention_torch)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3:] == [
        "✓ online_softmax: 7 checks passed",
        "✓ flash_attention_torch: 11 checks passed",
        "✓ flash_backward: 5 checks passed",
    ]


def test_the_triton_check_passes_on_the_reference_kernel(python):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    code = "from attnlab import checks, flash\nchecks.check_flash_attention_triton(flash.flash_attention_triton)\n"
    # on a GPU, keep the caller's choice of autotuning (the fixture strips ATTNLAB_ variables)
    device = ({"ATTNLAB_TRITON_AUTOTUNE": os.environ.get("ATTNLAB_TRITON_AUTOTUNE", "1")} if CUDA
              else {"TRITON_INTERPRET": "1"})
    done = python(code, env={"ATTNLAB_REFERENCE": "flash", **device})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "✓ flash_attention_triton: 7 checks passed" in done.stdout


def test_the_triton_check_says_why_and_returns_where_triton_is_missing(python):
    """macOS and Windows have no Triton wheels: the check explains and lets Run All go on."""
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # makes `import triton` raise ImportError
        sys.modules["triton.language"] = None
        from attnlab import checks, flash
        checks.check_flash_attention_triton(flash.flash_attention_triton)
        print("THE NOTEBOOK GOES ON")
    """)
    for env in ({"ATTNLAB_REFERENCE": "flash"}, {}):  # the reference, and the learner's stub
        done = python(code, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
        assert "not checked on this machine" in out and "Triton is not installed" in out
        assert "macOS or Windows" in out and "graded" in out and "Linux" in out
        assert "Exercise 4 without Triton" in out
        assert out.strip().endswith("THE NOTEBOOK GOES ON")


def test_the_forward_check_exercises_one_call_and_the_grid(flash, monkeypatch):
    """threads=1 hands flash_forward the whole batch; threads=2, one block of queries at a time."""
    seen = []
    reference = flash.flash_forward

    def recording(q, k, v, *rest):
        seen.append((q.shape[0], q.shape[1]))
        return reference(q, k, v, *rest)

    monkeypatch.setattr(flash, "flash_forward", recording)
    checks.check_flash_attention_torch(flash.flash_attention_torch)
    assert (3, 29) in seen  # one call on the whole batch of the threads=1 case
    assert (1, 8) in seen  # one block of queries of one slice, in the threads=2 case


def only_the_first_query_block(q, k, v, causal, scale, block_q, block_k):
    """A common mistake: the loop over blocks of queries stops after the first block."""
    from attnlab.checks.lesson09 import reference_flash

    out, lse = reference_flash(q, k, v, causal, scale)
    out, lse = out.to(q.dtype), lse.float() if q.dtype != torch.float64 else lse
    out[:, block_q:] = 0.0
    return out, lse


def test_a_forward_that_handles_only_one_query_block_fails(flash, monkeypatch):
    monkeypatch.setattr(flash, "flash_forward", only_the_first_query_block)
    fails(checks.check_flash_attention_torch, flash.flash_attention_torch, "out",
          r"blocks of queries [\d:, ]+ are wrong while the other blocks are right")


# ---------------------------------------------------------------------------- stubs pass through


def test_stub_not_implemented_errors_pass_through_unchanged(stub, flash, monkeypatch):
    for check, fn, name in [(checks.check_online_softmax, stub.online_softmax, "online_softmax"),
                            (checks.check_flash_attention_torch, stub.flash_attention_torch, "flash_forward"),
                            (checks.check_flash_backward, stub.flash_attention_torch, "flash_forward")]:
        with pytest.raises(NotImplementedError) as caught:
            check(fn)
        assert str(caught.value).startswith(f"Lesson 09: {name}()")
    # a written forward pass with the stub's backward: the backward's message comes through
    monkeypatch.setattr(flash, "flash_backward", stub.flash_backward)
    with pytest.raises(NotImplementedError, match=r"^Lesson 09: flash_backward\(\)"):
        checks.check_flash_backward(flash.flash_attention_torch)


def test_the_triton_stub_passes_through_the_triton_check(python):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    code = textwrap.dedent("""
        from attnlab import checks, flash
        try:
            checks.check_flash_attention_triton(flash.flash_attention_triton)
        except NotImplementedError as error:
            print("NotImplementedError:", error)
    """)
    done = python(code, env={"ATTNLAB_TRITON_AUTOTUNE": "0"} if CUDA else {"TRITON_INTERPRET": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NotImplementedError: Lesson 09: flash_forward_kernel()" in done.stdout


# ---------------------------------------------------------------------------- broken: online softmax


def softmax_without_rescaling(x, block_size=128):
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m = torch.maximum(m, block.amax(-1))
        l = l + torch.exp(block - m[..., None]).sum(-1)  # forgot l * exp(m_old - m)
    return torch.exp(x - m[..., None]) / l[..., None], m + torch.log(l)


def softmax_without_guard(x, block_size=128):
    m = torch.full(x.shape[:-1], -math.inf, dtype=x.dtype)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)  # nan for -inf rows
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None], m + torch.log(l)


def softmax_lse_without_max(x, block_size=128):
    exps = torch.exp(x - x.amax(-1, keepdim=True))
    return exps / exps.sum(-1, keepdim=True), torch.log(exps.sum(-1))


def test_online_softmax_diagnostics():
    fails(checks.check_online_softmax, softmax_without_rescaling, "weights", r"multiply what you have summed",
          r"exp\(m - m_new\)")
    fails(checks.check_online_softmax, softmax_without_guard, "-inf", r"exp\(-inf - \(-inf\)\)")
    fails(checks.check_online_softmax, softmax_lse_without_max, "lse", "you left out m")
    fails(checks.check_online_softmax, lambda x, b: softmax_lse_without_max(x)[0], "must return a pair")


def test_online_softmax_may_not_borrow_pytorch_softmax_or_logsumexp():
    fails(checks.check_online_softmax, lambda x, b: (torch.softmax(x, -1), torch.logsumexp(x, -1)),
          r"calls softmax \(torch\.softmax", r"torch\.logsumexp", "write yourself")
    fails(checks.check_online_softmax, lambda x, b: (x.softmax(-1), softmax_lse_without_max(x)[1]),
          "Tensor.softmax")


@pytest.fixture
def two_torch_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    yield
    torch.set_num_threads(threads)


def test_tiled_attention_may_not_borrow_pytorch_fused_attention(flash, monkeypatch, two_torch_threads):
    """Forward or backward: CPU SDPA returns the log-sum-exp too, so both are policed, also when the
    forward grid spreads the blocks over threads (as it does with more than one torch thread)."""
    reference_forward, reference_backward = flash.flash_forward, flash.flash_backward

    def fused_forward(q, k, v, causal, scale, block_q, block_k):
        _, lse = reference_forward(q, k, v, causal, scale, block_q, block_k)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
        return out, lse

    monkeypatch.setattr(flash, "flash_forward", fused_forward)
    fails(checks.check_flash_attention_torch, flash.flash_attention_torch, "scaled_dot_product_attention")
    fails(checks.check_flash_backward, flash.flash_attention_torch, "scaled_dot_product_attention")

    def fused_backward(grad_out, grad_lse, q, k, v, *rest):
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = torch.nn.functional.scaled_dot_product_attention(*leaves)
            torch.autograd.grad(out, leaves, grad_out)
        return reference_backward(grad_out, grad_lse, q, k, v, *rest)

    monkeypatch.setattr(flash, "flash_forward", reference_forward)
    monkeypatch.setattr(flash, "flash_backward", fused_backward)
    fails(checks.check_flash_backward, flash.flash_attention_torch, "your flash_backward calls",
          "scaled_dot_product_attention")


def test_a_hint_is_dropped_where_its_mistake_gives_the_right_answer_or_another_mistakes():
    from attnlab.checks.lesson09 import _distinct

    right = torch.tensor([1.0, 2.0])
    found = _distinct({"same as right": right.clone(), "first": right + 1, "second": right + 1,
                       "third": right * 3}, right)
    assert found.keys() == {"first; or else, second", "third"}


# ---------------------------------------------------------------------------- broken: forward


def full_matrix_forward(q, k, v, causal, scale, block_q, block_k, mistake=None):
    """Correct values from the whole score matrix, or with one deliberate ``mistake``."""
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = (q.to(work) @ k.to(work).transpose(1, 2)) * scale
    n_q, n_k = s.shape[-2:]
    if causal:
        diagonal = 0 if mistake == "top-left" else n_k - n_q
        s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal), -math.inf)
    m = s.amax(-1, keepdim=True)
    shift = m.masked_fill(m == -math.inf, 0.0)
    p = torch.exp(s - shift)
    l = p.sum(-1, keepdim=True)
    out = (p @ v.to(work)) / l.masked_fill(l == 0, 1.0)
    lse = (shift + torch.log(l)).squeeze(-1).masked_fill(l.squeeze(-1) == 0, -math.inf)
    if mistake == "log(l)":
        lse = torch.log(l).squeeze(-1)
    if mistake == "base 2":
        lse = lse / math.log(2.0)
    return out.to(q.dtype), lse


@pytest.mark.parametrize("mistake, patterns", [
    ("top-left", ["causal", "top-left"]),
    ("log(l)", ["lse", r"without the maximum m"]),
    ("base 2", ["lse", "base 2"]),
    (None, ["never builds", r"n x n"]),
])
def test_forward_diagnostics(flash, monkeypatch, mistake, patterns):
    monkeypatch.setattr(flash, "flash_forward",
                        lambda *args: full_matrix_forward(*args, mistake=mistake))
    fails(checks.check_flash_attention_torch, flash.flash_attention_torch, *patterns)


def test_forward_nan_for_queries_that_see_nothing_is_reported(flash, monkeypatch):
    def nan_rows(q, k, v, causal, scale, block_q, block_k):
        out, lse = full_matrix_forward(q, k, v, causal, scale, block_q, block_k)
        if causal and q.shape[1] > k.shape[1]:
            out[:, 0] = math.nan
        return out, lse

    monkeypatch.setattr(flash, "flash_forward", nan_rows)
    fails(checks.check_flash_attention_torch, flash.flash_attention_torch, "n_q > n_k", "nan")


# ---------------------------------------------------------------------------- broken: backward


def test_backward_diagnostics(flash, monkeypatch):
    reference = flash.flash_backward

    def ignores_grad_lse(grad_out, grad_lse, *rest):
        return reference(grad_out, torch.zeros_like(grad_lse), *rest)

    monkeypatch.setattr(flash, "flash_backward", ignores_grad_lse)
    fails(checks.check_flash_backward, flash.flash_attention_torch, "through lse", "grad_lse is ignored")

    def forgets_scale(grad_out, grad_lse, q, k, v, out, lse, causal, scale, block_q, block_k):
        dq, dk, dv = reference(grad_out, grad_lse, q, k, v, out, lse, causal, scale, block_q, block_k)
        return dq / scale, dk / scale, dv

    monkeypatch.setattr(flash, "flash_backward", forgets_scale)
    fails(checks.check_flash_backward, flash.flash_attention_torch, "dq", "scale is missing")


def test_triton_check_diagnostics_with_a_plain_function():
    """The Triton check judges any function with the kernel's signature (here plain PyTorch)."""
    def top_left(q, k, v, causal=False):
        out, lse = full_matrix_forward(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]),
                                       v.reshape(-1, *v.shape[-2:]), causal, q.shape[-1] ** -0.5, 0, 0,
                                       mistake="top-left")
        return out.reshape(q.shape[:-1] + v.shape[-1:]), lse.float().reshape(q.shape[:-1])

    fails(checks.check_flash_attention_triton, top_left, "causal", "top-left")
