"""``python -m autograder build`` reads the course's schedule.toml: it records each lesson's deadline
as nbgrader's duedate in the gradebook, and refuses a schedule it cannot use before building
anything. (Slow: nbgrader generate_assignment; listed in tests/conftest.py's SLOW_FILES.)"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

from nbgrader.api import Gradebook

from attnlab.lessons import lesson as find_lesson
from autograder import late, paths
from autograder.build import build


def _build(course):
    return subprocess.run([sys.executable, "-m", "autograder", "build", "--course", str(course), "--lesson", "02"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=600)


def test_build_records_the_deadline_as_nbgraders_duedate(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / late.SCHEDULE).write_text('[deadlines]\n"02" = 2026-03-06T23:59:00+01:00\n\n'
                                        '[late]\npolicy = "fixed"\npoints = 2\n')
    done = _build(course)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "02_attention: due 2026-03-06T23:59:00+01:00" in done.stdout
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        # nbgrader keeps duedates in UTC without a zone: 23:59 at +01:00 is 22:59 UTC
        assert book.find_assignment("02_attention").duedate == datetime(2026, 3, 6, 22, 59)


def test_build_refuses_a_schedule_it_cannot_use_before_building(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    (course / late.SCHEDULE).write_text('[deadlines]\n"02" = 2026-03-06T23:59:00\n')
    assert build(course, [find_lesson("02")]) == 1
    said = capsys.readouterr().out
    assert "Cannot build: " in said and "has no UTC offset" in said, said
    assert not (course / "source").exists()
