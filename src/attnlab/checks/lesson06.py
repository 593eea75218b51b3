"""Visible checks of lesson 06: ``FeedForward``, ``LayerNorm``, ``RMSNorm`` and ``Residual``.

Each check builds the learner's module, copies random weights into it by name, and compares it with
a trusted reference on the same weights: a float64 feed-forward block written out here,
``torch.nn.LayerNorm`` and ``torch.nn.RMSNorm``, and the formulas of the two placements of a
residual connection. Typical mistakes are recognised and named ("you normalized after adding the
residual"). The norms are policed (``attnlab.shortcuts``): calling ``F.layer_norm`` or
``F.rms_norm`` fails the check, as it fails the trusted cases.

``check_swiglu_width`` checks the lesson's ungraded exercise, a width the learner derives: it
counts both blocks with PyTorch's own ``nn.Linear`` and accepts every whole number as close to
equal as any other.
"""

from __future__ import annotations

import copy
import math
import numbers
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.checks.common import (
    assert_close,
    assert_dtype,
    assert_finite,
    assert_not_modified,
    assert_shape,
    explain_mismatch,
    run_checks,
    tolerances,
)
from attnlab.shortcuts import police

__all__ = ["check_feed_forward", "check_layer_norm", "check_rms_norm", "check_residual", "check_swiglu_width"]


# assert_not_modified is given ``module.forward``: the signature of a module's ``__call__`` is
# (*args, **kwargs), which would hide the tensor arguments from it.


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(seed: int, *shape: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    return offset + scale * torch.randn(*shape, generator=_seeded(seed), dtype=torch.float64)


def _parameters(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def _expect_parameters(module: nn.Module, expected: dict[str, tuple[int, ...]], what: str, hint: str) -> None:
    got = _parameters(module)
    if got != expected:
        listed = ", ".join(f"{n} {s}" for n, s in sorted(got.items())) or "none"
        wanted = ", ".join(f"{n} {s}" for n, s in sorted(expected.items()))
        raise AssertionError(f"{what} has parameters {listed}; expected {wanted}. {hint}")


def _distinct_hint(actual: torch.Tensor, right: torch.Tensor, candidates: Mapping[str, torch.Tensor]) -> str:
    """``explain_mismatch`` over the candidates that tell their mistake apart on this input: one
    whose output coincides with the right answer or with another candidate's names nothing."""
    rtol, atol = tolerances(getattr(actual, "dtype", "float64"))
    atol *= 10  # as explain_mismatch

    def same(a, b):
        a, b = a.detach().double(), b.detach().double()
        return a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)

    kept = {hint: value for hint, value in candidates.items()
            if not same(value, right) and not any(same(value, other) for h, other in candidates.items() if h != hint)}
    return explain_mismatch(actual, kept, rtol=rtol, atol=atol)


def _randomize(module: nn.Module, seed: int, scale: float = 0.5, offset: dict | None = None) -> dict[str, torch.Tensor]:
    """Set every parameter of ``module`` to random numbers (``offset`` adds to some by name);
    returns the float64 values set."""
    g = _seeded(seed)
    values = {}
    with torch.no_grad():
        for name, p in module.named_parameters():
            value = scale * torch.randn(p.shape, generator=g, dtype=torch.float64)
            value = value + (offset or {}).get(name, 0.0)
            p.copy_(value.to(p.dtype))
            values[name] = value.to(p.dtype).double()
    return values


# ---------------------------------------------------------------------------------- FeedForward


def _ffn_reference(x: torch.Tensor, w: dict[str, torch.Tensor], activation: str, *,
                   act: Callable | None = None, gate_on_up: bool = False) -> torch.Tensor:
    """The feed-forward block in float64 from weights ``w`` (by parameter name); ``act`` and
    ``gate_on_up`` build the usual mistakes."""
    def linear(name, z):
        out = z @ w[f"{name}.weight"].T
        return out + w[f"{name}.bias"] if f"{name}.bias" in w else out

    x = x.double()
    if activation == "gelu":
        hidden = (act or (lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))))(linear("up", x))
    else:
        gate, up = linear("gate", x), linear("up", x)
        if gate_on_up:
            gate, up = up, gate
        hidden = (act or (lambda z: z * torch.sigmoid(z)))(gate) * up
    return linear("down", hidden)


