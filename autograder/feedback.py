"""``python -m autograder feedback``: a feedback page for every graded submission, holding no secret.

nbgrader's feedback is the autograded notebook rendered to HTML. Hidden-test cells carry no test
code (only a marker; the trusted cases score them outside the notebook) and the grader has written
each trusted verdict into its cell. nbgrader's feedback pipeline (``GenerateFeedback.preprocessors``
in the course's nbgrader config) runs ``HideHiddenTests``, which removes the marker region and
keeps only the grader's verdict as the cell's output, then ``autograder.scrub.ScrubLeaks``, which
replaces any output or source that shows a secret (``autograder.leaks``: hidden-test lines the
released notebook does not show, the trusted cases, the grader's passwords and tokens, disguised
or not) with a line saying it was removed.

Pages are generated one submission at a time, so one that nbgrader cannot render stops no other.
nbgrader renders them in this process, through its own API (``NbGraderAPI.generate_feedback``, as
formgrader does), with the course's settings loaded once: a ``nbgrader generate_feedback`` command
per submission spent 3 of its 4 seconds importing nbgrader (45 pages: 175 s, now 49 s). Then every
page is scanned again, data URIs included. A graded submission that has no page then
(its notebook missing, not notebook JSON, stopped while graded, or nbgrader failed), or whose page
still shows a secret, gets the grader's own page instead (``autograder.summary_page``): its scores
and verdicts, and why the notebook is not shown. Every graded submission ends with a page; the
command exits non-zero only when a page could not be written.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import ClearHiddenTests
from traitlets.config.loader import PyFileConfigLoader

from autograder import gradebook_url, leaks, scrub, summary_page
from autograder.leaks import hidden_lines, page_text  # noqa: F401 (where tests and other tools find them)

HIDDEN_PASSED = "Hidden tests: passed."
HIDDEN_FAILED = "Hidden tests: at least one failed. Their code stays hidden; check your function against the lesson's visible checks and the cases its docstring names."


class HideHiddenTests(ClearHiddenTests):
    """Clears the hidden region of each graded test cell and shows only the grader's verdict."""

    def preprocess_cell(self, cell, resources, cell_index):
        meta = cell.metadata.get("nbgrader", {})
        graded_test = cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")
        if not graded_test or self.begin_test_delimeter not in cell.source:
            return cell, resources  # a learner's own cell may quote a marker: it is just text
        try:
            self._remove_hidden_test_region(cell)
        except Exception:  # noqa: BLE001 (an unbalanced region: show nothing of the cell's code)
            cell.source = "# Hidden tests"
        verdicts = [o for o in cell.get("outputs", []) if _is_verdict(o)]
        if not verdicts:  # no trusted verdict was written: say what the score says
            passed = meta.get("score") is not None and meta.get("score") == meta.get("points")
            verdicts = [new_output("stream", name="stdout", text=HIDDEN_PASSED if passed else HIDDEN_FAILED)]
        cell.outputs = verdicts
        return cell, resources


def _is_verdict(output) -> bool:
    """An output the grader wrote (``autograder.grade.verdict_output``)."""
    return output.get("ename") == "TrustedCheckFailed" or (
        output.get("output_type") == "stream" and str(output.get("text", "")).startswith("Trusted check:"))


# --- the command ---------------------------------------------------------------------------------

# Files nbgrader's release_feedback reads beside each page (they come with the submission).
_EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


def graded_students(course: Path, assignment: str, db_url: str) -> list[str]:
    """Students whose submission of ``assignment`` was graded here: in the gradebook, and collected
    or autograded in this course directory (graders on other machines keep theirs)."""
    here = {p.parent.name for top in ("autograded", "submitted") for p in (course / top).glob(f"*/{assignment}")
            if p.is_dir()}
    try:
        with Gradebook(db_url) as book, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graded = {submission.student.id for submission in book.assignment_submissions(assignment)}
    except Exception as error:  # noqa: BLE001 (no gradebook: what was autograded here is what was graded)
        print(f"{assignment}: the gradebook could not be read ({type(error).__name__}); pages for the "
              "submissions autograded here only")
        return sorted(p.parent.name for p in (course / "autograded").glob(f"*/{assignment}") if p.is_dir())
    return sorted(graded & here)


def _why_not_rendered(course: Path, assignment: str, student: str, notebook: str) -> str:
    """Why there is no autograded notebook to render, in words for the learner."""
    submitted = course / "submitted" / student / assignment / f"{notebook}.ipynb"
    if not submitted.is_file():
        return f"Your submission has no {notebook}.ipynb, so there is no notebook to show."
    try:
        nbformat.read(submitted, as_version=4)
    except Exception:  # noqa: BLE001 (any parse failure)
        return f"Your {notebook}.ipynb is not a notebook the grader can read (not valid notebook JSON)."
    return f"The grader could not run your {notebook}.ipynb to the end, so it cannot show it here."


