"""Execute a lesson's notebook once per test session, as a learner runs it, and read back what it
computed.

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

One execution per lesson and session serves the budget test, the claims tests, the learner-path
tests and anything else (``functools.cache``), so adding claims costs no extra run.

That one execution IS the learner's path (issue 28): ``solution_run("03")`` runs lesson 03's
learner notebook (``notebooks/``) with every stub filled in, as a learner who solved every exercise
of the course has it, in a clone of the course (``tests/learner_clone.py``) whose
``src/attnlab`` exercise modules are filled the same way (``autograder.fill``: the stub's
``# YOUR CODE HERE`` and ``raise NotImplementedError(...)`` replaced by the reference's solution
region), with no reference switch, in a fresh kernel started in the clone's ``notebooks/`` as
JupyterLab starts it. The filled learner notebook's code cells are the solution notebook's, less
markers and hidden-test regions (``tests/test_learner_path.py`` asserts it), and the filled modules
are the references' code, so every number the claims tests read is the one the solution computes.
Lesson 00, where the course starts, runs as a learner starts it: in a clone with nothing written.
The last lesson's kernel ends with ``attnlab.progress()`` (``Run.after``), the learner's own table.

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
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from attnlab.lessons import LESSONS
from attnlab.lessons import lesson as find_lesson

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
    import sys
    if "attnlab" in sys.modules:  # which library the kernel ran, and where each exercise module came from
        attnlab = sys.modules["attnlab"]
        from attnlab.lessons import exercise_modules
        facts["__library__"] = attnlab.__file__
        facts["__sources__"] = {{m: attnlab.source_of(m) for m in exercise_modules()}}
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
    """An executed notebook: its cells with outputs, how long its own cells took (from starting
    the kernel to its last cell, not counting ``after`` cells), its facts, and a description of every
    figure it rendered (see ``FIGURE_HOOK``). ``library``: the file of the ``attnlab`` the kernel
    imported; ``sources``: where each exercise module came from at the end ("yours", "reference",
    "assignment"); both None when the facts were not read or the notebook never imported attnlab.
    ``after``: the cells run after the notebook's own (``execute(after=...)``), with their outputs."""

    notebook: nbformat.NotebookNode
    seconds: float
    facts: dict
    figures: list = None
    library: str | None = None
    sources: dict | None = None
    after: list = field(default_factory=list)

    def output_text(self, containing: str) -> str:
        """All text output (streams and text/plain) of the first code cell whose source contains
        ``containing``."""
        for cell in [*self.notebook.cells, *self.after]:
            if cell.cell_type == "code" and containing in cell.source:
                return cell_text(cell)
        raise KeyError(f"no code cell contains {containing!r}")


def cell_text(cell) -> str:
    """A code cell's text output: streams, text/plain, and each error as "name: value"."""
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


