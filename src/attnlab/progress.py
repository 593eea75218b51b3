"""Your progress at a glance: every exercise of the course, written, not yet, failing or borrowed.

``attnlab.progress()`` (this module is callable) runs the visible check of every exercise on your
code, quietly, and shows a table, lesson by lesson: **written** (the check passes), **not written
yet** (the stub still raises ``NotImplementedError``), **failing** (with the check's first line) or
**borrowed** (you chose the course's reference, ``attnlab.use_reference``). Where the course
borrowed a reference on its own (``zoo.load()`` runs the course model on the reference of modules
you have not written yet), your own code is checked all the same, and the row says so: "not
written yet (the course model ran on the reference)". ``progress("03")``
shows one lesson. It reads which check belongs to which exercise from the lessons' notebooks (the
graded check cells, ``checks.check_x(module.x)``), runs each check cell's code as the notebook
would, and changes no file. In JupyterLab the table is HTML; elsewhere it prints as text. The
whole course shows one line per lesson; one lesson shows one row per exercise.
"""

from __future__ import annotations

import ast
import contextlib
import html
import importlib
import io
import sys
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Progress", "Row", "check_cells", "lesson_summary", "progress"]

WRITTEN, NOT_YET, FAILING, BORROWED, UNCHECKED = "written", "not written yet", "failing", "borrowed", "check in the notebook"


@dataclass(frozen=True)
class Row:
    lesson: str
    exercise: str
    status: str
    detail: str = ""
    seconds: float = 0.0
    note: str = ""  # shown in brackets after the status, e.g. "the course model ran on the reference"
    message: str = ""  # a failing check's first line up to MESSAGE_LIMIT (``detail`` fits a table)

    @property
    def shown_status(self) -> str:
        return f"{self.status} ({self.note})" if self.note else self.status


_COLOURS = {WRITTEN: "#1a7f37", NOT_YET: "#666", FAILING: "#b00", BORROWED: "#9a6700", UNCHECKED: "#666"}


def lesson_summary(rows: list[Row]) -> str:
    """One line for one lesson's rows: "4 exercises: not written yet" when they all agree, else
    how many are written and, by status, which exercises are not (a failing one with its check's
    first line)."""
    count = f"{len(rows)} exercise{'s' if len(rows) != 1 else ''}"
    shown = {(row.shown_status, row.detail) for row in rows}
    if len(shown) == 1:  # all alike, e.g. all borrowed from one module: say it once
        status, detail = shown.pop()
        return f"{count}: {status}" + (f"; {detail}" if detail else "")
    parts = [f"{sum(row.status == WRITTEN for row in rows)} of {count} written"]
    for status in (FAILING, NOT_YET, BORROWED, UNCHECKED):
        named = [row.exercise + (f" ({row.detail})" if row.detail and status == FAILING else "")
                 for row in rows if row.status == status]
        if named:
            parts.append(f"{status}: {', '.join(named)}")
    return "; ".join(parts)


@dataclass
class Progress:
    """The table: one row per exercise.

    Shown (``str``, or HTML in JupyterLab) row by row when it holds one lesson, and as one line
    per lesson when it holds several (``lesson_summary``): the whole course is 39 exercises, and
    a learner starting out wants to see where each lesson stands, not 39 identical rows.
    """

    rows: list[Row] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for row in self.rows:
            found[row.status] = found.get(row.status, 0) + 1
        return found

    def summary(self) -> str:
        counts = self.counts()
        return (f"{counts.get(WRITTEN, 0)} of {len(self.rows)} exercises written"
                + "".join(f", {n} {status}" for status, n in counts.items() if status != WRITTEN))

    def by_lesson(self) -> dict[str, list[Row]]:
        """The rows grouped by lesson, in course order."""
        grouped: dict[str, list[Row]] = {}
        for row in self.rows:
            grouped.setdefault(row.lesson, []).append(row)
        return grouped

    @property
    def grouped(self) -> bool:
        return len(self.by_lesson()) > 1

    def __str__(self) -> str:
        if self.grouped:
            lines = [f"{'lesson':6}  status"]
            lines += [f"{lesson:6}  {lesson_summary(rows)}" for lesson, rows in self.by_lesson().items()]
            lines += ["", 'One lesson\'s exercises, row by row: attnlab.progress("02").']
        else:
            width = max((len(r.exercise) for r in self.rows), default=8)
            lines = [f"{'lesson':6}  {'exercise':{width}}  status"]
            for row in self.rows:
                detail = f": {row.detail}" if row.detail else ""
                lines.append(f"{row.lesson:6}  {row.exercise:{width}}  {row.shown_status}{detail}")
        return "\n".join(lines + ["", self.summary()])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if self.grouped:
            from attnlab.lessons import lesson as find_lesson

            cells = []
            for lesson, rows in self.by_lesson().items():
                statuses = {row.status for row in rows}
                colour = _COLOURS.get(statuses.pop(), "#000") if len(statuses) == 1 else "#000"
                cells.append(f"<tr><td>{lesson}</td><td>{html.escape(find_lesson(lesson).title)}</td>"
                             f'<td style="color:{colour};text-align:left">{html.escape(lesson_summary(rows))}</td></tr>')
            head = "<tr><th>lesson</th><th>title</th><th>status</th></tr>"
            note = '<p>One lesson\'s exercises, row by row: <code>attnlab.progress("02")</code>.</p>'
        else:
            cells = []
            for row in self.rows:
                detail = f"<br><small>{html.escape(row.detail)}</small>" if row.detail else ""
                cells.append(f"<tr><td>{row.lesson}</td><td><code>{html.escape(row.exercise)}</code></td>"
                             f'<td style="color:{_COLOURS.get(row.status, "#000")};text-align:left">'
                             f"<b>{html.escape(row.shown_status)}</b>{detail}</td></tr>")
            head = "<tr><th>lesson</th><th>exercise</th><th>status</th></tr>"
            note = ""
        return (f"<table><thead>{head}</thead><tbody>" + "".join(cells)
                + f"</tbody></table>{note}<p>{html.escape(self.summary())}</p>")


