"""``python -m autograder feedback``: feedback that shows neither hidden tests nor their output.

nbgrader's feedback is the autograded notebook rendered to HTML; autograde has put the hidden tests
back into their cells, so a failing hidden test would show its code and traceback. The
``HideHiddenTests`` preprocessor (installed in ``GenerateFeedback.preprocessors`` by the course's
nbgrader config) removes the hidden region from each such cell and replaces the cell's output by a
one-line verdict. After generating, the command scans every feedback file for hidden-test lines
and fails if any is found.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader.preprocessors import ClearHiddenTests

from autograder.course import nbgrader

HIDDEN_PASSED = "Hidden tests: passed."
HIDDEN_FAILED = "Hidden tests: at least one failed. Their code and messages stay hidden; check your function against the lesson's visible checks and the cases its docstring names."


class HideHiddenTests(ClearHiddenTests):
    """Clears hidden-test regions and replaces their cells' outputs with a verdict."""

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type != "code" or self.begin_test_delimeter not in cell.source:
            return cell, resources
        self._remove_hidden_test_region(cell)
        failed = any(output.get("output_type") == "error" for output in cell.get("outputs", []))
        cell.outputs = [new_output("stream", name="stdout", text=HIDDEN_FAILED if failed else HIDDEN_PASSED)]
        return cell, resources


def hidden_lines(notebook: Path, min_length: int = 12) -> set[str]:
    """Distinctive lines inside the hidden-test regions of an instructor notebook."""
    lines: set[str] = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) >= min_length:
                lines.add(line.strip())
    return lines


def page_text(page: str) -> str:
    """The text of an HTML page as a reader sees it: highlighted code splits a line into many
    tags, so tags are dropped and entities decoded before lines are searched for."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def leaked_hidden_lines(feedback_dir: Path, source_notebooks: list[Path]) -> list[str]:
    """'file: line' for each hidden-test line found in any feedback file under ``feedback_dir``."""
    secrets = set().union(*(hidden_lines(nb) for nb in source_notebooks)) if source_notebooks else set()
    leaks = []
    for page in sorted(feedback_dir.rglob("*.html")):
        text = page_text(page.read_text(errors="replace"))
        leaks.extend(f"{page}: {line}" for line in sorted(secrets) if line in text)
    return leaks


def feedback(course: Path, assignments: list[str]) -> int:
    """Generate feedback for ``assignments`` in ``course``; 1 if nbgrader failed or anything leaked."""
    status = 0
    for assignment in assignments:
        run = nbgrader(course, "generate_feedback", assignment, "--force")
        if run.returncode != 0:
            print(f"{assignment}: nbgrader generate_feedback failed (exit {run.returncode}):\n{run.output[-2000:]}")
            status = 1
            continue
        sources = sorted((course / "source" / assignment).glob("*.ipynb"))
        leaks = leaked_hidden_lines(course / "feedback", sources)
        if leaks:
            print(f"{assignment}: hidden tests leaked into feedback, do not return it:")
            print("\n".join(leaks[:20]))
            status = 1
        else:
            print(f"{assignment}: feedback generated under {course / 'feedback'}; no hidden test shows")
    return status
