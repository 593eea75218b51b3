"""The feedback scan finds hidden-test lines even inside syntax-highlighted HTML."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from autograder.feedback import HideHiddenTests, HIDDEN_FAILED, hidden_lines, leaked_hidden_lines

HIDDEN_CELL = "# Hidden tests for f\n### BEGIN HIDDEN TESTS\nassert f(12345) == 'secret value'\n### END HIDDEN TESTS"


def _source(tmp_path):
    path = tmp_path / "source.ipynb"
    cell = new_code_cell(HIDDEN_CELL, metadata={"nbgrader": {"grade": True, "grade_id": "h", "points": 1,
                                                             "locked": True, "solution": False, "schema_version": 3}})
    nbformat.write(new_notebook(cells=[cell]), path)
    return path


def test_a_highlighted_hidden_line_is_found(tmp_path):
    source = _source(tmp_path)
    assert hidden_lines(source) == {"assert f(12345) == 'secret value'"}
    feedback = tmp_path / "feedback"
    feedback.mkdir()
    (feedback / "page.html").write_text(
        '<span class="k">assert</span> <span class="n">f</span>(<span class="mi">12345</span>) '
        '<span class="o">==</span> <span class="s1">&#39;secret value&#39;</span>'
    )
    assert len(leaked_hidden_lines(feedback, [source])) == 1


def test_the_preprocessor_removes_the_region_and_its_traceback(tmp_path):
    notebook = nbformat.read(_source(tmp_path), as_version=4)
    notebook.cells[0].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="secret value",
                                                         traceback=["assert f(12345) == 'secret value'"])]
    notebook, _ = HideHiddenTests().preprocess(notebook, {})
    cell = notebook.cells[0]
    assert "secret" not in cell.source and "12345" not in cell.source
    assert cell.source.startswith("# Hidden tests for f")
    assert [o["text"] for o in cell.outputs] == [HIDDEN_FAILED]
