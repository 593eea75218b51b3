"""A graded course directory made from a known table, for the tests of the class report and the LMS
export: grading 24 real submissions would take many minutes, so the artefacts ``python -m
autograder grade`` leaves are written here as the grader writes them, from the table:

- the gradebook through nbgrader's own ``Gradebook`` API (the assignments' graded cells are the real
  ones, read from the solution notebooks; one submission per learner and lesson, its scores set
  cell by cell; written answers hand-graded or left for hand grading);
- ``grading_report.csv`` through ``autograder.grade.Outcome`` and ``write_report``;
- ``logs/<lesson>/<student>.verdicts.json`` through ``autograder.grade.verdict_text``;
- deadlines in ``schedule.toml``, recorded as nbgrader's duedate by ``autograder.late``, and the late
  penalties given by ``autograder.late.assign_penalties``, as the grader does.

The table (``PLANS``) says, per learner and lesson, which mistake they made (the cells it fails and
the trusted failure message), what else the grader noted, whether their written answer was graded,
how long grading took and how late they were. The tests count what the report should say from the
same table.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.utils import parse_utc

from attnlab.lessons import lesson as find_lesson
from autograder import late, paths
from autograder.grade import Outcome, verdict_text, write_report
from autograder.trusted import CellResult

LESSONS = [find_lesson("02"), find_lesson("03")]
DEADLINE = datetime(2026, 3, 6, 23, 59, tzinfo=timezone.utc)
CASES = 6  # trusted cases per cell, as a verdict says


@dataclass(frozen=True)
class Mistake:
    cells: tuple[str, ...]  # grade ids it fails
    failure: str  # the trusted check's failure message on each


MISTAKES = {
    "02": {
        "no scale": Mistake(("sdpa_visible", "sdpa_hidden"),
                            "scaled_dot_product_attention (d_k=64): output differs from the reference by up to 3.1"),
        "unstable softmax": Mistake(("softmax_hidden",), "softmax (extreme scores): output has NaN where the reference "
                                    "has none"),
        "shortcut": Mistake(("softmax_visible", "softmax_hidden"),
                            "softmax (batched): calls torch.softmax, which this exercise asks you to write yourself "
                            "(the check compares with it, so using it proves nothing)"),
    },
    "03": {
        "top-left causal": Mistake(("causal_mask_visible", "causal_mask_hidden"),
                                   "causal_mask (n_q=3, n_k=5): boolean output differs"),
        "NaN rows": Mistake(("masked_attention_hidden",), "masked_attention (fully masked row): output has NaN where "
                            "the reference has none"),
    },
}
# Notes the grader writes, in its own words (autograder/grade.py, autograder/tampering.py).
NOTES = {
    "timeout": "cell 'masked_attention_visible' ran past the time limit of 60 s and was interrupted",
    "output cap": "the output of cell 'sdpa_visible' was cut at the output limit",
    "edited cell": "points of cell sdpa_visible changed from 2 to 100; the original points were used",
}


WRITTEN = ("full", "zero", "awaiting", "partial")  # how a written answer was hand-graded
PARTIAL = 1.0  # points of a partly right written answer


@dataclass(frozen=True)
class Plan:
    """What happened to one learner's submission of one lesson."""

    student: str
    lesson: str  # number
    mistake: str | None = None  # a key of MISTAKES[lesson]; "blank": every autograded cell fails
    note: str | None = None  # a key of NOTES
    written: str = "full"  # the written answer: "full", "zero", "partial" (PARTIAL points) or "awaiting"
    seconds: float = 20.0
    late_hours: float = 0.0  # hours after the deadline (0: on time)


def _plans() -> list[Plan]:
    """24 learners in two lessons, with a mix of mistakes, notes, late work and hand grading that
    follows from the learner's number (so that every count differs)."""
    plans = []
    for i in range(24):
        student = f"learner{i:02d}"
        for number in ("02", "03"):
            mistakes = [*MISTAKES[number], "blank"]
            mistake = mistakes[i % 5] if i % 5 < len(mistakes) else None
            if number == "03" and i % 7 == 0:
                mistake = None
            notes = list(NOTES)
            note = notes[i % 4] if i % 4 < len(notes) and i % 3 == 0 else None
            written = WRITTEN[i % 4] if mistake != "blank" else "zero"
            plans.append(Plan(student, number, mistake, note, written, seconds=10.0 + i + (5 if number == "03" else 0),
                              late_hours=(30.0 if i % 6 == 1 else 2.0 if i % 6 == 4 else 0.0)))
    return plans


PLANS = _plans()
STUDENTS = sorted({plan.student for plan in PLANS})
# Learners with a name and email in nbgrader's student record (the rest have only their id).
NAMED = {s: (f"First{s[-2:]}", f"Last{s[-2:]}", f"{s}@example.org") for s in STUDENTS[::2]}
SCHEDULE = '[deadlines]\n"02" = {due}\n03_masking = {due}\n\n[late]\npolicy = "per-day"\npoints = 1.5\n'


def graded_cells(number: str) -> list[tuple[str, str, float]]:
    """(grade id, cell type, points) of a lesson's graded cells, from its solution notebook."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / find_lesson(number).notebook, as_version=4)
    return [(c.metadata["nbgrader"]["grade_id"], c.cell_type, float(c.metadata["nbgrader"]["points"]))
            for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]


def written_score(plan: Plan, points: float) -> float | None:
    """The hand-graded score of the plan's written answer (None: not graded yet)."""
    return {"full": points, "zero": 0.0, "partial": PARTIAL, "awaiting": None}[plan.written]


