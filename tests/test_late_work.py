"""Late work (``autograder.late``): deadlines from the course's schedule.toml, recorded as nbgrader's
duedate, and the late penalty of each policy, given where the grader writes a submission's scores
(``autograder.grade._merge``) from the submission's ``timestamp.txt``, so that it reaches the
gradebook, nbgrader's own export and the grading report's notes."""

from __future__ import annotations

import csv
import shutil
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from attnlab.lessons import lesson as find_lesson
from autograder import grade, late
from autograder.course import nbgrader
from autograder.trusted import CellResult, TrustedResult
from tests.graded_class import DEADLINE, define_lessons, graded_cells, new_gradebook

LESSON = find_lesson("02")
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, which writes timestamp.txt
FAILED = {"sdpa_hidden"}  # the submission fails one cell (3 points): its score is 11 - 3 = 8 of 14
SCORE = sum(p for c, k, p in graded_cells("02") if k == "code" and c not in FAILED)
LATENESS = {"early": -timedelta(minutes=5), "1 h": timedelta(hours=1), "25 h": timedelta(hours=25),
            "3 days": timedelta(days=2, hours=23)}
# policy, points -> the penalty of each lateness (the policy's definition, applied by hand)
POLICIES = {
    ("none", 0): {"early": 0, "1 h": 0, "25 h": 0, "3 days": 0},
    ("fixed", 2): {"early": 0, "1 h": 2, "25 h": 2, "3 days": 2},
    ("per-day", 1.5): {"early": 0, "1 h": 1.5, "25 h": 3, "3 days": 4.5},
    ("per-day", 4): {"early": 0, "1 h": 4, "25 h": 8, "3 days": SCORE},  # 12 points, kept to the score
}


def _schedule(policy: str, points: float) -> str:
    return f'[deadlines]\n"02" = {DEADLINE.isoformat()}\n\n[late]\npolicy = "{policy}"\npoints = {points}\n'


def _course(folder: Path, schedule: str) -> tuple[Path, str]:
    folder.mkdir(parents=True)
    (folder / late.SCHEDULE).write_text(schedule)
    url = new_gradebook(folder / "gradebook.db")
    with Gradebook(url) as book:
        define_lessons(book)
    late.record_deadlines(folder, [LESSON.slug], url)
    return folder, url


def _submit_and_merge(course: Path, url: str, student: str, submitted_at) -> grade.Outcome:
    """A submission with a timestamp.txt, taken as ``nbgrader autograde`` takes it into the grader's
    scratch gradebook (the student's row, ``CourseDirectory.get_existing_timestamp``, then the
    submission's row: nbgrader.converters.autograde), then
    written into the real gradebook by the grader's ``_merge``."""
    submitted = course / "submitted" / student / LESSON.slug
    submitted.mkdir(parents=True)
    (submitted / "timestamp.txt").write_text(submitted_at.strftime(TIMESTAMP_FORMAT))
    scratch = course / ".grading" / student
    scratch.mkdir(parents=True)
    grade._copy_gradebook(url, scratch / "gradebook.db")
    timestamp = CourseDirectory(config=Config()).get_existing_timestamp(str(submitted))
    with Gradebook(f"sqlite:///{scratch / 'gradebook.db'}") as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notices from inside nbgrader's API
        book.update_or_create_student(student)
        book.update_or_create_submission(LESSON.slug, student, timestamp=timestamp)
    verdicts = TrustedResult({cell: CellResult(cell, cell not in FAILED, 4, "wrong" if cell in FAILED else "")
                              for cell, kind, _ in graded_cells("02") if kind == "code"})
    outcome = grade.Outcome(LESSON.slug, student)
    grade._merge(course, scratch, LESSON, student, verdicts, outcome, set(), url)
    shutil.rmtree(scratch)
    return outcome


