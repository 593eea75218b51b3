"""A class on the hub of ``deploy/jupyterhub/``, end to end, in the order a class goes:

1. the instructor, in their own JupyterLab on the hub, builds lesson 02 (``python -m autograder
   build``) and releases it (``nbgrader release_assignment``) into the exchange;
2. three learners, each through their own server with their own API token, fetch it with nbgrader's
   Assignment List handlers, write ``attention.py`` (the reference, a half-correct one, nothing)
   and submit; a fourth learner does the same in a real browser: the hub's login page, the
   Assignment List's Fetch, lesson 02 and one of its checks, the Assignment List's Submit;
3. the instructor collects; root grades (``python -m autograder grade``) and writes the feedback
   (``python -m autograder feedback``); the instructor releases it (``nbgrader release_feedback``);
4. every learner fetches their feedback: their verdicts and score, and no hidden test;
5. no learner can read another learner's files, the instructor's course directory or the
   exchange's inbox, nor reach another user's server; learners' kernels have no grader and no
   references, and only the instructor's server has formgrader.

The steps share one hub and run in file order; a step whose predecessor failed is skipped.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from attnlab.lessons import lesson
from autograder.feedback import hidden_lines, page_text
from tests.hub.conftest import ARTIFACTS, INSTRUCTOR, LEARNERS
from tests.hub.hubdriver import ROOT, SUMMARY, HTTPFailure, request

LESSON = lesson("02")
REFERENCE = (ROOT / "solutions" / "attnlab" / "attention.py").read_text()
HALF = REFERENCE.replace("scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0  # forgot the square root")
# learner -> the attention.py they write (None: they leave the released stub as it is)
WORK = {LEARNERS[0]: REFERENCE, LEARNERS[1]: HALF, LEARNERS[2]: None}
BROWSER_LEARNER = LEARNERS[3]
NOTEBOOK = f"{LESSON.slug}/{LESSON.notebook}"

pytestmark = pytest.mark.timeout(1800)


class Class:
    """What the steps hand on to each other."""

    def __init__(self, hub, password):
        self.hub, self.password = hub, password
        self.users = {}
        self.done: set[str] = set()
        self.submitted: dict[str, str] = {}  # learner -> the library they handed in
        self.report: dict[str, dict] = {}

    def user(self, name):
        if name not in self.users:
            self.users[name] = self.hub.user(name, self.password)
        return self.users[name]

    def after(self, step: str) -> None:
        if step not in self.done:
            pytest.skip(f"needs the step '{step}', which did not pass")

    @property
    def course(self) -> Path:
        return Path(f"/home/{INSTRUCTOR}") / self.hub.settings.course_dir

    @property
    def course_id(self) -> str:
        return "attention-course"


@pytest.fixture(scope="module")
def klass(class_hub):
    hub, password = class_hub
    return Class(hub, password)


def instructor_runs(klass, *commands: list[str], cwd: str = "~/course") -> list[dict]:
    """Shell commands in a kernel of the instructor's own server (as in its terminal); their results."""
    kernel = klass.user(INSTRUCTOR).kernel("instructor.ipynb")
    try:
        return kernel.run_json(
            "import json, os, subprocess, sys\n"
            f"commands = {json.dumps(list(commands))}\n"
            f"cwd = os.path.expanduser({cwd!r})\n"
            "results = []\n"
            "for argv in commands:\n"
            "    argv = [sys.executable if a == 'python' else a for a in argv]\n"
            "    os.makedirs(cwd, exist_ok=True)\n"
            "    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)\n"
            "    results.append({'argv': argv, 'code': done.returncode, 'output': (done.stdout + done.stderr)[-4000:]})\n"
            "    if done.returncode:\n"
            "        break\n"
            "print(json.dumps(results))\n",
            timeout=900,
        )
    finally:
        kernel.close()


