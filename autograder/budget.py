"""How long grading one submission may take, and how that time is shared between its phases.

A submission has one deadline for everything the grader runs for it: nbgrader executing the
notebook, then the trusted checks of its library. The budget is ``DEFAULT_SECONDS`` (300 s; an
honest lesson 02 submission takes under 20 s on an idle 2-core machine), or the lesson's own
figure in ``LESSON_SECONDS`` where honest submissions need more, or what ``grade
--submission-seconds`` says.

The notebook may use the budget less what is kept back for the trusted checks (``reserve``): one
worker's whole wall clock (a library that hangs in one function) and one honest rerun of the
calls left after it. A notebook that hangs until it is killed therefore never eats the time its
library's checks need, and the submission as a whole ends by its deadline.
"""

from __future__ import annotations

import time

from attnlab.lessons import Lesson

DEFAULT_SECONDS = 300.0
# Lessons whose honest submissions need more than the default (lesson number -> seconds). Measured:
# the solution of every lesson graded alone on a 2-core machine that other jobs kept at a load
# average of 10 to 13, its notebook took 30 to 90 s except lesson 06 (about 145 s) and lesson 09
# (about 185 s), its trusted checks 14 to 26 s; these two get a notebook share of 1.5 times that.
LESSON_SECONDS: dict[str, float] = {"06": 360.0, "09": 420.0}
RERUN_SECONDS = 30.0  # one honest worker run: start, import torch, run the calls left
NBGRADER_SECONDS = 20.0  # nbgrader's own start and finish around the kernel's run


def submission_seconds(lesson: Lesson, override: float | None = None) -> float:
    """The whole budget of one submission of ``lesson``."""
    if override is not None:
        if override <= 0:
            raise ValueError(f"a submission's time budget must be positive, not {override:g} s")
        return float(override)
    return LESSON_SECONDS.get(lesson.number, DEFAULT_SECONDS)


def reserve(budget_s: float, worker_wall_s: float) -> float:
    """Seconds kept back for the trusted checks (at most half the budget, so that a small budget
    still leaves the notebook time to run)."""
    return min(worker_wall_s + RERUN_SECONDS, budget_s / 2)


class Deadline:
    """The end of one submission's budget, on the monotonic clock."""

    def __init__(self, seconds: float):
        self.seconds, self.end = seconds, time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())
