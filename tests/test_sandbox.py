"""The sandbox's protections, one by one, on small commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autograder import sandbox

pytestmark = pytest.mark.skipif(bool(sandbox.missing_protections()), reason="the grading sandbox is incomplete here: "
                                + "; ".join(sandbox.missing_protections()))


def run(tmp_path: Path, code: str, **limits) -> tuple[sandbox.Outcome, str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "mine.txt").write_text("my own file")
    secret = tmp_path / "secret"
    secret.mkdir(exist_ok=True)
    (secret / "answer.txt").write_text("42")
    shared = tmp_path / "secret" / "shared"
    shared.mkdir(exist_ok=True)
    config = sandbox.Config(workdir=str(work), hide=[str(secret)], shared_rw=[str(shared)],
                            limits=sandbox.Limits(**{"wall_s": 30, **limits}))
    log = tmp_path / "log.txt"
    with log.open("wb") as out:
        outcome = sandbox.run([sys.executable, "-c", code], config, stdout=out, stderr=subprocess.STDOUT)
    return outcome, log.read_text()


def test_the_command_sees_its_copy_and_writes_only_there(tmp_path):
    outcome, log = run(tmp_path, "print(open('mine.txt').read()); open('new.txt', 'w').write('x')")
    assert outcome.returncode == 0 and outcome.reason == "" and "my own file" in log
    assert not (tmp_path / "work" / "new.txt").exists(), "writes stay in the sandbox's copy"


def test_hidden_paths_are_empty_and_shared_folders_writable(tmp_path):
    code = (f"import os; print(sorted(os.listdir({str(tmp_path / 'secret')!r})))\n"
            f"open({str(tmp_path / 'secret' / 'shared' / 'out.txt')!r}, 'w').write('hello')\n"
            f"open({str(tmp_path / 'secret' / 'answer.txt')!r})")
    outcome, log = run(tmp_path, code)
    assert "['shared']" in log and "FileNotFoundError" in log
    assert (tmp_path / "secret" / "shared" / "out.txt").read_text() == "hello"


def test_everything_else_is_read_only(tmp_path):
    target = tmp_path / "outside.txt"
    outcome, log = run(tmp_path, f"open({str(target)!r}, 'w').write('x')")
    assert "Read-only file system" in log and not target.exists()


@pytest.mark.parametrize("command", [["mount", "-o", "remount,rw", "/"], ["umount", "SECRET"]])
def test_the_mounts_cannot_be_undone(tmp_path, command):
    command = [str(tmp_path / "secret") if part == "SECRET" else part for part in command]
    outcome, log = run(tmp_path, f"import subprocess; print(subprocess.run({command!r}).returncode)")
    assert log.strip().splitlines()[-1] != "0", log


def test_there_is_no_network(tmp_path):
    outcome, log = run(tmp_path, "import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)")
    assert "Network is unreachable" in log


def test_memory_limit_kills_and_says_so_while_torch_imports(tmp_path):
    outcome, log = run(tmp_path, "import torch; print('torch', torch.__version__)\nx = bytearray(600 * 1024**2)",
                       memory_bytes=400 * 1024**2)
    assert "torch 2" in log
    assert outcome.reason == "memory limit of 400 MiB reached; killed"


def test_file_size_limit(tmp_path):
    outcome, log = run(tmp_path, "open('big', 'wb').write(b'x' * (5 * 1024**2))", file_bytes=1024**2)
    assert "File too large" in log


def test_process_limit_stops_a_fork_bomb(tmp_path):
    code = ("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(30)\n            os._exit(0)\n        n += 1\n    except OSError:\n        break\n"
            "print('forked', n)")
    outcome, log = run(tmp_path, code, pids=20, wall_s=10)
    forked = int(log.split("forked")[-1])
    assert forked < 20
    assert "process limit of 20" in outcome.reason


def test_wall_clock_and_cpu_limits(tmp_path):
    outcome, _ = run(tmp_path, "while True: pass", wall_s=3)
    assert outcome.reason == "wall-clock limit of 3 s reached; killed"
    outcome, _ = run(tmp_path, "while True: pass", cpu_s=1, wall_s=20)
    assert outcome.reason == "CPU time limit of 1 s reached; killed"
