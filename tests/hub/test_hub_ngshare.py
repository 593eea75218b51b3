"""nbgrader's exchange as a service: the class hub of ``deploy/jupyterhub/`` with
``ATTNLAB_HUB_EXCHANGE_SERVICE=ngshare``, end to end, with no folder shared between users:

1. the hub starts ngshare (``ngshare_service.py``) as a hub service; the instructor, in their own
   JupyterLab, builds lesson 02, creates the course in ngshare, enrols two learners
   (``ngshare-course-management``, ngshare's own tool) and releases the lesson;
2. two learners, each in their own server, fetch it through nbgrader's Assignment List (which
   talks to ngshare with the server's hub token), write their ``attention.py`` and submit;
3. the instructor collects; root grades with the course tool and writes the feedback; the
   instructor releases it; each learner fetches their own feedback;
4. through the service a learner can fetch neither another learner's submission nor their feedback
   (even knowing its timestamp), nor list the class's submissions, nor submit in another's name.

A separate hub from ``test_hub_class.py``'s, with accounts of its own. The steps run in file order;
a step whose predecessor failed is skipped.
"""

from __future__ import annotations

import contextlib
import csv
import json
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnlab.lessons import lesson
from autograder.feedback import hidden_lines, page_text
from tests.hub.conftest import (ARTIFACTS, clone_reachable_by_test_users, hub_unavailable, skip_or_fail,
                                world_readable_folder)
from tests.hub.hubdriver import ROOT, SUMMARY, Hub, add_user, remove_users

LESSON = lesson("02")
COURSE_ID = "attention-course"
INSTRUCTOR = "attnhub-nteach"
LEARNERS = ("attnhub-n01", "attnhub-n02")
GROUPS = ("attnhub-nlearners", "attnhub-nteachers")
REFERENCE = (ROOT / "solutions" / "attnlab" / "attention.py").read_text()
HALF = REFERENCE.replace("scale = 1.0 / math.sqrt(q.shape[-1])", "scale = 1.0  # forgot the square root")
WORK = {LEARNERS[0]: REFERENCE, LEARNERS[1]: HALF}

pytestmark = pytest.mark.timeout(1800)


class Klass:
    def __init__(self, hub: Hub, password: str):
        self.hub, self.password = hub, password
        self.users: dict = {}
        self.done: set[str] = set()
        self.timestamps: dict[str, str] = {}  # learner -> the submission ngshare recorded

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


@pytest.fixture(scope="module")
def klass():
    skip_or_fail(hub_unavailable())
    folder = world_readable_folder("attnlab-ngsharetest-")
    hub = Hub(folder, ARTIFACTS / "hub-ngshare.log", learners_group=GROUPS[0], instructors_group=GROUPS[1],
              exchange_service="ngshare")
    password = secrets.token_urlsafe(12)
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(clone_reachable_by_test_users())
        add_user("instructor", INSTRUCTOR, password, hub.settings)
        for name in LEARNERS:
            add_user("learner", name, password, hub.settings)
        hub.start()
        yield Klass(hub, password)
    finally:
        hub.stop()
        remove_users([INSTRUCTOR, *LEARNERS], GROUPS)
        shutil.rmtree(folder, ignore_errors=True)
        stack.close()


def run_in_kernel(klass, user: str, code: str, notebook: str = "probe.ipynb"):
    kernel = klass.user(user).kernel(notebook)
    try:
        return kernel.run_json(code, timeout=900)
    finally:
        kernel.close()


def instructor_runs(klass, *commands: list[str]) -> list[dict]:
    """Commands in a kernel of the instructor's server, in ~/course (as in its terminal)."""
    return run_in_kernel(klass, INSTRUCTOR, (
        "import json, os, subprocess, sys\n"
        f"commands = {json.dumps(list(commands))}\n"
        "cwd = os.path.expanduser('~/course')\n"
        "results = []\n"
        "for argv in commands:\n"
        "    argv = [sys.executable if a == 'python' else a for a in argv]\n"
        "    os.makedirs(cwd, exist_ok=True)\n"
        "    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)\n"
        "    results.append({'argv': argv, 'code': done.returncode, 'output': (done.stdout + done.stderr)[-4000:]})\n"
        "    if done.returncode:\n"
        "        break\n"
        "print(json.dumps(results))\n"))


