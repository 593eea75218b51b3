"""The visible checks of attnlab.checks: they pass on the reference and fail, with the right
diagnostic, on deliberately broken implementations."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

from tests.helpers import borrowed_reference, fails, load_stub
from attnlab import checks

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def reference():
    """attnlab.attention as the course's reference, restored to what it was afterwards."""
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def stub():
    """The learner's stub, loaded straight from its file under a private name."""
    return load_stub("attention")


# ---------------------------------------------------------------------------- the reference passes


def test_all_checks_pass_on_the_reference(reference, capsys):
    checks.check_softmax(reference.softmax)
    checks.check_attention_numpy(reference.attention_numpy)
    checks.check_scaled_dot_product_attention(reference.scaled_dot_product_attention)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3:] == [
        "✓ softmax: 9 checks passed",
        "✓ attention_numpy: 6 checks passed",
        "✓ scaled_dot_product_attention: 9 checks passed",
    ]


@pytest.mark.parametrize(
    "check, name",
    [
        (checks.check_softmax, "softmax"),
        (checks.check_attention_numpy, "attention_numpy"),
        (checks.check_scaled_dot_product_attention, "scaled_dot_product_attention"),
    ],
)
def test_stub_not_implemented_error_passes_through_unchanged(stub, check, name):
    with pytest.raises(NotImplementedError) as caught:
        check(getattr(stub, name))
    assert str(caught.value).startswith(f"Lesson 02: {name}()")
    assert "attnlab.use_reference('attention')" in str(caught.value)


# ---------------------------------------------------------------------------- broken softmax


