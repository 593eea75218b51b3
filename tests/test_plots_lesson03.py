"""Figures of lesson 03: the greyed heatmap, the mask picture and the interactive mask explorer."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, checkbox, slider, text  # noqa: E402
from tests.cpu_timing import cpu_seconds  # noqa: E402
from tests.helpers import borrowed_reference  # noqa: E402


@pytest.fixture(scope="module")
def softmax_of_lesson_02():
    yield from borrowed_reference("attention")


@pytest.fixture(scope="module")
def masking(softmax_of_lesson_02):
    """The reference masks (masked_attention uses the lesson-02 softmax)."""
    yield from borrowed_reference("masking")


def _image(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def test_masked_heatmap_greys_masked_cells_and_labels_everything():
    weights = torch.tensor([[1.0, 0.0, 0.0], [0.3, 0.7, 0.0]])
    allowed = torch.tensor([[True, False, False], [True, True, False]])
    fig = plots.masked_heatmap(weights, allowed, ["a", "b"], ["x", "y", "z"], title="T")
    ax = fig.axes[0]
    assert ax.get_title() == "T"
    assert ax.get_xlabel().startswith("key") and "grey" in ax.get_xlabel() and ax.get_ylabel().startswith("query")
    assert [t.get_text() for t in ax.texts] == ["1.00", "0.30", "0.70"]  # only visible cells annotated
    image = ax.images[0].get_array()
    assert image.mask.tolist() == (~allowed).tolist()
    assert fig.axes[1].get_ylabel() == "attention weight"
    plt.close(fig)


def test_masked_heatmap_without_masked_cells_promises_no_grey():
    fig = plots.masked_heatmap(torch.full((2, 2), 0.5), torch.ones(2, 2, dtype=torch.bool))
    ax = fig.axes[0]
    assert "grey" not in ax.get_xlabel() and "no key is masked" in ax.get_xlabel()
    assert not ax.images[0].get_array().mask.any()
    plt.close(fig)


def test_masked_heatmap_broadcasts_a_key_mask_and_rejects_bad_shapes():
    fig = plots.masked_heatmap(torch.full((2, 3), 1 / 3), torch.tensor([[True, True, False]]))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["k0", "k1", "k2"]
    plt.close(fig)
    with pytest.raises(ValueError, match="one \\(n_q, n_k\\) matrix"):
        plots.masked_heatmap(torch.zeros(2, 2, 2), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="2 query labels"):
        plots.masked_heatmap(torch.zeros(3, 2), torch.ones(3, 2, dtype=torch.bool), ["a", "b"], ["x", "y"])


def test_mask_picture():
    fig = plots.mask_picture(torch.ones(3, 4, dtype=torch.bool).tril(), title="M")
    ax = fig.axes[0]
    assert ax.get_title() == "M" and "blue: may attend" in ax.get_xlabel()
    assert ax.images[0].get_array().tolist() == torch.ones(3, 4).tril().tolist()
    plt.close(fig)


def test_mask_explorer_redraws_with_the_controls(masking):
    draw = plots.mask_explorer(masking)
    view = FigureView(draw, {
        "n_q": slider("queries n_q", 1, 12, value=6), "n_k": slider("keys n_k", 1, 12, value=8),
        "causal": checkbox("causal", True), "window": slider("window (0 = none)", 0, 12, value=0),
        "padding": slider("padded keys", 0, 6, value=2), "left_padding": checkbox("left padding", False),
        "documents": text("documents start at", "4"),
    }, "Masks")
    first = view.figure()
    assert first is not None, view.error
    mask_axes, weight_axes = first.axes[0], first.axes[1]
    assert mask_axes.get_title().startswith("Combined mask") and weight_axes.get_title().startswith("Weights")
    assert "0 of 6 queries have nothing to see" in first._suptitle.get_text()
    before = _image(first)
    plt.close(first)

    second, seconds = cpu_seconds(view.redraw, n_q=8, n_k=5, left_padding=True, window=3)
    assert second is not None, view.error
    assert view.redraws == 1
    shown = second.axes[0].images[0].get_array()
    assert shown.shape == (8, 5)
    # causal (8 queries over 5 keys), window 3, keys 0 and 1 padded on the left, document from 4
    expected = masking.combine_masks(masking.causal_mask(8, 5), masking.sliding_window_mask(8, 5, 3),
                                     torch.tensor([False, False, True, True, True]))
    ids = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1])  # positions -3 .. 4; a document starts at 4
    expected = expected & masking.document_mask(ids)[:, 3:]
    assert shown.tolist() == expected.double().tolist()
    assert "5 of 8 queries have nothing to see" in second._suptitle.get_text()
    assert _image(second).shape != before.shape or not np.array_equal(_image(second), before)
    assert seconds < 2.0  # CPU time, so other programs do not count: well under a second
    plt.close(second)


def test_mask_explorer_reports_bad_document_text(masking):
    view = FigureView(plots.mask_explorer(masking), {"documents": text("documents start at", "x")}, "Masks")
    assert view.figure() is None and "whole numbers" in view.error
    assert view.redraw(documents="") is not None