def test_the_instructor_builds_and_releases_lesson_02_from_their_server(klass):
    teacher = klass.user(INSTRUCTOR)
    teacher.start_server()
    teacher.wait_ready()
    results = instructor_runs(
        klass,
        ["python", "-m", "autograder", "build", "--course", str(klass.course), "--lesson", "02"],
        ["python", "-m", "nbgrader", "release_assignment", LESSON.slug],
    )
    assert all(r["code"] == 0 for r in results) and len(results) == 2, json.dumps(results, indent=1)
    outbound = klass.hub.settings.exchange / klass.course_id / "outbound" / LESSON.slug
    assert sorted(p.name for p in outbound.iterdir()) == sorted([LESSON.notebook, "attention.py"])
    assert (outbound / "attention.py").read_text() != REFERENCE  # the stub, not the solution
    # formgrader is there for the instructor, on that course
    listed = teacher.api("GET", "/formgrader/api/assignments")
    assert LESSON.slug in [a["name"] for a in listed], listed
    klass.done.add("release")


def _fetch(learner, klass) -> None:
    released = [a for a in learner.assignments(klass.course_id) if a["assignment_id"] == LESSON.slug]
    assert released and released[0]["status"] == "released", released
    after = learner.assignment_action("fetch", klass.course_id, LESSON.slug)
    statuses = {a["status"] for a in after["value"] if a["assignment_id"] == LESSON.slug}
    assert "fetched" in statuses, after
    assert sorted(learner.listing(LESSON.slug)) == sorted([LESSON.notebook, "attention.py"])


def test_learners_fetch_write_and_submit_through_their_own_servers(klass):
    klass.after("release")
    learners = [klass.user(name) for name in WORK]
    for learner in learners:  # the servers start together, as at the start of a class
        learner.start_server()
    for learner in learners:
        learner.wait_ready()
        _fetch(learner, klass)
        if WORK[learner.name] is not None:
            learner.write(f"{LESSON.slug}/attention.py", WORK[learner.name])
        klass.submitted[learner.name] = learner.read(f"{LESSON.slug}/attention.py")
        answer = learner.assignment_action("submit", klass.course_id, LESSON.slug)
        submitted = [a for a in answer["value"] if a["status"] == "submitted" and a["assignment_id"] == LESSON.slug]
        assert submitted and submitted[0]["submissions"], answer
    inbound = klass.hub.settings.exchange / klass.course_id / "inbound"
    assert sorted({p.name.split("+")[0] for p in inbound.iterdir()}) == sorted(WORK)
    klass.done.add("submit")


