"""How the grader reports: lines as submissions finish, notes only from its own records, learners'
messages quoted, autograded points apart from hand grading."""

from __future__ import annotations

import time

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
