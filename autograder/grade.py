"""``python -m autograder grade``: grade collected submissions, safely, and export the grades.

For each submission (``submitted/<student>/<assignment>/``), in its own scratch folder under
``.grading/``:

1. ``nbgrader autograde`` runs on a scratch copy of the course (the assignment's source, this
   submission, a copy of the gradebook), with the notebook's kernel sandboxed
   (``autograder.sandbox``: no network, limits on wall time, CPU, memory, processes and file sizes,
   writes only to its own copy of the submission, the reference, the hidden tests and the gradebook
   out of sight) and a per-cell time limit after which the cell is interrupted;
2. the lesson's autograded cells are scored again outside the notebook by sandboxed workers
   (``autograder.trusted``), which the notebook cannot tamper with;
3. under a lock, the real gradebook gets the submission: the trusted scores for autograded cells,
   nbgrader's results for the rest (written answers to hand-grade), and the autograded notebook for
   formgrader and feedback. Cells where the notebook and the trusted check disagree are reported.

Every submission ends with a row in ``grading_report.csv``: ``graded``, ``review`` (scored, with
something an instructor should look at: a cell that timed out, a killed kernel, a disagreement,
an edited test cell) or ``failed`` (no score could be recorded, with the reason). Submissions run
in parallel with ``--jobs``; the gradebook is only ever written by this process, one at a time.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from attnlab.lessons import Lesson
from attnlab.lessons import lesson as find_lesson
from attnlab.switch import NO_REFERENCE_ENV, REFERENCE_DIR_ENV, REFERENCE_ENV
from autograder import paths, sandbox, trusted
from autograder.course import config_text, nbgrader

REPORT = "grading_report.csv"
GRADES = "grades.csv"
KERNEL = "attnlab-sandbox"
MAX_FILE_BYTES = 5 * 1024 * 1024  # a submitted file larger than this is not graded
MAX_SUBMISSION_BYTES = 20 * 1024 * 1024


@dataclass
class Outcome:
    """What happened to one submission."""

    assignment: str
    student: str
    status: str = "graded"  # "graded", "review" or "failed"
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str, review: bool = True) -> None:
        if text not in self.notes:
            self.notes.append(text)
        if review and self.status == "graded":
            self.status = "review"

    def row(self) -> dict:
        data = asdict(self)
        data["notes"] = "; ".join(self.notes)
        data["seconds"] = f"{self.seconds:.1f}"
        return data


def submissions(course: Path, assignment: str | None = None) -> list[tuple[str, str]]:
    """(assignment, student) for every collected submission, sorted."""
    found = []
    for folder in sorted((course / "submitted").glob("*/*")):
        if folder.is_dir() and (assignment is None or folder.name == assignment):
            found.append((folder.name, folder.parent.name))
    return sorted(found)


# --- reading nbgrader's log and notebook ---------------------------------------------------------

_LOG_PROBLEM = re.compile(r"\[(?:AutogradeApp|Autograde)\s*\|\s*(ERROR|WARNING)\]\s*(.*)")
_CHANGED_CELL = re.compile(r"Attribute '(?:checksum|source)' for cell (\S+) has changed")
_TIMEOUT_LINES = ("Timeout waiting for execute reply", "Interrupting kernel")
_BOILERPLATE = ("There was an error processing", "Traceback", "Please see the", "Did you mean", " ")


def notes_from_log(log: str, hidden_cells: set[str]) -> list[str]:
    """Notes from nbgrader's log. ``hidden_cells``: grade ids of cells with hidden tests, whose
    checksum always differs in a submission because the learner never saw the hidden part."""
    notes = []
    for level, message in _LOG_PROBLEM.findall(log):
        message = message.strip()
        changed = _CHANGED_CELL.search(message)
        if "No submitted file" in message or message.startswith("No notebooks were matched"):
            notes.append("notebook missing from the submission (its cells scored 0)")
        elif changed and changed.group(1) not in hidden_cells:
            notes.append(f"cell {changed.group(1)} was edited; nbgrader graded the original")
        elif level == "ERROR" and not message.startswith(_TIMEOUT_LINES + _BOILERPLATE):
            notes.append("nbgrader: " + message[:200])
    error = _last_exception(log)
    if error:
        notes.append(error)
    return list(dict.fromkeys(notes))


_EXCEPTION = re.compile(r"^\s+(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.*)$", re.M)
_EXPLAINED = {
    "CellTimeoutError": "a cell ignored the interrupt sent at its time limit, so nbgrader stopped the notebook",
    "NotJSONError": "the notebook is not valid notebook JSON",
    "DeadKernelError": "the notebook's kernel died (see the kernel note, if any)",
}


def _last_exception(log: str) -> str:
    """The exception that stopped nbgrader, in words, or ''."""
    found = _EXCEPTION.findall(log)
    if not found:
        return ""
    name, message = found[-1]
    return f"nbgrader stopped: {_EXPLAINED.get(name, f'{name}: {message[:160]}')}"


def hidden_test_cells(source: Path) -> set[str]:
    """Grade ids of the cells of the source notebooks in ``source`` that hold hidden tests."""
    ids = set()
    for path in source.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if "BEGIN HIDDEN TESTS" in cell.source:
                ids.add(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
    return ids


def grade_ids(notebook: Path) -> set[str]:
    """Grade ids of the graded cells of a notebook (empty for a missing or unreadable one)."""
    try:
        cells = nbformat.read(notebook, as_version=4).cells
    except Exception:  # noqa: BLE001 (corrupt JSON is reported elsewhere)
        return set()
    return {c.metadata.get("nbgrader", {}).get("grade_id") for c in cells if c.metadata.get("nbgrader", {}).get("grade")}


def deleted_cells(source: Path, submitted: Path) -> list[str]:
    """Graded cells of the source notebooks that a submitted notebook no longer has."""
    notes = []
    for notebook in sorted(source.glob("*.ipynb")):
        handed_in = submitted / notebook.name
        if not handed_in.is_file():
            continue
        gone = sorted(grade_ids(notebook) - grade_ids(handed_in))
        if gone and grade_ids(handed_in):
            notes.append(f"{notebook.name}: graded cells deleted ({', '.join(gone)}); nbgrader scored them "
                         "as missing and the trusted checks scored the library")
    return notes


def notes_from_notebooks(folder: Path) -> list[str]:
    notes = []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            notebook = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 (an unreadable notebook is a note, not a crash)
            notes.append(f"{path.name}: autograded notebook unreadable")
            continue
        for index, cell in enumerate(notebook.cells):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and output.get("ename") in ("CellTimeoutError", "KeyboardInterrupt"):
                    cell_id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"
                    notes.append(f"{path.name}: {cell_id} ran past the time limit and was interrupted")
    return list(dict.fromkeys(notes))


# --- one submission ------------------------------------------------------------------------------

@dataclass
class Settings:
    cell_timeout: int | None = None  # seconds a cell may run; the lesson's budget when None
    kernel_limits: sandbox.Limits | None = None
    worker_limits: sandbox.Limits = field(default_factory=lambda: sandbox.Limits(wall_s=90, cpu_s=90, memory_bytes=2 * 1024**3))
    _kernels: Path | None = None

    def kernel_root(self) -> Path:
        """A short-pathed folder for this run's kernel sockets."""
        if self._kernels is None:
            self._kernels = Path(tempfile.mkdtemp(prefix="attnlab-k-"))
        return self._kernels

    def cell_seconds(self, lesson: Lesson) -> int:
        return int(self.cell_timeout or lesson.budget_s)

    def kernel(self, lesson: Lesson) -> sandbox.Limits:
        if self.kernel_limits is not None:
            return self.kernel_limits
        wall = max(180.0, 4 * lesson.budget_s)
        return sandbox.Limits(wall_s=wall, cpu_s=int(2 * wall))


