"""``python -m autograder export``: grades as a learning management system imports them.

One row per learner in nbgrader's gradebook, one column per lesson (its score after the late
penalty, as ``nbgrader export`` computes it: 0 without a submission) and, with ``--per-exercise``,
one column per graded cell as well (its score; empty for a written answer not graded yet). Learners
are identified by their nbgrader student id, with first and last name and email where nbgrader's
student record has them. Layouts:

- ``canvas``: the columns of Canvas's gradebook import ("How do I import grades in the Gradebook?",
  https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807):
  ``Student`` ("Last, First", else the id), ``ID`` (Canvas's own user id, unknown here: empty),
  ``SIS User ID`` (empty), ``SIS Login ID`` (the nbgrader student id, by which Canvas matches the
  learner), ``Section`` (empty), then one column per assignment. Canvas matches learners most surely
  by its own ``ID``: ``--canvas-roster FILE`` takes a gradebook exported from Canvas and copies
  ``Student``, ``ID``, ``SIS User ID`` and ``Section`` from the row whose ``SIS Login ID`` is the
  learner's nbgrader id;
- ``moodle``: Moodle's CSV grade import (https://docs.moodle.org/en/Grade_import), whose "Map from"
  / "Map to" step pairs an identifier column with a user field: ``Username`` (the nbgrader student
  id: map it to username), ``First name``, ``Last name``, ``Email address`` (or map this one to
  useremail), then one column per grade item;
- ``csv``: ``student_id, first_name, last_name, email``, then the same grade columns.
"""

from __future__ import annotations

import csv
from pathlib import Path

from autograder import class_data, gradebook_url
from autograder.class_data import ClassData, Student

FORMATS = ("canvas", "moodle", "csv")
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


class RosterError(ValueError):
    """A Canvas roster that cannot be used (the message names the file and the problem)."""


def canvas_roster(path: Path) -> dict[str, dict[str, str]]:
    """SIS Login ID -> Canvas's identity columns, from a gradebook exported from Canvas (its
    "Points Possible" row and rows without a login are skipped)."""
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as handle:  # Canvas writes a byte-order mark
            reader = csv.DictReader(handle)
            missing = [column for column in CANVAS_IDENTITY if column not in (reader.fieldnames or [])]
            if missing:
                raise RosterError(f"{path}: not a Canvas gradebook export: no column {', '.join(missing)}")
            return {row["SIS Login ID"].strip(): {c: row[c] for c in CANVAS_IDENTITY}
                    for row in reader if (row["SIS Login ID"] or "").strip()}
    except OSError as error:
        raise RosterError(f"{path}: {error.strerror}") from None


def _identity(layout: str, student: Student) -> dict[str, str]:
    if layout == "canvas":
        name = f"{student.last_name}, {student.first_name}" if student.last_name else student.id
        return {"Student": name, "ID": "", "SIS User ID": "", "SIS Login ID": student.id, "Section": ""}
    if layout == "moodle":
        return {"Username": student.id, "First name": student.first_name, "Last name": student.last_name,
                "Email address": student.email}
    return {"student_id": student.id, "first_name": student.first_name, "last_name": student.last_name,
            "email": student.email}


def cell_column(slug: str, cell: str) -> str:
    """The column of one graded cell with --per-exercise."""
    return f"{slug}: {cell}"


def rows(data: ClassData, layout: str, per_exercise: bool = False,
         roster: dict[str, dict[str, str]] | None = None) -> tuple[list[str], list[dict]]:
    """(the header, one row per learner) of the export in ``layout``; ``roster`` (``canvas_roster``)
    fills Canvas's identity columns."""
    if layout not in FORMATS:
        raise ValueError(f"unknown export format {layout!r}; expected one of {', '.join(FORMATS)}")
    grades = []
    for lesson in data.lessons:
        grades.append(lesson.slug)
        if per_exercise:
            grades += [cell_column(lesson.slug, name) for name, _, _ in data.cells[lesson.slug]]
    header = [*_identity(layout, Student("")), *grades]
    table = []
    for student in data.students:
        row = _identity(layout, student)
        if roster and student.id in roster:
            row.update(roster[student.id])
        for lesson in data.lessons:
            submission = data.submissions.get((lesson.slug, student.id))
            row[lesson.slug] = f"{submission.final:g}" if submission else "0"
            if per_exercise:
                scores = {cell.name: cell.score for cell in submission.cells} if submission else {}
                for name, _, _ in data.cells[lesson.slug]:
                    score = scores.get(name, 0.0) if submission else 0.0
                    row[cell_column(lesson.slug, name)] = "" if score is None else f"{score:g}"
        table.append(row)
    return header, table


def export(course: Path, layout: str, out: Path | None = None, per_exercise: bool = False,
           lessons: list[str] | None = None, db_url: str | None = None, db_url_file: Path | None = None,
           roster: Path | None = None) -> int:
    """Write the grades of ``course`` in ``layout`` to ``out`` (default ``course/grades-<layout>.csv``);
    ``roster``: a gradebook exported from Canvas (``--canvas-roster``)."""
    if roster is not None and layout != "canvas":
        print(f"Cannot export: --canvas-roster is for --format canvas, not {layout}")
        return 2
    try:
        known = canvas_roster(roster) if roster is not None else None
        url = gradebook_url.resolve(course, db_url, db_url_file)
        chosen = class_data.choose_lessons(lessons)
        data = class_data.load(course, url, chosen)
    except (gradebook_url.GradebookURLError, KeyError, class_data.NoGradebook, RosterError) as error:
        print(f"Cannot export: {error.args[0] if isinstance(error, KeyError) else error}")
        return 2
    if not data.lessons:
        print(f"Cannot export: the gradebook has none of {', '.join(l.slug for l in chosen)} (run build first)")
        return 1
    header, table = rows(data, layout, per_exercise, known)
    unknown = [s.id for s in data.students if known is not None and s.id not in known]
    if unknown:
        print(f"warning: not in the Canvas roster (no SIS Login ID {', '.join(unknown)}): their rows have no "
              "Canvas ID and Canvas may not match them")
    out = out or course / f"grades-{layout}.csv"
    with Path(out).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(table)
    print(f"{len(table)} learners, {len(header) - len(_identity(layout, Student('')))} grade columns: {out}")
    return 0
