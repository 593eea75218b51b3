"""The feedback scan finds secrets however a page disguises them; what the released assignment
shows is no secret; the preprocessors show only the grader's verdict in hidden-test cells and
replace (saying so) whatever else shows a secret, leaving the rest of the page; where nbgrader's
page cannot be released, the grader's own page gives the scores and verdicts. The corpus
(tests/test_adversarial.py) runs them on graded submissions, through ``autograder feedback``."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from nbgrader.api import Gradebook

from autograder import feedback as feedback_module
from autograder import scrub, summary_page
from autograder.course import config_text
from autograder.feedback import HIDDEN_FAILED, HIDDEN_PASSED, HideHiddenTests, feedback_for
from autograder.leaks import environment_secrets, hidden_lines, leaks, page_leaks, page_text, scan_pages, secrets_for

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


# --- what is a secret ------------------------------------------------------------------------------

MARKER = "# Scored by the trusted cases when your submission is graded."


def _course(tmp_path, released_source: str):
    """A course whose source notebook's hidden region holds ``MARKER`` and ``SECRET``, and whose
    released notebook shows ``released_source``."""
    course = tmp_path / "course"
    for folder in ("source", "release"):
        (course / folder / "99_demo").mkdir(parents=True)
    hidden = f"# Hidden tests for f\n### BEGIN HIDDEN TESTS\n{MARKER}\n{SECRET}\n### END HIDDEN TESTS"
    nbformat.write(new_notebook(cells=[new_code_cell(hidden, metadata=META)]), course / "source" / "99_demo" / "demo.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell(released_source, metadata=META)]),
                   course / "release" / "99_demo" / "demo.ipynb")
    return course


def test_a_hidden_line_the_released_notebook_shows_is_no_secret(tmp_path):
    assert {MARKER, SECRET} <= set(secrets_for(_course(tmp_path, "# Hidden tests for f"), "99_demo"))
    shown = secrets_for(_course(tmp_path / "b", f"# Hidden tests for f\n{MARKER}"), "99_demo")
    assert SECRET in shown and MARKER not in shown


def test_the_gradebook_password_is_a_secret(tmp_path):
    secrets = secrets_for(_course(tmp_path, ""), "99_demo", gradebook_password="pg-pass-1234")
    assert secrets["pg-pass-1234"] == "the gradebook's password"


# --- replacing what shows a secret -----------------------------------------------------------------

DISGUISES = {
    "plain": lambda s: s,
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "zero-width": lambda s: "\u200b".join(s),
    "split lines": lambda s: s.replace(" ", "\n"),
}


def _stream(text, name="stdout"):
    return new_output("stream", name=name, text=text)


def _leaky_notebook():
    png = base64.b64encode(SECRET.encode()).decode()
    half = len(SECRET) // 2
    return new_notebook(cells=[
        new_code_cell("print('kept')", outputs=[_stream("kept\n")]),
        *[new_code_cell(f"leak {name}", outputs=[_stream("before\n"), _stream(disguise(SECRET) + "\n", "stderr")])
          for name, disguise in DISGUISES.items()],
        new_code_cell("an image", outputs=[new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]),
        new_code_cell("split over two outputs", outputs=[_stream(SECRET[:half]), _stream(SECRET[half:], "stderr")]),
        new_code_cell(f"x = 1  # {SECRET}"),
        new_markdown_cell("Some notes of mine."),
    ])


def test_each_output_that_shows_a_secret_is_replaced_and_the_page_says_so():
    notebook = _leaky_notebook()
    assert scrub.scrub_notebook(notebook, {SECRET: SECRET}) == 7
    notice, kept, *leaky, image, split, source, notes = notebook.cells
    assert notice.cell_type == "markdown" and "7 part(s)" in notice.source
    assert kept.outputs == [_stream("kept\n")]
    for cell in leaky:  # the leaking output replaced, the other one kept
        assert [o["text"] for o in cell.outputs] == ["before\n", scrub.OUTPUT_REMOVED]
    assert [o["text"] for o in image.outputs] == [scrub.OUTPUT_REMOVED]
    assert [o["text"] for o in split.outputs] == [scrub.OUTPUT_REMOVED]
    assert source.source == scrub.SOURCE_REMOVED
    assert notes.source == "Some notes of mine."
    assert not leaks(json.dumps(notebook), {SECRET})
    rendered = notice.source.replace("**From the grader:**", "<p><strong>From the grader:</strong>") + "</p>"
    assert scrub.removed_parts(page_text(rendered)) == 7


def test_the_preprocessor_scrubs_the_page_nbgrader_renders(tmp_path):
    """``ScrubLeaks`` registered as nbgrader registers its feedback preprocessors (without enabling
    them), on a notebook of the course's assignment: the page holds the notice, not the secret."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    course = _course(tmp_path, "# Hidden tests for f")
    exporter = HTMLExporter(config=Config({"CourseDirectory": {"root": str(course)}}))
    exporter.register_preprocessor(scrub.ScrubLeaks)
    page, resources = exporter.from_notebook_node(_leaky_notebook(), {"nbgrader": {"assignment": "99_demo",
                                                                                   "db_url": "sqlite:///x.db"}})
    assert resources["removed_parts"] == 7 and scrub.removed_parts(page_text(page)) == 7
    assert page_leaks(page, {SECRET: SECRET}) == [] and "kept" in page_text(page)


