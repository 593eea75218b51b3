"""The set-up cell of every lesson: ``attnlab.start_lesson("07")``.

A lesson builds on the modules of earlier lessons (``Lesson.builds_on`` in ``attnlab.lessons``).
A learner may open it with some of them written, some not, and some written wrong. The set-up cell
says, at once, where every one of them stands, before anything deep inside the lesson fails:

- **not written yet** (a function still raises its stub's ``NotImplementedError``): the course's
  reference stands in for it, with one line saying so and how to switch back
  (``attnlab.use_own``); ``attnlab.progress`` keeps checking your own code;
- **written, but its check fails**: the cell stops with a short message that names the module,
  the lesson and the exercise where the mistake lives, and how to borrow the reference to go on;
- **yours and passing**, or **borrowed** by you: one line each.

It also loads IPython's autoreload quietly (your edits to ``src/attnlab`` take effect without a
restart) and says where the lesson's own module comes from.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass, field

from attnlab import switch
from attnlab.lessons import Lesson, lesson as find_lesson, owner

__all__ = ["LessonStart", "StartFailed", "start_lesson", "unwritten"]

# The stub's message names the function (autograder.stubs.make_stub).
_STUB = re.compile(r"Lesson \d\d: ([\w.]+)\(\) in attnlab/(\w+)\.py is not written yet")


def unwritten(module: str) -> list[str]:
    """Functions of the learner's own ``module`` that still raise their stub's message."""
    try:
        text = switch.own_path(module).read_text()
    except OSError:
        return []
    # A class's unwritten methods make the class unwritten: name it once.
    return list(dict.fromkeys(name.split(".")[0] for name, where in _STUB.findall(text) if where == module))


class StartFailed(Exception):
    """An earlier lesson's module is written but fails its check: shown in a few lines."""

    def _render_traceback_(self) -> list[str]:
        from attnlab.checks.common import short_traceback

        return short_traceback("StartFailed", str(self))


@dataclass
class LessonStart:
    """Where every module a lesson needs stands, as ``start_lesson`` found it."""

    lesson: Lesson
    yours: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # present, but their checks are not at hand
    borrowed_by_you: list[str] = field(default_factory=list)
    stood_in: dict[str, list[str]] = field(default_factory=dict)  # module -> its unwritten functions
    failing: dict[str, str] = field(default_factory=dict)  # module -> first failing check's line
    no_reference: list[str] = field(default_factory=list)  # unwritten, and no reference here

    def lines(self) -> list[str]:
        out = []
        own = ", ".join(f"attnlab.{m} ({_source(m)})" for m in self.lesson.modules)
        if own:
            out.append(f"Lesson {self.lesson.number}: you write {own}.")
        if self.yours:
            out.append("It builds on your " + ", ".join(_named(m) for m in self.yours) + ": their checks pass.")
        if self.unchecked:
            out.append("It builds on " + ", ".join(f"{_named(m)} ({_source(m)})" for m in self.unchecked)
                       + ", not checked here (their lessons' notebooks are not in this folder).")
        if self.borrowed_by_you:
            out.append("Borrowed by you (the course's reference): "
                       + ", ".join(_named(m) for m in self.borrowed_by_you) + ".")
        if self.stood_in:
            modules = ", ".join(repr(m) for m in self.stood_in)
            out.append("Not written yet, so the course's reference stands in for them:")
            out.extend(f"  {_named(m)}: {', '.join(names)}" for m, names in self.stood_in.items())
            out.append(f"When you have written them: attnlab.use_own({modules}), then run this cell again.")
        if self.no_reference:
            out.append("Not written yet, and this copy of the course has no reference to stand in: "
                       + ", ".join(_named(m) for m in self.no_reference)
                       + ". The parts of this lesson that use them will say so.")
        return out


def _named(module: str) -> str:
    return f"attnlab.{module} (lesson {owner(module).number})"


def _source(module: str) -> str:
    return {"reference": "the course's reference", "assignment": "your copy beside this notebook",
            "yours": "your code"}[switch.source_of(module)]


def _runs_later_code(module: str) -> list[str]:
    """Modules of later lessons whose code the checks of ``module`` run once they are written (a
    case that waits for a later lesson: ``checks.common.WAITS_FOR``; lesson 04's rotary cases run
    lesson 05's ``apply_rope``). A mistake there fails ``module``'s check too."""
    from attnlab.checks.common import WAITS_FOR
    from attnlab.lessons import lesson as find_lesson

    return [later for number, entries in WAITS_FOR.items() if any(entry[0] == module for entry in entries)
            for later in find_lesson(number).modules]


