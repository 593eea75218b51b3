"""Run untrusted code (a learner's notebook kernel, the grading worker) in a sandbox.

The sandbox is an allowlist: the command sees only what it needs, and nothing of the machine it is
not given. Bubblewrap (``bwrap``, the sandbox Flatpak uses) builds the view, in new mount, PID,
network, IPC, UTS and cgroup namespaces:

- read-only: the system's ``/usr`` (with ``/usr/local`` covered: it holds nbgrader's default
  exchange), the Python environment (``sys.prefix`` and ``sys.base_prefix``), the installed
  ``attnlab`` package, a generated ``/etc`` (passwd, group, hosts) and named extra files (the
  worker's code);
- writable: ``/sandbox/work``, a size-limited tmpfs holding a copy of the command's folder (its cwd); a
  private ``/tmp`` and ``/dev/shm``; folders the caller shares on purpose (the kernel's sockets);
- a fresh minimal ``/dev``, and ``/proc`` of its own PID namespace with ``/proc/sys`` read-only;
- no network at all (not even loopback), no host socket, no repository, no course directory, no
  home folder, no other submission: what is not listed does not exist inside;
- an environment built from an allowlist (``Config.env``): nothing of the grader's is inherited.

Inside, ``setpriv`` drops to an unprivileged user (``SANDBOX_UID``, nobody) with no capabilities and
no way to gain any (no_new_privs, empty bounding set), and ``unshare --user`` adds a user namespace
of that user's own. Around it: a memory and a pids cgroup (memory without the address-space rlimit
that breaks ``import torch``), rlimits for CPU seconds, file sizes and open files, a cap on what
the command may write to its standard output and error, and a wall clock after which the caller
kills everything.

``run`` sandboxes one command and reports why it ended. ``python -m autograder.sandbox kernel -- ...``
is the launcher a grading kernelspec uses, configured by the JSON file named in
``AUTOGRADER_SANDBOX``; it writes the kernel's outcome to the file the config names.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

CONFIG_ENV = "AUTOGRADER_SANDBOX"
RUN_ENV = "AUTOGRADER_RUN"
MiB = 1024 * 1024
SANDBOX_UID = 65534  # nobody: owns nothing on the machine
WORK = "/sandbox/work"  # the command's folder inside the sandbox
_INBOX = "/sandbox/in"  # the host folder whose copy becomes /work, read-only
# Variables a kernel launcher passes on from jupyter's environment (nbgrader sets the first while it
# executes a notebook; lessons skip their training cells under it).
KERNEL_PASSTHROUGH = ("NBGRADER_EXECUTION",)


@dataclass
class Limits:
    """What one sandboxed command may use."""

    wall_s: float = 300.0
    cpu_s: int = 300
    memory_bytes: int = 3 * 1024 * MiB
    pids: int = 128
    file_bytes: int = 64 * MiB
    scratch_bytes: int = 256 * MiB  # /work; /tmp and /dev/shm get the same size each
    open_files: int = 512
    output_bytes: int = 1 * MiB  # of standard output and error kept; the rest is counted, dropped


@dataclass
class Config:
    """What the sandboxed command sees and may use.

    workdir:   host folder whose copy is the command's ``/sandbox/work`` (its cwd), a size-limited tmpfs;
               nothing written there comes back.
    env:       the command's whole environment (an allowlist: nothing else is inherited).
    readonly:  extra host files or folders, inside path -> host path, read-only.
    shared_rw: host folders shared read-write at the same path (the kernel's socket folder).
    """

    workdir: str
    env: dict[str, str] = field(default_factory=dict)
    readonly: dict[str, str] = field(default_factory=dict)
    shared_rw: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    outcome_file: str | None = None  # the kernel launcher writes its outcome here
    log_file: str | None = None  # the kernel launcher writes the kernel's own output here, capped

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        data = json.loads(Path(path).read_text())
        data["limits"] = Limits(**data.get("limits", {}))
        return cls(**data)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self)))


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every sandboxed command starts from, plus ``extra``."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": WORK, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "MPLCONFIGDIR": "/tmp/matplotlib", "IPYTHONDIR": "/tmp/ipython", "FONTCONFIG_FILE": "/etc/fonts.conf",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg",
    }
    env.update(extra or {})
    return env


# --- cgroups ------------------------------------------------------------------------------------

class Cgroup:
    """A memory and a pids cgroup (v1 or v2) for one sandbox; absent controllers are reported."""

    def __init__(self, limits: Limits):
        # A grading run names its cgroups after itself (RUN_ENV), so it can sweep up after a
        # launcher that was killed before it could remove its own.
        self.name = f"attnlab-{os.environ.get(RUN_ENV, 'x')}-{uuid.uuid4().hex[:12]}"
        self.dirs: dict[str, Path] = {}
        self.missing: list[str] = []
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        for controller, limit_file, value in (
            ("memory", "memory.limit_in_bytes", limits.memory_bytes),
            ("pids", "pids.max", limits.pids),
        ):
            base = self._base(controller, v2.exists() and not Path(f"/sys/fs/cgroup/{controller}").exists())
            try:
                folder = base / self.name
                folder.mkdir()
                if base == Path("/sys/fs/cgroup") or (base / "cgroup.controllers").exists():
                    limit_file = "memory.max" if controller == "memory" else "pids.max"
                    if controller == "memory":
                        (folder / "memory.swap.max").write_text("0") if (folder / "memory.swap.max").exists() else None
                (folder / limit_file).write_text(str(value))
                if controller == "memory" and (folder / "memory.memsw.limit_in_bytes").exists():
                    try:  # no swapping around the limit where the kernel accounts swap
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(value))
                    except OSError:
                        pass
                self.dirs[controller] = folder
            except OSError as exc:
                self.missing.append(f"{controller} cgroup ({exc.strerror or exc})")
        # CPU accounting (no limit: RLIMIT_CPU limits each process), to tell a CPU-limit kill from
        # a self-inflicted signal; cgroup v2 accounts CPU in every cgroup, v1 in cpuacct.
        if "cpuacct" not in self.dirs and Path("/sys/fs/cgroup/cpuacct").is_dir():
            try:
                folder = self._base("cpuacct", False) / self.name
                folder.mkdir()
                self.dirs["cpuacct"] = folder
            except OSError:
                pass

    def cpu_seconds(self) -> float:
        """CPU seconds used by everything in the cgroups so far (0 where not accounted)."""
        for folder in self.dirs.values():
            try:
                if (folder / "cpuacct.usage").exists():
                    return int((folder / "cpuacct.usage").read_text()) / 1e9
                if (folder / "cpu.stat").exists():
                    stats = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
                    return int(stats.get("usage_usec", 0)) / 1e6
            except (OSError, ValueError):
                pass
        return 0.0

    @staticmethod
    def _base(controller: str, unified: bool) -> Path:
        """The folder of this process's own cgroup for ``controller``: sandboxes nest under it."""
        root = Path("/sys/fs/cgroup") if unified else Path("/sys/fs/cgroup") / controller
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if (unified and names == "") or controller in names.split(","):
                return root / path.lstrip("/")
        return root

    def enter(self) -> None:
        """Put the calling process (and so its children) into the cgroups."""
        for folder in self.dirs.values():
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        found = set()
        for folder in self.dirs.values():
            try:
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self) -> None:
        for _ in range(20):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def memory_exceeded(self) -> bool:
        folder = self.dirs.get("memory")
        if folder is None:
            return False
        for name in ("memory.events", "memory.oom_control"):
            path = folder / name
            if path.exists():
                for line in path.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("oom_kill", "oom") and int(value or 0) > 0:
                        return True
        failcnt = folder / "memory.failcnt"
        return failcnt.exists() and int(failcnt.read_text() or 0) > 0

    def pids_exceeded(self) -> bool:
        folder = self.dirs.get("pids")
        events = folder / "pids.events" if folder else None
        if events and events.exists():
            return any(line.startswith("max ") and int(line.split()[1]) > 0 for line in events.read_text().splitlines())
        return False

    def remove(self) -> None:
        self.kill_all()
        for folder in self.dirs.values():
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def sweep_cgroups(run: str) -> int:
    """Kill what is left in, and remove, every cgroup of grading run ``run``; how many there were."""
    folders = [p for p in Path("/sys/fs/cgroup").rglob(f"attnlab-{run}-*") if p.is_dir()]
    for folder in folders:
        try:
            for pid in (folder / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        except OSError:
            pass
    for folder in folders:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.05)
    return len(folders)


