"""Late work: each lesson's deadline and the course's late-penalty policy, from ``schedule.toml``.

The file lives in the course directory (``course/schedule.toml``), beside the ``nbgrader_config.py``
that ``build`` writes; without it the course sets no deadline and no penalty::

    [deadlines]               # lesson number or slug = a date and time with its UTC offset
    "02" = 2026-03-06T23:59:00+01:00
    03_masking = 2026-03-13T23:59:00Z

    [late]
    policy = "per-day"        # "none" (lateness is noted, nothing deducted), "fixed" or "per-day"
    points = 2                # fixed: points off any late submission; per-day: points off for
                              # each day, or part of a day, after the deadline

``python -m autograder build`` records each deadline as the nbgrader assignment's ``duedate`` in the
gradebook (``record_deadlines``), so nbgrader computes lateness itself, from the submission's
``timestamp.txt`` and that duedate (``SubmittedAssignment.total_seconds_late``, extensions granted
in nbgrader included). The penalty is nbgrader's late-submission plugin interface
(``nbgrader.plugins.LateSubmissionPlugin``): ``CoursePenalty``, configured from the file. nbgrader's
own ``AssignLatePenalties`` runs only inside ``nbgrader autograde``, which the course's grader runs
on a scratch copy of the gradebook whose scores it does not keep (the trusted checks score the
cells), so the grader calls the same plugin where it writes a submission's scores into the real
gradebook (``assign_penalties``). As in nbgrader, the penalty is fixed when the submission is
graded: hand grading afterwards does not change it.
"""

from __future__ import annotations

import math
import tomllib
from datetime import datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Enum, Float
from traitlets.config import Config

from attnlab.lessons import lesson as find_lesson

SCHEDULE = "schedule.toml"
POLICIES = ("none", "fixed", "per-day")
DAY = 24 * 3600


class ScheduleError(ValueError):
    """A schedule.toml that cannot be used (the message names the file and the problem)."""


