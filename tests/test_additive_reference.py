"""The reference of lesson 01 (solutions/attnlab/additive.py) against an independent float64
computation, and its stub.

The independent computation is written here in numpy, one query and one key at a time, straight
from the formula score_j = tanh(q W_q + k_j W_k) v; the learner's stub (src/attnlab/additive.py)
must raise NotImplementedError naming Lesson 01 while still checking its inputs.
"""

from __future__ import annotations

import copy
import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.helpers import borrowed_reference, load_stub

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ref():
    """attnlab.additive as the course's reference (through the switch), restored afterwards."""
    yield from borrowed_reference("additive")


@pytest.fixture(scope="module")
def stub():
    """The learner's stub, loaded from its file under a private name (the switch is not involved)."""
    return load_stub("additive")


# ------------------------------------------------------------------ independent float64 computation


def loop_scores(query, keys, W_q, W_k, v) -> np.ndarray:
    """Scores (batch, n) for query (batch, d_q), keys (batch, n, d_k), one pair at a time."""
    q, k, Wq, Wk, vv = (np.asarray(t.detach().double() if isinstance(t, torch.Tensor) else t, dtype=np.float64)
                        for t in (query, keys, W_q, W_k, v))
    batch, n = k.shape[0], k.shape[1]
    scores = np.empty((batch, n))
    for b in range(batch):
        for j in range(n):
            scores[b, j] = sum(vv[a] * math.tanh(float(q[b] @ Wq[:, a] + k[b, j] @ Wk[:, a]))
                               for a in range(vv.shape[0]))
    return scores


def loop_attention(query, keys, values, W_q, W_k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """(context (batch, d_v), weights (batch, n)) with a softmax over the allowed keys only."""
    scores = loop_scores(query, keys, W_q, W_k, v)
    x = np.asarray(values.detach().double(), dtype=np.float64)
    allowed = np.ones(scores.shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask), scores.shape)
    weights = np.zeros(scores.shape)
    for b in range(scores.shape[0]):
        kept = scores[b][allowed[b]]
        e = np.exp(kept - kept.max())
        weights[b][allowed[b]] = e / e.sum()
    context = np.einsum("bn,bnd->bd", weights, x)
    return context, weights