def _copy_submission(source: Path, target: Path, outcome: Outcome) -> None:
    """Copy a submission, leaving out files too large to grade (and saying so)."""
    total = 0
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_symlink():
            outcome.note(f"{rel}: a symbolic link, not graded")
            continue
        if path.is_dir():
            (target / rel).mkdir(parents=True, exist_ok=True)
            continue
        size = path.stat().st_size
        if size > MAX_FILE_BYTES or total + size > MAX_SUBMISSION_BYTES:
            outcome.note(f"{rel}: {size / 2**20:.1f} MiB, over the size limit, not graded")
            continue
        total += size
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / rel)


def _copy_gradebook(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def _kernelspec(folder: Path) -> Path:
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "autograder.sandbox", "kernel", "--",
            sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": argv, "display_name": "Python 3 (grading sandbox)", "language": "python"}))
    return folder


def hidden_paths(course: Path) -> list[str]:
    """What no sandbox may read: the references and hidden tests, the course and its gradebook."""
    return [str(paths.SOLUTIONS), str(paths.ROOT / "autograder" / "cases"), str(course)]


def grading_env(lesson: Lesson) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (REFERENCE_ENV, REFERENCE_DIR_ENV)}
    env[NO_REFERENCE_ENV] = ",".join(lesson.modules)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _library(folder: Path, lesson: Lesson) -> dict[str, bytes]:
    library = {}
    for module in lesson.modules:
        path = folder / f"{module}.py"
        if path.is_file() and not path.is_symlink():
            library[module] = path.read_bytes()
    return library


