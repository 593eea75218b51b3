"""A mistake carried forward is traced to where it lives (issue 28, part 2).

For classic mistakes of early lessons, a learner's clone holds the mistake in its module (written
as a learner writes it: the stub filled with a mutated reference's body) and every other exercise
written correctly. A later lesson that builds on that module is opened and Run All is pressed:
nbclient stops at the first error, as Run All does, so only what the learner sees before it runs.
That first failure must be the lesson's set-up cell (``attnlab.start_lesson``), in a few lines,
naming the module, the lesson and the exercise where the mistake lives and how to borrow the
reference to go on; not a traceback from deep inside a later lesson's model. The mistakes come
from the mutation table (tests/mutation_table.py), where their visible messages are tested; the
one the table lacks (weights returned transposed) is written here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from nbclient.exceptions import CellExecutionError

from attnlab.lessons import exercise_modules, lesson, owner
from tests.learner_clone import make_clone
from tests.mutation_table import MUTATIONS
from tests.notebook_runs import cell_text, execute
from tests.parity import Mutation, mutated_source

_BY_ID = {mutation.id: mutation for mutation in MUTATIONS}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Carried:
    """A mistake of an early lesson and the later lesson where the learner meets it."""

    mutation: Mutation
    exercise: str  # the visible check that fails (attnlab.progress's name for it)
    later: str  # the later lesson opened (it builds on the mistaken module)
    says: str  # what the message must say about the mistake itself

    @property
    def module(self) -> str:
        return lesson(self.mutation.lesson).modules[0]


CARRIED = [
    # lesson 02: exp of the raw scores, which overflows on large ones; met in lesson 03
    Carried(_BY_ID["02-softmax-no max shift"], "softmax", "03", r"softmax"),
    # lesson 02: the weights handed back transposed, (n_k, n_q); met three lessons later
    Carried(Mutation("02", "sdpa", "weights returned transposed", "    return weights @ v, weights\n",
                     "    return weights @ v, weights.transpose(-2, -1)\n", ""),
            "scaled_dot_product_attention", "06", r"weights has shape \(2, 7, 5\), expected \(2, 5, 7\)"),
    # lesson 03: the causal mask aligned to the top-left corner; met in lesson 04
    Carried(_BY_ID["03-causal_mask-top-left corner"], "causal_mask", "04", r"aligned to the top-left corner"),
    # lesson 04: repeat_kv tiles the key/value heads instead of repeating each in place; met in 05
    Carried(_BY_ID["04-repeat_kv-tiles the heads"], "repeat_kv", "05", r"repeat_kv"),
    # lesson 05: RoPE pairing the wrong halves (the "half" layout rotated as interleaved pairs);
    # issue 28 saw it surface in lesson 07 as "EncoderBlock's output and the reference disagree"
    Carried(_BY_ID["05-apply_rope-layouts swapped"], "apply_rope", "07", r"apply_rope"),
    # lesson 06: RMSNorm that subtracts the mean (a LayerNorm without its bias); met in lesson 07
    Carried(_BY_ID["06-rms_norm-mean subtracted"], "RMSNorm", "07", r"subtracted the mean"),
]


def _first_failure(tmp_path, carried: Carried):
    """Run All on the later lesson in a clone holding the mistake: the notebook as far as it ran."""
    clone = make_clone(tmp_path, written=exercise_modules(),
                       mistakes={carried.module: mutated_source(carried.mutation)})
    later = lesson(carried.later)
    notebook = clone.filled_notebook(later.notebook)
    with pytest.raises(CellExecutionError):
        execute(clone.notebooks / later.notebook, reference=False, allow_errors=False, env=clone.env(),
                notebook=notebook, timeout=300)
    return notebook


def test_every_mistake_is_carried_to_a_lesson_that_builds_on_it():
    for carried in CARRIED:
        assert carried.module in lesson(carried.later).builds_on, carried.mutation.id
    assert len({carried.module for carried in CARRIED}) >= 5 and len(CARRIED) >= 6


@pytest.mark.parametrize("carried", CARRIED, ids=lambda c: f"{c.mutation.id} in lesson {c.later}")
def test_the_first_failure_names_the_module_the_lesson_and_how_to_borrow(tmp_path, carried):
    notebook = _first_failure(tmp_path, carried)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    failed = [index for index, cell in enumerate(code)
              if any(output.get("output_type") == "error" for output in cell.get("outputs", []))]
    assert len(failed) == 1, "Run All stops at the first error"
    setup = code[failed[0]]
    assert f'attnlab.start_lesson("{carried.later}")' in setup.source, "the set-up cell is where it stops"
    assert not any(cell.get("outputs") or cell.get("execution_count") for cell in code[failed[0] + 1:])

    error = next(output for output in setup.outputs if output.get("output_type") == "error")
    assert error["ename"] == "StartFailed", (error["ename"], error["evalue"])
    home = owner(carried.module)
    message = error["evalue"]
    print(message)  # shown with pytest -rP: what the learner reads
    assert message.startswith(f"lesson {carried.later} builds on your attnlab.{carried.module} of lesson "
                              f"{home.number}, and its check fails:\n{carried.exercise}: "), message
    assert re.search(carried.says, message), message
    assert f"The mistake lives in {carried.module}.py (lesson {home.number}, {home.title})" in message, message
    assert f"attnlab.use_reference({carried.module!r})" in message, message
    assert len(message.splitlines()) <= 4, message

    # What the learner sees under the cell: those lines, wrapped to the notebook's width.
    shown = _ANSI.sub("", "\n".join(error["traceback"]))
    assert len(shown.splitlines()) <= 12, shown
    assert "Traceback" not in shown and 'File "' not in shown and "site-packages" not in shown, shown
    assert f"attnlab.{carried.module} of lesson {home.number}" in shown, shown
    assert "NotImplementedError" not in cell_text(setup)
