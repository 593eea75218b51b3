"""The record of timed claims (tests/timed_claims.py) checks the way the asserts it replaces did."""

from __future__ import annotations

import pytest

from tests import timed_claims
from tests.timed_claims import within


@pytest.fixture(autouse=True)
def _own_record(monkeypatch):
    monkeypatch.setattr(timed_claims, "RECORDED", [])


def test_a_value_inside_its_band_holds_and_one_outside_does_not():
    assert within("inside", 1.49, 1.2, 4)
    assert not within("below", 1.1, 1.2, 4)
    assert not within("above", 4.5, 1.2, 4)
    assert within("open above", 9.0, low=1) and not within("open below", 0.2, high=0.12)


def test_one_seed_out_of_three_is_enough_to_fail():
    assert not within("seeds", [1.0, 1.3, 0.6], low=0.95)
    assert within("seeds", [1.0, 1.3, 0.96], low=0.95)


def test_every_check_is_recorded_with_its_values_and_band():
    within("04: grouped attention's speedup", 1.49, 1.2, 4)
    within("08: decode / prefill", [0.097, 0.13], high=0.12)
    lines = [m.line() for m in timed_claims.RECORDED]
    assert lines[0].startswith("ok") and "1.49" in lines[0] and "1.2 .. 4" in lines[0]
    assert lines[1].startswith("OUT") and "0.097, 0.13" in lines[1] and ".. 0.12" in lines[1]


def test_a_check_without_bounds_or_values_is_an_error():
    with pytest.raises(ValueError, match="low or a high"):
        within("no band", 1.0)
    with pytest.raises(ValueError, match="no measurement"):
        within("no values", [], low=0)