def _ffn_shapes(d_model: int, d_ff: int, activation: str, bias: bool) -> dict[str, tuple[int, ...]]:
    """The parameters a FeedForward must have, by name: lesson 07 loads trained weights by them."""
    shapes = {}
    for name in (("gate", "up", "down") if activation == "swiglu" else ("up", "down")):
        out_features, in_features = (d_model, d_ff) if name == "down" else (d_ff, d_model)
        shapes[f"{name}.weight"] = (out_features, in_features)
        if bias:
            shapes[f"{name}.bias"] = (out_features,)
    return shapes


def _load(module: nn.Module, shapes: dict[str, tuple[int, ...]], seed: int, what: str) -> dict[str, torch.Tensor]:
    """Set the parameters named in ``shapes`` to random numbers, by name, as trained weights are
    loaded (a missing name fails); returns the float64 values set, rounded to the module's dtype."""
    own = dict(module.named_parameters())
    g, values = _seeded(seed), {}
    with torch.no_grad():
        for name, shape in shapes.items():
            if name not in own or tuple(own[name].shape) != shape:
                listed = ", ".join(f"{n} {tuple(p.shape)}" for n, p in sorted(own.items())) or "none"
                raise AssertionError(f"{what} has no parameter {name} of shape {shape} (it has {listed}); create "
                                     "self.up, self.down (and self.gate for 'swiglu') as nn.Linear(..., bias=bias)")
            value = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
            own[name].copy_(value.to(own[name].dtype))
            values[name] = own[name].detach().double().clone()
    return values


