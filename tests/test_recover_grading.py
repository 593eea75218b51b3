"""Damaged notebooks graded for real (``python -m autograder grade``): one run, several damage kinds of
tests/test_recover.py submitted to lesson 02 together, ``--jobs 2``. The written answer reaches the
autograded notebook formgrader shows, in its graded cell, awaiting hand grading in the gradebook; the
autograded score comes from the library; the report has exactly the recovery's notes; the feedback
page says the notebook was rebuilt."""

from __future__ import annotations

import csv
import subprocess
import sys
import warnings

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnlab.lessons import lesson
from autograder import grade as grading
from autograder import paths, recover, sandbox
from autograder.feedback import feedback
from tests.test_recover import ANSWER, ANSWER_ID, KINDS, NOTEBOOK

LESSON = lesson("02")
SETTINGS = grading.Settings(  # as tests/test_adversarial.py grades: generous for a loaded machine
    cell_timeout=60, kernel_limits=sandbox.Limits(wall_s=150, cpu_s=300),
    worker_limits=sandbox.Limits(wall_s=30, cpu_s=60, memory_bytes=2 * 1024**3), submission_wall_s=300, import_s=30)
AWAITING = "written answers await hand grading in formgrader"
# student -> (damage kind, library): the learner's reference library scores everything; the stub, nothing
# Two, graded at once: a submission takes about a minute on a loaded 2-core machine. The other kinds
# are tested without nbgrader in tests/test_recover.py.
SUBMISSIONS = {
    "no-metadata": ("metadata dropped from all cells", "reference"),
    "cut-short": ("truncated after the answer", "stub"),
}

pytestmark = [
    pytest.mark.skipif(bool(sandbox.missing_protections()), reason="the grading sandbox is incomplete here: "
                       + "; ".join(sandbox.missing_protections())),
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("recover") / "course"
    done = subprocess.run([sys.executable, "-m", "autograder", "build", "--course", str(course), "--lesson", "02"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    release = course / "release" / LESSON.slug
    libraries = {"reference": (paths.REFERENCE_MODULES / "attention.py").read_text(),
                 "stub": (release / "attention.py").read_text()}
    for student, (kind, library) in SUBMISSIONS.items():
        folder = course / "submitted" / student / LESSON.slug
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(KINDS[kind].make())
        (folder / "attention.py").write_text(libraries[library])
    status = grading.grade(course, LESSON.slug, jobs=2, settings=SETTINGS)
    feedback_status = feedback(course, [LESSON.slug])
    with (course / grading.REPORT).open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    return {"course": course, "status": status, "report": report, "feedback_status": feedback_status}


def test_every_submission_is_graded(graded):
    assert graded["status"] == 0 and graded["feedback_status"] == 0
    assert sorted(graded["report"]) == sorted(SUBMISSIONS)


@pytest.mark.parametrize("student", list(SUBMISSIONS))
def test_scores_and_exact_notes(graded, student):
    kind, library = SUBMISSIONS[student]
    row = graded["report"][student]
    recovered = [f"{NOTEBOOK}: {note}" for note in KINDS[kind].recovered]
    assert row["status"] == ("review" if recovered else "graded")
    # the report joins notes with "; " (and notes may hold one): compare the joined text
    if library == "reference":
        assert float(row["autograded"]) == float(row["autograded_max"]) == 11
        assert row["notes"] == "; ".join([*recovered, AWAITING])
    else:  # the stub fails every trusted check, each with its own note between the recovery's and the last
        assert float(row["autograded"]) == 0 and float(row["autograded_max"]) == 11
        assert row["notes"].startswith("; ".join(recovered) + "; ") and row["notes"].endswith("; " + AWAITING)
        trusted = row["notes"][len("; ".join(recovered)) + 2:-len(AWAITING) - 2]
        assert trusted.count(" not passed: ") == 6  # one per graded test cell of lesson 02
    assert float(row["awaiting_hand_grading"]) == 3


@pytest.mark.parametrize("student", list(SUBMISSIONS))
def test_the_written_answer_reaches_formgrader(graded, student):
    """The autograded notebook formgrader shows holds the answer in its graded cell, and the gradebook
    has that cell waiting for a hand grade."""
    course = graded["course"]
    notebook = nbformat.read(course / "autograded" / student / LESSON.slug / NOTEBOOK, as_version=4)
    answers = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWER_ID]
    assert [c.source for c in answers] == [ANSWER]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grade = book.find_grade(ANSWER_ID, NOTEBOOK.removesuffix(".ipynb"), LESSON.slug, student)
        assert grade.needs_manual_grade and grade.manual_score is None


@pytest.mark.parametrize("student", list(SUBMISSIONS))
def test_the_feedback_page_says_the_notebook_was_rebuilt(graded, student):
    kind, _ = SUBMISSIONS[student]
    page = (graded["course"] / "feedback" / student / LESSON.slug / NOTEBOOK.replace(".ipynb", ".html")).read_text()
    assert (recover.NOTICE.strip("*") in page) == bool(KINDS[kind].recovered)
    assert ANSWER in page
