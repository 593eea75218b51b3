"""The visible checks of lesson 03: they pass on the reference and fail, with the right diagnostic,
on deliberately broken implementations; a stub's NotImplementedError passes through unchanged."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab import checks
from tests.helpers import borrowed_reference, fails, load_stub

NAMES = ("causal_mask", "padding_mask", "document_mask", "sliding_window_mask", "combine_masks",
         "masked_attention")


@pytest.fixture(scope="module")
def softmax_of_lesson_02():
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def ref(softmax_of_lesson_02):
    yield from borrowed_reference("masking")


@pytest.fixture(scope="module")
def stub():
    return load_stub("masking")


# ---------------------------------------------------------------------------- the reference passes


def test_all_checks_pass_on_the_reference(ref, capsys):
    for name in NAMES:
        getattr(checks, f"check_{name}")(getattr(ref, name))
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-6:] == [
        "✓ causal_mask: 4 checks passed",
        "✓ padding_mask: 5 checks passed",
        "✓ document_mask: 6 checks passed",
        "✓ sliding_window_mask: 5 checks passed",
        "✓ combine_masks: 6 checks passed",
        "✓ masked_attention: 10 checks passed",
    ]


@pytest.mark.parametrize("name", NAMES)
def test_stub_not_implemented_error_passes_through_unchanged(stub, name):
    with pytest.raises(NotImplementedError) as caught:
        getattr(checks, f"check_{name}")(getattr(stub, name))
    assert str(caught.value).startswith(f"Lesson 03: {name}()")
    assert "attnlab.use_reference('masking')" in str(caught.value)


# ------------------------------------------------------------------------------------ mask builders


def test_causal_mask_mistakes():
    def top_left(n_q, n_k=None):
        return torch.ones(n_q, n_q if n_k is None else n_k, dtype=torch.bool).tril()

    def inverted(n_q, n_k=None):
        n_k = n_q if n_k is None else n_k
        return ~torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)

    def strict(n_q, n_k=None):
        n_k = n_q if n_k is None else n_k
        return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q - 1)

    def floats(n_q, n_k=None):
        n_k = n_q if n_k is None else n_k
        return torch.ones(n_q, n_k).tril(diagonal=n_k - n_q)

    def upper(n_q, n_k=None):
        n_k = n_q if n_k is None else n_k
        return torch.ones(n_q, n_k, dtype=torch.bool).triu()

    fails(checks.check_causal_mask, top_left, "n_q < n_k", "top-left corner", "bottom-right")
    fails(checks.check_causal_mask, inverted, "masked the allowed keys", r"yours \(1 = may attend\)")
    fails(checks.check_causal_mask, strict, "the diagonal is missing")
    fails(checks.check_causal_mask, floats, "dtype torch.float32, expected torch.bool")
    fails(checks.check_causal_mask, upper, "transpose")


def test_padding_mask_mistakes(ref):
    def one_too_many(lengths, max_len):
        return torch.arange(max_len) <= torch.as_tensor(lengths)[..., None]

    def inverted(lengths, max_len):
        return ~ref.padding_mask(lengths, max_len)

    def with_query_axis(lengths, max_len):
        return ref.padding_mask(lengths, max_len)[..., None, :]

    def in_place(lengths, max_len):
        if isinstance(lengths, torch.Tensor):
            lengths.clamp_(max=max_len)
            lengths -= 0
            lengths[...] = lengths.flip(-1)
        return ref.padding_mask(lengths, max_len)

    fails(checks.check_padding_mask, one_too_many, "one position too many")
    fails(checks.check_padding_mask, inverted, "marked the padding instead of the real tokens")
    fails(checks.check_padding_mask, with_query_axis, r"return shape \(\.\.\., max_len\)")
    fails(checks.check_padding_mask, in_place, "changed its input in place: lengths")


def test_document_mask_mistakes(ref):
    def inverted(doc_ids):
        return ~ref.document_mask(doc_ids)

    def boundaries_only(doc_ids):  # the block of the first document only
        ids = torch.as_tensor(doc_ids)
        first = ids == ids[..., :1]
        return first[..., :, None] & first[..., None, :]

    fails(checks.check_document_mask, inverted, "masked each token's own document")
    fails(checks.check_document_mask, boundaries_only, "compare every pair of positions")


def test_sliding_window_mask_mistakes(ref):
    def grid(n_q, n_k, rule):
        return torch.tensor([[rule(i, j) for j in range(n_k)] for i in range(n_q)], dtype=torch.bool)

    mistakes = {
        "each query sees 4 keys": lambda n_q, n_k, w: ref.sliding_window_mask(n_q, n_k, w + 1),
        "keys after the query are visible": lambda n_q, n_k, w: grid(n_q, n_k, lambda i, j: abs(i + n_k - n_q - j) < w),
        "the window is missing": lambda n_q, n_k, w: ref.causal_mask(n_q, n_k),
        "own position is missing": lambda n_q, n_k, w: grid(n_q, n_k, lambda i, j: 0 < i + n_k - n_q - j <= w),
        "top-left corner": lambda n_q, n_k, w: grid(n_q, n_k, lambda i, j: 0 <= i - j < w),
    }
    for message, fn in mistakes.items():
        fails(checks.check_sliding_window_mask, fn, message)


def test_combine_masks_mistakes(ref):
    def union(*masks):
        present = [m for m in masks if m is not None]
        out = present[0].clone()
        for m in present[1:]:
            out = out | m
        return out

    def in_place(*masks):
        present = [m for m in masks if m is not None]
        for m in present[1:]:
            present[0] &= m
        return present[0].clone() if present else None

    def itself(*masks):
        present = [m for m in masks if m is not None]
        return present[0] if len(present) == 1 else ref.combine_masks(*masks)

    def none_unskipped(*masks):
        return ref.combine_masks(*(torch.ones(1, dtype=torch.bool) if m is None else m for m in masks)) if any(
            m is not None for m in masks) else torch.ones(1, dtype=torch.bool)

    fails(checks.check_combine_masks, union, "you combined with OR")
    fails(checks.check_combine_masks, in_place, "changed its input in place")
    fails(checks.check_combine_masks, itself, "returned the mask itself")
    fails(checks.check_combine_masks, none_unskipped, r"combine_masks\(None, None\) returned Tensor, expected None")


# ---------------------------------------------------------------------------------- masked_attention


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def naive(q, k, v, mask):
    """The plain softmax of scores masked with -inf: nan for rows with nothing to see."""
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def large_negative(q, k, v, mask):
    """-1e9 in place of -inf: rows with nothing to see attend uniformly."""
    scores = _scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def additive_then_nan_to_num(q, k, v, mask):
    """Right forward pass, nan gradients: -inf added to the scores, nan replaced afterwards."""
    scores = _scores(q, k)
    if mask is not None:
        scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def test_masked_attention_mistakes(ref):
    fails(checks.check_masked_attention, naive, "rows that see no key", "0/0 = nan")
    fails(checks.check_masked_attention, large_negative, "equal weights 1/n_k",
          "attends uniformly to keys it may not see")
    fails(checks.check_masked_attention, additive_then_nan_to_num,
          r"gradient \(float64, rows that see nothing\) with respect to q", "nan", "torch.where or masked_fill")

    def unscaled(q, k, v, mask):
        return ref.masked_attention(q * math.sqrt(q.shape[-1]), k, v, mask)

    def float32_always(q, k, v, mask):
        out, weights = ref.masked_attention(q.float(), k.float(), v.float(), mask)
        return out, weights

    def swapped(q, k, v, mask):
        out, weights = ref.masked_attention(q, k, v, mask)
        return weights, out

    def pytorch(q, k, v, mask):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out, ref.masked_attention(q, k, v, mask)[1]

    def modifies_q(q, k, v, mask):
        out = ref.masked_attention(q, k, v, mask)
        q.mul_(2)
        return out

    def fill_minus_1e9_and_zero_rows(q, k, v, mask):
        if mask is None:
            return ref.masked_attention(q, k, v, mask)
        scores = _scores(q, k).masked_fill(~mask, -1e9)
        weights = torch.softmax(scores, dim=-1) * mask.any(dim=-1, keepdim=True)
        return weights @ v, weights

    fails(checks.check_masked_attention, unscaled, r"you did not divide the scores by sqrt\(d\)")
    fails(checks.check_masked_attention, float32_always, "dtype torch.float32, expected torch.float64")
    fails(checks.check_masked_attention, swapped, r"\(weights, out\) instead of \(out, weights\)")
    fails(checks.check_masked_attention, pytorch, "calls F.scaled_dot_product_attention",
          "asks you to write yourself")
    fails(checks.check_masked_attention, modifies_q, "changed its input in place: q")
    fails(checks.check_masked_attention, fill_minus_1e9_and_zero_rows, "float16", "does not fit in float16")


def test_masked_attention_half_precision_gradient_values(ref):
    """Graded in float16 and bfloat16, so shown too: finite gradients are not enough."""
    def detached_keys_in_half(q, k, v, mask):
        if q.dtype in (torch.float16, torch.bfloat16):
            # right values, but a zero gradient for k
            return ref.masked_attention(q, k.detach() + 0 * k, v, mask)
        return ref.masked_attention(q, k, v, mask)

    fails(checks.check_masked_attention, detached_keys_in_half, "float16 and bfloat16 gradients",
          r"the gradient \(float16, left padding\) with respect to k")


def test_masked_attention_weights_times_mask_is_told_rows_do_not_sum_to_1(ref):
    def times_mask(q, k, v, mask):
        weights = torch.softmax(_scores(q, k), dim=-1)
        if mask is not None:
            weights = weights * mask
        return weights @ v, weights

    fails(checks.check_masked_attention, times_mask, "do not sum to 1", "the softmax must see the mask")


# ---------------------------------------------------------------------------- exercise 2b (not graded)


def _candidates():
    """The three masks of exercise 2b, as the notebook writes them."""
    def mask_a(n_q, n_k):
        return torch.ones(n_q, n_k, dtype=torch.bool).tril()

    def mask_b(n_q, n_k, window=3):
        position = torch.arange(n_q)[:, None] + (n_k - n_q)
        return (position - torch.arange(n_k)[None, :]).abs() < window

    def mask_c(n_q, n_k):
        return torch.ones(n_k, n_k, dtype=torch.bool).tril()[n_k - n_q:]

    return {"a": mask_a, "b": mask_b, "c": mask_c}


def _perturbation_test(masking, shapes=((1, 1), (1, 6), (2, 6), (4, 4), (5, 8), (8, 8)), first_positions=False):
    """A learner's test: change key and value j, and see whether an earlier query's output moves."""
    def sees_the_future(make_mask):
        g = torch.Generator().manual_seed(0)
        for n_q, n_k in shapes:
            mask = make_mask(n_q, n_k)
            q, k, v = (torch.randn(n, 4, generator=g, dtype=torch.float64) for n in (n_q, n_k, n_k))
            out = masking.masked_attention(q, k, v, mask)[0]
            position = torch.arange(n_q) + (0 if first_positions else n_k - n_q)
            for j in range(n_k):
                k2, v2 = k.clone(), v.clone()
                k2[j] += 1.0
                v2[j] += 1.0
                moved = (masking.masked_attention(q, k2, v2, mask)[0] != out).any(dim=-1)
                if (moved & (position < j)).any():
                    return True
        return False
    return sees_the_future


def test_future_leak_accepts_a_perturbation_test_and_a_test_that_reads_the_mask(ref, capsys):
    checks.check_future_leak(_perturbation_test(ref), lambda: "b", _candidates())

    def reads_the_mask(make_mask):  # another correct answer: compare the entries with positions
        for n_q in range(1, 7):
            for n_k in range(n_q, 10):
                after = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + n_k - n_q
                if (make_mask(n_q, n_k) & after).any():
                    return True
        return False

    checks.check_future_leak(reads_the_mask, lambda: "b", _candidates())
    assert capsys.readouterr().out.count("✓ future_leak: 13 checks passed") == 2


@pytest.mark.parametrize("verdict, pattern", [
    ("a", r"mask_a does not leak: with n_q < n_k it hides the newest keys.*lost context"),
    ("c", r"mask_c does not leak: query i sits at position i \+ n_k - n_q"),
    ("d", r"returned 'd'; return one of 'a', 'b', 'c'"),
])
def test_future_leak_says_why_a_wrong_verdict_is_wrong(ref, verdict, pattern):
    fails(lambda test: checks.check_future_leak(test, lambda: verdict, _candidates()),
          _perturbation_test(ref), pattern)


@pytest.mark.parametrize("shapes, pattern", [
    (((1, 4), (1, 8)), r"mask_b does not leak, but with n_q = 2, n_k = 2 query 0.*Try n_q >= 2"),
    (((4, 4), (8, 8)), r"off by one only with a cache.*does not leak.*Try n_q = 2, n_k = 5"),
])
def test_future_leak_names_the_shapes_a_test_left_out(ref, shapes, pattern):
    fails(lambda test: checks.check_future_leak(test, lambda: "b", _candidates()),
          _perturbation_test(ref, shapes=shapes), pattern)


def test_future_leak_catches_a_test_that_takes_the_queries_for_the_first_positions(ref):
    fails(lambda test: checks.check_future_leak(test, lambda: "b", _candidates()),
          _perturbation_test(ref, first_positions=True),
          r"mask_c leaks the future, but it does not.*first n_q positions instead of the last")


def test_future_leak_catches_a_test_of_the_first_query_only(ref):
    def first_query_only(make_mask):
        for n_q, n_k in ((2, 5), (3, 3), (3, 7)):
            if make_mask(n_q, n_k)[0, n_k - n_q + 1:].any():
                return True
        return False

    fails(lambda test: checks.check_future_leak(test, lambda: "b", _candidates()), first_query_only,
          r"one extra key for a query in the middle does not leak.*query 1 .*Test every query")


def test_future_leak_rejects_what_is_not_a_bool_and_reports_a_crash(ref):
    fails(lambda test: checks.check_future_leak(test, lambda: "b", _candidates()),
          lambda make_mask: "yes", r"returned 'yes' for mask_a; return True or False")

    def crashes_on_empty_rows(make_mask):
        if not make_mask(1, 1).any():
            raise IndexError("no key to perturb")
        return _perturbation_test(ref)(make_mask)

    fails(lambda test: checks.check_future_leak(test, lambda: "b", _candidates()), crashes_on_empty_rows,
          r"your test raised IndexError on strictly earlier keys \(no query sees itself\): no key to perturb")


def test_future_leak_unanswered_passes_on_with_a_note(stub, capsys):
    def blank(make_mask):
        raise NotImplementedError()

    checks.check_future_leak(blank, lambda: "b", _candidates())
    assert "○ future_leak: not answered yet. This exercise is not graded." in capsys.readouterr().out
    # a test that needs this lesson's masked_attention, not written yet: the stub's message is shown
    checks.check_future_leak(_perturbation_test(stub), lambda: "b", _candidates())
    assert "not answered yet (Lesson 03" in capsys.readouterr().out