def grade_one(course: Path, assignment: str, student: str, settings: Settings, lock: threading.Lock) -> Outcome:
    start = time.monotonic()
    outcome = Outcome(assignment, student)
    try:
        lesson = find_lesson(assignment)
        _grade(course, lesson, student, settings, lock, outcome)
    except Exception as exc:  # noqa: BLE001 (one submission must never stop the others)
        outcome.status = "failed"
        outcome.notes.append(f"grader error: {type(exc).__name__}: {exc}")
    outcome.seconds = time.monotonic() - start
    return outcome


def _grade(course: Path, lesson: Lesson, student: str, settings: Settings, lock: threading.Lock,
           outcome: Outcome) -> None:
    assignment = lesson.slug
    scratch = course / ".grading" / assignment / student
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch_course = scratch / "course"
    submitted = scratch_course / "submitted" / student / assignment
    submitted.mkdir(parents=True)
    (scratch_course / "nbgrader_config.py").write_text(config_text())
    shutil.copytree(course / "source" / assignment, scratch_course / "source" / assignment)
    _copy_submission(course / "submitted" / student / assignment, submitted, outcome)
    with lock:
        _copy_gradebook(course / "gradebook.db", scratch_course / "gradebook.db")

    env = grading_env(lesson)
    hide = hidden_paths(course)
    # Kernel sockets need short paths (a socket's path has at most 107 bytes): one folder per
    # submission under the run's folder, which every sandbox hides but its own.
    runtime = Path(tempfile.mkdtemp(prefix="", dir=settings.kernel_root()))
    hide = [*hide, str(settings.kernel_root())]
    kernel_config = scratch / "sandbox.json"
    limits = settings.kernel(lesson)
    sandbox.Config(workdir="", hide=hide, limits=limits, outcome_file=str(scratch / "kernel-outcome.json")).dump(kernel_config)
    env.update(JUPYTER_PATH=str(_kernelspec(scratch / "jupyter")), JUPYTER_RUNTIME_DIR=str(runtime),
               **{sandbox.CONFIG_ENV: str(kernel_config)})
    run = nbgrader(
        scratch_course, "autograde", assignment, "--student", student, "--force",
        f"--Execute.timeout={settings.cell_seconds(lesson)}", f"--Execute.kernel_name={KERNEL}",
        "--KernelManager.transport=ipc", f"--KernelManager.ip={runtime / 'kernel'}",
        f"--KernelManager.connection_file={runtime / 'kernel.json'}",
        env=env, timeout=limits.wall_s + 120,
    )
    log_dir = course / "logs" / assignment
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{student}.log").write_text(run.output)
    for text in notes_from_log(run.output, hidden_test_cells(course / "source" / assignment)):
        outcome.note(text)
    for text in deleted_cells(course / "source" / assignment, submitted):
        outcome.note(text)
    kernel_outcome = scratch / "kernel-outcome.json"
    if kernel_outcome.exists():
        reason = json.loads(kernel_outcome.read_text()).get("reason")
        if reason:
            outcome.note(f"notebook kernel {reason}")
    if run.returncode != 0:
        outcome.note(f"nbgrader could not finish the notebook (exit {run.returncode}); the library "
                     f"was scored by the trusted checks; read the submission in submitted/{student}/{assignment}/")
    autograded = scratch_course / "autograded" / student / assignment
    if autograded.is_dir():
        for text in notes_from_notebooks(autograded):
            outcome.note(text)

    verdicts = trusted.TrustedResult()
    if lesson.modules and not trusted.has_cases(lesson):
        outcome.note(f"no trusted cases for lesson {lesson.number} (autograder/cases/lesson{lesson.number}.py): "
                     "its autograded scores come from the notebook alone")
    if trusted.has_cases(lesson) and lesson.modules:
        verdicts = trusted.score(lesson, _library(submitted, lesson), scratch / "worker", hide,
                                 settings.worker_limits, env={**env, "PATH": env["PATH"]})
        for text in verdicts.notes:
            outcome.note(text, review=not text.startswith("library missing"))

    with lock:
        _merge(course, scratch_course, lesson, student, verdicts, outcome)
        if autograded.is_dir():
            target = course / "autograded" / student / assignment
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(autograded, target)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(runtime, ignore_errors=True)


