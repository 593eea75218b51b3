"""Every figure of every lesson reaches the executed notebook and can be read there.

The solution notebooks run with matplotlib's inline backend, as in JupyterLab, and every figure
rendered (inline, or as an interactive figure's picture) is described (``tests.notebook_runs``).
Each lesson renders exactly the figures it means to (a figure that fails to draw is missed); each
figure has a title (its own or one per panel) and labelled axes (a colour bar: its label); a
logarithmic axis carries at least three labelled ticks; and the figure fits the notebook's width in
JupyterLab (968 px for a 1400 px wide window: wider pictures are shrunk) with its smallest text at
least 9 px tall.
"""

from __future__ import annotations

import pytest

from attnlab.lessons import LESSONS
from tests.notebook_runs import solution_run

NOTEBOOK_WIDTH_PX = 968  # JupyterLab 4's output area in a 1400 x 900 window, measured in Chromium
SMALLEST_TEXT_PX = 9
LOG_TICKS = 3

# How many figures each lesson's solution notebook renders, top to bottom (interactive figures
# count once: their starting picture).
FIGURES = {
    "00": 0, "01": 4, "02": 6, "03": 6, "04": 13,
    "05": 7, "06": 9, "07": 12, "08": 11, "09": 7,
}


def problems(figure: dict) -> list[str]:
    """What keeps one described figure from being read (empty when it is fine)."""
    if "error" in figure:
        return [f"could not be described: {figure['error']}"]
    found = []
    panels = [p for p in figure["panels"] if not p["colorbar"]]
    if not figure["suptitle"].strip() and not all(p["title"].strip() for p in panels):
        untitled = sum(not p["title"].strip() for p in panels)
        found.append(f"no title ({untitled} of {len(panels)} panels untitled, no suptitle)")
    for index, panel in enumerate(figure["panels"]):
        name = f"panel {index} ({panel['title'][:40]!r})"
        if panel["colorbar"]:
            if not (panel["xlabel"].strip() or panel["ylabel"].strip()):
                found.append(f"{name}: a colour bar without a label")
            continue
        if panel["axis_on"]:
            missing = [axis for axis in ("xlabel", "ylabel") if not panel[axis].strip()]
            if missing:
                found.append(f"{name}: no {' and no '.join(missing)}")
            for axis in ("x", "y"):
                if panel[f"{axis}scale"] == "log" and panel[f"{axis}ticks"] < LOG_TICKS:
                    found.append(f"{name}: log {axis} axis with {panel[f'{axis}ticks']} labelled ticks")
    width = figure["width"]
    if width > NOTEBOOK_WIDTH_PX:
        found.append(f"{width} px wide, wider than the notebook ({NOTEBOOK_WIDTH_PX} px)")
    if figure["smallest_font_pt"] is not None:
        shown_px = figure["smallest_font_pt"] * figure["dpi"] / 72 * min(1.0, NOTEBOOK_WIDTH_PX / max(width, 1))
        if shown_px < SMALLEST_TEXT_PX - 1e-9:
            found.append(f"smallest text {shown_px:.1f} px tall as shown ({figure['smallest_font_pt']} pt)")
    return found


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_every_figure_is_rendered_and_readable(lesson):
    figures = solution_run(lesson.number).figures
    described = [f"figure {i + 1} ({(f.get('suptitle') or (f.get('panels') or [{}])[0].get('title', ''))[:50]!r}): "
                 + "; ".join(found) for i, f in enumerate(figures) if (found := problems(f))]
    assert not described, f"{lesson.notebook}:\n" + "\n".join(described)
    assert len(figures) == FIGURES[lesson.number], (
        f"{lesson.notebook} rendered {len(figures)} figures, expected {FIGURES[lesson.number]}")


def test_the_rules_catch_an_unreadable_figure():
    shrunk = {"suptitle": "", "panels": [{"title": "", "xlabel": "n", "ylabel": "", "axis_on": True,
                                           "colorbar": False, "xscale": "log", "yscale": "linear",
                                           "xticks": 1, "yticks": 4}],
              "width": 1711, "height": 400, "dpi": 100.0, "smallest_font_pt": 8.0}
    found = " | ".join(problems(shrunk))
    for expected in ("no title", "no ylabel", "log x axis with 1 labelled ticks", "1711 px wide",
                     "smallest text 6.3 px"):
        assert expected in found, found
