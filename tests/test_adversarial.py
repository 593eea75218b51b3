"""The adversarial corpus (tests/adversarial/corpus.py), graded in one batch: every hostile or
broken submission gets exactly its stated outcome, nothing outside its scratch folder changes, and
the gradebook stays consistent."""

from __future__ import annotations

import csv
import hashlib
import re
import shutil
import socket
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from attnlab.lessons import lesson
from autograder import grade as grading
from autograder import paths, sandbox
from tests.adversarial.corpus import Kit, corpus

LESSON = lesson("02")
CORPUS = {adversary.name: adversary for adversary in corpus()}
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
    """A localhost server that records any connection (none may arrive from a sandbox)."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
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
    release = course / "release" / LESSON.slug
    kit = Kit(notebook=release / LESSON.notebook, reference=(paths.REFERENCE_MODULES / "attention.py").read_text(),
              stub=(release / "attention.py").read_text(), canary=canary, port=listener.port, course=course)
    for name, adversary in CORPUS.items():
        folder = course / "submitted" / name / LESSON.slug
        folder.mkdir(parents=True)
        adversary.build(kit, folder)
    protected = [paths.SOLUTIONS, paths.ROOT / "notebooks", paths.LIBRARY, paths.ROOT / "autograder",
                 course / "source", course / "release", course / "submitted"]
    before = _fingerprint(protected)
    cgroups_before = _cgroups()
    readme = (paths.ROOT / "README.md").read_bytes()
    try:
        status = grading.grade(course, LESSON.slug, jobs=2, settings=SETTINGS)
    finally:
        listener.close()
    with (course / grading.REPORT).open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    return {"course": course, "status": status, "report": report, "before": before, "protected": protected,
            "cgroups_before": cgroups_before,
            "canary": canary, "connections": listener.connections, "readme": readme}


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 22


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_submission_gets_its_outcome(graded, name):
    adversary, row = CORPUS[name], graded["report"][name]
    assert float(row["score"]) == adversary.score, row
    statuses = adversary.status if isinstance(adversary.status, set) else {adversary.status}
    assert row["status"] in statuses, row
    if adversary.note:
        assert re.search(adversary.note, row["notes"]), row["notes"]


def test_nothing_outside_the_scratch_folders_changed(graded):
    assert _fingerprint(graded["protected"]) == graded["before"]
    assert graded["canary"].read_text() == "untouched"
    assert (paths.ROOT / "README.md").read_bytes() == graded["readme"]
    assert graded["connections"] == 0, "a sandbox reached a localhost server"


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