def check_feed_forward(cls: Callable) -> None:
    """Check ``FeedForward(d_model, d_ff, activation, bias)``: submodules, values against a float64
    reference with the same weights, per-token action, shapes, large entries, dtypes, inputs
    unchanged."""
    d_model, d_ff = 6, 10
    names = ("the submodules are created in __init__ as self.up, self.down (and self.gate for "
             "'swiglu'), each an nn.Linear(..., bias=bias); lesson 07 loads trained weights by these names")

    def built(activation="gelu", bias=True, dtype=torch.float64, seed=0):
        """A block of the learner's class in ``dtype`` with random weights set by name; its weights."""
        block = cls(d_model, d_ff, activation=activation, bias=bias).to(dtype)
        label = f"FeedForward({d_model}, {d_ff}, activation={activation!r}, bias={bias})"
        return block, _load(block, _ffn_shapes(d_model, d_ff, activation, bias), seed, label)

    def submodules(activation):
        def case():
            for bias in (True, False):
                label = f"FeedForward({d_model}, {d_ff}, activation={activation!r}, bias={bias})"
                _expect_parameters(cls(d_model, d_ff, activation=activation, bias=bias),
                                   _ffn_shapes(d_model, d_ff, activation, bias), label,
                                   names if bias else "pass bias=bias to every nn.Linear")
        return case

    def gelu_values():
        block, w = built(seed=0)
        x = _randn(1, 2, 3, d_model)
        y = assert_not_modified(block.forward, x)
        assert_shape(y, x.shape, what="FeedForward(x)", meaning="(..., d_model)")
        right = _ffn_reference(x, w, "gelu")
        hint = _distinct_hint(y, right, {
            "you used the tanh approximation of GELU; use the exact one, F.gelu(h) (approximate='none')":
                _ffn_reference(x, w, "gelu", act=lambda z: F.gelu(z, approximate="tanh")),
            "you used ReLU; this block uses GELU, F.gelu": _ffn_reference(x, w, "gelu", act=torch.relu),
            "there is no non-linearity between up and down: apply F.gelu to up(x)":
                _ffn_reference(x, w, "gelu", act=lambda z: z),
        })
        assert_close(y, right, what="FeedForward(x) with GELU", hint=hint or "forward(x) is down(gelu(up(x)))")

    def swiglu_values():
        for bias in (False, True):
            block, w = built("swiglu", bias=bias, seed=2)
            x = _randn(3, 4, d_model)
            y = assert_not_modified(block.forward, x)
            right = _ffn_reference(x, w, "swiglu")
            hint = _distinct_hint(y, right, {
                "silu is applied to up(x); it belongs on the gate: down(silu(gate(x)) * up(x))":
                    _ffn_reference(x, w, "swiglu", gate_on_up=True),
                "you used sigmoid; SwiGLU's gate uses silu(z) = z * sigmoid(z) (F.silu)":
                    _ffn_reference(x, w, "swiglu", act=torch.sigmoid),
                "you used GELU on the gate; SwiGLU uses F.silu":
                    _ffn_reference(x, w, "swiglu", act=F.gelu),
                "the gate is not used: down(silu(gate(x)) * up(x))":
                    _ffn_reference(x, w, "swiglu", act=torch.ones_like),
            })
            assert_close(y, right, what=f"FeedForward(x) with SwiGLU, bias={bias}",
                         hint=hint or "forward(x) is down(silu(gate(x)) * up(x))")

    def shapes():
        for activation in ("gelu", "swiglu"):
            block, w = built(activation, seed=11)
            for shape in ((d_model,), (3, 1, d_model), (1, 1, d_model)):
                x = _randn(12, *shape)
                y = block(x)
                assert_shape(y, shape, what=f"FeedForward(x) with {activation}, x of shape {shape}",
                             meaning="x.shape", hint="keep every leading dimension, even of size 1: no "
                             "squeeze(), no reshape to a fixed number of dimensions")
                assert_close(y, _ffn_reference(x, w, activation), what=f"FeedForward(x) for x of shape {shape}")

    def each_token_alone():
        block, _ = built(seed=4)
        x = _randn(5, 7, d_model)
        order = torch.randperm(7, generator=_seeded(6))
        assert_close(block(x[order]), block(x)[order], what="FeedForward of the tokens in another order",
                     hint="each token's output must depend on that token's vector only; do not mix "
                          "positions (no sums or means over the sequence dimension)")

    def large_entries():
        for activation in ("gelu", "swiglu"):
            block, w = built(activation, dtype=torch.float32, seed=13)
            x = _randn(14, 4, d_model, scale=1e3).float()
            y = block(x)
            label = f"FeedForward(x) with {activation} for float32 entries in the thousands"
            assert_finite(y, what=label, hint="exp(z) overflows float32 above 88: use F.gelu and F.silu (or "
                                              "torch.sigmoid), not exp(z) / (1 + exp(z))")
            assert_close(y, _ffn_reference(x, w, activation), what=label)

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            for activation in ("gelu", "swiglu"):
                block, w = built(activation, dtype=dtype, seed=7)
                x = _randn(8, 3, d_model).to(dtype)
                y = assert_not_modified(block.forward, x)
                name = str(dtype)[6:]
                assert_dtype(y, dtype, what=f"FeedForward(x) for a {name} module and input")
                # bfloat16 keeps 3 significant digits; every layer rounds once more
                tol = {"rtol": 3e-2, "atol": 3e-2} if dtype == torch.bfloat16 else {}
                assert_close(y, _ffn_reference(x, w, activation), what=f"FeedForward(x) with {activation} in {name}",
                             **tol)

    run_checks("FeedForward", [
        ("GELU: submodules up and down, with and without biases", submodules("gelu")),
        ("SwiGLU: submodules gate, up and down, with and without biases", submodules("swiglu")),
        ("GELU: values against float64", gelu_values),
        ("SwiGLU: values against float64, with and without biases", swiglu_values),
        ("x of shape (d_model,), (3, 1, d_model) and (1, 1, d_model)", shapes),
        ("each token transformed on its own", each_token_alone),
        ("float32 entries in the thousands", large_entries),
        ("float32, float64 and bfloat16 kept", keeps_dtype),
    ])


# ---------------------------------------------------------------------------------- norms


def _moments(x: torch.Tensor, unbiased: bool = False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=int(unbiased))
    return mean, var


