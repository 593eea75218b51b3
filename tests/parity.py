"""The two verdicts on a learner's library, side by side: the notebook's visible checks and the
course's trusted grading. A mistake is written into the reference (``Mutation``: one text
replacement in ``solutions/attnlab/<module>.py``), the mutant stands in for the lesson's module as a
learner's file would (every other exercise module is the reference, as while grading), and:

- ``visible_verdicts``: every graded check cell of the lesson's learner notebook, run as the
  notebook runs it, -> its failure message ("" when it printed ✓);
- ``trusted_verdicts``: every trusted case of the lesson (``autograder/cases/lessonNN.py``), run
  through the grading worker's own ``run_call`` (forbidden shortcuts policed) and compared with
  the reference's answer by ``autograder.trusted._compare``, -> grade id -> why it fails ("").

A visible cell ``x_visible`` is honest when it fails exactly when a trusted case of ``x_visible``
or ``x_hidden`` fails. Everything runs in this process (no sandbox: the sandbox is tested apart).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import attnlab
from attnlab import switch
from attnlab.lessons import exercise_modules, lesson
from autograder import paths, trusted, worker


@dataclass(frozen=True)
class Mutation:
    """A classic mistake, written into the reference of one exercise.

    lesson:  the lesson number ("02"); its module is the one mutated.
    cell:    the exercise's grade-id prefix ("softmax": cells softmax_visible, softmax_hidden).
    name:    the mistake, as a learner would describe it.
    old, new: ``old`` occurs exactly once in the reference module; it becomes ``new``.
    says:    a regular expression the visible check's message must match (it names the mistake).
    """

    lesson: str
    cell: str
    name: str
    old: str
    new: str
    says: str

    @property
    def id(self) -> str:
        return f"{self.lesson}-{self.cell}-{self.name}"


def mutated_source(mutation: Mutation) -> str:
    module = lesson(mutation.lesson).modules[0]
    source = (paths.REFERENCE_MODULES / f"{module}.py").read_text()
    found = source.count(mutation.old)
    if found != 1:
        raise AssertionError(f"{mutation.id}: the text to replace occurs {found} times in "
                             f"solutions/attnlab/{module}.py (it must occur once): {mutation.old!r}")
    return source.replace(mutation.old, mutation.new)


@contextlib.contextmanager
def installed(module: str, source: str | None):
    """``attnlab.<module>`` loaded from ``source`` (None: the reference) under its own name, from a
    file named ``<module>.py``, every other exercise module the reference, all imported afresh;
    everything as it was afterwards."""
    names = [f"attnlab.{name}" for name in exercise_modules()]
    saved_modules = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    saved_attrs = {name: getattr(attnlab, name) for name in exercise_modules() if hasattr(attnlab, name)}
    saved_selected, saved_quiet = set(switch._selected), switch._quiet
    switch._selected.clear()
    switch._selected.update(set(exercise_modules()) - ({module} if source is not None else set()))
    switch._quiet = True
    folder = tempfile.TemporaryDirectory(prefix="attnlab-mutant-")
    try:
        if source is not None:
            path = Path(folder.name) / f"{module}.py"
            path.write_text(source)
            spec = importlib.util.spec_from_file_location(f"attnlab.{module}", path)
            mutant = importlib.util.module_from_spec(spec)
            sys.modules[f"attnlab.{module}"] = mutant  # before running it, as an import does
            setattr(attnlab, module, mutant)
            spec.loader.exec_module(mutant)
        yield importlib.import_module(f"attnlab.{module}")
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved_modules)
        for name in exercise_modules():
            if name in saved_attrs:
                setattr(attnlab, name, saved_attrs[name])
            elif hasattr(attnlab, name):
                delattr(attnlab, name)
        switch._selected.clear()
        switch._selected.update(saved_selected)
        switch._quiet = saved_quiet
        folder.cleanup()


def visible_verdicts(number: str, module) -> dict[str, str]:
    """Check cell grade prefix ("softmax") -> the visible check's failure message ("" for ✓)."""
    found: dict[str, str] = {}
    for cell in graded_check_cells(number):
        namespace = {"checks": importlib.import_module("attnlab.checks"), cell.module: module}
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                exec(compile(cell.source, f"<check cell {cell.prefix}>", "exec"), namespace)
        except Exception as error:  # noqa: BLE001 (a failing check, a stub, a crash)
            found[cell.prefix] = f"{type(error).__name__}: {error}" or type(error).__name__
        else:
            printed = quiet.getvalue()
            found[cell.prefix] = "" if "✓" in printed else f"printed no ✓: {printed[:300]!r}"
    return found


@dataclass(frozen=True)
class GradedCheckCell:
    prefix: str  # "softmax" for the cells softmax_visible / softmax_hidden
    module: str
    source: str


