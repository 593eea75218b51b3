"""``python -m autograder benchmark --class-scale``: grading a whole class of one lesson, measured.

Builds a throw-away course for one lesson, generates a class of submissions (``mix``: honest work,
the blank stub, and classic mistakes in turn), grades them once with ``grade --jobs N``, and prints
submissions per minute, the peak memory of the grader and everything it started (sampled), the
machine's load average while it ran, and whether any submission was lost: every generated
submission must have exactly one row in ``grading_report.csv`` with a score, exactly one
submission in the gradebook (else it counts as lost), and the score its kind implies (honest: every
autograded point, blank: none, a mistake: some but not all). Exit 0 only when none was lost and
every score is right.
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from nbgrader.api import Gradebook

from attnlab.lessons import lesson as find_lesson
from autograder import paths
from autograder.build import build
from autograder.grade import REPORT, grade

# Classic mistakes of lesson 02's attention.py, each (name, text of the reference, replacement);
# tests/mutation_rows/lesson02.py has these and more, with what the checks say about each.
MISTAKES = {
    "02": [
        ("no-sqrt", "scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0"),
        ("no-max-shift", "    shifted = x - x.amax(dim=dim, keepdim=True)", "    shifted = x"),
        ("divided-by-d", "/ math.sqrt(d)  #", "/ d  #"),
        ("mask-ignored", '        scores = scores.masked_fill(~mask, float("-inf"))\n', "        pass\n"),
        ("torch-softmax", "weights = softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-1)"),
    ],
}


def mix(lesson_key: str, release: Path) -> list[tuple[str, str, str]]:
    """(kind, name, library) in the order a class is generated: honest, blank, each mistake."""
    lesson = find_lesson(lesson_key)
    module = lesson.modules[0]
    reference = (paths.REFERENCE_MODULES / f"{module}.py").read_text()
    variants = [("honest", "honest", reference), ("blank", "blank", (release / f"{module}.py").read_text())]
    for name, old, new in MISTAKES.get(lesson.number, []):
        if reference.count(old) != 1:
            raise ValueError(f"mistake {name!r}: {old!r} does not occur exactly once in {module}.py's reference")
        variants.append(("mistake", name, reference.replace(old, new)))
    return variants


def make_class(course: Path, lesson_key: str, count: int) -> dict[str, str]:
    """``count`` submissions under ``course/submitted``; student -> kind ("honest", "blank", "mistake")."""
    lesson = find_lesson(lesson_key)
    release = course / "release" / lesson.slug
    variants = mix(lesson_key, release)
    kinds = {}
    for index in range(count):
        kind, name, library = variants[index % len(variants)]
        student = f"s{index:03d}-{name}"
        folder = course / "submitted" / student / lesson.slug
        folder.mkdir(parents=True)
        shutil.copy(release / lesson.notebook, folder / lesson.notebook)
        (folder / f"{lesson.modules[0]}.py").write_text(library)
        kinds[student] = kind
    return kinds


@dataclass
class Sampler:
    """Resident memory of this process and all its descendants (the sandboxed kernels and workers
    included), and the load average, sampled every ``every`` seconds in a thread."""

    every: float = 0.5
    peak_bytes: int = 0
    peak_processes: int = 0
    loads: list[float] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        me = psutil.Process()
        total, count = 0, 0
        for process in [me, *me.children(recursive=True)]:
            try:
                total += process.memory_info().rss
                count += 1
            except psutil.Error:
                pass
        self.peak_bytes = max(self.peak_bytes, total)
        self.peak_processes = max(self.peak_processes, count)

    def _run(self) -> None:
        last_load = 0.0
        while not self._done.is_set():
            self.sample()
            if time.monotonic() - last_load >= 10:
                self.loads.append(os.getloadavg()[0])
                last_load = time.monotonic()
            self._done.wait(self.every)

    def __enter__(self) -> "Sampler":
        self.loads.append(os.getloadavg()[0])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=30)
        self.loads.append(os.getloadavg()[0])


def check(course: Path, assignment: str, kinds: dict[str, str]) -> tuple[list[str], list[str]]:
    """(lost, wrong): submissions without exactly one scored report row and one gradebook
    submission; submissions whose score is not what their kind implies."""
    lost, wrong = [], []
    with (course / REPORT).open() as handle:
        rows = list(csv.DictReader(handle))
    per_student: dict[str, list[dict]] = {}
    for row in rows:
        per_student.setdefault(row["student"], []).append(row)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        in_gradebook: dict[str, int] = {}
        for submission in book.assignment_submissions(assignment):
            in_gradebook[submission.student.id] = in_gradebook.get(submission.student.id, 0) + 1
    for student, kind in kinds.items():
        found = per_student.get(student, [])
        if len(found) != 1:
            lost.append(f"{student}: {len(found)} rows in {REPORT}, expected 1")
            continue
        if in_gradebook.get(student, 0) != 1:
            lost.append(f"{student}: {in_gradebook.get(student, 0)} submissions in the gradebook, expected 1")
        row = found[0]
        if row["status"] == "failed" or row["autograded"] == "":
            lost.append(f"{student}: no score ({row['status']}: {row['notes'][:200]})")
            continue
        score, full = float(row["autograded"]), float(row["autograded_max"])
        if not {"honest": score == full > 0, "blank": score == 0, "mistake": 0 < score < full}[kind]:
            wrong.append(f"{student} ({kind}): {score:g} of {full:g} autograded points")
    extra = (set(per_student) | set(in_gradebook)) - set(kinds)
    if extra:
        lost.append(f"rows or gradebook entries for students nobody generated: {sorted(extra)}")
    return lost, wrong


def class_benchmark(count: int = 200, jobs: int = 2, lesson_key: str = "02") -> int:
    """Grade a generated class of ``count`` submissions once with ``jobs``; print the measurement."""
    lesson = find_lesson(lesson_key)
    with tempfile.TemporaryDirectory(prefix="attnlab-class-") as tmp:
        course = Path(tmp) / "course"
        if build(course, [lesson]) != 0:
            return 1
        kinds = make_class(course, lesson.slug, count)
        print(f"Grading {count} submissions of lesson {lesson.number} with --jobs {jobs} "
              f"({', '.join(f'{n} {k}' for k, n in _counts(kinds).items())}) on {os.cpu_count()} CPUs", flush=True)
        start = time.perf_counter()
        with Sampler() as sampler:
            status = grade(course, lesson.slug, jobs=jobs)
        seconds = time.perf_counter() - start
        lost, wrong = check(course, lesson.slug, kinds)
        with (course / REPORT).open() as handle:
            statuses = _counts({r["student"]: r["status"] for r in csv.DictReader(handle)})
        loads = sampler.loads
        print(f"\nClass-scale grading, lesson {lesson.number}: {count} submissions, --jobs {jobs}")
        print(f"  time:        {seconds:8.0f} s in all, {count / seconds * 60:6.2f} submissions per minute, "
              f"{seconds / count:5.1f} s per submission")
        print(f"  peak memory: {sampler.peak_bytes / 2**30:8.2f} GiB, the resident sets of the grader and everything "
              f"it started, added up ({sampler.peak_processes} processes at most; pages they share count in each)")
        print(f"  load average (1 min) while it ran: min {min(loads):.1f}, median {sorted(loads)[len(loads) // 2]:.1f}, "
              f"max {max(loads):.1f} ({len(loads)} samples)")
        print(f"  outcomes:    {', '.join(f'{n} {s}' for s, n in statuses.items())}; grade exited {status}")
        print(f"  lost:        {len(lost)}" + ("" if lost else f" (each of the {count} submissions has one report row "
                                                        "with a score and one gradebook submission)"))
        for problem in lost:
            print(f"    {problem}")
        print(f"  scores:      {len(wrong)} not what the submission's kind implies" + ("" if wrong else
              " (honest: all autograded points, blank: none, a mistake: some but not all)"))
        for problem in wrong:
            print(f"    {problem}")
        return 0 if not lost and not wrong and status == 0 else 1


def _counts(mapping: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in mapping.values():
        counts[value] = counts.get(value, 0) + 1
    return counts
