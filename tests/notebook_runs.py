"""Execute a lesson's notebook once per test session and read back what it computed.

Every sentence of a lesson that reads a result off a computation ("the weights above the diagonal
are exactly 0", "the slope is about 2") is asserted by a test that runs the computation. Most
such tests need the lesson's own numbers, so they read them from the executed solution notebook:

    from tests.notebook_runs import solution_run

    def test_masked_weights_are_exactly_zero():
        facts = solution_run("03").facts
        assert facts["upper_triangle_max"] == 0.0

``facts`` holds the notebook's top-level variables that are plain data after execution: numbers,
strings, booleans, None, tensors and arrays (as nested lists, at most ``MAX_ELEMENTS`` entries),
and lists, tuples and dicts of these. Give the numbers a lesson states a variable of their own.

One execution per lesson and session serves the budget test, the claims tests and anything else
(``functools.cache``), so adding claims costs no extra run.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attnlab.lessons import lesson as find_lesson
from autograder import paths

MAX_ELEMENTS = 200_000
_MARK = "@@attnlab-facts@@"

# Runs in the notebook's kernel after its last cell; prints the facts as one JSON line.
_FACTS_CELL = f'''
def _attnlab_facts(namespace, limit={MAX_ELEMENTS}):
    import json, math, numbers, types
    try:
        import numpy as np
    except ImportError:
        np = None
    try:
        import torch
    except ImportError:
        torch = None

    def plain(value, depth=0):
        if depth > 6:
            raise TypeError
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            value = float(value)
            return value if math.isfinite(value) else repr(value)
        if torch is not None and isinstance(value, torch.Tensor):
            if value.numel() > limit:
                raise TypeError
            value = value.detach().cpu()
            return plain(value.double().numpy() if value.is_floating_point() else value.numpy(), depth)
        if np is not None and isinstance(value, np.ndarray):
            if value.size > limit or value.dtype.kind not in "biuf":
                raise TypeError
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                return [plain(v, depth + 1) for v in value.tolist()] if value.ndim else plain(value.item())
            return value.tolist()
        if np is not None and isinstance(value, np.generic):
            return plain(value.item(), depth)
        if isinstance(value, (list, tuple)):
            return [plain(v, depth + 1) for v in value]
        if isinstance(value, dict):
            return {{str(k): plain(v, depth + 1) for k, v in value.items()}}
        raise TypeError

    facts = {{}}
    for name, value in list(namespace.items()):
        if name.startswith("_") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue
        try:
            facts[name] = plain(value)
        except (TypeError, ValueError, OverflowError):
            pass
    print("{_MARK}" + json.dumps(facts))


_attnlab_facts(globals())
'''


@dataclass
class Run:
    """An executed notebook: its cells with outputs, how long it took, and its facts."""

    notebook: nbformat.NotebookNode
    seconds: float
    facts: dict

    def output_text(self, containing: str) -> str:
        """All text output (streams and text/plain) of the first code cell whose source contains
        ``containing``."""
        for cell in self.notebook.cells:
            if cell.cell_type == "code" and containing in cell.source:
                parts = []
                for output in cell.get("outputs", []):
                    if "text" in output:
                        parts.append(output["text"])
                    elif "data" in output and "text/plain" in output["data"]:
                        parts.append(output["data"]["text/plain"])
                    elif output.get("output_type") == "error":
                        parts.append(f"{output['ename']}: {output['evalue']}")
                return "".join(parts)
        raise KeyError(f"no code cell contains {containing!r}")


def execute(path: Path, reference: bool, allow_errors: bool, timeout: int = 600,
            facts: bool = False, env: dict[str, str] | None = None) -> Run:
    """Execute the notebook at ``path`` in a fresh kernel started in its folder.

    reference: borrow every exercise module's reference (``ATTNLAB_REFERENCE=all``), as the
    solution notebooks are run; otherwise the learner's library is used.
    """
    saved = dict(os.environ)
    os.environ.pop("ATTNLAB_REFERENCE", None)
    if reference:
        os.environ["ATTNLAB_REFERENCE"] = "all"
    os.environ["MPLBACKEND"] = "Agg"
    os.environ.update(env or {})
    try:
        notebook = nbformat.read(path, as_version=4)
        if facts:
            notebook.cells.append(nbformat.v4.new_code_cell(_FACTS_CELL))
        client = NotebookClient(
            notebook, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        client.execute()
        seconds = time.perf_counter() - start
    finally:
        os.environ.clear()
        os.environ.update(saved)
    found: dict = {}
    if facts:
        cell = notebook.cells.pop()
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if _MARK in text:
                found = json.loads(text.split(_MARK, 1)[1].strip())
        if not found:
            raise RuntimeError(f"{path.name}: the facts cell printed nothing: {cell.get('outputs')}")
    return Run(notebook, seconds, found)


@functools.cache
def solution_run(key: str) -> Run:
    """The solution notebook of lesson ``key`` ("03"), executed once per session with the
    references, errors not allowed, with its facts."""
    lesson = find_lesson(key)
    return execute(paths.SOLUTION_NOTEBOOKS / lesson.notebook, reference=True, allow_errors=False, facts=True)
