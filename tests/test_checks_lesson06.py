"""The visible checks of lesson 06 pass on the reference and fail, with the right diagnostic, on the
typical wrong versions of FeedForward, LayerNorm, RMSNorm and Residual, and of the ungraded
exercise's swiglu_width."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab import checks
from tests.helpers import borrowed_reference, fails, load_stub


@pytest.fixture
def ff():
    yield from borrowed_reference("feedforward")


@pytest.fixture(scope="module")
def stub():
    return load_stub("feedforward")


def test_all_checks_pass_on_the_reference(ff, capsys):
    checks.check_feed_forward(ff.FeedForward)
    checks.check_layer_norm(ff.LayerNorm)
    checks.check_rms_norm(ff.RMSNorm)
    checks.check_residual(ff.Residual)
    assert capsys.readouterr().out.strip().splitlines()[-4:] == [
        "✓ FeedForward: 8 checks passed",
        "✓ LayerNorm: 8 checks passed",
        "✓ RMSNorm: 8 checks passed",
        "✓ Residual: 6 checks passed",
    ]


@pytest.mark.parametrize("check, name", [
    (checks.check_feed_forward, "FeedForward"),
    (checks.check_layer_norm, "LayerNorm"),
    (checks.check_rms_norm, "RMSNorm"),
    (checks.check_residual, "Residual"),
])
def test_stub_not_implemented_error_passes_through_unchanged(stub, check, name):
    with pytest.raises(NotImplementedError) as caught:
        check(getattr(stub, name))
    assert str(caught.value).startswith(f"Lesson 06: {name}.")
    assert "attnlab.use_reference('feedforward')" in str(caught.value)


# ---------------------------------------------------------------------------------- FeedForward


def _feedforward(ff, forward=None, init=None):
    """A subclass of the reference with one method replaced by a wrong version."""
    namespace = {}
    if forward:
        namespace["forward"] = forward
    if init:
        namespace["__init__"] = init
    return type("WrongFeedForward", (ff.FeedForward,), namespace)


@pytest.mark.parametrize("hidden, pattern", [
    (lambda self, x: F.gelu(self.up(x), approximate="tanh"), "tanh approximation"),
    (lambda self, x: torch.relu(self.up(x)), "you used ReLU"),
    (lambda self, x: self.up(x), "no non-linearity"),
])
def test_gelu_mistakes_are_named(ff, hidden, pattern):
    def forward(self, x):
        if self.activation == "swiglu":
            return ff.FeedForward.forward(self, x)
        return self.down(hidden(self, x))
    fails(checks.check_feed_forward, _feedforward(ff, forward), "GELU: values", pattern)


@pytest.mark.parametrize("hidden, pattern", [
    (lambda self, x: F.silu(self.up(x)) * self.gate(x), "silu is applied to up"),
    (lambda self, x: torch.sigmoid(self.gate(x)) * self.up(x), "you used sigmoid"),
    (lambda self, x: F.gelu(self.gate(x)) * self.up(x), "GELU on the gate"),
    (lambda self, x: self.up(x), "the gate is not used"),
])
def test_swiglu_mistakes_are_named(ff, hidden, pattern):
    def forward(self, x):
        if self.activation == "gelu":
            return ff.FeedForward.forward(self, x)
        return self.down(hidden(self, x))
    fails(checks.check_feed_forward, _feedforward(ff, forward), "SwiGLU", pattern)


def test_wrong_submodule_names_are_named(ff):
    def init(self, d_model, d_ff, activation="gelu", bias=True):
        torch.nn.Module.__init__(self)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.fc1 = torch.nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = torch.nn.Linear(d_ff, d_model, bias=bias)
    fails(checks.check_feed_forward, _feedforward(ff, init=init), "submodules up and down", r"fc1\.weight",
          "self.up, self.down")


def test_mixing_tokens_is_caught(ff):
    def forward(self, x):
        out = ff.FeedForward.forward(self, x)
        return out + 0.1 * out.mean(dim=-2, keepdim=True) if x.ndim > 2 else out
    fails(checks.check_feed_forward, _feedforward(ff, forward), "GELU: values")


# ---------------------------------------------------------------------------------- norms


def _norm(base, forward):
    return type(f"Wrong{base.__name__}", (base,), {"forward": forward})


def _layer(x, w, b, eps, *, var=None, outside=False, center=True):
    mean = x.mean(-1, keepdim=True) if center else 0.0
    var = ((x - mean) ** 2).mean(-1, keepdim=True) if var is None else var
    scale = 1 / (torch.sqrt(var) + eps) if outside else torch.rsqrt(var + eps)
    return (x - mean) * scale * w + b


@pytest.mark.parametrize("forward, case, pattern", [
    (lambda self, x: _layer(x, self.weight, self.bias, self.eps, var=x.var(-1, keepdim=True)),
     "equal to torch", "unbiased variance"),
    (lambda self, x: _layer(x, self.weight, self.bias, self.eps, outside=True), "equal to torch", "outside the square root"),
    (lambda self, x: _layer(x, self.weight, self.bias, 1e-5), "eps=0.5", "eps given to __init__ is ignored"),
    (lambda self, x: _layer(x, 1.0, 0.0, self.eps), "equal to torch", "weight and bias are not applied"),
    (lambda self, x: _layer(x, self.weight, 0.0, self.eps), "equal to torch", "the bias is not added"),
    (lambda self, x: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias,
     "equal to torch", "the mean is not subtracted"),
    (lambda self, x: (x - x.mean(0)) / torch.sqrt(x.var(0, correction=0) + self.eps) * self.weight + self.bias,
     "equal to torch", "first dimension"),
    (lambda self, x: (x - x.mean(-1, keepdim=True)) / x.std(-1, correction=0, keepdim=True) * self.weight + self.bias,
     "equal to torch", "eps is missing"),
    (lambda self, x: _layer(x, self.weight, self.bias, self.eps,
                            var=x.pow(2).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2),
     "one million", r"mean\(x\*\*2\) - mean\(x\)\*\*2"),
])
def test_layer_norm_mistakes_are_named(ff, forward, case, pattern):
    fails(checks.check_layer_norm, _norm(ff.LayerNorm, forward), case, pattern)


def test_a_norm_without_eps_gives_nan_on_constant_rows_and_says_why(ff):
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        std = centred.pow(2).mean(-1, keepdim=True).sqrt()
        out = centred / std * self.weight + self.bias
        return out if (std == 0).any() else _layer(x, self.weight, self.bias, self.eps)
    fails(checks.check_layer_norm, _norm(ff.LayerNorm, forward), "all equal", "0 / 0", "eps")


def test_half_precision_without_float32_statistics_is_caught(ff):
    def forward(self, x):  # squares of 300 overflow float16: inf / inf
        centred = x - x.mean(-1, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias
    fails(checks.check_layer_norm, _norm(ff.LayerNorm, forward), "float16", "float32")


def test_layer_norm_that_changes_its_input_is_caught(ff):
    def forward(self, x):
        x -= x.mean(-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight + self.bias
    fails(checks.check_layer_norm, _norm(ff.LayerNorm, forward), "changed its input in place")


@pytest.mark.parametrize("forward, case, pattern", [
    (lambda self, x: (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, correction=0, keepdim=True) + self.eps)
     * self.weight, "equal to torch", "you subtracted the mean"),
    (lambda self, x: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight, "equal to torch",
     "outside the square root"),
    (lambda self, x: x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + self.eps) * self.weight, "equal to torch",
     "length of x"),
    (lambda self, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps), "equal to torch",
     "weight is not applied"),
    (lambda self, x: x * torch.rsqrt(x.var(-1, correction=0, keepdim=True) + self.eps) * self.weight,
     "equal to torch", "standard deviation"),
    (lambda self, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * self.weight, "equal to torch",
     "eps is missing"),
])
def test_rms_norm_mistakes_are_named(ff, forward, case, pattern):
    fails(checks.check_rms_norm, _norm(ff.RMSNorm, forward), case, pattern)


# ---------------------------------------------------------------------------------- Residual


def _residual(ff, forward):
    return type("WrongResidual", (ff.Residual,), {"forward": forward})


@pytest.mark.parametrize("pre, post, case, pattern", [
    (lambda s, x, a, k: s.norm(x + s.sublayer(x, *a, **k)), None, "pre-norm: x", "normalized after adding the residual"),
    (None, lambda s, x, a, k: x + s.sublayer(s.norm(x), *a, **k), "post-norm: norm", "normalized before the sublayer"),
    (lambda s, x, a, k: s.norm(x) + s.sublayer(s.norm(x), *a, **k), None, "pre-norm: x", "skip path carries norm"),
    (lambda s, x, a, k: s.sublayer(s.norm(x), *a, **k), None, "pre-norm: x", "residual is missing"),
    (None, lambda s, x, a, k: s.norm(s.sublayer(x, *a, **k)), "post-norm: norm", "residual is missing"),
    (lambda s, x, a, k: x + s.norm(s.sublayer(x, *a, **k)), None, "pre-norm: x", "normalized the sublayer's output"),
    (lambda s, x, a, k: x + s.sublayer(x, *a, **k), None, "pre-norm: x", "norm is never applied"),
    (lambda s, x, a, k: x + s.sublayer(s.norm(x)), lambda s, x, a, k: s.norm(x + s.sublayer(x)),
     "extra arguments", r"the extra arguments do not reach.*\*args, \*\*kwargs"),
    (lambda s, x, a, k: x + s.sublayer(s.norm(x), **k), None, "extra arguments", r"positional arguments do not reach"),
    (lambda s, x, a, k: x + s.sublayer(s.norm(x), *a), None, "extra arguments", r"keyword arguments do not reach"),
])
def test_residual_mistakes_are_named(ff, pre, post, case, pattern):
    def forward(self, x, *args, **kwargs):
        wrong = pre if self.placement == "pre" else post
        if wrong is None:
            return ff.Residual.forward(self, x, *args, **kwargs)
        return wrong(self, x, args, kwargs)
    fails(checks.check_residual, _residual(ff, forward), case, pattern)


def test_residual_blames_a_wrong_norm_first(ff):
    class BadNorm(ff.LayerNorm):
        def forward(self, x):
            return super().forward(x) * 2

    class WithBadNorm(ff.Residual):
        def __init__(self, sublayer, d, placement="pre", norm="layer", eps=None):
            super().__init__(sublayer, d, placement, norm, eps)
            if norm == "layer":
                self.norm = BadNorm(d) if eps is None else BadNorm(d, eps)

    fails(checks.check_residual, WithBadNorm, "pre-norm", "block.norm is BadNorm", "make its check pass first")


def test_gelu_reference_formula_used_by_the_check_is_the_erf_one():
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    torch.testing.assert_close(F.gelu(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))


# ---------------------------------------------------------------------------------- shortcuts


def _with_forward(base, forward):
    return type(f"Shortcut{base.__name__}", (base,), {"forward": forward})


@pytest.mark.parametrize("kind, forward, name", [
    ("LayerNorm", lambda self, x: F.layer_norm(x, (self.d,), self.weight, self.bias, self.eps), r"F\.layer_norm"),
    ("LayerNorm", lambda self, x: torch.layer_norm(x, (self.d,), self.weight, self.bias, self.eps), r"F\.layer_norm"),
    ("LayerNorm", lambda self, x: torch.nn.functional.instance_norm(x.reshape(-1, 1, self.d), eps=self.eps)
     .reshape(x.shape) * self.weight + self.bias, r"F\.instance_norm"),
    ("LayerNorm", lambda self, x: F.batch_norm(x.reshape(-1, self.d).T, None, None, training=True, eps=self.eps)
     .T.reshape(x.shape) * self.weight + self.bias, r"F\.batch_norm"),
    ("RMSNorm", lambda self, x: F.rms_norm(x, (self.d,), self.weight, self.eps), r"F\.rms_norm"),
    ("RMSNorm", lambda self, x: torch.rms_norm(x, (self.d,), self.weight, self.eps), r"F\.rms_norm"),
])
def test_pytorchs_norms_are_refused_by_the_check(ff, kind, forward, name):
    check = checks.check_layer_norm if kind == "LayerNorm" else checks.check_rms_norm
    fails(check, _with_forward(getattr(ff, kind), forward), f"your {kind} calls {name}", "write yourself")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_norm_rules_see_pytorchs_norms_and_not_the_reference(ff, dtype):
    """On this torch, in every dtype the lesson uses: FORBIDDEN catches F.layer_norm, nn.LayerNorm,
    F.rms_norm and nn.RMSNorm (forward and backward) and lets an honest implementation through."""
    from attnlab.shortcuts import ForbiddenCalls, forbidden

    d = 8
    x = (3 * torch.randn(4, d, generator=torch.Generator().manual_seed(0))).to(dtype)
    calls = {
        "feedforward.LayerNorm": (ff.LayerNorm(d).to(dtype), [lambda x: F.layer_norm(x, (d,)),
                                                               torch.nn.LayerNorm(d).to(dtype)]),
        "feedforward.RMSNorm": (ff.RMSNorm(d).to(dtype), [lambda x: F.rms_norm(x, (d,), eps=1e-6),
                                                           torch.nn.RMSNorm(d, eps=1e-6).to(dtype)]),
    }
    for exercise, (honest, shortcuts) in calls.items():
        for shortcut in shortcuts:
            with ForbiddenCalls(forbidden(exercise)) as watch:
                shortcut(x.clone().requires_grad_()).float().sum().backward()
            assert watch.seen, (exercise, shortcut)
        with ForbiddenCalls(forbidden(exercise)) as watch:
            honest(x.clone().requires_grad_()).float().sum().backward()
        assert not watch.seen, (exercise, watch.seen)


def test_a_hint_that_the_input_cannot_tell_apart_is_dropped():
    from attnlab.checks.lesson06 import _distinct_hint

    right = torch.tensor([1.0, 2.0], dtype=torch.float64)
    wrong = torch.tensor([1.0, 3.0], dtype=torch.float64)
    assert _distinct_hint(wrong, right, {"a": wrong, "b": right.clone()}) == "a"
    assert _distinct_hint(wrong, right, {"a": wrong, "b": wrong.clone()}) == ""  # two mistakes look alike
    assert _distinct_hint(right + 1e-3, right, {"coincides with the right answer": right.clone()}) == ""


def test_the_swiglu_check_accepts_every_nearest_width_and_names_mistakes(capsys):
    def exact(d, f, bias=False):
        return f * (2 * d + bias) / (3 * d + 2 * bias)

    checks.check_swiglu_width(lambda d, f, bias=False: round(exact(d, f, bias)))
    checks.check_swiglu_width(lambda d, f, bias=False: math.ceil(exact(d, f, bias)) if exact(d, f, bias) % 1 == 0.5
                              else round(exact(d, f, bias)))   # the other of two that tie
    assert capsys.readouterr().out.count("✓ swiglu_width: 5 checks passed") == 2
    mistakes = {
        "the GELU block's own width": lambda d, f, bias=False: f,
        "follows d_model": lambda d, f, bias=False: round(8 * d / 3),
        "left out the biases": lambda d, f, bias=False: round(2 * f / 3),
        "whole number of neurons": lambda d, f, bias=False: exact(d, f, bias),
        "not the one below or above": lambda d, f, bias=False: int(exact(d, f, bias)) if f == 100 else round(exact(d, f, bias)),
    }
    for message, wrong in mistakes.items():
        with pytest.raises(AssertionError, match=message):
            checks.check_swiglu_width(wrong)

    def unanswered(d, f, bias=False):
        raise NotImplementedError()

    checks.check_swiglu_width(unanswered)          # not graded: an unanswered exercise lets Run All go on
    assert "not answered yet" in capsys.readouterr().out