def random_problem(seed: int, *, masked: bool, dtype=torch.float64, spread: float = 1.0):
    """query (B, d_q), keys (B, n, d_k), values (B, n, d_v), W_q, W_k, v and a padding mask or None."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda low, high: int(torch.randint(low, high, (), generator=g))  # noqa: E731
    batch, n, d_q, d_k, d_v, d_attn = pick(1, 6), pick(1, 9), pick(1, 8), pick(1, 8), pick(1, 5), pick(1, 8)
    randn = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    tensors = (randn(batch, d_q), randn(batch, n, d_k), randn(batch, n, d_v),
               randn(d_q, d_attn), randn(d_k, d_attn), spread * randn(d_attn))
    mask = None
    if masked:
        lengths = torch.randint(1, n + 1, (batch,), generator=g)
        mask = torch.arange(n) < lengths[:, None]
    return (*(t.to(dtype) for t in tensors), mask)


# ------------------------------------------------------------------ additive_scores


@pytest.mark.parametrize("seed", range(10))
def test_scores_match_the_loop(ref, seed):
    query, keys, _, W_q, W_k, v, _ = random_problem(seed, masked=False)
    inputs = [t.clone() for t in (query, keys, W_q, W_k, v)]
    scores = ref.additive_scores(query, keys, W_q, W_k, v)
    np.testing.assert_allclose(scores.numpy(), loop_scores(query, keys, W_q, W_k, v), rtol=1e-12, atol=1e-12)
    for before, after in zip(inputs, (query, keys, W_q, W_k, v)):
        assert torch.equal(before, after)


def test_scores_broadcast_batch_dimensions_and_shared_keys(ref):
    g = torch.Generator().manual_seed(1)
    W_q, W_k, v = torch.randn(3, 5, generator=g), torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
    # leading dimensions (2, 3)
    query, keys = torch.randn(2, 3, 3, generator=g), torch.randn(2, 3, 6, 4, generator=g)
    scores = ref.additive_scores(query, keys, W_q, W_k, v)
    assert scores.shape == (2, 3, 6)
    flat = loop_scores(query.reshape(6, 3), keys.reshape(6, 6, 4), W_q, W_k, v).reshape(2, 3, 6)
    np.testing.assert_allclose(scores.numpy(), flat, rtol=1e-5, atol=1e-5)
    # one query without batch dimensions, and several queries against one shared set of keys
    assert ref.additive_scores(query[0, 0], keys[0, 0], W_q, W_k, v).shape == (6,)
    shared = ref.additive_scores(query[0], keys[0, 0], W_q, W_k, v)
    assert shared.shape == (3, 6)
    for i in range(3):
        torch.testing.assert_close(shared[i], ref.additive_scores(query[0, i], keys[0, 0], W_q, W_k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_scores_keep_the_dtype(ref, dtype):
    query, keys, _, W_q, W_k, v, _ = random_problem(3, masked=False, dtype=dtype)
    assert ref.additive_scores(query, keys, W_q, W_k, v).dtype == dtype


# ------------------------------------------------------------------ additive_attention


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("masked", [False, True])
def test_attention_matches_the_loop(ref, seed, masked):
    query, keys, values, W_q, W_k, v, mask = random_problem(100 + seed, masked=masked)
    inputs = [t.clone() for t in (query, keys, values, W_q, W_k, v)]
    context, weights = ref.additive_attention(query, keys, values, W_q, W_k, v, mask=mask)
    want_context, want_weights = loop_attention(query, keys, values, W_q, W_k, v, mask)
    np.testing.assert_allclose(weights.numpy(), want_weights, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(context.numpy(), want_context, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(weights.sum(-1).numpy(), 1.0, rtol=0, atol=1e-12)
    if mask is not None:
        assert (weights[~mask] == 0).all(), "padding must get weight exactly 0"
    for before, after in zip(inputs, (query, keys, values, W_q, W_k, v)):
        assert torch.equal(before, after)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_is_stable_for_large_scores_and_keeps_dtype(ref, dtype):
    query, keys, values, W_q, W_k, v, mask = random_problem(7, masked=True, dtype=dtype, spread=1e4)
    context, weights = ref.additive_attention(query, keys, values, W_q, W_k, v, mask=mask)
    assert context.dtype == weights.dtype == dtype
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    _, want_weights = loop_attention(query, keys, values, W_q, W_k, v, mask)
    np.testing.assert_allclose(weights.double().numpy(), want_weights, atol=1e-3 if dtype == torch.float32 else 1e-9)


def test_attention_with_broadcast_mask_and_batch_dimensions(ref):
    g = torch.Generator().manual_seed(5)
    query, keys, values = torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 5, 6, generator=g), torch.randn(2, 3, 5, 2, generator=g)
    W_q, W_k, v = torch.randn(4, 3, generator=g), torch.randn(6, 3, generator=g), torch.randn(3, generator=g)
    mask = torch.tensor([True, False, True, True, False])
    context, weights = ref.additive_attention(query, keys, values, W_q, W_k, v, mask=mask)
    assert context.shape == (2, 3, 2) and weights.shape == (2, 3, 5)
    assert (weights[..., ~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))


def test_attention_gradients_match_finite_differences(ref):
    query, keys, values, W_q, W_k, v, mask = random_problem(11, masked=True)
    inputs = tuple(t.clone().requires_grad_() for t in (query, keys, values, W_q, W_k, v))
    assert torch.autograd.gradcheck(lambda *t: ref.additive_attention(*t, mask=mask)[0], inputs)


def test_a_fully_masked_row_is_a_clear_error(ref, stub):
    query, keys, values, W_q, W_k, v, _ = random_problem(12, masked=False)
    mask = torch.ones(keys.shape[:2], dtype=torch.bool)
    mask[0] = False
    for module in (ref, stub):
        with pytest.raises(ValueError, match="a row of the mask is all False"):
            module.additive_attention(query, keys, values, W_q, W_k, v, mask=mask)


# ------------------------------------------------------------------ AdditiveAttention


def test_module_parameters_shapes_and_seeded_init(ref):
    torch.manual_seed(0)
    module = ref.AdditiveAttention(5, 7, 3)
    params = dict(module.named_parameters())
    assert set(params) == {"W_q", "W_k", "v"}
    assert params["W_q"].shape == (5, 3) and params["W_k"].shape == (7, 3) and params["v"].shape == (3,)
    assert all(isinstance(p, nn.Parameter) for p in params.values())
    for name, fan_in in (("W_q", 5), ("W_k", 7), ("v", 3)):
        assert params[name].abs().max() <= 1 / math.sqrt(fan_in)
    torch.manual_seed(0)
    again = ref.AdditiveAttention(5, 7, 3)
    assert all(torch.equal(params[name], p) for name, p in again.named_parameters())
    assert "d_q=5, d_k=7, d_attn=3" in repr(module)


def test_module_forward_equals_the_function_and_trains(ref):
    torch.manual_seed(1)
    module = ref.AdditiveAttention(4, 6, 5).double()
    query, keys, values = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 7, 6, dtype=torch.float64), torch.randn(3, 7, 2, dtype=torch.float64)
    mask = torch.arange(7) < torch.tensor([[7], [3], [1]])
    context, weights = module(query, keys, values, mask)
    want_context, want_weights = loop_attention(query, keys, values, module.W_q, module.W_k, module.v, mask)
    np.testing.assert_allclose(weights.detach().numpy(), want_weights, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(context.detach().numpy(), want_context, rtol=1e-12, atol=1e-13)
    context.pow(2).sum().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------ AttentionDecoderStep


def test_decoder_step_shapes_and_values(ref):
    torch.manual_seed(2)
    step = ref.AttentionDecoderStep(vocab_size=11, d_embed=3, d_hidden=5, d_enc=6, d_attn=4).double()
    g = torch.Generator().manual_seed(3)
    prev = torch.randint(11, (4,), generator=g)
    hidden = torch.randn(4, 5, generator=g, dtype=torch.float64)
    states = torch.randn(4, 7, 6, generator=g, dtype=torch.float64)
    mask = torch.arange(7) < torch.tensor([[7], [4], [2], [1]])
    logits, new_hidden, weights = step(prev, hidden, states, mask)
    assert logits.shape == (4, 11) and new_hidden.shape == (4, 5) and weights.shape == (4, 7)
    # the same step, computed from its parts: loop attention, PyTorch's GRU cell, the linear layer
    context, want_weights = loop_attention(hidden, states, states, step.attention.W_q, step.attention.W_k,
                                           step.attention.v, mask)
    context = torch.from_numpy(context)
    cell = copy.deepcopy(step.cell)
    with torch.no_grad():
        want_hidden = cell(torch.cat([step.embedding.weight[prev], context], dim=-1), hidden)
        want_logits = step.output(torch.cat([want_hidden, context], dim=-1))
    np.testing.assert_allclose(weights.detach().numpy(), want_weights, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(new_hidden, want_hidden, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logits, want_logits, rtol=1e-12, atol=1e-12)
    assert (weights[~mask] == 0).all()


def test_decoder_step_gradients_reach_every_parameter(ref):
    torch.manual_seed(4)
    step = ref.AttentionDecoderStep(9, 4, 6, 8, 5)
    prev, hidden, states = torch.randint(9, (3,)), torch.randn(3, 6), torch.randn(3, 5, 8)
    logits, new_hidden, _ = step(prev, hidden, states, torch.arange(5) < torch.tensor([[5], [3], [2]]))
    (logits * torch.randn(logits.shape)).sum().backward()
    for name, p in step.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ------------------------------------------------------------------ clear errors (reference and stub alike)


@pytest.fixture(params=["reference", "stub"])
def module(request, ref, stub):
    """Both modules check their inputs the same way (the checks sit outside the solution)."""
    return ref if request.param == "reference" else stub


def _good():
    return torch.randn(2, 3), torch.randn(2, 5, 4), torch.randn(2, 5, 6), torch.randn(3, 7), torch.randn(4, 7), torch.randn(7)


def test_mismatched_sizes_are_clear_errors(module):
    query, keys, values, W_q, W_k, v = _good()
    with pytest.raises(ValueError, match=r"query has size d_q=3 but W_q is \(4, 7\)"):
        module.additive_scores(query, keys, W_k, W_k, v)
    with pytest.raises(ValueError, match=r"keys have size d_k=4 but W_k is \(3, 7\)"):
        module.additive_scores(query, keys, W_q, W_q, v)
    with pytest.raises(ValueError, match="must share the attention size d_attn"):
        module.additive_scores(query, keys, W_q, W_k, torch.randn(6))
    with pytest.raises(ValueError, match="same number n of positions"):
        module.additive_attention(query, keys, values[:, :4], W_q, W_k, v)
    with pytest.raises(ValueError, match="do not broadcast"):
        module.additive_scores(torch.randn(3, 3), keys, W_q, W_k, v)
    with pytest.raises(ValueError, match=r"W_q must be \(d_q, d_attn\)"):
        module.additive_scores(query, keys, W_q, W_k, v[None])


def test_bad_types_and_dtypes_are_clear_errors(module):
    query, keys, values, W_q, W_k, v = _good()
    with pytest.raises(TypeError, match="query must be a torch.Tensor, got ndarray"):
        module.additive_scores(query.numpy(), keys, W_q, W_k, v)
    with pytest.raises(TypeError, match="keys must be floating point"):
        module.additive_scores(query, keys.long(), W_q, W_k, v)
    with pytest.raises(TypeError, match="must share one dtype"):
        module.additive_scores(query.double(), keys, W_q, W_k, v)
    with pytest.raises(ValueError, match=r"keys must have shape \(\.\.\., n, d_k\)"):
        module.additive_scores(query, torch.randn(4), W_q, W_k, v)


def test_bad_masks_are_clear_errors(module):
    query, keys, values, W_q, W_k, v = _good()
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor .* got torch.float32"):
        module.additive_attention(query, keys, values, W_q, W_k, v, mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 4\) does not broadcast to the scores' shape \(2, 5\)"):
        module.additive_attention(query, keys, values, W_q, W_k, v, mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 2, 5\)"):
        module.additive_attention(query, keys, values, W_q, W_k, v, mask=torch.ones(3, 2, 5, dtype=torch.bool))


def test_bad_module_sizes_and_decoder_inputs_are_clear_errors(module, ref):
    with pytest.raises(ValueError, match="d_attn must be a positive int, got 0"):
        module.AdditiveAttention(3, 4, 0)
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        module.AttentionDecoderStep(2.5, 3, 4, 5, 6)
    step = ref.AttentionDecoderStep(7, 3, 4, 5, 6)
    with pytest.raises(TypeError, match="prev_tokens must be a torch.long tensor"):
        step(torch.zeros(2), torch.randn(2, 4), torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="must share the batch size"):
        step(torch.zeros(2, dtype=torch.long), torch.randn(3, 4), torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"expected prev_tokens \(batch,\)"):
        step(torch.zeros(2, dtype=torch.long), torch.randn(2, 4), torch.randn(3, 5))


# ------------------------------------------------------------------ the stub


@pytest.mark.parametrize("name", ["additive_scores", "additive_attention", "AdditiveAttention.__init__",
                                  "AdditiveAttention.forward", "AttentionDecoderStep.forward"])
def test_stub_raises_not_implemented_naming_lesson_01(stub, ref, monkeypatch, name):
    query, keys, values, W_q, W_k, v = _good()
    calls = {
        "additive_scores": lambda: stub.additive_scores(query, keys, W_q, W_k, v),
        "additive_attention": lambda: stub.additive_attention(query, keys, values, W_q, W_k, v),
        "AdditiveAttention.__init__": lambda: stub.AdditiveAttention(3, 4, 7),
    }
    if name == "AdditiveAttention.forward":
        attention = stub.AdditiveAttention.__new__(stub.AdditiveAttention)
        nn.Module.__init__(attention)
        calls[name] = lambda: attention(query, keys, values)
    if name == "AttentionDecoderStep.forward":
        monkeypatch.setattr(stub, "AdditiveAttention", ref.AdditiveAttention)  # build it with the reference's
        step = stub.AttentionDecoderStep(7, 3, 3, 4, 5)
        calls[name] = lambda: step(torch.zeros(2, dtype=torch.long), torch.randn(2, 3), keys)
    with pytest.raises(NotImplementedError, match="Lesson 01") as caught:
        calls[name]()
    assert f"{name}()" in str(caught.value)
    assert "attnlab.use_reference('additive')" in str(caught.value)


def test_stub_keeps_signatures_docstrings_and_given_code(ref, stub):
    for name in ("additive_scores", "additive_attention"):
        assert inspect.signature(getattr(stub, name)) == inspect.signature(getattr(ref, name))
        assert getattr(stub, name).__doc__ == getattr(ref, name).__doc__
    for cls in ("AdditiveAttention", "AttentionDecoderStep"):
        for method in ("__init__", "forward"):
            stub_method, ref_method = getattr(getattr(stub, cls), method), getattr(getattr(ref, cls), method)
            assert inspect.signature(stub_method) == inspect.signature(ref_method)
        assert getattr(stub, cls).__doc__ == getattr(ref, cls).__doc__
    # reset_parameters and the decoder's layers are given, not exercises
    assert inspect.getsource(stub.AdditiveAttention.reset_parameters) == inspect.getsource(ref.AdditiveAttention.reset_parameters)
    assert inspect.getsource(stub.AttentionDecoderStep.__init__) == inspect.getsource(ref.AttentionDecoderStep.__init__)