# What a learner's kernel sends to ngshare, with the token its server runs with (in the kernel's
# environment, as any learner can read it): {label: [HTTP status, answer]}.
_PROBE = (
    "import json, os, urllib.parse, urllib.request, urllib.error\n"
    "base = os.environ['ATTNLAB_HUB_NGSHARE_URL']\n"
    "token = os.environ['JUPYTERHUB_API_TOKEN']\n"
    "def call(method, path, form=None):\n"
    "    data = urllib.parse.urlencode(form).encode() if form is not None else None\n"
    "    request = urllib.request.Request(base + path, data=data, method=method,\n"
    "                                     headers={'Authorization': 'token ' + token})\n"
    "    try:\n"
    "        with urllib.request.urlopen(request, timeout=120) as answer:\n"
    "            return [answer.status, json.loads(answer.read())]\n"
    "    except urllib.error.HTTPError as error:\n"
    "        body = error.read()\n"
    "        try:\n"
    "            return [error.code, json.loads(body)]\n"
    "        except ValueError:\n"
    "            return [error.code, body.decode(errors='replace')[:300]]\n"
)


def test_the_instructor_creates_the_course_in_ngshare_and_releases_lesson_02(klass):
    settings = klass.hub.settings
    teacher = klass.user(INSTRUCTOR)
    teacher.start_server()
    teacher.wait_ready()
    results = instructor_runs(
        klass,
        ["python", "-m", "autograder", "build", "--course", str(klass.course), "--lesson", "02"],
        ["ngshare-course-management", "create_course", COURSE_ID, INSTRUCTOR],
        *[["ngshare-course-management", "add_student", COURSE_ID, name] for name in LEARNERS],
        ["python", "-m", "nbgrader", "release_assignment", LESSON.slug],
    )
    log = json.dumps(results, indent=1)
    assert len(results) == 5 and all(r["code"] == 0 for r in results), log
    assert "Successfully released" in results[-1]["output"], log
    # no exchange folder anywhere: the release is in ngshare's database and files, root's alone
    assert not settings.exchange.exists()
    assert (settings.ngshare_state.stat().st_mode & 0o777) == 0o700
    stored = list((settings.ngshare_state / "files").iterdir())
    assert len(stored) == 2, stored  # the notebook and the attention.py stub
    klass.done.add("release")


def test_two_learners_fetch_work_and_submit_from_their_own_servers(klass):
    klass.after("release")
    learners = [klass.user(name) for name in WORK]
    for learner in learners:
        learner.start_server()
    for learner in learners:
        learner.wait_ready()
        released = [a for a in learner.assignments(COURSE_ID) if a["assignment_id"] == LESSON.slug]
        assert released and released[0]["status"] == "released", released
        learner.assignment_action("fetch", COURSE_ID, LESSON.slug)
        assert sorted(learner.listing(LESSON.slug)) == sorted([LESSON.notebook, "attention.py"])
        assert learner.read(f"{LESSON.slug}/attention.py") != REFERENCE  # the stub
        learner.write(f"{LESSON.slug}/attention.py", WORK[learner.name])
        answer = learner.assignment_action("submit", COURSE_ID, LESSON.slug)
        submitted = [a for a in answer["value"] if a["status"] == "submitted" and a["assignment_id"] == LESSON.slug]
        assert submitted and submitted[0]["submissions"], answer
    assert not klass.hub.settings.exchange.exists()
    klass.done.add("submit")


