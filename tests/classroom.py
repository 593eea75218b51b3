"""A class through nbgrader's exchange, for the tests: one Unix account per learner, an exchange
folder of its own, and every exchange step taken by nbgrader's own exchange classes, as the
Assignment List of a learner's JupyterLab and the instructor's formgrader take them.

Real accounts, not ``--student``: nbgrader names a submission after the Unix user who submits it,
checks at collection that the submitted files belong to that user, and keeps each learner's
submission records (which its feedback is found by) in that user's home. One process per learner
and step takes the steps of every lesson at once (importing nbgrader costs seconds; a command per
lesson would cost minutes).

    with Classroom.open(folder, ["attn28-a", "attn28-b"]) as room:
        room.instructor("ReleaseAssignment", course, slugs)
        room.learner("attn28-a", "submit", slugs, work={slug: {"attention.py": text}})
        room.instructor("Collect", course, slugs)
        ...

Needs root (accounts, ``runuser``), as grading does (its sandbox drops to an unprivileged user).
Learners run the course's Python as the class hub does: where its interpreter is private to root
(pyenv keeps it under /root), a copy made by the hub's own ``prepare.base_interpreter``, with the
course environment's packages on its path.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

COURSE_ID = "attention-course"  # as autograder/nbgrader_config.py names it
ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "jupyterhub"


def exchange_step(step: str, assignment: str, exchange: Path, course: Path | None = None) -> None:
    """One exchange step ("FetchAssignment", "Submit", "FetchFeedback" as a learner, from the working
    folder; "ReleaseAssignment", "Collect", "ReleaseFeedback" as the instructor, of ``course``) of
    ``assignment``, through ``ExchangeFactory`` (so a configured exchange plugin is honoured)."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    from traitlets.config import Config

    config = Config()
    config.Exchange.root = str(exchange)
    config.CourseDirectory.course_id = COURSE_ID
    config.CourseDirectory.assignment_id = assignment
    if course is not None:
        config.CourseDirectory.root = str(course)
    coursedir = CourseDirectory(config=config)
    authenticator = Authenticator(config=config)
    making = getattr(ExchangeFactory(config=config), step)
    making(coursedir=coursedir, authenticator=authenticator, config=config).start()


def _learner(action: str, exchange: Path, assignments: list[str], work: dict) -> None:
    """A learner's side, in their home: ``submit`` fetches each assignment, writes the learner's
    files into it (``work``: assignment -> file name -> text; none: submitted as fetched) and
    submits it; ``feedback`` fetches the feedback of each."""
    for assignment in assignments:
        if action == "submit":
            exchange_step("FetchAssignment", assignment, exchange)
            for name, text in work.get(assignment, {}).items():
                Path(assignment, name).write_text(text)
            exchange_step("Submit", assignment, exchange)
        else:
            exchange_step("FetchFeedback", assignment, exchange)


@dataclass
class Classroom:
    """Learner accounts with homes under ``folder``, and the exchange ``folder/exchange``."""

    folder: Path
    learners: list[str]
    python: list[str] = None  # how a learner runs Python: the interpreter, and its environment
    python_env: dict = None

    @property
    def exchange(self) -> Path:
        return self.folder / "exchange"

    def home(self, learner: str) -> Path:
        return self.folder / "homes" / learner

    @classmethod
    @contextlib.contextmanager
    def open(cls, learners: list[str]):
        """Make the accounts and the exchange; remove both afterwards (and anything still running
        as a learner)."""
        folder = Path(tempfile.mkdtemp(prefix="attnlab-classroom-"))
        folder.chmod(0o755)  # learners reach their homes and the exchange through it
        room = cls(folder, list(learners))
        try:
            room.exchange.mkdir(mode=0o777)
            room.exchange.chmod(0o777)  # as README's `chmod 777`: every learner writes its inbound
            (folder / "homes").mkdir(mode=0o755)
            room.python, room.python_env = _learners_python(folder)
            for learner in learners:
                _remove_account(learner)  # left over from a run that was killed
                done = subprocess.run(["useradd", "--create-home", "--home-dir", str(room.home(learner)),
                                       "--shell", "/bin/sh", learner], capture_output=True, text=True, timeout=60)
                if done.returncode != 0:
                    raise RuntimeError(f"useradd {learner}: {done.stderr}")
            yield room
        finally:
            for learner in learners:
                _remove_account(learner)
            shutil.rmtree(folder, ignore_errors=True)

    def learner(self, learner: str, action: str, assignments: list[str], work: dict | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess:
        """Run ``_learner`` as the Unix user ``learner``, in their home, with a clean environment."""
        home = self.home(learner)
        orders = home / "work.json"
        orders.write_text(json.dumps({"action": action, "exchange": str(self.exchange),
                                      "assignments": assignments, "work": work or {}}))
        orders.chmod(0o644)
        environment = {"HOME": str(home), "USER": learner, "LOGNAME": learner, "PATH": "/usr/bin:/bin",
                       "OMP_NUM_THREADS": "1", **self.python_env}
        done = subprocess.run(["runuser", "-u", learner, "--", "env", "-i",
                               *[f"{k}={v}" for k, v in environment.items()],
                               *self.python, "-m", "tests.classroom", str(orders)],
                              cwd=home, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{learner} {action}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def instructor(self, step: str, course: Path, assignments: list[str]) -> None:
        """An instructor's exchange step for each assignment, in this process (as root)."""
        for assignment in assignments:
            exchange_step(step, assignment, self.exchange, course)


def _learners_python(folder: Path) -> tuple[list[str], dict[str, str]]:
    """The interpreter learners run (the course's, or the hub's copy of it under ``folder``) and the
    environment it needs: the course environment's packages and this clone on its path."""
    import sysconfig

    sys.path.insert(0, str(DEPLOY))
    try:
        from prepare import base_interpreter, library_path
        from settings import Settings
    finally:
        sys.path.remove(str(DEPLOY))
    settings = Settings(state=folder / "hub-state")
    settings.state.mkdir(mode=0o755)
    interpreter = base_interpreter(settings)
    env = {**library_path(settings),
           "PYTHONPATH": os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])}
    return [str(interpreter), "-s"], env


def _remove_account(learner: str) -> None:
    try:
        uid = pwd.getpwnam(learner).pw_uid
    except KeyError:
        return
    for process in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error):
            if process.info["uids"] and process.info["uids"].real == uid:
                process.kill()
    subprocess.run(["userdel", "--remove", learner], capture_output=True, timeout=60)


if __name__ == "__main__":  # a learner's process (Classroom.learner)
    orders = json.loads(Path(sys.argv[1]).read_text())
    os.chdir(Path(sys.argv[1]).parent)
    _learner(orders["action"], Path(orders["exchange"]), orders["assignments"], orders["work"])
