"""Drive the class hub of ``deploy/jupyterhub/`` from the tests: Unix accounts, the hub, each user's
server through the hub (REST with the user's own token, kernels over websockets), memory, and a
throwaway PostgreSQL cluster.

Everything the tests start here, they stop: the hub (which stops the users' servers and the
proxy), the accounts and their home folders, the database cluster.
"""

from __future__ import annotations

import glob
import http.cookiejar
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.browser.labdriver import free_port, free_ports

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "jupyterhub"
sys.path.insert(0, str(DEPLOY))
from settings import Settings  # noqa: E402 (deploy/jupyterhub is not a package)


# Lines the tests report (times, memory), printed at the end of the run by conftest.py, where
# pytest does not swallow them as it does a passing test's output.
SUMMARY: list[str] = []


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the 302 surfaces as an HTTPError


class HTTPFailure(RuntimeError):
    def __init__(self, status: int, url: str, body: str):
        super().__init__(f"HTTP {status} from {url}: {body[:2000]}")
        self.status = status


def request(method: str, url: str, token: str | None = None, body=None, timeout: float = 120,
            raw: bytes | None = None) -> dict | list | str | None:
    """One HTTP request; JSON in and out (text when the answer is not JSON)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token:
        headers["Authorization"] = f"token {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        raise HTTPFailure(exc.code, url, exc.read().decode(errors="replace")) from None
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- Unix accounts --------------------------------------------------------------------------------

def add_user(role: str, name: str, password: str, settings: Settings) -> None:
    """``deploy/jupyterhub/add-user.sh``, as an instructor would run it (idempotent)."""
    env = {**os.environ, "ATTNLAB_HUB_LEARNERS": settings.learners_group,
           "ATTNLAB_HUB_INSTRUCTORS": settings.instructors_group}
    done = subprocess.run(["bash", str(DEPLOY / "add-user.sh"), role, name, "--password-stdin"],
                          input=f"{name}:{password}\n", env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def remove_users(names: list[str], groups: tuple[str, ...]) -> None:
    """Kill what still runs as these users (by process id), delete them with their homes, and the groups."""
    uids = set()
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    for process in psutil.process_iter(["uids"]):
        try:
            if process.info["uids"] and process.info["uids"].real in uids:
                process.kill()
        except psutil.Error:
            pass
    for name in names:
        subprocess.run(["userdel", "--remove", name], capture_output=True, timeout=60)
    for group in groups:
        subprocess.run(["groupdel", group], capture_output=True, timeout=60)


def run_as(user: str, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
           timeout: float = 600) -> subprocess.CompletedProcess:
    """A command as ``user`` (util-linux runuser), with a clean environment and that user's HOME."""
    home = pwd.getpwnam(user).pw_dir
    environment = {"HOME": home, "USER": user, "PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {})}
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in environment.items()],
                           *argv], cwd=cwd or home, capture_output=True, text=True, timeout=timeout)


# --- the hub ----------------------------------------------------------------------------------------

