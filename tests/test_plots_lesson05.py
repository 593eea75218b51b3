"""The figures of lesson 05 draw what they are given, with titles and labelled axes, and the
interactive rotated query and key redraws when a control moves (built as the notebook builds it)."""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.checks.lesson05 import reference_rope, reference_sinusoidal  # noqa: E402
from attnlab.interactive import FigureView, choice, slider  # noqa: E402
from tests.cpu_timing import cpu_seconds  # noqa: E402


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


def marker(fig):
    """The chosen key's marker on the right panel of the interactive figure."""
    return next(line for line in fig.axes[1].lines if str(line.get_label()).startswith("key at"))


def test_interactive_rope_figure_redraws_when_a_control_moves():
    view = rope_view()
    first, seconds = cpu_seconds(view.figure)
    assert seconds < 5  # "quickly": CPU time, generous for a slow machine
    labelled(first)
    before, title_before = png(first), first.axes[1].get_title()
    marker_before = marker(first).get_ydata()[0]
    moved = view.redraw(query_position=30)
    assert view.redraws == 1 and view.error == ""
    assert png(moved) != before
    assert moved.axes[1].get_title() != title_before            # the distance changed
    assert marker(moved).get_ydata()[0] != pytest.approx(marker_before)
    both = view.redraw(key_position=24)                           # both moved by 20: same score
    assert marker(both).get_ydata()[0] == pytest.approx(marker_before, abs=1e-9)
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


def test_interactive_rope_figure_shows_the_average_over_matching_pairs():
    numbers = plots.rope_pair_numbers(10, 4, 10000.0)
    theta = 1e4 ** (-np.arange(8) * 2 / 16)
    expected = 2 * np.cos(np.outer(10 - numbers["key_positions"], theta)).sum(axis=1) / 4   # E[q·R k]/√16
    assert np.abs(numbers["average_scores"] - expected).max() < 0.25
    fig = plots.draw_rope_pair(10, 4, 10000.0, 0)
    average = [line for line in fig.axes[1].lines if "average" in str(line.get_label())]
    assert len(average) == 1 and np.allclose(average[0].get_ydata(), numbers["average_scores"])


def test_rope_pair_scores_are_rope_scores():
    distances = np.array([0, 3, 50])
    scores = plots.rope_pair_scores(distances, 8, 100.0, pairs=5, seed=2)
    rng = np.random.default_rng(2)
    q = rng.standard_normal((5, 8))
    k = q + 0.6 * rng.standard_normal((5, 8))
    for j, d in enumerate(distances):   # the query at position d, the key at 0, rotated by the checks' reference
        rotated_q = reference_rope(q, [d] * 5, 100.0).numpy()
        rotated_k = reference_rope(k, [0] * 5, 100.0).numpy()
        np.testing.assert_allclose(scores[:, j], (rotated_q * rotated_k).sum(-1) / math.sqrt(8), atol=1e-10)
    with pytest.raises(ValueError, match="even"):
        plots.rope_pair_scores([0], 5, 1e4)


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
    fig = plots.rope_decay_figure([0, 1, 10], {"a": bound}, head_dim=128, log_distance=True,
                                  scores={"pairs": np.ones((3, 3)), "average": np.zeros(3)})
    labelled(fig)
    assert len(fig.axes) == 2 and fig.get_suptitle()
    assert len([line for line in fig.axes[1].lines if line.get_label() == "pairs"]) == 1   # one label, 3 lines
    assert len(fig.axes[1].lines) == 5                                                    # 3 pairs, average, 0 line


def test_alibi_figure_draws_each_head():
    fig = plots.alibi_figure([0.25, 0.0625], max_distance=8)
    labelled(fig)
    bias, factor = fig.axes
    assert bias.lines[0].get_ydata()[-1] == pytest.approx(-2.0)
    assert factor.lines[1].get_ydata()[-1] == pytest.approx(math.exp(-0.5))
    assert [t.get_text() for t in bias.get_legend().get_texts()] == ["head 0: slope 1/4", "head 1: slope 1/16"]


def test_extrapolation_figure_shows_mean_band_and_the_learned_table():
    lengths = [8, 16, 32, 64]
    accuracies = {"a": [[1.0, 0.9, 0.5, 0.1], [0.8, 0.7, 0.3, 0.1]], "b": [[0.9] * 4, [0.9] * 4]}
    fig = plots.extrapolation_figure(lengths, accuracies, train_lengths=(8, 16), chance=0.1,
                                     moved=np.r_[np.ones(16), np.zeros(16)])
    labelled(fig)
    panel, table = fig.axes
    assert panel.get_xscale() == "log"
    assert [t.get_text() for t in panel.get_xticklabels()] == ["8", "16", "32", "64"]
    assert np.allclose(panel.lines[0].get_ydata(), [0.9, 0.8, 0.4, 0.1])            # the mean of the seeds
    assert len(panel.collections) == 2                                              # one band per kind
    assert any(line.get_ydata()[0] == 0.1 for line in panel.lines)                  # chance
    assert len(table.lines[0].get_ydata()) == 32
    assert len(plots.extrapolation_figure(lengths, accuracies, train_lengths=(8, 16)).axes) == 1


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