def _write_summary(course: Path, assignment: str, student: str, notebook: str, reason: str, db_url: str,
                   secrets: dict[str, str]) -> bool:
    """Write the grader's own page for one notebook; False if it could not be written safely."""
    folder = course / "feedback" / student / assignment
    target = folder / f"{notebook}.html"
    autograded = course / "autograded" / student / assignment
    try:
        graded = summary_page.rows(db_url, assignment, student, notebook, autograded / f"{notebook}.ipynb",
                                   course / "logs" / assignment / f"{student}.verdicts.json")
        text = summary_page.page(assignment, student, notebook, reason, graded)
        if leaks.page_leaks(text, secrets):  # a verdict quoting a learner's error that quotes a secret
            text = summary_page.page(assignment, student, notebook, reason,
                                     [summary_page.Row(r.grade_id, r.score, r.max_score) for r in graded])
        folder.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        for name in _EXCHANGE_FILES:  # so that nbgrader release_feedback can release it
            for source in (autograded / name, course / "submitted" / student / assignment / name):
                if source.is_file() and not (folder / name).exists():
                    shutil.copyfile(source, folder / name)
    except Exception as error:  # noqa: BLE001 (reported; the other pages go on)
        target.unlink(missing_ok=True)
        print(f"{assignment} {student}: NO PAGE: the grader's own page could not be written ({type(error).__name__}: "
              f"{str(error)[:200]})")
        return False
    if leaks.page_leaks(text, secrets):
        target.unlink()
        print(f"{assignment} {student}: NO PAGE: even the grader's own page would show a secret")
        return False
    return True


# renders one submission's pages into course/feedback/<student>/<assignment>/: (assignment,
# student) -> (whether nbgrader succeeded, its error or log)
Render = Callable[[str, str], tuple[bool, str]]


def nbgrader_renderer(course: Path, db_url: str) -> Render:
    """nbgrader's ``generate_feedback`` for one submission at a time, in this process, with the
    course's nbgrader settings (its ``nbgrader_config.py``: the feedback preprocessors above) and the
    gradebook at ``db_url``, which never leaves this process (no command line shows its password)."""
    from nbgrader.apps.api import NbGraderAPI  # a few seconds to import: only where pages are made
    from nbgrader.coursedir import CourseDirectory

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url
    api = NbGraderAPI(CourseDirectory(config=config), config=config)

    def render(assignment: str, student: str) -> tuple[bool, str]:
        with warnings.catch_warnings():  # SQLAlchemy's warnings about nbgrader's own session use
            warnings.simplefilter("ignore")
            result = api.generate_feedback(assignment, student, force=True)
        return bool(result.get("success")), result.get("error") or result.get("log") or ""

    return render


def feedback_for(course: Path, assignment: str, student: str, notebooks: list[str], secrets: dict[str, str],
                 db_url: str, render: Render | None = None) -> bool:
    """Make and check the pages of one submission (nbgrader renders them with ``render``, by default
    ``nbgrader_renderer``); False if a page could not be written."""
    autograded = course / "autograded" / student / assignment
    folder = course / "feedback" / student / assignment
    for stale in folder.glob("*.html"):  # pages of an earlier run must not pass for this run's
        stale.unlink()
    if any((autograded / f"{name}.ipynb").is_file() for name in notebooks):
        render = render or nbgrader_renderer(course, db_url)
        succeeded, output = render(assignment, student)
        if not succeeded:
            errors = [line for line in output.splitlines() if "ERROR" in line or "Error" in line]
            print(f"{assignment} {student}: nbgrader generate_feedback failed: "
                  f"{(errors or ['see nbgrader output'])[-1][:200]}")
    written = True
    for name in notebooks:
        page = folder / f"{name}.html"
        if not (autograded / f"{name}.ipynb").is_file():
            reason = _why_not_rendered(course, assignment, student, name)
        elif not page.is_file():
            reason = f"The grader could not turn your {name}.ipynb into a page."
        elif found := leaks.page_leaks(page.read_text(errors="replace"), secrets):
            reason = "Your notebook's page would have shown text the grader keeps hidden, so it is not shown."
            print(f"{assignment} {student}: the rendered page still showed {len(found)} secret(s) after scrubbing; "
                  "the grader's own page replaces it")
        else:
            removed = scrub.removed_parts(page_text(page.read_text(errors="replace")))
            if removed:
                print(f"{assignment} {student}: {removed} part(s) of {name}.ipynb showed text the grader keeps "
                      "hidden and were removed from the page (the page says so)")
            continue
        if _write_summary(course, assignment, student, name, reason, db_url, secrets):
            print(f"{assignment} {student}: the grader's own page for {name}.ipynb (scores and verdicts): "
                  + reason)
        else:
            written = False
    return written


def feedback(course: Path, assignments: list[str], db_url: str | None = None, db_url_file: Path | None = None) -> int:
    """A feedback page for every graded submission of ``assignments`` in ``course``, none showing a
    secret; 1 if a page could not be written, 2 if the gradebook's URL is unusable."""
    try:
        url = gradebook_url.resolve(course, db_url, db_url_file)
    except gradebook_url.GradebookURLError as error:
        print(f"Cannot write feedback: {error}")
        return 2
    status, render = 0, None
    for assignment in assignments:
        secrets = leaks.secrets_for(course, assignment, gradebook_url.password(url))
        notebooks = sorted(p.stem for p in (course / "source" / assignment).glob("*.ipynb"))
        students = graded_students(course, assignment, url)
        if not students:
            print(f"{assignment}: nothing graded yet")
            continue
        render = render or nbgrader_renderer(course, url)
        for student in students:
            if not feedback_for(course, assignment, student, notebooks, secrets, url, render):
                status = 1
        pages = sum(len(list((course / "feedback" / s / assignment).glob("*.html"))) for s in students)
        print(f"{assignment}: {pages} feedback page(s) for {len(students)} graded submission(s) under "
              f"{course / 'feedback'}, each scanned")
    return status