def _layer_norm_candidates(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    x = x.double()
    mean, var = _moments(x)
    d = x.shape[-1]
    candidates = {
        "you used the unbiased variance (dividing by d - 1, as x.var() does by default); LayerNorm "
        "divides by d: x.var(dim=-1, correction=0) or ((x - mean)**2).mean(-1)":
            (x - mean) / torch.sqrt(x.var(-1, keepdim=True, correction=1) + eps) * w + b,
        "eps is added outside the square root; it goes inside: (x - mean) / sqrt(var + eps)":
            (x - mean) / (torch.sqrt(var) + eps) * w + b,
        "eps is missing: divide by sqrt(var + eps)": (x - mean) / torch.sqrt(var) * w + b,
        "the mean is not subtracted (that is RMSNorm): LayerNorm centres each vector first":
            x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b,
        "weight and bias are not applied: multiply by self.weight and add self.bias after normalizing":
            (x - mean) / torch.sqrt(var + eps),
        "the bias is not added: ... * self.weight + self.bias": (x - mean) / torch.sqrt(var + eps) * w,
        "the weight is not applied: ... * self.weight + self.bias": (x - mean) / torch.sqrt(var + eps) + b,
    }
    if x.ndim >= 2 and d > 1:
        m0, v0 = x.mean(0, keepdim=True), x.var(0, keepdim=True, correction=0)
        candidates["you normalized over the first dimension; normalize each vector over its features, "
                   "dim=-1 with keepdim=True"] = (x - m0) / torch.sqrt(v0 + eps) * w + b
    return candidates


def _rms_norm_candidates(x: torch.Tensor, w: torch.Tensor, eps: float) -> dict[str, torch.Tensor]:
    x = x.double()
    mean, var = _moments(x)
    ms = x.pow(2).mean(-1, keepdim=True)
    return {
        "you subtracted the mean (that is LayerNorm); RMSNorm only divides by the root mean square, "
        "sqrt(mean(x**2) + eps)": (x - mean) / torch.sqrt(var + eps) * w,
        "eps is missing: divide by sqrt(mean(x**2) + eps), with self.eps inside the square root":
            x / torch.sqrt(ms) * w,
        "eps is added outside the square root; it goes inside: x / sqrt(mean(x**2) + eps)":
            x / (torch.sqrt(ms) + eps) * w,
        "you divided by the length of x (the square root of the sum of squares); divide by the root of "
        "the mean of the squares, x.pow(2).mean(-1, keepdim=True)":
            x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
        "you divided by the standard deviation; RMSNorm divides by sqrt(mean(x**2) + eps), without "
        "subtracting the mean": x / torch.sqrt(var + eps) * w,
        "the weight is not applied: multiply by self.weight after normalizing": x / torch.sqrt(ms + eps),
    }


def _torch_norm(kind: str, d: int, eps: float, values: dict[str, torch.Tensor], dtype=torch.float64) -> nn.Module:
    norm = (nn.LayerNorm(d, eps=eps) if kind == "layer" else nn.RMSNorm(d, eps=eps)).to(dtype)
    with torch.no_grad():
        for name, p in norm.named_parameters():
            p.copy_(values[name])
    return norm


def _check_norm(cls: Callable, kind: str) -> None:
    name = "LayerNorm" if kind == "layer" else "RMSNorm"
    cls = police(cls, f"feedforward.{name}")  # F.layer_norm / F.rms_norm would pass any comparison
    default_eps = 1e-5 if kind == "layer" else 1e-6
    d = 8
    expected = {"weight": (d,), "bias": (d,)} if kind == "layer" else {"weight": (d,)}

    def candidates(x, w, eps):
        return (_layer_norm_candidates(x, w["weight"], w["bias"], eps) if kind == "layer"
                else _rms_norm_candidates(x, w["weight"], eps))

    def made(eps=None, dtype=torch.float64, seed=0, size=d):
        norm = (cls(size) if eps is None else cls(size, eps=eps)).to(dtype)
        w = _randomize(norm, seed, offset={"weight": 1.0})
        return norm, w, _torch_norm(kind, size, default_eps if eps is None else eps, w, dtype)

    def compare(y, x, w, ref, what):
        """y against torch's norm ``ref`` on x (float64, default eps); the hint names a mistake only
        this input tells apart."""
        right = ref(x)
        assert_close(y, right, what=what, hint=_distinct_hint(y, right, candidates(x, w, default_eps)))

    def parameters():
        norm = cls(d)
        _expect_parameters(norm, expected, f"{name}({d})", "they are created for you in __init__; keep them")
        if float(getattr(norm, "eps", default_eps)) != default_eps:
            raise AssertionError(f"{name}({d}).eps is {norm.eps}, expected the default {default_eps}")

    def matches_torch():
        norm, w, ref = made(seed=1)
        x = _randn(2, 2, 3, d, scale=2.0, offset=0.5)
        y = assert_not_modified(norm.forward, x)
        assert_shape(y, x.shape, what=f"{name}(x)", meaning="(..., d)")
        compare(y, x, w, ref, f"{name}(x)")

    def uses_eps():
        eps = 0.5
        norm, w, ref = made(eps=eps, seed=3)
        x = _randn(4, 5, d, scale=0.3)
        y = norm(x)
        ignored = _torch_norm(kind, d, default_eps, w)(x)
        hints = {"the eps given to __init__ is ignored: use self.eps": ignored} | candidates(x, w, eps)
        assert_close(y, ref(x), what=f"{name}(x) with eps={eps}", hint=_distinct_hint(y, ref(x), hints))

    def shapes():
        for size, shape in ((d, (d,)), (d, (1, 1, d)), (2, (3, 2))):
            norm, w, ref = made(seed=12, size=size)
            x = _randn(13, *shape, scale=1.5, offset=0.2)
            y = norm(x)
            label = f"{name}({size})(x) for x of shape {shape}"
            assert_shape(y, shape, what=label, meaning="x.shape",
                         hint="keep every leading dimension, even of size 1 (no squeeze())")
            compare(y, x, w, ref, label)

    def constant_rows():
        norm, w, ref = made(seed=5)
        x = torch.tensor([[3.0] * d, [0.0] * d, [-1e-3] * d], dtype=torch.float64)
        y = norm(x)
        assert_finite(y, what=f"{name}(x) for vectors whose entries are all equal",
                      hint="a vector with zero variance gives 0 / 0 unless eps is added inside the square "
                           "root before dividing")
        compare(y, x, w, ref, f"{name}(x) for vectors whose entries are all equal")

    def large_offset():
        norm, w, ref = made(seed=6)
        x = _randn(7, 4, d, offset=1e6)
        y = norm(x)
        hint = ""
        if kind == "layer":
            naive = (x - x.mean(-1, keepdim=True)) / torch.sqrt(
                x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True).pow(2) + default_eps) * w["weight"] + w["bias"]
            if not torch.allclose(naive, ref(x), rtol=1e-6, atol=1e-6):
                hint = explain_mismatch(y, {
                    "mean(x**2) - mean(x)**2 loses every digit when the entries are large and close: "
                    "compute the variance as the mean of (x - mean)**2": naive}, rtol=1e-6, atol=1e-6)
        assert_close(y, ref(x), what=f"{name}(x) for entries near one million", rtol=1e-6, atol=1e-6,
                     hint=hint or _distinct_hint(y, ref(x), candidates(x, w, default_eps)))

    def half_precision():
        for dtype in (torch.float16, torch.bfloat16):
            norm, w, ref = made(dtype=dtype, seed=8)
            x = _randn(9, 3, d, scale=300.0).to(dtype)
            y = assert_not_modified(norm.forward, x)
            label = f"{name}(x) for {str(dtype)[6:]} entries in the hundreds"
            assert_dtype(y, dtype, what=label, hint="compute the statistics in float32, then cast the normalized "
                                                    "vector back with .to(x.dtype) before the weight")
            hint = ("squares of numbers above 256 overflow float16: compute the statistics in float32 "
                    "(x.float()) and cast back with .to(x.dtype)")
            assert_finite(y, what=label, hint=hint)
            assert_close(y, ref(x), what=label, hint=hint)

    def keeps_dtype():
        for dtype, eps, scale in ((torch.float32, None, 1.0), (torch.float64, None, 1.0), (torch.float32, 1e-8, 1e6)):
            norm, w, ref = made(eps=eps, dtype=dtype, seed=10)
            x = _randn(11, 5, d, scale=scale).to(dtype)
            y = assert_not_modified(norm.forward, x)
            label = f"{name}(x) for a {str(dtype)[6:]} input" + (f" of entries near {scale:g}" if scale != 1 else "")
            assert_dtype(y, dtype, what=label)
            assert_close(y, ref(x), what=label)

    run_checks(name, [
        ("parameters and default eps", parameters),
        (f"equal to torch.nn.{name} (float64)", matches_torch),
        ("eps=0.5 is used", uses_eps),
        ("x of shape (d,) and (1, 1, d); d=2", shapes),
        ("vectors whose entries are all equal", constant_rows),
        ("entries near one million", large_offset),
        ("float16 and bfloat16 entries in the hundreds", half_precision),
        ("float32 and float64 kept, float32 entries near a million", keeps_dtype),
    ])


