"""The adversarial corpus (tests/adversarial/corpus.py), graded in one batch: every hostile or
broken submission gets exactly its stated outcome, nothing outside its scratch folder changes, and
the gradebook stays consistent."""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from attnlab.lessons import lesson
from autograder import grade as grading
from autograder import paths, sandbox
from autograder.feedback import feedback
from tests.adversarial.corpus import Kit, corpus

PLANTED_NAME, PLANTED_TOKEN = "ATTNLAB_PLANTED_API_TOKEN", "planted-" + uuid.uuid4().hex

LESSON = lesson("02")
# ADVERSARIAL_ONLY=name,name grades only those (while working on the grader); the full corpus otherwise.
_ONLY = {name for name in os.environ.get("ADVERSARIAL_ONLY", "").split(",") if name}
CORPUS = {adversary.name: adversary for adversary in corpus() if not _ONLY or adversary.name in _ONLY}
SETTINGS = grading.Settings(
    cell_timeout=60,  # generous: an honest cell must never time out, even on a loaded machine
    kernel_limits=sandbox.Limits(wall_s=150, cpu_s=300),
    worker_limits=sandbox.Limits(wall_s=30, cpu_s=60, memory_bytes=2 * 1024**3),
)

pytestmark = [
    pytest.mark.skipif(bool(sandbox.missing_protections()), reason="the grading sandbox is incomplete here: "
                       + "; ".join(sandbox.missing_protections())),
    pytest.mark.timeout(3600),  # the whole corpus is graded once, in the first test's fixture
]


def _fingerprint(folders: list[Path]) -> dict[str, str]:
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _cgroups() -> set[Path]:
    return {p for p in Path("/sys/fs/cgroup").rglob("attnlab-*") if p.is_dir()}


class Listener:
    """A server of the host that records any connection (none may arrive from a sandbox): on a
    localhost port, a Unix socket path, or an abstract Unix socket name."""

    def __init__(self, family=socket.AF_INET, address=("127.0.0.1", 0)):
        self.server = socket.socket(family)
        self.server.bind(address)
        self.server.listen()
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1] if family == socket.AF_INET else None
        self.connections = 0
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                connection, _ = self.server.accept()
                self.connections += 1
                connection.close()
            except OSError:
                pass

    def close(self):
        self.running = False
        self.thread.join()
        self.server.close()


