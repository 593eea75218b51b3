"""``python -m autograder benchmark --class-scale`` (autograder/class_scale.py) without grading: the
class it generates, and its count of lost and wrongly scored submissions. The measurement itself
grades 200 submissions and is a command, not a test (README, "A class that outgrows one machine")."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder import paths
from autograder.class_scale import MISTAKES, check, make_class, mix
from autograder.grade import REPORT

STUB = "def softmax(x, dim=-1):\n    raise NotImplementedError('Lesson 02')\n"


def _release(course):
    release = course / "release" / "02_attention"
    release.mkdir(parents=True)
    (release / "02_scaled_dot_product_attention.ipynb").write_text("{}")
    (release / "attention.py").write_text(STUB)
    return release


def test_every_mistake_changes_the_reference_once_and_the_class_cycles_through_the_kinds(tmp_path):
    _release(tmp_path)
    variants = mix("02", tmp_path / "release" / "02_attention")
    reference = (paths.REFERENCE_MODULES / "attention.py").read_text()
    assert [kind for kind, _, _ in variants] == ["honest", "blank"] + ["mistake"] * len(MISTAKES["02"])
    assert variants[0][2] == reference and variants[1][2] == STUB
    assert len({library for _, _, library in variants}) == len(variants)  # each mistake changes something
    kinds = make_class(tmp_path, "02", 15)
    assert len(kinds) == 15 and list(kinds.values())[:7] == [kind for kind, _, _ in variants]
    assert (tmp_path / "submitted" / "s002-no-sqrt" / "02_attention" / "attention.py").read_text() == variants[2][2]


@pytest.fixture(autouse=True)
def _alembic_on_path(monkeypatch):
    """nbgrader stamps a new gradebook by running the environment's ``alembic`` command."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _report(course, rows):
    with (course / REPORT).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["student", "status", "autograded", "autograded_max", "notes"])
        writer.writeheader()
        writer.writerows({"student": s, "status": status, "autograded": a, "autograded_max": "11", "notes": ""}
                         for s, status, a in rows)


def test_the_check_finds_nothing_in_a_clean_class_and_counts_lost_and_wrongly_scored_ones(tmp_path):
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as book:  # one gradebook: nbgrader makes it slowly
        book.add_assignment("02_attention")
        for student in ("s000-honest", "s001-blank", "s002-no-sqrt", "s003-honest"):
            book.add_student(student)
            book.add_submission("02_attention", student)
    kinds = {"s000-honest": "honest", "s001-blank": "blank", "s002-no-sqrt": "mistake", "s003-honest": "honest"}
    _report(tmp_path, [("s000-honest", "graded", "11"), ("s001-blank", "graded", "0"),
                       ("s002-no-sqrt", "review", "6"), ("s003-honest", "graded", "11")])
    assert check(tmp_path, "02_attention", kinds) == ([], [])

    _report(tmp_path, [("s000-honest", "graded", "11"), ("s001-blank", "graded", "0"),
                       ("s002-no-sqrt", "review", "11"),  # a mistake with every point: wrong
                       ("s003-honest", "failed", "")])  # no score: lost
    lost, wrong = check(tmp_path, "02_attention", {**kinds, "s004-blank": "blank"})  # s004: no row, no submission
    assert [line.split(":")[0] for line in lost] == ["s003-honest", "s004-blank"], lost
    assert wrong == ["s002-no-sqrt (mistake): 11 of 11 autograded points"]
