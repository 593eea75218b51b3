"""The reference of lesson 06 (attnlab.feedforward) against independent float64 computations and
PyTorch's own modules; edge cases; bad input raising clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.helpers import borrowed_reference


@pytest.fixture
def ff():
    yield from borrowed_reference("feedforward")


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return module


# ---------------------------------------------------------------------------------- FeedForward


def _erf_gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def test_gelu_feedforward_is_down_gelu_up_in_float64(ff):
    block = _randomize(ff.FeedForward(5, 11).double(), 0)
    assert sorted(n for n, _ in block.named_parameters()) == ["down.bias", "down.weight", "up.bias", "up.weight"]
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    hidden = _erf_gelu(x @ block.up.weight.T + block.up.bias)
    expected = hidden @ block.down.weight.T + block.down.bias
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)


def test_swiglu_feedforward_has_gate_up_down_and_no_bias_when_asked(ff):
    block = _randomize(ff.FeedForward(4, 9, activation="swiglu", bias=False).double(), 2)
    assert sorted(n for n, _ in block.named_parameters()) == ["down.weight", "gate.weight", "up.weight"]
    x = torch.randn(7, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    gate = x @ block.gate.weight.T
    expected = (gate * torch.sigmoid(gate) * (x @ block.up.weight.T)) @ block.down.weight.T
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)


def test_feedforward_acts_on_each_token_alone(ff):
    block = _randomize(ff.FeedForward(6, 10).double(), 4)
    x = torch.randn(9, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    order = torch.randperm(9, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(block(x)[order], block(x[order]))
    torch.testing.assert_close(block(x)[2:3], block(x[2:3]))


def test_parameter_count_of_the_configurations_in_the_lesson(ff):
    with torch.device("meta"):
        base = ff.FeedForward(512, 2048, bias=False)
        qwen = ff.FeedForward(2048, 11008, activation="swiglu", bias=False)
        tied = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    tied[1].weight = tied[0].weight
    assert ff.parameter_count(base) == 2 * 512 * 2048 == 2_097_152
    assert ff.parameter_count(qwen) == 3 * 2048 * 11008 == 67_633_152
    assert ff.parameter_count(tied) == 40  # a shared matrix counts once


# ---------------------------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_layer_norm_equals_torch_and_a_float64_formula(ff, dtype, eps):
    ours = _randomize(ff.LayerNorm(7, eps=eps), 7).to(dtype)
    theirs = nn.LayerNorm(7, eps=eps).to(dtype)
    theirs.load_state_dict(ours.state_dict())
    x = (0.3 * torch.randn(3, 4, 7, generator=torch.Generator().manual_seed(8))).to(dtype)
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdim=True)  # divides by d, not d - 1
    formula = (x64 - mean) / torch.sqrt(var + eps) * ours.weight.double() + ours.bias.double()
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(ours(x).double(), formula, **tol)
    torch.testing.assert_close(ours(x), theirs(x), **tol)
    assert ours(x).dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_rms_norm_equals_torch_and_a_float64_formula(ff, dtype, eps):
    ours = _randomize(ff.RMSNorm(6, eps=eps), 9).to(dtype)
    theirs = nn.RMSNorm(6, eps=eps).to(dtype)
    theirs.load_state_dict(ours.state_dict())
    x = (0.2 * torch.randn(5, 6, generator=torch.Generator().manual_seed(10)) + 1.0).to(dtype)
    x64 = x.double()
    formula = x64 / torch.sqrt((x64 ** 2).mean(-1, keepdim=True) + eps) * ours.weight.double()
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(ours(x).double(), formula, **tol)
    torch.testing.assert_close(ours(x), theirs(x), **tol)


def test_default_eps_and_parameters_match_the_api(ff):
    assert ff.LayerNorm(4).eps == 1e-5 and ff.RMSNorm(4).eps == 1e-6
    assert sorted(ff.LayerNorm(4).state_dict()) == ["bias", "weight"]
    assert list(ff.RMSNorm(4).state_dict()) == ["weight"]
    assert torch.equal(ff.LayerNorm(4).weight, torch.ones(4)) and torch.equal(ff.LayerNorm(4).bias, torch.zeros(4))


def test_what_each_norm_removes(ff):
    x = torch.randn(10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(11)) + 3.0
    layer, rms = ff.LayerNorm(16).double()(x), ff.RMSNorm(16).double()(x)
    torch.testing.assert_close(layer.mean(-1), torch.zeros(10, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(layer.pow(2).mean(-1), torch.ones(10, dtype=torch.float64), atol=1e-4, rtol=0)
    torch.testing.assert_close(rms.pow(2).mean(-1), torch.ones(10, dtype=torch.float64), atol=1e-4, rtol=0)
    assert (rms.mean(-1) > 0.9).all()  # RMSNorm keeps the shared offset's direction


def test_norms_of_all_equal_and_extreme_rows(ff):
    equal = torch.full((2, 5), 4.0, dtype=torch.float64)
    layer = _randomize(ff.LayerNorm(5).double(), 12)
    torch.testing.assert_close(layer(equal), layer.bias.detach().expand(2, 5), atol=1e-12, rtol=0)
    assert torch.equal(ff.RMSNorm(5).double()(torch.zeros(2, 5, dtype=torch.float64)), torch.zeros(2, 5, dtype=torch.float64))
    for dtype in (torch.float16, torch.bfloat16):  # squares of 300 overflow float16: statistics in float32
        x = (300 * torch.randn(3, 8, generator=torch.Generator().manual_seed(13))).to(dtype)
        for ours, theirs in ((ff.LayerNorm(8), nn.LayerNorm(8)), (ff.RMSNorm(8), nn.RMSNorm(8, eps=1e-6))):
            got, want = ours.to(dtype)(x), theirs.to(dtype)(x)
            assert got.dtype == dtype and torch.isfinite(got).all()
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    shifted = 1e6 + torch.randn(4, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(14))
    torch.testing.assert_close(ff.LayerNorm(9).double()(shifted), nn.LayerNorm(9).double()(shifted),
                               rtol=1e-7, atol=1e-7)


# ---------------------------------------------------------------------------------- Residual


class _Scaled(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.linear = nn.Linear(d, d)

    def forward(self, x, scale=1.0, shift=None):
        y = torch.tanh(self.linear(x)) * scale
        return y if shift is None else y + shift


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_residual_placements_follow_their_formulas(ff, norm):
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(15))
    shift = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(16))
    for placement in ("pre", "post"):
        block = _randomize(ff.Residual(_Scaled(6), 6, placement=placement, norm=norm, eps=1e-3).double(), 17)
        assert sorted(name for name, _ in block.named_children()) == ["norm", "sublayer"]
        assert block.norm.eps == 1e-3
        f = lambda z: block.sublayer(z, 2.0, shift=shift)  # noqa: E731
        expected = x + f(block.norm(x)) if placement == "pre" else block.norm(x + f(x))
        torch.testing.assert_close(block(x, 2.0, shift=shift), expected, rtol=1e-12, atol=1e-12)
    assert isinstance(ff.Residual(_Scaled(6), 6, norm="rms").norm, ff.RMSNorm)
    assert ff.Residual(_Scaled(6), 6, norm="rms").norm.eps == 1e-6


def test_inputs_are_not_modified(ff):
    x = torch.randn(3, 5, dtype=torch.float64)
    saved = x.clone()
    for module in (ff.FeedForward(5, 8).double(), ff.LayerNorm(5).double(), ff.RMSNorm(5).double(),
                   ff.Residual(ff.FeedForward(5, 8), 5, placement="post").double()):
        module(x)
        assert torch.equal(x, saved)


# ---------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("make, pattern", [
    (lambda ff: ff.FeedForward(0, 4), "d_model must be a positive int"),
    (lambda ff: ff.FeedForward(4, 2.5), "d_ff must be a positive int"),
    (lambda ff: ff.FeedForward(4, 8, activation="relu"), "activation must be one of"),
    (lambda ff: ff.LayerNorm(4, eps=-1.0), "eps must be a number >= 0"),
    (lambda ff: ff.RMSNorm(True), "d must be a positive int"),
    (lambda ff: ff.Residual(ff.FeedForward(4, 8), 4, placement="middle"), "placement must be one of"),
    (lambda ff: ff.Residual(ff.FeedForward(4, 8), 4, norm="batch"), "norm must be one of"),
    (lambda ff: ff.Residual(lambda x: x, 4), "sublayer must be an nn.Module"),
])
def test_bad_construction_raises_clear_errors(ff, make, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        make(ff)


@pytest.mark.parametrize("module", ["FeedForward", "LayerNorm", "RMSNorm"])
def test_bad_inputs_raise_clear_errors(ff, module):
    instance = ff.FeedForward(4, 8) if module == "FeedForward" else getattr(ff, module)(4)
    with pytest.raises(ValueError, match=r"expects x of shape \(\.\.\., 4\), got \(2, 5\)"):
        instance(torch.randn(2, 5))
    with pytest.raises(TypeError, match="floating-point"):
        instance(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        instance([[1.0, 2.0, 3.0, 4.0]])
