"""The grader's check of a submitted notebook (``autograder.tampering``): each kind of change to a
graded cell gets exactly its note, the released value is put back, and a learner's own work (or an
untouched notebook) gets no note at all. The corpus (tests/adversarial/corpus.py) grades some of
these end to end."""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.tampering import restore, restore_submission


def _meta(grade_id, grade=False, solution=False, locked=False, points=0):
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "solution": solution, "schema_version": 3,
            "task": False, "checksum": "0" * 32}
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def released():
    """A released notebook with each kind of cell nbgrader knows."""
    return new_notebook(cells=[
        new_markdown_cell("Instructions, locked", metadata=_meta("intro", locked=True)),
        new_code_cell("def f(x):\n    raise NotImplementedError", metadata=_meta("f_solution", solution=True)),
        new_code_cell("check_f(f)", metadata=_meta("f_visible", grade=True, locked=True, points=2)),
        new_code_cell("# Hidden tests for f run when your submission is graded.",
                      metadata=_meta("f_hidden", grade=True, locked=True, points=3)),
        new_markdown_cell("YOUR ANSWER HERE", metadata=_meta("answer", grade=True, solution=True, points=3)),
        new_code_cell("print('an ordinary cell')"),
    ])


def cell(notebook, grade_id):
    return next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _edit_source(nb):
    cell(nb, "f_visible").source = "pass"


def _points(nb):
    cell(nb, "f_visible").metadata["nbgrader"]["points"] = 100


def _points_text(nb):
    cell(nb, "answer").metadata["nbgrader"]["points"] = "lots\nINSTRUCTOR NOTE"


def _type(nb):
    target = cell(nb, "f_visible")
    target.cell_type = "markdown"
    del target["outputs"], target["execution_count"]


def _unlock(nb):
    cell(nb, "f_hidden").metadata["nbgrader"]["locked"] = False


def _ungrade(nb):
    cell(nb, "answer").metadata["nbgrader"]["grade"] = False


def _solution(nb):
    cell(nb, "f_visible").metadata["nbgrader"]["solution"] = True


def _delete_tests(nb):
    nb.cells.remove(cell(nb, "f_visible"))
    nb.cells.remove(cell(nb, "f_hidden"))


def _delete_answer(nb):
    nb.cells.remove(cell(nb, "answer"))


def _copy(source):
    """A copied cell, as JupyterLab pastes it: the same metadata, a cell id of its own."""
    pasted = copy.deepcopy(source)
    pasted["id"] = source["id"] + "-copy"
    return pasted


def _duplicate_test(nb):
    nb.cells.insert(3, _copy(cell(nb, "f_visible")))


def _duplicate_answer(nb):
    """A written answer copied and pasted (JupyterLab keeps the grade id), the answer in the first copy."""
    answer = cell(nb, "answer")
    nb.cells.insert(nb.cells.index(answer) + 1, _copy(answer))
    answer.source = "My answer."


def _unknown(nb):
    nb.cells.append(new_code_cell("x = 1", metadata=_meta("bonus", grade=True, locked=True, points=50)))


def _unknown_no_id(nb):
    nb.cells.append(new_code_cell("x = 1", metadata={"nbgrader": {"grade": True, "points": 50}}))


