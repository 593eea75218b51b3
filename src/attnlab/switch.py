"""The reference switch: choose, per exercise module, the learner's code or the course's reference.

Each exercise module ``attnlab.<name>`` (see ``attnlab.lessons``) is found, in this order:

1. the course's reference (``solutions/attnlab/<name>.py``) if it was selected, by
   ``use_reference(...)`` or by the environment variable ``ATTNLAB_REFERENCE`` ("all" or a comma
   list such as "attention,masking");
2. a file ``<name>.py`` beside the notebook (the kernel's working directory), as in an nbgrader
   assignment, where the learner's own copy of the lesson's module sits next to its notebook;
3. the package's own file, ``src/attnlab/<name>.py``: the learner's work in a clone of the course.

Selecting the reference never copies code: the module is loaded from the reference file under the
same name, and a notice says so each time it is loaded. ``ATTNLAB_REFERENCE_DIR`` points elsewhere
than ``solutions/attnlab`` (the grader uses it); ``ATTNLAB_NO_REFERENCE`` lists modules that may not
be borrowed (the modules a lesson owns while it is being graded).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

from attnlab.lessons import exercise_modules, owner

REFERENCE_ENV = "ATTNLAB_REFERENCE"
REFERENCE_DIR_ENV = "ATTNLAB_REFERENCE_DIR"
NO_REFERENCE_ENV = "ATTNLAB_NO_REFERENCE"

_PACKAGE = "attnlab"
_selected: set[str] = set()
# Modules the course borrowed on its own (say, to run the course model), with what it borrowed them
# for; a module the learner borrowed (use_reference, ATTNLAB_REFERENCE) has no entry.
_borrowed_for: dict[str, str] = {}
_quiet = False  # the grader borrows references in its own process without notices


def _parse(names: str) -> set[str]:
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    if "all" in wanted:
        return set(exercise_modules())
    unknown = wanted - set(exercise_modules())
    if unknown:
        raise ValueError(
            f"{REFERENCE_ENV} names {sorted(unknown)}, which are not exercise modules; "
            f"choose from {', '.join(exercise_modules())} or 'all'"
        )
    return wanted


def reference_dir() -> Path | None:
    """Folder holding the reference modules, or None where this copy of the course has none."""
    configured = os.environ.get(REFERENCE_DIR_ENV)
    if configured:
        return Path(configured)
    # An editable install from a clone: src/attnlab/ -> <clone>/solutions/attnlab/
    candidate = Path(__file__).resolve().parents[2] / "solutions" / _PACKAGE
    return candidate if candidate.is_dir() else None


def _forbidden() -> set[str]:
    return {name.strip() for name in os.environ.get(NO_REFERENCE_ENV, "").split(",") if name.strip()}


def reference_path(module: str) -> Path:
    """Path of the reference of ``module``; a clear error where it cannot be borrowed."""
    if module in _forbidden():
        raise ImportError(
            f"the reference of attnlab.{module} cannot be borrowed here: lesson "
            f"{owner(module).number} is being graded, so its own code must be used"
        )
    folder = reference_dir()
    if folder is None or not (folder / f"{module}.py").is_file():
        raise ImportError(
            f"no reference of attnlab.{module} in this copy of the course (looked in "
            f"{folder or 'solutions/attnlab, which is missing'}); in a class, the reference of a "
            "lesson is shared after its deadline"
        )
    return folder / f"{module}.py"


def borrowed_for(module: str) -> str | None:
    """What the course borrowed ``module``'s reference for on its own ("the course model"), or
    None (not borrowed, or borrowed by the learner)."""
    return _borrowed_for.get(module) if module in _selected else None


def own_path(module: str) -> Path:
    """The file of the learner's own ``module``: beside the notebook (an nbgrader assignment) or
    the package's own ``src/attnlab/<module>.py``, whatever the switch selects now."""
    beside_notebook = Path.cwd() / f"{module}.py"
    return beside_notebook if beside_notebook.is_file() else Path(__file__).resolve().parent / f"{module}.py"


