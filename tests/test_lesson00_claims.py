"""Lesson 00's statements about this copy of the course, asserted (its tables: test_course_tables.py)."""

from __future__ import annotations

import nbformat

from attnlab.bench import load_recorded
from attnlab.lessons import LESSONS, lesson
from attnlab.progress import check_cells
from autograder import paths
from tests.notebook_runs import solution_run


def _text(notebook: str) -> str:
    return "\n".join(cell.source for cell in nbformat.read(notebook, as_version=4).cells)


def test_no_recorded_gpu_run_is_promised_while_none_ships():
    # Lesson 00 says only that lesson 09 measures on a GPU when one is present. When a recorded
    # run ships (src/attnlab/recorded/flash_gpu.json), say so in lesson 00 and change this test.
    assert load_recorded("flash_gpu") is None
    for folder in (paths.SOLUTION_NOTEBOOKS, paths.NOTEBOOKS):
        text = _text(folder / lesson("00").notebook).lower()
        assert "recorded" not in text, f"{folder.name}: lesson 00 mentions a recorded GPU run"
        assert "lesson 09 also measures its attention kernels on a gpu when this" in " ".join(text.split())


def test_it_runs_in_less_than_half_a_minute():
    assert lesson("00").budget_s <= 30
    assert solution_run("00").seconds < 30


def test_the_time_table_counts_every_lessons_prose_and_exercises():
    """'The next cell counts the words of each lesson's prose and turns them into reading time at
    238 words a minute'; its exercises column is the graded checks, 39 in all."""
    facts = solution_run("00").facts
    assert facts["WORDS_PER_MINUTE"] == 238
    assert set(facts["lesson_words"]) == {entry.number for entry in LESSONS}
    for entry in LESSONS:
        cells = nbformat.read(paths.NOTEBOOKS / entry.notebook, as_version=4).cells
        words = sum(len(c.source.split()) for c in cells if c.cell_type == "markdown")
        assert facts["lesson_words"][entry.number] == words, entry.number
        assert abs(facts["reading_minutes"][entry.number] - words / 238) < 1e-9
    assert facts["exercises"] == {entry.number: sum(c.lesson == entry.number for c in check_cells())
                                  for entry in LESSONS if entry.modules}
    assert sum(facts["exercises"].values()) == len(check_cells()) == 39
    table = solution_run("00").output_text("WORDS_PER_MINUTE = 238")
    assert len(table.strip().splitlines()) == 1 + len(LESSONS), table


def test_the_whole_course_shows_one_line_per_lesson_and_nothing_is_written_yet():
    """'shows one line per lesson': the progress cell's table has a line for each graded lesson;
    'Right now nothing is written': lesson 00 runs as a learner starts the course, in a fresh clone
    (tests/notebook_runs.py), and the cell on borrowing handed attention back with use_own, so
    every line says "not written yet", once for the whole lesson."""
    shown = solution_run("00").output_text("attnlab.progress()").splitlines()
    graded = [entry for entry in LESSONS if entry.modules]
    lines = [line for line in shown if line[:2].isdigit()]
    assert [line.split()[0] for line in lines] == [entry.number for entry in graded], shown
    for line, entry in zip(lines, graded):
        count = sum(c.lesson == entry.number for c in check_cells())
        assert line == f"{entry.number}      {count} exercises: not written yet", line
    assert shown[-1] == "0 of 39 exercises written, 39 not written yet", shown


def test_the_kernel_memory_is_measured():
    facts = solution_run("00").facts
    kernel_mib = facts["kernel_mib"]
    assert kernel_mib is None or 50 < kernel_mib < 8192, kernel_mib