def execute(path: Path, reference: bool, allow_errors: bool, timeout: int = 600,
            facts: bool = False, env: dict[str, str] | None = None,
            notebook: nbformat.NotebookNode | None = None, after: tuple[str, ...] = ()) -> Run:
    """Execute the notebook at ``path`` in a fresh kernel started in its folder.

    reference: borrow every exercise module's reference (``ATTNLAB_REFERENCE=all``); otherwise the
    learner's library is used, with no switch (every ``ATTNLAB_*`` variable of this process is
    left out). ``notebook``: execute this notebook instead of the file's contents, in the file's
    folder (a learner notebook with its stubs filled in). ``after``: code cells to run in the same
    kernel once the notebook's own cells are done (not timed; kept in ``Run.after``). With
    ``allow_errors`` False, the first error raises nbclient's ``CellExecutionError``, as Run All
    stops at it.
    """
    import tempfile

    # The kernel's environment is its own (this process's is left alone, so that two notebooks
    # may run at once from two threads).
    kernel_env = {name: value for name, value in os.environ.items() if not name.startswith("ATTNLAB_")}
    if reference:
        kernel_env["ATTNLAB_REFERENCE"] = "all"
    # Figures as a learner sees them: the inline backend puts them into the outputs.
    kernel_env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    ipython_dir = tempfile.TemporaryDirectory(prefix="attnlab-ipython-")
    startup = Path(ipython_dir.name) / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-attnlab-figures.py").write_text(FIGURE_HOOK)
    kernel_env["IPYTHONDIR"] = ipython_dir.name
    kernel_env.update(env or {})
    try:
        notebook = nbformat.read(path, as_version=4) if notebook is None else notebook
        own = len(notebook.cells)
        if facts:  # first: the facts are the notebook's, before any ``after`` cell changes them
            notebook.cells.append(nbformat.v4.new_code_cell(_FACTS_CELL))
        notebook.cells.extend(nbformat.v4.new_code_cell(source) for source in after)
        ended: list[float] = []

        def on_cell_start(cell, cell_index):  # the notebook's own cells are done: stop the clock
            if cell_index == own:
                ended.append(time.perf_counter())

        client = NotebookClient(
            notebook, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent)}}, on_cell_start=on_cell_start,
        )
        start = time.perf_counter()
        client.execute(env=kernel_env)
        seconds = (ended[0] if ended else time.perf_counter()) - start
    finally:
        ipython_dir.cleanup()
    found: dict = {}
    if facts:
        cell = notebook.cells.pop(own)
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if _MARK in text:
                found = json.loads(text.split(_MARK, 1)[1].strip())
        if not found:
            raise RuntimeError(f"{path.name}: the facts cell printed nothing: {cell.get('outputs')}")
    extra = notebook.cells[own:]
    del notebook.cells[own:]
    figures = found.pop("__figures__", None)
    return Run(notebook, seconds, found, figures, found.pop("__library__", None), found.pop("__sources__", None),
               extra)


# A learner who wrote lessons 01 to 03 and nothing since (tests/test_learner_path.py, part 3).
HALF_DONE_LESSONS = ("01", "02", "03")
# Run in a lesson's kernel once its own cells are done (``Run.after``): after the last lesson, the
# learner's table at the end of the course; then what lesson 09's labels say while flash is borrowed.
PROGRESS_CELL = "print(attnlab.progress())"
AFTER = {"09": (PROGRESS_CELL, "attnlab.use_reference('flash', quiet=True)\nprint(tiled_label())")}
_FOLDERS: list = []


@functools.cache
def clone_with(lessons: tuple[str, ...]):
    """A learner's clone of the course (``tests/learner_clone.py``) with the modules of ``lessons``
    written, made once per session and removed when the interpreter exits."""
    import tempfile

    from tests.learner_clone import make_clone

    folder = tempfile.TemporaryDirectory(prefix="attnlab-learner-")
    _FOLDERS.append(folder)  # lives as long as the session
    return make_clone(Path(folder.name), written=[m for key in lessons for m in find_lesson(key).modules])


def solved_clone():
    """The clone of a learner who solved every exercise of the course (shared by the session)."""
    return clone_with(tuple(item.number for item in LESSONS if item.modules))


@functools.cache
def solution_run(key: str) -> Run:
    """Lesson ``key`` ("03") as a learner who solved it runs it (see the module's docstring),
    executed once per session, errors not allowed, with its facts: the filled learner notebook in
    ``solved_clone()``, with no reference switch. Then the cells of ``AFTER`` run in its kernel
    (``Run.after``, not timed): the last lesson's ends the course with ``attnlab.progress()``.

    Lesson 00 has no exercise and is where the course starts: before anything is written ("Right
    now nothing is written"). It runs so, in a fresh clone with nothing filled in."""
    lesson = find_lesson(key)
    clone = solved_clone() if lesson.modules else clone_with(())
    return execute(clone.notebooks / lesson.notebook, reference=False, allow_errors=False, facts=True,
                   env=clone.env(), notebook=clone.filled_notebook(lesson.notebook), after=AFTER.get(key, ()))


@functools.cache
def half_done_run(key: str) -> Run:
    """Lesson ``key``'s learner notebook as released, run to the end (errors allowed) by a learner
    who wrote lessons 01 to 03 (``HALF_DONE_LESSONS``) and nothing since, in a clone of their own,
    with no reference switch. Executed once per session."""
    lesson = find_lesson(key)
    clone = clone_with(HALF_DONE_LESSONS)
    return execute(clone.notebooks / lesson.notebook, reference=False, allow_errors=True, facts=True,
                   env=clone.env())
