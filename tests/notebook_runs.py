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

Figures reach the executed notebook as a learner sees them (matplotlib's inline backend, not Agg),
and every figure the kernel renders, shown inline or saved as an interactive figure's picture, is
described in ``Run.figures`` (``FIGURE_HOOK``): titles, axis labels, scales and labelled ticks per
panel, its size in pixels and its smallest text, so tests can hold every figure to being readable.
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
    facts["__figures__"] = namespace.get("__attnlab_figures__", [])
    print("{_MARK}" + json.dumps(facts))


_attnlab_facts(globals())
'''


# Runs in the kernel before the first cell (an IPython start-up file): every figure rendered to an
# image (inline display, savefig) is described in a list the facts cell sends back.
FIGURE_HOOK = r'''
import struct as _struct

import matplotlib.backend_bases as _backend_bases

__attnlab_figures__ = []
_attnlab_print_figure = _backend_bases.FigureCanvasBase.print_figure


def _attnlab_describe(figure, size, dpi):
    from matplotlib.text import Text

    panels = []
    for ax in figure.get_axes():
        if not ax.get_visible():
            continue
        def labelled(axis, ax=ax):
            low, high = sorted(axis.get_view_interval())
            return sum(1 for tick in axis.get_major_ticks()
                       if tick.label1.get_visible() and tick.label1.get_text().strip()
                       and low - 1e-9 * abs(low) <= tick.get_loc() <= high + 1e-9 * abs(high))
        panels.append({
            "title": " ".join(t for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t.strip()),
            "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "axis_on": bool(ax.axison),
            "colorbar": hasattr(ax, "_colorbar"), "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "xticks": labelled(ax.xaxis) if ax.axison else 0, "yticks": labelled(ax.yaxis) if ax.axison else 0,
        })
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    suptitle = figure._suptitle.get_text() if getattr(figure, "_suptitle", None) is not None else ""
    return {"suptitle": suptitle, "panels": panels, "width": size[0], "height": size[1], "dpi": dpi,
            "smallest_font_pt": min((t.get_fontsize() for t in texts), default=None)}


def _attnlab_hooked_print_figure(self, filename, *args, **kwargs):
    result = _attnlab_print_figure(self, filename, *args, **kwargs)
    size = (0, 0)
    try:  # the PNG's own header: the size the learner's browser gets
        data = filename.getvalue()
        if data[:8] == b"\x89PNG\r\n\x1a\n":
            size = _struct.unpack(">II", data[16:24])
    except AttributeError:
        pass
    try:
        dpi = kwargs.get("dpi") or "figure"
        __attnlab_figures__.append(_attnlab_describe(self.figure, size, self.figure.dpi if dpi == "figure" else float(dpi)))
    except Exception as error:  # a description must never break the lesson
        __attnlab_figures__.append({"error": repr(error)})
    return result


_backend_bases.FigureCanvasBase.print_figure = _attnlab_hooked_print_figure
'''


@dataclass
class Run:
    """An executed notebook: its cells with outputs, how long it took, its facts, and a
    description of every figure it rendered (see ``FIGURE_HOOK``)."""

    notebook: nbformat.NotebookNode
    seconds: float
    facts: dict
    figures: list = None

    def output_text(self, containing: str) -> str:
        """All text output (streams and text/plain) of the first code cell whose source contains
        ``containing``."""
        for cell in self.notebook.cells:
            if cell.cell_type == "code" and containing in cell.source:
                parts = []
                for output in cell.get("outputs", []):
                    if "text" in output:
                        parts.append(output["text"])
                    elif "data" in output and "image/png" in output["data"]:
                        continue  # a figure's "<Figure size ...>" placeholder is not text the cell printed
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
    import tempfile

    saved = dict(os.environ)
    os.environ.pop("ATTNLAB_REFERENCE", None)
    if reference:
        os.environ["ATTNLAB_REFERENCE"] = "all"
    # Figures as a learner sees them: the inline backend puts them into the outputs.
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    ipython_dir = tempfile.TemporaryDirectory(prefix="attnlab-ipython-")
    startup = Path(ipython_dir.name) / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-attnlab-figures.py").write_text(FIGURE_HOOK)
    os.environ["IPYTHONDIR"] = ipython_dir.name
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
        ipython_dir.cleanup()
    found: dict = {}
    if facts:
        cell = notebook.cells.pop()
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if _MARK in text:
                found = json.loads(text.split(_MARK, 1)[1].strip())
        if not found:
            raise RuntimeError(f"{path.name}: the facts cell printed nothing: {cell.get('outputs')}")
    figures = found.pop("__figures__", None)
    return Run(notebook, seconds, found, figures)


@functools.cache
def solution_run(key: str) -> Run:
    """The solution notebook of lesson ``key`` ("03"), executed once per session with the
    references, errors not allowed, with its facts."""
    lesson = find_lesson(key)
    return execute(paths.SOLUTION_NOTEBOOKS / lesson.notebook, reference=True, allow_errors=False, facts=True)
