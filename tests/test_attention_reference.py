"""The reference of lesson 02 (solutions/attnlab/attention.py) against PyTorch, and its stub.

The reference is compared with ``torch.softmax`` and ``torch.nn.functional.scaled_dot_product_
attention`` in float64 on random shapes and seeds; the learner's stub (src/attnlab/attention.py)
must raise NotImplementedError naming Lesson 02 while still checking its inputs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from tests.helpers import borrowed_reference, load_stub

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("softmax", "attention_numpy", "scaled_dot_product_attention")


@pytest.fixture(scope="module")
def ref():
    """attnlab.attention as the course's reference (through the switch), restored afterwards."""
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def stub():
    """The learner's stub, loaded from its file under a private name (the switch is not involved)."""
    return load_stub("attention")


def random_problem(seed: int, *, mask: bool, float_dtype=torch.float64):
    """Random shapes with broadcasting batch dims, n_q != n_k (mostly), an optional mask."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda low, high: int(torch.randint(low, high, (), generator=g))  # noqa: E731
    n_q, n_k, d, d_v = pick(1, 9), pick(1, 11), pick(1, 17), pick(1, 9)
    batch = (pick(1, 4), pick(1, 4))
    q_batch = (batch[0], 1) if seed % 2 else batch  # broadcast over the second batch dimension
    k_batch = batch[1:] if seed % 3 == 0 else batch
    q = torch.randn(*q_batch, n_q, d, generator=g, dtype=torch.float64).to(float_dtype)
    k = torch.randn(*k_batch, n_k, d, generator=g, dtype=torch.float64).to(float_dtype)
    v = torch.randn(*k_batch, n_k, d_v, generator=g, dtype=torch.float64).to(float_dtype)
    m = None
    if mask:
        shape = (n_q, n_k) if seed % 2 else (*batch, n_q, n_k)
        m = torch.rand(*shape, generator=g) < 0.6
        keep = torch.randint(n_k, shape[:-1], generator=g)
        m = m | F.one_hot(keep, n_k).bool()  # every query may attend at least one key
    return q, k, v, m


def torch_reference(q, k, v, mask=None, scale=None):
    """float64 (out, weights) from PyTorch's own functions, batch dims expanded explicitly."""
    q, k, v = q.double(), k.double(), v.double()
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([mask.shape[:-2]] if mask is not None else [])
    batch = torch.broadcast_shapes(*shapes)
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    if mask is not None:
        mask = mask.expand(*batch, *mask.shape[-2:])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * s
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return out, torch.softmax(scores, dim=-1)


# ------------------------------------------------------------------------------------- softmax


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_matches_torch(ref, seed, dim):
    g = torch.Generator().manual_seed(100 + seed)
    x = 10 * torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    before = x.clone()
    torch.testing.assert_close(ref.softmax(x, dim=dim), torch.softmax(x, dim=dim), rtol=1e-12, atol=1e-14)
    assert torch.equal(x, before)


def test_softmax_extremes_and_minus_inf(ref):
    x = torch.tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [-math.inf, 1.0, -math.inf]])
    y = ref.softmax(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.softmax(x.double(), -1).float())
    assert y[2, 0] == 0 and y[2, 2] == 0 and y[2, 1] == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_softmax_keeps_dtype(ref, dtype):
    x = torch.randn(2, 7).to(dtype)
    assert ref.softmax(x).dtype == dtype


# ------------------------------------------------------------------------------------- torch attention


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_matches_pytorch_float64(ref, seed, masked):
    q, k, v, mask = random_problem(seed, mask=masked)
    scale = None if seed % 4 else 0.1 + seed / 10
    inputs = [t.clone() for t in (q, k, v)]
    out, weights = ref.scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    ref_out, ref_weights = torch_reference(q, k, v, mask, scale)
    torch.testing.assert_close(out, ref_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()
    for before, after in zip(inputs, (q, k, v)):
        assert torch.equal(before, after)


def test_sdpa_n_q_differs_from_n_k_and_d_v_from_d(ref):
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 11, 8), torch.randn(2, 11, 5)
    out, weights = ref.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 5) and weights.shape == (2, 3, 11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdpa_keeps_dtype_and_handles_extreme_scores(ref, dtype):
    q, k, v, mask = random_problem(3, mask=True, float_dtype=dtype)
    out, weights = ref.scaled_dot_product_attention(1e3 * q, k, v, mask=mask)
    assert out.dtype == weights.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    ref_out, _ = torch_reference(1e3 * q, k, v, mask)
    tolerance = 1e-3 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(out.double(), ref_out, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("n_q, n_k", [(4, 4), (3, 7), (1, 5)])
def test_sdpa_with_a_lower_right_causal_mask(ref, n_q, n_k):
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, n, 6, generator=g, dtype=torch.float64) for n in (n_q, n_k, n_k))
    allowed = causal_lower_right(n_q, n_k)._materialize()
    out, weights = ref.scaled_dot_product_attention(q, k, v, mask=allowed)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(n_q, n_k)))
    assert (weights[..., ~allowed] == 0).all()


def test_sdpa_gradients_match_pytorch(ref):
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, n, 4, generator=g, dtype=torch.float64, requires_grad=True) for n in (3, 5, 5))
    assert torch.autograd.gradcheck(lambda *t: ref.scaled_dot_product_attention(*t)[0], (q, k, v))


# ------------------------------------------------------------------------------------- numpy attention


