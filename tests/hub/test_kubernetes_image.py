"""The Python environments of the course's Kubernetes images, built here without a container runtime
by the script the Dockerfile runs (``deploy/kubernetes/image-env.sh``), from the course's own lock:

- the learner image's: every pin of ``requirements/dev.lock`` and ``requirements/no-deps.lock``
  and the Makefile's torch, consistent (``pip check``; the one known exception is ngshare-exchange's
  cap on jupyter-core, which ``no-deps.lock`` explains); the library as learners get it (blank
  exercises, no references, no course tool, no solution text); the learner's role settings, with
  which nbgrader uses ngshare's exchange plugins for the course;
- the exchange image's: ngshare at the lock's versions, and ``ngshare_service.py`` starts from it
  (database migrated, health check answering).

The two are built at once (downloads from PyPI, torch from pip's usual places): a few minutes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.browser.labdriver import free_port
from tests.hub.hubdriver import ROOT, SUMMARY

SCRIPT = ROOT / "deploy" / "kubernetes" / "image-env.sh"
COURSE_ID = "attention-course"

pytestmark = pytest.mark.timeout(1800)


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                (spec,) = requirement.specifier
                pins[canonicalize_name(requirement.name)] = spec.version
    return pins


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """{"learner": PREFIX, "exchange": PREFIX}, built at the same time."""
    folder = tmp_path_factory.mktemp("image-envs")
    started = time.monotonic()
    builds = {role: subprocess.Popen(["bash", str(SCRIPT), role, str(folder / role)], cwd=ROOT,
                                     env={**os.environ, "PYTHON": sys.executable},
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for role in ("learner", "exchange")}
    logs = {role: build.communicate(timeout=1700)[0] for role, build in builds.items()}
    SUMMARY.append(f"the learner and exchange image environments were built in {time.monotonic() - started:.0f} s")
    for role, build in builds.items():
        assert build.returncode == 0, f"image-env.sh {role} failed:\n{logs[role][-6000:]}"
    return {role: folder / role for role in builds}


def run(prefix: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    """Python code in the environment, with nothing of this process's environment but PATH and HOME, in
    the environment's folder (``python -c`` imports from its working folder: not the clone's)."""
    return subprocess.run([str(prefix / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=600,
                          cwd=prefix,
                          env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin", "HOME": str(prefix), **env})


def freeze(prefix: Path) -> dict[str, str]:
    done = run(prefix, "from importlib.metadata import distributions as d; import json; "
                       "print(json.dumps({x.metadata['Name']: x.version for x in d()}))")
    assert done.returncode == 0, done.stderr
    return {canonicalize_name(name): version for name, version in json.loads(done.stdout).items()}


def test_the_learner_environment_is_the_courses_lock(envs):
    installed = freeze(envs["learner"])
    wanted = {**_pins(ROOT / "requirements" / "dev.lock"), **_pins(ROOT / "requirements" / "no-deps.lock")}
    differ = {name: (version, installed.get(name)) for name, version in wanted.items() if installed.get(name) != version}
    assert differ == {}, differ
    torch = re.search(r"^TORCH_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert installed["torch"].split("+")[0] == torch
    check = subprocess.run([str(envs["learner"] / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True)
    problems = [line for line in check.stdout.splitlines() if line.strip()]
    assert problems == ["ngshare-exchange 0.5.3 has requirement jupyter-core<4.11.2, but you have jupyter-core "
                        f"{installed['jupyter-core']}."], check.stdout + check.stderr


def test_the_learner_environment_has_the_blank_library_and_nothing_of_the_grader(envs):
    prefix = envs["learner"]
    done = run(prefix, (
        "import importlib.util, json, torch, attnlab, attnlab.switch\n"
        "from attnlab import attention\n"
        "try:\n"
        "    attention.softmax(torch.zeros(3))\n"
        "    blank = None\n"
        "except NotImplementedError as error:\n"
        "    blank = str(error)\n"
        "print(json.dumps({'attnlab': attnlab.__file__, 'references': str(attnlab.switch.reference_dir()),\n"
        "                  'autograder': importlib.util.find_spec('autograder') is not None, 'blank': blank}))\n"))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["attnlab"].startswith(str(prefix)) and seen["references"] == "None" and not seen["autograder"], seen
    assert seen["blank"] and "Lesson 02" in seen["blank"], seen
    # no solution text anywhere in the environment's copy of the library
    library = Path(seen["attnlab"]).parent
    reference_lines = {line.strip() for path in (ROOT / "solutions" / "attnlab").glob("*.py")
                       for line in path.read_text().splitlines() if len(line.strip()) > 40}
    stub_lines = {line.strip() for path in (ROOT / "src" / "attnlab").rglob("*.py")
                  for line in path.read_text().splitlines()}
    secret = reference_lines - stub_lines  # lines only the references have
    assert secret
    leaked = [(path.name, line) for path in library.rglob("*.py") for line in path.read_text().splitlines()
              if line.strip() in secret]
    assert leaked == []
    site = library.parent
    assert not (site / "solutions").exists() and not (site / "autograder").exists()
    assert not [path for path in site.glob("*.pth") if "attention-course" in path.read_text() or str(ROOT) in path.read_text()]


def test_the_learner_settings_send_nbgrader_to_ngshare(envs):
    prefix = envs["learner"]
    done = run(prefix, (
        "import json\n"
        "from nbgrader.apps import NbGrader\n"
        "from nbgrader.exchange import ExchangeFactory\n"
        "app = NbGrader()\n"
        "app.load_config_file()\n"
        "factory = ExchangeFactory(config=app.config)\n"
        "print(json.dumps({'exchange': factory.exchange.__module__, 'fetch': factory.fetch_assignment.__module__,\n"
        "                  'url': factory.exchange._ngshare_url, 'course': app.config.CourseDirectory.course_id}))\n"),
        # what the chart's values give a learner's server (and JupyterHub its user's name)
        JUPYTER_CONFIG_PATH=str(prefix / "share" / "attnlab" / "etc" / "learner"), JUPYTERHUB_USER="alice",
        ATTNLAB_HUB_COURSE_ID=COURSE_ID, ATTNLAB_HUB_NGSHARE_URL="http://proxy-public/services/ngshare")
    assert done.returncode == 0 and "Exception while loading config" not in done.stderr, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {"exchange": "ngshare_exchange.exchange", "fetch": "ngshare_exchange.fetch_assignment",
                    "url": "http://proxy-public/services/ngshare", "course": COURSE_ID}, seen


def test_the_exchange_environment_runs_ngshare(envs, tmp_path):
    prefix = envs["exchange"]
    installed = freeze(prefix)
    pins = _pins(ROOT / "requirements" / "dev.lock")
    for name in ("ngshare", "sqlalchemy", "alembic", "tornado", "jupyterhub", "psycopg"):
        assert installed[name] == pins[name], name
    assert "torch" not in installed and "jupyterlab" not in installed  # the service alone
    check = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    port = free_port()
    service = subprocess.Popen(
        [str(prefix / "bin" / "python"), str(prefix / "share" / "attnlab" / "ngshare_service.py"),
         f"--database=sqlite:///{tmp_path / 'ngshare.sqlite'}", f"--storage={tmp_path / 'files'}", "--admins=teacher"],
        env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin", "JUPYTERHUB_API_URL": "http://127.0.0.1:9/hub/api",
             "JUPYTERHUB_API_TOKEN": "unused", "JUPYTERHUB_CLIENT_ID": "service-ngshare",
             "JUPYTERHUB_SERVICE_PREFIX": "/services/ngshare/", "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{port}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, answer = time.monotonic() + 120, None
        while time.monotonic() < deadline and service.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/services/ngshare/healthz", timeout=5) as reply:
                    answer = (reply.status, reply.read().decode())
                break
            except OSError:
                time.sleep(0.5)
    finally:
        service.terminate()
        output = service.communicate(timeout=60)[0]
    assert answer is not None and answer[0] == 200, output
    assert "Running upgrade" in output  # its database was made by ngshare's own migrations
