"""The sandbox's protections, one by one, on small commands."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from autograder import paths, sandbox

pytestmark = pytest.mark.skipif(bool(sandbox.missing_protections()), reason="the grading sandbox is incomplete here: "
                                + "; ".join(sandbox.missing_protections()))


def run(tmp_path: Path, code: str, env: dict | None = None, shared: bool = False, **limits) -> tuple[sandbox.Outcome, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "mine.txt").write_text("my own file")
    shared_rw = []
    if shared:
        (tmp_path / "shared").mkdir(exist_ok=True)
        shared_rw = [str(tmp_path / "shared")]
    config = sandbox.Config(workdir=str(work), env=sandbox.base_env(env), shared_rw=shared_rw,
                            limits=sandbox.Limits(**{"wall_s": 60, **limits}))
    out, log = tmp_path / "out.txt", tmp_path / "log.txt"
    with out.open("wb") as handle:
        outcome = sandbox.run([sys.executable, "-c", code], config, stdout=handle, log=log)
    return outcome, out.read_text() + log.read_text()


def test_the_command_sees_its_copy_and_writes_only_there(tmp_path):
    outcome, log = run(tmp_path, "print(open('mine.txt').read()); open('new.txt', 'w').write('x')")
    assert outcome.returncode == 0 and outcome.reason == "" and "my own file" in log
    assert not (tmp_path / "work" / "new.txt").exists(), "writes stay in the sandbox's copy"


def test_it_runs_as_an_unprivileged_user_without_capabilities(tmp_path):
    code = ("import os; status = open('/proc/self/status').read()\n"
            "caps = {l.split(':')[0]: l.split()[1] for l in status.splitlines() if l.startswith('Cap')}\n"
            "print(os.getuid(), os.getgid(), caps['CapEff'], caps['CapPrm'], caps['CapInh'], caps['CapAmb'])\n"
            "print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])\n"
            "open('/tmp/made-here', 'w').write('x'); print(os.stat('/tmp/made-here').st_uid)")
    outcome, log = run(tmp_path, code)
    first, no_new_privs, owner = log.split("\n")[:3]
    assert first.split() == [str(sandbox.SANDBOX_UID)] * 2 + ["0000000000000000"] * 4, log
    assert no_new_privs == "1" and owner == str(sandbox.SANDBOX_UID)


def test_it_has_namespaces_of_its_own(tmp_path):
    kinds = ("mnt", "pid", "net", "ipc", "uts", "user")
    code = f"import os, json; print(json.dumps({{k: os.readlink('/proc/self/ns/' + k) for k in {kinds!r}}}))"
    outcome, log = run(tmp_path, code)
    inside = json.loads(log.strip().splitlines()[-1])
    for kind in kinds:
        assert inside[kind] != os.readlink(f"/proc/self/ns/{kind}"), kind


def test_the_view_holds_nothing_outside_its_allowlist(tmp_path):
    """Walk / from inside: every file lies under an allowed root."""
    code = ("import os, json\nfound = []\n"
            "for top, dirs, files in os.walk('/'):\n"
            "    if top.startswith(('/proc', '/dev')):\n        dirs[:] = []\n        continue\n"
            "    found += [os.path.join(top, f) for f in files]\n"
            "print(json.dumps(found))")
    outcome, log = run(tmp_path, code)
    files = json.loads(log.strip().splitlines()[-1])
    import attnlab

    # /etc: the files the sandbox writes itself (fonts.conf points fontconfig at /usr/share/fonts),
    # and the loader's cache and the time zone from the host
    etc = ["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/fonts.conf", "/etc/ld.so.cache", "/etc/localtime"]
    python = [os.path.realpath(sys.prefix) + "/", os.path.realpath(sys.base_prefix) + "/"]
    library = [os.path.realpath(Path(attnlab.__file__).parent) + "/"]
    submission = ["/sandbox/in/", "/sandbox/work/"]
    allowed = ["/usr/", *etc, *submission, *python, *library]
    outside = [f for f in files if not f.startswith(tuple(allowed))]
    assert not outside, outside[:20]
    assert not [f for f in files if f.startswith("/usr/local/") and not f.startswith(tuple(submission + python + library))]
    ours = [f for f in files if not f.startswith(tuple(["/usr/"] + python))]  # beyond system and Python
    assert "gradebook.db" not in {Path(f).name for f in ours}
    for secret in ("solutions", ".git", "autograder", "course"):
        assert not [f for f in files if f"/{secret}/" in f and not f.startswith("/usr/")], secret
    assert str(paths.ROOT / "solutions") not in log


def test_host_temporary_files_and_the_repository_are_absent(tmp_path):
    planted = Path("/tmp") / f"attnlab-host-secret-{os.getpid()}"
    planted.write_text("a built course left in /tmp")
    try:
        code = (f"import os; print(os.path.exists({str(planted)!r}), os.path.exists({str(paths.SOLUTIONS)!r}),"
                f" os.path.exists({str(paths.ROOT / '.git')!r}), os.path.exists({str(tmp_path)!r}),"
                f" sorted(os.listdir('/tmp')))")
        outcome, log = run(tmp_path, code)
        # /tmp is private: empty, except for the way to the Python environment and the library when
        # the course itself is installed under /tmp (a clone there)
        under_tmp = sorted({Path(root).parts[2] for root in sandbox._python_roots() if root.startswith("/tmp/")})
        assert log.split("\n")[0] == f"False False False False {under_tmp}", log
    finally:
        planted.unlink()


def test_host_sockets_are_unreachable(tmp_path):
    path = tmp_path / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(b"\0attnlab-host-abstract")
    server.listen()
    abstract.listen()
    server.settimeout(1)
    abstract.settimeout(1)
    try:
        code = ("import socket\n"
                f"for address in ({str(path)!r}, b'\\0attnlab-host-abstract'):\n"
                "    s = socket.socket(socket.AF_UNIX)\n"
                "    try:\n        s.connect(address); print('connected')\n"
                "    except OSError as e:\n        print(type(e).__name__)")
        outcome, log = run(tmp_path, code)
        assert log.split("\n")[:2] == ["FileNotFoundError", "ConnectionRefusedError"], log
        for listener in (server, abstract):
            with pytest.raises(socket.timeout):
                listener.accept()
    finally:
        server.close()
        abstract.close()


def test_dev_shm_and_proc_sys_leave_the_host_alone(tmp_path):
    marker = f"attnlab-shm-{os.getpid()}"
    hostname = socket.gethostname()
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    code = (f"import os\nopen('/dev/shm/{marker}', 'w').write('x')\n"
            "for path in ('/proc/sys/kernel/hostname', '/proc/sys/kernel/core_pattern', '/dev/evil'):\n"
            "    try:\n        open(path, 'w').write('|/tmp/x')\n        print('wrote', path)\n"
            "    except OSError as e:\n        print(path, e.strerror)\n"
            "print(sorted(os.listdir('/dev')))")
    outcome, log = run(tmp_path, code)
    assert "wrote" not in log, log
    assert not Path("/dev/shm", marker).exists() and not Path("/dev/evil").exists()
    assert socket.gethostname() == hostname
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern
    assert "mqueue" not in log and "sda" not in log and "vda" not in log


def test_the_environment_is_an_allowlist(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_API_TOKEN", "s3cr3t-t0ken-value")
    outcome, log = run(tmp_path, "import os; print(sorted(os.environ.items()))", env={"ATTNLAB_NO_REFERENCE": "attention"})
    assert "s3cr3t-t0ken-value" not in log and "GRADER_API_TOKEN" not in log
    assert "ATTNLAB_NO_REFERENCE" in log


def test_shared_folders_are_writable(tmp_path):
    outcome, log = run(tmp_path, f"open({str(tmp_path / 'shared' / 'out.txt')!r}, 'w').write('hello')", shared=True)
    assert (tmp_path / "shared" / "out.txt").read_text() == "hello"


def test_everything_else_is_read_only(tmp_path):
    import attnlab

    target = Path(attnlab.__file__).parent / "planted.py"
    outcome, log = run(tmp_path, f"open({str(target)!r}, 'w').write('x')")
    assert "Read-only file system" in log and not target.exists()


@pytest.mark.parametrize("command", [["mount", "-o", "remount,rw", "/usr"], ["umount", "/sandbox/in"]])
def test_the_mounts_cannot_be_undone(tmp_path, command):
    outcome, log = run(tmp_path, f"import subprocess; print(subprocess.run({command!r}).returncode)")
    assert log.strip().splitlines()[-1] != "0", log


def test_there_is_no_network(tmp_path):
    """Only a loopback of its own: the host's listening ports and the outside are out of reach."""
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    host.settimeout(1)
    try:
        code = ("import socket\n"
                f"for address in (('127.0.0.1', {host.getsockname()[1]}), ('192.0.2.1', 80)):\n"
                "    try:\n        socket.create_connection(address, timeout=2); print('connected')\n"
                "    except OSError as e:\n        print(e.strerror)\n"
                "print(sorted(name for _, name in socket.if_nameindex()))")
        outcome, log = run(tmp_path, code)
        assert log.split("\n")[:3] == ["Connection refused", "Network is unreachable", "['lo']"], log
        with pytest.raises(socket.timeout):
            host.accept()
    finally:
        host.close()