@pytest.mark.parametrize("seed", range(8))
def test_attention_numpy_matches_torch(ref, seed):
    rng = np.random.default_rng(200 + seed)
    n_q, n_k, d, d_v = rng.integers(1, 9, size=4)
    batch = tuple(rng.integers(1, 4, size=seed % 3))
    Q = rng.standard_normal((*batch, n_q, d))
    K = rng.standard_normal((*batch, n_k, d))
    V = rng.standard_normal((*batch, n_k, d_v))
    copies = [a.copy() for a in (Q, K, V)]
    out, weights = ref.attention_numpy(Q, K, V)
    assert isinstance(out, np.ndarray) and isinstance(weights, np.ndarray)
    ref_out, ref_weights = torch_reference(*(torch.from_numpy(a) for a in (Q, K, V)))
    np.testing.assert_allclose(out, ref_out.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights, ref_weights.numpy(), rtol=1e-10, atol=1e-12)
    for before, after in zip(copies, (Q, K, V)):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("n_q, n_k", [(5, 5), (2, 6), (1, 4), (4, 9)])
def test_attention_numpy_causal_is_bottom_right_aligned(ref, n_q, n_k):
    rng = np.random.default_rng(n_q * 10 + n_k)
    Q, K, V = (rng.standard_normal((2, n, 3)) for n in (n_q, n_k, n_k))
    out, weights = ref.attention_numpy(Q, K, V, causal=True)
    allowed = causal_lower_right(n_q, n_k)._materialize().numpy()
    i, j = np.indices((n_q, n_k))
    assert np.array_equal(allowed, j <= i + (n_k - n_q))
    assert (weights[:, ~allowed] == 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    expected = F.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (Q, K, V)), attn_mask=causal_lower_right(n_q, n_k)
    )
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-10, atol=1e-12)


def test_attention_numpy_square_causal_equals_is_causal(ref):
    rng = np.random.default_rng(3)
    Q, K, V = (rng.standard_normal((6, 4)) for _ in range(3))
    out, _ = ref.attention_numpy(Q, K, V, causal=True)
    expected = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (Q, K, V)), is_causal=True)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-10, atol=1e-12)


def test_attention_numpy_stable_for_large_scores(ref):
    rng = np.random.default_rng(4)
    Q, K, V = 1e3 * rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    out, weights = ref.attention_numpy(Q, K, V)
    assert np.isfinite(out).all() and np.isfinite(weights).all()


# ------------------------------------------------------------------------------------- bad inputs


@pytest.fixture(params=["reference", "stub"])
def module(request, ref, stub):
    """Both modules check their inputs the same way (the checks sit outside the solution)."""
    return ref if request.param == "reference" else stub


def test_mismatched_d_is_a_clear_error(module):
    with pytest.raises(ValueError, match="q and k must share their last dimension d"):
        module.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(5, 6), torch.randn(5, 2))


def test_mismatched_n_k_is_a_clear_error(module):
    with pytest.raises(ValueError, match="k and v must have the same number of keys n_k"):
        module.scaled_dot_product_attention(torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 2))


def test_non_boolean_mask_is_a_clear_error(module):
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor"):
        module.scaled_dot_product_attention(q, k, v, mask=torch.zeros(3, 5))


def test_other_bad_inputs_are_clear_errors(module):
    with pytest.raises(ValueError, match=r"must have shape \(\.\.\., n, d\)"):
        module.scaled_dot_product_attention(torch.randn(4), torch.randn(5, 4), torch.randn(5, 2))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        module.scaled_dot_product_attention(np.ones((3, 4)), torch.randn(5, 4), torch.randn(5, 2))
    with pytest.raises(TypeError, match="must be floating point"):
        module.scaled_dot_product_attention(torch.ones(3, 4, dtype=torch.long), torch.randn(5, 4), torch.randn(5, 2))


# ------------------------------------------------------------------------------------- the stub


@pytest.mark.parametrize("name", FUNCTIONS)
def test_stub_raises_not_implemented_naming_lesson_02(stub, name):
    args = {
        "softmax": (torch.randn(2, 3),),
        "attention_numpy": (np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2))),
        "scaled_dot_product_attention": (torch.randn(2, 3), torch.randn(4, 3), torch.randn(4, 2)),
    }[name]
    with pytest.raises(NotImplementedError, match="Lesson 02") as caught:
        getattr(stub, name)(*args)
    assert f"{name}()" in str(caught.value)
    assert "attnlab.use_reference('attention')" in str(caught.value)


def test_stub_keeps_signatures_and_docstrings(ref, stub):
    import inspect

    for name in FUNCTIONS:
        assert inspect.signature(getattr(stub, name)) == inspect.signature(getattr(ref, name))
        assert getattr(stub, name).__doc__ == getattr(ref, name).__doc__


def test_attention_numpy_keeps_float32(ref):
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3))
    out, weights = ref.attention_numpy(Q, K, V)
    assert out.dtype == np.float32 and weights.dtype == np.float32


def test_numpy_bad_shapes_and_causal_with_more_queries_are_clear_errors(module):
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="shapes do not fit"):
        module.attention_numpy(rng.standard_normal((2, 4)), rng.standard_normal((3, 5)), rng.standard_normal((3, 2)))
    with pytest.raises(ValueError, match="causal attention needs n_q <= n_k"):
        module.attention_numpy(rng.standard_normal((5, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 2)), causal=True)


def test_masks_that_are_not_tensors_or_do_not_broadcast_are_clear_errors(module):
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2)
    with pytest.raises(TypeError, match="boolean torch.Tensor .* got ndarray"):
        module.scaled_dot_product_attention(q, k, v, mask=np.ones((3, 5), dtype=bool))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast to the scores' shape \(2, 3, 5\)"):
        module.scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))
