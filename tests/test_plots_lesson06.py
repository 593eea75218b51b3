"""The figures of lesson 06: titles and labelled axes, and the interactive neuron viewer redraws
when its controls move."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, choice, slider  # noqa: E402
from tests.cpu_timing import cpu_seconds  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _labelled(fig):
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert titled or fig._suptitle is not None, "the figure has no title"
    for ax in fig.axes:
        if ax.axison:
            assert ax.get_xlabel() or ax.get_ylabel() or ax.get_yticklabels(), f"unlabelled axes: {ax.get_title()}"


def test_static_figures_have_titles_and_labels():
    _labelled(plots.norm_placement_diagram())
    _labelled(plots.activation_figure())
    fig = plots.parameter_share_figure({"one layer": {"attention": 1, "feed-forward": 2},
                                        "a model": {"embeddings": 1, "attention": 1, "feed-forward": 2, "norms": 0}})
    _labelled(fig)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "67 %" in texts and "50 %" in texts        # the feed-forward share written on each bar
    _labelled(plots.residual_update_figure([1.0, 2.0, 3.0], [0.5, 0.6, 0.7], [0.8, 0.9, 1.0], [1.2, 2.2, 3.3]))
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:4] == ["two thirds", "attention", "feed-forward", "embeddings"]
    # a part too thin to see says so in the legend; one that shows does not
    thin = plots.parameter_share_figure({"a layer": {"attention": 1000, "feed-forward": 2000, "norms": 1}})
    assert "norms (under 0.5 %: too thin to see)" in [t.get_text() for t in thin.axes[0].get_legend().get_texts()]
    wide = plots.parameter_share_figure({"a layer": {"attention": 1000, "feed-forward": 2000, "norms": 100}})
    assert "norms" in [t.get_text() for t in wide.axes[0].get_legend().get_texts()]


def test_residual_figure_draws_the_stream_leaving_the_last_layer():
    fig = plots.residual_update_figure([1.0, 2.0, 3.0], [0.5, 0.6, 0.7], [0.8, 0.9, 1.0], [1.2, 2.2, 3.3],
                                       final_stream=4.0)
    _labelled(fig)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ["0", "1", "2", "out"]
    assert list(left.lines[0].get_ydata()) == [1.0, 2.0, 3.0, 4.0]
    assert [round(bar.get_height(), 6) for bar in right.patches[:3]] == [0.5, 0.3, round(0.7 / 3, 6)]


NEURONS = {
    "L1 N7": {"contexts": [("the muddy", "bank", 3.2), ("a steep", "bank", 2.9)],
              "promoted": [("river", 1.5), ("water", 1.2), ("fish", 0.9)],
              "prompt": "the muddy bank", "tokens": ["of", "was", "river"]},
    "L2 N3": {"contexts": [("nora", "hale", 2.0)], "promoted": [("paid", 0.7)],
              "prompt": "nora hale", "tokens": ["paid", "."]},
}


def _probabilities(label, scale):
    n = len(NEURONS[label]["tokens"])
    base = [1.0 / (n + 1)] * n
    return {"unchanged": base, "scaled": [min(1.0, p * max(scale, 0.0)) for p in base]}


def _bar_widths(fig):
    panel = fig.axes[-1]
    return [round(bar.get_width(), 6) for bar in panel.patches]


def test_neuron_viewer_redraws_with_the_controls():
    draw = plots.neuron_viewer(NEURONS, _probabilities)
    view = FigureView(draw, {"neuron": choice("neuron", list(NEURONS)), "scale": slider("scale", -2.0, 5.0, value=1.0)},
                      "Neuron viewer")
    first = view.figure()
    _labelled(first)
    assert "× 1" in first.axes[-1].get_title()
    boosted, seconds = cpu_seconds(view.redraw, scale=3.0)
    assert seconds < 2.0  # CPU time, so other programs do not count: well under a second
    assert "× 3" in boosted.axes[-1].get_title()
    assert first.axes[-1].get_xlim() == (0.0, 0.3)    # zoomed to its bars (largest 0.25), not 0 to 1
    assert _bar_widths(boosted) != _bar_widths(first)
    other = view.redraw(neuron="L2 N3")
    assert [t.get_text() for t in other.axes[1].get_yticklabels()] == ["paid"]
    assert view.redraws == 2 and view.error == ""


def test_gradient_figure_draws_each_seed_and_the_trend_against_depth():
    per_layer = {"post-norm": [[1.0, 1.2, 1.4], [1.1, 1.0, 0.9]], "pre-norm": [[0.5, 0.4, 0.3], [0.6, 0.5, 0.4]]}
    last = {"post-norm": [[0.5, 0.6, 0.7], [0.4, 0.6, 0.8]], "pre-norm": [[0.3, 0.25, 0.2], [0.3, 0.2, 0.15]]}
    fig = plots.gradient_figure([1, 2, 3], per_layer, [3, 6, 12], last)
    _labelled(fig)
    left, right = fig.axes
    # panel (a): one thin line per seed and a mean line per placement
    assert len(left.lines) == 2 * (2 + 1)
    assert list(left.lines[2].get_ydata()) == pytest.approx([1.05, 1.1, 1.15])
    # panel (b): the mean against depth on a log axis labelled at the depths
    assert right.get_xscale() == "log"
    assert [t.get_text() for t in right.get_xticklabels()] == ["3", "6", "12"]
    assert list(right.lines[1].get_ydata()) == pytest.approx([0.3, 0.225, 0.175])
    assert fig.get_size_inches()[0] * fig.dpi <= 968


def test_superposition_figure_counts_the_stored_features():
    import numpy as np

    angles = np.deg2rad([0, 72, 144, 216, 288])
    pentagon = np.stack([np.cos(angles), np.sin(angles)])
    pair = np.array([[1.0, 0.0, 0.02, 0.01, 0.0], [0.0, 1.0, 0.01, 0.0, 0.03]])
    fig = plots.superposition_figure({"sparse": pentagon, "dense": pair})
    _labelled(fig)
    titles = [ax.get_title() for ax in fig.axes]
    assert "5 of 5 features stored" in titles[0] and "2 of 5 features stored" in titles[1]
    # every feature drawn as an arrow, the dropped ones faint
    arrows = [p for p in fig.axes[1].patches if type(p).__name__ == "FancyArrowPatch"]
    assert len(arrows) == 5 and sorted(a.get_alpha() for a in arrows) == [0.35, 0.35, 0.35, 1.0, 1.0]
    assert [t.get_text() for t in fig.axes[1].texts] == ["feature 0", "feature 1"]
