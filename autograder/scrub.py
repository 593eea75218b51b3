"""Take out of a feedback notebook whatever shows a secret, and say so where it was.

A submission's outputs come from code the learner wrote; the sandbox keeps the grader's secrets
away from it, but a page is released to the learner, so the grader does not rely on that alone.
``scrub_notebook`` looks at each cell of the notebook the feedback page is rendered from (after
``HideHiddenTests``): every output (its text, its data of every type, base64 images included, and
its error message), all of a cell's outputs together (a secret printed half in one output, half
in the next), and the cell's source and attachments. What shows a secret (``autograder.leaks``) is
replaced by a line that says it was removed, and a note at the top of the page says how many
parts were. Nothing else changes: the learner still gets the page, with every verdict and score.

``ScrubLeaks`` is the nbgrader preprocessor that runs it in ``GenerateFeedback`` (so formgrader's
own feedback button scrubs too), with the secrets of the assignment being rendered.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from nbformat.v4 import new_markdown_cell, new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder import gradebook_url, leaks

REMOVED = "[grader: removed from your feedback]"
OUTPUT_REMOVED = (f"{REMOVED} This output showed text the grader keeps hidden (its tests, its own cases or "
                  "its settings), so it is not shown here. Your grade does not depend on it.\n")
SOURCE_REMOVED = f"# {REMOVED} This cell's source showed text the grader keeps hidden, so it is not shown here."
PAGE_NOTICE = ("**From the grader:** {count} part(s) of this notebook showed text the grader keeps hidden (its "
               "tests, its own cases or its settings) and were removed from this page; each place says "
               "\"" + REMOVED + "\". Your scores are unchanged.")


def _strings(value) -> list[str]:
    """Every string inside an output or attachment (its text, data of every type, error fields)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() if key not in ("output_type", "metadata", "name") for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def output_text(output) -> str:
    return "\n".join(_strings(output))


def _removed_output():
    return new_output("stream", name="stdout", text=OUTPUT_REMOVED)


def scrub_cell(cell, secrets: dict[str, str]) -> int:
    """Replace what in ``cell`` shows a secret (in place); how many parts were removed."""
    removed = 0
    if cell.get("outputs"):
        outputs = []
        for output in cell.outputs:
            if leaks.leaks(output_text(output), secrets):
                outputs.append(_removed_output())
                removed += 1
            else:
                outputs.append(output)
        # a secret split across outputs shows only in them together
        if leaks.leaks("".join(output_text(o) for o in outputs), secrets):
            outputs, removed = [_removed_output()], removed + 1
        cell.outputs = outputs
    if leaks.leaks(cell.source, secrets):
        cell.source = SOURCE_REMOVED if cell.cell_type == "code" else SOURCE_REMOVED.lstrip("# ")
        removed += 1
    if cell.get("attachments") and leaks.leaks("\n".join(_strings(cell.attachments)), secrets):
        del cell["attachments"]
        removed += 1
    return removed


def scrub_notebook(notebook, secrets: dict[str, str]) -> int:
    """Scrub every cell of ``notebook`` (in place) and, if anything was removed, put a note at the
    top saying so; how many parts were removed."""
    removed = sum(scrub_cell(cell, secrets) for cell in notebook.cells)
    if removed:
        notebook.cells.insert(0, new_markdown_cell(PAGE_NOTICE.format(count=removed)))
    return removed


def removed_parts(page_text: str) -> int:
    """How many parts a rendered page's note says were removed (0 without the note)."""
    found = re.search(r"From the grader:\W*(\d+) part\(s\)", page_text)
    return int(found.group(1)) if found else 0


class ScrubLeaks(NbGraderPreprocessor):
    """``scrub_notebook`` as an nbgrader feedback preprocessor: the secrets are those of the
    assignment being rendered, in the course whose configuration nbgrader loaded. (An nbgrader
    preprocessor, not a plain nbconvert one: nbgrader registers its preprocessors without enabling
    them, and nbconvert's are disabled by default.)"""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        root = Path(self.config.get("CourseDirectory", {}).get("root") or os.getcwd())
        try:
            password = gradebook_url.password(info.get("db_url") or "")
        except Exception:  # noqa: BLE001 (a URL nbgrader could use but SQLAlchemy's parser cannot)
            password = None
        secrets = leaks.secrets_for(root, info["assignment"], password)
        resources["removed_parts"] = scrub_notebook(nb, secrets)
        return nb, resources