def missing_protections() -> list[str]:
    """Protections this machine cannot give (empty where the sandbox is complete)."""
    missing = [f"{tool} not found ({package})" for tool, package in
               (("bwrap", "Debian's bubblewrap"), ("setpriv", "util-linux"), ("unshare", "util-linux"))
               if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("grading must run as root (to drop each sandbox to an unprivileged user)")
    if not missing:
        with tempfile.TemporaryDirectory() as folder:
            probe = subprocess.run(_argv(["true"], Config(workdir=folder, env=base_env())), capture_output=True)
            if probe.returncode != 0:
                missing.append("bubblewrap could not build the sandbox: "
                               + probe.stderr.decode(errors="replace").strip()[-300:])
    group = Cgroup(Limits())
    missing += group.missing
    group.remove()
    return missing


# --- the view ------------------------------------------------------------------------------------

_ETC = {
    "passwd": f"root:x:0:0::/nonexistent:/usr/sbin/nologin\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}::{WORK}:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\n",
    "hosts": "127.0.0.1 localhost\n",
    # matplotlib asks fontconfig (fc-list) for fonts; without a config it prints an error into the
    # notebook's first cell that imports it. The system's fonts, a cache in the private /tmp.
    "fonts.conf": ('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n'
                   "<fontconfig><dir>/usr/share/fonts</dir><cachedir>/tmp/fontconfig</cachedir></fontconfig>\n"),
}
_HOST_ETC = ("ld.so.cache", "localtime")  # read from the host: the loader's cache, the time zone
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # usually symbolic links into /usr
_BOOTSTRAP = (  # runs first inside: copy the inbox into /work (tmpfs, owned by root, mode 0777)
    "import os, shutil, sys\n"
    f"src, dst = {_INBOX!r}, {WORK!r}\n"
    "for top, dirs, files in os.walk(src):\n"
    "    rel = os.path.relpath(top, src)\n"
    "    for name in dirs:\n"
    "        os.makedirs(os.path.join(dst, rel, name), exist_ok=True)\n"
    "    for name in files:\n"
    "        path = os.path.join(top, name)\n"
    "        if not os.path.islink(path):\n"
    "            shutil.copyfile(path, os.path.join(dst, rel, name))\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)


def _python_roots() -> list[str]:
    """Folders the Python environment and the installed library live in."""
    import attnlab

    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
             os.path.realpath(Path(attnlab.__file__).parent)}
    # Keep the outermost folders only (a package inside a prefix needs no bind of its own).
    return sorted(r for r in roots if not any(r != o and r.startswith(o + os.sep) for o in roots))


def _etc_folder() -> str:
    """A folder with the generated /etc files (one per process, made once)."""
    global _etc_dir
    if _etc_dir is None or not Path(_etc_dir).is_dir():
        _etc_dir = tempfile.mkdtemp(prefix="attnlab-etc-")
        for name, text in _ETC.items():
            Path(_etc_dir, name).write_text(text)
        os.chmod(_etc_dir, 0o755)
        atexit.register(shutil.rmtree, _etc_dir, True)  # gone with the process that made it
    return _etc_dir


_etc_dir: str | None = None


class _View:
    """The bwrap arguments that build the sandbox's file system, parents made as they are needed."""

    def __init__(self):
        self.args: list[str] = []
        self.made = {"/"}
        self.bound: list[str] = []  # destinations bound from the host (their insides exist already)

    def _parents(self, dest: str) -> None:
        parts = Path(dest).parts
        for depth in range(2, len(parts)):
            folder = str(Path(*parts[:depth]))
            if folder in self.made or any(folder == b or folder.startswith(b + "/") for b in self.bound):
                continue
            self.args += ["--perms", "0755", "--dir", folder]
            self.made.add(folder)

    def bind(self, host: str, dest: str | None = None, writable: bool = False) -> None:
        dest = dest or host
        self._parents(dest)
        self.args += ["--bind" if writable else "--ro-bind", host, dest]
        self.bound.append(dest)
        self.made.add(dest)

    def tmpfs(self, dest: str, size: int, mode: str) -> None:
        self._parents(dest)
        self.args += ["--size", str(size), "--perms", mode, "--tmpfs", dest]
        self.made.add(dest)
        self.bound = [b for b in self.bound if not b.startswith(dest + "/")]


def _argv(argv: list[str], config: Config) -> list[str]:
    """The command line that runs ``argv`` in the sandbox ``config`` describes."""
    size = config.limits.scratch_bytes
    view = _View()
    view.bind("/usr")
    view.tmpfs("/usr/local", 64 * 1024, "0755")  # nbgrader's default exchange lives there
    for name in _SYSTEM_LINKS:
        host = Path("/", name)
        if host.is_symlink():
            view.args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            view.bind(str(host))
    etc = _etc_folder()
    for name in _ETC:
        view.bind(str(Path(etc, name)), f"/etc/{name}")
    for name in _HOST_ETC:
        if Path("/etc", name).exists():
            view.bind(str(Path("/etc", name).resolve()), f"/etc/{name}")
    view.args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    view.made.update({"/proc", "/dev"})
    view.tmpfs("/dev/shm", size, "1777")
    view.tmpfs("/tmp", size, "1777")
    # After the private /tmp: a course (and its environment) installed under /tmp stays visible.
    for root in _python_roots():
        view.bind(root)
    for inside, host in sorted(config.readonly.items()):
        view.bind(host, inside)
    view.bind(config.workdir, _INBOX)
    view.tmpfs(WORK, size, "0777")
    for shared in config.shared_rw:
        view.bind(shared, writable=True)
    environment = []
    for key, value in sorted(config.env.items()):
        environment += ["--setenv", key, value]
    return [
        "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        # bwrap runs as root without a user namespace of its own (so it can bind what root can
        # read); it keeps only what setpriv needs to drop to the unprivileged user.
        "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
        *view.args, "--chdir", WORK, "--clearenv", *environment, "--",
        "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        "unshare", "--user", "--",
        sys.executable, "-I", "-c", _BOOTSTRAP, *argv,
    ]


def _make_readable(folder: Path) -> None:
    """Let the sandbox's user read the host folder it gets a copy of."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _share(folder: str) -> None:
    """Hand a shared folder (and what is in it) to the sandbox's user."""
    for path in [Path(folder), *Path(folder).iterdir()]:
        os.chown(path, SANDBOX_UID, SANDBOX_UID)


# --- running a command in the sandbox ------------------------------------------------------------

@dataclass
class Outcome:
    """How a sandboxed command ended."""

    returncode: int | None
    reason: str  # "" when it exited by itself; otherwise which limit ended it
    seconds: float
    dropped_output_bytes: int = 0  # output beyond ``Limits.output_bytes``, not kept
    not_ready: bool = False  # killed because it did not get ready in time (``Ready``)


@dataclass
class Ready:
    """A command must get ready within ``seconds`` of its start (``check()`` turns true: say, its
    answer file holds its first line), or it is killed then, long before its wall clock runs out.
    The grader uses it to tell a library whose import never finishes from a slow function."""

    seconds: float
    check: Callable[[], bool]


def _limit_resources(limits: Limits, cgroup: Cgroup | None) -> None:
    """preexec: runs in the child before exec."""
    import ctypes

    # If whoever started the sandbox dies (even by SIGKILL), the sandbox dies with it.
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if cgroup is not None:
        cgroup.enter()
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class CappedCopy(threading.Thread):
    """Copies a pipe into a file, keeping the first ``limit`` bytes and counting the rest."""

    def __init__(self, pipe, target: str | None, limit: int, on_first_drop=None):
        super().__init__(daemon=True)
        self.pipe, self.target, self.limit = pipe, target, limit
        self.on_first_drop = on_first_drop  # called once, when the output first goes over the limit
        self.kept = self.dropped = 0

    def run(self) -> None:
        sink = open(self.target, "wb") if self.target else None
        try:
            while chunk := self.pipe.read(65536):
                room = max(0, self.limit - self.kept)
                if sink is not None and room:
                    sink.write(chunk[:room])
                self.kept += min(room, len(chunk))
                if len(chunk) > room and not self.dropped and self.on_first_drop is not None:
                    self.on_first_drop()
                self.dropped += max(0, len(chunk) - room)
            if sink is not None and self.dropped:
                sink.write(f"\n[grader: {self.dropped} more bytes of output were dropped]\n".encode())
        finally:
            if sink is not None:
                sink.close()
            self.pipe.close()


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, ValueError, OSError):  # it ended before reading all of its input
        pass


