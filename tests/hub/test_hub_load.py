"""Load: ten learners run lesson 02 top to bottom at the same time, each in a kernel of their own
server on the hub, over the same websockets JupyterLab uses. Nothing may fail; the time and the
memory of the hub, the proxy, the servers and the kernels are printed and saved
(``test-artifacts/hub/load.txt``).
"""

from __future__ import annotations

import threading
import time

import nbformat
import pytest

from tests.hub.conftest import ARTIFACTS, LEARNERS
from tests.hub.hubdriver import ROOT, SUMMARY, MemorySampler

NOTEBOOK = ROOT / "notebooks" / "02_scaled_dot_product_attention.ipynb"
REFERENCE = (ROOT / "solutions" / "attnlab" / "attention.py").read_text()
FOLDER = "load-02"

pytestmark = pytest.mark.timeout(1800)


def _mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def test_ten_learners_run_lesson_02_at_once(class_hub):
    hub, password = class_hub
    learners = [hub.user(name, password) for name in LEARNERS]
    cells = [cell.source for cell in nbformat.read(NOTEBOOK, as_version=4).cells if cell.cell_type == "code"]
    started = time.monotonic()
    for learner in learners:
        learner.start_server()
    for learner in learners:
        learner.wait_ready()
        # each learner has lesson 02 with a finished attention.py beside it
        learner.mkdir(FOLDER)
        learner.write(f"{FOLDER}/{NOTEBOOK.name}", NOTEBOOK.read_text())
        learner.write(f"{FOLDER}/attention.py", REFERENCE)

    servers_s = time.monotonic() - started
    results: dict[str, dict] = {}
    barrier = threading.Barrier(len(learners))

    def work(learner):
        record = results[learner.name] = {"errors": [], "cells": 0}
        try:
            kernel = learner.kernel(f"{FOLDER}/{NOTEBOOK.name}")
            barrier.wait(timeout=600)
            start = time.monotonic()
            try:
                for code in cells:
                    run = kernel.run(code, timeout=900)
                    record["cells"] += 1
                    if run.error:
                        record["errors"].append(f"{run.error} in: {code.splitlines()[0] if code else ''}")
                        break
            finally:
                record["seconds"] = time.monotonic() - start
                kernel.close()
        except Exception as exc:  # noqa: BLE001 (reported below, with the learner's name)
            record["errors"].append(f"{type(exc).__name__}: {exc}")

    sampler = MemorySampler(hub)
    sampler.start()
    threads = [threading.Thread(target=work, args=(learner,)) for learner in learners]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - start
    sampler.stop()

    seconds = sorted(r.get("seconds", 0.0) for r in results.values())
    lines = [
        f"{len(learners)} learners ran lesson 02 ({len(cells)} code cells) at once, each in their own kernel:",
        f"  their servers (those not running yet) started and were ready in {servers_s:.0f} s",
        f"  wall time (from the first kernel start) {wall:.0f} s; per learner {seconds[0]:.0f} to "
        f"{seconds[-1]:.0f} s (median {seconds[len(seconds) // 2]:.0f} s)",
        "  peak resident memory (RSS, summed over processes):",
    ]
    for kind in ("hub", "proxy", "culler", "server", "kernel", "other"):
        count = sampler.counts.get(kind, 0)
        if count and sampler.peak.get(kind, 0):
            lines.append(f"    {kind:7} {count:3d} process(es)  {_mib(sampler.peak.get(kind, 0)):>10}"
                         f"  ({_mib(sampler.peak.get(kind, 0) // count)} each)")
    lines.append(f"    total peak {_mib(sampler.peak_total)} (every process of the hub: the instructor's server and "
                 "kernels left open by earlier tests included)")
    report = "\n".join(lines)
    print(report)
    SUMMARY.extend(lines)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "load.txt").write_text(report + "\n")

    failures = {name: r["errors"] for name, r in results.items() if r["errors"] or r["cells"] != len(cells)}
    assert not failures, failures
    assert sampler.counts.get("kernel", 0) >= len(learners)
    assert sampler.counts.get("culler") == 1  # jupyterhub-idle-culler runs beside the hub (it culls after an hour)

    stopping = [threading.Thread(target=learner.stop_server) for learner in learners]
    for thread in stopping:  # the servers go (together); the hub stays for the other tests
        thread.start()
    for thread in stopping:
        thread.join()
