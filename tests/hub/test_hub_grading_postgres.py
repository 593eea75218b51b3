"""Grading on two machines into one gradebook: nbgrader's gradebook in PostgreSQL
(``CourseDirectory.db_url``), and two ``python -m autograder grade`` processes, each on its own copy
of the course directory (standing in for two grading machines), splitting the students and writing
into the one database at the same time. Every grade lands exactly once, and nbgrader's export from
the database matches what the two graders reported.

The database asks for a password, as a real gradebook server does, and no grader may show it on a
command line (every user of the machine can read those): one grader reads the URL, password
included, from a file only its user can read (``--db-url-file``); the other reads nbgrader's own
setting, as ``autograder build`` and ``autograder feedback`` do (an ``nbgrader_config.py`` in a
Jupyter config folder), a URL without a password, which PostgreSQL's client library completes
from a ``~/.pgpass`` file (here named by ``PGPASSFILE``). While they run, every process's command
line is watched for the password.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from sqlalchemy import create_engine, text

from attnlab.lessons import lesson
from tests.hub.conftest import ARTIFACTS
from tests.hub.hubdriver import ROOT, SUMMARY

LESSON = lesson("02")
REFERENCE = (ROOT / "solutions" / "attnlab" / "attention.py").read_text()
HALF = REFERENCE.replace("scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0  # forgot the square root")
# the two grading machines and the students each grades
MACHINES = {"machine-a": {"ada": REFERENCE, "ben": HALF}, "machine-b": {"cleo": None, "dan": REFERENCE}}

pytestmark = pytest.mark.timeout(1800)


class CommandLines(threading.Thread):
    """Reads every process's command line (/proc/PID/cmdline, what ``ps`` shows) every 50 ms until
    stopped: which held ``secret``, and a sample of the others."""

    def __init__(self, secret: str):
        super().__init__(daemon=True)
        self.secret, self.running = secret.encode(), True
        self.leaked: set[str] = set()
        self.seen: set[str] = set()

    def run(self) -> None:
        while self.running:
            for path in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    line = path.read_bytes()
                except OSError:
                    continue  # the process ended
                text = line.replace(b"\0", b" ").decode(errors="replace")
                if self.secret in line:
                    self.leaked.add(text)
                elif "autograder" in text or "nbgrader" in text:
                    self.seen.add(text)
            time.sleep(0.05)

    def stop(self) -> None:
        self.running = False
        self.join()


def _private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def _autograded(source: Path, prefixes=("",)) -> float:
    return sum(c.metadata["nbgrader"]["points"] for c in nbformat.read(source, as_version=4).cells
               if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
               and c.metadata["nbgrader"]["grade_id"].startswith(prefixes))


def _submit(course: Path, student: str, library: str | None) -> None:
    folder = course / "submitted" / student / LESSON.slug
    shutil.copytree(course / "release" / LESSON.slug, folder)
    if library is not None:
        (folder / "attention.py").write_text(library)


def test_two_graders_write_one_postgresql_gradebook_at_once(postgres, tmp_path):
    # nbgrader's setting: the course's gradebook is the database (what an instructor writes once),
    # its URL without the password, which libpq finds in the pgpass file
    config = tmp_path / "jupyter-config"
    config.mkdir()
    (config / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.db_url = {postgres.url!r}\n")
    pgpass = _private_file(tmp_path / "pgpass", postgres.pgpass_line())
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PG") and k != "ATTNLAB_GRADEBOOK_URL"}
    with_setting = {**clean, "JUPYTER_CONFIG_PATH": str(config), "PGPASSFILE": str(pgpass)}
    url_file = _private_file(tmp_path / "gradebook-url", postgres.url_with_password + "\n")

    base = tmp_path / "course"
    built = subprocess.run([sys.executable, "-m", "autograder", "build", "--course", str(base), "--lesson", "02"],
                           cwd=ROOT, env=with_setting, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr  # the assignment is now in the database

    commands = {}
    for machine, students in MACHINES.items():
        course = tmp_path / machine
        shutil.copytree(base, course)
        for student, library in students.items():
            _submit(course, student, library)
        argv = [sys.executable, "-m", "autograder", "grade", "--course", str(course), "--lesson", "02"]
        if machine == "machine-a":
            commands[machine] = (argv + ["--db-url-file", str(url_file)], clean)
        else:
            commands[machine] = (argv, with_setting)

    watcher = CommandLines(postgres.password)
    watcher.start()
    # the watcher sees a password on a command line when there is one
    canary = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)", postgres.password])
    time.sleep(1)
    canary.kill()
    canary.wait()
    assert watcher.leaked, "the watcher missed a command line holding the password"
    watcher.leaked.clear()
    start = time.monotonic()
    running = {machine: subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True) for machine, (argv, env) in commands.items()}
    try:
        outputs = {machine: process.communicate(timeout=1500)[0] for machine, process in running.items()}
    finally:
        watcher.stop()
    seconds = time.monotonic() - start
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = "".join(f"--- {machine}\n{output}\n" for machine, output in outputs.items())
    (ARTIFACTS / "postgres-grading.txt").write_text(log + f"both graders done in {seconds:.0f} s\n")
    print(log, f"both graders done in {seconds:.0f} s")
    SUMMARY.append(f"PostgreSQL gradebook: two graders, {sum(map(len, MACHINES.values()))} submissions, "
                   f"done in {seconds:.0f} s")
    assert all(process.returncode == 0 for process in running.values()), log
    assert postgres.password not in log
    # no grader process showed the password, and the watcher did see them: both graders, the
    # notebooks' runs and the export each one starts
    assert watcher.leaked == set()
    for part in ("-m autograder grade", "autograder.autograde_run", "nbgrader export"):
        assert any(part in line for line in watcher.seen), (part, sorted(watcher.seen)[:20])

    reported = {}
    for machine in MACHINES:
        with (tmp_path / machine / "grading_report.csv").open() as handle:
            rows = {row["student"]: row for row in csv.DictReader(handle)}
        assert sorted(rows) == sorted(MACHINES[machine])  # each grader graded its own students only
        reported.update(rows)

    source = base / "source" / LESSON.slug / LESSON.notebook
    full = _autograded(source)
    expected = {"ada": full, "ben": _autograded(source, ("softmax", "attention_numpy")), "cleo": 0.0, "dan": full}
    assert {student: float(row["autograded"]) for student, row in reported.items()} == expected

    # exactly once: one submission per student, one grade per graded cell of each submission
    cells = sum(1 for c in nbformat.read(source, as_version=4).cells if c.metadata.get("nbgrader", {}).get("grade"))
    engine = create_engine(postgres.url_with_password)
    with engine.connect() as db:
        per_student = dict(db.execute(text(
            "SELECT s.student_id, count(*) FROM submitted_assignment s JOIN assignment a ON a.id = s.assignment_id "
            "WHERE a.name = :name GROUP BY s.student_id"), {"name": LESSON.slug}).all())
        grades = dict(db.execute(text(
            "SELECT s.student_id, count(g.id) FROM grade g JOIN submitted_notebook n ON n.id = g.notebook_id "
            "JOIN submitted_assignment s ON s.id = n.assignment_id GROUP BY s.student_id")).all())
    engine.dispose()
    assert per_student == {student: 1 for student in expected}
    assert grades == {student: cells for student in expected}

    # nbgrader's export from the database matches the two graders' reports
    exported_csv = tmp_path / "exported.csv"
    export = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.db_url={postgres.url}",
                             "--to", str(exported_csv)], cwd=base, capture_output=True, text=True, timeout=300,
                            env=with_setting)
    assert export.returncode == 0, export.stdout + export.stderr
    with exported_csv.open() as handle:
        exported = {row["student_id"]: row for row in csv.DictReader(handle) if row["assignment"] == LESSON.slug}
    assert sorted(exported) == sorted(expected)
    for student, row in exported.items():
        assert float(row["score"]) == float(reported[student]["score"]), (student, row, reported[student])
        assert float(row["max_score"]) == LESSON.points


def test_the_gradebook_url_from_the_environment_reaches_the_database(postgres, tmp_path):
    """``ATTNLAB_GRADEBOOK_URL`` is the third place the grader looks; and without the password
    (neither in the URL nor in a pgpass file) the server refuses, so the tests above prove the
    password was delivered."""
    from autograder.gradebook_url import ENV, resolve

    url = resolve(tmp_path, environ={ENV: postgres.url_with_password})
    engine = create_engine(url)
    with engine.connect() as db:
        assert db.execute(text("SELECT 1")).scalar() == 1
    engine.dispose()
    no_password = subprocess.run(
        [sys.executable, "-c", f"import sqlalchemy; sqlalchemy.create_engine({postgres.url!r}).connect()"],
        capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PG")}, "PGPASSFILE": str(tmp_path / "none")})
    assert no_password.returncode != 0 and "password" in no_password.stderr, no_password.stderr[-500:]
