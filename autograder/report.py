"""``python -m autograder report``: the class report of a graded course directory.

Per lesson and per exercise (graded cell): how many learners passed (full points), the most common
failure messages (from the trusted verdicts the grader recorded), the time spent grading (the
``seconds`` column of ``grading_report.csv``) and the submissions that needed a note (the report's
notes: timeouts, forbidden shortcuts, output caps, recovered notebooks, late work...). Written to
``<course>/report/``:

- ``lessons.csv``: one row per lesson: submissions, mean and median score after late penalties (out
  of ``max_score``), full marks, late submissions, grading seconds (total, mean, longest), submissions
  with a note;
- ``exercises.csv``: one row per graded cell: kind (autograded or written), points, submissions,
  passed (full points), pass rate, written answers not graded yet, failures recorded;
- ``failures.csv``: one row per lesson, cell and distinct failure message, with its count;
- ``notes.csv``: one row per submission with a note: its status, the kinds of note (``NOTE_KINDS``)
  and the notes themselves;
- ``index.html``: one self-contained page with the same tables and two charts (pass rate by
  exercise, score distribution by lesson) embedded as base64 PNG.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from autograder import class_data, gradebook_url
from autograder.class_data import ClassData

# Kinds of note, each recognised by words the grader's notes use (autograder/grade.py, trusted.py,
# tampering.py, late.py); a note matching none is "other". A forbidden shortcut is read from the
# trusted verdicts (the words of attnlab.shortcuts.ForbiddenCalls.message). Routine notes need no
# look and are left out: a cell not passed (the failures count it) and written answers awaiting
# hand grading.
SHORTCUT = "asks you to write yourself"
NOTE_KINDS = {
    "timeout": ("ran past the time limit", "was stopped after", "did not finish within", "did not answer in time",
                "ignored the interrupt", "stopped answering"),
    "output cap": ("cut at the output limit", "to its own output", "over the size limit"),
    "recovered notebook": ("rebuilt from the released notebook", "recovered", "not valid notebook JSON",
                           "notebook missing"),
    "edited cell": ("changed from", "was edited", "deleted;", "appears ", "is not a graded cell"),
    "late": ("late: submitted",),
    "kernel or nbgrader": ("notebook kernel", "nbgrader stopped", "nbgrader could not finish", "kernel died"),
    "notebook and trusted check disagree": ("the notebook gave",),
    "grader error": ("grader error",),
}
ROUTINE = ("written answers await hand grading in formgrader",)


def note_kinds(submission: class_data.Submission) -> list[str]:
    """The kinds of note a submission needed, from its report row and its verdicts; [] when its
    notes are all routine."""
    failures = {cell: class_data.failure_of(verdict) for cell, verdict in submission.verdicts.items()}
    failures = {cell: failure for cell, failure in failures.items() if failure is not None}
    rest = submission.row.get("notes", "")
    # "<cell> not passed: <failure>" (autograder.grade._merge) is removed whole: the failure quotes the
    # learner's own error message, whose words must not pass for a note of the grader's
    for cell, failure in failures.items():
        rest = rest.replace(f"{cell} not passed: {failure}", "")
    for routine in ROUTINE:
        rest = rest.replace(routine, "")
    kinds = ["forbidden shortcut"] if any(SHORTCUT in failure for failure in failures.values()) else []
    kinds += [kind for kind, words in NOTE_KINDS.items() if any(word in rest for word in words)]
    if not kinds and rest.replace(";", "").strip():
        kinds = ["other"]
    return kinds


def _seconds(row: dict) -> float | None:
    try:
        return float(row["seconds"])
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class Tables:
    lessons: list[dict]
    exercises: list[dict]
    failures: list[dict]
    notes: list[dict]


def tables(data: ClassData) -> Tables:
    """The report's tables, computed from the class's data."""
    lessons, exercises, failures, notes = [], [], [], []
    for lesson in data.lessons:
        subs = [s for (slug, _), s in sorted(data.submissions.items()) if slug == lesson.slug]
        finals = [s.final for s in subs]
        seconds = [t for t in (_seconds(s.row) for s in subs) if t is not None]
        noted = []
        for s in subs:
            kinds = note_kinds(s)
            if kinds or s.row.get("status") == "failed":
                noted.append(s)
                notes.append({"lesson": lesson.slug, "student": s.student, "status": s.row.get("status", ""),
                              "kinds": "; ".join(kinds), "notes": s.row.get("notes", "")})
        max_score = sum(points for _, _, points in data.cells[lesson.slug])
        lessons.append({
            "lesson": lesson.slug, "submissions": len(subs), "max_score": f"{max_score:g}",
            "mean_score": f"{statistics.fmean(finals):.2f}" if finals else "",
            "median_score": f"{statistics.median(finals):g}" if finals else "",
            "full_marks": sum(1 for s in subs if s.final >= max_score),
            "late": sum(1 for s in subs if "late" in note_kinds(s)),
            "penalised": sum(1 for s in subs if s.penalty > 0),
            "grading_seconds_total": f"{sum(seconds):.1f}" if seconds else "",
            "grading_seconds_mean": f"{statistics.fmean(seconds):.1f}" if seconds else "",
            "grading_seconds_max": f"{max(seconds):.1f}" if seconds else "",
            "with_notes": len(noted),
        })
        for name, written, points in data.cells[lesson.slug]:
            graded = [c for s in subs for c in s.cells if c.name == name]
            counted = Counter(f for s in subs if (f := class_data.failure_of(s.verdicts.get(name, ""))) is not None)
            exercises.append({
                "lesson": lesson.slug, "cell": name, "kind": "written" if written else "autograded",
                "points": f"{points:g}", "submissions": len(graded), "passed": sum(c.passed for c in graded),
                "pass_rate": f"{sum(c.passed for c in graded) / len(graded):.3f}" if graded else "",
                "awaiting_hand_grading": sum(c.score is None for c in graded),
                "failures_recorded": sum(counted.values()),
            })
            for message, count in sorted(counted.items(), key=lambda item: (-item[1], item[0])):
                failures.append({"lesson": lesson.slug, "cell": name, "count": count, "failure": message})
    return Tables(lessons, exercises, failures, notes)


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


# --- the page ------------------------------------------------------------------------------------

def _png(figure) -> str:
    """A matplotlib figure as a base64 PNG data URI. The figures are ``matplotlib.figure.Figure``
    objects, not pyplot's: no backend and no global state, so nothing to close."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def pass_rate_figure(exercises: list[dict]):
    """Horizontal bars: the share of submissions that passed each graded cell (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    rows = [row for row in exercises if row["submissions"]]
    figure = Figure(figsize=(8, max(2.5, 0.28 * len(rows) + 1.2)))
    axes = figure.subplots()
    labels = [f"{row['lesson'][:2]} {row['cell']}" for row in rows]
    axes.barh(range(len(rows)), [100 * float(row["pass_rate"]) for row in rows], color="#3b7dd8")
    axes.set_yticks(range(len(rows)), labels, fontsize=8)
    axes.invert_yaxis()  # first lesson's first cell at the top
    axes.set_xlim(0, 100)
    axes.set_xlabel("submissions with full points (%)")
    axes.set_ylabel("exercise (lesson, graded cell)")
    axes.set_title("Pass rate by exercise")
    return figure


def score_figure(data: ClassData):
    """One box per lesson: the scores after late penalties, as a percentage of the lesson's points
    (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4))
    axes = figure.subplots()
    lessons = [l for l in data.lessons if any(slug == l.slug for slug, _ in data.submissions)]
    scores = []
    for lesson in lessons:
        max_score = sum(points for _, _, points in data.cells[lesson.slug]) or 1.0
        scores.append([100 * s.final / max_score for (slug, _), s in data.submissions.items() if slug == lesson.slug])
    axes.boxplot(scores, showmeans=True)
    axes.set_xticks(range(1, len(lessons) + 1), [l.slug for l in lessons], rotation=30, ha="right")
    axes.set_ylim(-5, 105)
    axes.set_xlabel("lesson")
    axes.set_ylabel("score after late penalty (% of the lesson's points)")
    axes.set_title("Score distribution by lesson")
    return figure


