"""Helpers the tests of the exercise modules share."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

import attnlab

ROOT = Path(__file__).resolve().parents[1]


def borrowed_reference(module: str):
    """For a fixture: ``attnlab.<module>`` as the course's reference, restored afterwards."""
    was_reference = attnlab.source_of(module) == "reference"
    attnlab.use_reference(module)
    yield importlib.import_module(f"attnlab.{module}")
    if not was_reference:
        attnlab.use_own(module)


def load_stub(module: str):
    """The learner's stub ``src/attnlab/<module>.py``, loaded from its file under a private name
    (the reference switch is not involved)."""
    spec = importlib.util.spec_from_file_location(f"_attnlab_{module}_stub", ROOT / "src" / "attnlab" / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def fails(check, fn, *patterns: str, flags: int = re.IGNORECASE) -> str:
    """Run ``check(fn)``; it must raise AssertionError whose message matches every pattern."""
    with pytest.raises(AssertionError) as caught:
        check(fn)
    message = str(caught.value)
    for pattern in patterns:
        assert re.search(pattern, message, flags), f"{pattern!r} not in: {message}"
    return message


def trusted_case_verdicts(lesson_number: str, module, installed_as: str | None = None) -> list[tuple[str, str, str]]:
    """(grade id, case label, why it fails or "") for every trusted case of a lesson
    (``autograder/cases/lessonNN.py``), with ``module`` standing for the learner's module: its
    outputs compared with the reference's as ``autograder.trusted`` compares them, in this process
    (no sandbox). ``installed_as``: also put ``module`` in ``sys.modules`` under that name while
    each case runs (for cases that reach it through another module, as lesson 05's KV-cache cases
    reach ``attnlab.positions`` through the reference ``MultiHeadAttention``)."""
    import sys

    from attnlab.lessons import lesson
    from autograder import trusted, worker

    reference = trusted.reference_module(lesson(lesson_number))
    verdicts = []
    for index, case in enumerate(trusted.load_cases(lesson(lesson_number))):
        call, arrays = trusted._prefixed(case, index)
        expected = trusted._expected(reference, call, arrays)
        got_arrays: dict = {}
        saved = sys.modules.get(installed_as) if installed_as else None
        if installed_as:
            sys.modules[installed_as] = module
        try:
            got = worker.run_call(module, call, arrays, got_arrays, police=True)
        except Exception as error:  # the worker reports a raising call the same way
            got = {"status": "error", "error": f"{type(error).__name__}: {error}"}
        finally:
            if installed_as:
                sys.modules[installed_as] = saved
        verdicts.append((case.grade_id, case.label, trusted._compare(call, expected, got, got_arrays, arrays)))
    return verdicts


def trusted_verdicts(lesson_number: str, module, installed_as: str | None = None) -> dict[str, str]:
    """Every grade cell of a lesson -> its first failing case's reason ("" when all pass)."""
    verdicts: dict[str, str] = {}
    for grade_id, label, why in trusted_case_verdicts(lesson_number, module, installed_as):
        if not verdicts.get(grade_id):
            verdicts[grade_id] = f"{label}: {why}" if why else ""
    return verdicts


def with_mistake(reference, names, **functions):
    """A stand-in for an exercise module: the reference's ``names``, with ``functions`` replacing some."""
    import types

    module = types.SimpleNamespace(__name__=reference.__name__, **{name: getattr(reference, name) for name in names})
    for name, fn in functions.items():
        setattr(module, name, fn)
    return module
