"""Learner stubs of the library's reference modules, cut with nbgrader's own markers.

nbgrader clears solution regions in notebooks but copies ``.py`` files unchanged, so the course
does the same for the library: every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of a
reference module becomes a ``raise NotImplementedError(...)`` that names the lesson, the function,
and how to borrow the reference. Everything outside the regions (signatures, docstrings, input
checks) is kept as it is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from attnlab.lessons import owner

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
_MARKER = re.compile(r"^(\s*)### (BEGIN|END) SOLUTION\s*$")


def header(module: str) -> str:
    return (
        f"# Generated from solutions/attnlab/{module}.py by `python -m autograder release`; "
        "maintainers edit that file, not this one.\n"
        f"# Learners: fill in the bodies marked YOUR CODE HERE (lesson {owner(module).number}).\n"
    )


def _enclosing_functions(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function, innermost last."""
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def solution_regions(text: str) -> list[tuple[int, int]]:
    """(begin, end) line indexes (0-based, markers included) of every solution region.

    Raises ValueError for unbalanced or nested markers, naming the line.
    """
    regions, start = [], None
    for index, line in enumerate(text.splitlines()):
        match = _MARKER.match(line)
        if not match:
            continue
        if match.group(2) == "BEGIN":
            if start is not None:
                raise ValueError(f"line {index + 1}: {BEGIN} inside another solution region")
            start = index
        else:
            if start is None:
                raise ValueError(f"line {index + 1}: {END} without a {BEGIN}")
            regions.append((start, index))
            start = None
    if start is not None:
        raise ValueError(f"line {start + 1}: {BEGIN} is never closed")
    return regions


def make_stub(text: str, module: str) -> str:
    """The learner's version of reference module ``module`` (its source ``text``)."""
    lines = text.splitlines()
    functions = _enclosing_functions(ast.parse(text))
    lesson = owner(module)
    out: list[str] = []
    cursor = 0
    for begin, end in solution_regions(text):
        out.extend(lines[cursor:begin])
        indent = _MARKER.match(lines[begin]).group(1)
        inside = [f for f in functions if f[0] <= begin + 1 <= f[1]]
        if not inside:
            raise ValueError(f"{module}.py line {begin + 1}: a solution region outside any function")
        function = inside[-1][2]
        out.append(f"{indent}# YOUR CODE HERE")
        out.append(f"{indent}raise NotImplementedError(")
        out.append(
            f'{indent}    "Lesson {lesson.number}: {function}() in attnlab/{module}.py is not written yet. "'
        )
        out.append(
            f'{indent}    "Fill in its body, or borrow the course\'s reference with '
            f"attnlab.use_reference('{module}')\""
        )
        out.append(f"{indent})")
        cursor = end + 1
    out.extend(lines[cursor:])
    return header(module) + "\n".join(out) + "\n"


def stub_for(reference: Path) -> str:
    """The stub text for the reference module file ``reference``."""
    return make_stub(reference.read_text(), reference.stem)