@dataclass
class Hub:
    """``deploy/jupyterhub/start.sh`` on free localhost ports, state and exchange under ``folder``;
    ``exchange_service="ngshare"`` for nbgrader's exchange as the ngshare service."""

    folder: Path
    log: Path
    learners_group: str
    instructors_group: str
    exchange_service: str = "folder"
    process: subprocess.Popen | None = None
    settings: Settings = field(init=False)

    def __post_init__(self):
        public, api, proxy_api, ngshare = free_ports(4)
        self.settings = Settings(
            url=f"http://127.0.0.1:{public}", api_url=f"http://127.0.0.1:{api}",
            proxy_api_url=f"http://127.0.0.1:{proxy_api}", state=self.folder / "state",
            exchange=self.folder / "exchange", exchange_service=self.exchange_service,
            ngshare_url=f"http://127.0.0.1:{ngshare}", learners_group=self.learners_group,
            instructors_group=self.instructors_group,
        )

    @property
    def url(self) -> str:
        return self.settings.url

    def environment(self) -> dict[str, str]:
        s = self.settings
        return {**{k: v for k, v in os.environ.items() if not k.startswith(("ATTNLAB_", "JUPYTER"))},
                "ATTNLAB_HUB_URL": s.url, "ATTNLAB_HUB_API_URL": s.api_url,
                "ATTNLAB_HUB_PROXY_API_URL": s.proxy_api_url, "ATTNLAB_HUB_STATE": str(s.state),
                "ATTNLAB_HUB_EXCHANGE": str(s.exchange), "ATTNLAB_HUB_EXCHANGE_SERVICE": s.exchange_service,
                "ATTNLAB_HUB_NGSHARE_URL": s.ngshare_url, "ATTNLAB_HUB_LEARNERS": s.learners_group,
                "ATTNLAB_HUB_INSTRUCTORS": s.instructors_group, "ATTNLAB_HUB_PYTHON": sys.executable}

    def start(self, timeout: float = 300) -> "Hub":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        handle = self.log.open("w")
        self.process = subprocess.Popen(["bash", str(DEPLOY / "start.sh")], env=self.environment(),
                                        stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the hub exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                request("GET", f"{self.url}/hub/api/", timeout=5)
                SUMMARY.append(f"start.sh (prepare.py, then JupyterHub and its proxy) answered in "
                               f"{time.monotonic() - started:.0f} s")
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, HTTPFailure):
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the hub did not answer within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM: JupyterHub stops the users' servers and the proxy, then exits. What is left
        (after a hub that failed or had to be killed) is killed by process id: the hub's process
        group, and the proxy, which runs in a session of its own."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        pid_file = self.settings.state / "hub" / "proxy.pid"
        try:
            proxy = psutil.Process(int(pid_file.read_text().strip()))
            if "configurable-http-proxy" in " ".join(proxy.cmdline()) and self.settings.url.rsplit(":", 1)[1] in proxy.cmdline():
                proxy.kill()
                proxy.wait(timeout=30)
        except (OSError, ValueError, psutil.Error):
            pass

    def login(self, name: str, password: str) -> None:
        """Log in at the hub's login form, as a browser does (the hub then knows the user), without
        following the redirect that would start the user's server."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect())
        opener.open(f"{self.url}/hub/login", timeout=120).read()
        xsrf = next((cookie.value for cookie in jar if cookie.name == "_xsrf"), "")
        form = urllib.parse.urlencode({"username": name, "password": password, "_xsrf": xsrf}).encode()
        try:
            opener.open(urllib.request.Request(f"{self.url}/hub/login?next=%2Fhub%2Fhome", data=form), timeout=120)
        except urllib.error.HTTPError as exc:
            if exc.code != 302:
                raise HTTPFailure(exc.code, f"{self.url}/hub/login", exc.read().decode(errors="replace")) from None
            return
        raise AssertionError(f"the hub did not accept {name}'s password")

    def user(self, name: str, password: str) -> "HubUser":
        """A user of the hub with an API token of their own, asked for with their password."""
        self.login(name, password)
        answer = request("POST", f"{self.url}/hub/api/users/{name}/tokens",
                         body={"auth": {"username": name, "password": password}, "note": "tests/hub",
                               "expires_in": 4 * 3600})
        return HubUser(self, name, password, answer["token"])

    def processes(self) -> dict[str, list[psutil.Process]]:
        """The hub's process tree by kind: hub, proxy, culler, server, kernel, other."""
        kinds: dict[str, list[psutil.Process]] = {k: [] for k in ("hub", "proxy", "culler", "server", "kernel", "other")}
        hub = psutil.Process(self.process.pid)
        kinds["hub"].append(hub)
        for child in hub.children(recursive=True):
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "configurable-http-proxy" in line:
                kinds["proxy"].append(child)
            elif "jupyterhub_idle_culler" in line:
                kinds["culler"].append(child)
            elif "jupyterhub.singleuser" in line:
                kinds["server"].append(child)
            elif "ipykernel" in line:
                kinds["kernel"].append(child)
            else:
                kinds["other"].append(child)
        return kinds


