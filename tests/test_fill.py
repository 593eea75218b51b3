"""autograder.fill: a stub filled in as a learner fills it is the source, less its markers."""

from __future__ import annotations

import nbformat
import pytest

from attnlab.lessons import exercise_modules
from autograder import paths
from autograder.fill import fill, fill_notebook, stub_blocks, without_hidden_tests, without_markers
from autograder.stubs import header, make_stub

SOURCE = '''"""Module docstring."""


def kept(x):
    """Docstring stays."""
    check = x  # outside the region: stays
    ### BEGIN SOLUTION
    secret = x * 2
    return secret
    ### END SOLUTION


class Thing:
    def method(self):
        ### BEGIN SOLUTION
        return "body (with a parenthesis"
        ### END SOLUTION
'''


def test_a_stub_made_from_a_source_fills_back_to_it():
    stub = make_stub(SOURCE, "attention")
    assert len(stub_blocks(stub)) == 2
    filled = fill(stub, SOURCE)
    assert filled == header("attention") + without_markers(SOURCE)
    assert "raise NotImplementedError" not in filled and not stub_blocks(filled)
    namespace: dict = {}
    exec(compile(filled, "filled", "exec"), namespace)
    assert namespace["kept"](3) == 6 and namespace["Thing"]().method() == "body (with a parenthesis"


@pytest.mark.parametrize("module", exercise_modules())
def test_every_committed_stub_filled_is_its_reference(module):
    """What a learner who wrote every body of src/attnlab/<module>.py has: the reference's code."""
    reference = (paths.REFERENCE_MODULES / f"{module}.py").read_text()
    stub = (paths.LIBRARY / f"{module}.py").read_text()
    assert fill(stub, reference) == header(module) + without_markers(reference)


def test_a_notebook_code_stub_of_nbgrader_is_filled_too():
    cell = "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\nprint(f(2))"
    source = "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n\nprint(f(2))"
    assert fill(cell, source) == "def f(x):\n    return x + 1\n\nprint(f(2))"


def test_a_stub_and_a_source_that_do_not_match_are_refused():
    stub = make_stub(SOURCE, "attention")
    with pytest.raises(ValueError, match="2 places to fill, its source 1 solution regions"):
        fill(stub, SOURCE.split("class Thing")[0])
    with pytest.raises(ValueError, match="not followed by a raise NotImplementedError"):
        stub_blocks("def f():\n    # YOUR CODE HERE\n    return 1\n")


def test_hidden_test_regions_go_markers_and_all():
    text = "# visible\n### BEGIN HIDDEN TESTS\nassert secret\n### END HIDDEN TESTS\nprint(1)\n"
    assert without_hidden_tests(text) == "# visible\nprint(1)\n"


def test_a_notebook_is_filled_cell_by_cell_and_written_answers_too():
    source = nbformat.read(paths.SOLUTION_NOTEBOOKS / "03_masking.ipynb", as_version=4)
    learner = nbformat.read(paths.NOTEBOOKS / "03_masking.ipynb", as_version=4)
    filled = fill_notebook(learner, source)
    assert not any("YOUR CODE HERE" in c.source or c.source.strip() == "YOUR ANSWER HERE" for c in filled.cells)
    answers = [c for c in filled.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "markdown"]
    assert answers and all(len(c.source.split()) > 20 for c in answers)
    assert any("YOUR ANSWER HERE" in c.source for c in learner.cells), "the learner's copy is left as it was"
    shuffled = nbformat.v4.new_notebook(cells=learner.cells[1:] + learner.cells[:1])
    with pytest.raises(ValueError, match=r"cell \d+: code None in the learner notebook, markdown"):
        fill_notebook(shuffled, source)
