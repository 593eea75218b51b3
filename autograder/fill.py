"""The learner's files as a learner who solved every exercise has them: stubs filled in.

``autograder.stubs`` (for the library) and nbgrader's ``ClearSolutions`` (for notebooks) turn every
``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of the course's sources into a stub: a
``# YOUR CODE HERE`` line followed by a ``raise NotImplementedError(...)`` statement, or, in a
written answer, ``YOUR ANSWER HERE``. A learner edits the stub in place: deletes those lines and
writes the body there. This module does the same with the bodies of the source's regions, so tests
can walk the course on the learner's own files (``src/attnlab/*.py``, ``notebooks/*.ipynb``) with
nothing borrowed, and prove that such a learner runs exactly the instructors' code:

- ``fill(stub, source)``: a filled copy of a stubbed text (a module, a code cell);
- ``fill_notebook(learner, source)``: a filled copy of a learner notebook, cell by cell;
- ``without_markers`` and ``without_hidden_tests``: the source as the filled learner file must read
  (markers gone; hidden-test regions, which nbgrader removes from what learners get, gone).
"""

from __future__ import annotations

import ast
import copy
import re
import textwrap

import nbformat

from autograder.stubs import solution_regions

CODE_STUB = "# YOUR CODE HERE"
TEXT_STUB = "YOUR ANSWER HERE"
_SOLUTION_MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")
_HIDDEN_MARKER = re.compile(r"^\s*### (BEGIN|END) HIDDEN TESTS\s*$")


def region_bodies(source: str) -> list[list[str]]:
    """The lines strictly inside each solution region of ``source``, in order."""
    lines = source.splitlines()
    return [lines[begin + 1:end] for begin, end in solution_regions(source)]


def _raise_end(lines: list[str], start: int) -> int:
    """Index after the ``raise NotImplementedError(...)`` statement that starts at ``lines[start]``
    (it may span several lines: the library's stubs name the lesson and how to borrow)."""
    for end in range(start + 1, len(lines) + 1):
        try:
            tree = ast.parse(textwrap.dedent("\n".join(lines[start:end])))
        except SyntaxError:
            continue
        statement = tree.body[0] if len(tree.body) == 1 else None
        if isinstance(statement, ast.Raise):
            raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
            if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                return end
        break
    raise ValueError(f"line {start + 1}: {CODE_STUB} is not followed by a raise NotImplementedError(...)")


def stub_blocks(stub: str) -> list[tuple[int, int]]:
    """(first, after last) line indexes of every code stub in ``stub``: the ``# YOUR CODE HERE``
    line and the ``raise NotImplementedError(...)`` statement under it."""
    lines, blocks, index = stub.splitlines(), [], 0
    while index < len(lines):
        if lines[index].strip() == CODE_STUB:
            if index + 1 >= len(lines) or not lines[index + 1].lstrip().startswith("raise NotImplementedError"):
                raise ValueError(f"line {index + 1}: {CODE_STUB} is not followed by a raise NotImplementedError(...)")
            end = _raise_end(lines, index + 1)
            blocks.append((index, end))
            index = end
        else:
            index += 1
    return blocks


def fill(stub: str, source: str) -> str:
    """``stub`` with its n-th code stub replaced by the n-th solution region of ``source``.

    Raises ValueError when the stub and the source do not have as many stubs as regions (the stub
    was not made from this source, or a learner's edit removed a stub)."""
    bodies, blocks = region_bodies(source), stub_blocks(stub)
    if len(bodies) != len(blocks):
        raise ValueError(f"the stub has {len(blocks)} places to fill, its source {len(bodies)} solution regions")
    lines, out, cursor = stub.splitlines(), [], 0
    for (first, end), body in zip(blocks, bodies):
        out.extend(lines[cursor:first])
        out.extend(body)
        cursor = end
    out.extend(lines[cursor:])
    return "\n".join(out) + ("\n" if stub.endswith("\n") else "")


def _drop(text: str, marker: re.Pattern, keep_inside: bool) -> str:
    out, inside = [], False
    for line in text.splitlines():
        match = marker.match(line)
        if match:
            inside = match.group(1) == "BEGIN"
        elif keep_inside or not inside:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def without_markers(text: str) -> str:
    """``text`` with its solution markers removed and what they enclose kept."""
    return _drop(text, _SOLUTION_MARKER, keep_inside=True)


def without_hidden_tests(text: str) -> str:
    """``text`` without its hidden-test regions, markers included (as nbgrader releases it)."""
    return _drop(text, _HIDDEN_MARKER, keep_inside=False)


def fill_notebook(learner: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of the ``learner`` notebook with every stub filled from the ``source`` (instructor)
    notebook: a code stub with its solution region, a written answer (``YOUR ANSWER HERE``) with
    the instructor's answer. Cells pair by position, as ``release`` made one from the other;
    a pair whose kinds or nbgrader ids differ raises ValueError."""
    if len(learner.cells) != len(source.cells):
        raise ValueError(f"the learner notebook has {len(learner.cells)} cells, its source {len(source.cells)}")
    filled = copy.deepcopy(learner)
    for index, (cell, original) in enumerate(zip(filled.cells, source.cells)):
        ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in (cell, original)]
        if cell.cell_type != original.cell_type or ids[0] != ids[1]:
            raise ValueError(f"cell {index}: {cell.cell_type} {ids[0]!r} in the learner notebook, "
                             f"{original.cell_type} {ids[1]!r} in its source")
        if cell.cell_type == "code" and CODE_STUB in cell.source:
            cell.source = fill(cell.source, original.source)
        elif cell.cell_type == "markdown" and cell.source.strip() == TEXT_STUB:
            cell.source = without_markers(original.source)
    return filled
