"""Every notebook runs top to bottom: each lesson as a learner who solved everything runs it
(``solution_run``: the filled learner notebook on filled modules) within the lesson's budget;
learner notebooks with the blank library fail only in their checks, with the stub's message.

Lesson 07's learner notebook is run once, as a learner who wrote lessons 01 to 03 and nothing since
(``half_done_run``, shared with tests/test_learner_path.py): its own module is as blank as in a
fresh clone, so it must fail in the same places, and the run also proves what a half-done learner
meets (part 3 of issue 28) without a second execution."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from attnlab.lessons import LESSONS, Lesson
from autograder import paths
from tests.notebook_runs import execute, half_done_run, solution_run


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_solution_notebook_runs_within_budget(lesson: Lesson):
    seconds = solution_run(lesson.number).seconds
    print(f"{lesson.notebook}: {seconds:.1f} s (budget {lesson.budget_s:g} s)")
    assert seconds <= lesson.budget_s, f"{lesson.notebook} took {seconds:.1f} s, budget {lesson.budget_s:g} s"


@pytest.fixture(scope="module")
def blank_runs(request):
    """The learner notebooks of the selected tests below, each with the blank library, run to the
    end two at a time: no test reads a time off these runs, and one run keeps only one core busy.
    Lesson -> the run's future, whose ``result()`` raises what the run raised."""
    selected = [item.callspec.params["lesson"] for item in request.session.items
                if item.originalname == "test_learner_notebook_fails_only_in_checks_and_says_which_lesson"]
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="blank-notebook") as pool:
        yield {lesson.number: pool.submit(execute, paths.NOTEBOOKS / lesson.notebook, reference=False,
                                          allow_errors=True)
               for lesson in selected if lesson.number != "07"}


@pytest.mark.parametrize("lesson", [l for l in LESSONS if l.modules], ids=lambda lesson: lesson.slug)
def test_learner_notebook_fails_only_in_checks_and_says_which_lesson(lesson: Lesson, blank_runs):
    if lesson.number == "07":  # one execution shared with the half-done learner (see above)
        notebook = half_done_run("07").notebook
    else:
        notebook = blank_runs[lesson.number].result().notebook
    failing = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                failing.append((cell.metadata.get("nbgrader", {}), output))
    assert failing, "with a blank library, the checks must fail"
    for meta, output in failing:
        assert meta.get("grade"), f"a cell that is not a check failed: {output['ename']}: {output['evalue']}"
        assert output["ename"] == "NotImplementedError", output["evalue"]
        assert f"Lesson {lesson.number}:" in output["evalue"]