@dataclass(frozen=True)
class CheckCell:
    lesson: str
    exercise: str  # the function or class checked, e.g. "softmax"
    module: str  # its exercise module, e.g. "attention"
    source: str  # the cell's code, e.g. "checks.check_softmax(attention.softmax)"


def _notebook_folders() -> list[Path]:
    """Where the lessons' notebooks are: the clone's notebooks/, and the working folder (an
    nbgrader assignment holds its one notebook there)."""
    clone = Path(__file__).resolve().parents[2] / "notebooks"
    return [folder for folder in (clone, Path.cwd()) if folder.is_dir()]


def check_cells(lesson_number: str | None = None) -> list[CheckCell]:
    """The graded visible-check cells of the lessons' notebooks, in order."""
    import nbformat

    from attnlab.lessons import LESSONS

    found, seen = [], set()
    for lesson in LESSONS:
        if not lesson.modules or (lesson_number and lesson.number != lesson_number):
            continue
        path = next((f / lesson.notebook for f in _notebook_folders() if (f / lesson.notebook).is_file()), None)
        if path is None:
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or "checks.check_" not in cell.source:
                continue
            target = _checked(cell.source, lesson.modules)
            if target and (lesson.number, target) not in seen:
                seen.add((lesson.number, target))
                found.append(CheckCell(lesson.number, target[1], target[0], cell.source))
    return found


def _checked(source: str, modules: tuple[str, ...]) -> tuple[str, str] | None:
    """(module, name) of the exercise a check cell passes to its check, e.g. ("attention", "softmax")."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("check_"):
            for arg in node.args:
                if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id in modules:
                    return arg.value.id, arg.attr
            return modules[0], node.func.attr[len("check_"):]
    return None


# How much of a failing check's first line the set-up cell quotes (attnlab.start_lesson): its
# diagnosis ("Your mask is aligned to the top-left corner") often comes after the case it names.
MESSAGE_LIMIT = 600


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _message(error: BaseException) -> str:
    """The first line of ``error``, up to ``MESSAGE_LIMIT`` characters, cut between words."""
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    return line if len(line) <= MESSAGE_LIMIT else line[:MESSAGE_LIMIT].rsplit(" ", 1)[0] + " …"


def _run(cell: CheckCell) -> Row:
    from attnlab import switch

    note = ""
    if switch.source_of(cell.module) == "reference":
        purpose = switch.borrowed_for(cell.module)
        if purpose is None:  # the learner borrowed it: their own code is not what runs
            return Row(cell.lesson, cell.exercise, BORROWED, f"attnlab.use_own('{cell.module}') switches back")
        note = f"{purpose} ran on the reference"  # the course borrowed it: check the learner's own
    start = time.perf_counter()
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = switch.load_own(cell.module) if note else importlib.import_module(f"attnlab.{cell.module}")
            checks = importlib.import_module("attnlab.checks")
            checks.LAST_REPORTS.clear()
            exec(compile(cell.source, f"<check of {cell.exercise}>", "exec"), {"checks": checks, cell.module: module})
    except NotImplementedError:
        return Row(cell.lesson, cell.exercise, NOT_YET, seconds=time.perf_counter() - start, note=note)
    except NameError as error:  # the check needs something the notebook builds first
        return Row(cell.lesson, cell.exercise, UNCHECKED, _first_line(error), time.perf_counter() - start, note)
    except Exception as error:  # noqa: BLE001 (a failing check, or code that crashed on import)
        return Row(cell.lesson, cell.exercise, FAILING, _first_line(error), time.perf_counter() - start, note,
                   _message(error))
    waiting = sorted({lesson for report in checks.LAST_REPORTS.values() for _, lesson in report.waiting})
    if waiting:  # passed, but not all of it ran: say what is still to come
        count = sum(len(report.waiting) for report in checks.LAST_REPORTS.values())
        note = "; ".join(filter(None, [note, f"{count} {'case waits' if count == 1 else 'cases wait'} for "
                                             f"lesson {' and '.join(waiting)}"]))
    return Row(cell.lesson, cell.exercise, WRITTEN, seconds=time.perf_counter() - start, note=note)


def progress(lesson: str | None = None) -> Progress:
    """Run every exercise's visible check (of one lesson: "03") and return the table."""
    import os

    import torch

    if not torch.cuda.is_available():  # as lesson 09 does: Triton runs through its interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return Progress([_run(cell) for cell in check_cells(lesson)])


class _Progress(types.ModuleType):
    """This module, callable: ``attnlab.progress()``."""

    def __call__(self, lesson: str | None = None) -> Progress:
        return progress(lesson)


sys.modules[__name__].__class__ = _Progress
