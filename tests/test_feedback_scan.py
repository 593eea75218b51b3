"""The feedback scan finds secrets however a page disguises them, and the preprocessor shows only
the grader's verdict in hidden-test cells."""

from __future__ import annotations

import base64

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.feedback import (
    HIDDEN_FAILED,
    HIDDEN_PASSED,
    HideHiddenTests,
    environment_secrets,
    hidden_lines,
    leaks,
    page_text,
    scan_pages,
)

SECRET = "assert f(12345) == 'secret value'"
HIDDEN_CELL = f"# Hidden tests for f\n### BEGIN HIDDEN TESTS\n{SECRET}\n### END HIDDEN TESTS"
META = {"nbgrader": {"grade": True, "grade_id": "h", "points": 1, "locked": True, "solution": False,
                     "schema_version": 3}}


def _source(tmp_path):
    path = tmp_path / "source.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(HIDDEN_CELL, metadata=META)]), path)
    return path


def test_hidden_lines_are_read_from_the_instructor_notebook(tmp_path):
    assert hidden_lines(_source(tmp_path)) == {SECRET}


@pytest.mark.parametrize("disguise", [
    lambda s: s,
    lambda s: s.replace(" ", "\n"),  # one word per line
    lambda s: "\u200b".join(s),  # zero-width spaces between letters
    lambda s: "\u2060".join(s).replace("'", "\uff07"),  # word joiners, a fullwidth apostrophe
    lambda s: "noise " + base64.b64encode(s.encode()).decode() + " noise",
    lambda s: base64.urlsafe_b64encode(base64.b64encode(s.encode())).decode().rstrip("="),  # twice, URL-safe
])
def test_a_disguised_secret_is_found(disguise):
    assert leaks(f"some output\n{disguise(SECRET)}\nmore output", {SECRET}) == [SECRET]


def test_ordinary_text_is_not_a_leak():
    assert leaks("assert f(1) == 'other'\n" + base64.b64encode(b"just some words here").decode(), {SECRET}) == []


def test_a_highlighted_line_is_found_in_html(tmp_path):
    page = ('<span class="k">assert</span> <span class="n">f</span>(<span class="mi">12345</span>) '
            '<span class="o">==</span> <span class="s1">&#39;secret value&#39;</span>')
    (tmp_path / "page.html").write_text(page)
    assert leaks(page_text(page), {SECRET}) == [SECRET]
    assert list(scan_pages(tmp_path, {SECRET: "the hidden line"}).values()) == [["the hidden line"]]


def test_environment_secrets_are_the_tokens_not_the_paths():
    found = environment_secrets({"JUPYTERHUB_API_TOKEN": "abc123def456", "PATH": "/usr/bin:/bin",
                                 "HOME": "/root", "LANG": "C.UTF-8", "SOME_ID": "a" * 40})
    assert found == {"abc123def456", "a" * 40}


def test_the_preprocessor_keeps_only_the_graders_verdict(tmp_path):
    notebook = nbformat.read(_source(tmp_path), as_version=4)
    verdict = new_output("error", ename="TrustedCheckFailed", evalue="f (case 3): values differ", traceback=["x"])
    notebook.cells[0].outputs = [new_output("stream", name="stdout", text=SECRET), verdict]
    notebook, _ = HideHiddenTests().preprocess(notebook, {})
    cell = notebook.cells[0]
    assert "secret" not in cell.source and "12345" not in cell.source
    assert cell.source.startswith("# Hidden tests for f")
    assert cell.outputs == [verdict]


def test_without_a_verdict_the_score_speaks(tmp_path):
    for score, text in ((1, HIDDEN_PASSED), (0, HIDDEN_FAILED)):
        notebook = nbformat.read(_source(tmp_path), as_version=4)
        notebook.cells[0].metadata["nbgrader"]["score"] = score
        notebook, _ = HideHiddenTests().preprocess(notebook, {})
        assert [o["text"] for o in notebook.cells[0].outputs] == [text]


def test_a_learners_cell_quoting_a_marker_is_left_alone():
    cell = new_code_cell("# ### BEGIN HIDDEN TESTS\nx = 1")
    notebook, _ = HideHiddenTests().preprocess(new_notebook(cells=[cell]), {})
    assert notebook.cells[0].source == "# ### BEGIN HIDDEN TESTS\nx = 1"
