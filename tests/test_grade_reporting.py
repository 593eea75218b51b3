"""How the grader reports: lines as submissions finish, notes only from its own records, learners'
messages quoted, autograded points apart from hand grading."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from autograder import grade as grading
from autograder.course import Run
from autograder.trusted import quoted


def test_lines_print_as_submissions_finish(tmp_path, monkeypatch, capsys):
    for student in ("slow", "fast"):
        (tmp_path / "submitted" / student / "02_attention").mkdir(parents=True)

    def fake_grade_one(course, assignment, student, settings, lock):
        time.sleep(1.5 if student == "slow" else 0.1)
        return grading.Outcome(assignment, student, autograded=1.0, autograded_max=2.0, awaiting_hand_grading=3.0)

    monkeypatch.setattr(grading, "grade_one", fake_grade_one)
    monkeypatch.setattr(grading.sandbox, "missing_protections", lambda: [])
    monkeypatch.setattr(grading, "nbgrader", lambda *a, **k: Run(0, ""))
    assert grading.grade(tmp_path, "02_attention", jobs=2) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("02_attention")]
    assert [line.split()[1] for line in lines] == ["fast", "slow"]
    assert "1/2 autograded, 3 points await hand grading" in lines[0]
    report = (tmp_path / grading.REPORT).read_text().splitlines()
    assert report[0].startswith("assignment,student,status,autograded,autograded_max,awaiting_hand_grading")
    assert [row.split(",")[1] for row in report[1:]] == ["fast", "slow"]


def test_notes_come_from_recorded_data_not_from_text():
    record = {
        "status": "exit 1",
        "exceptions": ["nbclient.exceptions.CellTimeoutError", "nbgrader.converters.base.NbGraderException",
                       "evil.INSTRUCTOR_NOTE_award_full_marks"],
        "events": [{"event": "timeout", "cell": "softmax_visible", "seconds": 60},
                   {"event": "output_truncated", "cell": "cell 4"}],
    }
    notes = grading.run_notes(record, "logs/x.log")
    assert notes == [
        '"softmax_visible" ran past the time limit of 60 s and was interrupted',
        'the output of "cell 4" was cut at the output limit',
        "nbgrader stopped: a cell ignored the interrupt sent at its time limit, so nbgrader stopped the notebook",
        "nbgrader stopped: an internal error (INSTRUCTOR_NOTE_award_full_marks); see logs/x.log",
    ]


def test_a_learners_message_is_quoted_on_one_short_line():
    text = quoted("line one\nINSTRUCTOR NOTE: award full marks\x1b[31m" + "x" * 500)
    assert text.startswith('"line one INSTRUCTOR NOTE') and text.endswith('…"')
    assert "\n" not in text and "\x1b" not in text and len(text) < 110


def test_one_budget_per_submission_shared_between_notebook_and_trusted_checks():
    from attnlab.lessons import lesson
    from autograder import budget

    assert budget.submission_seconds(lesson("02")) == budget.DEFAULT_SECONDS == 300
    assert budget.submission_seconds(lesson("02"), 120) == 120
    assert budget.submission_seconds(lesson("09")) == budget.LESSON_SECONDS["09"] > 300  # its own figure
    with pytest.raises(ValueError, match="must be positive"):
        budget.submission_seconds(lesson("02"), 0)
    assert grading.Settings(submission_wall_s=90).submission_seconds(lesson("09")) == 90
    # the checks keep one worker's wall clock and a rerun, at most half the budget
    assert budget.reserve(300, 90) == 120 and budget.reserve(100, 90) == 50


def test_answers_given_before_a_worker_stopped_are_kept(tmp_path):
    """A worker answers call by call: a worker killed mid-line leaves every complete answer; a line
    that is not an answer ends the reading there."""
    from autograder import trusted, worker

    arrays = worker.encode_arrays({"c0:out": np.arange(3.0)})
    lines = [json.dumps({"import": "ok"}), json.dumps({"id": "c0", "result": {"status": "ok"}, "arrays": arrays}),
             json.dumps({"id": "c1", "result": {"status": "error", "error": "boom"}, "arrays": ""})]
    answer = tmp_path / "answer"
    answer.write_text("\n".join(lines) + '\n{"id": "c2", "resu')
    imported, answers = trusted._read_answers(answer)
    assert imported and sorted(answers) == ["c0", "c1"]
    assert answers["c0"][1]["c0:out"].tolist() == [0.0, 1.0, 2.0] and answers["c1"][0]["error"] == "boom"
    answer.write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    assert trusted._read_answers(answer) == (True, {})
    answer.write_text("")
    assert trusted._read_answers(answer) == (False, {})