def test_standard_error_is_capped(tmp_path):
    outcome, log = run(tmp_path, "import sys\nfor _ in range(50):\n    sys.stderr.write('x' * 100_000)",
                       output_bytes=64 * 1024)
    assert outcome.dropped_output_bytes == 5_000_000 - 64 * 1024
    assert (tmp_path / "log.txt").stat().st_size < 64 * 1024 + 200


def test_memory_limit_kills_and_says_so_while_torch_imports(tmp_path):
    outcome, log = run(tmp_path, "import torch; print('torch', torch.__version__, flush=True)\nx = bytearray(600 * 1024**2)",
                       memory_bytes=400 * 1024**2)
    assert "torch 2" in log
    assert outcome.reason == "memory limit of 400 MiB reached; killed"


def test_file_size_limit(tmp_path):
    outcome, log = run(tmp_path, "open('big', 'wb').write(b'x' * (5 * 1024**2))", file_bytes=1024**2)
    assert "File too large" in log or "file size limit" in outcome.reason


def test_process_limit_stops_a_fork_bomb(tmp_path):
    code = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\n"
            "print('forked', n)")
    outcome, log = run(tmp_path, code, pids=20, wall_s=10)
    forked = int(log.split("forked")[-1].split()[0])
    assert forked < 20
    assert "process limit of 20" in outcome.reason


