"""Lesson 07's figures are labelled, and its interactive figure redraws when a control moves."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, choice, slider, text  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_arrangements_figure_shows_three_models_and_three_masks():
    fig = plots.arrangements_figure()
    titles = [ax.get_title() for ax in fig.axes]
    assert any("Encoder-only" in t for t in titles) and any("Decoder-only" in t for t in titles)
    assert any("Encoder-decoder" in t for t in titles)
    images = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(images) == 3
    assert np.all(images[0] == 1) and np.array_equal(images[1], np.tril(np.ones_like(images[1])))
    assert all(ax.get_xlabel() for ax in fig.axes if ax.images)


def test_time_per_token_figure():
    fig = plots.time_per_token_figure([16, 32, 64], {"with the KV cache": [1.0, 1.1, 1.0],
                                                    "without the cache": [1.0, 2.0, 4.0]})
    ax = fig.axes[0]
    assert ax.get_ylabel() == "time per new token (ms)" and "tokens" in ax.get_xlabel()
    assert [line.get_label() for line in ax.lines] == ["with the KV cache", "without the cache"]


def test_sense_scatter_colours_the_senses():
    fig = plots.sense_scatter(torch.randn(10, 2), [0, 1] * 5)
    ax = fig.axes[0]
    assert len(ax.collections) == 2 and "principal component" in ax.get_xlabel()
    assert "money" in ax.get_legend().get_texts()[0].get_text()


def _fake_run(prompt, layer, head):
    words = prompt.split() + ["x", "y", "z"]
    n_prompt = len(prompt.split())
    weights = torch.zeros(3, len(words))
    sharpness = 1 + int(layer == "3") + 2 * int(head == "1")
    for step in range(3):
        seen = n_prompt + step
        weights[step, :seen] = torch.softmax(torch.arange(seen, dtype=torch.float) * sharpness, 0)
    return words, n_prompt, weights


def test_generation_figure_and_its_interactive_view_redraw():
    calls = []
    draw = plots.generation_view(lambda *key: calls.append(key) or _fake_run(*key))
    view = FigureView(draw, {"prompt": text("prompt", "a b c"), "step": slider("step", 1, 3, value=1),
                             "layer": choice("layer", ["0", "3"], value="3"),
                             "head": choice("head", ["mean", "0", "1"], value="mean")}, "generation")
    first = view.figure()
    top = first.axes[0]
    assert top.get_ylabel() == "attention weight" and '"x"' in top.get_title()
    assert "layer 3, mean of the heads" in top.get_title()
    assert len(top.patches) == 3
    second = view.redraw(step=3)
    assert '"z"' in second.axes[0].get_title() and len(second.axes[0].patches) == 5
    assert calls == [("a b c", "3", "mean")]        # moving the step slider does not generate again
    third = view.redraw(layer="0")
    heights = [p.get_height() for p in third.axes[0].patches]
    assert heights != [p.get_height() for p in second.axes[0].patches]
    fourth = view.redraw(head="1")
    assert "layer 0, head 1" in fourth.axes[0].get_title()
    assert [p.get_height() for p in fourth.axes[0].patches] != heights
    assert calls[-1] == ("a b c", "0", "1")
    with pytest.raises(ValueError, match="step"):
        plots.generation_figure(["a", "b"], 1, torch.ones(1, 2), 2)


def test_sampling_figure_marks_what_top_k_and_top_p_keep():
    words = [f"w{i}" for i in range(20)]
    sure = torch.zeros(20)
    sure[3] = 0.95
    sure[[0, 1]] = 0.025
    flat = torch.full((20,), 0.05)
    fig = plots.sampling_figure({"sure": (words, sure), "flat": (words, flat)}, top_k=5, top_p=0.9,
                                nucleus_sizes=torch.tensor([1, 1, 2, 18, 18]))
    sure_ax, flat_ax, histogram = [ax for ax in fig.axes if ax.get_visible()]
    dark = "#08519c"
    def kept(ax):
        return sum(matplotlib.colors.to_hex(bar.get_facecolor()) == dark for bar in ax.patches)
    assert kept(sure_ax) == 1 and "keeps 1" in sure_ax.get_xlabel()
    assert kept(flat_ax) == 12 and "keeps 18" in flat_ax.get_xlabel()   # 12 bars shown of the 18 kept
    assert sure_ax.get_xticklabels()[0].get_text() == "w3"               # sorted, most likely first
    assert histogram.get_ylabel() == "positions" and "top-p" in histogram.get_xlabel()
    assert all(ax.get_title() for ax in (sure_ax, flat_ax, histogram))
    with pytest.raises(ValueError, match="top_k"):
        plots.sampling_figure({"sure": (words, sure)}, top_k=0, top_p=0.9)
    with pytest.raises(ValueError, match="probabilities must be"):
        plots.sampling_figure({"short": (words[:3], sure)}, top_k=5, top_p=0.9)


def test_objectives_figure_draws_each_mask_and_marks_the_loss_rows():
    words = ["a", "b", "c"]
    fig = plots.objectives_figure([
        {"title": "causal", "queries": words, "keys": words, "allowed": np.tril(np.ones((3, 3), bool)), "loss": [0, 1, 2]},
        {"title": "masked", "queries": words, "keys": words, "allowed": np.ones((3, 3), bool), "loss": [1]},
        {"title": "cross", "queries": ["x", "y"], "keys": words, "allowed": np.ones((2, 3), bool), "loss": [0, 1],
         "xlabel": "source (key)", "ylabel": "target (query)"},
    ])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["causal", "masked", "cross"]
    assert np.array_equal(shown[0].images[0].get_array(), np.tril(np.ones((3, 3))))
    red = [label.get_text() for label in shown[1].get_yticklabels()
           if matplotlib.colors.to_hex(label.get_color()) == "#d62728"]
    assert red == ["b"]
    assert shown[2].get_xlabel() == "source (key)" and shown[2].get_ylabel() == "target (query)"
    with pytest.raises(ValueError, match="allowed has shape"):
        plots.objectives_figure([{"title": "bad", "queries": words, "keys": words, "allowed": np.ones((2, 2)),
                                  "loss": []}])


def test_every_lesson07_figure_fits_the_notebook():
    # 9.6 inches at 100 dpi is the notebook's width (tests/test_figures_readable.py)
    figures = [plots.arrangements_figure(),
               plots.sampling_figure({"p": ([f"w{i}" for i in range(9)], torch.full((9,), 1 / 9))},
                                     top_k=5, top_p=0.9, nucleus_sizes=torch.tensor([1, 4])),
               plots.generation_figure([f"w{i}" for i in range(40)], 30, torch.full((10, 40), 0.03), 10)]
    for fig in figures:
        assert fig.get_figwidth() <= 9.6
    titles = [ax.get_title(loc="left") or ax.get_title() for ax in figures[2].axes]
    assert all(titles), titles