def _wait(process: subprocess.Popen, timeout: float, ready: Ready | None = None) -> tuple[bool, float, bool]:
    """Wait for ``process`` at most ``timeout`` seconds, or until ``ready.seconds`` have passed
    without it getting ready; (timed out, CPU seconds it and its descendants used, not ready).
    ``os.wait4`` gives the CPU time, which tells a CPU-limit kill apart."""
    start = time.monotonic()
    deadline = start + timeout
    waiting_for_ready = ready is not None
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return False, usage.ru_utime + usage.ru_stime, False
        now = time.monotonic()
        if waiting_for_ready and ready.check():
            waiting_for_ready = False
        elif waiting_for_ready and now - start > ready.seconds:
            return False, 0.0, True
        if now > deadline:
            return True, 0.0, False
        time.sleep(0.05)


def _reason(returncode: int | None, cgroup: Cgroup, limits: Limits, timed_out: bool, cpu: float = 0.0) -> str:
    # bwrap exits with 128 + N when the command inside was killed by signal N.
    if returncode is not None and returncode > 128 and returncode - 128 in signal.valid_signals():
        returncode = -(returncode - 128)
    if cpu >= limits.cpu_s - 0.05:
        return f"CPU time limit of {limits.cpu_s} s reached; killed"
    if timed_out:
        also = f" (it had also hit the process limit of {limits.pids})" if cgroup.pids_exceeded() else ""
        return f"wall-clock limit of {limits.wall_s:g} s reached; killed{also}"
    if cgroup.memory_exceeded():
        return f"memory limit of {limits.memory_bytes // MiB} MiB reached; killed"
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU and cpu >= limits.cpu_s - 0.05:
            return f"CPU time limit of {limits.cpu_s} s reached; killed"
        if signum == signal.SIGXFSZ:
            return f"file size limit of {limits.file_bytes // MiB} MiB reached; killed"
        if signum == signal.SIGKILL and cgroup.pids_exceeded():
            return f"process limit of {limits.pids} reached; killed"
        return f"killed by signal {signal.Signals(signum).name}"
    if cgroup.pids_exceeded():
        return f"process limit of {limits.pids} reached"
    return ""


