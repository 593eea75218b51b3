"""``python -m autograder grade``: autograde collected submissions and export the grades.

Each submission (``submitted/<student>/<assignment>/``) is autograded by its own ``nbgrader
autograde`` process with cell and overall time limits. Its exit code, its log and its autograded
notebook are read, so every submission ends with a recorded outcome: ``graded`` (with notes such as
a cell that timed out) or ``failed`` with the reason. Nothing is a silent 0. The outcomes go to
``grading_report.csv``, nbgrader's own export to ``grades.csv``, logs to ``logs/<assignment>/``.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from attnlab.lessons import lesson as find_lesson
from attnlab.switch import NO_REFERENCE_ENV, REFERENCE_DIR_ENV, REFERENCE_ENV
from autograder.course import nbgrader

REPORT = "grading_report.csv"
GRADES = "grades.csv"


@dataclass
class Outcome:
    """What happened to one submission."""

    assignment: str
    student: str
    status: str  # "graded" or "failed"
    score: float | None = None
    max_score: float | None = None
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        data = asdict(self)
        data["notes"] = "; ".join(self.notes)
        return data


def grading_env(assignment: str) -> dict[str, str]:
    """The environment of a grading run: the lesson's own modules may not be borrowed."""
    env = {k: v for k, v in os.environ.items() if k not in (REFERENCE_ENV, REFERENCE_DIR_ENV)}
    env[NO_REFERENCE_ENV] = ",".join(find_lesson(assignment).modules)
    return env


def submissions(course: Path, assignment: str | None = None) -> list[tuple[str, str]]:
    """(assignment, student) for every collected submission, sorted."""
    found = []
    for folder in sorted((course / "submitted").glob("*/*")):
        if folder.is_dir() and (assignment is None or folder.name == assignment):
            found.append((folder.name, folder.parent.name))
    return sorted(found)


_LOG_PROBLEM = re.compile(r"\[(?:AutogradeApp|Autograde)\s*\|\s*(ERROR|WARNING)\]\s*(.*)")


_CHANGED_CELL = re.compile(r"Attribute 'checksum' for cell (\S+) has changed")
# Cell timeouts are read from the autograded notebook, where the cell is named.
_TIMEOUT_LINES = ("Timeout waiting for execute reply", "Interrupting kernel")


def _notes_from_log(log: str, hidden_cells: set[str]) -> list[str]:
    """Notes from nbgrader's log. ``hidden_cells``: grade ids of cells with hidden tests, whose
    checksum always differs in a submission because the learner never saw the hidden part."""
    notes = []
    for level, message in _LOG_PROBLEM.findall(log):
        message = message.strip()
        changed = _CHANGED_CELL.search(message)
        if "No submitted file" in message:
            notes.append("notebook missing from the submission (scored 0)")
        elif changed and changed.group(1) not in hidden_cells:
            notes.append(f"cell {changed.group(1)} was edited; nbgrader graded the original")
        elif level == "ERROR" and not message.startswith(_TIMEOUT_LINES):
            notes.append(message[:300])
    return list(dict.fromkeys(notes))


def hidden_test_cells(course: Path, assignment: str) -> set[str]:
    """Grade ids of the cells of ``assignment``'s source notebooks that hold hidden tests."""
    ids = set()
    for path in (course / "source" / assignment).glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if "BEGIN HIDDEN TESTS" in cell.source:
                ids.add(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
    return ids


def _notes_from_notebooks(folder: Path) -> list[str]:
    notes = []
    for path in sorted(folder.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for index, cell in enumerate(notebook.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") != "error":
                    continue
                if output.get("ename") in ("CellTimeoutError", "KeyboardInterrupt"):
                    cell_id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"
                    notes.append(f"{path.name}: {cell_id} ran past the time limit and was interrupted")
    return list(dict.fromkeys(notes))


def _score(course: Path, assignment: str, student: str) -> tuple[float, float, bool] | None:
    """(score, max score, whether hand grading is pending) from nbgrader's gradebook."""
    url = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return None
        return submission.score, submission.max_score, submission.needs_manual_grade


def grade_one(course: Path, assignment: str, student: str, cell_timeout: int) -> Outcome:
    """Autograde one submission and read what happened."""
    run = nbgrader(
        course,
        "autograde", assignment, "--student", student, "--force",
        f"--Execute.timeout={cell_timeout}",
        env=grading_env(assignment),
        timeout=max(600, 30 * cell_timeout),
    )
    log_dir = course / "logs" / assignment
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{student}.log").write_text(run.output)
    outcome = Outcome(
        assignment, student, "graded", notes=_notes_from_log(run.output, hidden_test_cells(course, assignment))
    )
    if run.returncode != 0:
        outcome.status = "failed"
        errors = [n for n in outcome.notes] or [run.output.strip().splitlines()[-1] if run.output.strip() else "no output"]
        outcome.notes = [f"nbgrader autograde exited {run.returncode}: {errors[-1]}"]
    autograded = course / "autograded" / student / assignment
    if autograded.is_dir():
        outcome.notes += _notes_from_notebooks(autograded)
    score = _score(course, assignment, student)
    if score is not None:
        outcome.score, outcome.max_score, pending = score
        if pending:
            outcome.notes.append("written answers await hand grading in formgrader")
    elif outcome.status == "graded":
        outcome.status = "failed"
        outcome.notes.append("no submission in the gradebook after autograde")
    return outcome


def write_report(course: Path, outcomes: list[Outcome]) -> Path:
    path = course / REPORT
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(outcomes[0].row()) if outcomes else ["assignment"])
        writer.writeheader()
        for outcome in outcomes:
            writer.writerow(outcome.row())
    return path


def grade(course: Path, assignment: str | None = None, cell_timeout: int = 60) -> int:
    """Grade every collected submission (of ``assignment``, if given); 1 if any failed."""
    todo = submissions(course, assignment)
    if not todo:
        print(f"No submissions under {course / 'submitted'}" + (f" for {assignment}" if assignment else ""))
        return 1
    outcomes = []
    for assignment_id, student in todo:
        outcome = grade_one(course, assignment_id, student, cell_timeout)
        score = "-" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score:g}"
        print(f"{assignment_id:18} {student:20} {outcome.status:7} {score:>9}  {'; '.join(outcome.notes)}")
        outcomes.append(outcome)
    report = write_report(course, outcomes)
    export = nbgrader(course, "export", "--to", str(course / GRADES))
    if export.returncode != 0:
        print(f"nbgrader export failed (exit {export.returncode}):\n{export.output[-2000:]}")
        return 1
    failed = [o for o in outcomes if o.status == "failed"]
    print(f"\n{len(outcomes) - len(failed)} graded, {len(failed)} failed. Report: {report}; grades: {course / GRADES}")
    return 1 if failed else 0
