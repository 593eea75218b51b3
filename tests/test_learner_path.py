"""The whole course on the learner's own code (issue 28, parts 1 and 3).

Part 1, a learner who solved everything: every lesson's one execution of the session
(``solution_run``, shared with the claims, budget and figure tests) is the learner notebook with
every stub filled in, run on a clone whose exercise modules are filled the same way, with no
reference switch, in a fresh kernel started in the clone's ``notebooks/`` (tests/notebook_runs.py).
On those same runs: no error, every visible check ✓ with nothing waiting, the course model loaded
into the learner's own classes wherever a lesson loads it, no module borrowed, and
``attnlab.progress()`` after the last lesson shows every exercise written.

Part 3, half-done is a normal state: a learner who wrote lessons 01 to 03 and nothing since opens
lesson 07 (the lesson that builds on the most earlier modules) and runs it to the end
(``half_done_run``, the same execution as lesson 07's learner-notebook test in test_notebooks.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from attnlab.lessons import LESSONS, Lesson, exercise_modules, owner
from attnlab.progress import check_cells
from autograder import paths
from autograder.fill import fill_notebook, without_hidden_tests, without_markers
from tests.notebook_runs import HALF_DONE_LESSONS, PROGRESS_CELL, cell_text, half_done_run, solution_run

GRADED = [lesson for lesson in LESSONS if lesson.modules]
# What a kernel prints when something is not the learner's own code (switch, start_lesson, zoo, bench).
BORROWED = ("is the course's reference implementation", "the course's reference stands in",
            "your code cannot run the course model", "with the course's reference of attnlab.cost",
            "Not written yet", "is not written yet")


def _code_cells(run):
    return [cell for cell in run.notebook.cells if cell.cell_type == "code"]


def _texts(run) -> list[tuple[str, str]]:
    """(source, text output) of every code cell."""
    return [(cell.source, cell_text(cell)) for cell in _code_cells(run)]


# ---------------------------------------------------------------- part 1: the solved course


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_the_filled_learner_notebook_is_the_solution_notebook(lesson: Lesson):
    """Filled in, the learner notebook's code cells are the solution notebook's, less solution
    markers and hidden-test regions (whose only content is a comment): what the claims tests read
    is what the instructors' notebook computes. No execution."""
    learner = nbformat.read(paths.NOTEBOOKS / lesson.notebook, as_version=4)
    solution = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, as_version=4)
    filled = fill_notebook(learner, solution)
    pairs = [(a, b) for a, b in zip(filled.cells, solution.cells) if a.cell_type == "code"]
    assert pairs and len(pairs) == sum(c.cell_type == "code" for c in solution.cells)
    for index, (mine, theirs) in enumerate(pairs):
        assert mine.source == without_hidden_tests(without_markers(theirs.source)), (lesson.number, index)
    for cell in solution.cells:  # what the hidden-test regions hold is a comment, nothing that runs
        hidden = re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, flags=re.S)
        assert all(line.lstrip().startswith("#") for region in hidden for line in region.splitlines()), cell.source


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_every_lesson_runs_on_the_learners_own_library_with_nothing_borrowed(lesson: Lesson):
    run = solution_run(lesson.number)  # errors not allowed: any error has failed it already
    library = Path(run.library)
    assert paths.ROOT not in library.parents, f"the kernel imported the course's own tree: {library}"
    assert library.parent.name == "attnlab" and library.parents[1].name == "src", library
    assert run.sources == {module: "yours" for module in exercise_modules()}, run.sources
    if not lesson.modules:
        return  # lesson 00 runs before anything is written (its claims test reads what it says)
    for source, text in _texts(run):
        for words in BORROWED:
            assert words not in text, f"{words!r} in the output of: {source[:120]}\n{text[:600]}"
        assert "Traceback" not in text and "NotImplementedError" not in text, (source[:120], text[:600])


