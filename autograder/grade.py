"""``python -m autograder grade``: grade collected submissions, safely, and export the grades.

For each submission (``submitted/<student>/<assignment>/``), in its own scratch folder under
``.grading/``:

1. the grader looks at the submission itself: a damaged notebook (cut short, or its written answers
   without their nbgrader metadata) is rebuilt from the released one, the answers carried over
   (``autograder.recover``); a missing or unreadable notebook, and every change to
   a graded cell against the released notebook (source, type, flags, points; deleted, duplicated),
   which it puts back in its scratch copy and reports exactly (``autograder.tampering``);
2. ``nbgrader autograde`` runs on a scratch copy of the course (the assignment's source, this
   submission, a copy of the gradebook) through ``autograder.autograde_run``, with the notebook's
   kernel sandboxed (``autograder.sandbox``: an allowlisted view, an unprivileged user, no network,
   limits on time, CPU, memory, processes, files and output) and a per-cell time limit after which
   the cell is interrupted; hidden-test cells hold no test code, only a marker;
3. the lesson's autograded cells are scored outside the notebook by sandboxed workers
   (``autograder.trusted``, cases in ``autograder/cases/lessonNN.py``), which the notebook cannot
   tamper with;
4. under a lock, the real gradebook gets the submission: the trusted scores for autograded cells,
   nbgrader's results for the rest (written answers to hand-grade), and the autograded notebook with
   each trusted verdict written into its cell, for formgrader and feedback.

The whole submission has one deadline (``autograder.budget``): the notebook may use it less what is
kept back for the trusted checks, and the checks end by it. Outputs, logs and answers have byte
caps. Notes in the
report come only from the grader's own structured results (the run record of
``autograde_run``, the kernel launcher's outcome, the trusted verdicts, the grader's checks), never
from text a submission printed. Every submission ends with a row in ``grading_report.csv``:
``graded``, ``review`` (scored, with something an instructor should look at) or ``failed`` (no score
could be recorded, with the reason). Submissions run in parallel with ``--jobs`` and print as they
finish; the gradebook is only ever written by this process, one submission at a time.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader.api import Base, Gradebook, MissingEntry
from sqlalchemy import create_engine
from sqlalchemy import text as sql

from attnlab.lessons import Lesson
from attnlab.lessons import lesson as find_lesson
from attnlab.switch import NO_REFERENCE_ENV, REFERENCE_DIR_ENV, REFERENCE_ENV
from autograder import budget, gradebook_url, late, recover, sandbox, tampering, trusted
from autograder.budget import Deadline
from autograder.course import config_text, nbgrader
from autograder.trusted import quoted

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
    autograded: float | None = None  # score of the autograded cells
    autograded_max: float | None = None
    awaiting_hand_grading: float = 0.0  # points of written answers not graded yet
    score: float | None = None  # the gradebook's total so far
    max_score: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str, review: bool = True) -> None:
        if text not in self.notes:
            self.notes.append(text)
        if review and self.status == "graded":
            self.status = "review"

    def row(self) -> dict:
        def number(x):
            return "" if x is None else f"{x:g}"

        return {"assignment": self.assignment, "student": self.student, "status": self.status,
                "autograded": number(self.autograded), "autograded_max": number(self.autograded_max),
                "awaiting_hand_grading": number(self.awaiting_hand_grading), "score": number(self.score),
                "max_score": number(self.max_score), "seconds": f"{self.seconds:.1f}", "notes": "; ".join(self.notes)}

    def line(self) -> str:
        """The console line of this submission."""
        if self.autograded is None:
            score = "no score"
        else:
            score = f"{self.autograded:g}/{self.autograded_max:g} autograded"
            if self.awaiting_hand_grading:
                score += f", {self.awaiting_hand_grading:g} points await hand grading"
        return (f"{self.assignment:16} {self.student:18} {self.status:7} {score:48} {self.seconds:6.1f}s  "
                f"{'; '.join(self.notes)}")


def submissions(course: Path, assignment: str | None = None) -> list[tuple[str, str]]:
    """(assignment, student) for every collected submission, sorted."""
    found = []
    for folder in sorted((course / "submitted").glob("*/*")):
        if folder.is_dir() and (assignment is None or folder.name == assignment):
            found.append((folder.name, folder.parent.name))
    return sorted(found)


# --- what nbgrader recorded ------------------------------------------------------------------

_STOPPED = {  # exception types that stopped nbgrader (recorded by autograde_run), in words
    "CellTimeoutError": "a cell ignored the interrupt sent at its time limit, so nbgrader stopped the notebook",
    "UnresponsiveKernelError": "the kernel stopped answering, so nbgrader stopped the notebook",
    "DeadKernelError": "the notebook's kernel died (see the kernel note, if any)",
    "Empty": "the kernel did not answer in time",
    "NotJSONError": "the notebook is not valid notebook JSON",
    "SchemaTooOldError": "nbgrader rejected the notebook's cell metadata",
    "SchemaTooNewError": "nbgrader rejected the notebook's cell metadata",
}


def run_notes(record: dict, log_name: str) -> list[str]:
    """Notes from ``autograde_run``'s record: events and the types of exceptions, as data."""
    notes = []
    for event in record.get("events", []):
        cell = quoted(event.get("cell", "a cell"), 60)
        if event.get("event") == "timeout":
            notes.append(f"{cell} ran past the time limit of {event.get('seconds')} s and was interrupted")
        elif event.get("event") == "output_truncated":
            notes.append(f"the output of {cell} was cut at the output limit")
    for name in record.get("exceptions", []):
        short = name.rsplit(".", 1)[-1]
        if short in ("NbGraderException", "SystemExit"):
            continue  # nbgrader's own wrapper around the exception already recorded
        notes.append("nbgrader stopped: " + _STOPPED.get(short, f"an internal error ({short}); see {log_name}"))
    return list(dict.fromkeys(notes))