def test_a_learner_logs_in_fetches_checks_and_submits_in_a_browser(klass, hub_browser):
    klass.after("submit")
    from tests.browser.labdriver import Lab

    name = BROWSER_LEARNER
    learner = klass.user(name)
    shots = ARTIFACTS / "browser-learner"
    if shots.exists():
        for old in shots.iterdir():
            old.unlink()
    shots.mkdir(parents=True, exist_ok=True)
    context = hub_browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()

    class OnTheHub:  # what labdriver.Lab needs of a server: URLs of the learner's JupyterLab
        def url(self, path):
            return f"{learner.base}{path}"

    lab = Lab(page, OnTheHub(), shots)
    try:
        page.goto(f"{klass.hub.url}/hub/login")
        page.locator("#username_input").fill(name)
        page.locator("#password_input").fill(klass.password)
        lab.shot("hub-login-page")
        page.locator("#login_submit").click()
        page.wait_for_selector("#jp-main-dock-panel", timeout=300_000)  # the server starts first
        assert f"/user/{name}/lab" in page.url
        lab.shot("jupyterlab-after-login")

        # Nbgrader > Assignment List: fetch lesson 02
        lab.menu("Nbgrader", "Assignment List")
        released = page.locator("#released_assignments_list > .list_item").filter(has_text=LESSON.slug)
        released.wait_for()
        lab.shot("assignment-list-released")
        released.locator(".item_status button").click()
        fetched = page.locator("#fetched_assignments_list > .list_item").filter(has_text=LESSON.slug)
        fetched.first.wait_for()
        lab.shot("assignment-list-fetched")

        # The learner's attention.py (as saved from JupyterLab's editor), then a check in the notebook.
        # Every cell attached to the page, so that cells below the view can be found by their code.
        learner.api("PUT", "/lab/api/settings/@jupyterlab/notebook-extension:tracker",
                    {"raw": json.dumps({"windowingMode": "none"})})
        learner.write(f"{LESSON.slug}/attention.py", REFERENCE)
        lab.open_notebook(NOTEBOOK, workspace="lesson-02")
        lab.shot("lesson-02-opened")
        # the set-up cell (attnlab.start_lesson), as every lesson opens: it imports torch and the library
        lab.run_cell(lab.setup_cell(), timeout=240_000)
        check = "checks.check_softmax(attention.softmax)"
        lab.run_cell(check, timeout=240_000)
        output = lab.output_text(check)
        assert re.search(r"✓ softmax: \d+ checks passed", output), output
        lab.shot("check-passes", lab.cell(check))

        # Submit from the Assignment List
        lab.menu("Nbgrader", "Assignment List")
        fetched.first.locator(".item_status button", has_text="Submit").click()
        submitted = page.locator("#submitted_assignments_list > .list_item").filter(has_text=LESSON.slug)
        submitted.first.wait_for(timeout=120_000)
        lab.shot("assignment-list-submitted", page.locator("#submitted_assignments_list"))
    except Exception:
        page.screenshot(path=str(shots / "failure.png"))
        raise
    finally:
        context.close()
    answer = learner.assignments(klass.course_id)
    assert [a for a in answer if a["status"] == "submitted" and a["assignment_id"] == LESSON.slug], answer
    klass.submitted[name] = REFERENCE


