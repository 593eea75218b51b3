"""``python -m autograder report`` over a generated class of 24 learners (tests/graded_class.py): every
number in the report is the one the known table gives, counted here from the table."""

from __future__ import annotations

import base64
import csv
import math
import statistics
import subprocess
import sys
from collections import Counter

import pytest

from autograder import class_data, paths, report
from autograder.grade import verdict_text
from autograder.trusted import CellResult
from tests.graded_class import CASES, LESSONS, NOTES, PLANS, failed_cells, graded_cells, make_course, written_score


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    made = make_course(tmp_path_factory.mktemp("graded") / "course")
    assert report.report(made) == 0
    return made


def _read(course, name):
    with (course / "report" / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def _plans(lesson):
    return [plan for plan in PLANS if plan.lesson == lesson.number]


def raw_score(plan) -> float:
    failed = failed_cells(plan)
    return sum(points if kind == "code" else written_score(plan, points) or 0.0
               for cell, kind, points in graded_cells(plan.lesson) if kind == "markdown" or cell not in failed)


def expected_final(plan) -> float:
    """The plan's score after the late penalty (1.5 points per started day, at most the score)."""
    penalty = 1.5 * math.ceil(plan.late_hours / 24) if plan.late_hours else 0.0
    return raw_score(plan) - min(penalty, raw_score(plan))


def expected_kinds(plan) -> list[str]:
    kinds = ["forbidden shortcut"] if plan.mistake == "shortcut" else []
    kinds += [kind for kind in report.NOTE_KINDS if kind == plan.note or (kind == "late" and plan.late_hours)]
    return kinds


def test_the_class_is_the_size_the_issue_asks_for():
    assert len({plan.student for plan in PLANS}) >= 20
    assert {plan.mistake for plan in PLANS} >= {"blank", "shortcut", "no scale", None}
    assert {plan.written for plan in PLANS} == {"full", "zero", "partial", "awaiting"}  # partial: not passed


def test_each_exercise_counts_the_learners_who_passed(course):
    rows = {(row["lesson"], row["cell"]): row for row in _read(course, "exercises.csv")}
    assert len(rows) == sum(len(graded_cells(lesson.number)) for lesson in LESSONS)
    for lesson in LESSONS:
        plans = _plans(lesson)
        for cell, kind, points in graded_cells(lesson.number):
            row = rows[(lesson.slug, cell)]
            if kind == "code":
                passed = sum(cell not in failed_cells(plan) for plan in plans)
                awaiting = 0
            else:
                passed = sum(plan.written == "full" for plan in plans)
                awaiting = sum(plan.written == "awaiting" for plan in plans)
            assert row["kind"] == ("autograded" if kind == "code" else "written")
            assert (int(row["submissions"]), int(row["passed"]), int(row["awaiting_hand_grading"])) == (
                len(plans), passed, awaiting), row
            assert float(row["pass_rate"]) == pytest.approx(passed / len(plans), abs=5e-4)
            assert float(row["points"]) == points


def test_the_failure_messages_are_counted_from_the_verdicts(course):
    got = Counter({(row["lesson"], row["cell"], row["failure"]): int(row["count"])
                   for row in _read(course, "failures.csv")})
    expected = Counter()
    for lesson in LESSONS:
        for plan in _plans(lesson):
            for cell, failure in failed_cells(plan).items():
                expected[(lesson.slug, cell, failure)] += 1
    assert got == expected
    rows = _read(course, "failures.csv")  # most common first within each cell
    for (lesson, cell), group in Counter((r["lesson"], r["cell"]) for r in rows).items():
        counts = [int(r["count"]) for r in rows if (r["lesson"], r["cell"]) == (lesson, cell)]
        assert counts == sorted(counts, reverse=True)


def test_each_lesson_has_its_scores_grading_time_and_late_work(course):
    rows = {row["lesson"]: row for row in _read(course, "lessons.csv")}
    assert sorted(rows) == [lesson.slug for lesson in LESSONS]
    for lesson in LESSONS:
        plans, row = _plans(lesson), rows[lesson.slug]
        finals = [expected_final(plan) for plan in plans]
        points = sum(p for _, _, p in graded_cells(lesson.number))
        assert int(row["submissions"]) == len(plans)
        assert float(row["max_score"]) == points
        assert float(row["mean_score"]) == pytest.approx(statistics.fmean(finals), abs=0.005)
        assert float(row["median_score"]) == pytest.approx(statistics.median(finals))
        assert int(row["full_marks"]) == sum(final == points for final in finals)
        assert int(row["late"]) == sum(plan.late_hours > 0 for plan in plans)
        assert int(row["penalised"]) == sum(plan.late_hours > 0 and raw_score(plan) > 0 for plan in plans)
        seconds = [plan.seconds for plan in plans]
        assert float(row["grading_seconds_total"]) == pytest.approx(sum(seconds), abs=0.05)
        assert float(row["grading_seconds_mean"]) == pytest.approx(statistics.fmean(seconds), abs=0.05)
        assert float(row["grading_seconds_max"]) == max(seconds)
        assert int(row["with_notes"]) == sum(bool(expected_kinds(plan)) for plan in plans)


def test_the_submissions_that_needed_a_note_are_listed_with_their_kind(course):
    got = {(row["lesson"], row["student"]): row["kinds"] for row in _read(course, "notes.csv")}
    expected = {(lesson.slug, plan.student): "; ".join(expected_kinds(plan))
                for lesson in LESSONS for plan in _plans(lesson) if expected_kinds(plan)}
    assert got == expected
    assert {kind for kinds in got.values() for kind in kinds.split("; ")} == {*NOTES, "late", "forbidden shortcut"}


def test_a_learners_quoted_error_is_no_note_of_the_grader():
    """A failure quotes the learner's error message: words in it that a grader's note uses do not
    make the submission a timeout (or anything else)."""
    failure = 'softmax (batched): raised "RuntimeError: ran past the time limit; was edited"'
    verdict = verdict_text(CellResult("softmax_hidden", False, CASES, failure))
    assert class_data.failure_of(verdict) == failure, verdict
    assert class_data.failure_of(verdict_text(CellResult("softmax_hidden", True, CASES))) is None
    submission = class_data.Submission(LESSONS[0], "x", [], 0, 14, 0, {"softmax_hidden": verdict},
                                       {"notes": f"softmax_hidden not passed: {failure}"})
    assert report.note_kinds(submission) == []
    submission.row["notes"] += "; " + NOTES["timeout"]
    assert report.note_kinds(submission) == ["timeout"]


def test_the_page_embeds_both_charts_with_titles_and_labelled_axes(course):
    text = (course / "report" / "index.html").read_text()
    for chart in ("pass-rate", "scores"):
        start = text.index(f'id="{chart}"')
        data = text[start:].split('src="data:image/png;base64,', 1)[1].split('"', 1)[0]
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n"), chart
    assert "http" not in text.replace("http-equiv", "")  # self-contained: nothing fetched
    exercises = _read(course, "exercises.csv")
    figure = report.pass_rate_figure(exercises)
    axes = figure.axes[0]
    assert axes.get_title() and axes.get_xlabel() and axes.get_ylabel()
    widths = [bar.get_width() for bar in axes.patches]
    assert widths == pytest.approx([100 * float(row["pass_rate"]) for row in exercises])
    data = class_data.load(course, f"sqlite:///{course / 'gradebook.db'}", LESSONS)
    axes = report.score_figure(data).axes[0]
    assert axes.get_title() and axes.get_xlabel() and axes.get_ylabel()
    assert [label.get_text() for label in axes.get_xticklabels()] == [lesson.slug for lesson in LESSONS]


def test_one_lesson_and_bad_input(course, tmp_path, capsys):
    done = subprocess.run([sys.executable, "-m", "autograder", "report", "--course", str(course), "--lesson", "03"],
                          cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert {row["lesson"] for row in _read(course, "lessons.csv")} == {"03_masking"}
    assert report.report(course, ["42"]) == 2
    assert "Cannot write the report: no lesson '42'" in capsys.readouterr().out
    assert report.report(tmp_path) == 2
    assert "no gradebook at" in capsys.readouterr().out
    assert not (tmp_path / "gradebook.db").exists()  # looking made no empty gradebook
    assert report.report(course) == 0  # the whole report again, for the tests that read it after