def _start(argv: list[str], config: Config, cgroup: Cgroup, **popen) -> subprocess.Popen:
    _make_readable(Path(config.workdir))
    for shared in config.shared_rw:
        _share(shared)
    return subprocess.Popen(_argv(argv, config), start_new_session=True, env={"PATH": "/usr/bin:/bin"},
                            preexec_fn=lambda: _limit_resources(config.limits, cgroup), **popen)


def run(argv: list[str], config: Config, stdin: bytes | None = None, stdout=subprocess.DEVNULL,
        log: str | Path | None = None, ready: Ready | None = None) -> Outcome:
    """Run ``argv`` sandboxed and wait for it (at most ``config.limits.wall_s``).

    stdout: where its standard output goes (a file object), unlimited but for ``file_bytes``;
    log: file for its standard error, of which at most ``limits.output_bytes`` are kept;
    ready: kill it early when it does not get ready in time (``Outcome.not_ready`` says so).
    """
    cgroup = Cgroup(config.limits)
    start = time.monotonic()
    try:
        process = _start(argv, config, cgroup, stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE)
        errors = CappedCopy(process.stderr, str(log) if log else None, config.limits.output_bytes)
        errors.start()
        # Feed the input from a thread: a command that stops reading must not block the clock.
        threading.Thread(target=_feed, args=(process.stdin, stdin or b""), daemon=True).start()
        timed_out, cpu, not_ready = _wait(process, config.limits.wall_s, ready)
        cpu = max(cpu, cgroup.cpu_seconds())
        if timed_out or not_ready:
            cgroup.kill_all()
            process.kill()
            process.wait()
        errors.join(timeout=10)
        if not_ready:
            return Outcome(process.returncode, f"not ready within {ready.seconds:g} s; killed",
                           time.monotonic() - start, errors.dropped, not_ready=True)
        return Outcome(process.returncode, _reason(process.returncode, cgroup, config.limits, timed_out, cpu),
                       time.monotonic() - start, errors.dropped)
    finally:
        cgroup.remove()