def test_wall_clock_and_cpu_limits(tmp_path):
    outcome, _ = run(tmp_path, "while True: pass", wall_s=3)
    assert outcome.reason == "wall-clock limit of 3 s reached; killed"
    outcome, _ = run(tmp_path, "while True: pass", cpu_s=1, wall_s=20)
    assert outcome.reason == "CPU time limit of 1 s reached; killed"


def test_matplotlib_finds_fonts_without_a_fontconfig_error(tmp_path):
    # A fontconfig error would be printed into the first cell of every graded notebook that plots.
    code = ("import subprocess, matplotlib.font_manager as fm\n"
            "done = subprocess.run(['fc-list'], capture_output=True, text=True)\n"
            "print('stderr:', done.stderr.strip() or 'none'); print('fonts:', len(fm.findSystemFonts()))")
    outcome, log = run(tmp_path, code)
    assert outcome.returncode == 0, log
    assert "stderr: none" in log and "Fontconfig error" not in log, log


def test_a_command_that_does_not_get_ready_in_time_is_killed_then(tmp_path):
    """``Ready``: a command that has not written its first line within its few seconds is killed
    then, long before its wall clock; one that has goes on to the end."""
    out = tmp_path / "out.txt"
    config = sandbox.Config(workdir=str(tmp_path), env=sandbox.base_env(), limits=sandbox.Limits(wall_s=60))

    def started(code: str) -> sandbox.Outcome:
        with out.open("wb") as handle:
            return sandbox.run([sys.executable, "-c", code], config, stdout=handle,
                               ready=sandbox.Ready(3, lambda: b"\n" in out.read_bytes()))

    stuck = started("import time; time.sleep(600)")
    assert stuck.not_ready and stuck.reason == "not ready within 3 s; killed" and stuck.seconds < 20, stuck
    ready = started("import time; print('ready', flush=True); time.sleep(5); print('done')")
    assert not ready.not_ready and ready.returncode == 0 and ready.seconds > 5, ready
    assert out.read_text() == "ready\ndone\n"
