"""Trusted grading cases, one module per graded lesson (``lesson02.py`` ...).

Each module defines ``cases() -> list[Case]``: for every autograded cell of the lesson's notebook
(by grade id), calls into the learner's library on inputs made here (random shapes and seeds, edge
cases). The grader runs the calls in a sandboxed worker and compares with the reference. This folder
is hidden from every sandbox: a submission cannot read which cases are coming.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Case:
    """One call of a learner's function for one grade cell.

    grade_id: the notebook cell whose points depend on this case.
    recipe:   "call" (a function), "module" (construct a class, set parameters, call it) or
              "grad" (gradients of the outputs against cotangents, see ``autograder.worker``).
    target:   name of the function or class in the lesson's module.
    args, kwargs: JSON values or ``array(...)`` references into ``arrays``.
    init, parameters: for "module": constructor keyword arguments, and parameter name -> array.
    options:  extra JSON data for a recipe of ``autograder.recipes`` (e.g. how many decoding steps).
    forbidden: torch operators the exercise must not call (names of ``aten`` ops such as
              "_softmax" or "_scaled_dot_product", matched as prefixes); calling one fails the case
              with a note saying which and why.
    """

    grade_id: str
    target: str
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    recipe: str = "call"
    init: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    grad_args: list = field(default_factory=list)
    cotangents: list = field(default_factory=list)
    label: str = ""
    options: dict = field(default_factory=dict)
    forbidden: tuple[str, ...] = ()


class Inputs:
    """Builds the arrays of one case and the argument specs that refer to them."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, value: np.ndarray, as_: str = "torch") -> dict:
        name = f"a{len(self.arrays)}"
        self.arrays[name] = np.ascontiguousarray(value)
        return {"array": name, "as": as_}
