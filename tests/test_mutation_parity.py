"""Visible ✓ ⇔ trusted pass, proved on the mutation table (``tests/mutation_table.py``): for
every classic mistake, the notebook's visible check fails exactly where the trusted grade takes
points, and its message names the mistake."""

from __future__ import annotations

import functools
import re
from collections import Counter

import pytest

from tests import parity
from tests.mutation_table import MUTATIONS

LESSONS = ("01", "02", "03", "04", "05", "06", "07", "08", "09")


@functools.lru_cache(maxsize=None)
def _own_process(number: str) -> dict[str, parity.Verdicts]:
    """Every verdict of a lesson that must run in its own process (lesson 09: Triton's
    interpreter is chosen before torch is imported), computed once."""
    return parity.verdicts_in_own_process(number, [m for m in MUTATIONS if m.lesson == number])


def _verdicts(number: str, mutation: parity.Mutation | None) -> parity.Verdicts:
    if parity.needs_own_process(number):
        return _own_process(number)["reference" if mutation is None else mutation.id]
    return parity.verdicts(number, None if mutation is None else parity.mutated_source(mutation))


@pytest.mark.parametrize("number", LESSONS)
def test_the_reference_passes_both(number):
    found = _verdicts(number, None)
    assert set(found.visible) == {cell.prefix for cell in parity.graded_check_cells(number)}
    assert not any(found.visible.values()), found.visible
    assert found.trusted and not any(found.trusted.values()), found.trusted


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.id)
def test_visible_check_and_trusted_grade_agree(mutation):
    found = _verdicts(mutation.lesson, mutation)
    graded = found.trusted_fails(mutation.cell)
    assert graded, (f"{mutation.id}: the trusted cases give this cell full points for the mistake; "
                    f"either it is no mistake, or the cases miss it")
    assert not found.disagreements(), "\n".join(found.disagreements())
    message = found.visible[mutation.cell]
    assert re.search(mutation.says, message, re.IGNORECASE | re.DOTALL), (
        f"{mutation.id}: the visible message does not name the mistake ({mutation.says!r}):\n{message}")


def test_the_table_covers_every_exercise_three_times():
    ids = [m.id for m in MUTATIONS]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    per_cell = Counter((m.lesson, m.cell) for m in MUTATIONS)
    cells = [(number, cell.prefix) for number in LESSONS for cell in parity.graded_check_cells(number)]
    assert set(per_cell) <= set(cells), f"rows name cells that do not exist: {set(per_cell) - set(cells)}"
    thin = {cell: per_cell.get(cell, 0) for cell in cells if per_cell.get(cell, 0) < 3}
    assert not thin, f"exercises with fewer than three mutations: {thin}"
    assert len(MUTATIONS) >= 150, f"{len(MUTATIONS)} mutations; the course promises at least 150"
