"""The lesson tables of README.md and of lesson 00 follow the manifest (``src/attnlab/lessons.py``).

Both tables list every lesson of the course plan (``/work/shared/COURSE.md``, copied in ``PLAN``
below) and every lesson of the manifest: a lesson in the manifest with its title and notebook, a
planned lesson not in it yet marked *not written yet*. Each table sits between two HTML comments
(``BEGIN`` and ``END``), invisible once rendered. When a lesson lands in the manifest these tests
fail and print the table to paste; or rewrite both tables at once with

    .venv/bin/python -m tests.test_course_tables --write
    .venv/bin/python -m autograder release      # lesson 00's learner notebook follows its source

Lesson 00's "Next:" line must name the first lesson after it in the manifest.
"""

from __future__ import annotations

import difflib
import re
import sys

import nbformat

from attnlab.lessons import LESSONS, Lesson
from autograder import paths

# The course plan: number -> what the lesson is about (COURSE.md, "Lessons"). Titles of lessons in
# the manifest come from the manifest; these are shown for lessons not written yet.
PLAN: dict[str, str] = {
    "00": "Start here",
    "01": "Bahdanau attention and the fixed-length bottleneck",
    "02": "Scaled dot-product attention",
    "03": "Masking: causal and padding masks",
    "04": "Multi-head attention, grouped-query attention and the KV cache",
    "05": "Word order: sinusoidal encodings and RoPE",
    "06": "Feed-forward blocks, residual connections and normalization",
    "07": "Three ways to stack: encoder-only, decoder-only, encoder-decoder",
    "08": "The quadratic cost of attention, counted and measured",
    "09": "FlashAttention: online softmax, tiling and a Triton kernel",
}
NOT_WRITTEN = "*not written yet*"
BEGIN = "<!-- lesson table: generated from src/attnlab/lessons.py by python -m tests.test_course_tables --write -->"
END = "<!-- end of lesson table -->"
README = paths.ROOT / "README.md"
LESSON_00 = paths.SOLUTION_NOTEBOOKS / "00_start_here.ipynb"


def _course() -> list[tuple[str, Lesson | None]]:
    """(number, manifest lesson or None when not written yet), in lesson order."""
    written = {lesson.number: lesson for lesson in LESSONS}
    return [(number, written.get(number)) for number in sorted(set(PLAN) | set(written))]


def lesson00_table() -> str:
    rows = ["| lesson | title | notebook |", "|---|---|---|"]
    for number, lesson in _course():
        if lesson is None:
            rows.append(f"| {number} | {PLAN[number]} | {NOT_WRITTEN} |")
        else:
            here = " (this one)" if lesson.number == "00" else ""
            rows.append(f"| {number} | {lesson.title} | `{lesson.notebook}`{here} |")
    if any(lesson is None for _, lesson in _course()):
        rows += ["", f"Lessons marked {NOT_WRITTEN} are planned but not in this copy of the course yet."]
    return "\n".join(rows)


def readme_table() -> str:
    rows = ["| lesson | title | notebook | you write |", "|---|---|---|---|"]
    for number, lesson in _course():
        if lesson is None:
            rows.append(f"| {number} | {PLAN[number]} | {NOT_WRITTEN} | |")
        else:
            modules = ", ".join(f"`src/attnlab/{module}.py`" for module in lesson.modules) or "nothing"
            rows.append(f"| {number} | {lesson.title} | `notebooks/{lesson.notebook}` | {modules} |")
    return "\n".join(rows)


def _between(text: str, where: str) -> str:
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise AssertionError(f"{where} must hold the lesson table between exactly one\n  {BEGIN}\nand one\n  {END}")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def _replace(text: str, table: str) -> str:
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + "\n" + table + "\n" + END + rest.split(END, 1)[1]


def _lesson00_table_cell() -> nbformat.NotebookNode:
    notebook = nbformat.read(LESSON_00, as_version=4)
    cells = [cell for cell in notebook.cells if cell.cell_type == "markdown" and BEGIN in cell.source]
    assert len(cells) == 1, f"{LESSON_00.name}: exactly one markdown cell must hold the lesson table"
    return cells[0]


def _out_of_step(where: str, current: str, expected: str) -> str:
    diff = "\n".join(difflib.unified_diff(current.splitlines(), expected.splitlines(), "now", "manifest",
                                          lineterm=""))
    return (f"{where}: the lesson table is out of step with src/attnlab/lessons.py. Run\n"
            "  .venv/bin/python -m tests.test_course_tables --write && .venv/bin/python -m autograder release\n"
            f"or put this table between the two markers:\n{expected}\n\nDifference:\n{diff}")


def test_readme_lesson_table_follows_the_manifest():
    current, expected = _between(README.read_text(), "README.md"), readme_table()
    assert current == expected, _out_of_step("README.md", current, expected)


def test_lesson00_lesson_table_follows_the_manifest():
    current = _between(_lesson00_table_cell().source, LESSON_00.name)
    expected = lesson00_table()
    assert current == expected, _out_of_step(f"solutions/notebooks/{LESSON_00.name}", current, expected)


def test_the_tables_list_every_lesson_once_and_mark_the_unwritten_ones():
    table = [row for row in lesson00_table().splitlines()[2:] if row.startswith("|")]
    numbers = [row.split("|")[1].strip() for row in table]
    assert numbers == sorted(set(PLAN) | {lesson.number for lesson in LESSONS})
    for row, (number, lesson) in zip(table, _course()):
        assert (NOT_WRITTEN in row) == (lesson is None), row


def test_lessons_missing_from_the_manifest_are_marked_not_written_yet(monkeypatch):
    import tests.test_course_tables as tables

    monkeypatch.setattr(tables, "LESSONS", tuple(lesson for lesson in LESSONS if lesson.number <= "02"))
    lesson00, readme = tables.lesson00_table(), tables.readme_table()
    for number in ("03", "09"):
        assert f"| {number} | {PLAN[number]} | {NOT_WRITTEN} |" in lesson00
        assert f"| {number} | {PLAN[number]} | {NOT_WRITTEN} | |" in readme
    assert "| 02 | Scaled dot-product attention | `notebooks/02_scaled_dot_product_attention.ipynb` | " \
           "`src/attnlab/attention.py` |" in readme
    assert lesson00.endswith("planned but not in this copy of the course yet.")


def test_lesson00_next_line_names_the_next_lesson_of_the_manifest():
    notebook = nbformat.read(LESSON_00, as_version=4)
    lines = [line for cell in notebook.cells if cell.cell_type == "markdown"
             for line in cell.source.splitlines() if line.startswith("**Next:**")]
    assert len(lines) == 1, lines
    following = next(lesson for lesson in LESSONS if lesson.number > "00")
    assert re.search(rf"\blesson {following.number}\b", lines[0]) and following.notebook in lines[0], (
        f"lesson 00's next-step line should name lesson {following.number} ({following.notebook}): {lines[0]}")


def write() -> None:
    """Rewrite both tables from the manifest (README.md and the source of lesson 00)."""
    README.write_text(_replace(README.read_text(), readme_table()))
    notebook = nbformat.read(LESSON_00, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and BEGIN in cell.source:
            cell.source = _replace(cell.source, lesson00_table())
    nbformat.write(notebook, LESSON_00)
    print(f"rewrote the lesson tables of {README.name} and {LESSON_00.name}; "
          "now run: .venv/bin/python -m autograder release")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_course_tables --write")
    write()