def failed_cells(plan: Plan) -> dict[str, str]:
    """grade id -> failure message of the cells the plan's submission fails."""
    if plan.mistake is None:
        return {}
    if plan.mistake == "blank":
        return {cell: f'raised "NotImplementedError: Lesson {plan.lesson}: not written yet"'
                for cell, kind, _ in graded_cells(plan.lesson) if kind == "code"}
    mistake = MISTAKES[plan.lesson][plan.mistake]
    return {cell: mistake.failure for cell in mistake.cells}


def define_lessons(book: Gradebook) -> None:
    """The assignments, notebooks and graded cells of LESSONS, as ``nbgrader generate_assignment``
    records them."""
    for lesson in LESSONS:
        notebook = Path(lesson.notebook).stem
        book.update_or_create_assignment(lesson.slug)
        book.update_or_create_notebook(notebook, lesson.slug)
        for cell, kind, points in graded_cells(lesson.number):
            book.update_or_create_grade_cell(cell, notebook, lesson.slug, max_score=points, cell_type=kind)


_TEMPLATE: list[Path] = []


def new_gradebook(path: Path) -> str:
    """A new, empty nbgrader gradebook at ``path``; its URL. nbgrader runs ``alembic`` (seconds) for
    every gradebook it creates, so one is made per test process and copied."""
    if not _TEMPLATE:
        # nbgrader runs alembic by name: find it beside this Python
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        folder = Path(tempfile.mkdtemp(prefix="attnlab-gradebook-"))
        atexit.register(shutil.rmtree, folder, True)
        with Gradebook(f"sqlite:///{folder / 'gradebook.db'}"):
            pass
        _TEMPLATE.append(folder / "gradebook.db")
    shutil.copyfile(_TEMPLATE[0], path)
    return f"sqlite:///{path}"


_MADE: list[Path] = []


def make_course(course: Path) -> Path:
    """The graded course of PLANS in ``course`` (a new folder); returns it. Made once per test
    process and copied, so that the tests of the report, the export and the page share the cost."""
    if not _MADE:
        folder = Path(tempfile.mkdtemp(prefix="attnlab-graded-class-"))
        atexit.register(shutil.rmtree, folder, True)
        _MADE.append(_make(folder / "course"))
    shutil.copytree(_MADE[0], course)
    return course


def _make(course: Path) -> Path:
    """Write the graded course of PLANS into ``course``; returns it."""
    course.mkdir(parents=True, exist_ok=True)
    (course / late.SCHEDULE).write_text(SCHEDULE.format(due=DEADLINE.isoformat()))
    url = new_gradebook(course / "gradebook.db")
    with Gradebook(url) as book:
        define_lessons(book)
    late.record_deadlines(course, [lesson.slug for lesson in LESSONS], url)
    outcomes = []
    with Gradebook(url) as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notices from inside nbgrader's API
        for student in STUDENTS:
            first, last, email = NAMED.get(student, (None, None, None))
            book.update_or_create_student(student, first_name=first, last_name=last, email=email)
        for plan in PLANS:
            lesson = find_lesson(plan.lesson)
            failed = failed_cells(plan)
            outcome = Outcome(lesson.slug, plan.student, seconds=plan.seconds)
            submitted_at = DEADLINE + timedelta(hours=plan.late_hours) - timedelta(hours=1 if not plan.late_hours else 0)
            submission = book.add_submission(lesson.slug, plan.student, timestamp=parse_utc(submitted_at))
            for grade in submission.notebooks[0].grades:
                if grade.cell.cell_type == "markdown":
                    grade.manual_score = written_score(plan, grade.max_score)
                    grade.needs_manual_grade = plan.written == "awaiting"
                else:
                    grade.auto_score = 0.0 if grade.name in failed else grade.max_score
                    grade.needs_manual_grade = False
            book.db.commit()
            # the notes in the order the grader makes them (autograder/grade.py: _grade, then _merge)
            if plan.note:
                outcome.note(NOTES[plan.note])
            for cell, failure in failed.items():
                outcome.note(f"{cell} not passed: {failure}", review=False)
            for text in late.assign_penalties(course, submission):
                outcome.note(text, review=False)
            book.db.commit()
            if plan.written == "awaiting":
                outcome.note("written answers await hand grading in formgrader", review=False)
            cells = graded_cells(plan.lesson)
            outcome.autograded = sum(p for c, k, p in cells if k == "code" and c not in failed)
            outcome.autograded_max = sum(p for _, k, p in cells if k == "code")
            outcome.awaiting_hand_grading = sum(p for _, k, p in cells if k == "markdown" and plan.written == "awaiting")
            outcome.score, outcome.max_score = submission.score, submission.max_score
            outcomes.append(outcome)
            verdicts = {cell: verdict_text(CellResult(cell, cell not in failed, CASES, failed.get(cell, "")))
                        for cell, kind, _ in cells if kind == "code"}
            logs = course / "logs" / lesson.slug
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{plan.student}.verdicts.json").write_text(json.dumps(verdicts))
    write_report(course, outcomes)
    return course
