"""A learner's clone of the course, in a temporary folder, with chosen exercises written.

The course's own tree keeps the blank stubs learners get, so a test that walks the course on a
learner's code needs a clone of its own: ``src/attnlab`` (the library, its exercise modules filled
where the learner wrote them), ``notebooks/`` (as released) and ``solutions/`` (a clone has the
references, which stand in for what the learner has not written, and the instructor notebooks,
which the filled notebooks are filled from: one copy, so both sides come from the same moment). A kernel started with
``clone.env()`` imports the clone's ``attnlab`` (``PYTHONPATH`` comes before the editable install
of the course's own tree), with no reference switch set: exactly what a learner's kernel sees.

    clone = make_clone(tmp, written=exercise_modules())                  # solved everything
    clone = make_clone(tmp, written=..., mistakes={"attention": text})   # one module written wrong

A module is written the way a learner writes it: the stub's ``# YOUR CODE HERE`` and ``raise
NotImplementedError(...)`` replaced by the body of the reference's solution region
(``autograder.fill``); a mistake is the same with the body of a mutated reference.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attnlab.lessons import exercise_modules
from autograder import paths
from autograder.fill import fill, fill_notebook

_IGNORE = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.egg-info")


@dataclass(frozen=True)
class Clone:
    """A learner's clone: ``root`` holds src/attnlab, notebooks/ and solutions/."""

    root: Path

    @property
    def library(self) -> Path:
        return self.root / "src" / "attnlab"

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    def env(self) -> dict[str, str]:
        """What a kernel needs to import this clone's attnlab instead of the course's own tree."""
        return {"PYTHONPATH": os.pathsep.join(filter(None, [str(self.root / "src"), os.environ.get("PYTHONPATH")]))}

    def filled_notebook(self, notebook: str) -> nbformat.NotebookNode:
        """The learner notebook ``notebook`` with every stub filled in (code and written answers):
        what a learner who solved the lesson has in front of them."""
        learner = nbformat.read(self.notebooks / notebook, as_version=4)
        source = nbformat.read(self.root / "solutions" / "notebooks" / notebook, as_version=4)
        return fill_notebook(learner, source)


def written_module(module: str, reference: str | None = None, library: Path = paths.LIBRARY) -> str:
    """The learner's ``src/attnlab/<module>.py`` once they wrote every body: the released stub
    (in ``library``), filled with the solution regions of ``reference`` (default: the course's)."""
    if reference is None:
        reference = (paths.REFERENCE_MODULES / f"{module}.py").read_text()
    return fill((library / f"{module}.py").read_text(), reference)


def make_clone(folder: Path, written=(), mistakes: dict[str, str] | None = None) -> Clone:
    """A clone under ``folder``: the modules in ``written`` filled with the reference's bodies,
    each module of ``mistakes`` filled with the bodies of the given (mutated) reference source,
    every other exercise module the released stub."""
    mistakes = mistakes or {}
    unknown = (set(written) | set(mistakes)) - set(exercise_modules())
    if unknown:
        raise ValueError(f"not exercise modules: {sorted(unknown)}")
    root = Path(folder)
    shutil.copytree(paths.LIBRARY, root / "src" / "attnlab", ignore=_IGNORE)
    shutil.copytree(paths.NOTEBOOKS, root / "notebooks", ignore=_IGNORE)
    shutil.copytree(paths.SOLUTIONS, root / "solutions", ignore=_IGNORE)
    clone = Clone(root)
    references = root / "solutions" / "attnlab"
    for module in written:
        if module not in mistakes:
            (clone.library / f"{module}.py").write_text(
                written_module(module, (references / f"{module}.py").read_text(), clone.library))
    for module, source in mistakes.items():
        (clone.library / f"{module}.py").write_text(written_module(module, source, clone.library))
    return clone