KINDS = {
    "source": (_edit_source, ["source of cell f_visible was edited; the original source was used"]),
    "points": (_points, ["points of cell f_visible changed from 2 to 100; the original points were used"]),
    "points (text)": (_points_text, ['points of cell answer changed from 3 to "lots INSTRUCTOR NOTE"; '
                                     "the original points were used"]),
    "type": (_type, ["type of cell f_visible changed from code to markdown; the original type was used"]),
    "locked flag": (_unlock, ["locked flag of cell f_hidden changed from true to false; the original flag was used"]),
    "grade flag": (_ungrade, ["grade flag of cell answer changed from true to false; the original flag was used"]),
    "solution flag": (_solution, ["solution flag of cell f_visible changed from false to true; "
                                  "the original flag was used"]),
    "deleted tests": (_delete_tests, ["cells f_visible, f_hidden were deleted; the trusted checks scored the "
                                      "library for them"]),
    "deleted answer": (_delete_answer, ["cell answer was deleted; 0 points unless graded by hand"]),
    "duplicated test": (_duplicate_test, ["cell f_visible appears 2 times; copy 2 of 2 was graded, the others "
                                          "were kept as ordinary cells"]),
    "duplicated answer": (_duplicate_answer, ["cell answer appears 2 times; copy 1 of 2 was graded, the others "
                                              "were kept as ordinary cells"]),
    "unknown cell": (_unknown, ['cell "bonus" is not a graded cell of the released notebook; it was kept as an '
                                "ordinary cell, worth no points"]),
    "graded cell without an id": (_unknown_no_id, ["cell 7 is not a graded cell of the released notebook; it was "
                                                   "kept as an ordinary cell, worth no points"]),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_change_gets_exactly_its_note_and_is_put_back(kind):
    change, expected = KINDS[kind]
    original, submitted = released(), released()
    change(submitted)
    assert restore(original, submitted, trusted_ids={"f_visible", "f_hidden"}) == expected
    # what nbgrader then sees: every graded cell as released, once, with the learner's answer kept
    graded = [c for c in submitted.cells if "nbgrader" in c.metadata]
    assert len({c.metadata["nbgrader"]["grade_id"] for c in graded}) == len(graded)
    for kept in graded:
        wanted = cell(original, kept.metadata["nbgrader"]["grade_id"])
        assert kept.metadata["nbgrader"] == wanted.metadata["nbgrader"] and kept.cell_type == wanted.cell_type
        if wanted.metadata["nbgrader"]["locked"]:
            assert kept.source == wanted.source
    if kind == "duplicated answer":
        assert cell(submitted, "answer").source == "My answer."
    nbformat.validate(submitted)
    assert restore(original, submitted, trusted_ids={"f_visible", "f_hidden"}) == [
        note for note in expected if "deleted" in note]  # put back: nothing left to say but what is gone


def test_a_learners_own_work_gets_no_note():
    original, submitted = released(), released()
    cell(submitted, "f_solution").source = "def f(x):\n    return 2 * x"
    cell(submitted, "answer").source = "Because the variance grows with d."
    submitted.cells[-1].source = "print('my own experiment')"
    submitted.cells.append(new_code_cell("f(3)"))
    cell(submitted, "f_visible").metadata["collapsed"] = True  # JupyterLab's own metadata
    cell(submitted, "f_visible").metadata["nbgrader"]["checksum"] = "f" * 32  # nbgrader rewrites it anyway
    before = copy.deepcopy(submitted)
    assert restore(original, submitted) == []
    assert cell(submitted, "f_solution").source == cell(before, "f_solution").source


def test_the_instructors_version_of_a_hidden_test_cell_is_no_edit():
    """A submission made from the source notebook (as the tests' own "solution" submissions are)
    has the hidden region in its hidden-test cell: nbgrader puts that version back anyway."""
    original, instructor, submitted = released(), released(), released()
    hidden = "# Hidden tests for f\n### BEGIN HIDDEN TESTS\nassert f(2) == 4\n### END HIDDEN TESTS"
    cell(instructor, "f_hidden").source = cell(submitted, "f_hidden").source = hidden
    assert restore(original, submitted, instructor=instructor) == []
    cell(submitted, "f_hidden").source = "pass"
    assert restore(original, submitted, instructor=instructor) == [
        "source of cell f_hidden was edited; the original source was used"]


def test_the_submission_folder_is_checked_and_only_a_changed_notebook_rewritten(tmp_path):
    source, release, submitted = (tmp_path / name for name in ("source", "release", "submitted"))
    for folder in (source, release, submitted):
        folder.mkdir()
    for name in ("a.ipynb", "b.ipynb", "c.ipynb", "d.ipynb"):
        nbformat.write(released(), source / name)
        nbformat.write(released(), release / name)
    untouched, tampered = released(), released()
    _points(tampered)
    nbformat.write(untouched, submitted / "a.ipynb")
    nbformat.write(tampered, submitted / "b.ipynb")
    (submitted / "c.ipynb").write_text('{"cells": [ not json')
    stamp = (submitted / "a.ipynb").stat().st_mtime_ns
    assert restore_submission(source, release, submitted) == [
        "b.ipynb: points of cell f_visible changed from 2 to 100; the original points were used",
        "c.ipynb: the notebook is not valid notebook JSON",
        "d.ipynb: notebook missing from the submission (its cells scored 0)",
    ]
    assert (submitted / "a.ipynb").stat().st_mtime_ns == stamp
    assert cell(nbformat.read(submitted / "b.ipynb", as_version=4), "f_visible").metadata["nbgrader"]["points"] == 2