# --- one submission ------------------------------------------------------------------------------

@dataclass
class Settings:
    cell_timeout: int | None = None  # seconds a cell may run; the lesson's budget when None
    kernel_limits: sandbox.Limits | None = None
    worker_limits: sandbox.Limits = field(default_factory=lambda: sandbox.Limits(wall_s=90, cpu_s=90, memory_bytes=2 * 1024**3))
    submission_wall_s: float | None = None  # the whole submission; the lesson's (autograder.budget) when None
    import_s: float = trusted.IMPORT_SECONDS  # a trusted worker's time to import the library
    max_cell_output_bytes: int = 1024 * 1024  # an interactive figure sends its PNG twice (widget, static twin)
    max_notebook_output_bytes: int = 4 * 1024 * 1024
    log_bytes: int = 1024 * 1024  # of nbgrader's log and of the kernel's own output, each
    db_url: str | None = None  # the gradebook (nbgrader's CourseDirectory.db_url); None: course/gradebook.db
    # CPU threads of each sandboxed kernel and worker (OpenMP, MKL, OpenBLAS: torch's and numpy's
    # pools; ``threads_per_submission``, ``grade --share-cores``); None: torch's own default. Not the
    # default yet: in the one full test run with a share of 1 thread, one kernel of 95 was killed by
    # SIGABRT after its notebook had finished, a cause not yet found.
    threads: int | None = None
    _kernels: Path | None = None

    def gradebook(self, course: Path) -> str:
        return self.db_url or f"sqlite:///{course / 'gradebook.db'}"

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
        return sandbox.Limits(wall_s=wall, cpu_s=int(2 * wall), output_bytes=self.log_bytes)

    def submission_seconds(self, lesson: Lesson) -> float:
        return budget.submission_seconds(lesson, self.submission_wall_s)


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


# The tables of nbgrader's gradebook that define the assignments (no students, no grades).
_DEFINITIONS = ("course", "assignment", "notebook", "base_cell", "grade_cells", "solution_cells", "task_cells",
                "source_cell")


def _copy_gradebook(db_url: str, target: Path) -> None:
    """The scratch gradebook of one submission: a copy of the course's SQLite gradebook or, from a
    database server, the assignments' definitions (all that nbgrader autograde reads there)."""
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url[len("sqlite:///"):]) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        return
    source, copy = create_engine(db_url), create_engine(f"sqlite:///{target}")
    try:
        Base.metadata.create_all(copy)
        with source.connect() as read, copy.begin() as write:
            for table in Base.metadata.sorted_tables:  # parents before children
                if table.name in _DEFINITIONS:
                    rows = [dict(row) for row in read.execute(table.select()).mappings()]
                    if rows:
                        write.execute(table.insert(), rows)
    finally:
        source.dispose()
        copy.dispose()