def test_the_instructor_collects_root_grades_and_releases_the_feedback(klass):
    klass.after("submit")
    results = instructor_runs(klass, ["python", "-m", "nbgrader", "collect", LESSON.slug])
    assert results[0]["code"] == 0, results
    course = klass.course
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(WORK)
    for name in WORK:
        folder = course / "submitted" / name / LESSON.slug
        assert (folder / "attention.py").read_text() == WORK[name]
        klass.timestamps[name] = (folder / "timestamp.txt").read_text().strip()

    start = time.monotonic()
    graded = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "--course", str(course), "--lesson", "02", "--jobs", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500)
    seconds = time.monotonic() - start
    (ARTIFACTS / "grade-ngshare.txt").write_text(graded.stdout + graded.stderr)
    SUMMARY.append(f"the ngshare class: root graded {len(WORK)} submissions of lesson 02 (--jobs 2) in {seconds:.0f} s")
    assert graded.returncode == 0, graded.stdout + graded.stderr
    with (course / "grading_report.csv").open() as handle:
        report = {row["student"]: row for row in csv.DictReader(handle)}
    full = float(report[LEARNERS[0]]["autograded_max"])
    assert float(report[LEARNERS[0]]["autograded"]) == full > 0
    assert 0 < float(report[LEARNERS[1]]["autograded"]) < full

    feedback = subprocess.run([sys.executable, "-m", "autograder", "feedback", "--course", str(course), "--lesson", "02"],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert feedback.returncode == 0, feedback.stdout + feedback.stderr
    subprocess.run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", str(course)], check=True)
    results = instructor_runs(klass, ["python", "-m", "nbgrader", "release_feedback", LESSON.slug])
    assert results[0]["code"] == 0 and results[0]["output"].count("Feedback released.") == len(WORK), results
    klass.done.add("feedback")


def test_each_learner_fetches_their_own_feedback(klass):
    klass.after("feedback")
    secrets_ = hidden_lines(klass.course / "source" / LESSON.slug / LESSON.notebook)
    assert secrets_
    for name in WORK:
        learner = klass.user(name)
        learner.assignment_action("fetch_feedback", COURSE_ID, LESSON.slug)
        folders = learner.listing(f"{LESSON.slug}/feedback")
        assert len(folders) == 1, folders
        html = learner.read(f"{LESSON.slug}/feedback/{folders[0]}/{Path(LESSON.notebook).with_suffix('.html')}")
        text = page_text(html)
        assert not [line for line in secrets_ if line in text], name
        others = [other for other in WORK if other != name]
        assert not [other for other in others if other in text], name  # their own page, nobody else's
        if WORK[name] == HALF:
            assert "TrustedCheckFailed: scaled_dot_product_attention" in text
        else:
            assert "Trusted check: passed" in text and "TrustedCheckFailed" not in text
    klass.done.add("fetched feedback")


def test_a_learner_cannot_take_another_learners_work_or_feedback_through_the_service(klass):
    klass.after("fetched feedback")
    me, other = LEARNERS
    a = f"{COURSE_ID}/{LESSON.slug}"
    stamp = urllib_quote(klass.timestamps[other])
    mine = urllib_quote(klass.timestamps[me])
    seen = run_in_kernel(klass, me, _PROBE + (
        "seen = {\n"
        f"    'my submissions': call('GET', '/submissions/{a}/{me}'),\n"
        f"    'my feedback': call('GET', '/feedback/{a}/{me}?timestamp={mine}&list_only=true'),\n"
        f"    'the class list of submissions': call('GET', '/submissions/{a}'),\n"
        f"    'their submissions': call('GET', '/submissions/{a}/{other}'),\n"
        f"    'their submission': call('GET', '/submission/{a}/{other}'),\n"
        f"    'their submission, by timestamp': call('GET', '/submission/{a}/{other}?timestamp={stamp}'),\n"
        f"    'their feedback, by timestamp': call('GET', '/feedback/{a}/{other}?timestamp={stamp}'),\n"
        f"    'enrol someone': call('POST', '/student/{COURSE_ID}/intruder', {{}}),\n"
        f"    'a submission in their name': call('POST', '/submission/{a}',\n"
        f"        {{'user': '{other}', 'files': json.dumps([{{'path': 'x.py', 'content': 'eA==\\n'}}])}}),\n"
        "}\n"
        "print(json.dumps(seen))\n"))
    # what the token may do works, so the refusals below are refusals and not a broken probe
    assert seen["my submissions"][0] == 200 and len(seen["my submissions"][1]["submissions"]) == 1, seen
    assert seen["my feedback"][0] == 200 and seen["my feedback"][1]["files"], seen
    refused = ("the class list of submissions", "their submissions", "their submission",
               "their submission, by timestamp", "their feedback, by timestamp", "enrol someone")
    assert {what: seen[what][0] for what in refused} == {what: 403 for what in refused}, seen
    for what in refused:
        assert "files" not in seen[what][1] and "submissions" not in seen[what][1], (what, seen[what])
    # ngshare takes the name from the token, not from the form: the submission is the sender's own
    assert seen["a submission in their name"][0] == 200, seen
    listed = run_in_kernel(klass, INSTRUCTOR, _PROBE + (
        f"print(json.dumps(call('GET', '/submissions/{a}')))\n"))
    assert listed[0] == 200, listed
    per_student = {}
    for entry in listed[1]["submissions"]:
        per_student[entry["student_id"]] = per_student.get(entry["student_id"], 0) + 1
    assert per_student == {me: 2, other: 1}, listed


def urllib_quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")