@functools.lru_cache(maxsize=None)
def graded_check_cells(number: str) -> tuple[GradedCheckCell, ...]:
    """The graded visible-check cells of a lesson's learner notebook, by grade-id prefix."""
    import nbformat

    item = lesson(number)
    cells = []
    for cell in nbformat.read(paths.NOTEBOOKS / item.notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        if cell.cell_type == "code" and meta.get("grade") and grade_id.endswith("_visible"):
            cells.append(GradedCheckCell(grade_id[: -len("_visible")], item.modules[0], cell.source))
    return tuple(cells)


@functools.lru_cache(maxsize=None)
def _reference_answers(number: str):
    """Every trusted case of a lesson with the reference's answer (computed once per lesson, with
    every exercise module the reference)."""
    item = lesson(number)
    for key, value in trusted.worker_env(item).items():  # Triton's interpreter, as when graded
        os.environ.setdefault(key, value)
    with installed(item.modules[0], None) as reference:
        prepared = []
        for index, case in enumerate(trusted.load_cases(item)):
            call, arrays = trusted._prefixed(case, index)
            prepared.append((case, call, arrays, trusted._expected(reference, call, arrays)))
    return prepared


def trusted_verdicts(number: str, module) -> dict[str, str]:
    """Grade id -> why its first failing trusted case fails ("" when every case passes)."""
    verdicts: dict[str, str] = {}
    for case, call, arrays, expected in _reference_answers(number):
        got_arrays: dict = {}
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                got = worker.run_call(module, call, arrays, got_arrays, police=True)
        except BaseException as error:  # noqa: BLE001 (the worker reports a raising call the same way)
            if isinstance(error, KeyboardInterrupt):
                raise
            got = {"status": "error", "error": f"{type(error).__name__}: {error}"}
        why = trusted._compare(call, expected, got, got_arrays, arrays)
        if not verdicts.get(case.grade_id):
            verdicts[case.grade_id] = f"{case.label}: {why}" if why else ""
    return verdicts


@dataclass
class Verdicts:
    visible: dict[str, str]  # cell prefix -> message
    trusted: dict[str, str]  # grade id -> reason

    def trusted_fails(self, prefix: str) -> str:
        return "; ".join(f"{grade_id}: {why}" for grade_id in (f"{prefix}_visible", f"{prefix}_hidden")
                         if (why := self.trusted.get(grade_id)))

    def disagreements(self) -> list[str]:
        """Cells where the visible check and the trusted grade disagree, each said in a line."""
        lines = []
        for prefix, message in self.visible.items():
            graded = self.trusted_fails(prefix)
            if bool(message) != bool(graded):
                lines.append(f"{prefix}: visible {'fails: ' + message[:300] if message else '✓'} / trusted "
                             f"{'fails: ' + graded[:300] if graded else 'passes'}")
        return lines


def verdicts(number: str, source: str | None) -> Verdicts:
    """Both verdicts on a lesson's module made from ``source`` (None: the reference)."""
    _reference_answers(number)  # before the mutant is installed
    with installed(lesson(number).modules[0], source) as module:
        return Verdicts(visible_verdicts(number, module), trusted_verdicts(number, module))


def needs_own_process(number: str) -> bool:
    """Whether the lesson has a grading environment of its own (``WORKER_ENV``, e.g. Triton's
    interpreter, which must be set before Triton is imported). Always its own process then: this
    one's environment may say the same (``attnlab.progress()`` run by an earlier test sets
    TRITON_INTERPRET) while Triton was imported here before, in the other mode."""
    return bool(trusted.worker_env(lesson(number)))


def verdicts_in_own_process(number: str, mutations: list[Mutation]) -> dict[str, Verdicts]:
    """``verdicts`` of the reference (key "reference") and of every mutation (key: its id), computed
    in a fresh interpreter with the lesson's grading environment."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNLAB_")}
    env.update(trusted.worker_env(lesson(number)))
    done = subprocess.run([sys.executable, "-m", "tests.parity", number, *(m.id for m in mutations)],
                          cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"tests.parity {number} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {key: Verdicts(**value) for key, value in json.loads(done.stdout.splitlines()[-1]).items()}


def main(argv: list[str]) -> int:
    """``python -m tests.parity 09 [mutation id ...]``: the verdicts as one JSON line."""
    import dataclasses
    import json

    from tests.mutation_table import MUTATIONS

    number, wanted = argv[0], set(argv[1:])
    found = {"reference": verdicts(number, None)}
    for mutation in MUTATIONS:
        if mutation.id in wanted:
            found[mutation.id] = verdicts(number, mutated_source(mutation))
    print(json.dumps({key: dataclasses.asdict(value) for key, value in found.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