# The key of the database-wide lock around a merge (any fixed number; the same in every grader).
_MERGE_LOCK = 0x61746E6C


@contextmanager
def _exclusive(db_url: str):
    """Hold a database-wide lock while one submission is written into a PostgreSQL gradebook.

    nbgrader's Gradebook looks a row up, then inserts it if missing, in separate transactions (the
    course row in its constructor, the student, the submission with one row per graded cell). Two
    graders on two machines writing one database at once can both find a row missing and both insert
    it: one then fails on the unique constraint and its submission is lost. The threading lock covers
    the threads of one grader; this lock covers every grader on the database. A SQLite gradebook
    is one machine's file, and SQLite locks it itself."""
    if not db_url.startswith("postgresql"):
        yield
        return
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            connection.execute(sql("SELECT pg_advisory_lock(:key)"), {"key": _MERGE_LOCK})
            try:
                yield
            finally:
                connection.execute(sql("SELECT pg_advisory_unlock(:key)"), {"key": _MERGE_LOCK})
    finally:
        engine.dispose()


def _kernelspec(folder: Path) -> Path:
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "autograder.sandbox", "kernel", "--",
            sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    # Interrupts travel as messages (ipykernel then signals itself): a signal sent to the launcher's
    # process group would not reach a kernel in the sandbox's own session.
    (spec / "kernel.json").write_text(json.dumps(
        {"argv": argv, "display_name": "Python 3 (grading sandbox)", "language": "python", "interrupt_mode": "message"}))
    return folder


