"""``python -m autograder benchmark``: grading throughput, serial against parallel.

Builds a throw-away course for one lesson, generates a batch of submissions (the reference
library, the blank stub, and a half-correct library, in turn), grades the batch once with one job
and once with ``--jobs``, prints seconds per submission for each, and checks that both runs gave
every submission the same grades.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from nbgrader.api import Gradebook

from attnlab.lessons import lesson as find_lesson
from autograder import paths
from autograder.build import build
from autograder.grade import grade


def _libraries(module: str, release: Path) -> list[tuple[str, str]]:
    reference = (paths.REFERENCE_MODULES / f"{module}.py").read_text()
    stub = (release / f"{module}.py").read_text()
    half = reference.replace("scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0")
    return [("reference", reference), ("blank", stub), ("half", half)]


def make_batch(course: Path, lesson_key: str, count: int) -> None:
    lesson = find_lesson(lesson_key)
    release = course / "release" / lesson.slug
    variants = _libraries(lesson.modules[0], release)
    for index in range(count):
        name, library = variants[index % len(variants)]
        folder = course / "submitted" / f"s{index:03d}-{name}" / lesson.slug
        folder.mkdir(parents=True)
        shutil.copy(release / lesson.notebook, folder / lesson.notebook)
        (folder / f"{lesson.modules[0]}.py").write_text(library)


def grades(course: Path, assignment: str) -> dict[str, dict[str, float | None]]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        return {
            submission.student.id: {g.name: g.score for nb in submission.notebooks for g in nb.grades}
            for submission in book.assignment_submissions(assignment)
        }


def benchmark(count: int = 6, jobs: int = 2, lesson_key: str = "02", cell_timeout: int | None = None) -> int:
    lesson = find_lesson(lesson_key)
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as tmp:
        base = Path(tmp) / "base"
        if build(base, [lesson]) != 0:
            return 1
        make_batch(base, lesson.slug, count)
        results, seconds = {}, {}
        for label, n_jobs in (("serial", 1), (f"{jobs} jobs", jobs)):
            course = Path(tmp) / label.replace(" ", "-")
            shutil.copytree(base, course)
            start = time.perf_counter()
            status = grade(course, lesson.slug, cell_timeout=cell_timeout, jobs=n_jobs)
            seconds[label] = time.perf_counter() - start
            if status != 0:
                print(f"{label}: grading failed (exit {status})")
                return 1
            results[label] = grades(course, lesson.slug)
        print(f"\nGrading throughput, lesson {lesson.number}, {count} submissions:")
        for label, total in seconds.items():
            print(f"  {label:>8}: {total:7.1f} s in all, {total / count:6.1f} s per submission")
        same = len({repr(sorted(r.items())) for r in results.values()}) == 1
        print("  grades: " + ("identical in both runs" if same else "DIFFERENT between runs"))
        return 0 if same else 1
