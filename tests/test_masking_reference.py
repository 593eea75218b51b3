"""The reference of lesson 03 (solutions/attnlab/masking.py) against independent computations, and
its stub.

Masks are compared with masks built entry by entry from their definitions (and with PyTorch's own
``causal_lower_right``); ``masked_attention`` with ``torch.nn.functional.scaled_dot_product_attention``
in float64 on random shapes, with fully masked rows (zero output, zero weights, finite gradients,
also in float16 and bfloat16). Bad input raises clear errors; the learner's stub raises
NotImplementedError naming Lesson 03 while still checking its inputs. The grader's trusted cases
(autograder/cases/lesson03.py) pass the reference, and a library with one mistake loses exactly
the cells of that function (a half-correct submission earns the rest).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from tests import helpers
from tests.helpers import borrowed_reference, load_stub

FUNCTIONS = ("causal_mask", "padding_mask", "document_mask", "sliding_window_mask", "combine_masks",
             "masked_attention")


@pytest.fixture(scope="module")
def softmax_of_lesson_02():
    """masked_attention uses attnlab.attention.softmax: the reference of lesson 02 here."""
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def ref(softmax_of_lesson_02):
    """attnlab.masking as the course's reference (through the switch), restored afterwards."""
    yield from borrowed_reference("masking")


@pytest.fixture(scope="module")
def stub():
    return load_stub("masking")


def grid(n_q, n_k, rule):
    return torch.tensor([[rule(i, j) for j in range(n_k)] for i in range(n_q)], dtype=torch.bool).reshape(n_q, n_k)


# ----------------------------------------------------------------------------------------- masks


@pytest.mark.filterwarnings("ignore:Lower right causal bias")  # its nan warning for n_q > n_k
@pytest.mark.parametrize("n_q, n_k", [(1, 1), (4, 4), (3, 7), (7, 3), (5, 1), (1, 6), (0, 3)])
def test_causal_mask_is_bottom_right_aligned(ref, n_q, n_k):
    mask = ref.causal_mask(n_q, n_k)
    assert mask.dtype == torch.bool and mask.shape == (n_q, n_k)
    assert torch.equal(mask, grid(n_q, n_k, lambda i, j: j <= i + n_k - n_q))
    if n_q:
        bias = causal_lower_right(n_q, n_k)
        # PyTorch's own lower-right mask, read off its attention with the identity as values
        weights = F.scaled_dot_product_attention(torch.zeros(n_q, 1), torch.zeros(n_k, 1), torch.eye(n_k),
                                                 attn_mask=bias)
        assert torch.equal(mask, weights > 0)


def test_causal_mask_square_by_default(ref):
    assert torch.equal(ref.causal_mask(5), torch.ones(5, 5, dtype=torch.bool).tril())


@pytest.mark.parametrize("lengths, max_len", [([3, 0, 5], 5), ([[1, 4], [2, 2]], 4), ([7], 7), ([], 3)])
def test_padding_mask(ref, lengths, max_len):
    for given in (lengths, torch.tensor(lengths, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int32)):
        mask = ref.padding_mask(given, max_len)
        want = np.arange(max_len) < np.asarray(lengths, dtype=np.int64)[..., None]
        assert mask.dtype == torch.bool
        assert np.array_equal(mask.numpy(), want)


@pytest.mark.parametrize("ids", [[0, 0, 0, 1, 1, 2], [7, 7, 3, 9], [[0, 1, 1], [2, 2, 2]], [4]])
def test_document_mask(ref, ids):
    tensor = torch.tensor(ids)
    mask = ref.document_mask(tensor)
    rows = tensor.reshape(-1, tensor.shape[-1]).tolist()
    n = tensor.shape[-1]
    want = torch.tensor([[[r[i] == r[j] for j in range(n)] for i in range(n)] for r in rows]).reshape(*tensor.shape, n)
    assert mask.dtype == torch.bool and torch.equal(mask, want)
    assert torch.equal(ref.document_mask(ids), want)


def test_document_mask_with_causal_is_block_lower_triangular(ref):
    ids = torch.tensor([0] * 4 + [1] * 3 + [2] * 5)
    packed = ref.combine_masks(ref.causal_mask(12), ref.document_mask(ids))
    blocks = torch.block_diag(*(torch.ones(n, n) for n in (4, 3, 5))).bool() & torch.ones(12, 12).tril().bool()
    assert torch.equal(packed, blocks)


