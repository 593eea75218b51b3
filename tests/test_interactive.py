"""attnlab.interactive's widgets without a browser: sliders wide enough to drag, one drawing per
change, every figure closed, and what a redraw prints kept under the figure (not in JupyterLab's
Log Console). The browser tests drag the sliders for real."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from attnlab.interactive import FigureView, _show_widgets, checkbox, choice, slider  # noqa: E402


def _draw_counting(calls: list):
    def draw(n, label):
        calls.append((n, label))
        print(f"drawing n={n}")
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot(range(n))
        ax.set(title=f"{label}: {n}", xlabel="x", ylabel="y")
        return fig
    return draw


def test_sliders_get_a_width_of_their_own_and_other_controls_fit_their_content():
    assert slider("n", 1, 12, 3).widget().layout.width == "min(100%, 480px)"
    assert slider("scale", 0.0, 1.0, 0.5).widget().layout.width == "min(100%, 480px)"
    assert choice("kind", ["a", "b"]).widget().layout.width == "auto"
    assert checkbox("on").widget().layout.width == "auto"


def test_a_change_draws_once_closes_its_figure_and_has_an_output_of_its_own(capsys):
    calls: list = []
    view = FigureView(_draw_counting(calls), {"n": slider("n", 1, 9, 3), "label": choice("label", ["a", "b"])},
                      title="counting")
    _show_widgets(view)
    assert calls == [(3, "a")] and plt.get_fignums() == []
    before = view.widgets["picture"].value
    capsys.readouterr()
    view.widgets["inputs"]["n"].value = 5
    assert calls == [(3, "a"), (5, "a")], "one drawing per change"
    assert plt.get_fignums() == [], "the redrawn figure is closed"
    assert view.widgets["picture"].value != before
    # Outside a kernel an Output widget captures nothing; the browser tests see the Log Console stay
    # empty. Here: the view owns an output area, shown under the picture.
    assert view.widgets["box"].children[-1] is view.widgets["printed"]


def test_a_drawing_error_is_shown_in_place_of_the_figure():
    def draw(n):
        if n > 4:
            raise ValueError("n too large for this picture")
        fig, ax = plt.subplots()
        ax.set(title="t", xlabel="x", ylabel="y")
        return fig

    view = FigureView(draw, {"n": slider("n", 1, 9, 3)}, title="errors")
    _show_widgets(view)
    view.widgets["inputs"]["n"].value = 7
    assert "n too large for this picture" in view.widgets["picture"].value
    view.widgets["inputs"]["n"].value = 2
    assert "<img" in view.widgets["picture"].value and plt.get_fignums() == []
