"""Grading a batch serially and in parallel gives the same grades (``python -m autograder benchmark``).

The nbgrader round trips that lived here (per graded lesson: the full solution, the untouched
release, and for lesson 02 a half-correct library and a cell that loops forever) are now one class
across every graded lesson, tests/test_class.py, which asserts every property they asserted; the
looping cell is the adversarial corpus's ``infinite_loop_cell`` (tests/test_adversarial.py).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from autograder import paths

pytestmark = pytest.mark.timeout(1800)


def test_the_benchmark_grades_a_batch_the_same_serially_and_in_parallel():
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "benchmark", "--submissions", "3", "--jobs", "2"],
        cwd=paths.ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "grades: identical in both runs" in done.stdout
    assert "s per submission" in done.stdout
