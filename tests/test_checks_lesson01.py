"""The visible checks of lesson 01: they pass on the reference and fail, with the right diagnostic,
on deliberately broken implementations of additive attention."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.helpers import borrowed_reference, fails, load_stub
from attnlab import checks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ref():
    """attnlab.additive as the course's reference, restored to what it was afterwards."""
    yield from borrowed_reference("additive")


@pytest.fixture(scope="module")
def stub():
    """The learner's stub, loaded straight from its file under a private name."""
    return load_stub("additive")


# ---------------------------------------------------------------------------- the reference passes


def test_all_checks_pass_on_the_reference(ref, capsys):
    checks.check_additive_scores(ref.additive_scores)
    checks.check_additive_attention(ref.additive_attention)
    checks.check_additive_attention_module(ref.AdditiveAttention)
    checks.check_attention_decoder_step(ref.AttentionDecoderStep)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-4:] == [
        "✓ additive_scores: 8 checks passed",
        "✓ additive_attention: 9 checks passed",
        "✓ AdditiveAttention: 7 checks passed",
        "✓ AttentionDecoderStep: 7 checks passed",
    ]


def test_checks_accept_an_independent_correct_version(capsys):
    def scores(query, keys, W_q, W_k, v):
        return torch.einsum("...na,a->...n", torch.tanh(torch.einsum("...d,da->...a", query, W_q)[..., None, :]
                                                        + torch.einsum("...nd,da->...na", keys, W_k)), v)

    def attention(query, keys, values, W_q, W_k, v, mask=None):
        s = scores(query, keys, W_q, W_k, v)
        if mask is not None:
            s = torch.where(mask, s, torch.tensor(-math.inf, dtype=s.dtype))
        w = torch.exp(s - s.amax(-1, keepdim=True))
        w = w / w.sum(-1, keepdim=True)
        return torch.einsum("...n,...nd->...d", w, values), w

    checks.check_additive_scores(scores)
    checks.check_additive_attention(attention)
    assert "✓ additive_attention: 9 checks passed" in capsys.readouterr().out


@pytest.mark.parametrize("check, name", [
    (checks.check_additive_scores, "additive_scores"),
    (checks.check_additive_attention, "additive_attention"),
    (checks.check_additive_attention_module, "AdditiveAttention"),
])
def test_stub_not_implemented_error_passes_through_unchanged(stub, check, name):
    with pytest.raises(NotImplementedError) as caught:
        check(getattr(stub, name))
    assert str(caught.value).startswith(f"Lesson 01: {name}")
    assert "attnlab.use_reference('additive')" in str(caught.value)


def test_decoder_check_with_a_blank_library_names_what_to_finish(stub):
    # the decoder step builds AdditiveAttention, so a blank library stops at exercise 3
    with pytest.raises(NotImplementedError, match=r"Lesson 01: AdditiveAttention.__init__\(\)"):
        checks.check_attention_decoder_step(stub.AttentionDecoderStep)


# ---------------------------------------------------------------------------- broken additive_scores


def _scores(query, keys, W_q, W_k, v, act=torch.tanh):
    return act((query @ W_q).unsqueeze(-2) + keys @ W_k) @ v


def test_scores_without_tanh():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: _scores(q, k, Wq, Wk, v, act=lambda x: x),
          r"additive_scores, case 'W_q for the query, W_k for the keys'", "largest error", "you left out the tanh")


def test_scores_tanh_after_v():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: torch.tanh(((q @ Wq).unsqueeze(-2) + k @ Wk) @ v),
          "you applied tanh after multiplying by v")


def test_scores_summed_instead_of_v():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: torch.tanh((q @ Wq).unsqueeze(-2) + k @ Wk).sum(-1),
          "you summed over the attention axis instead of multiplying by v")


def test_scores_with_swapped_matrices():
    def swapped(q, k, Wq, Wk, v):
        if Wq.shape == Wk.shape:
            Wq, Wk = Wk, Wq
        return _scores(q, k, Wq, Wk, v)
    fails(checks.check_additive_scores, swapped, "W_q for the query, W_k for the keys",
          "you swapped the matrices: W_q projects the query and W_k the keys")


def test_scores_without_v():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: torch.tanh((q @ Wq).unsqueeze(-2) + k @ Wk),
          r"scores with d_q == d_k \(W_q and W_k both \(4, 4\)\) has shape \(2, 5, 4\), expected \(2, 5\) = \(\.\.\., n\)",
          "you did not reduce the attention axis: multiply the tanh by v")


def test_scores_without_the_key_axis_crash_is_reported():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: torch.tanh(q @ Wq + k @ Wk) @ v,
          "case 'W_q for the query, W_k for the keys': your function raised RuntimeError")