def _student(when: str) -> str:
    return f"learner-{when.replace(' ', '')}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """policy -> (course, gradebook URL, outcome of each lateness): one course per policy."""
    found = {}
    for policy, points in POLICIES:
        course, url = _course(tmp_path_factory.mktemp("late") / "course", _schedule(policy, points))
        found[(policy, points)] = course, url, {when: _submit_and_merge(course, url, _student(when), DEADLINE + delta)
                                                for when, delta in LATENESS.items()}
    return found


def test_each_policy_gives_its_exact_penalty_in_the_gradebook(graded):
    for policy, (course, url, outcomes) in graded.items():
        with Gradebook(url) as book:
            for when in LATENESS:
                submission = book.find_submission(LESSON.slug, _student(when))
                assert submission.score == SCORE
                assert submission.late_submission_penalty == pytest.approx(POLICIES[policy][when]), (policy, when)
                assert (submission.total_seconds_late > 0) == (when != "early")


def test_the_report_notes_say_how_late_and_what_it_cost(graded):
    for policy, (course, url, outcomes) in graded.items():
        assert not any(note.startswith("late") for note in outcomes["early"].notes)
        for when, words in (("1 h", "1 h"), ("25 h", "1 day 1 h"), ("3 days", "2 days 23 h")):
            notes = [note for note in outcomes[when].notes if note.startswith("late:")]
            assert len(notes) == 1, outcomes[when].notes
            assert notes[0].startswith(f"late: submitted {words} after the deadline (2026-03-06 23:59 UTC); "
                                       f"penalty {POLICIES[policy][when]:g} points ("), notes[0]
            assert outcomes[when].status == "graded"  # lateness alone is no reason to review
    capped = graded[("per-day", 4)][2]["3 days"].notes
    assert any(note.endswith(f"(4 points off per day or part of a day late, kept to the score: the policy gives 12)")
               for note in capped), capped


def test_nbgraders_own_export_takes_the_penalty_off(graded):
    policy = ("per-day", 4)  # one nbgrader export (seconds): the policy whose penalty is also capped
    course, url, _ = graded[policy]
    done = nbgrader(course, "export", f"--CourseDirectory.db_url={url}", "--to", str(course / "grades.csv"))
    assert done.returncode == 0, done.output[-2000:]
    with (course / "grades.csv").open(newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    for when in LATENESS:
        row = rows[_student(when)]
        assert float(row["late_submission_penalty"]) == pytest.approx(POLICIES[policy][when])
        assert float(row["score"]) == pytest.approx(SCORE - POLICIES[policy][when])


def test_regrading_on_time_takes_the_penalty_away(tmp_path):
    course, url = _course(tmp_path / "course", _schedule("fixed", 2))
    _submit_and_merge(course, url, "learner", DEADLINE + timedelta(hours=2))
    shutil.rmtree(course / "submitted")
    with Gradebook(url) as book:  # an extension of a day, granted in nbgrader
        book.grant_extension(LESSON.slug, "learner", days=1)
    outcome = _submit_and_merge(course, url, "learner", DEADLINE + timedelta(hours=2))
    with Gradebook(url) as book:
        assert book.find_submission(LESSON.slug, "learner").late_submission_penalty == 0
    assert not any(note.startswith("late") for note in outcome.notes)


def test_the_plugin_is_nbgraders_late_submission_plugin():
    from nbgrader.plugins import LateSubmissionPlugin

    config = Config()
    config.CoursePenalty.policy, config.CoursePenalty.points = "per-day", 2.0
    plugin = late.CoursePenalty(config=config)
    assert isinstance(plugin, LateSubmissionPlugin)
    assert plugin.late_submission_penalty("x", 10.0, 0) is None
    assert plugin.late_submission_penalty("x", 10.0, 1) == 2.0
    assert plugin.late_submission_penalty("x", 10.0, 24 * 3600) == 2.0
    assert plugin.late_submission_penalty("x", 10.0, 24 * 3600 + 1) == 4.0


@pytest.mark.parametrize("schedule, problem", [
    ('[late]\npolicy = "half"\npoints = 1\n', "policy is 'half'; expected one of none, fixed, per-day"),
    ('[late]\npolicy = "fixed"\n', "policy 'fixed' needs points"),
    ('[late]\npolicy = "fixed"\npoints = -1\n', "points is -1; expected a number of points, 0 or more"),
    ('[late]\npolicy = "fixed"\npoint = 1\n', "unknown key(s) ['point'] in [late]"),
    ('[deadline]\n"02" = 2026-03-06T23:59:00Z\n', "unknown section(s) ['deadline']"),
    ('[deadlines]\n"02" = 2026-03-06T23:59:00\n', "the deadline of 02 (2026-03-06T23:59:00) has no UTC offset"),
    ('[deadlines]\n"02" = "next friday"\n', "the deadline of 02 ('next friday') is not an ISO 8601 date and time"),
    ('[deadlines]\n"42" = 2026-03-06T23:59:00Z\n', "[deadlines] names '42', which is no lesson"),
    ('[deadlines\n', "not valid TOML"),
])
def test_a_schedule_that_cannot_be_used_says_why(tmp_path, schedule, problem):
    (tmp_path / late.SCHEDULE).write_text(schedule)
    with pytest.raises(late.ScheduleError) as error:
        late.deadlines(tmp_path)
        late.plugin(tmp_path)
    assert problem in str(error.value) and str(tmp_path / late.SCHEDULE) in str(error.value)


def test_a_deadline_taken_out_of_the_schedule_is_taken_out_of_the_gradebook(tmp_path):
    assert late.deadlines(tmp_path) == {} and late.plugin(tmp_path).policy == "none"
    course, url = _course(tmp_path / "course", _schedule("fixed", 1))
    with Gradebook(url) as book:
        assert book.find_assignment(LESSON.slug).duedate == DEADLINE.replace(tzinfo=None)
    (course / late.SCHEDULE).unlink()  # no schedule: a duedate set with nbgrader's own tools stays
    assert late.record_deadlines(course, [LESSON.slug], url) == []
    with Gradebook(url) as book:
        assert book.find_assignment(LESSON.slug).duedate == DEADLINE.replace(tzinfo=None)
    (course / late.SCHEDULE).write_text('[late]\npolicy = "fixed"\npoints = 1\n')
    assert late.record_deadlines(course, [LESSON.slug], url) == []
    with Gradebook(url) as book:
        assert book.find_assignment(LESSON.slug).duedate is None


def test_grading_refuses_a_schedule_broken_since_build(tmp_path, capsys):
    """A schedule.toml edited after ``build`` stops ``grade`` before any submission is graded, with
    the reason (not once per submission after its scores were written)."""
    from autograder.grade import grade

    (tmp_path / late.SCHEDULE).write_text('[late]\npolicy = "half"\npoints = 1\n')
    (tmp_path / "submitted" / "someone" / LESSON.slug).mkdir(parents=True)
    assert grade(tmp_path, LESSON.slug) == 2
    said = capsys.readouterr().out
    assert said.startswith("Cannot grade: ") and "policy is 'half'" in said
    assert not (tmp_path / ".grading").exists() and not (tmp_path / "grading_report.csv").exists()