def _table(rows: list[dict], fields: list[str], caption: str, css: str) -> str:
    head = "".join(f"<th>{html.escape(f)}</th>" for f in fields)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(row.get(f, '')))}</td>" for f in fields) + "</tr>"
                   for row in rows)
    return f'<table class="{css}"><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>\n'


def page(data: ClassData, t: Tables, course: Path) -> str:
    top = [{**row, "most common failures": " | ".join(
        f"{f['failure']} ({f['count']})" for f in [x for x in t.failures
                                                      if x["lesson"] == row["lesson"] and x["cell"] == row["cell"]][:3])}
        for row in t.exercises]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Class report</title>\n<style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #999;padding:2px 6px;font-size:90%;text-align:left}"
        "caption{font-weight:bold;text-align:left}</style></head><body>\n"
        f"<h1>Class report</h1>\n<p>{html.escape(str(course))}: {len(data.submissions)} graded submissions of "
        f"{len(data.students)} learners in {len(data.lessons)} lessons.</p>\n"
        f'<img id="pass-rate" alt="Pass rate by exercise" src="{_png(pass_rate_figure(t.exercises))}">\n'
        f'<img id="scores" alt="Score distribution by lesson" src="{_png(score_figure(data))}">\n'
        + _table(t.lessons, list(t.lessons[0]) if t.lessons else [], "Lessons", "lessons")
        + _table(top, list(top[0]) if top else [], "Exercises", "exercises")
        + _table(t.notes, ["lesson", "student", "status", "kinds", "notes"], "Submissions that needed a note", "notes")
        + "</body></html>\n"
    )


def report(course: Path, lessons: list[str] | None = None, db_url: str | None = None,
           db_url_file: Path | None = None) -> int:
    """Write the class report of ``course`` into ``course/report/``; 2 when the gradebook cannot be
    found, 1 when nothing is graded."""
    try:
        url = gradebook_url.resolve(course, db_url, db_url_file)
        chosen = class_data.choose_lessons(lessons)
        data = class_data.load(course, url, chosen)
    except (gradebook_url.GradebookURLError, KeyError, class_data.NoGradebook) as error:
        print(f"Cannot write the report: {error.args[0] if isinstance(error, KeyError) else error}")
        return 2
    if not data.submissions:
        print(f"Nothing graded in {course} for {', '.join(l.slug for l in chosen)}: no report written")
        return 1
    t = tables(data)
    folder = course / "report"
    folder.mkdir(exist_ok=True)
    _write_csv(folder / "lessons.csv", t.lessons, list(t.lessons[0]))
    _write_csv(folder / "exercises.csv", t.exercises, list(t.exercises[0]))
    _write_csv(folder / "failures.csv", t.failures, ["lesson", "cell", "count", "failure"])
    _write_csv(folder / "notes.csv", t.notes, ["lesson", "student", "status", "kinds", "notes"])
    (folder / "index.html").write_text(page(data, t, course))
    print(f"Class report of {len(data.submissions)} submissions: {folder / 'index.html'} "
          "(and lessons.csv, exercises.csv, failures.csv, notes.csv)")
    return 0