def load_own(module: str):
    """The learner's own ``attnlab.<module>``, loaded from its file (``own_path``) under a private
    name while the switch may select the reference; nothing in ``sys.modules`` changes."""
    spec = importlib.util.spec_from_file_location(f"{_PACKAGE}._own_{module}", own_path(module))
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def source_of(module: str) -> str:
    """Where ``attnlab.<module>`` is loaded from: 'reference', 'assignment' or 'yours'."""
    if module in _selected:
        return "reference"
    if (Path.cwd() / f"{module}.py").is_file():
        return "assignment"
    return "yours"


class _ReferenceLoader(importlib.machinery.SourceFileLoader):
    """Loads a reference module and tells the learner so."""

    def exec_module(self, module):
        name = module.__name__.split(".", 1)[1]
        lesson = owner(name)
        if not _quiet:
            print(
            f"Note: attnlab.{name} is the course's reference implementation (lesson "
            f"{lesson.number}, {lesson.title}), not your own code. "
            f"attnlab.use_own('{name}') switches back."
        )
        super().exec_module(module)


class _ExerciseFinder(importlib.abc.MetaPathFinder):
    """Finds ``attnlab.<exercise module>`` by the order in this module's docstring."""

    def find_spec(self, fullname, path=None, target=None):
        prefix = _PACKAGE + "."
        if not fullname.startswith(prefix):
            return None
        name = fullname[len(prefix):]
        if name not in exercise_modules():
            return None
        if name in _selected:
            location = str(reference_path(name))
            return importlib.util.spec_from_file_location(
                fullname, location, loader=_ReferenceLoader(fullname, location)
            )
        beside_notebook = Path.cwd() / f"{name}.py"
        if beside_notebook.is_file():
            return importlib.util.spec_from_file_location(fullname, str(beside_notebook))
        return None  # the package's own file, found by the normal machinery


def _reload(modules: set[str], everything: bool) -> None:
    """Re-import ``modules`` so the switch takes effect at once (its notice shows now). With
    ``everything`` False (a switch of "all"), only modules already imported are: importing every
    exercise module would import what a lesson does not need (Triton, for one)."""
    package = sys.modules[_PACKAGE]
    for name in sorted(modules):
        fullname = f"{_PACKAGE}.{name}"
        if everything or fullname in sys.modules:
            sys.modules.pop(fullname, None)
            setattr(package, name, importlib.import_module(fullname))


def _names(modules: tuple[str, ...]) -> set[str]:
    if not modules:
        raise TypeError("name the exercise modules, e.g. use_reference('attention'), or 'all'")
    return _parse(",".join(modules))


def use_reference(*modules: str, quiet: bool = False, purpose: str | None = None) -> None:
    """Borrow the course's reference for ``modules`` ("attention", ... or "all").

    Call it before importing the modules; modules already imported are re-imported, but names
    copied out of them earlier (``from attnlab.attention import softmax``) keep the old code, so
    re-run the cells that import them. ``purpose``: the course borrows on its own, for this
    ("the course model"); ``attnlab.progress`` then still checks the learner's own code.
    """
    global _quiet
    wanted = _names(modules)
    for name in sorted(wanted):
        reference_path(name)  # fail now, with the reason, rather than at import
    for name in wanted:
        if purpose is None:
            _borrowed_for.pop(name, None)
        elif name not in _selected or name in _borrowed_for:  # the learner's own choice stands
            _borrowed_for[name] = purpose
    _selected.update(wanted)
    _quiet = quiet
    _reload(wanted, everything="all" not in modules)


def use_own(*modules: str) -> None:
    """Go back to your own code for ``modules`` ("attention", ... or "all")."""
    wanted = _names(modules) & _selected
    _selected.difference_update(wanted)
    for name in wanted:
        _borrowed_for.pop(name, None)
    _reload(wanted, everything="all" not in modules)


def install() -> None:
    """Put the finder in front of the import system (once) and read ``ATTNLAB_REFERENCE``."""
    if not any(isinstance(finder, _ExerciseFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ExerciseFinder())
    _selected.update(_parse(os.environ.get(REFERENCE_ENV, "")))