class CoursePenalty(LateSubmissionPlugin):
    """The course's late penalty, as an nbgrader late-submission plugin (usable as
    ``c.AssignLatePenalties.plugin_class = "autograder.late.CoursePenalty"``)."""

    policy = Enum(POLICIES, default_value="none", help="none, fixed or per-day").tag(config=True)
    points = Float(0.0, help="fixed: points off a late submission; per-day: points off per day or part "
                   "of a day late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        if total_seconds_late <= 0 or self.policy == "none":
            return None
        if self.policy == "fixed":
            return self.points
        return self.points * math.ceil(total_seconds_late / DAY)

    def describe(self) -> str:
        """The policy in words, for the grading report's notes."""
        if self.policy == "none":
            return "no late penalty"
        if self.policy == "fixed":
            return f"{self.points:g} points off a late submission"
        return f"{self.points:g} points off per day or part of a day late"


def _path(course: Path) -> Path:
    return Path(course) / SCHEDULE


def read(course: Path) -> dict:
    """The course's schedule.toml as data ({} when there is none), checked: unknown sections or keys,
    a policy that does not exist and negative points are errors that say so."""
    path = _path(course)
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ScheduleError(f"{path}: not valid TOML ({error})") from None
    unknown = set(data) - {"deadlines", "late"}
    if unknown:
        raise ScheduleError(f"{path}: unknown section(s) {sorted(unknown)}; expected [deadlines] and [late]")
    late = data.get("late", {})
    unknown = set(late) - {"policy", "points"}
    if unknown:
        raise ScheduleError(f"{path}: unknown key(s) {sorted(unknown)} in [late]; expected policy and points")
    if late.get("policy", "none") not in POLICIES:
        raise ScheduleError(f"{path}: [late] policy is {late['policy']!r}; expected one of {', '.join(POLICIES)}")
    points = late.get("points", 0)
    if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
        raise ScheduleError(f"{path}: [late] points is {points!r}; expected a number of points, 0 or more")
    if late.get("policy", "none") != "none" and "points" not in late:
        raise ScheduleError(f"{path}: [late] policy {late['policy']!r} needs points (how many points to take off)")
    return data


def deadlines(course: Path) -> dict[str, datetime]:
    """Assignment slug -> its deadline (aware datetime), from schedule.toml."""
    path = _path(course)
    found = {}
    for key, value in read(course).get("deadlines", {}).items():
        try:
            slug = find_lesson(str(key)).slug
        except KeyError:
            raise ScheduleError(f"{path}: [deadlines] names {key!r}, which is no lesson") from None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ScheduleError(f"{path}: the deadline of {key} ({value!r}) is not an ISO 8601 date and time") from None
        if not isinstance(value, datetime):
            raise ScheduleError(f"{path}: the deadline of {key} ({value!r}) is not a date and time")
        if value.tzinfo is None:
            raise ScheduleError(f"{path}: the deadline of {key} ({value.isoformat()}) has no UTC offset; "
                                "write it as e.g. 2026-03-06T23:59:00Z or 2026-03-06T23:59:00+01:00")
        found[slug] = value
    return found


def plugin(course: Path) -> CoursePenalty:
    """The late-submission plugin configured from the course's schedule.toml."""
    late = read(course).get("late", {})
    config = Config()
    config.CoursePenalty.policy = late.get("policy", "none")
    config.CoursePenalty.points = float(late.get("points", 0))
    return CoursePenalty(config=config)


def record_deadlines(course: Path, slugs: list[str], db_url: str) -> list[str]:
    """Write the deadline of each of ``slugs`` into the gradebook as its nbgrader duedate (none where
    the schedule gives none, so that a deadline taken out of the file is taken out of the gradebook);
    lines saying what was recorded. Without a schedule.toml the gradebook is left alone (duedates
    set with nbgrader's own ``nbgrader db assignment add --duedate`` stay)."""
    if not _path(course).is_file():
        return []
    due = deadlines(course)
    said = []
    with Gradebook(db_url) as book:
        for slug in slugs:
            try:
                book.find_assignment(slug)
            except MissingEntry:
                continue  # not generated into this gradebook: nothing to date
            book.update_or_create_assignment(slug, duedate=due.get(slug))
            if slug in due:
                said.append(f"{slug}: due {due[slug].isoformat()}")
    return said


def late_by(seconds: float) -> str:
    """A lateness in words: "1 day 2 h 5 min", "3 min", "40 s"."""
    seconds = int(math.ceil(seconds))
    days, rest = divmod(seconds, DAY)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes else []
    return " ".join(parts) or f"{secs} s"


def assign_penalties(course: Path, submission) -> list[str]:
    """Give each notebook of ``submission`` (nbgrader's SubmittedAssignment, in an open gradebook
    session) the plugin's penalty, as nbgrader's ``AssignLatePenalties`` does: reset to none, and
    when the submission is late, the plugin's penalty kept between 0 and the notebook's score. The
    caller commits. Returns the notes for the grading report (none when on time)."""
    seconds = submission.total_seconds_late
    penalty = plugin(course)
    asked = total = 0.0
    for notebook in submission.notebooks:
        notebook.late_submission_penalty = None
        if seconds > 0:
            value = penalty.late_submission_penalty(submission.student.id, notebook.score, seconds)
            if value is not None:
                notebook.late_submission_penalty = min(max(value, 0.0), notebook.score)
                asked += value
                total += notebook.late_submission_penalty
    if seconds <= 0:
        return []
    due = submission.duedate.isoformat(sep=" ", timespec="minutes")
    kept = f", kept to the score: the policy gives {asked:g}" if total < asked else ""
    return [f"late: submitted {late_by(seconds)} after the deadline ({due} UTC); penalty {total:g} points "
            f"({penalty.describe()}{kept})"]