def grading_env() -> dict[str, str]:
    """The environment of the trusted processes (nbgrader, the kernel launcher): the grader's own,
    without the reference switch. Sandboxed code never sees it: it gets ``sandboxed_env``."""
    env = {k: v for k, v in os.environ.items() if k not in (REFERENCE_ENV, REFERENCE_DIR_ENV, NO_REFERENCE_ENV)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def threads_per_submission(jobs: int) -> int:
    """The cores this process may use, shared among ``jobs`` submissions graded at once. More
    threads than cores make torch's many small parallel operations wait for threads that another
    kernel keeps off the cores: four honest lesson-02 submissions graded two at a time on 2 cores
    took 91.5 s with 2 threads each, 68.4 s with 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def sandboxed_env(lesson: Lesson, threads: int | None = None) -> dict[str, str]:
    """The whole environment of a lesson's sandboxed kernel and workers (an allowlist); with
    ``threads``, the size of torch's and numpy's thread pools."""
    extra = {NO_REFERENCE_ENV: ",".join(lesson.modules), **trusted.worker_env(lesson)}
    if threads is not None:
        extra.update(dict.fromkeys(THREAD_ENV, str(threads)))
    return sandbox.base_env(extra)


def _library(folder: Path, lesson: Lesson) -> dict[str, bytes]:
    library = {}
    for module in lesson.modules:
        path = folder / f"{module}.py"
        if path.is_file() and not path.is_symlink():
            library[module] = path.read_bytes()
    return library


def run_capped(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, log: Path, limit: int) -> int:
    """Run a trusted command, its output into ``log`` (at most ``limit`` bytes kept); its exit
    status, or 124 when it ran past ``timeout`` and was killed."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    copy = sandbox.CappedCopy(process.stdout, str(log), limit)
    copy.start()
    try:
        code = process.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        code = 124
    copy.join(timeout=30)
    return code


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
    deadline = Deadline(settings.submission_seconds(lesson))
    scored_outside = trusted.has_cases(lesson) and bool(lesson.modules)
    reserve = budget.reserve(deadline.seconds, settings.worker_limits.wall_s) if scored_outside else 0.0
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
        _copy_gradebook(settings.gradebook(course), scratch_course / "gradebook.db")
    trusted_ids = {case.grade_id for case in trusted.load_cases(lesson)} if scored_outside else set()
    # a damaged notebook is first rebuilt from the released one, its written answers carried over
    for text in recover.recover_submission(course / "source" / assignment, course / "release" / assignment, submitted):
        outcome.note(text)
    for text in tampering.restore_submission(course / "source" / assignment, course / "release" / assignment,
                                             submitted, trusted_ids):
        outcome.note(text)

    # 1. nbgrader autograde, the kernel sandboxed, within the budget less the trusted checks'
    # reserve. Kernel sockets need short paths (at most 107 bytes): one folder per submission
    # under the run's folder.
    runtime = Path(tempfile.mkdtemp(prefix="", dir=settings.kernel_root()))
    notebook_s = max(1.0, deadline.left() - reserve)
    limits = settings.kernel(lesson)
    limits = replace(limits, wall_s=float(int(min(limits.wall_s, max(1.0, notebook_s - budget.NBGRADER_SECONDS)))))
    log_dir = course / "logs" / assignment
    log_dir.mkdir(parents=True, exist_ok=True)
    kernel_config = scratch / "sandbox.json"
    sandbox.Config(workdir="", env=sandboxed_env(lesson, settings.threads), limits=limits,
                   outcome_file=str(scratch / "kernel-outcome.json"),
                   log_file=str(log_dir / f"{student}.kernel.log")).dump(kernel_config)
    env = grading_env()
    env.update(JUPYTER_PATH=str(_kernelspec(scratch / "jupyter")), JUPYTER_RUNTIME_DIR=str(runtime),
               **{sandbox.CONFIG_ENV: str(kernel_config)})
    record_path = scratch / "autograde-record.json"
    code = run_capped(
        [sys.executable, "-m", "autograder.autograde_run", str(record_path), "--", assignment,
         "--student", student, "--force", f"--Execute.timeout={settings.cell_seconds(lesson)}",
         f"--Execute.kernel_name={KERNEL}", "--KernelManager.transport=ipc",
         f"--KernelManager.ip={runtime / 'kernel'}", f"--KernelManager.connection_file={runtime / 'kernel.json'}",
         f"--BoundedExecute.max_cell_output_bytes={settings.max_cell_output_bytes}",
         f"--BoundedExecute.max_notebook_output_bytes={settings.max_notebook_output_bytes}",
         # the scratch gradebook, whatever nbgrader's own setting says: only _merge writes the real one
         f"--CourseDirectory.db_url=sqlite:///{scratch_course / 'gradebook.db'}"],
        cwd=scratch_course, env=env, timeout=notebook_s,
        log=log_dir / f"{student}.log", limit=settings.log_bytes,
    )
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {"status": "killed" if code == 124 else f"exit {code}", "exceptions": [], "events": []}
    for text in run_notes(record, f"logs/{assignment}/{student}.log"):
        outcome.note(text)
    kernel_outcome = scratch / "kernel-outcome.json"
    if kernel_outcome.exists():
        done = json.loads(kernel_outcome.read_text())
        if done.get("reason"):
            outcome.note(f"notebook kernel {done['reason']}")
        if done.get("dropped_output_bytes"):
            outcome.note(f"the kernel wrote more than {limits.output_bytes} bytes to its own output; "
                         f"logs/{assignment}/{student}.kernel.log keeps the first {limits.output_bytes}")
    if code == 124:
        outcome.note(f"nbgrader was stopped after {notebook_s:.0f} s, the notebook's share of the submission's "
                     f"time budget of {deadline.seconds:g} s")
    elif code != 0:
        outcome.note(f"nbgrader could not finish the notebook (exit {code}); the library was scored by the "
                     f"trusted checks; read the submission in submitted/{student}/{assignment}/")

    # 2. the trusted checks, outside the notebook
    verdicts = trusted.TrustedResult()
    if lesson.modules and not trusted.has_cases(lesson):
        outcome.note(f"no trusted cases for lesson {lesson.number} (autograder/cases/lesson{lesson.number}.py): "
                     "its autograded scores come from the notebook alone")
    if scored_outside:
        verdicts = trusted.score(lesson, _library(submitted, lesson), scratch / "worker", settings.worker_limits,
                                 sandboxed_env(lesson, settings.threads), deadline=deadline.end,
                                 import_s=settings.import_s)
        for text in verdicts.notes:
            outcome.note(text, review=not text.startswith("library missing"))

    # 3. the real gradebook and the autograded notebook, under the lock; the verdicts also on their
    # own, for the feedback page of a notebook nbgrader could not finish (autograder.summary_page)
    autograded = scratch_course / "autograded" / student / assignment
    if autograded.is_dir():
        write_verdicts(autograded, course / "source" / assignment, verdicts)
    (log_dir / f"{student}.verdicts.json").write_text(json.dumps(
        {grade_id: verdict_text(verdict) for grade_id, verdict in verdicts.cells.items()}))
    with lock:
        _merge(course, scratch_course, lesson, student, verdicts, outcome,
               hidden_test_cells(course / "source" / assignment), settings.gradebook(course))
        target = course / "autograded" / student / assignment
        if target.exists():  # an earlier submission's notebook must not pass for this one's
            shutil.rmtree(target)
        if autograded.is_dir():
            shutil.copytree(autograded, target)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(runtime, ignore_errors=True)


def hidden_test_cells(source: Path) -> set[str]:
    """Grade ids of the cells of the source notebooks in ``source`` that hold hidden tests."""
    ids = set()
    for path in source.glob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            if "BEGIN HIDDEN TESTS" in cell.source:
                ids.add(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
    return ids


def verdict_output(verdict: trusted.CellResult):
    """The trusted verdict of one cell, as a notebook output."""
    how = f"({verdict.cases} cases, run on your library outside this notebook)"
    if verdict.passed:
        return new_output("stream", name="stdout", text=f"Trusted check: passed {how}.\n")
    return new_output("error", ename="TrustedCheckFailed", evalue=f"{verdict.failure} {how}",
                      traceback=[f"TrustedCheckFailed: {verdict.failure}"])


def verdict_text(verdict: trusted.CellResult) -> str:
    """The trusted verdict of one cell in one line, as the grader's own feedback page shows it."""
    output = verdict_output(verdict)
    return output["text"].strip() if verdict.passed else f"Trusted check failed: {output['evalue']}"


def write_verdicts(autograded: Path, source: Path, verdicts: trusted.TrustedResult) -> None:
    """Write each trusted verdict into its cell of the autograded notebooks: a hidden-test cell shows
    the verdict alone (its outputs came from the learner's kernel); a visible check keeps its outputs
    and gets the verdict after them."""
    hidden = hidden_test_cells(source)
    for path in sorted(autograded.glob("*.ipynb")):
        try:
            notebook = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 (nothing to annotate in an unreadable notebook)
            continue
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            verdict = verdicts.cells.get(grade_id)
            if cell.cell_type != "code" or verdict is None:
                continue
            output = verdict_output(verdict)
            cell.outputs = [output] if grade_id in hidden else [*cell.get("outputs", []), output]
        nbformat.write(notebook, path)


def _merge(course: Path, scratch_course: Path, lesson: Lesson, student: str,
           verdicts: trusted.TrustedResult, outcome: Outcome, hidden: set[str], db_url: str) -> None:
    """Write the submission's grades into the real gradebook (the caller holds the lock).
    ``hidden``: grade ids of hidden-test cells, which carry no test in the notebook (so the
    notebook's score for them means nothing). ``db_url``: the real gradebook
    (``Settings.gradebook``)."""
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
    with _exclusive(db_url), Gradebook(db_url) as book, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notices from inside nbgrader's API
        book.update_or_create_student(student)
        extra = {"timestamp": timestamp} if timestamp else {}
        submission = book.update_or_create_submission(assignment, student, **extra)
        auto = auto_max = awaiting = 0.0
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                key = (notebook.name, grade.name)
                in_notebook, manual = found.get(key, (None, False))
                verdict = verdicts.cells.get(grade.name)
                if verdict is not None:
                    grade.auto_score = grade.max_score if verdict.passed else 0.0
                    grade.needs_manual_grade = False
                    if in_notebook is not None and in_notebook != grade.auto_score and grade.name not in hidden:
                        outcome.note(f"{grade.name}: the notebook gave {in_notebook:g}, the trusted check "
                                     f"{grade.auto_score:g} (recorded)")
                    if not verdict.passed:
                        outcome.note(f"{grade.name} not passed: {verdict.failure}", review=False)
                elif key in found:
                    grade.auto_score, grade.needs_manual_grade = in_notebook, manual
                else:  # nbgrader recorded nothing: score 0, or hand-grade a written answer
                    written = grade.cell.cell_type == "markdown"
                    grade.auto_score = None if written else 0.0
                    grade.needs_manual_grade = written
                if grade.cell.cell_type == "markdown":
                    if grade.manual_score is None:
                        awaiting += grade.max_score
                else:
                    auto += grade.score or 0.0
                    auto_max += grade.max_score
            for comment in notebook.comments:
                comment.auto_comment = comments.get((notebook.name, comment.name), comment.auto_comment)
        book.db.commit()
        submission = book.find_submission(assignment, student)
        # nbgrader's late penalty, computed here on the recorded scores (autograder.late says why)
        for text in late.assign_penalties(course, submission):
            outcome.note(text, review=False)
        book.db.commit()
        outcome.score, outcome.max_score = submission.score, submission.max_score
        outcome.autograded, outcome.autograded_max, outcome.awaiting_hand_grading = auto, auto_max, awaiting
        if awaiting:
            outcome.note("written answers await hand grading in formgrader", review=False)


# --- the command ---------------------------------------------------------------------------------

def write_report(course: Path, outcomes: list[Outcome]) -> Path:
    path = course / REPORT
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(Outcome("", "").row()))
        writer.writeheader()
        for outcome in sorted(outcomes, key=lambda o: (o.assignment, o.student)):
            writer.writerow(outcome.row())
    return path


def grade(course: Path, assignment: str | None = None, cell_timeout: int | None = None, jobs: int = 1,
          settings: Settings | None = None, db_url: str | None = None, db_url_file: Path | None = None) -> int:
    """Grade every collected submission (of ``assignment``, if given); 1 if any failed, 2 if grading
    could not start. The grades go to the gradebook ``autograder.gradebook_url`` finds: ``db_url``
    (a database several graders can share, e.g. PostgreSQL), the URL in ``db_url_file``, the
    environment's ``ATTNLAB_GRADEBOOK_URL``, nbgrader's own setting for the course, or
    course/gradebook.db."""
    settings = settings or Settings(cell_timeout=cell_timeout)
    try:
        settings = replace(settings, db_url=gradebook_url.resolve(course, db_url or settings.db_url, db_url_file))
    except gradebook_url.GradebookURLError as error:
        print(f"Cannot grade: {error}")
        return 2
    try:  # a schedule.toml broken since build: say so now, not once per submission after its scores
        late.deadlines(course), late.plugin(course)
    except late.ScheduleError as error:
        print(f"Cannot grade: {error}")
        return 2
    todo = submissions(course, assignment)
    if not todo:
        print(f"No submissions under {course / 'submitted'}" + (f" for {assignment}" if assignment else ""))
        return 1
    missing = sandbox.missing_protections()
    if missing:
        print("The grading sandbox is incomplete on this machine: " + "; ".join(missing))
        print("Refusing to run submissions without it.")
        return 2
    settings.kernel_root()  # made once, before the threads share it
    lock = threading.Lock()
    run = os.environ[sandbox.RUN_ENV] = uuid.uuid4().hex[:8]  # inherited by every sandbox launcher
    outcomes = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(grade_one, course, a, s, settings, lock) for a, s in todo]
            for future in as_completed(futures):  # each line as soon as its submission is done
                outcome = future.result()
                print(outcome.line(), flush=True)
                outcomes.append(outcome)
    finally:
        shutil.rmtree(settings.kernel_root(), ignore_errors=True)
        settings._kernels = None
        sandbox.sweep_cgroups(run)
    report = write_report(course, outcomes)
    # The gradebook's password, if its URL holds one, goes to nbgrader in its environment: never on
    # a command line, which every user of the machine can read.
    url, password_env = gradebook_url.for_child(settings.gradebook(course))
    export = nbgrader(course, "export", f"--CourseDirectory.db_url={url}", "--to", str(course / GRADES),
                      env={**os.environ, **password_env})
    if export.returncode != 0:
        print(f"nbgrader export failed (exit {export.returncode}):\n{export.output[-2000:]}")
        return 1
    failed = [o for o in outcomes if o.status == "failed"]
    review = [o for o in outcomes if o.status == "review"]
    print(f"\n{len(outcomes)} submissions: {len(outcomes) - len(failed) - len(review)} graded, "
          f"{len(review)} to review, {len(failed)} failed. Report: {report}; grades: {course / GRADES}")
    return 1 if failed else 0
