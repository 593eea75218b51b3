"""Visible checks of lesson 06: ``FeedForward``, ``LayerNorm``, ``RMSNorm`` and ``Residual``.

Each check builds the learner's module, copies random weights into it by name, and compares it with
a trusted reference on the same weights: a float64 feed-forward block written out here,
``torch.nn.LayerNorm`` and ``torch.nn.RMSNorm``, and the formulas of the two placements of a
residual connection. Typical mistakes are recognised and named ("you normalized after adding the
residual").
"""

from __future__ import annotations

import math
from typing import Callable

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
)

__all__ = ["check_feed_forward", "check_layer_norm", "check_rms_norm", "check_residual"]


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


def check_feed_forward(cls: Callable) -> None:
    """Check ``FeedForward(d_model, d_ff, activation, bias)``: submodules, values against a float64
    reference with the same weights, per-token action, dtypes, inputs unchanged."""
    d_model, d_ff = 6, 10
    names = ("the submodules are created in __init__ as self.up, self.down (and self.gate for "
             "'swiglu'), each an nn.Linear; lesson 07 loads trained weights by these names")

    def built(activation="gelu", bias=True):
        return cls(d_model, d_ff, activation=activation, bias=bias)

    def gelu_submodules():
        expected = {"up.weight": (d_ff, d_model), "up.bias": (d_ff,), "down.weight": (d_model, d_ff),
                    "down.bias": (d_model,)}
        _expect_parameters(built(), expected, f"FeedForward({d_model}, {d_ff})", names)
        _expect_parameters(built(bias=False), {"up.weight": (d_ff, d_model), "down.weight": (d_model, d_ff)},
                           f"FeedForward({d_model}, {d_ff}, bias=False)", "pass bias=bias to each nn.Linear")

    def swiglu_submodules():
        expected = {"gate.weight": (d_ff, d_model), "up.weight": (d_ff, d_model), "down.weight": (d_model, d_ff)}
        _expect_parameters(built("swiglu", bias=False), expected,
                           f"FeedForward({d_model}, {d_ff}, activation='swiglu', bias=False)", names)

    def gelu_values():
        block = built().double()
        w = _randomize(block, 0)
        x = _randn(1, 2, 3, d_model)
        y = assert_not_modified(block.forward, x)
        assert_shape(y, x.shape, what="FeedForward(x)", meaning="(..., d_model)")
        hint = explain_mismatch(y, {
            "you used the tanh approximation of GELU; use the exact one, F.gelu(h) (approximate='none')":
                _ffn_reference(x, w, "gelu", act=lambda z: F.gelu(z, approximate="tanh")),
            "you used ReLU; this block uses GELU, F.gelu": _ffn_reference(x, w, "gelu", act=torch.relu),
            "there is no non-linearity between up and down: apply F.gelu to up(x)":
                _ffn_reference(x, w, "gelu", act=lambda z: z),
        })
        assert_close(y, _ffn_reference(x, w, "gelu"), what="FeedForward(x) with GELU",
                     hint=hint or "forward(x) is down(gelu(up(x)))")

    def swiglu_values():
        for bias in (False, True):
            block = built("swiglu", bias=bias).double()
            w = _randomize(block, 2)
            x = _randn(3, 4, d_model)
            y = assert_not_modified(block.forward, x)
            hint = explain_mismatch(y, {
                "silu is applied to up(x); it belongs on the gate: down(silu(gate(x)) * up(x))":
                    _ffn_reference(x, w, "swiglu", gate_on_up=True),
                "you used sigmoid; SwiGLU's gate uses silu(z) = z * sigmoid(z) (F.silu)":
                    _ffn_reference(x, w, "swiglu", act=torch.sigmoid),
                "you used GELU on the gate; SwiGLU uses F.silu":
                    _ffn_reference(x, w, "swiglu", act=F.gelu),
                "the gate is not used: down(silu(gate(x)) * up(x))":
                    _ffn_reference(x, w, "swiglu", act=torch.ones_like),
            })
            assert_close(y, _ffn_reference(x, w, "swiglu"), what=f"FeedForward(x) with SwiGLU, bias={bias}",
                         hint=hint or "forward(x) is down(silu(gate(x)) * up(x))")

    def each_token_alone():
        block = built().double()
        _randomize(block, 4)
        x = _randn(5, 7, d_model)
        order = torch.randperm(7, generator=_seeded(6))
        assert_close(block(x[order]), block(x)[order], what="FeedForward of the tokens in another order",
                     hint="each token's output must depend on that token's vector only; do not mix "
                          "positions (no sums or means over the sequence dimension)")

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            block = built("swiglu").to(dtype)
            w = _randomize(block, 7)
            x = _randn(8, 3, d_model).to(dtype)
            y = block(x)
            assert_dtype(y, dtype, what=f"FeedForward(x) for a {str(dtype)[6:]} module and input")
            assert_close(y, _ffn_reference(x, w, "swiglu"), what=f"FeedForward(x) in {str(dtype)[6:]}")

    run_checks("FeedForward", [
        ("GELU: submodules up and down", gelu_submodules),
        ("SwiGLU: submodules gate, up and down", swiglu_submodules),
        ("GELU: values against float64", gelu_values),
        ("SwiGLU: values against float64, with and without biases", swiglu_values),
        ("each token transformed on its own", each_token_alone),
        ("float32 and float64 kept", keeps_dtype),
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
    default_eps = 1e-5 if kind == "layer" else 1e-6
    d = 8
    expected = {"weight": (d,), "bias": (d,)} if kind == "layer" else {"weight": (d,)}

    def candidates(x, w, eps):
        return (_layer_norm_candidates(x, w["weight"], w["bias"], eps) if kind == "layer"
                else _rms_norm_candidates(x, w["weight"], eps))

    def made(eps=None, dtype=torch.float64, seed=0):
        norm = (cls(d) if eps is None else cls(d, eps=eps)).to(dtype)
        w = _randomize(norm, seed, offset={"weight": 1.0})
        return norm, w, _torch_norm(kind, d, default_eps if eps is None else eps, w, dtype)

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
        assert_close(y, ref(x), what=f"{name}(x)",
                     hint=explain_mismatch(y, candidates(x, w, default_eps)))

    def uses_eps():
        eps = 0.5
        norm, w, ref = made(eps=eps, seed=3)
        x = _randn(4, 5, d, scale=0.3)
        y = norm(x)
        ignored = _torch_norm(kind, d, default_eps, w)(x)
        hints = {"the eps given to __init__ is ignored: use self.eps": ignored} | candidates(x, w, eps)
        assert_close(y, ref(x), what=f"{name}(x) with eps={eps}", hint=explain_mismatch(y, hints))

    def constant_rows():
        norm, w, ref = made(seed=5)
        x = torch.tensor([[3.0] * d, [0.0] * d, [-1e-3] * d], dtype=torch.float64)
        y = norm(x)
        assert_finite(y, what=f"{name}(x) for vectors whose entries are all equal",
                      hint="a vector with zero variance gives 0 / 0 unless eps is added inside the square "
                           "root before dividing")
        assert_close(y, ref(x), what=f"{name}(x) for vectors whose entries are all equal",
                     hint=explain_mismatch(y, candidates(x, w, default_eps)))

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
                     hint=hint or explain_mismatch(y, candidates(x, w, default_eps)))

    def half_precision():
        for dtype in (torch.float16, torch.bfloat16):
            norm, w, ref = made(dtype=dtype, seed=8)
            x = _randn(9, 3, d, scale=300.0).to(dtype)
            y = assert_not_modified(norm.forward, x)
            label = f"{name}(x) for {str(dtype)[6:]} entries in the hundreds"
            assert_dtype(y, dtype, what=label)
            hint = ("squares of numbers above 256 overflow float16: compute the statistics in float32 "
                    "(x.float()) and cast back with .to(x.dtype)")
            assert_finite(y, what=label, hint=hint)
            assert_close(y, ref(x), what=label, hint=hint)

    def keeps_dtype():
        for dtype in (torch.float32, torch.float64):
            norm, w, ref = made(dtype=dtype, seed=10)
            x = _randn(11, 5, d).to(dtype)
            y = norm(x)
            assert_dtype(y, dtype, what=f"{name}(x) for a {str(dtype)[6:]} input")
            assert_close(y, ref(x), what=f"{name}(x) in {str(dtype)[6:]}")

    run_checks(name, [
        ("parameters and default eps", parameters),
        (f"equal to torch.nn.{name} (float64)", matches_torch),
        ("eps=0.5 is used", uses_eps),
        ("vectors whose entries are all equal", constant_rows),
        ("entries near one million", large_offset),
        ("float16 and bfloat16 entries in the hundreds", half_precision),
        ("float32 and float64 kept", keeps_dtype),
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
    placement, extra arguments passed on to the sublayer, inputs unchanged."""
    d = 6

    def made(placement, norm="layer", eps=None, seed=0):
        kwargs = {"placement": placement, "norm": norm} | ({} if eps is None else {"eps": eps})
        block = cls(_Probe(d, seed), d, **kwargs).double()
        values = _randomize(block.norm, seed + 1, offset={"weight": 1.0})
        default = 1e-5 if norm == "layer" else 1e-6
        return block, _torch_norm(norm, d, default if eps is None else eps, values)

    def same_norm_as_torch(block, trusted, x, label):
        """Fail early, pointing at exercise 2 or 3, if the learner's norm is what is wrong."""
        if not torch.allclose(block.norm(x), trusted(x), rtol=1e-8, atol=1e-10):
            raise AssertionError(f"{label}: block.norm is {type(block.norm).__name__}, and it does not "
                                 f"agree with torch.nn.{type(trusted).__name__}; make its check pass first")

    def placement_case(placement, norm="layer", eps=None, seed=0):
        def case():
            block, trusted = made(placement, norm, eps, seed)
            x = _randn(seed + 2, 2, 3, d, scale=1.5, offset=0.3)
            label = f"Residual(placement={placement!r}, norm={norm!r})"
            y = assert_not_modified(block.forward, x)
            same_norm_as_torch(block, trusted, x, label)
            assert_shape(y, x.shape, what=f"{label}(x)", meaning="(..., d)")
            options = _placements(x, block.sublayer, trusted)
            hints = {_PLACEMENT_HINTS[placement][key]: value for key, value in options.items()
                     if key in _PLACEMENT_HINTS[placement]}
            assert_close(y, options[placement], what=f"{label}(x)", hint=explain_mismatch(y, hints))
        return case

    def passes_arguments():
        for placement in ("pre", "post"):
            block, trusted = made(placement, seed=7)
            x, shift = _randn(9, 4, d), _randn(10, d)
            y = block(x, 2.5, shift=shift)
            f = lambda z: block.sublayer(z, 2.5, shift=shift)  # noqa: E731
            expected = _placements(x, f, trusted)[placement]
            ignored = _placements(x, block.sublayer, trusted)[placement]
            assert_close(y, expected, what=f"Residual(placement={placement!r})(x, 2.5, shift=...)",
                         hint=explain_mismatch(y, {
                             "the extra arguments do not reach the sublayer: call "
                             "self.sublayer(..., *args, **kwargs)": ignored}))

    run_checks("Residual", [
        ("pre-norm: x + sublayer(norm(x))", placement_case("pre")),
        ("post-norm: norm(x + sublayer(x))", placement_case("post", seed=3)),
        ("pre-norm with RMSNorm, eps=0.01", placement_case("pre", "rms", 0.01, seed=5)),
        ("post-norm with RMSNorm", placement_case("post", "rms", seed=6)),
        ("extra arguments passed on to the sublayer", passes_arguments),
    ])
