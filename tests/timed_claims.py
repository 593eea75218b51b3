"""Timed claims: measurements that a lesson's sentence reads off this machine's clock, and the band
its test asserts them in. Each is recorded as it is checked, and the end of the test run prints
them all (``tests/conftest.py``), failing or not: a CI log then shows how close to its band each
timing came on CI's machine, not only the one that fell out of it.

    assert within("08: decode over prefill FLOP/s", facts["decode_over_prefill"], high=0.12)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    claim: str
    values: tuple[float, ...]
    low: float | None
    high: float | None

    @property
    def held(self) -> bool:
        return all((self.low is None or v >= self.low) and (self.high is None or v <= self.high)
                   for v in self.values)

    def line(self) -> str:
        band = (f"{self.low:g}" if self.low is not None else "") + " .. " + \
               (f"{self.high:g}" if self.high is not None else "")
        shown = ", ".join(f"{v:.3g}" for v in self.values)
        return f"{'ok  ' if self.held else 'OUT '} {self.claim}: {shown}   (asserted {band.strip()})"


RECORDED: list[Measured] = []


def within(claim: str, value: float | Iterable[float], low: float | None = None,
           high: float | None = None) -> bool:
    """Record ``value`` (one number, or one per seed) under ``claim`` and say whether every one
    lies in [low, high] (a missing bound is open)."""
    if low is None and high is None:
        raise ValueError(f"{claim}: give within() a low or a high bound")
    values = (float(value),) if isinstance(value, (int, float)) else tuple(float(v) for v in value)
    if not values:
        raise ValueError(f"{claim}: no measurement to check")
    measured = Measured(claim, values, low, high)
    RECORDED.append(measured)
    return measured.held
