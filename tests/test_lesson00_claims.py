"""Lesson 00's statements about this copy of the course, asserted (its tables: test_course_tables.py)."""

from __future__ import annotations

from attnlab.bench import load_recorded
from attnlab.lessons import lesson
from tests.notebook_runs import solution_run


def test_no_gpu_run_is_recorded_yet():
    # Lesson 00 says "no GPU run has been recorded yet" (twice): when one is shipped
    # (src/attnlab/recorded/flash_gpu.json), change those sentences and this test.
    assert load_recorded("flash_gpu") is None
    assert solution_run("00").facts["recorded_gpu_run"] is False


def test_it_runs_in_less_than_half_a_minute():
    assert lesson("00").budget_s <= 30
    assert solution_run("00").seconds < 30
