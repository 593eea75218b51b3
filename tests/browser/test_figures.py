"""Each lesson's interactive figures, driven in JupyterLab: the lesson runs top to bottom once
(with the course's references, as a learner who borrowed them), then every slider of every
interactive figure is dragged with the mouse (its track is wide enough to drag, the middle of the
track gives a middle value, the figure is drawn again); a figure without sliders has its first
control moved. Moving the controls writes nothing to JupyterLab's Log Console."""

from __future__ import annotations

import re

import nbformat
import pytest

from attnlab.lessons import LESSONS
from labdriver import NOTEBOOK, ROOT, LabServer

from conftest import ARTIFACTS

FIGURE = ".attnlab-interactive-figure"
MIN_TRACK_PX = 150  # a track narrower than this cannot be dragged to a value of one's choice


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


# What the figure shows: its picture and the caption carried in its alt text, which names the value
# of every control (two settings may draw the same picture: the caption still differs).
_PICTURE = """box => { const img = box.querySelector('img');
    return img && img.getAttribute('alt') + '\\n' + img.getAttribute('src'); }"""


def _picture(figure) -> str | None:
    return figure.evaluate(_PICTURE)


def _wait_redrawn(lab, figure, before: str | None) -> None:
    # The HTML widget replaces its <img> on each redraw: look the picture up again inside the box.
    changed = f"([box, before]) => {{ const now = ({_PICTURE})(box); return now !== null && now !== before; }}"
    lab.page.wait_for_function(changed, arg=[figure.element_handle(), before], timeout=90_000, polling=250)


def _slider_state(slider) -> dict:
    """The slider's range (from its handle's ARIA attributes), shown value and track."""
    handle = slider.locator(".noUi-handle").first
    track = slider.locator(".noUi-target").first
    readout = slider.locator(".widget-readout").first
    return {
        "label": slider.locator(".widget-label").first.inner_text().strip(),
        "low": float(handle.get_attribute("aria-valuemin")),
        "high": float(handle.get_attribute("aria-valuemax")),
        "value": float(re.sub(r"[^0-9eE.+-]", "", readout.inner_text()) or "nan"),
        "handle": handle.bounding_box(),
        "track": track.bounding_box(),
    }


def _drag(lab, slider, fraction: float) -> dict:
    """Drag the slider's handle with the mouse to ``fraction`` of its track; its state after."""
    state = _slider_state(slider)
    handle, track = state["handle"], state["track"]
    page = lab.page
    y = handle["y"] + handle["height"] / 2
    page.mouse.move(handle["x"] + handle["width"] / 2, y)
    page.mouse.down()
    page.mouse.move(track["x"] + fraction * track["width"], y, steps=12)
    page.mouse.up()
    page.wait_for_timeout(300)
    return _slider_state(slider)


def _drag_every_slider(lab, figure, lesson) -> list[str]:
    done = []
    sliders = figure.locator(".widget-slider")
    for index in range(sliders.count()):
        slider = sliders.nth(index)
        slider.scroll_into_view_if_needed()
        state = _slider_state(slider)
        name = state["label"] or f"slider {index + 1}"
        assert state["track"]["width"] >= MIN_TRACK_PX, (
            f"lesson {lesson.number}, {name!r}: its track is {state['track']['width']:.0f} px wide "
            f"(at least {MIN_TRACK_PX} px to drag it)")
        before = _picture(figure)
        low, high = state["low"], state["high"]
        moved = _drag(lab, slider, 0.5)
        whole = low.is_integer() and high.is_integer() and moved["value"].is_integer()
        tolerance = max(0.15 * (high - low), 1.0 if whole else 0.0)
        assert abs(moved["value"] - (low + high) / 2) <= tolerance, (
            f"lesson {lesson.number}, {name!r}: dragged to the middle of [{low:g}, {high:g}], it shows "
            f"{moved['value']:g}")
        if moved["value"] == state["value"]:  # it was at the middle already: a quarter moves it
            moved = _drag(lab, slider, 0.25)
            assert moved["value"] != state["value"], f"lesson {lesson.number}, {name!r}: dragging does not move it"
        _wait_redrawn(lab, figure, before)
        lab.shot(f"lesson-{lesson.number}-dragged-{index + 1}-to-{moved['value']:g}", figure)
        done.append(f"{name} {state['value']:g} -> {moved['value']:g}")
    return done


def _log_console_entries(lab) -> list[str]:
    """Open View > Show Log Console (for the active notebook) and read its entries."""
    lab.menu("View", "Show Log Console")
    console = lab.page.locator(".jp-LogConsolePanel").first
    console.wait_for(timeout=30_000)
    lab.page.wait_for_timeout(500)
    entries = console.locator(".jp-OutputArea-child").all_inner_texts()
    lab.shot("log-console", console)
    return entries


@pytest.mark.parametrize("lesson", _with_figure(), ids=lambda lesson: lesson.slug)
def test_the_interactive_figures_redraw_and_their_sliders_drag(borrowing_server, lab_factory, lesson):
    lab = lab_factory(borrowing_server)
    lab.open_notebook(f"notebooks/{lesson.notebook}", workspace=f"figure-{lesson.number}")
    lab.run_all(timeout=max(240_000, 4_000 * lesson.budget_s))
    figures = lab.page.locator(f"{NOTEBOOK} {FIGURE}")
    figures.first.wait_for(timeout=60_000)
    for number in range(figures.count()):
        figure = figures.nth(number)
        lab.shot(f"lesson-{lesson.number}-figure-{number + 1}-before", figure)
        if figure.locator(".widget-slider").count():
            _drag_every_slider(lab, figure, lesson)
        else:
            before = _picture(figure)
            done = _move_first_control(figure)
            _wait_redrawn(lab, figure, before)
            lab.shot(f"lesson-{lesson.number}-figure-{number + 1}-after ({done})", figure)
    # A redraw writes into the figure's own box, never into the Log Console (issue 35, part 5).
    entries = _log_console_entries(lab)
    assert entries == [], f"lesson {lesson.number}: moving the figure's controls logged {entries}"