def _check_order(modules: tuple[str, ...]) -> list[str]:
    """``modules`` in lesson order, except that a module comes before every earlier module whose
    checks run its code (``_runs_later_code``): the first failing check then names the module where
    the mistake lives (a RoPE that pairs the wrong halves is lesson 05's, not lesson 04's)."""
    order = list(modules)
    for module in modules:
        for later in _runs_later_code(module):
            if later in order and order.index(later) > order.index(module):
                order.remove(later)
                order.insert(order.index(module), later)
    return order


@contextlib.contextmanager
def _reference_of(modules: list[str]):
    """The course's reference of ``modules`` while the block runs (quietly), then as before."""
    borrowed = [m for m in modules if switch.source_of(m) != "reference"]
    try:
        for module in borrowed:
            switch.use_reference(module, quiet=True, purpose="a check of an earlier lesson")
        yield
    finally:
        if borrowed:
            switch.use_own(*borrowed)


def _first_failure(module: str, lesson: Lesson) -> str | None:
    """The first line of the first failing visible check of ``module``'s lesson: "" when they all
    pass, None when its checks cannot be found here (its lesson's notebook is not at hand).

    A check that also runs this lesson's code or a later one's (``_runs_later_code``, say lesson
    04's rotary cases in lesson 05, whose ``apply_rope`` you are writing) is run again with that
    code from the reference before ``module`` is blamed: it fails only if ``module`` is wrong."""
    from attnlab.progress import FAILING, _run, check_cells

    cells = [cell for cell in check_cells(owner(module).number) if cell.module == module]
    if not cells:
        return None
    not_earlier = [m for m in _runs_later_code(module) if m not in lesson.builds_on and not unwritten(m)]
    for cell in cells:
        row = _run(cell)
        if row.status == FAILING and not_earlier:
            with _reference_of(not_earlier):
                row = _run(cell)
        if row.status == FAILING:
            return f"{cell.exercise}: {row.message or row.detail}"
    return ""


def _quiet_autoreload() -> None:
    """``%load_ext autoreload`` and ``%autoreload 2``, without the notice a second load prints."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    shell = get_ipython()
    if shell is None:
        return
    if "autoreload" not in shell.extension_manager.loaded:
        with contextlib.redirect_stdout(io.StringIO()):
            shell.extension_manager.load_extension("autoreload")
    shell.run_line_magic("autoreload", "2")


def start_lesson(number: str, check: bool = True) -> LessonStart:
    """Set up lesson ``number`` ("07"): see the module's docstring. ``check``: run the visible
    checks of the earlier modules you wrote (False skips them, for a quick start). Raises
    ``StartFailed`` when one of them fails; returns what it found (and prints it)."""
    lesson = find_lesson(number)
    _quiet_autoreload()
    found = LessonStart(lesson)
    for module in _check_order(lesson.builds_on):
        if switch.source_of(module) == "reference":
            if switch.borrowed_for(module) is None:
                found.borrowed_by_you.append(module)
                continue
            switch.use_own(module)  # borrowed by an earlier start: look at the learner's code again
        names = unwritten(module)
        if names:
            try:
                switch.use_reference(module, quiet=True, purpose=f"lesson {number}")
            except ImportError:
                found.no_reference.append(module)
            else:
                found.stood_in[module] = names
            continue
        problem = _first_failure(module, lesson) if check else None
        if problem:
            found.failing[module] = problem
        elif problem is None:
            found.unchecked.append(module)
        else:
            found.yours.append(module)
    if found.failing:
        module, problem = next(iter(found.failing.items()))
        item = owner(module)
        raise StartFailed(
            f"lesson {number} builds on your attnlab.{module} of lesson {item.number}, and its check fails:\n"
            f"{problem}\n"
            f"The mistake lives in {switch.own_path(module).name} (lesson {item.number}, {item.title}): fix it "
            f"there and run this cell again, or go on with the course's version: "
            f"attnlab.use_reference({module!r})")
    in_lesson_order = lesson.builds_on.index  # as the lesson lists them, whatever order they were checked in
    found.yours.sort(key=in_lesson_order)
    found.unchecked.sort(key=in_lesson_order)
    found.borrowed_by_you.sort(key=in_lesson_order)
    found.no_reference.sort(key=in_lesson_order)
    found.stood_in = dict(sorted(found.stood_in.items(), key=lambda item: in_lesson_order(item[0])))
    print("\n".join(found.lines()))
    return found