def check_layer_norm(cls: Callable) -> None:
    """Check ``LayerNorm(d, eps=1e-5)`` against ``torch.nn.LayerNorm`` with the same weights."""
    _check_norm(cls, "layer")


def check_rms_norm(cls: Callable) -> None:
    """Check ``RMSNorm(d, eps=1e-6)`` against ``torch.nn.RMSNorm`` with the same weight."""
    _check_norm(cls, "rms")


# ---------------------------------------------------------------------------------- Residual


class _Probe(nn.Module):
    """A sublayer for the checks: tanh(linear(x)) * scale (+ shift)."""

    def __init__(self, d: int, seed: int):
        super().__init__()
        self.linear = nn.Linear(d, d).double()
        _randomize(self, seed, scale=1.0)

    def forward(self, x, scale=1.0, shift=None):
        y = torch.tanh(self.linear(x)) * scale
        return y if shift is None else y + shift


def _placements(x, f, norm) -> dict[str, torch.Tensor]:
    """Every way of combining x, the sublayer f and the norm that the checks tell apart."""
    return {
        "pre": x + f(norm(x)),
        "post": norm(x + f(x)),
        "normalized skip": norm(x) + f(norm(x)),
        "norm on output": x + norm(f(x)),
        "no skip, pre": f(norm(x)),
        "no skip, post": norm(f(x)),
        "no norm": x + f(x),
    }


