"""``python -m autograder build``: an nbgrader course directory, one assignment per lesson.

Everything comes from the ownership manifest (``attnlab.lessons``):

- ``source/<slug>/``: the instructor notebook from ``solutions/notebooks/`` and the reference of every exercise
  module. At autograde, nbgrader replaces each non-notebook file of a submission with its source
  version except the modules the lesson owns (``Autograde.exclude_overwriting``), so while lesson N
  is graded every module it does not own is the reference and its own modules are the learner's.
- ``release/<slug>/`` (made by ``nbgrader generate_assignment``, then finished here): nbgrader
  copies ``.py`` files unchanged, so the owned modules are replaced by their learner stubs and the
  other references are removed; learners keep using their own earlier modules from their install.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from attnlab.glossary import fill_boxes
from attnlab.lessons import LESSONS, Lesson, exercise_modules
from autograder import gradebook_url, late, paths
from autograder.course import config_text, nbgrader
from autograder.stubs import stub_for


def notebook_points(notebook: Path) -> float:
    """Total points of the graded cells of an instructor notebook."""
    total = 0.0
    for cell in nbformat.read(notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            total += float(meta.get("points", 0))
    return total


def check_manifest() -> list[str]:
    """Disagreements between the manifest and the files it names."""
    problems = []
    for lesson in LESSONS:
        notebook = paths.SOLUTION_NOTEBOOKS / lesson.notebook
        if not notebook.is_file():
            problems.append(f"lesson {lesson.number}: solutions/notebooks/{lesson.notebook} is missing")
            continue
        points = notebook_points(notebook)
        if points != lesson.points:
            problems.append(
                f"lesson {lesson.number}: the manifest gives {lesson.points} points, "
                f"the graded cells of {lesson.notebook} add up to {points}"
            )
        for module in lesson.modules:
            if not (paths.REFERENCE_MODULES / f"{module}.py").is_file():
                problems.append(f"lesson {lesson.number}: solutions/attnlab/{module}.py is missing")
    owned = set(exercise_modules())
    for reference in sorted(paths.REFERENCE_MODULES.glob("*.py")):
        if reference.stem not in owned:
            problems.append(f"solutions/attnlab/{reference.name} belongs to no lesson: add its lesson to "
                            "src/attnlab/lessons.py (modules=...)")
    return problems


def _write_source(course: Path, lesson: Lesson) -> None:
    source = course / "source" / lesson.slug
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, as_version=4)
    fill_boxes(notebook, lesson.number)  # "Words in this lesson", from the course glossary
    nbformat.write(notebook, source / lesson.notebook)
    for module in exercise_modules():
        shutil.copy(paths.REFERENCE_MODULES / f"{module}.py", source / f"{module}.py")


def _finish_release(course: Path, lesson: Lesson) -> None:
    release = course / "release" / lesson.slug
    for module in exercise_modules():
        copied = release / f"{module}.py"
        if module in lesson.modules:
            copied.write_text(stub_for(paths.REFERENCE_MODULES / f"{module}.py"))
        else:
            copied.unlink(missing_ok=True)


def build(course: Path, lessons: list[Lesson] | None = None) -> int:
    """Build (or rebuild) the course directory; returns the exit status."""
    problems = check_manifest()
    if problems:
        print("The manifest and solutions/ disagree:\n  " + "\n  ".join(problems))
        return 1
    try:  # the deadlines and late policy (course/schedule.toml), checked before anything is built
        late.deadlines(course)
    except late.ScheduleError as error:
        print(f"Cannot build: {error}")
        return 1
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(config_text())
    for lesson in lessons or list(LESSONS):
        _write_source(course, lesson)
        run = nbgrader(course, "generate_assignment", lesson.slug, "--force")
        if run.returncode != 0:
            print(f"{lesson.slug}: nbgrader generate_assignment failed (exit {run.returncode}):")
            print(run.output[-3000:])
            return 1
        _finish_release(course, lesson)
        print(f"{lesson.slug}: source and release ready ({lesson.points:g} points)")
    if (course / late.SCHEDULE).is_file():  # each deadline as nbgrader's duedate, where the grader finds it
        for line in late.record_deadlines(course, [l.slug for l in lessons or LESSONS], gradebook_url.resolve(course)):
            print(line)
    print(f"Course directory: {course}")
    return 0
