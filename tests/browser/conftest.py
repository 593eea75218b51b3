"""Fixtures of the browser tests: Debian's Chromium through Playwright, JupyterLab servers on
temporary copies of the course, and a folder of screenshots per test.

Without Chromium (or Playwright) the tests are skipped and the reason is listed at the end of
``make test``; in CI (``CI=true``) they fail instead, so that CI cannot pass without them.
Screenshots: ``test-artifacts/browser/<test>/NN-<step>.png`` under the repository root, together
with the log of the JupyterLab server the test used.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from labdriver import ROOT, Lab, LabServer

from tests.conftest import chromium_missing

ARTIFACTS = ROOT / "test-artifacts" / "browser"
VIEWPORT = {"width": 1400, "height": 900}


@pytest.hookimpl(tryfirst=True)  # before `-m "not browser"` deselects by marker
def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Let `lab_factory` know, at teardown, whether the test failed (it then saves a screenshot).
    report = yield
    if report.when == "call":
        item.browser_failed = report.failed
    return report


# Why the browser tests were skipped in this run (shown once more at the very end of the output).
_skipped_because: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if _skipped_because:
        terminalreporter.write_sep("=", "browser tests skipped", yellow=True, bold=True)
        terminalreporter.write_line(
            f"{_skipped_because[0]}. With CI=true they fail instead."
        )


def _unavailable() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    missing = chromium_missing()
    return f"browser tests skipped: {missing}" if missing else None


@pytest.fixture(scope="session")
def browser(request):
    reason = _unavailable()
    if reason:
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"CI=true: {reason.replace('skipped', 'cannot run')}", pytrace=False)
        _skipped_because.append(reason)
        pytest.skip(reason)
    return request.getfixturevalue("chromium")  # the session's one Chromium (tests/conftest.py)


def artifacts_for(name: str) -> Path:
    folder = ARTIFACTS / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def learner_course(built_course, tmp_path_factory):
    """A learner's home: a copy of the course's notebooks/ (never the clone's own: JupyterLab saves),
    and lesson 02's assignment as a learner in a class fetches it (from ``autograder build``)."""
    home = tmp_path_factory.mktemp("learner")
    shutil.copytree(ROOT / "notebooks", home / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(built_course / "release" / "02_attention", home / "02_attention")
    return home


@pytest.fixture(scope="module")
def learner_server(browser, learner_course, tmp_path_factory):
    """JupyterLab as `make lab` starts it (lab-settings/jupyter_lab_config.py), on the copy."""
    server = LabServer(
        root=learner_course, cwd=learner_course, home=tmp_path_factory.mktemp("learner-jupyter"),
        log=ARTIFACTS / "learner-server.log", learner=True,
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture
def lab_factory(browser, request):
    """``lab_factory(server)``: a fresh browser context on ``server`` and its screenshot folder."""
    opened = []

    def make(server: LabServer) -> Lab:
        context = browser.new_context(viewport=VIEWPORT)
        context.set_default_timeout(30_000)
        opened.append(context)
        return Lab(context.new_page(), server, artifacts_for(request.node.name))

    yield make
    for context in opened:
        if getattr(request.node, "browser_failed", False):
            for number, page in enumerate(context.pages):
                page.screenshot(path=str(ARTIFACTS / request.node.name / f"failure-{number}.png"))
        context.close()


@pytest.fixture(scope="module")
def instructor_server(browser, built_course, tmp_path_factory):
    """JupyterLab as an instructor starts it: in a copy of the course directory that
    ``python -m autograder build`` made, with JupyterLab's defaults and a class exchange in a
    temporary folder (nothing is written outside the test's folders)."""
    work = tmp_path_factory.mktemp("instructor")
    course = work / "course"
    shutil.copytree(built_course, course)
    exchange = work / "exchange"
    exchange.mkdir()
    server = LabServer(
        root=course, cwd=course, home=work / "jupyter", log=ARTIFACTS / "instructor-server.log",
        learner=False, nbgrader_config=f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n",
    )
    server.start()
    yield server
    server.stop()