_PLACEMENT_HINTS = {
    "pre": {
        "post": "you normalized after adding the residual (post-norm); with placement='pre', normalize the "
                "sublayer's input and add x itself: x + sublayer(norm(x))",
        "normalized skip": "the skip path carries norm(x); it must carry x itself: x + sublayer(norm(x))",
        "norm on output": "you normalized the sublayer's output; pre-norm normalizes its input: x + sublayer(norm(x))",
        "no skip, pre": "the residual is missing: add x to the sublayer's output, x + sublayer(norm(x))",
        "no norm": "the norm is never applied: x + sublayer(self.norm(x))",
    },
    "post": {
        "pre": "you normalized before the sublayer (pre-norm); with placement='post', add first and normalize "
               "the sum: norm(x + sublayer(x))",
        "norm on output": "you normalized only the sublayer's output; post-norm normalizes the sum: "
                          "norm(x + sublayer(x))",
        "no skip, post": "the residual is missing: norm(x + sublayer(x))",
        "no norm": "the norm is never applied: self.norm(x + sublayer(x))",
    },
}


def check_residual(cls: Callable) -> None:
    """Check ``Residual(sublayer, d, placement, norm, eps)``: the order of operations of each
    placement, float32 and a single vector, extra arguments passed on to the sublayer, inputs
    unchanged."""
    d = 6

    def made(placement, norm="layer", eps=None, seed=0, dtype=torch.float64):
        """The learner's block around a probe sublayer, in ``dtype``; float64 copies of its sublayer
        and of torch's norm with the same weights (the trusted pieces the result is built from)."""
        kwargs = {"placement": placement, "norm": norm} | ({} if eps is None else {"eps": eps})
        block = cls(_Probe(d, seed), d, **kwargs).to(dtype)
        values = _randomize(block.norm, seed + 1, offset={"weight": 1.0})
        default = 1e-5 if norm == "layer" else 1e-6
        sublayer = copy.deepcopy(block.sublayer).double()
        return block, sublayer, _torch_norm(norm, d, default if eps is None else eps, values)

    def same_norm_as_torch(block, trusted, x, label):
        """Fail early, pointing at exercise 2 or 3, if the learner's norm is what is wrong."""
        rtol, atol = tolerances(x.dtype)
        if not torch.allclose(block.norm(x).double(), trusted(x.double()), rtol=rtol, atol=atol):
            raise AssertionError(f"{label}: block.norm is {type(block.norm).__name__}, and it does not "
                                 f"agree with torch.nn.{type(trusted).__name__}; make its check pass first")

    def compare(placement, norm="layer", eps=None, seed=0, dtype=torch.float64, shape=(2, 3, d)):
        block, sublayer, trusted = made(placement, norm, eps, seed, dtype)
        x = _randn(seed + 2, *shape, scale=1.5, offset=0.3).to(dtype)
        label = f"Residual(placement={placement!r}, norm={norm!r})"
        y = assert_not_modified(block.forward, x)
        same_norm_as_torch(block, trusted, x, label)
        assert_shape(y, x.shape, what=f"{label}(x)", meaning="(..., d)")
        assert_dtype(y, dtype, what=f"{label}(x) for a {str(dtype)[6:]} input")
        options = _placements(x.double(), sublayer, trusted)
        hints = {_PLACEMENT_HINTS[placement][key]: value for key, value in options.items()
                 if key in _PLACEMENT_HINTS[placement]}
        assert_close(y, options[placement], what=f"{label}(x)", hint=_distinct_hint(y, options[placement], hints))

    def placement_case(placement, norm="layer", eps=None, seed=0):
        return lambda: compare(placement, norm, eps, seed)

    def float32_and_one_vector():
        compare("pre", "layer", seed=11, dtype=torch.float32, shape=(d,))
        compare("post", "rms", 0.25, seed=12, dtype=torch.float32, shape=(4, 1, d))

    def passes_arguments():
        for placement in ("pre", "post"):
            block, _, trusted = made(placement, seed=7)
            x, shift = _randn(9, 4, d), _randn(10, d)
            y = assert_not_modified(block.forward, x, 2.5, shift=shift)
            given = {
                "all": lambda z: block.sublayer(z, 2.5, shift=shift),
                "none": block.sublayer,
                "keywords only": lambda z: block.sublayer(z, shift=shift),
                "positional only": lambda z: block.sublayer(z, 2.5),
            }
            results = {key: _placements(x, f, trusted)[placement] for key, f in given.items()}
            assert_close(y, results["all"], what=f"Residual(placement={placement!r})(x, 2.5, shift=...)",
                         hint=_distinct_hint(y, results["all"], {
                             "the extra arguments do not reach the sublayer: call "
                             "self.sublayer(..., *args, **kwargs)": results["none"],
                             "the positional arguments do not reach the sublayer (here 2.5, given after x): "
                             "call self.sublayer(..., *args, **kwargs)": results["keywords only"],
                             "the keyword arguments do not reach the sublayer (here shift=...): call "
                             "self.sublayer(..., *args, **kwargs)": results["positional only"],
                         }))

    run_checks("Residual", [
        ("pre-norm: x + sublayer(norm(x))", placement_case("pre")),
        ("post-norm: norm(x + sublayer(x)), eps=0.001", placement_case("post", eps=1e-3, seed=3)),
        ("pre-norm with RMSNorm, eps=0.01", placement_case("pre", "rms", 0.01, seed=5)),
        ("post-norm with RMSNorm", placement_case("post", "rms", seed=6)),
        ("float32, and a single vector of shape (d,)", float32_and_one_vector),
        ("extra arguments passed on to the sublayer", passes_arguments),
    ])