def test_scores_that_do_not_broadcast_over_shared_keys():
    def loops(q, k, Wq, Wk, v):
        return torch.stack([_scores(q[b], k[b], Wq, Wk, v) for b in range(q.shape[0])]) if q.dim() > 1 else _scores(q, k, Wq, Wk, v)
    fails(checks.check_additive_scores, loops, "case 'batch dimensions|case 'several queries scoring shared keys'")


def test_scores_upcast_or_modify_inputs():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: _scores(q.double(), k.double(), Wq.double(), Wk.double(), v.double()),
          "float32 and float64 kept", "scores of float32 inputs has dtype torch.float64")

    def in_place(query, keys, W_q, W_k, v):
        keys.mul_(1.0 + 1e-3)
        return _scores(query, keys, W_q, W_k, v)
    fails(checks.check_additive_scores, in_place, "changed its input in place: keys is different")


# ---------------------------------------------------------------------------- broken additive_attention


def _attention(query, keys, values, W_q, W_k, v, mask=None, fill=-math.inf, dim=-1):
    s = _scores(query, keys, W_q, W_k, v)
    if mask is not None:
        s = s.masked_fill(~mask, fill)
    w = torch.softmax(s, dim=dim)
    return (w.unsqueeze(-2) @ values).squeeze(-2), w


def test_attention_ignoring_the_mask():
    message = fails(checks.check_additive_attention,
                    lambda q, k, x, Wq, Wk, v, mask=None: _attention(q, k, x, Wq, Wk, v),
                    "case 'padding mask: 0 on padding, sum 1 over the rest'",
                    r"padding positions got weight 0\.\d+",
                    "the mask is ignored: set the scores to -inf where the mask is False, before the softmax")
    assert "nonzero" in message


def test_attention_masking_after_the_softmax():
    def after(q, k, x, Wq, Wk, v, mask=None):
        _, w = _attention(q, k, x, Wq, Wk, v)
        if mask is not None:
            w = w * mask
        return (w.unsqueeze(-2) @ x).squeeze(-2), w
    fails(checks.check_additive_attention, after,
          r"your weights with a padding mask \(lengths 6, 4, 2, 1\) do not sum to 1 over the unmasked keys",
          "you zeroed the padding weights after the softmax")


def test_attention_with_an_inverted_mask():
    fails(checks.check_additive_attention,
          lambda q, k, x, Wq, Wk, v, mask=None: _attention(q, k, x, Wq, Wk, v, None if mask is None else ~mask)
          if mask is None or bool((~mask).any(-1).all()) else _attention(q, k, x, Wq, Wk, v, mask),
          "padding positions got weight", "True means 'may be used'")


def test_attention_with_a_finite_fill_value():
    fails(checks.check_additive_attention,
          lambda q, k, x, Wq, Wk, v, mask=None: _attention(q, k, x, Wq, Wk, v, mask, fill=-100.0),
          "padding positions got weight", "large negative number", r"Fill them with -inf")


def test_attention_softmax_over_the_batch_axis():
    fails(checks.check_additive_attention, lambda q, k, x, Wq, Wk, v, mask=None: _attention(q, k, x, Wq, Wk, v, mask, dim=0),
          "your softmax runs over the batch axis")


def test_attention_returning_scores():
    def scores_only(q, k, x, Wq, Wk, v, mask=None):
        s = _scores(q, k, Wq, Wk, v)
        return (s.unsqueeze(-2) @ x).squeeze(-2), s
    fails(checks.check_additive_attention, scores_only, "you returned the scores, not the weights")


def test_attention_unstable_softmax():
    def naive(q, k, x, Wq, Wk, v, mask=None):
        s = _scores(q, k, Wq, Wk, v)
        e = torch.exp(s)
        if mask is not None:
            e = e * mask
        w = e / e.sum(-1, keepdim=True)
        return (w.unsqueeze(-2) @ x).squeeze(-2), w
    fails(checks.check_additive_attention, naive, "scores in the thousands", "nan for scores in the thousands")


def test_attention_swapped_outputs_and_keys_as_values():
    fails(checks.check_additive_attention, lambda *a, **kw: _attention(*a, **kw)[::-1],
          r"did you return \(weights, context\) instead of \(context, weights\)\?")
    fails(checks.check_additive_attention,
          lambda q, k, x, Wq, Wk, v, mask=None: _attention(q, k, k, Wq, Wk, v, mask),
          "the context averages the values")


def test_attention_detached():
    def detached(q, k, x, Wq, Wk, v, mask=None):
        context, w = _attention(q, k, x, Wq, Wk, v, mask)
        return context.detach(), w.detach()
    fails(checks.check_additive_attention, detached, "gradients reach", "no gradient can flow back through the context", r"no \.detach\(\)")


def test_attention_not_a_pair():
    fails(checks.check_additive_attention, lambda *a, **kw: _attention(*a, **kw)[0],
          r"additive_attention must return a pair \(context, weights\)")