def softmax_wrong_dim(x, dim=-1):
    shifted = x - x.amax(dim=0, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=0, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_no_max(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_in_place(x, dim=-1):
    x.sub_(x.amax(dim=dim, keepdim=True))
    x.exp_()
    return x / x.sum(dim=dim, keepdim=True)


def softmax_upcasts(x, dim=-1):
    x = x.double()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_clamps_minus_inf(x, dim=-1):
    x = x.nan_to_num(neginf=-30.0)  # "avoids" -inf, but a masked score keeps a tiny weight
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_shape_changed(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).flatten()


def test_softmax_wrong_dimension():
    fails(checks.check_softmax, softmax_wrong_dim,
          r"the entries of softmax\(x\) do not sum to 1 along the last axis \(dim=-1\)",
          r"row sums range from [\d.]+ to [\d.]+", "did you normalise over the wrong dimension")


def test_softmax_ignoring_the_dim_argument():
    fails(checks.check_softmax, softmax_ignores_dim, r"dim=0", "not a fixed -1")


def test_softmax_without_max_subtraction():
    fails(checks.check_softmax, softmax_no_max, "as large as 1000",
          "subtract the maximum before exp", "nan")


def test_softmax_in_place():
    fails(checks.check_softmax, softmax_in_place, "changed its input in place", r"\bx\b")


def test_softmax_changing_dtype():
    fails(checks.check_softmax, softmax_upcasts,
          "softmax of a float32 tensor has dtype torch.float64, expected torch.float32")


def test_softmax_minus_inf_entries():
    fails(checks.check_softmax, softmax_clamps_minus_inf,
          "the weights are not exactly 0 where x is -inf", "weight exactly 0")


def test_softmax_shape():
    fails(checks.check_softmax, softmax_shape_changed,
          r"softmax\(x\) has shape \(15,\), expected \(3, 5\) = x.shape")


def test_softmax_crash_is_reported_with_its_case():
    def crashes(x, dim=-1):
        raise RuntimeError("boom")

    message = fails(checks.check_softmax, crashes, "your function raised RuntimeError: boom")
    assert message.startswith("softmax, case 'matches torch.softmax (float64)'")


# ---------------------------------------------------------------------------- broken attention_numpy


def _np_softmax(scores):
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True)


def numpy_attention(scale=None, causal_offset="bottom-right", stable=True, swap=False,
                    to_torch=False, ignore_causal=False):
    """A numpy attention with one chosen mistake."""

    def fn(Q, K, V, causal=False):
        d = Q.shape[-1]
        s = 1 / np.sqrt(d) if scale is None else scale
        scores = Q @ np.swapaxes(K, -1, -2) * s
        if causal and not ignore_causal:
            n_q, n_k = scores.shape[-2:]
            k = n_k - n_q if causal_offset == "bottom-right" else 0
            scores = np.where(np.tril(np.ones((n_q, n_k), dtype=bool), k=k), scores, -np.inf)
        if stable:
            weights = _np_softmax(scores)
        else:
            weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
        out = weights @ V
        if to_torch:
            return torch.from_numpy(out), torch.from_numpy(weights)
        return (weights, out) if swap else (out, weights)

    return fn


def test_numpy_check_accepts_a_correct_independent_version(capsys):
    checks.check_attention_numpy(numpy_attention())
    assert "✓ attention_numpy: 6 checks passed" in capsys.readouterr().out


def test_numpy_wrong_scale():
    fails(checks.check_attention_numpy, numpy_attention(scale=1.0),
          "You did not divide the scores by sqrt\\(d\\)")
    fails(checks.check_attention_numpy, numpy_attention(scale=0.25), "by d instead of sqrt")


def test_numpy_top_left_causal():
    fails(checks.check_attention_numpy, numpy_attention(causal_offset="top-left"),
          "n_q < n_k", "top-left corner", r"k=n_k - n_q")


def test_numpy_causal_ignored():
    fails(checks.check_attention_numpy, numpy_attention(ignore_causal=True),
          "causal weights are not exactly 0 above the diagonal", "-inf before the softmax")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_numpy_unstable_softmax():
    fails(checks.check_attention_numpy, numpy_attention(stable=False), "nan",
          "subtract the maximum before exp")


def test_numpy_swapped_and_torch_results():
    fails(checks.check_attention_numpy, numpy_attention(swap=True),
          r"out has shape \(3, 5\), expected \(3, 2\) = \(\.\.\., n_q, d_v\)",
          r"\(weights, out\) instead of \(out, weights\)")
    fails(checks.check_attention_numpy, numpy_attention(to_torch=True), "numpy arrays")


def test_numpy_in_place():
    def modifies(Q, K, V, causal=False):
        Q /= np.sqrt(Q.shape[-1])
        return numpy_attention(scale=1.0)(Q, K, V, causal)

    fails(checks.check_attention_numpy, modifies, "changed its input in place: Q")


def test_numpy_two_dimensional_only():
    def uses_transpose(Q, K, V, causal=False):
        weights = _np_softmax(Q @ K.T / np.sqrt(Q.shape[-1]))
        return weights @ V, weights

    fails(checks.check_attention_numpy, uses_transpose, "batched", "raised ValueError")


# ---------------------------------------------------------------------------- broken torch attention


def torch_attention(mistake=None):
    """A torch attention with one chosen mistake (None: correct, written independently)."""

    def fn(q, k, v, mask=None, scale=None):
        d = q.shape[-1]
        if mistake == "in_place":
            q.mul_(1 / math.sqrt(d))
            scores = q @ k.transpose(-2, -1)
        else:
            s = {"no_scale": 1.0, "d_v": 1 / math.sqrt(v.shape[-1]), "ignores_scale": None}.get(
                mistake, 1 / math.sqrt(d) if scale is None else scale
            )
            scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(d) if s is None else s)
        if mask is not None and mistake not in ("ignores_mask", "mask_after"):
            allowed = ~mask if mistake == "inverted_mask" else mask
            scores = scores.masked_fill(~allowed, -math.inf)
        dim = -2 if mistake == "query_axis" else -1
        exps = (scores - scores.amax(dim=dim, keepdim=True)).exp()  # not torch.softmax: forbidden
        weights = exps / exps.sum(dim=dim, keepdim=True)
        if mask is not None and mistake == "mask_after":
            weights = weights * mask
        if mistake == "upcasts":
            weights = weights.double()
            return weights @ v.double(), weights
        if mistake == "uses_k":
            return weights @ k, weights
        if mistake == "swapped":
            return weights, weights @ v
        return weights @ v, weights

    return fn