@pytest.fixture(scope="module")
def graded(built_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("adversarial") / "course"
    shutil.copytree(built_course, course)
    canary = tmp_path_factory.mktemp("canary") / "canary.txt"
    canary.write_text("untouched")
    listener = Listener()
    unix_path = tmp_path_factory.mktemp("sockets") / "host.sock"
    marker = f"attnlab-adversary-{uuid.uuid4().hex[:8]}"
    unix = Listener(socket.AF_UNIX, str(unix_path))
    abstract = Listener(socket.AF_UNIX, b"\0" + marker.encode())
    release = course / "release" / LESSON.slug
    kit = Kit(notebook=release / LESSON.notebook, reference=(paths.REFERENCE_MODULES / "attention.py").read_text(),
              stub=(release / "attention.py").read_text(), canary=canary, port=listener.port, course=course,
              unix_socket=unix_path, abstract_socket=marker, marker=marker)
    for name, adversary in CORPUS.items():
        folder = course / "submitted" / name / LESSON.slug
        folder.mkdir(parents=True)
        adversary.build(kit, folder)
    protected = [paths.SOLUTIONS, paths.ROOT / "notebooks", paths.LIBRARY, paths.ROOT / "autograder",
                 course / "source", course / "release", course / "submitted"]
    before = _fingerprint(protected)
    cgroups_before = _cgroups()
    readme = (paths.ROOT / "README.md").read_bytes()
    hostname = socket.gethostname()
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    os.environ[PLANTED_NAME] = PLANTED_TOKEN  # a secret of the grader's: no page may show it
    try:
        status = grading.grade(course, LESSON.slug, jobs=2, settings=SETTINGS)
        feedback_status = feedback(course, [LESSON.slug])
    finally:
        os.environ.pop(PLANTED_NAME, None)
        for server in (listener, unix, abstract):
            server.close()
    with (course / grading.REPORT).open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    return {"course": course, "status": status, "report": report, "before": before, "protected": protected,
            "cgroups_before": cgroups_before, "canary": canary, "readme": readme, "marker": marker,
            "connections": listener.connections + unix.connections + abstract.connections,
            "hostname": hostname, "core_pattern": core_pattern, "feedback_status": feedback_status}


@pytest.mark.skipif(bool(_ONLY), reason="ADVERSARIAL_ONLY grades a part of the corpus")
def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 37


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_submission_gets_its_outcome(graded, name):
    adversary, row = CORPUS[name], graded["report"][name]
    assert float(row["autograded"]) == adversary.score, row
    statuses = adversary.status if isinstance(adversary.status, set) else {adversary.status}
    assert row["status"] in statuses, row
    if adversary.note:
        assert re.search(adversary.note, row["notes"]), row["notes"]


def test_nothing_outside_the_scratch_folders_changed(graded):
    assert _fingerprint(graded["protected"]) == graded["before"]
    assert graded["canary"].read_text() == "untouched"
    assert (paths.ROOT / "README.md").read_bytes() == graded["readme"]
    assert graded["connections"] == 0, "a sandbox reached a server of the host"
    marker = graded["marker"]
    assert not [p for p in (Path("/dev/shm") / marker, Path("/dev/mqueue") / marker, Path("/dev") / marker) if p.exists()]
    assert socket.gethostname() == graded["hostname"]
    assert Path("/proc/sys/kernel/core_pattern").read_text() == graded["core_pattern"]


def test_notes_come_from_the_grader_only(graded):
    notes = " ".join(row["notes"] for row in graded["report"].values())
    assert "INSTRUCTOR NOTE" not in notes and "forged" not in notes
    forged = graded["report"]["forges_notes_on_stderr"]["notes"]
    assert "was edited" not in forged and "time limit" not in forged, forged


def test_bounded_outputs(graded):
    course = graded["course"]
    assert (course / "logs" / LESSON.slug / "floods_stderr_1_gib.kernel.log").stat().st_size < 2 * 1024**2
    for student in ("floods_stdout_100_mb", "floods_stderr_1_gib"):
        notebook = course / "autograded" / student / LESSON.slug / LESSON.notebook
        assert notebook.stat().st_size < 6 * 1024**2, student
    assert all((course / "logs" / LESSON.slug / f"{s}.log").stat().st_size < 2 * 1024**2 for s in CORPUS)


def test_feedback_for_the_whole_corpus_holds_no_secret(graded):
    """Every page was generated and scanned (one page nbgrader cannot render stops no other) and
    none was withheld: hidden tests hold no code, and the sandbox never saw the grader's secrets."""
    course = graded["course"]
    assert graded["feedback_status"] == 0
    pages = {p.parent.parent.name: p for p in (course / "feedback").glob(f"*/{LESSON.slug}/*.html")}
    for student in ("captures_cell_sources", "marker_in_a_comment", "prints_environment", "honest"):
        assert student in pages, sorted(pages)
    environment_page = pages["prints_environment"].read_text()
    assert "HOME" in environment_page and PLANTED_TOKEN not in environment_page


def test_no_process_or_cgroup_is_left_behind(graded):
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "attnlab-orphan" not in processes
    assert _cgroups() - graded["cgroups_before"] == set()


def test_the_gradebook_is_consistent(graded):
    course = graded["course"]
    with sqlite3.connect(course / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submissions = gradebook.assignment_submissions(LESSON.slug)
        assert sorted(s.student.id for s in submissions) == sorted(CORPUS)
        for submission in submissions:
            assert 0 <= submission.score <= submission.max_score == LESSON.points
    assert graded["status"] == 0, "no submission may end as 'failed'"