def _autograded_points(source: Path, prefixes=("",)) -> float:
    total = 0.0
    for cell in nbformat.read(source, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution") and meta["grade_id"].startswith(prefixes):
            total += meta["points"]
    return total


def test_the_instructor_collects_root_grades_and_the_feedback_is_released(klass):
    klass.after("submit")
    results = instructor_runs(klass, ["python", "-m", "nbgrader", "collect", LESSON.slug])
    assert results[0]["code"] == 0, results
    course = klass.course
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(klass.submitted)

    start = time.monotonic()
    graded = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--course", str(course), "--lesson", "02", "--jobs", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )
    seconds = time.monotonic() - start
    print(graded.stdout, graded.stderr, f"\ngrading took {seconds:.0f} s")
    SUMMARY.append(f"the class: root graded {len(klass.submitted)} submissions of lesson 02 (--jobs 2) in {seconds:.0f} s")
    (ARTIFACTS / "grade.txt").write_text(graded.stdout + graded.stderr)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    with (course / "grading_report.csv").open() as handle:
        klass.report = {row["student"]: row for row in csv.DictReader(handle)}

    source = course / "source" / LESSON.slug / LESSON.notebook
    full = _autograded_points(source)
    expected = {name: full for name, library in klass.submitted.items() if library == REFERENCE}
    expected[LEARNERS[1]] = _autograded_points(source, ("softmax", "attention_numpy"))
    expected[LEARNERS[2]] = 0.0
    assert 0 < expected[LEARNERS[1]] < full
    assert {name: float(row["autograded"]) for name, row in klass.report.items()} == expected
    assert {row["status"] for row in klass.report.values()} == {"graded"}, klass.report

    feedback = subprocess.run([sys.executable, "-m", "autograder", "feedback", "--course", str(course), "--lesson", "02"],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert feedback.returncode == 0, feedback.stdout + feedback.stderr
    # what root wrote in the instructor's course directory goes back to the instructor
    subprocess.run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", str(course)], check=True)
    results = instructor_runs(klass, ["python", "-m", "nbgrader", "release_feedback", LESSON.slug])
    assert results[0]["code"] == 0, results
    klass.done.add("feedback")


def test_every_learner_fetches_feedback_with_their_verdicts_and_no_hidden_test(klass):
    klass.after("feedback")
    secrets = hidden_lines(klass.course / "source" / LESSON.slug / LESSON.notebook)
    assert secrets
    for name in klass.submitted:
        learner = klass.user(name)
        learner.assignment_action("fetch_feedback", klass.course_id, LESSON.slug)
        folders = learner.listing(f"{LESSON.slug}/feedback")
        assert len(folders) == 1, folders
        html = learner.read(f"{LESSON.slug}/feedback/{folders[0]}/{Path(LESSON.notebook).with_suffix('.html')}")
        text = page_text(html)
        assert not [line for line in secrets if line in text], name
        # the page's heading, nbgrader's or the grader's own (autograder.summary_page): "(Score: 10.0 / 14.0)"
        row = klass.report[name]
        heading = f"(Score: {round(float(row['score']), 2)} / {round(float(row['max_score']), 2)})"
        assert heading in re.sub(r"\s+", " ", text), (name, heading)
        if klass.submitted[name] == REFERENCE:
            assert "Trusted check: passed" in text and "TrustedCheckFailed" not in text, name
        elif klass.submitted[name] == HALF:
            assert "TrustedCheckFailed: scaled_dot_product_attention" in text, name
        else:
            assert "TrustedCheckFailed" in text and "Trusted check: passed" not in text, name


def test_learners_cannot_read_each_other_the_course_or_the_inbox(klass):
    klass.after("submit")
    name, other = LEARNERS[0], LEARNERS[1]
    learner = klass.user(name)
    settings = klass.hub.settings
    targets = {
        "another learner's home": f"/home/{other}",
        "another learner's attention.py": f"/home/{other}/{LESSON.slug}/attention.py",
        "the instructor's home": f"/home/{INSTRUCTOR}",
        "the instructor's course directory": str(klass.course),
        "the course's source notebook": str(klass.course / "source" / LESSON.slug / LESSON.notebook),
        "the exchange's inbox": str(settings.exchange / klass.course_id / "inbound"),
        "the hub's database": str(settings.state / "hub" / "jupyterhub.sqlite"),
    }
    kernel = learner.kernel(f"{LESSON.slug}/{LESSON.notebook}")
    try:
        outcome = kernel.run_json(
            "import importlib.util, json, os\n"
            f"targets = {json.dumps(targets)}\n"
            "seen = {}\n"
            "for what, path in targets.items():\n"
            "    try:\n"
            "        os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(1)\n"
            "        seen[what] = 'read'\n"
            "    except PermissionError:\n"
            "        seen[what] = 'denied'\n"
            "    except FileNotFoundError:\n"
            "        seen[what] = 'not found'\n"
            "import attnlab, attnlab.switch\n"
            "seen['autograder importable'] = importlib.util.find_spec('autograder') is not None\n"
            "seen['references'] = str(attnlab.switch.reference_dir())\n"
            "seen['attnlab from'] = attnlab.__file__\n"
            "from ipykernel.connect import get_connection_info\n"
            "seen['kernel transport'] = get_connection_info(unpack=True)['transport']\n"
            "print(json.dumps(seen))\n")
    finally:
        kernel.close()
    assert {what: outcome[what] for what in targets} == {what: "denied" for what in targets}, outcome
    assert outcome["autograder importable"] is False and outcome["references"] == "None", outcome
    assert outcome["attnlab from"].startswith(str(settings.env("learner"))), outcome
    assert outcome["kernel transport"] == "ipc", outcome  # no localhost port another user could reach
    # nor, with their token, another user's server; and a learner's server has no formgrader
    for owner in (other, INSTRUCTOR):
        with pytest.raises(HTTPFailure) as refused:
            request("GET", f"{klass.hub.url}/user/{owner}/api/contents", learner.token)
        assert refused.value.status == 403, refused.value
    with pytest.raises(HTTPFailure) as missing:
        learner.api("GET", "/formgrader/api/assignments")
    assert missing.value.status == 404
