"""How busy the whole machine was while each test file ran, read from ``/proc/stat``.

``/usr/bin/time`` and ``resource.getrusage`` count only the processes a command waits for: the
grading sandbox, the kernels JupyterHub starts and the browser escape them (a 42-minute grading
run that kept the load average at 2.2 reported 32% of one core). ``/proc/stat`` counts every
process on the machine, so with nothing else running it says how much of the machine the test
suite uses, and how much it leaves idle: what running tests side by side could win.

``LoadLog.record(path, before, after)`` adds one test's share (``Snapshot.take()`` around it);
``LoadLog.lines()`` is the summary ``make test`` prints. Linux only: elsewhere nothing is recorded.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# Fields of the "cpu" line (proc(5)): user nice system idle iowait irq softirq steal ...
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq: work done on this machine


@dataclass(frozen=True)
class Snapshot:
    """Wall-clock time and the machine's busy CPU time so far (seconds, all cores together)."""

    wall_s: float
    busy_s: float

    @classmethod
    def parse(cls, stat_text: str, wall_s: float, ticks_per_s: int) -> "Snapshot":
        """From the text of ``/proc/stat``: its first line, "cpu  user nice system idle ..."."""
        first = stat_text.splitlines()[0].split()
        if not first or first[0] != "cpu":
            raise ValueError(f"not /proc/stat's text: its first line is {stat_text.splitlines()[0]!r}")
        ticks = [int(value) for value in first[1:]]
        return cls(wall_s=wall_s, busy_s=sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / ticks_per_s)

    @classmethod
    def take(cls) -> "Snapshot | None":
        """The machine now; None where there is no ``/proc/stat``."""
        try:
            text = PROC_STAT.read_text()
        except OSError:
            return None
        return cls.parse(text, time.monotonic(), os.sysconf("SC_CLK_TCK"))


class LoadLog:
    """Wall and busy CPU seconds per test file, and the machine's core count."""

    def __init__(self, cores: int | None = None):
        self.cores = cores or os.cpu_count() or 1
        self.wall_s: dict[str, float] = defaultdict(float)
        self.busy_s: dict[str, float] = defaultdict(float)

    def record(self, file: str, before: Snapshot | None, after: Snapshot | None) -> None:
        if before is None or after is None:
            return
        self.wall_s[file] += after.wall_s - before.wall_s
        self.busy_s[file] += after.busy_s - before.busy_s

    def busy_cores(self, file: str | None = None) -> float:
        """Cores busy on average: over one file's tests, or over all of them (None)."""
        files = [file] if file else list(self.wall_s)
        wall = sum(self.wall_s[f] for f in files)
        return sum(self.busy_s[f] for f in files) / wall if wall > 0 else 0.0

    def idle_core_s(self, file: str) -> float:
        """Core-seconds no process used while ``file``'s tests ran."""
        return max(0.0, self.cores * self.wall_s[file] - self.busy_s[file])

    def lines(self, top: int = 15) -> list[str]:
        """The summary: the whole run, then the ``top`` longest files with their idle core-seconds."""
        if not self.wall_s:
            return []
        wall = sum(self.wall_s.values())
        idle = sum(self.idle_core_s(f) for f in self.wall_s)
        lines = [f"all tests: {wall:,.0f} s of wall clock, {self.busy_cores():.2f} of {self.cores} cores busy on "
                 f"average ({idle:,.0f} core-seconds idle); every process on the machine counts",
                 f"{'wall s':>8} {'cores busy':>10} {'idle core-s':>11}  file"]
        for file in sorted(self.wall_s, key=self.wall_s.get, reverse=True)[:top]:
            idle_s = self.idle_core_s(file)
            lines.append(f"{self.wall_s[file]:8.0f} {self.busy_cores(file):10.2f} {idle_s:11.0f}  {file}")
        return lines