@pytest.mark.parametrize("lesson", GRADED, ids=lambda lesson: lesson.slug)
def test_every_visible_check_passes_with_nothing_waiting(lesson: Lesson):
    run = solution_run(lesson.number)
    checked = [(source, text) for source, text in _texts(run)
               if "checks.check_" in source or "checks.rerun_waiting" in source]  # lesson 05 re-runs lesson 04's
    graded = {cell.source for cell in check_cells(lesson.number)}
    assert graded and graded <= {source for source, _ in checked}, "every graded check cell ran"
    for source, text in checked:
        assert "✓" in text, f"no ✓ from: {source[:120]}\n{text[:600]}"
        assert "wait" not in text and "✘" not in text, f"{source[:120]}\n{text[:600]}"
    setup = run.output_text(f'attnlab.start_lesson("{lesson.number}")')
    assert f"Lesson {lesson.number}: you write " in setup and "(your code)" in setup, setup
    if lesson.builds_on:
        yours = ", ".join(f"attnlab.{m} (lesson {owner(m).number})" for m in lesson.builds_on)
        assert f"It builds on your {yours}: their checks pass." in setup, setup


def test_the_course_model_loads_into_the_learners_own_classes():
    """Wherever a lesson loads the course model (zoo.load(), which prints whose code it runs on)."""
    loading = {}
    for lesson in GRADED:
        for source, text in _texts(solution_run(lesson.number)):
            if "zoo.load()" in source:
                loading[lesson.number] = text
    assert sorted(loading) == ["04", "06", "07"], sorted(loading)
    for number, text in loading.items():
        assert re.search(r"Loaded the course model \([\d,]+ parameters, trained \d+ steps\) "
                         r"into your own code \(lessons 03 to 07\)\.", text), (number, text[:600])


def test_progress_after_the_last_lesson_shows_every_exercise_written():
    shown = solution_run(LESSONS[-1].number).output_text(PROGRESS_CELL).strip().splitlines()
    lines = {line.split()[0]: line for line in shown if line[:2].isdigit() and " exercises:" in line}  # not the total
    assert sorted(lines) == [lesson.number for lesson in GRADED], shown
    for number, line in lines.items():
        count = sum(cell.lesson == number for cell in check_cells())
        assert line == f"{number}      {count} exercises: written", line
    total = len(check_cells())
    assert shown[-1] == f"{total} of {total} exercises written", shown


# ---------------------------------------------------------------- part 3: half done


HALF = "07"
WRITTEN = [m for lesson in LESSONS if lesson.number in HALF_DONE_LESSONS for m in lesson.modules]


def test_the_first_cell_says_which_earlier_exercises_are_missing_and_who_stands_in():
    lesson = next(item for item in LESSONS if item.number == HALF)
    missing = [m for m in lesson.builds_on if m not in WRITTEN]
    assert missing == ["multihead", "positions", "feedforward"] and len(WRITTEN) == 3
    run = half_done_run(HALF)
    setup_cell = next(cell for cell in _code_cells(run) if "start_lesson" in cell.source)
    assert setup_cell is next(cell for cell in _code_cells(run) if cell.get("outputs")), "the first cell that says anything"
    setup = cell_text(setup_cell)
    mine = ", ".join(f"attnlab.{m} (lesson {owner(m).number})" for m in WRITTEN)
    assert f"It builds on your {mine}: their checks pass." in setup, setup
    assert "Not written yet, so the course's reference stands in for them:" in setup, setup
    for module in missing:
        assert re.search(rf"^  attnlab\.{module} \(lesson {owner(module).number}\): \w", setup, re.M), setup
    assert f"attnlab.use_own({', '.join(repr(m) for m in missing)})" in setup, setup


def test_it_runs_to_the_end_and_only_the_lessons_own_exercises_are_missing():
    run = half_done_run(HALF)
    cells = _code_cells(run)
    assert cell_text(cells[-1]).strip(), "the last cell (the lesson's progress table) ran"
    errors = [(cell, output) for cell in cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert errors, "lesson 07's own exercises are not written: its checks say so"
    for cell, output in errors:
        assert output["ename"] == "NotImplementedError", (output["ename"], output["evalue"])
        assert output["evalue"].startswith(f"Lesson {HALF}: "), output["evalue"]
        assert cell.metadata.get("nbgrader", {}).get("grade"), cell.source[:120]
    other = [n for n in (lesson.number for lesson in GRADED) if n != HALF]
    for cell in cells:
        text = cell_text(cell)
        for number in other:
            assert f"Lesson {number}: " not in text, f"lesson {number}'s stub surfaced in: {cell.source[:120]}"
    assert {m: run.sources[m] for m in WRITTEN} == {m: "yours" for m in WRITTEN}, run.sources