# ---------------------------------------------------------------------------- broken AdditiveAttention


class _Base(nn.Module):
    def forward(self, query, keys, values, mask=None):
        return _attention(query, keys, values, self.W_q, self.W_k, self.v, mask)


class LinearLayers(nn.Module):
    def __init__(self, d_q, d_k, d_attn):
        super().__init__()
        self.W_q, self.W_k = nn.Linear(d_q, d_attn, bias=False), nn.Linear(d_k, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)


class Transposed(_Base):
    def __init__(self, d_q, d_k, d_attn):
        super().__init__()
        self.W_q = nn.Parameter(torch.rand(d_attn, d_q) * 0.1)
        self.W_k = nn.Parameter(torch.rand(d_attn, d_k) * 0.1)
        self.v = nn.Parameter(torch.rand(d_attn) * 0.1)


class NotInitialised(_Base):
    def __init__(self, d_q, d_k, d_attn):
        super().__init__()
        self.W_q, self.W_k = nn.Parameter(torch.zeros(d_q, d_attn)), nn.Parameter(torch.zeros(d_k, d_attn))
        self.v = nn.Parameter(torch.zeros(d_attn))


class PlainTensors(_Base):
    def __init__(self, d_q, d_k, d_attn):
        super().__init__()
        self.W_q, self.W_k, self.v = torch.rand(d_q, d_attn), torch.rand(d_k, d_attn), torch.rand(d_attn)


def _reference_init(module, d_q, d_k, d_attn):
    module.d_q, module.d_k, module.d_attn = d_q, d_k, d_attn
    module.W_q = nn.Parameter(torch.empty(d_q, d_attn))
    module.W_k = nn.Parameter(torch.empty(d_k, d_attn))
    module.v = nn.Parameter(torch.empty(d_attn))
    with torch.no_grad():
        for p, fan_in in ((module.W_q, d_q), (module.W_k, d_k), (module.v, d_attn)):
            p.uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))


class IgnoresMask(nn.Module):
    def __init__(self, d_q, d_k, d_attn):
        super().__init__()
        _reference_init(self, d_q, d_k, d_attn)

    def forward(self, query, keys, values, mask=None):
        return _attention(query, keys, values, self.W_q, self.W_k, self.v)


class OwnGenerator(IgnoresMask):
    """Draws v from a generator of its own: ``seed=None`` seeds it from the OS (not reproducible),
    a number fixes it whatever torch.manual_seed says (every module the same)."""

    seed: int | None = None

    def __init__(self, d_q, d_k, d_attn):
        nn.Module.__init__(self)
        _reference_init(self, d_q, d_k, d_attn)
        g = torch.Generator()
        if self.seed is None:
            g.seed()
        else:
            g.manual_seed(self.seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_((torch.rand(p.shape, generator=g) - 0.5) / math.sqrt(d_attn) / 2)

    def forward(self, query, keys, values, mask=None):
        return _attention(query, keys, values, self.W_q, self.W_k, self.v, mask)


class FixedGenerator(OwnGenerator):
    seed = 1234


def test_module_with_linear_layers():
    fails(checks.check_additive_attention_module, LinearLayers,
          "has no parameter named W_k, W_q, v", "not nn.Linear layers")


def test_module_with_transposed_parameters():
    fails(checks.check_additive_attention_module, Transposed,
          r"parameter W_q has shape \(6, 5\), expected \(5, 6\) = \(d_q, d_attn\)", "the transpose of an nn.Linear weight")


def test_module_not_initialised():
    fails(checks.check_additive_attention_module, NotInitialised,
          "not initialised by reset_parameters", "keep the call to reset_parameters at the end of __init__")


def test_module_with_plain_tensors():
    fails(checks.check_additive_attention_module, PlainTensors, "has no parameter named", "as nn.Parameter attributes")


def test_module_ignoring_the_mask():
    fails(checks.check_additive_attention_module, IgnoresMask, "padding positions got weight",
          "pass the mask on to additive_attention")


def test_module_drawing_from_its_own_generator():
    fails(checks.check_additive_attention_module, OwnGenerator, "two modules built after torch.manual_seed",
          "draw the parameters from torch's global generator")
    fails(checks.check_additive_attention_module, FixedGenerator, "modules built with different seeds have identical")


# ---------------------------------------------------------------------------- broken AttentionDecoderStep


def _step_class(ref, forward):
    return type("BrokenStep", (ref.AttentionDecoderStep,), {"forward": forward})


def _parts(self, prev, hidden, states, mask):
    context, weights = self.attention(hidden, states, states, mask)
    return self.embedding(prev), context, weights


@pytest.mark.parametrize("name, forward, patterns", [
    ("cell input swapped",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([h := self.cell(torch.cat([c, e], -1), hidden), c], -1)), h, w))(*_parts(self, prev, hidden, states, mask)),
     ["new_hidden and the reference disagree", r"the cell's input is \(embedding, context\), in that order"]),
    ("output input swapped",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([c, h := self.cell(torch.cat([e, c], -1), hidden)], -1)), h, w))(*_parts(self, prev, hidden, states, mask)),
     [r"the output layer reads \(new_hidden, context\), in that order"]),
    ("output from the old state",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([hidden, c], -1)), self.cell(torch.cat([e, c], -1), hidden), w))(*_parts(self, prev, hidden, states, mask)),
     ["the output layer must read the new state"]),
    ("mask not passed on",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([h := self.cell(torch.cat([e, c], -1), hidden), c], -1)), h, w))(*_parts(self, prev, hidden, states, None)),
     ["padding positions got weight", "pass the mask on to self.attention"]),
    ("old state returned",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([self.cell(torch.cat([e, c], -1), hidden), c], -1)), hidden, w))(*_parts(self, prev, hidden, states, mask)),
     ["new_hidden is the hidden state you were given"]),
    ("wrong return order",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         w, h := self.cell(torch.cat([e, c], -1), hidden), self.output(torch.cat([h, c], -1))))(*_parts(self, prev, hidden, states, mask)),
     [r"logits has shape \(4, 7\), expected \(4, 9\)", r"in the order \(logits, new_hidden, weights\)"]),
    ("context detached",
     lambda self, prev, hidden, states, mask=None: (lambda e, c, w: (
         self.output(torch.cat([h := self.cell(torch.cat([e, c.detach()], -1), hidden), c.detach()], -1)), h, w))(*_parts(self, prev, hidden, states, mask)),
     ["gradients reach every parameter", "parameter attention.W_q got"]),
])
def test_decoder_step_mistakes(ref, name, forward, patterns):
    fails(checks.check_attention_decoder_step, _step_class(ref, forward), *patterns)