# --------------------------------------------------------------------------------------------
# The SwiGLU width (not graded)
# --------------------------------------------------------------------------------------------


def _linear_parameters(shapes: list[tuple[int, int]], bias: bool) -> int:
    """Parameters of ``nn.Linear(n_in, n_out, bias)`` for each (n_in, n_out), built on the meta
    device (shapes only, no memory)."""
    with torch.device("meta"):
        return sum(p.numel() for n_in, n_out in shapes for p in nn.Linear(n_in, n_out, bias=bias).parameters())


def _gelu_parameters(d_model: int, d_ff: int, bias: bool) -> int:
    return _linear_parameters([(d_model, d_ff), (d_ff, d_model)], bias)


def _swiglu_parameters(d_model: int, width: int, bias: bool) -> int:
    return _linear_parameters([(d_model, width), (d_model, width), (width, d_model)], bias)


def _closest_widths(d_model: int, d_ff: int, bias: bool) -> set[int]:
    """The whole widths whose SwiGLU block is as close as any to the GELU block's parameter count
    (two when they tie). The count grows by 3 d_model (+ 2) per neuron, so they lie next to
    target / (3 d_model + 2 bias)."""
    target = _gelu_parameters(d_model, d_ff, bias)
    guess = target // (3 * d_model + 2 * bias)
    candidates = range(max(1, guess - 2), guess + 3)
    gaps = {w: abs(_swiglu_parameters(d_model, w, bias) - target) for w in candidates}
    return {w for w, gap in gaps.items() if gap == min(gaps.values())}