@pytest.mark.parametrize("n_q, n_k, window", [(6, 6, 3), (3, 8, 2), (5, 5, 1), (4, 4, 10), (6, 3, 2), (1, 9, 4)])
def test_sliding_window_mask(ref, n_q, n_k, window):
    mask = ref.sliding_window_mask(n_q, n_k, window)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, grid(n_q, n_k, lambda i, j: 0 <= i + n_k - n_q - j < window))
    assert int(mask.sum(dim=-1).max()) <= window
    if window >= n_k:
        assert torch.equal(mask, ref.causal_mask(n_q, n_k))


def test_combine_masks_broadcasts_and_skips_none(ref):
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.rand(*shape, generator=g) < 0.6 for shape in ((3, 1, 4), (1, 2, 4), (4,)))
    before = [m.clone() for m in (a, b, c)]
    combined = ref.combine_masks(a, None, b, c)
    want = np.logical_and.reduce(np.broadcast_arrays(a.numpy(), b.numpy(), c.numpy()))
    assert combined.shape == (3, 2, 4) and np.array_equal(combined.numpy(), want)
    assert all(torch.equal(m, m0) for m, m0 in zip((a, b, c), before))
    assert ref.combine_masks() is None and ref.combine_masks(None, None) is None
    single = ref.combine_masks(a)
    assert torch.equal(single, a) and single.data_ptr() != a.data_ptr()


# ------------------------------------------------------------------------------- masked_attention


def sdpa_reference(q, k, v, mask):
    """float64 (out, weights) from PyTorch, batch dims expanded; rows that see nothing are 0."""
    q, k, v = q.double(), k.double(), v.double()
    shapes = [q.shape[:-2], k.shape[:-2], v.shape[:-2]] + ([mask.shape[:-2]] if mask is not None else [])
    batch = torch.broadcast_shapes(*shapes)
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v), torch.softmax(scores, dim=-1)
    mask = mask.expand(*batch, q.shape[-2], k.shape[-2])
    sees = mask.any(dim=-1, keepdim=True)
    safe = mask | ~sees
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=safe) * sees
    weights = torch.softmax(scores.masked_fill(~safe, -math.inf), dim=-1) * sees
    return out, weights