def test_torch_check_accepts_a_correct_independent_version(capsys):
    checks.check_scaled_dot_product_attention(torch_attention())
    assert "✓ scaled_dot_product_attention: 9 checks passed" in capsys.readouterr().out


SDPA = checks.check_scaled_dot_product_attention


def test_torch_wrong_output_shape():
    fails(SDPA, torch_attention("uses_k"),
          r"out has shape \(2, 5, 4\), expected \(2, 5, 3\) = \(\.\.\., n_q, d_v\)")
    fails(SDPA, torch_attention("swapped"), r"\(weights, out\) instead of \(out, weights\)")


def test_torch_wrong_scale():
    fails(SDPA, torch_attention("no_scale"), "did not divide the scores by sqrt\\(d\\)")
    fails(SDPA, torch_attention("d_v"), r"sqrt\(d_v\)")
    fails(SDPA, torch_attention("ignores_scale"), "custom scale", "ignored the scale argument")


def test_torch_masks():
    fails(SDPA, torch_attention("ignores_mask"), "with a mask",
          "not exactly 0 where the mask is False", "The mask is ignored")
    fails(SDPA, torch_attention("inverted_mask"), "True means 'may attend'")
    fails(SDPA, torch_attention("mask_after"), "do not sum to 1",
          "before the softmax, not to the weights after it")


def test_torch_query_axis():
    fails(SDPA, torch_attention("query_axis"), "do not sum to 1 along the key axis \\(dim=-1\\)",
          "wrong dimension")


def test_torch_in_place_and_dtype():
    fails(SDPA, torch_attention("in_place"), "changed its input in place: q")
    fails(SDPA, torch_attention("upcasts"), "float32", "dtype torch.float64")


def test_torch_no_broadcasting():
    def bmm_only(q, k, v, mask=None, scale=None):
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = torch.bmm(q, k.transpose(-2, -1)) * scale
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        exps = (scores - scores.amax(-1, keepdim=True)).exp()
        weights = exps / exps.sum(-1, keepdim=True)
        return torch.bmm(weights, v), weights

    fails(SDPA, bmm_only, "broadcast batch dimensions", "raised RuntimeError")


# ---------------------------------------------------------------------------- generic helpers


def test_assert_close_names_the_largest_error():
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"largest error 0\.5 at index \(1, 2\) \(yours 0\.5"):
        checks.assert_close(actual, expected, what="x")
    checks.assert_close(np.ones(3), torch.ones(3, dtype=torch.float64))
    with pytest.raises(AssertionError, match=r"x has shape \(3,\), expected \(4,\)"):
        checks.assert_close(torch.ones(3), torch.ones(4), what="x")


def test_assert_close_treats_matching_nan_and_inf_as_equal():
    values = torch.tensor([math.nan, math.inf, 1.0])
    checks.assert_close(values, values.clone())
    with pytest.raises(AssertionError, match="largest error inf"):
        checks.assert_close(torch.tensor([math.nan, 1.0]), torch.tensor([0.0, 1.0]))


def test_assert_rows_sum_to_one_reports_the_range():
    weights = torch.tensor([[0.1, 0.2], [1.0, 1.1]])
    with pytest.raises(AssertionError, match=r"row sums range from 0\.3 to 2\.1 — did you"):
        checks.assert_rows_sum_to_one(weights)


def test_assert_not_modified_returns_the_result_and_names_the_argument():
    assert checks.assert_not_modified(lambda a, b: a + b, torch.ones(2), torch.ones(2)).sum() == 4

    def scale_in_place(values, factor):
        values *= factor
        return values

    with pytest.raises(AssertionError, match="changed its input in place: values"):
        checks.assert_not_modified(scale_in_place, np.ones(3), 2.0)


def test_assert_zero_where_counts_leaks():
    weights = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    forbidden = torch.tensor([[False, True], [True, False]])
    with pytest.raises(AssertionError, match=r"1 of 2 such entries are nonzero"):
        checks.assert_zero_where(weights, forbidden)