# --- the kernel launcher ---------------------------------------------------------------------------

def _kernel(argv: list[str]) -> int:
    """Launch a kernel (``argv``) sandboxed, as a kernelspec does; record how it ended."""
    config = Config.load(os.environ[CONFIG_ENV])
    config.workdir = os.getcwd()  # jupyter starts kernels in the notebook's folder
    config.env = {**config.env, **{k: os.environ[k] for k in KERNEL_PASSTHROUGH if k in os.environ}}
    connection = argv[argv.index("-f") + 1] if "-f" in argv else None
    if connection:
        config.shared_rw = [*config.shared_rw, str(Path(connection).parent)]
    cgroup = Cgroup(config.limits)
    start = time.monotonic()
    # Interrupts reach the kernel through the process group; this launcher must outlive them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    process = _start(argv, config, cgroup, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT)
    def record(outcome: Outcome) -> None:
        if config.outcome_file:
            Path(config.outcome_file).write_text(json.dumps(asdict(outcome)))

    # The kernel's own output (not its cells' output, which travels as messages) goes to a capped
    # log file, never to nbgrader's output, where it could pass for the grader's own messages. An
    # overflow is recorded at once: jupyter may kill this launcher before it can write at the end.
    output = CappedCopy(process.stdout, config.log_file, config.limits.output_bytes,
                        on_first_drop=lambda: record(Outcome(None, "", time.monotonic() - start, 1)))
    output.start()
    stopped = []  # jupyter asked the kernel to stop: a normal end, not a limit

    def stop(*_):
        stopped.append(True)
        cgroup.kill_all()
        process.kill()

    signal.signal(signal.SIGTERM, stop)
    timed_out, cpu, _ = _wait(process, config.limits.wall_s)
    cpu = max(cpu, cgroup.cpu_seconds())
    if timed_out:
        cgroup.kill_all()
        process.kill()
        process.wait()
    output.join(timeout=10)
    reason = "" if stopped else _reason(process.returncode, cgroup, config.limits, timed_out, cpu)
    outcome = Outcome(process.returncode, reason, time.monotonic() - start, output.dropped)
    cgroup.remove()
    record(outcome)
    return process.returncode or 0


def main(args: list[str]) -> int:
    if args[:1] == ["kernel"]:
        return _kernel(args[args.index("--") + 1:])
    print("usage: python -m autograder.sandbox kernel -- KERNEL_ARGV...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
