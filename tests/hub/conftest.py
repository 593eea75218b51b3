"""Fixtures of the class-hub tests (``deploy/jupyterhub/``): one hub, started once for the tests of
this folder and stopped after the last of them, with an instructor and ten learners as real Unix
accounts; a browser for the learner who works in JupyterLab; a throwaway PostgreSQL cluster.

They need root (Unix accounts, the hub spawns each server as its user, the grader's sandbox), the
proxy (``npm ci --prefix deploy/jupyterhub``), JupyterHub in the course's environment, and for the
gradebook test Debian's ``postgresql``. Where one is missing the tests are skipped, and the reason
is listed at the end of the run; in CI (``CI=true``) they fail instead. Artifacts (the hub's log,
screenshots, the load test's numbers): ``test-artifacts/hub/``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import chromium_missing
from tests.hub.hubdriver import DEPLOY, ROOT, SUMMARY, Hub, Postgres, add_user, postgres_bin, remove_users

ARTIFACTS = ROOT / "test-artifacts" / "hub"
INSTRUCTOR = "attnhub-teach"
LEARNERS = tuple(f"attnhub-l{number:02d}" for number in range(1, 11))
GROUPS = ("attnhub-learners", "attnhub-teachers")  # the tests' own, removed afterwards
HERE = Path(__file__).parent

_skipped_because: list[str] = []


def pytest_configure(config):
    config.addinivalue_line("markers", "hub: class-hub tests (tests/hub/): a real JupyterHub, Unix accounts, "
                                       "PostgreSQL; deselect with -m 'not hub'")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.hub)


_span: list[float] = []  # when the first class-hub test started and the last one ended


def pytest_runtest_logstart(nodeid, location):
    if nodeid.startswith("tests/hub/") and not _span:
        _span.append(time.monotonic())


def pytest_runtest_logfinish(nodeid, location):
    if nodeid.startswith("tests/hub/") and _span:
        del _span[1:]
        _span.append(time.monotonic())


def pytest_terminal_summary(terminalreporter):
    for reason in dict.fromkeys(_skipped_because):
        terminalreporter.write_sep("=", "class-hub tests skipped", yellow=True, bold=True)
        terminalreporter.write_line(f"{reason}. With CI=true they fail instead.")
    if SUMMARY or len(_span) == 2:
        terminalreporter.write_sep("=", "class hub: times and memory (also in test-artifacts/hub/)", bold=True)
        for line in SUMMARY:
            terminalreporter.write_line(line)
        if len(_span) == 2:
            terminalreporter.write_line(f"tests/hub took {_span[1] - _span[0]:.0f} s, from its first test's set-up "
                                        "to its last one's tear-down")


def skip_or_fail(reason: str | None) -> None:
    if not reason:
        return
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"CI=true: {reason.replace('skipped', 'cannot run')}", pytrace=False)
    _skipped_because.append(reason)
    pytest.skip(reason)


def hub_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "class-hub tests skipped: they need root (Unix accounts, servers started as their users)"
    if not (DEPLOY / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        return "class-hub tests skipped: the proxy is not installed (npm ci --prefix deploy/jupyterhub)"
    try:
        import jupyterhub  # noqa: F401
        import jupyterhub_idle_culler  # noqa: F401
    except ImportError:
        return "class-hub tests skipped: JupyterHub is not installed (make install)"
    if not shutil.which("bwrap"):
        return "class-hub tests skipped: the grader's sandbox needs bubblewrap (apt-get install bubblewrap)"
    return None


@contextlib.contextmanager
def clone_reachable_by_test_users():
    """The test instructor's server imports the course tool from this clone: where a folder above it
    is private (a clone under /root, say), let other users pass through it (o+x: no listing)
    while the hub runs, and put the modes back afterwards."""
    private = [folder for folder in [ROOT, *ROOT.parents] if not folder.stat().st_mode & 0o001]
    modes = {folder: folder.stat().st_mode & 0o7777 for folder in private}
    try:
        for folder, mode in modes.items():
            folder.chmod(mode | 0o001)
        yield
    finally:
        for folder, mode in modes.items():
            folder.chmod(mode)


def world_readable_folder(prefix: str) -> Path:
    """A folder every test user can traverse (pytest's own temporary folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="package")
def class_hub():
    """The hub, its instructor and learners: ``(hub, password)``; everything removed afterwards."""
    skip_or_fail(hub_unavailable())
    folder = world_readable_folder("attnlab-hubtest-")
    hub = Hub(folder, ARTIFACTS / "hub.log", learners_group=GROUPS[0], instructors_group=GROUPS[1])
    password = secrets.token_urlsafe(12)
    names = [INSTRUCTOR, *LEARNERS]
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(clone_reachable_by_test_users())
        add_user("instructor", INSTRUCTOR, password, hub.settings)
        for name in LEARNERS:
            add_user("learner", name, password, hub.settings)
        hub.start()
        yield hub, password
    finally:
        hub.stop()
        remove_users(names, GROUPS)
        shutil.rmtree(folder, ignore_errors=True)
        stack.close()


@pytest.fixture(scope="package")
def hub_browser(request):
    """Debian's Chromium through Playwright: the session's one instance (tests/conftest.py), which
    tests/browser/ drives too."""
    missing = chromium_missing()
    skip_or_fail(f"class-hub browser test skipped: {missing}" if missing else None)
    return request.getfixturevalue("chromium")


@pytest.fixture(scope="package")
def postgres():
    """A PostgreSQL cluster of its own, started for the test and stopped after it."""
    if os.geteuid() != 0:
        skip_or_fail("gradebook-server test skipped: it needs root (the grader's sandbox, the postgres user)")
    if postgres_bin() is None:
        skip_or_fail("gradebook-server test skipped: PostgreSQL is not installed (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401 (SQLAlchemy's driver for postgresql:// URLs)
    except ImportError as exc:
        skip_or_fail(f"gradebook-server test skipped: the PostgreSQL driver psycopg cannot be imported ({exc}; "
                     "make install)")
    folder = world_readable_folder("attnlab-pgtest-")
    cluster = Postgres(folder)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
