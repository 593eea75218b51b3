"""The figures of lesson 05 draw what they are given, with titles and labelled axes, and the
interactive rotated query and key redraws when a control moves (built as the notebook builds it)."""

from __future__ import annotations

import io
import math
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.checks.lesson05 import reference_rope, reference_sinusoidal  # noqa: E402
from attnlab.interactive import FigureView, choice, slider  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=40)
    return buffer.getvalue()


def labelled(fig) -> None:
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title(), "an axes without a title"
        assert ax.get_xlabel() and ax.get_ylabel(), f"unlabelled axes {ax.get_title()!r}"


def rope_view() -> FigureView:
    """The notebook's interactive figure, as data (no widgets)."""
    return FigureView(plots.draw_rope_pair, {
        "query_position": slider("query position", 0, 64, value=10),
        "key_position": slider("key position", 0, 64, value=4),
        "base": choice("base", [100.0, 10000.0, 1000000.0], value=10000.0),
        "pair": slider("pair shown", 0, 7, value=0),
    }, "RoPE: a query and a key, rotated")


def test_interactive_rope_figure_redraws_when_a_control_moves():
    view = rope_view()
    start = time.perf_counter()
    first = view.figure()
    assert time.perf_counter() - start < 5  # "quickly": generous on a loaded 2-core machine
    labelled(first)
    before, title_before = png(first), first.axes[1].get_title()
    marker_before = first.axes[1].lines[1].get_ydata()[0]
    moved = view.redraw(query_position=30)
    assert view.redraws == 1 and view.error == ""
    assert png(moved) != before
    assert moved.axes[1].get_title() != title_before            # the distance changed
    assert moved.axes[1].lines[1].get_ydata()[0] != pytest.approx(marker_before)
    both = view.redraw(key_position=24)                           # both moved by 20: same score
    assert both.axes[1].lines[1].get_ydata()[0] == pytest.approx(marker_before, abs=1e-9)
    assert view.redraw(base=1000000.0, pair=7).axes[0].get_title().startswith("pair 7")


def test_interactive_rope_figure_matches_the_complex_reference():
    numbers = plots.rope_pair_numbers(10, 4, 10000.0)
    q, k = plots.lesson05._query_key()
    np.testing.assert_allclose(numbers["q"], reference_rope(q[None], [10]).numpy()[0], atol=1e-12)
    np.testing.assert_allclose(numbers["k"], reference_rope(k[None], [4]).numpy()[0], atol=1e-12)
    assert numbers["score"] == pytest.approx(numbers["scores"][4])
    assert plots.rope_pair_numbers(40, 34, 10000.0)["score"] == pytest.approx(numbers["score"], abs=1e-9)
    with pytest.raises(ValueError, match="pair must be between 0 and 7"):
        plots.draw_rope_pair(pair=8)


def test_sinusoidal_figure_has_three_labelled_panels():
    fig = plots.sinusoidal_figure(reference_sinusoidal(40, 16), anchors=[10, 20])
    labelled(fig)
    heat, wavelengths, dots = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert heat.images[0].get_array().shape == (40, 16)
    assert wavelengths.get_yscale() == "log"
    assert wavelengths.lines[0].get_ydata()[0] == pytest.approx(2 * math.pi)
    assert len(dots.lines) == 2 and dots.get_legend() is not None


def test_rope_wavelengths_and_decay():
    assert plots.rope_wavelengths(128, 1e6)[-1] == pytest.approx(2 * math.pi * 1e6 ** (126 / 128))
    with pytest.raises(ValueError, match="even"):
        plots.rope_wavelengths(7, 1e4)
    bound = plots.rope_decay_bound([0, 10, 1000], 128, 1e4)
    assert bound[0] == pytest.approx(32.5) and bound[0] > bound[1] > bound[2]
    fig = plots.rope_wavelengths_figure(128, {"a": 1e4, "b": 1e6}, context=32768)
    labelled(fig)
    assert len(fig.axes[0].lines) == 3
    fig = plots.rope_decay_figure([0, 1, 10], {"a": bound}, head_dim=128, log_distance=True)
    labelled(fig)
    assert fig.axes[0].get_xscale() == "symlog"


def test_who_paid_figure_shows_losses_accuracies_and_chance():
    fig = plots.who_paid_figure({"none": [0.9] * 30, "RoPE": list(np.linspace(2, 0, 30))},
                                {"none": 0.5, "RoPE": 1.0})
    labelled(fig)
    assert len(fig.axes[0].lines) == 3                      # two models and the ln 2 floor
    assert fig.axes[0].lines[-1].get_ydata()[0] == pytest.approx(math.log(2))
    same_colour = matplotlib.colors.to_rgb(fig.axes[0].lines[1].get_color())
    assert same_colour == pytest.approx(fig.axes[1].patches[1].get_facecolor()[:3])   # RoPE: line and bar
    assert [t.get_text() for t in fig.axes[1].texts] == ["50%", "100%"]
    assert fig.axes[1].lines[0].get_ydata()[0] == 0.5
