"""Shared fixtures: where the course is, and a Python that runs code in a clean process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.machine_load import LoadLog, Snapshot

ROOT = Path(__file__).resolve().parents[1]

# The tests that take minutes: they execute lesson notebooks, grade in the sandbox, build the course,
# or start JupyterLab, a hub or a browser. `make test-fast` (pytest -m "not slow") leaves them out
# for a quick loop while editing; `make test` runs everything.
SLOW_FOLDERS = {"browser", "hub"}
SLOW_FILES = {
    "test_adversarial.py", "test_class.py", "test_class_scale.py", "test_figures_readable.py",
    "test_grading_roundtrip.py", "test_learner_path.py", "test_mistakes_carried_forward.py",
    "test_mutation_parity.py", "test_notebooks.py", "test_release.py", "test_zoo_phase.py",
    "test_flash_reference.py", "test_zoo_induction.py", "test_sandbox.py", "test_feedback_scan.py",
    "test_grade_reporting.py", "test_tampering.py", "test_fill.py", "test_explore.py",
    "test_recover_grading.py", "test_late_build.py",
}


def _slow(path: Path) -> bool:
    relative = path.relative_to(ROOT / "tests")
    return (relative.parts[0] in SLOW_FOLDERS or relative.name in SLOW_FILES
            or relative.name.startswith("test_lesson") and relative.name.endswith("_claims.py"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow(Path(item.path)):
            item.add_marker(pytest.mark.slow)


LOAD = LoadLog()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's wall clock and the machine's busy CPU time meanwhile (set-up and tear-down of
    its fixtures included), added up per file for the summary."""
    before = Snapshot.take()
    yield
    LOAD.record(Path(item.path).relative_to(ROOT).as_posix(), before, Snapshot.take())


def pytest_terminal_summary(terminalreporter):
    from tests.timed_claims import RECORDED

    if RECORDED:
        terminalreporter.write_sep("=", "timed claims: measured on this machine, and the band each is asserted in",
                                   bold=True)
        for measured in RECORDED:
            terminalreporter.write_line(measured.line())
    lines = LOAD.lines()
    if lines:
        terminalreporter.write_sep("=", "how busy the machine was (/proc/stat): where running tests side by side "
                                   "could win (also in test-artifacts/machine-load.txt)", bold=True)
        for line in lines:
            terminalreporter.write_line(line)
        artifacts = ROOT / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        (artifacts / "machine-load.txt").write_text("\n".join(LOAD.lines(top=len(LOAD.wall_s))) + "\n")


def run_python(code: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (the reference switch keeps per-process state)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd or ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(autouse=True)
def _triton_mode_left_as_it_was():
    """``attnlab.progress()`` and ``bench.environment_report()`` set TRITON_INTERPRET in their process
    when there is no GPU, as a notebook needs. Called by a test here, that must not leak into later
    tests: one that decides from the environment whether Triton's interpreter is on in this process
    (where Triton may already be imported in the other mode) would decide wrong."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


@pytest.fixture
def python():
    return run_python


@pytest.fixture(scope="session")
def built_course(tmp_path_factory):
    """A course directory made by ``python -m autograder build``, shared by the tests that read it."""
    course = tmp_path_factory.mktemp("course")
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "build", "--course", str(course)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return course


CHROMIUM = Path("/usr/bin/chromium")


def chromium_missing() -> str | None:
    """What the browser-driven tests lack here (Debian's Chromium, Python's playwright), or None."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return "Debian's chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python's playwright is not installed (make install)"
    return None


CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--headless",
]


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium through Playwright, launched once for the whole session and shared by the
    browser tests (tests/browser/) and the class-hub tests (tests/hub/): Playwright's sync API
    runs one instance per thread, so a second ``sync_playwright()`` while the first lives fails.
    Callers check first that Chromium and Playwright exist (each says why when they do not)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()