def test_assert_finite_and_dtype_messages():
    with pytest.raises(AssertionError, match=r"contains nan .* index \(1,\)"):
        checks.assert_finite(torch.tensor([0.0, math.nan]))
    with pytest.raises(AssertionError, match="dtype torch.float64, expected torch.float32"):
        checks.assert_dtype(torch.zeros(1, dtype=torch.float64), torch.float32)


def test_causal_allowed_is_bottom_right_like_pytorch():
    for n_q, n_k in [(4, 4), (3, 6), (1, 5)]:
        assert torch.equal(checks.causal_allowed(n_q, n_k), causal_lower_right(n_q, n_k)._materialize())


def test_reference_attention_broadcasts_masks_and_batches():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 1, 3, 4, generator=g)
    k = torch.randn(5, 6, 4, generator=g)
    v = torch.randn(5, 6, 2, generator=g)
    mask = checks.causal_allowed(3, 6)
    out, weights = checks.reference_attention(q, k, v, mask)
    assert out.shape == (2, 5, 3, 2) and weights.shape == (2, 5, 3, 6)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, weights @ v.double())


# ------------------------------------------------------------------- how a failing check shows


def _render(check, fn) -> list[str]:
    try:
        check(fn)
    except BaseException as error:  # noqa: BLE001
        return error._render_traceback_()
    raise AssertionError("the check passed")


def test_a_wrong_answer_shows_in_a_few_lines_without_the_checks_internals():
    from attnlab.checks import check_softmax

    lines = _render(check_softmax, lambda x, dim=-1: x.exp())
    assert len(lines) <= 6 and "CheckFailed" in lines[0] and "softmax" in lines[0]
    assert not any("run_checks" in line or "common.py" in line for line in lines)
    assert all(len(line.replace("\x1b[0;31m", "").replace("\x1b[0m", "")) <= 100 for line in lines), lines


def test_long_messages_wrap_between_words():
    from attnlab.checks.common import short_traceback

    message = ("your weights do not sum to 1 along the key axis; borrow the course's version with "
               "attnlab.use_reference('attention') and run the set-up cell again, or fix "
               "src/attnlab/attention.py line 42")
    lines = short_traceback("CheckFailed", message, "attention.py, line 42, in softmax: return x")
    text = " ".join(line.strip() for line in lines[:-1])
    assert "attnlab.use_reference('attention')" in text and "src/attnlab/attention.py" in text
    assert text.replace("\x1b[0;31m", "").replace("\x1b[0m", "") == f"CheckFailed: {message}"
    assert lines[-1].strip().startswith("raised in your code: attention.py, line 42")


def test_a_crash_names_the_line_of_the_learners_code(tmp_path):
    import importlib.util

    from attnlab.checks import check_softmax

    path = tmp_path / "mine.py"
    path.write_text("def softmax(x, dim=-1):\n    return x.amax(dim=7)  # the bug\n")
    spec = importlib.util.spec_from_file_location("mine", path)
    mine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mine)
    lines = _render(check_softmax, mine.softmax)
    assert "IndexError" in lines[0]
    assert lines[-1].strip() == "raised in your code: mine.py, line 2, in softmax: return x.amax(dim=7)  # the bug"


def test_a_stub_keeps_its_error_and_shows_its_message_first():
    from attnlab.checks import check_softmax

    stub = load_stub("attention")
    with pytest.raises(NotImplementedError) as caught:
        check_softmax(stub.softmax)
    lines = caught.value._render_traceback_()
    assert "NotImplementedError" in lines[0] and "Lesson 02: softmax()" in lines[0]
    assert "attention.py" in lines[-1] and "raise NotImplementedError" in lines[-1]


def test_in_a_notebook_the_check_fails_in_a_few_lines_and_nbgrader_sees_an_error(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from attnlab import checks\nchecks.check_softmax(lambda x, dim=-1: x.exp())")])
    NotebookClient(notebook, kernel_name="python3", allow_errors=True).execute()
    error, = [o for o in notebook.cells[0].outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed" and "softmax" in error.evalue
    assert len(error.traceback) <= 6, error.traceback
    assert not any("run_checks" in line for line in error.traceback)
