"""Run untrusted code (a learner's notebook kernel, the grading worker) in a sandbox.

Layers, each a plain Linux mechanism (util-linux ``unshare`` and ``mount``, cgroups, rlimits):

- new mount, network and PID namespaces: no network at all (not even loopback), a private view
  of the file system, and every process of the submission dies with the sandbox;
- in that view every mount is read-only except the submission's scratch folder (a size-limited
  tmpfs holding a copy of the submission) and folders the caller names as ``shared_rw`` (the
  kernel's socket folder); secret paths (``hide``: the reference, the hidden tests, the
  gradebook, other submissions) are covered by empty tmpfs or /dev/null;
- the command then runs in a new user namespace, so it holds no capability over those mounts:
  it cannot remount them writable or uncover a hidden path;
- a memory cgroup and a pids cgroup limit memory (without the address-space rlimit that breaks
  ``import torch``) and processes (fork bombs); rlimits cap CPU seconds, file size and open files;
- the caller kills everything on a wall-clock limit, also a kernel that ignores interrupts.

``run`` sandboxes one command and reports why it ended. ``python -m autograder.sandbox kernel -- ...``
is the launcher a grading kernelspec uses, configured by the JSON file named in
``AUTOGRADER_SANDBOX``; it writes the kernel's outcome to the file the config names.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

CONFIG_ENV = "AUTOGRADER_SANDBOX"
RUN_ENV = "AUTOGRADER_RUN"
MiB = 1024 * 1024


@dataclass
class Limits:
    """What one sandboxed command may use."""

    wall_s: float = 300.0
    cpu_s: int = 300
    memory_bytes: int = 3 * 1024 * MiB
    pids: int = 128
    file_bytes: int = 64 * MiB
    scratch_bytes: int = 256 * MiB
    open_files: int = 512


@dataclass
class Config:
    """Where the sandboxed command may write, what it may not see, and its limits."""

    workdir: str  # becomes a size-limited tmpfs holding a copy of its contents; the command's cwd
    hide: list[str] = field(default_factory=list)
    shared_rw: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    outcome_file: str | None = None  # the kernel launcher writes its outcome here

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        data = json.loads(Path(path).read_text())
        data["limits"] = Limits(**data.get("limits", {}))
        return cls(**data)

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self)))


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
    missing = []
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        missing.append("util-linux unshare/mount not found")
    else:
        probe = subprocess.run(
            ["unshare", "--mount", "--net", "--pid", "--fork", "unshare", "--user", "--map-root-user", "true"],
            capture_output=True,
        )
        if probe.returncode != 0:
            missing.append("namespaces: " + probe.stderr.decode(errors="replace").strip())
    group = Cgroup(Limits())
    missing += group.missing
    group.remove()
    return missing


# --- running a command in the sandbox ------------------------------------------------------------

@dataclass
class Outcome:
    """How a sandboxed command ended."""

    returncode: int | None
    reason: str  # "" when it exited by itself; otherwise which limit ended it
    seconds: float


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


def sandboxed_argv(argv: list[str], config_path: Path) -> list[str]:
    """The command line that runs ``argv`` inside the sandbox described by ``config_path``."""
    return [
        "unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", "--",
        sys.executable, "-m", "autograder.sandbox", "_inner", str(config_path), "--", *argv,
    ]


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, ValueError, OSError):  # it ended before reading all of its input
        pass


def _wait(process: subprocess.Popen, timeout: float) -> tuple[bool, float]:
    """Wait for ``process`` at most ``timeout`` seconds; (timed out, CPU seconds it and its
    descendants used). ``os.wait4`` gives the CPU time, which tells a CPU-limit kill apart."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return False, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            return True, 0.0
        time.sleep(0.05)


def _reason(returncode: int | None, cgroup: Cgroup, limits: Limits, timed_out: bool, cpu: float = 0.0) -> str:
    if cpu >= limits.cpu_s:
        return f"CPU time limit of {limits.cpu_s} s reached; killed"
    if timed_out:
        also = f" (it had also hit the process limit of {limits.pids})" if cgroup.pids_exceeded() else ""
        return f"wall-clock limit of {limits.wall_s:g} s reached; killed{also}"
    if cgroup.memory_exceeded():
        return f"memory limit of {limits.memory_bytes // MiB} MiB reached; killed"
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU:
            return f"CPU time limit of {limits.cpu_s} s reached; killed"
        if signum == signal.SIGXFSZ:
            return f"file size limit of {limits.file_bytes // MiB} MiB reached; killed"
        if signum == signal.SIGKILL and cgroup.pids_exceeded():
            return f"process limit of {limits.pids} reached; killed"
        return f"killed by signal {signal.Signals(signum).name}"
    if cgroup.pids_exceeded():
        return f"process limit of {limits.pids} reached"
    return ""


