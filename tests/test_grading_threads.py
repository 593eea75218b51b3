"""With ``grade --share-cores``, submissions graded at once share the machine's cores: each
sandboxed kernel and trusted worker gets torch's and numpy's thread pools sized so that together
they do not outnumber the cores (``autograder.grade.threads_per_submission``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.lessons import lesson
from autograder import grade as grading

CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("jobs, expected", [(1, CORES), (2, max(1, CORES // 2)), (CORES * 4, 1), (0, CORES)])
def test_the_cores_are_shared_among_the_jobs(jobs, expected):
    assert grading.threads_per_submission(jobs) == expected


def test_the_sandbox_environment_sizes_every_thread_pool_only_when_told():
    sized = grading.sandboxed_env(lesson("02"), threads=1)
    assert {name: sized[name] for name in grading.THREAD_ENV} == dict.fromkeys(grading.THREAD_ENV, "1")
    assert not set(grading.THREAD_ENV) & set(grading.sandboxed_env(lesson("02")))


def test_torch_in_that_environment_uses_the_threads_given():
    code = "import torch; print(torch.get_num_threads())"
    for threads in (1, 2):
        env = {**grading.sandboxed_env(lesson("02"), threads=threads), "PATH": os.environ["PATH"]}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert done.stdout.split() == [str(threads)]


def test_grade_passes_the_settings_threads_on(monkeypatch, tmp_path):
    seen = []

    def fake_grade_one(course, assignment, student, settings, lock):
        seen.append(settings.threads)
        return grading.Outcome(assignment, student)

    monkeypatch.setattr(grading, "grade_one", fake_grade_one)
    monkeypatch.setattr(grading, "submissions", lambda course, assignment=None: [("02_attention", "ada")])
    monkeypatch.setattr(grading.sandbox, "missing_protections", lambda: [])
    monkeypatch.setattr(grading, "nbgrader", lambda *a, **k: type("Done", (), {"returncode": 0, "output": ""})())
    monkeypatch.setattr(grading.late, "deadlines", lambda course: {})
    monkeypatch.setattr(grading.late, "plugin", lambda course: None)
    course = Path(tmp_path)
    grading.grade(course, "02_attention", jobs=2)
    grading.grade(course, "02_attention", jobs=2, settings=grading.Settings(threads=3))
    assert seen == [None, 3]  # torch's default unless told (--share-cores): see Settings.threads


def test_the_command_line_shares_the_cores_when_asked(monkeypatch):
    from autograder import __main__ as cli

    seen = []
    monkeypatch.setattr(grading, "grade", lambda course, assignment, jobs, settings, **kw: seen.append(settings.threads) or 0)
    assert cli.main(["grade", "--jobs", "2", "--share-cores"]) == 0
    assert cli.main(["grade", "--jobs", "2"]) == 0
    assert seen == [grading.threads_per_submission(2), None]
