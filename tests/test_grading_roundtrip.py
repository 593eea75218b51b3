"""An nbgrader round trip on lesson 02 in a temporary course directory.

Submissions: the instructor's solution (full marks, written answer then hand-graded), the untouched
release (0, graded without errors), a half-correct library (partial marks: exactly the cells of the
functions it gets right), and a solution with an infinite loop in a cell (graded for the rest, the
loop recorded). The grader runs with ATTNLAB_REFERENCE=all in its environment, to prove that the
learner's library, not the reference, is what gets graded.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnlab.lessons import LESSONS, lesson
from autograder import paths
from autograder.feedback import hidden_lines, page_text

LESSON = lesson("02")
CELL_TIMEOUT = 60  # generous: honest cells must never time out, even on a loaded machine
pytestmark = pytest.mark.timeout(1800)


def _points(notebook, prefixes=("",), autograded_only=True) -> float:
    total = 0.0
    for cell in nbformat.read(notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and (not autograded_only or not meta.get("solution")):
            if meta["grade_id"].startswith(prefixes):
                total += meta["points"]
    return total


def _submit(course, student, notebook, library_text):
    folder = course / "submitted" / student / LESSON.slug
    folder.mkdir(parents=True)
    shutil.copy(notebook, folder / LESSON.notebook)
    (folder / "attention.py").write_text(library_text)
    return folder


@pytest.fixture(scope="module")
def graded(built_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("roundtrip") / "course"
    shutil.copytree(built_course, course)
    source = course / "source" / LESSON.slug
    release = course / "release" / LESSON.slug
    reference = (paths.REFERENCE_MODULES / "attention.py").read_text()

    _submit(course, "solution", source / LESSON.notebook, reference)
    blank = course / "submitted" / "blank" / LESSON.slug
    shutil.copytree(release, blank)
    broken = reference.replace("scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0  # forgot the square root")
    assert broken != reference
    _submit(course, "half", release / LESSON.notebook, broken)
    looping = _submit(course, "loop", source / LESSON.notebook, reference)
    notebook = nbformat.read(looping / LESSON.notebook, as_version=4)
    notebook.cells.insert(3, nbformat.v4.new_code_cell("while True:\n    pass"))
    nbformat.write(notebook, looping / LESSON.notebook)

    env = {**__import__("os").environ, "ATTNLAB_REFERENCE": "all"}
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--course", str(course), "--lesson", "02",
         "--cell-timeout", str(CELL_TIMEOUT)],
        cwd=paths.ROOT, capture_output=True, text=True, env=env, timeout=900,
    )
    print(done.stdout, done.stderr)
    with (course / "grading_report.csv").open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    return course, done, report


def test_every_submission_is_graded_and_reported(graded):
    course, done, report = graded
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(report) == ["blank", "half", "loop", "solution"]
    assert {row["student"]: row["status"] for row in report.values()} == {
        "blank": "graded", "half": "graded", "loop": "review", "solution": "graded"}
    with (course / "grades.csv").open() as handle:
        exported = [row for row in csv.DictReader(handle) if row["assignment"] == LESSON.slug]
    assert sorted(row["student_id"] for row in exported) == sorted(report)


def test_the_solution_gets_full_marks_once_the_written_answer_is_graded(graded):
    course, _, report = graded
    source = course / "source" / LESSON.slug / LESSON.notebook
    assert float(report["solution"]["autograded"]) == _points(source) > 0
    assert "await hand grading" in report["solution"]["notes"]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(LESSON.slug, "solution")
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if grade.needs_manual_grade:
                    grade.manual_score = grade.max_score
        gradebook.db.commit()
        assert gradebook.find_submission(LESSON.slug, "solution").score == LESSON.points


def test_the_untouched_release_gets_zero_without_errors(graded):
    _, _, report = graded
    assert float(report["blank"]["autograded"]) == 0.0
    assert report["blank"]["status"] == "graded"
    assert 'raised "NotImplementedError: Lesson 02' in report["blank"]["notes"]
    assert "nbgrader" not in report["blank"]["notes"]


def test_a_half_correct_library_gets_exactly_the_marks_it_earns(graded):
    course, _, report = graded
    source = course / "source" / LESSON.slug / LESSON.notebook
    earned = _points(source, prefixes=("softmax", "attention_numpy"))
    assert 0 < earned < _points(source)
    assert float(report["half"]["autograded"]) == earned


def test_the_benchmark_grades_a_batch_the_same_serially_and_in_parallel():
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "benchmark", "--submissions", "3", "--jobs", "2"],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "grades: identical in both runs" in done.stdout
    assert "s per submission" in done.stdout


def test_an_infinite_loop_is_recorded_and_the_rest_is_graded(graded):
    course, _, report = graded
    source = course / "source" / LESSON.slug / LESSON.notebook
    assert float(report["loop"]["autograded"]) == _points(source)
    assert re.search(r"ran past the time limit of \d+ s and was interrupted", report["loop"]["notes"])


def test_feedback_shows_verdicts_but_no_hidden_test(graded):
    course, _, _ = graded
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "feedback", "--course", str(course), "--lesson", "02"],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    secrets = hidden_lines(course / "source" / LESSON.slug / LESSON.notebook)
    assert secrets
    pages = {
        student: page_text((course / "feedback" / student / LESSON.slug / LESSON.notebook).with_suffix(".html").read_text())
        for student in ("solution", "half")
    }
    solution_html, half_html = pages["solution"], pages["half"]
    assert "Trusted check: passed" in solution_html and "TrustedCheckFailed" not in solution_html
    assert "TrustedCheckFailed: scaled_dot_product_attention" in half_html
    for page in (solution_html, half_html):
        assert not [line for line in secrets if line in page]


def test_the_report_separates_autograded_points_from_hand_grading(graded):
    course, done, report = graded
    source = course / "source" / LESSON.slug / LESSON.notebook
    row = report["solution"]
    assert float(row["autograded"]) == float(row["autograded_max"]) == _points(source)
    assert float(row["awaiting_hand_grading"]) == LESSON.points - _points(source) > 0
    assert f"{_points(source):g}/{_points(source):g} autograded, {LESSON.points - _points(source):g} points await hand grading" in done.stdout


@pytest.mark.parametrize("key", [l.number for l in LESSONS if l.graded and l.number != "02"])
def test_every_other_graded_lesson_round_trips(built_course, tmp_path, key):
    """Solution: every autograded point, the notebook and the trusted checks agreeing; the
    untouched release: 0, graded without errors."""
    other = lesson(key)
    course = tmp_path / "course"
    shutil.copytree(built_course, course)
    source, release = course / "source" / other.slug, course / "release" / other.slug
    for student, folder in (("solution", source), ("blank", release)):
        target = course / "submitted" / student / other.slug
        target.mkdir(parents=True)
        shutil.copy(folder / other.notebook, target / other.notebook)
        for module in other.modules:
            shutil.copy(folder / f"{module}.py", target / f"{module}.py")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--course", str(course), "--lesson", key, "--jobs", "2"],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with (course / "grading_report.csv").open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    assert float(report["solution"]["autograded"]) == _points(source / other.notebook) > 0, report["solution"]
    assert report["solution"]["status"] == "graded", report["solution"]
    assert float(report["blank"]["autograded"]) == 0.0 and report["blank"]["status"] == "graded", report["blank"]