def run(argv: list[str], config: Config, stdin: bytes | None = None,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env: dict[str, str] | None = None) -> Outcome:
    """Run ``argv`` sandboxed and wait for it (at most ``config.limits.wall_s``)."""
    scratch = Path(config.workdir)
    config_path = scratch.parent / f".sandbox-{uuid.uuid4().hex[:8]}.json"
    config.dump(config_path)
    cgroup = Cgroup(config.limits)
    start = time.monotonic()
    try:
        process = subprocess.Popen(
            sandboxed_argv(argv, config_path), stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
            cwd=config.workdir, start_new_session=True, env=env,
            preexec_fn=lambda: _limit_resources(config.limits, cgroup),
        )
        # Feed the input from a thread: a command that stops reading must not block the clock.
        feeder = threading.Thread(target=_feed, args=(process.stdin, stdin or b""), daemon=True)
        feeder.start()
        timed_out, cpu = _wait(process, config.limits.wall_s)
        if timed_out:
            cgroup.kill_all()
            process.kill()
            process.wait()
        return Outcome(process.returncode, _reason(process.returncode, cgroup, config.limits, timed_out, cpu),
                       time.monotonic() - start)
    finally:
        cgroup.remove()
        config_path.unlink(missing_ok=True)


# --- inside the namespaces (runs as root there, before dropping to a user namespace) -------------

def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _mountpoints() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        points.append(point)
    return points


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Contents of ``folder`` (None for sub-folders), to copy into the tmpfs that replaces it."""
    files: dict[str, bytes | None] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            continue
        files[rel] = None if path.is_dir() else path.read_bytes()
    return files


def _inner(config_path: str, argv: list[str]) -> None:
    config = Config.load(config_path)
    work = Path(config.workdir)
    limits = config.limits
    _mount("--make-rprivate", "/")
    contents = _snapshot(work)
    # Folders shared with the outside stay reachable even below a hidden parent: hold them open
    # now, and bind them back (through /proc/self/fd) once their parents are covered.
    held = {shared: os.open(shared, os.O_PATH | os.O_DIRECTORY) for shared in config.shared_rw}
    for secret in config.hide:
        path = Path(secret)
        if path.is_dir() and not path.is_symlink():
            _mount("-t", "tmpfs", "-o", "size=64k,mode=755", "tmpfs", secret)
        elif path.exists():
            _mount("--bind", "/dev/null", secret)
    for shared, fd in held.items():
        os.makedirs(shared, exist_ok=True)  # inside a covering tmpfs where a parent is hidden
        _mount("--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", shared)
        os.close(fd)
    work.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={limits.scratch_bytes},mode=777", "tmpfs", str(work))
    for rel, data in contents.items():
        target = work / rel
        if data is None:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    (work / ".tmp").mkdir(exist_ok=True)
    keep_rw = {str(work), *config.shared_rw}
    for point in _mountpoints():
        if point in keep_rw or point.startswith(("/proc", "/dev")):
            continue
        subprocess.run(["mount", "-o", "remount,bind,ro", point], capture_output=True)
    os.chdir(work)
    env = dict(os.environ)
    env.update(HOME=str(work), TMPDIR=str(work / ".tmp"), MPLCONFIGDIR=str(work / ".tmp"),
               IPYTHONDIR=str(work / ".tmp" / "ipython"), PYTHONDONTWRITEBYTECODE="1")
    env.pop(CONFIG_ENV, None)
    # A user namespace of its own: the command keeps its uid but no capability over the mounts above,
    # which the kernel locks, so it can neither make them writable nor uncover a hidden path.
    os.execvpe("unshare", ["unshare", "--user", "--map-root-user", "--mount", "--", *argv], env)


# --- the kernel launcher ---------------------------------------------------------------------------

def _kernel(argv: list[str]) -> int:
    """Launch a kernel (``argv``) sandboxed, as a kernelspec does; record how it ended."""
    config = Config.load(os.environ[CONFIG_ENV])
    config.workdir = os.getcwd()  # jupyter starts kernels in the notebook's folder
    connection = argv[argv.index("-f") + 1] if "-f" in argv else None
    if connection:
        config.shared_rw = [*config.shared_rw, str(Path(connection).parent)]
    config_path = Path(config.outcome_file or os.getcwd()).with_suffix(".config.json")
    config.dump(config_path)
    cgroup = Cgroup(config.limits)
    start = time.monotonic()
    # Interrupts reach the kernel through the process group; this launcher must outlive them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    process = subprocess.Popen(
        sandboxed_argv(argv, config_path), preexec_fn=lambda: _limit_resources(config.limits, cgroup),
    )
    stopped = []  # jupyter asked the kernel to stop: a normal end, not a limit

    def stop(*_):
        stopped.append(True)
        cgroup.kill_all()
        process.kill()

    signal.signal(signal.SIGTERM, stop)
    timed_out, cpu = _wait(process, config.limits.wall_s)
    if timed_out:
        cgroup.kill_all()
        process.kill()
        process.wait()
    reason = "" if stopped else _reason(process.returncode, cgroup, config.limits, timed_out, cpu)
    outcome = Outcome(process.returncode, reason, time.monotonic() - start)
    cgroup.remove()
    if config.outcome_file:
        Path(config.outcome_file).write_text(json.dumps(asdict(outcome)))
    return process.returncode or 0


def main(args: list[str]) -> int:
    if args[:1] == ["_inner"]:
        _inner(args[1], args[args.index("--") + 1:])
        return 127  # exec failed
    if args[:1] == ["kernel"]:
        return _kernel(args[args.index("--") + 1:])
    print("usage: python -m autograder.sandbox kernel -- KERNEL_ARGV...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
