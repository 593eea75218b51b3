"""Lesson 02's own figures (attnlab.plots.lesson02): the interactive softmax-saturation figure and
the recurrence-against-attention timing figure."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, checkbox, slider  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_saturation_numbers_match_a_direct_float64_computation():
    numbers = plots.saturation_numbers(37, scaled=True, n_keys=5, seed=3)
    rng = np.random.default_rng(3)
    q = rng.standard_normal(4096)[:37]
    k = rng.standard_normal((5, 4096))[:, :37]
    scores = k @ q / math.sqrt(37)
    weights = np.exp(scores) / np.exp(scores).sum()
    assert np.allclose(numbers["scores"], scores) and np.allclose(numbers["weights"], weights)
    # the Jacobian of the softmax, by finite differences
    eps, jac = 1e-6, np.zeros((5, 5))
    for j in range(5):
        bumped = scores.copy()
        bumped[j] += eps
        jac[:, j] = (np.exp(bumped) / np.exp(bumped).sum() - weights) / eps
    assert numbers["jacobian_norm"] == pytest.approx(np.linalg.norm(jac), rel=1e-4)
    assert numbers["largest_weight"] == pytest.approx(weights.max())


def test_saturation_grows_with_d_k_only_without_the_scale():
    unscaled = [plots.saturation_numbers(d, scaled=False)["largest_weight"] for d in (4, 64, 1024)]
    scaled = [plots.saturation_numbers(d, scaled=True)["score_std"] for d in (4, 64, 1024)]
    assert unscaled[0] < unscaled[1] < unscaled[2] and unscaled[2] > 0.99
    assert max(scaled) < 2.0
    with pytest.raises(ValueError, match="d_k must be between 1 and 4096"):
        plots.saturation_numbers(0)


def test_the_interactive_saturation_figure_redraws():
    view = FigureView(plots.softmax_saturation,
                      {"d_k": slider("d_k", 1, 1024, value=64), "scaled": checkbox("scale", value=True)},
                      "saturation")
    first = view.figure()
    left, right = first.axes
    assert left.get_xlabel() == "key (counting from 0)" and left.get_ylabel() and right.get_ylabel() == "attention weight"
    assert [int(t) for t in left.get_xticks()] == [0, 3, 6, 9, 12, 15]  # keys counted from 0
    assert "d_k = 64, scaled" in first.get_suptitle()
    heights = [bar.get_height() for bar in right.patches]
    second = view.redraw(d_k=1024, scaled=False)
    assert "d_k = 1024, unscaled" in second.get_suptitle()
    assert "largest 1.00" in second.axes[1].get_title()
    assert [bar.get_height() for bar in second.axes[1].patches] != heights
    assert view.redraws == 1 and not view.error


def test_recurrence_figure_has_two_log_log_panels_with_a_line_per_layer_and_batch():
    ns = {1: [32, 64, 128], 32: [32, 64]}
    seconds = {1: {"GRU": [1e-4, 2e-4, 4e-4], "self-attention": [1e-5, 2e-5, 5e-5]},
               32: {"GRU": [1e-5, 2e-5], "self-attention": [1e-5, 3e-5]}}
    gflops = {1: {"GRU": [4.0, 4.0, 4.0], "self-attention": [40.0, 50.0, 60.0]},
              32: {"GRU": [40.0, 41.0], "self-attention": [45.0, 44.0]}}
    fig = plots.recurrence_figure(ns, seconds, gflops)
    left, right = fig.axes
    for ax in (left, right):
        assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_title() and ax.get_ylabel()
        assert [t.get_text() for t in ax.get_legend().get_texts()] == [
            "GRU, batch 1", "self-attention, batch 1", "GRU, batch 32", "self-attention, batch 32"]
    assert np.allclose(left.lines[0].get_ydata(), [0.1, 0.2, 0.4])  # drawn in milliseconds
    assert list(left.lines[2].get_xdata()) == [32, 64]                 # batch 32 over its own lengths
    assert "ms" in left.get_ylabel() and "GFLOP/s" in right.get_ylabel()
    with pytest.raises(ValueError, match="same batch sizes"):
        plots.recurrence_figure({1: [32]}, {1: {"GRU": [1.0]}}, {})


def test_path_length_figure_draws_a_band_per_layer_on_log_axes():
    norms = {"GRU": np.array([[0.3, 1e-3, 1e-13], [0.4, 2e-3, 3e-13]]),
             "self-attention": np.array([[3.0, 0.5, 0.1], [2.0, 0.2, 0.05]])}
    fig = plots.path_length_figure([4, 16, 64], norms)
    ax, = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert np.allclose(ax.lines[0].get_ydata(), np.sqrt(norms["GRU"][0] * norms["GRU"][1]))  # geometric mean
    assert len(ax.collections) == 2                                                          # the two bands
    with pytest.raises(ValueError, match=r"need \(runs, 3\) norms"):
        plots.path_length_figure([4, 16, 64], {"GRU": np.ones((2, 2))})
