"""What a graded course directory holds about a class, read once for the class report and the LMS
export: the gradebook's scores cell by cell (nbgrader's ``Gradebook``, found by
``autograder.gradebook_url``), the trusted verdicts the grader recorded beside its logs
(``logs/<assignment>/<student>.verdicts.json``) and the rows of ``grading_report.csv``.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from attnlab.lessons import LESSONS, Lesson
from attnlab.lessons import lesson as find_lesson
from autograder.grade import REPORT, verdict_text
from autograder.trusted import CellResult


@dataclass
class Cell:
    """One graded cell of one submission."""

    name: str  # nbgrader's grade id
    written: bool  # a written answer (markdown, hand-graded)
    score: float | None  # None: not graded yet (a written answer awaiting hand grading)
    max_score: float

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score >= self.max_score


@dataclass
class Submission:
    lesson: Lesson
    student: str
    cells: list[Cell]
    score: float  # nbgrader's score, before the late penalty
    max_score: float
    penalty: float  # nbgrader's late_submission_penalty
    verdicts: dict[str, str] = field(default_factory=dict)  # grade id -> the recorded verdict
    row: dict = field(default_factory=dict)  # its row of grading_report.csv, if any

    @property
    def final(self) -> float:
        """The score after the late penalty, as ``nbgrader export`` computes it."""
        return max(0.0, self.score - self.penalty)


@dataclass
class Student:
    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""


@dataclass
class ClassData:
    lessons: list[Lesson]  # graded lessons present in the gradebook, in course order
    cells: dict[str, list[tuple[str, bool, float]]]  # slug -> (grade id, written, points) of its graded cells
    students: list[Student]
    submissions: dict[tuple[str, str], Submission]  # (slug, student) -> submission


# A failed verdict as ``autograder.grade.verdict_text`` writes it, turned into a pattern from the
# grader's own function (so the two cannot drift apart): its failure, with the case count free.
_SAMPLE = verdict_text(CellResult("cell", False, 7, "\x00"))
_BEFORE, _AFTER = _SAMPLE.split("\x00")
_FAILED = re.compile(re.escape(_BEFORE) + "(?P<failure>.*)" + re.escape(_AFTER).replace("7", r"\d+") + "$", re.S)


def failure_of(verdict: str) -> str | None:
    """The failure message of a recorded verdict; None for a verdict that passed."""
    found = _FAILED.match(verdict)
    return found.group("failure") if found else None


def _verdicts(course: Path, slug: str, student: str) -> dict[str, str]:
    path = course / "logs" / slug / f"{student}.verdicts.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _awaiting(grade) -> bool:
    """Whether an nbgrader Grade has no score yet: nbgrader flags it for a manual grade that nobody
    has given (a blank written answer it scores 0 itself, unflagged), or it holds no score at all."""
    ungraded = grade.manual_score is None
    return ungraded and (grade.needs_manual_grade or grade.auto_score is None)


def report_rows(course: Path) -> dict[tuple[str, str], dict]:
    """(assignment, student) -> the submission's row of grading_report.csv ({} without the file)."""
    path = course / REPORT
    if not path.is_file():
        return {}
    with path.open(newline="") as handle:
        return {(row["assignment"], row["student"]): row for row in csv.DictReader(handle)}


def choose_lessons(keys: list[str] | None) -> list[Lesson]:
    """The graded lessons named by ``keys`` (numbers or slugs), or all graded lessons."""
    chosen = [find_lesson(key) for key in keys] if keys else [l for l in LESSONS if l.graded]
    return [l for l in LESSONS if l in chosen]


class NoGradebook(LookupError):
    """The course has no gradebook where its URL points."""


def load(course: Path, db_url: str, lessons: list[Lesson]) -> ClassData:
    """Everything the report and the export need about ``lessons`` in ``course``; ``NoGradebook``
    when ``db_url`` names a SQLite file that does not exist (opening it would make an empty one)."""
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).is_file():
        raise NoGradebook(f"no gradebook at {db_url[len('sqlite:///'):]}: build the course and grade it first "
                          "(or say where the gradebook is with --db-url or --db-url-file)")
    rows = report_rows(course)
    found_lessons, cells, submissions = [], {}, {}
    with Gradebook(db_url) as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notices from inside nbgrader's API
        students = [Student(s.id, s.first_name or "", s.last_name or "", s.email or "") for s in book.students]
        for lesson in lessons:
            try:
                assignment = book.find_assignment(lesson.slug)
            except MissingEntry:
                continue  # not built into this gradebook
            found_lessons.append(lesson)
            cells[lesson.slug] = [(g.name, g.cell_type == "markdown", float(g.max_score))
                                  for nb in assignment.notebooks for g in nb.grade_cells]
            for submitted in book.assignment_submissions(lesson.slug):
                student = submitted.student.id
                graded = [Cell(g.name, g.cell.cell_type == "markdown", None if _awaiting(g) else float(g.score),
                               float(g.max_score))
                          for nb in submitted.notebooks for g in nb.grades]
                submissions[(lesson.slug, student)] = Submission(
                    lesson, student, graded, float(submitted.score), float(submitted.max_score),
                    float(submitted.late_submission_penalty or 0.0), _verdicts(course, lesson.slug, student),
                    rows.get((lesson.slug, student), {}))
    return ClassData(found_lessons, cells, sorted(students, key=lambda s: s.id), submissions)
