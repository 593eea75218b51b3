"""``python -m autograder export``: the grades of a generated class (tests/graded_class.py) in the
layouts of Canvas's and Moodle's gradebook import and as plain CSV, read back with the csv module
and checked against nbgrader's own ``nbgrader export`` of the same gradebook."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from autograder import lms_export, paths
from autograder.course import nbgrader
from tests.graded_class import LESSONS, NAMED, PLANS, STUDENTS, failed_cells, graded_cells, make_course, written_score

IDENTITY = {
    "canvas": ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
    "moodle": ["Username", "First name", "Last name", "Email address"],
    "csv": ["student_id", "first_name", "last_name", "email"],
}
ID_COLUMN = {"canvas": "SIS Login ID", "moodle": "Username", "csv": "student_id"}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return make_course(tmp_path_factory.mktemp("graded") / "course")


@pytest.fixture(scope="module")
def nbgrader_grades(course):
    """(student, assignment) -> nbgrader export's row."""
    done = nbgrader(course, "export", f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}",
                    "--to", str(course / "grades.csv"))
    assert done.returncode == 0, done.output[-3000:]
    with (course / "grades.csv").open(newline="") as handle:
        return {(row["student_id"], row["assignment"]): row for row in csv.DictReader(handle)}


def _export(course, layout, per_exercise=False):
    out = course / f"{layout}{'-per-exercise' if per_exercise else ''}.csv"
    assert lms_export.export(course, layout, out, per_exercise) == 0
    return _read(out)


def _read(out):
    with out.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


@pytest.mark.parametrize("layout", lms_export.FORMATS)
def test_one_row_per_learner_one_column_per_lesson_equal_to_nbgraders_export(course, nbgrader_grades, layout):
    header, rows = _export(course, layout)
    assert header == IDENTITY[layout] + [lesson.slug for lesson in LESSONS]
    assert sorted(row[ID_COLUMN[layout]] for row in rows) == STUDENTS
    for row in rows:
        student = row[ID_COLUMN[layout]]
        for lesson in LESSONS:
            assert float(row[lesson.slug]) == float(nbgrader_grades[(student, lesson.slug)]["score"]), (student, lesson)
    penalised = [key for key, row in nbgrader_grades.items() if float(row["late_submission_penalty"]) > 0]
    assert penalised  # the totals compared include late penalties


@pytest.mark.parametrize("layout", lms_export.FORMATS)
def test_learners_are_named_where_nbgrader_knows_their_name(course, layout):
    _, rows = _export(course, layout)
    for row in rows:
        student = row[ID_COLUMN[layout]]
        first, last, email = NAMED.get(student, ("", "", ""))
        if layout == "canvas":
            assert row["Student"] == (f"{last}, {first}" if last else student)
            assert row["ID"] == row["SIS User ID"] == row["Section"] == ""
        elif layout == "moodle":
            assert (row["First name"], row["Last name"], row["Email address"]) == (first, last, email)
        else:
            assert (row["first_name"], row["last_name"], row["email"]) == (first, last, email)


def test_per_exercise_columns_hold_each_cells_score(course, nbgrader_grades):
    header, rows = _export(course, "canvas", per_exercise=True)
    expected_header = list(IDENTITY["canvas"])
    for lesson in LESSONS:
        expected_header += [lesson.slug] + [lms_export.cell_column(lesson.slug, c) for c, _, _ in graded_cells(lesson.number)]
    assert header == expected_header
    by_student = {row["SIS Login ID"]: row for row in rows}
    for plan in PLANS:
        lesson = next(l for l in LESSONS if l.number == plan.lesson)
        row = by_student[plan.student]
        cells = {}
        for cell, kind, points in graded_cells(plan.lesson):
            value = row[lms_export.cell_column(lesson.slug, cell)]
            if kind == "markdown":
                score = written_score(plan, points)
                expected = "" if score is None else f"{score:g}"
            else:
                expected = "0" if cell in failed_cells(plan) else f"{points:g}"
            assert value == expected, (plan, cell)
            cells[cell] = float(value or 0)
        # the cells add up to nbgrader's score before the late penalty
        assert sum(cells.values()) == float(nbgrader_grades[(plan.student, lesson.slug)]["raw_score"])


def test_a_learner_without_a_submission_gets_zero_as_in_nbgraders_export(course, nbgrader_grades):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        book.update_or_create_student("latecomer")
    try:
        _, rows = _export(course, "moodle")
        row = next(row for row in rows if row["Username"] == "latecomer")
        assert [row[lesson.slug] for lesson in LESSONS] == ["0", "0"]
    finally:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
            book.remove_student("latecomer")


def test_the_command_line_writes_the_default_file(course):
    done = subprocess.run([sys.executable, "-m", "autograder", "export", "--course", str(course), "--format", "moodle",
                           "--per-exercise"], cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _read(course / "grades-moodle.csv") == _export(course, "moodle", per_exercise=True)


def test_a_canvas_roster_gives_canvas_its_own_ids(course, tmp_path, capsys):
    """A gradebook exported from Canvas (byte-order mark, its "Points Possible" row, an assignment
    column) fills Canvas's identity columns by SIS Login ID; learners it lacks are named."""
    listed = STUDENTS[:-2]
    roster = tmp_path / "canvas-export.csv"
    with roster.open("w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerow([*IDENTITY["canvas"], "Quiz 1 (123)"])
        writer.writerow(["    Points Possible", "", "", "", "", "10"])
        for number, student in enumerate(listed):
            writer.writerow([f"Name {number}", str(9000 + number), f"S{number}", student, "Section A", "7"])
    out = tmp_path / "canvas.csv"
    assert lms_export.export(course, "canvas", out, roster=roster) == 0
    assert f"not in the Canvas roster (no SIS Login ID {', '.join(STUDENTS[-2:])})" in capsys.readouterr().out
    header, rows = _read(out)
    assert header == IDENTITY["canvas"] + [lesson.slug for lesson in LESSONS]
    for row in rows:
        if row["SIS Login ID"] in listed:
            number = listed.index(row["SIS Login ID"])
            assert (row["Student"], row["ID"], row["SIS User ID"], row["Section"]) == (
                f"Name {number}", str(9000 + number), f"S{number}", "Section A")
        else:
            assert row["ID"] == ""
    assert lms_export.export(course, "moodle", out, roster=roster) == 2
    assert "--canvas-roster is for --format canvas" in capsys.readouterr().out
    roster.write_text("Name,Login\nA,b\n")
    assert lms_export.export(course, "canvas", out, roster=roster) == 2
    assert "not a Canvas gradebook export: no column Student, ID, SIS User ID, SIS Login ID, Section" in capsys.readouterr().out


def test_bad_input_is_refused_with_a_reason(course, tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown export format 'blackboard'"):
        lms_export.rows(None, "blackboard")
    assert lms_export.export(tmp_path, "canvas") == 2
    assert "no gradebook at" in capsys.readouterr().out
    done = subprocess.run([sys.executable, "-m", "autograder", "export", "--format", "blackboard"], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice: 'blackboard'" in done.stderr