# ---------------------------------------------------------------------------- the float64 references


def test_reference_gru_cell_equals_pytorch():
    torch.manual_seed(0)
    cell = nn.GRUCell(5, 4).double()
    x, h = torch.randn(3, 5, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(checks.reference_gru_cell(x, h, cell), cell(x, h), rtol=1e-12, atol=1e-12)


def test_reference_additive_attention_masks_and_broadcasts():
    g = torch.Generator().manual_seed(1)
    query, keys, values = torch.randn(2, 3, generator=g), torch.randn(2, 4, 5, generator=g), torch.randn(2, 4, 2, generator=g)
    W_q, W_k, v = torch.randn(3, 6, generator=g), torch.randn(5, 6, generator=g), torch.randn(6, generator=g)
    mask = torch.tensor([[True, True, False, False], [True, False, True, True]])
    context, weights = checks.reference_additive_attention(query, keys, values, W_q, W_k, v, mask)
    assert context.dtype == weights.dtype == torch.float64
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, dtype=torch.float64))
    b, j = 1, 2  # one entry by hand
    by_hand = torch.tanh(query[b].double() @ W_q.double() + keys[b, j].double() @ W_k.double()) @ v.double()
    torch.testing.assert_close(checks.reference_additive_scores(query, keys, W_q, W_k, v)[b, j], by_hand)


def test_attention_with_a_parameter_cut_off_from_the_graph():
    def detached_projection(query, keys, values, W_q, W_k, v, mask=None):
        return _attention(query, keys, values, W_q.detach(), W_k, v, mask)
    fails(checks.check_additive_attention, detached_projection, "W_q got no gradient from a loss on the context")


def test_attention_gradients_are_compared_with_the_reference():
    # right values, wrong gradients: the check compares the gradients themselves, not only that they exist
    def half_gradient(q, k, x, Wq, Wk, v, mask=None):
        context, w = _attention(q, k, x, Wq, Wk, v, mask)
        return context.detach() + 0.5 * (context - context.detach()), w
    fails(checks.check_additive_attention, half_gradient, "gradients reach",
          r"the gradient of (W_q|W_k|v|query|keys|values) \(a loss on the context\) and the reference disagree")


def test_a_squeezed_size_one_dimension_is_named():
    fails(checks.check_additive_scores, lambda q, k, Wq, Wk, v: (_scores(q, k, Wq, Wk, v)[..., None]).squeeze(),
          "size-1 dimensions", r"\.squeeze\(\) without an axis")


def test_a_mask_read_as_lengths_is_named():
    def lengths(q, k, x, Wq, Wk, v, mask=None):
        prefix = None if mask is None else torch.arange(mask.shape[-1]) < mask.sum(-1, keepdim=True)
        return _attention(q, k, x, Wq, Wk, v, prefix)
    fails(checks.check_additive_attention, lengths, "a scattered boolean mask", "you read the mask as a padding mask")
