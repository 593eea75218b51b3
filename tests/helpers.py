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
