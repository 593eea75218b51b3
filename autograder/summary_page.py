"""The feedback page the grader writes itself, when nbgrader's cannot be released.

Every graded submission gets a feedback page. Where nbgrader has no page to give (the notebook is
missing, is not notebook JSON, or was stopped while it was graded), or its page still showed a
secret after scrubbing (``autograder.scrub``), the learner gets this page instead: one sentence
saying why the notebook is not shown, and for each graded cell its score from the gradebook and
the grader's verdict. Nothing on it comes from the learner's notebook but the verdicts' quotes of
the learner's own error messages, and the page is scanned like any other.
"""

from __future__ import annotations

import html
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry


@dataclass
class Row:
    grade_id: str
    score: float | None  # None: not graded yet (a written answer)
    max_score: float
    verdict: str = ""  # the trusted check's verdict, where there is one


def verdicts(autograded_notebook: Path, recorded: Path) -> dict[str, str]:
    """Grade id -> the trusted verdict: as the grader wrote it into the cell
    (``autograder.grade.verdict_output``), else as it recorded it beside the grading log."""
    try:
        notebook = nbformat.read(autograded_notebook, as_version=4)
    except Exception:  # noqa: BLE001 (missing or unreadable: the verdicts the grader recorded)
        try:
            return {str(k): str(v) for k, v in json.loads(recorded.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}
    found = {}
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        for output in cell.get("outputs", []):
            if output.get("ename") == "TrustedCheckFailed":
                found[grade_id] = f"Trusted check failed: {output.get('evalue', '')}"
            elif output.get("output_type") == "stream" and str(output.get("text", "")).startswith("Trusted check:"):
                found[grade_id] = str(output["text"]).strip()
    return found


def rows(db_url: str, assignment: str, student: str, notebook: str, autograded_notebook: Path,
         recorded: Path) -> list[Row]:
    """The graded cells of one submitted notebook, with scores from the gradebook and the verdicts
    (``recorded``: the grader's record of them, ``logs/<assignment>/<student>.verdicts.json``)."""
    said = verdicts(autograded_notebook, recorded)
    with Gradebook(db_url) as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notices from inside nbgrader's API
        try:
            submitted = book.find_submission_notebook(notebook, assignment, student)
        except MissingEntry:
            return []
        return [Row(grade.name, grade.score if (grade.auto_score is not None or grade.manual_score is not None) else None,
                    grade.max_score, said.get(grade.name, "")) for grade in submitted.grades]


def score_heading(score: float, max_score: float) -> str:
    """The score as nbgrader's own feedback page heads it ("(Score: 11.0 / 14.0)", rounded to two
    places), so that a learner reads their score the same way on either kind of page."""
    return f"(Score: {round(float(score), 2)} / {round(float(max_score), 2)})"


def page(assignment: str, student: str, notebook: str, reason: str, graded: list[Row]) -> str:
    """The HTML of the page: why the notebook is not shown, then one row per graded cell."""
    def cell(text) -> str:
        return f"<td>{html.escape(str(text))}</td>"

    scored = [row.score for row in graded if row.score is not None]
    total = score_heading(sum(scored), sum(row.max_score for row in graded)) if graded else "(Score: not recorded)"
    table = "".join(
        "<tr>" + cell(row.grade_id) + cell("awaits hand grading" if row.score is None else f"{row.score:g}")
        + cell(f"{row.max_score:g}") + cell(row.verdict) + "</tr>" for row in graded)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(notebook)}: feedback</title></head><body>\n"
        f"<h1>{html.escape(assignment)}: {html.escape(notebook)}</h1>\n"
        f"<p>Feedback for {html.escape(student)}. {html.escape(reason)} Your submission was graded: "
        "these are its scores, cell by cell, and the grader's verdict where a trusted check scored the cell.</p>\n"
        f"<p>{html.escape(total)}</p>\n"
        "<table border=\"1\"><tr><th>cell</th><th>score</th><th>out of</th><th>verdict</th></tr>"
        f"{table}</table>\n</body></html>\n"
    )