@dataclass
class HubUser:
    hub: Hub
    name: str
    password: str
    token: str

    # --- the user's server ------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"{self.hub.url}/user/{self.name}"

    def hub_api(self, method: str, path: str, body=None, timeout: float = 120):
        return request(method, f"{self.hub.url}/hub/api{path}", self.token, body, timeout)

    def api(self, method: str, path: str, body=None, timeout: float = 300, raw: bytes | None = None):
        """A request to the user's own server, through the proxy."""
        return request(method, f"{self.base}{path}", self.token, body, timeout, raw)

    def start_server(self) -> None:
        model = self.hub_api("GET", f"/users/{self.name}")
        if not model.get("servers", {}).get("", {}).get("ready"):
            try:
                self.hub_api("POST", f"/users/{self.name}/server")
            except HTTPFailure as exc:
                if exc.status != 400:  # 400: already running or starting
                    raise

    def wait_ready(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = self.hub_api("GET", f"/users/{self.name}").get("servers", {}).get("", {})
            if server.get("ready"):
                self.api("GET", "/api/status", timeout=60)
                return
            time.sleep(1)
        raise TimeoutError(f"the server of {self.name} was not ready within {timeout} s")

    def stop_server(self) -> None:
        try:
            self.hub_api("DELETE", f"/users/{self.name}/server", timeout=120)
        except HTTPFailure as exc:
            if exc.status != 400:
                raise

    # --- files (the contents API, as JupyterLab saves them) -------------------------------------------

    def mkdir(self, path: str) -> None:
        self.api("PUT", f"/api/contents/{urllib.parse.quote(path)}", {"type": "directory"})

    def write(self, path: str, text: str) -> None:
        self.api("PUT", f"/api/contents/{urllib.parse.quote(path)}",
                 {"type": "file", "format": "text", "content": text})

    def read(self, path: str) -> str:
        return self.api("GET", f"/api/contents/{urllib.parse.quote(path)}?content=1&format=text&type=file")["content"]

    def listing(self, path: str) -> list[str]:
        return [item["name"] for item in self.api("GET", f"/api/contents/{urllib.parse.quote(path)}?content=1")["content"]]

    # --- nbgrader's Assignment List handlers ------------------------------------------------------------

    def assignments(self, course_id: str) -> list[dict]:
        answer = self.api("GET", f"/assignments?course_id={course_id}")
        assert answer["success"], answer
        return answer["value"]

    def assignment_action(self, action: str, course_id: str, assignment_id: str) -> dict:
        """``fetch``, ``submit`` or ``fetch_feedback``, as the Assignment List's buttons post them."""
        answer = self.api("POST", f"/assignments/{action}", {"course_id": course_id, "assignment_id": assignment_id})
        assert answer["success"], answer
        return answer

    # --- kernels -----------------------------------------------------------------------------------------

    def kernel(self, path: str) -> "Kernel":
        """A kernel of a notebook session on ``path`` (its working folder is the notebook's)."""
        session = self.api("POST", "/api/sessions", {"path": path, "type": "notebook", "name": Path(path).name,
                                                     "kernel": {"name": "python3"}})
        return Kernel(self, session["id"], session["kernel"]["id"])


@dataclass
class CellRun:
    code: str
    output: str
    error: str | None
    seconds: float


class Kernel:
    """Execute code in a kernel of the user's server over its websocket, as JupyterLab does."""

    def __init__(self, user: HubUser, session_id: str, kernel_id: str):
        import websocket  # websocket-client, a dependency of jupyter_server

        self.user, self.session_id, self.kernel_id = user, session_id, kernel_id
        self.client_session = uuid.uuid4().hex
        url = user.base.replace("http://", "ws://", 1) + f"/api/kernels/{kernel_id}/channels?session_id={self.client_session}"
        self.socket = websocket.create_connection(url, header=[f"Authorization: token {user.token}"], timeout=600)

    def run(self, code: str, timeout: float = 600) -> CellRun:
        msg_id = uuid.uuid4().hex
        self.socket.send(json.dumps({
            "header": {"msg_id": msg_id, "username": self.user.name, "session": self.client_session,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        start, output, error = time.monotonic(), [], None
        replied = idle = False
        while not (replied and idle):
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{self.user.name}: a cell ran past {timeout} s: {code[:200]}")
            message = json.loads(self.socket.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                output.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                output.append(content.get("data", {}).get("text/plain", ""))
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "execute_reply":
                replied = True
                if content["status"] != "ok" and error is None:
                    error = f"{content.get('ename')}: {content.get('evalue')}"
        return CellRun(code, "".join(output), error, time.monotonic() - start)

    def run_json(self, code: str, timeout: float = 600):
        """Run ``code`` whose last line prints one JSON value; that value."""
        done = self.run(code, timeout)
        assert done.error is None, f"{done.error}\n{done.output}"
        return json.loads(done.output.strip().splitlines()[-1])

    def close(self) -> None:
        self.socket.close()
        try:
            self.user.api("DELETE", f"/api/sessions/{self.session_id}", timeout=60)
        except HTTPFailure:
            pass


# --- memory -------------------------------------------------------------------------------------------

class MemorySampler(threading.Thread):
    """Samples the resident memory of the hub's process tree by kind, every ``every`` seconds."""

    def __init__(self, hub: Hub, every: float = 1.0):
        super().__init__(daemon=True)
        self.hub, self.every = hub, every
        self.peak: dict[str, int] = {}
        self.peak_total = 0
        self.counts: dict[str, int] = {}
        self._done = threading.Event()

    def sample(self) -> dict[str, int]:
        totals = {}
        for kind, processes in self.hub.processes().items():
            total = 0
            for process in processes:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            totals[kind] = total
            self.counts[kind] = max(self.counts.get(kind, 0), len(processes))
        return totals

    def run(self) -> None:
        while not self._done.is_set():
            totals = self.sample()
            for kind, value in totals.items():
                self.peak[kind] = max(self.peak.get(kind, 0), value)
            self.peak_total = max(self.peak_total, sum(totals.values()))
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)


# --- PostgreSQL -----------------------------------------------------------------------------------------

def postgres_bin() -> Path | None:
    """Debian's PostgreSQL server programs (apt-get install postgresql), the newest version."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A throwaway PostgreSQL cluster owned by the ``postgres`` user, on a free localhost port.

    As on a real gradebook server, a connection over TCP must give the password (``password``;
    scram-sha-256); ``url`` holds none, ``url_with_password`` does. The Unix socket in its own
    folder, which only root and ``postgres`` reach, is trusted for setting it up."""

    def __init__(self, folder: Path):
        self.folder, self.bin, self.port = folder, postgres_bin(), free_port()
        self.data = folder / "data"
        self.password = uuid.uuid4().hex

    def _as_postgres(self, *argv: str) -> None:
        done = subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"

    def start(self) -> "Postgres":
        self.folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["chown", "postgres:postgres", str(self.folder)], check=True)
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        subprocess.run(["chown", "postgres:postgres", str(password_file)], check=True)
        try:
            self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "--auth-local=trust",
                              "--auth-host=scram-sha-256", "-U", "postgres", f"--pwfile={password_file}")
        finally:
            password_file.unlink()
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"), "-w",
                          "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start")
        self._as_postgres(str(self.bin / "createdb"), "-h", str(self.folder), "-p", str(self.port), "-U", "postgres",
                          "gradebook")
        return self

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/gradebook"

    @property
    def url_with_password(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/gradebook"

    def pgpass_line(self) -> str:
        """This server's line of a ``~/.pgpass`` file (host:port:database:user:password)."""
        return f"127.0.0.1:{self.port}:gradebook:postgres:{self.password}\n"

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