def _merge(course: Path, scratch_course: Path, lesson: Lesson, student: str,
           verdicts: trusted.TrustedResult, outcome: Outcome) -> None:
    """Write the submission's grades into the real gradebook (the caller holds the lock)."""
    assignment = lesson.slug
    with Gradebook(f"sqlite:///{scratch_course / 'gradebook.db'}") as scratch_book:
        try:
            done = scratch_book.find_submission(assignment, student)
            timestamp = done.timestamp
            found = {(g.notebook.name, g.name): (g.auto_score, g.needs_manual_grade)
                     for nb in done.notebooks for g in nb.grades}
            comments = {(c.notebook.name, c.name): c.auto_comment for nb in done.notebooks for c in nb.comments}
        except MissingEntry:
            timestamp, found, comments = None, {}, {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notices from inside nbgrader's API
        book.update_or_create_student(student)
        extra = {"timestamp": timestamp} if timestamp else {}
        submission = book.update_or_create_submission(assignment, student, **extra)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                key = (notebook.name, grade.name)
                in_notebook, manual = found.get(key, (None, False))
                verdict = verdicts.cells.get(grade.name)
                if verdict is not None:
                    grade.auto_score = grade.max_score if verdict.passed else 0.0
                    grade.needs_manual_grade = False
                    if in_notebook is not None and in_notebook != grade.auto_score:
                        outcome.note(f"{grade.name}: the notebook gave {in_notebook:g}, the trusted check "
                                     f"{grade.auto_score:g} (recorded)")
                    if not verdict.passed:
                        outcome.note(f"{grade.name} not passed: {verdict.failure[:120]}", review=False)
                elif key in found:
                    grade.auto_score, grade.needs_manual_grade = in_notebook, manual
                else:  # nbgrader recorded nothing: score 0, or hand-grade a written answer
                    written = grade.cell.cell_type == "markdown"
                    grade.auto_score = None if written else 0.0
                    grade.needs_manual_grade = written
            for comment in notebook.comments:
                comment.auto_comment = comments.get((notebook.name, comment.name), comment.auto_comment)
        book.db.commit()
        submission = book.find_submission(assignment, student)
        outcome.score, outcome.max_score = submission.score, submission.max_score
        if submission.needs_manual_grade:
            outcome.note("written answers await hand grading in formgrader", review=False)


# --- the command ---------------------------------------------------------------------------------

def write_report(course: Path, outcomes: list[Outcome]) -> Path:
    path = course / REPORT
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Outcome("", "").row()))
        writer.writeheader()
        for outcome in outcomes:
            writer.writerow(outcome.row())
    return path


def grade(course: Path, assignment: str | None = None, cell_timeout: int | None = None, jobs: int = 1,
          settings: Settings | None = None) -> int:
    """Grade every collected submission (of ``assignment``, if given); 1 if any failed."""
    todo = submissions(course, assignment)
    if not todo:
        print(f"No submissions under {course / 'submitted'}" + (f" for {assignment}" if assignment else ""))
        return 1
    missing = sandbox.missing_protections()
    if missing:
        print("The grading sandbox is incomplete on this machine: " + "; ".join(missing))
        print("Refusing to run submissions without it.")
        return 2
    settings = settings or Settings(cell_timeout=cell_timeout)
    settings.kernel_root()  # made once, before the threads share it
    lock = threading.Lock()
    run = os.environ[sandbox.RUN_ENV] = uuid.uuid4().hex[:8]  # inherited by every sandbox launcher
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(grade_one, course, a, s, settings, lock) for a, s in todo]
            outcomes = []
            for future in futures:
                outcome = future.result()
                score = "-" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score:g}"
                print(f"{outcome.assignment:16} {outcome.student:18} {outcome.status:7} {score:>9} "
                      f"{outcome.seconds:6.1f}s  {'; '.join(outcome.notes)}")
                outcomes.append(outcome)
    finally:
        shutil.rmtree(settings.kernel_root(), ignore_errors=True)
        settings._kernels = None
        sandbox.sweep_cgroups(run)
    report = write_report(course, outcomes)
    export = nbgrader(course, "export", "--to", str(course / GRADES))
    if export.returncode != 0:
        print(f"nbgrader export failed (exit {export.returncode}):\n{export.output[-2000:]}")
        return 1
    failed = [o for o in outcomes if o.status == "failed"]
    review = [o for o in outcomes if o.status == "review"]
    print(f"\n{len(outcomes)} submissions: {len(outcomes) - len(failed) - len(review)} graded, "
          f"{len(review)} to review, {len(failed)} failed. Report: {report}; grades: {course / GRADES}")
    return 1 if failed else 0
