"""The per-file load summary reads /proc/stat right and counts work of processes it never waited for."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.machine_load import LoadLog, Snapshot

# proc(5): cpu user nice system idle iowait irq softirq steal guest guest_nice
STAT = "cpu  {busy} 10 20 {idle} 40 5 5 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 0\n"


def test_busy_time_is_user_nice_system_irq_and_softirq_not_idle_iowait_or_steal():
    snap = Snapshot.parse(STAT.format(busy=100, idle=9000), wall_s=3.0, ticks_per_s=100)
    assert snap.busy_s == pytest.approx((100 + 10 + 20 + 5 + 5) / 100) and snap.wall_s == 3.0
    with pytest.raises(ValueError, match="not /proc/stat"):
        Snapshot.parse("intr 0\n", wall_s=0.0, ticks_per_s=100)


def test_the_log_adds_up_per_file_and_gives_idle_core_seconds():
    log = LoadLog(cores=2)
    log.record("tests/a.py", Snapshot(0.0, 0.0), Snapshot(10.0, 15.0))   # 1.5 cores for 10 s
    log.record("tests/a.py", Snapshot(10.0, 15.0), Snapshot(20.0, 20.0))  # 0.5 cores for 10 s
    log.record("tests/b.py", Snapshot(20.0, 20.0), Snapshot(30.0, 40.0))  # 2 cores for 10 s
    log.record("tests/c.py", None, Snapshot(30.0, 40.0))                  # no /proc/stat: nothing
    assert log.busy_cores("tests/a.py") == pytest.approx(1.0) and log.busy_cores() == pytest.approx(40 / 30)
    lines = log.lines()
    assert "30 s of wall clock, 1.33 of 2 cores busy on average (20 core-seconds idle)" in lines[0]
    assert lines[2].split() == ["20", "1.00", "20", "tests/a.py"]
    assert lines[3].split() == ["10", "2.00", "0", "tests/b.py"]
    assert LoadLog(cores=2).lines() == []


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_a_child_that_nobody_waits_for_is_counted():
    """Work done by a process this one never waits for (as the sandbox's kernels) still counts."""
    before = Snapshot.take()
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\n"
                              "while time.process_time() < end: pass"], start_new_session=True)
    deadline = time.monotonic() + 30
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # this process stays idle meanwhile
    after = Snapshot.take()
    assert child.returncode == 0
    assert after.busy_s - before.busy_s >= 0.5  # the child's 0.6 s of CPU (other programs only add)
