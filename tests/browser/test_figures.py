"""Each lesson's interactive figure, driven once in JupyterLab: the lesson runs top to bottom (with
the course's references, as a learner who borrowed them), one control of the figure moves, and the
figure is drawn again."""

from __future__ import annotations

import nbformat
import pytest

from attnlab.lessons import LESSONS
from labdriver import NOTEBOOK, ROOT, LabServer

from conftest import ARTIFACTS

FIGURE = ".attnlab-interactive-figure"


def _with_figure() -> list:
    found = []
    for lesson in LESSONS:
        cells = nbformat.read(ROOT / "solutions" / "notebooks" / lesson.notebook, as_version=4).cells
        if any(c.cell_type == "code" and "interactive_figure(" in c.source for c in cells):
            found.append(lesson)
    return found


@pytest.fixture(scope="module")
def borrowing_server(browser, learner_course, tmp_path_factory):
    """JupyterLab as `make lab` starts it, with every reference borrowed (ATTNLAB_REFERENCE=all)."""
    server = LabServer(root=learner_course, cwd=learner_course, home=tmp_path_factory.mktemp("figures-jupyter"),
                       log=ARTIFACTS / "figures-server.log", learner=True, env={"ATTNLAB_REFERENCE": "all"})
    server.start()
    yield server
    server.stop()


def _move_first_control(figure) -> str:
    """Change the figure's first control as a learner would; what was done, in words."""
    select = figure.locator("select")
    readout = figure.locator(".widget-readout")
    checkbox = figure.locator("input[type=checkbox]")
    text = figure.locator("input[type=text]")
    first = figure.locator(".widget-hbox").first.locator(".jupyter-widgets").first
    kind = first.get_attribute("class") or ""
    if "widget-dropdown" in kind and select.count():
        options = select.first.locator("option").all_inner_texts()
        current = select.first.evaluate("s => s.selectedIndex")
        other = next((i for i in range(len(options)) if i != current), current)  # not the shown one
        select.first.select_option(index=other)
        return f"chose {options[other]!r}"
    if "slider" in kind and readout.count():
        handle = first.locator(".noUi-handle, .ui-slider-handle").first
        handle.focus()
        handle.press("ArrowRight")
        handle.press("ArrowRight")
        return "moved the slider two steps"
    if "checkbox" in kind and checkbox.count():
        checkbox.first.click()
        return "ticked the box"
    value = text.first.input_value()
    # something the box accepts: one more digit for a string of digits, one more word for a prompt
    text.first.fill(value + "7" if value.isdigit() else value + " the")
    text.first.press("Enter")
    return "typed into the box"


@pytest.mark.parametrize("lesson", _with_figure(), ids=lambda lesson: lesson.slug)
def test_the_interactive_figure_redraws(borrowing_server, lab_factory, lesson):
    lab = lab_factory(borrowing_server)
    lab.open_notebook(f"notebooks/{lesson.notebook}", workspace=f"figure-{lesson.number}")
    lab.run_all(timeout=max(240_000, 4_000 * lesson.budget_s))
    figure = lab.page.locator(f"{NOTEBOOK} {FIGURE}").first
    figure.wait_for(timeout=60_000)
    picture = figure.locator("img").first
    before = picture.get_attribute("src")
    lab.shot(f"lesson-{lesson.number}-figure-before", figure)
    done = _move_first_control(figure)
    # The HTML widget replaces its <img> on each redraw: look the picture up again inside the box.
    lab.page.wait_for_function("([box, src]) => { const img = box.querySelector('img');"
                               " return img !== null && img.getAttribute('src') !== src; }",
                               arg=[figure.element_handle(), before], timeout=60_000)
    lab.shot(f"lesson-{lesson.number}-figure-after ({done})", figure)