def check_swiglu_width(swiglu_width: Callable) -> None:
    """Check (not graded) ``swiglu_width(d_model, d_ff, bias=False) -> int``: the width of a
    SwiGLU block with as many parameters as a GELU block of width ``d_ff``, to the nearest whole
    neuron. Accepts any width as close as any other (either of two that tie); an unanswered
    exercise (the stub's ``NotImplementedError``) is reported and passes on, since it is not graded.
    """
    try:
        swiglu_width(512, 2048)
    except NotImplementedError:
        print("○ swiglu_width: not answered yet (this exercise is not graded; the comparison below waits "
              "for your answer)")
        return

    def case(d_model: int, d_ff: int, bias: bool):
        def run():
            call = f"swiglu_width({d_model}, {d_ff}, bias={bias})"
            width = swiglu_width(d_model, d_ff, bias=bias)
            if isinstance(width, bool) or not isinstance(width, numbers.Integral):
                raise AssertionError(f"{call} returned {width!r} ({type(width).__name__}): a width is a whole "
                                     "number of neurons, return an int (the whole number nearest to your formula)")
            width = int(width)
            right = _closest_widths(d_model, d_ff, bias)
            if width in right:
                return
            target = _gelu_parameters(d_model, d_ff, bias)
            count = _swiglu_parameters(d_model, width, bias) if width > 0 else 0
            best = min(right)
            found = (f"{call} returned {width}: a SwiGLU block of that width has {count:,} parameters, the GELU "
                     f"block {target:,}")
            if width == d_ff:
                hint = ("that is the GELU block's own width; at the same width a SwiGLU block has three "
                        "matrices instead of two, 1.5 times the weights")
            elif d_ff != 4 * d_model and width in _closest_widths(d_model, 4 * d_model, bias):
                hint = (f"your width follows d_model (8/3 d_model), which matches a GELU block of width "
                        f"4 d_model = {4 * d_model} only; the block to match has d_ff = {d_ff}")
            elif bias and width in _closest_widths(d_model, d_ff, False):
                hint = ("you left out the biases: with bias=True each nn.Linear has one per output, so the "
                        "GELU block adds d_ff + d_model and the SwiGLU block 2 width + d_model")
            elif abs(width - best) <= 2:
                hint = (f"close, but {best} gives {_swiglu_parameters(d_model, best, bias):,}, nearer the GELU "
                        f"block's count: return the nearest whole number, not the one below or above")
            else:
                hint = ("count both: GELU has up and down (2 d_model d_ff weights), SwiGLU has gate, up and down "
                        "(3 d_model width weights); set them equal and solve for the width")
            raise AssertionError(f"{found}: {hint}")
        return run

    run_checks("swiglu_width", [
        ("d_model = 512, d_ff = 2048 (the 2017 base model)", case(512, 2048, False)),
        ("d_model = 768, d_ff = 3072 (GPT-2 small)", case(768, 3072, False)),
        ("d_model = 64, d_ff = 100: d_ff is not 4 d_model", case(64, 100, False)),
        ("d_model = 4, d_ff = 16, with biases", case(4, 16, True)),
        ("d_model = 2, d_ff = 4, with biases: two widths tie", case(2, 4, True)),
    ])