def test_a_notebook_without_secrets_is_left_as_it_is():
    notebook = new_notebook(cells=[new_code_cell("print(1)", outputs=[_stream("1\n")]), new_markdown_cell("hi")])
    before = json.dumps(notebook)
    assert scrub.scrub_notebook(notebook, {SECRET: SECRET}) == 0
    assert json.dumps(notebook) == before


def test_a_secret_in_a_data_uri_is_found_on_the_page():
    encoded = base64.b64encode(SECRET.encode()).decode()
    page = f'<p>A figure:</p><img src="data:image/png;base64,{encoded}">'
    assert leaks(page_text(page), {SECRET}) == []  # not in the page's text...
    assert page_leaks(page, {SECRET: "the hidden line"}) == ["the hidden line"]  # ...but in the page


# --- the grader's own page, where nbgrader's cannot be released --------------------------------------

@pytest.fixture
def alembic_on_path(monkeypatch):
    """nbgrader stamps a new gradebook by running the environment's ``alembic`` command by name."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _gradebook(path, cells):
    """A gradebook holding one submission of 99_demo (notebook ``demo``) by ``ada``; ``cells`` maps
    a grade id to (points, autograded score or None for a written answer not yet hand-graded)."""
    url = f"sqlite:///{path}"
    with Gradebook(url) as book:
        book.add_assignment("99_demo")
        book.update_or_create_notebook("demo", "99_demo")
        for grade_id, (points, score) in cells.items():
            book.update_or_create_grade_cell(grade_id, "demo", "99_demo", max_score=points,
                                             cell_type="code" if score is not None else "markdown")
        book.add_student("ada")
        book.add_submission("99_demo", "ada")
        for grade_id, (_, score) in cells.items():
            if score is not None:
                book.find_grade(grade_id, "demo", "99_demo", "ada").auto_score = score
        book.db.commit()
    return url


CELLS = {"f_visible": (1, 1.0), "f_hidden": (2, 0.0), "answer": (3, None)}


def test_the_graders_own_page_gives_the_score_as_nbgrader_heads_it_and_each_verdict(tmp_path, alembic_on_path):
    url = _gradebook(tmp_path / "gradebook.db", CELLS)
    recorded = tmp_path / "ada.verdicts.json"
    recorded.write_text(json.dumps({"f_hidden": "Trusted check failed: f (case 3): <b>values</b> differ"}))
    rows = summary_page.rows(url, "99_demo", "ada", "demo", tmp_path / "no-such.ipynb", recorded)
    assert [(r.grade_id, r.score, r.max_score) for r in rows] == [
        ("f_visible", 1.0, 1.0), ("f_hidden", 0.0, 2.0), ("answer", None, 3.0)]
    page = summary_page.page("99_demo", "ada", "demo", "Your submission has no demo.ipynb.", rows)
    text = page_text(page)
    assert "(Score: 1.0 / 6.0)" in text  # nbgrader's heading, hand-graded points not yet counted
    assert "Your submission has no demo.ipynb." in text and "awaits hand grading" in text
    assert "Trusted check failed: f (case 3): <b>values</b> differ" in text
    assert "<b>values</b>" not in page  # the learner's error message is text, never markup


def _demo_course(tmp_path):
    course = _course(tmp_path, "# Hidden tests for f")
    submitted = course / "submitted" / "ada" / "99_demo"
    submitted.mkdir(parents=True)
    (submitted / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC")
    return course, _gradebook(course / "gradebook.db", CELLS)


def test_a_missing_notebook_gets_the_graders_own_page_ready_for_release(tmp_path, alembic_on_path):
    course, url = _demo_course(tmp_path)
    assert feedback_for(course, "99_demo", "ada", ["demo"], secrets_for(course, "99_demo"), url)
    folder = course / "feedback" / "ada" / "99_demo"
    text = page_text((folder / "demo.html").read_text())
    assert "Your submission has no demo.ipynb" in text and "(Score: 1.0 / 6.0)" in text
    assert (folder / "timestamp.txt").read_text().startswith("2024-01-01")  # what release_feedback reads


def test_a_rendered_page_that_still_leaks_is_replaced_by_the_graders_own(tmp_path, monkeypatch, alembic_on_path):
    """nbgrader's page (a stand-in here) still shows a hidden line: the learner gets the grader's page."""
    course, url = _demo_course(tmp_path)
    autograded = course / "autograded" / "ada" / "99_demo"
    autograded.mkdir(parents=True)
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), autograded / "demo.ipynb")

    def render(assignment, student):
        page = course / "feedback" / student / assignment / "demo.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<pre>{SECRET}</pre>")
        return True, ""

    assert feedback_for(course, "99_demo", "ada", ["demo"], secrets_for(course, "99_demo"), url, render)
    page = (course / "feedback" / "ada" / "99_demo" / "demo.html").read_text()
    assert page_leaks(page, {SECRET: SECRET}) == []
    assert "would have shown text the grader keeps hidden" in page_text(page) and "(Score: 1.0 / 6.0)" in page_text(page)


def _autograded_demo(course):
    """ada's autograded notebook: her function, and the hidden-test cell with the grader's verdict."""
    autograded = course / "autograded" / "ada" / "99_demo"
    autograded.mkdir(parents=True)
    hidden = f"# Hidden tests for f\n### BEGIN HIDDEN TESTS\n{MARKER}\n{SECRET}\n### END HIDDEN TESTS"
    verdict = new_output("stream", name="stdout", text="Trusted check: passed (6 cases)")
    cells = [new_code_cell("def f(x):\n    return x  # ada's answer"),
             new_code_cell(hidden, metadata={"nbgrader": {**META["nbgrader"], "grade_id": "f_hidden", "points": 2}},
                           outputs=[verdict])]
    nbformat.write(new_notebook(cells=cells), autograded / "demo.ipynb")
    (autograded / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC")


def test_nbgrader_renders_the_page_in_this_process_with_the_courses_settings(tmp_path, alembic_on_path, capsys,
                                                                             monkeypatch):
    """The real renderer: nbgrader's own feedback page, made with the course's preprocessors (the
    hidden region gone, the verdict kept) and the gradebook's scores; no nbgrader command is started."""
    course, url = _demo_course(tmp_path)
    (course / "nbgrader_config.py").write_text(config_text())
    _autograded_demo(course)
    render = feedback_module.nbgrader_renderer(course, url)

    def no_command(*args, **kwargs):
        raise AssertionError(f"a command was started: {args}")

    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "Popen", no_command)
        assert render("99_demo", "ada")[0]
    page = (course / "feedback" / "ada" / "99_demo" / "demo.html").read_text()
    assert "ada&#39;s answer" in page or "ada's answer" in page_text(page)
    assert "Trusted check: passed (6 cases)" in page_text(page)
    assert not page_leaks(page, secrets_for(course, "99_demo"))
    # and through feedback_for, which checks the page and keeps it (no grader's page)
    assert feedback_for(course, "99_demo", "ada", ["demo"], secrets_for(course, "99_demo"), url, render)
    assert "the grader's own page" not in capsys.readouterr().out
    assert "ada's answer" in page_text((course / "feedback" / "ada" / "99_demo" / "demo.html").read_text())


def test_a_page_nbgrader_fails_to_render_is_reported_and_the_graders_own_page_replaces_it(tmp_path, alembic_on_path,
                                                                                           capsys):
    course, url = _demo_course(tmp_path)
    _autograded_demo(course)

    def fails(assignment, student):
        return False, "[ERROR] There was an error processing assignment\nValueError: the exporter broke"

    assert feedback_for(course, "99_demo", "ada", ["demo"], secrets_for(course, "99_demo"), url, fails)
    out = capsys.readouterr().out
    assert "99_demo ada: nbgrader generate_feedback failed: ValueError: the exporter broke" in out
    text = page_text((course / "feedback" / "ada" / "99_demo" / "demo.html").read_text())
    assert "could not turn your demo.ipynb into a page" in text and "(Score: 1.0 / 6.0)" in text