def random_problem(seed, dtype=torch.float64, empty_rows=True):
    g = torch.Generator().manual_seed(seed)
    pick = lambda low, high: int(torch.randint(low, high, (), generator=g))  # noqa: E731
    n_q, n_k, d, d_v = pick(1, 9), pick(1, 11), pick(1, 17), pick(1, 9)
    batch = (pick(1, 4), pick(1, 4))
    q_batch = (batch[0], 1) if seed % 2 else batch
    q = torch.randn(*q_batch, n_q, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(*batch, n_k, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(*batch, n_k, d_v, generator=g, dtype=torch.float64).to(dtype)
    shape = (n_q, n_k) if seed % 3 == 0 else (batch[0], 1, n_q, n_k)
    mask = torch.rand(*shape, generator=g) < 0.5
    if empty_rows:
        mask[..., 0, :] = False  # the first query sees nothing
    return q, k, v, mask


@pytest.mark.parametrize("seed", range(12))
def test_masked_attention_matches_pytorch_float64(ref, seed):
    q, k, v, mask = random_problem(seed)
    saved = [t.clone() for t in (q, k, v, mask)]
    out, weights = ref.masked_attention(q, k, v, mask)
    want_out, want_weights = sdpa_reference(q, k, v, mask)
    torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, want_weights, rtol=1e-10, atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, mask), saved))
    full_mask = mask.expand_as(weights)
    assert (weights[~full_mask] == 0).all()
    empty = ~full_mask.any(dim=-1)
    assert (out[empty] == 0).all() and (weights[empty] == 0).all()
    sums = weights.sum(dim=-1)[~empty]
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_masked_attention_without_mask_and_scale(ref):
    q, k, v, _ = random_problem(3, empty_rows=False)
    out, weights = ref.masked_attention(q, k, v, None)
    want_out, want_weights = sdpa_reference(q, k, v, None)
    torch.testing.assert_close(out, want_out, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(weights, want_weights, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_masked_attention_gradients_are_finite_and_match(ref, seed):
    q, k, v, mask = random_problem(100 + seed)
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    out, weights = ref.masked_attention(*mine, mask)
    want_out, want_weights = sdpa_reference(*theirs, mask)
    g = torch.Generator().manual_seed(seed)
    d_out, d_w = torch.randn(out.shape, generator=g, dtype=torch.float64), torch.randn(weights.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((out * d_out).sum() + (weights * d_w).sum(), mine)
    want = torch.autograd.grad((want_out * d_out).sum() + (want_weights * d_w).sum(), theirs)
    for grad, expected in zip(grads, want):
        assert torch.isfinite(grad).all()
        torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_attention_half_precision_keeps_dtype_and_zero_rows(ref, dtype):
    q, k, v, mask = random_problem(7, dtype=dtype)
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    out, weights = ref.masked_attention(*qkv, mask)
    assert out.dtype == weights.dtype == dtype
    want_out, want_weights = sdpa_reference(q, k, v, mask)
    tolerance = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(out.double(), want_out, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(weights.double(), want_weights, rtol=tolerance, atol=tolerance)
    empty = ~mask.expand_as(weights).any(dim=-1)
    assert (out[empty] == 0).all() and (weights[empty] == 0).all()
    for grad in torch.autograd.grad(out.float().sum() + weights.float().sum(), qkv):
        assert grad.dtype == dtype and torch.isfinite(grad).all()


def test_masked_attention_uses_the_lesson_02_softmax(ref, monkeypatch):
    """masked_attention calls attnlab.attention.softmax ("you built this"), looked up at each call."""
    import attnlab.attention

    calls = []
    original = attnlab.attention.softmax
    monkeypatch.setattr(attnlab.attention, "softmax", lambda x, dim=-1: calls.append(dim) or original(x, dim=dim))
    q, k, v, mask = random_problem(5)
    ref.masked_attention(q, k, v, mask)
    assert calls == [-1]


def test_a_large_negative_fill_would_attend_uniformly_to_a_masked_row():
    """The claim the reference rests on: a finite fill gives uniform weights, -inf gives nan."""
    scores = torch.zeros(1, 4)
    nothing = torch.zeros(1, 4, dtype=torch.bool)
    assert torch.allclose(torch.softmax(scores.masked_fill(~nothing, -1e9), -1), torch.full((1, 4), 0.25))
    assert torch.softmax(scores.masked_fill(~nothing, -math.inf), -1).isnan().all()


# ---------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m.causal_mask(3.0), TypeError, "n_q must be an integer"),
    (lambda m: m.causal_mask(True), TypeError, "n_q must be an integer"),
    (lambda m: m.causal_mask(3, -1), ValueError, "n_k must be at least 0"),
    (lambda m: m.padding_mask([2, 6], 5), ValueError, "length 6 does not fit in max_len=5"),
    (lambda m: m.padding_mask([2, -1], 5), ValueError, "must not be negative"),
    (lambda m: m.padding_mask(torch.tensor([2.0, 3.0]), 5), TypeError, "lengths must hold integers"),
    (lambda m: m.padding_mask([2], "5"), TypeError, "max_len must be an integer"),
    (lambda m: m.document_mask(torch.tensor([0.0, 1.0])), TypeError, "doc_ids must hold integers"),
    (lambda m: m.document_mask(torch.tensor(3)), ValueError, "one document id per token"),
    (lambda m: m.sliding_window_mask(4, 4, -1), ValueError, "window must be at least 1"),
    (lambda m: m.sliding_window_mask(4, 4, 0), ValueError, "window must be at least 1"),
    (lambda m: m.combine_masks(torch.ones(3, 3)), TypeError, "boolean tensors"),
    (lambda m: m.combine_masks(torch.ones(3, 4, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)),
     ValueError, r"\(3, 4\), \(2, 4\) do not broadcast"),
    (lambda m: m.masked_attention(torch.ones(2, 3), torch.ones(4, 3), torch.ones(4, 2), torch.ones(2, 4)),
     TypeError, "mask must be a boolean"),
    (lambda m: m.masked_attention(torch.ones(2, 3), torch.ones(4, 3), torch.ones(4, 2),
                                  torch.ones(3, 4, dtype=torch.bool)), ValueError, "does not broadcast"),
    (lambda m: m.masked_attention(torch.ones(2, 3), torch.ones(4, 2), torch.ones(4, 2), None),
     ValueError, "share their last dimension"),
])
def test_bad_input_raises_clear_errors_in_reference_and_stub(ref, stub, call, error, message):
    for module in (ref, stub):
        with pytest.raises(error, match=message):
            call(module)


@pytest.mark.parametrize("name, args", [
    ("causal_mask", (3,)), ("padding_mask", ([1, 2], 3)), ("document_mask", ([0, 1],)),
    ("sliding_window_mask", (3, 3, 2)), ("combine_masks", (torch.ones(2, 2, dtype=torch.bool),)),
    ("masked_attention", (torch.ones(2, 3), torch.ones(2, 3), torch.ones(2, 3), None)),
])
def test_stub_raises_not_implemented_naming_lesson_03(stub, name, args):
    with pytest.raises(NotImplementedError, match=rf"Lesson 03: {name}\(\)"):
        getattr(stub, name)(*args)
    assert set(FUNCTIONS) <= set(dir(stub))


# ------------------------------------------------------------------ the trusted cases of the grader


def trusted_verdicts(module) -> dict[str, str]:
    return helpers.trusted_verdicts("03", module)


def with_mistake(ref, **functions):
    """The reference masking module with some functions replaced."""
    return helpers.with_mistake(ref, FUNCTIONS, **functions)


def _top_left_causal(n_q, n_k=None):
    return torch.ones(n_q, n_q if n_k is None else n_k, dtype=torch.bool).tril()


def _fill_minus_1e9(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4 if q.dtype == torch.float16 else -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _additive_then_nan_to_num(q, k, v, mask):
    """Right outputs, nan gradients for rows with nothing to see."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def _pytorch_sdpa(q, k, v, mask):
    q, k, v = (t.double() for t in (q, k, v))  # SDPA cannot fill the empty rows' weights itself
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, out  # never compared: the call is refused first


CELLS = ("causal_mask", "padding_mask", "document_mask", "sliding_window_mask", "combine_masks", "masked_attention")


def test_trusted_cases_pass_the_reference_and_cover_every_grade_cell(ref):
    verdicts = trusted_verdicts(with_mistake(ref))
    assert sorted(verdicts) == sorted(f"{name}_{kind}" for name in CELLS for kind in ("visible", "hidden"))
    assert all(why == "" for why in verdicts.values()), verdicts


@pytest.mark.parametrize("mistake, functions, failing, reason", [
    ("top-left causal mask", {"causal_mask": _top_left_causal}, {"causal_mask"}, "boolean output differs"),
    ("off-by-one padding", {"padding_mask": lambda lengths, max_len: torch.arange(max_len)
                            <= torch.as_tensor(lengths)[..., None]}, {"padding_mask"}, "boolean output differs"),
    ("window without the query itself", {"sliding_window_mask": lambda n_q, n_k, w: torch.tensor(
        [[0 < i + n_k - n_q - j <= w for j in range(n_k)] for i in range(n_q)], dtype=torch.bool).reshape(n_q, n_k)},
     {"sliding_window_mask"}, "boolean output differs"),
    ("OR instead of AND", {"combine_masks": lambda *m: functools.reduce(
        torch.logical_or, [x for x in m if x is not None]) if any(x is not None for x in m) else None},
     {"combine_masks"}, "boolean output differs"),
    ("-1e9 fill", {"masked_attention": _fill_minus_1e9}, {"masked_attention"}, "values differ"),
    ("nan gradients", {"masked_attention": _additive_then_nan_to_num}, {"masked_attention"}, "nan in the output"),
    ("PyTorch's attention", {"masked_attention": _pytorch_sdpa}, {"masked_attention"}, "F.scaled_dot_product_attention"),
])
def test_trusted_cases_fail_a_mistake_in_its_cells_only(ref, mistake, functions, failing, reason):
    """A library with one mistake loses exactly the points of that function, visible and hidden."""
    verdicts = trusted_verdicts(with_mistake(ref, **functions))
    lost = {grade_id for grade_id, why in verdicts.items() if why}
    assert lost == {f"{name}_{kind}" for name in failing for kind in ("visible", "hidden")}, (mistake, verdicts)
    assert any(reason in why for why in verdicts.values()), (mistake, verdicts)
