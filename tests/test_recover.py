"""Damaged notebooks keep the learner's written work (``autograder.recover``).

Each damage kind of lesson 02's notebook, done as a front end, a copy-paste or a crash would do it,
is given to the pure recovery (file text in, rebuilt notebook and notes out) and then to the
grader's tampering check, as the grader does: the written answer must end in the graded answer cell,
every graded cell as released, with exactly the stated notes. One real grading run
(``test_recover_grading.py``) takes a few of the kinds end to end.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell

from autograder import recover, tampering

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "02_scaled_dot_product_attention.ipynb"
RELEASED = ROOT / "notebooks" / NOTEBOOK  # the learner's notebook: what release/02_attention/ holds
ANSWER_ID = "sqrt_dk_answer"
ANSWER = "Unscaled scores have variance d_k, so softmax saturates and its gradients vanish."
STUB = "YOUR ANSWER HERE"
TESTS = ["softmax_visible", "softmax_hidden", "attention_numpy_visible", "attention_numpy_hidden",
         "sdpa_visible", "sdpa_hidden"]
REBUILT_NO_ID = "rebuilt from the released notebook: no cell carries the grade id of written answer sqrt_dk_answer"


def released() -> nbformat.NotebookNode:
    return nbformat.read(RELEASED, as_version=4)


def answered() -> dict:
    """The released notebook as JSON (a dict, as a front end holds it), answered."""
    data = json.loads(nbformat.writes(released()))
    data["cells"][_index(data, ANSWER_ID)]["source"] = ANSWER
    return data


def _index(data: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(data["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def _text(data: dict) -> str:
    return json.dumps(data, indent=1)


# --- the damage kinds: each returns the file's text ------------------------------------------------

def metadata_dropped_everywhere() -> str:
    data = answered()
    for cell in data["cells"]:
        cell["metadata"].pop("nbgrader", None)
    return _text(data)


def answer_metadata_dropped() -> str:
    data = answered()
    data["cells"][_index(data, ANSWER_ID)]["metadata"].pop("nbgrader")
    return _text(data)


def grade_id_renamed() -> str:
    data = answered()
    data["cells"][_index(data, "softmax_visible")]["metadata"]["nbgrader"]["grade_id"] = "my_softmax_check"
    return _text(data)


def duplicated_test() -> str:
    data = answered()
    index = _index(data, "sdpa_visible")
    pasted = copy.deepcopy(data["cells"][index])
    pasted["id"] = "pasted-copy"
    data["cells"].insert(index + 1, pasted)
    return _text(data)


def deleted_test() -> str:
    data = answered()
    del data["cells"][_index(data, "sdpa_hidden")]
    return _text(data)


def cells_reordered() -> str:
    data = answered()
    cells = data["cells"]
    cells[5], cells[6] = cells[6], cells[5]
    answer = cells.pop(_index(data, ANSWER_ID))
    cells.insert(_index(data, "sqrt_dk_question"), answer)  # the answer above its question
    return _text(data)


def ids_regenerated() -> str:
    data = answered()
    for cell in data["cells"]:
        cell["id"] = uuid.uuid4().hex[:8]
    return _text(data)


def checksums_corrupted() -> str:
    data = answered()
    for cell in data["cells"]:
        if "nbgrader" in cell["metadata"]:
            cell["metadata"]["nbgrader"]["checksum"] = "0" * 32
    return _text(data)


def old_nbformat_v3() -> str:
    notebook = nbformat.reads(_text(answered()), as_version=4)
    return nbformat.writes(nbformat.convert(notebook, 3), version=3)


def truncated_after_answer() -> str:
    data = answered()
    text = _text(data)
    after = json.dumps(data["cells"][_index(data, ANSWER_ID) + 1], indent=1)[:40]
    cut = text.index(after.splitlines()[0], text.index(ANSWER)) + 30  # inside the next cell
    return text[:cut]


def truncated_before_answer() -> str:
    data = answered()
    text = _text(data)
    return text[:text.index('"sqrt_dk_question"')]


def truncated_in_the_exercises() -> str:
    """Cut inside the last hidden-test cell: the cells after it, the answer among them, are lost."""
    text = _text(answered())
    return text[:text.index('"sdpa_hidden"')]


def rewritten_by_a_front_end() -> str:
    """Keys in another order, every source one string, no outputs or execution counts."""
    data = answered()
    cells = []
    for cell in data["cells"]:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
        cells.append({key: cell[key] for key in sorted(cell, reverse=True)})
    return json.dumps({"nbformat_minor": data["nbformat_minor"], "nbformat": 4, "metadata": data["metadata"],
                       "cells": cells})


def answer_moved() -> str:
    data = answered()
    data["cells"].insert(2, data["cells"].pop(_index(data, ANSWER_ID)))
    return _text(data)


def answer_moved_and_metadata_dropped() -> str:
    data = answered()
    answer = data["cells"].pop(_index(data, ANSWER_ID))
    answer["metadata"].pop("nbgrader")
    data["cells"].insert(2, answer)
    return _text(data)


def answer_split_and_metadata_dropped() -> str:
    """The answer written over two cells where the answer cell was, neither with metadata."""
    data = answered()
    index = _index(data, ANSWER_ID)
    data["cells"][index]["metadata"].pop("nbgrader")
    data["cells"][index]["source"] = "First: " + ANSWER
    data["cells"].insert(index + 1, nbformat.v4.new_markdown_cell("Second: and a note."))
    return _text(data)


def answer_deleted() -> str:
    data = answered()
    del data["cells"][_index(data, ANSWER_ID)]
    return _text(data)


def unanswered_and_metadata_dropped() -> str:
    data = json.loads(nbformat.writes(released()))
    for cell in data["cells"]:
        cell["metadata"].pop("nbgrader", None)
    return _text(data)


@dataclass
class Damage:
    make: Callable[[], str]
    recovered: list[str]  # recover's notes, exactly
    tampering: list[str]  # tampering's notes on what recover leaves, exactly
    answer: str = ANSWER  # what the answer cell then holds


KINDS = {
    "metadata dropped from all cells": Damage(metadata_dropped_everywhere, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer recovered by its position between the same neighbours"], []),
    "answer cell's metadata dropped": Damage(answer_metadata_dropped, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer recovered by its position between the same neighbours"], []),
    "test cell's grade id renamed": Damage(grade_id_renamed, [], [
        'cell "my_softmax_check" is not a graded cell of the released notebook; it was kept as an ordinary cell, '
        "worth no points", "cell softmax_visible was deleted; the trusted checks scored the library for it"]),
    "test cell duplicated": Damage(duplicated_test, [], [
        "cell sdpa_visible appears 2 times; copy 2 of 2 was graded, the others were kept as ordinary cells"]),
    "test cell deleted": Damage(deleted_test, [], [
        "cell sdpa_hidden was deleted; the trusted checks scored the library for it"]),
    "cells reordered": Damage(cells_reordered, [], []),
    "cell ids regenerated": Damage(ids_regenerated, [], []),
    "checksums corrupted": Damage(checksums_corrupted, [], []),
    "old nbformat (v3)": Damage(old_nbformat_v3, [], []),
    "truncated after the answer": Damage(truncated_after_answer, [
        "rebuilt from the released notebook: the file is cut short or is not valid JSON; 44 complete cells "
        "could be read", "written answer sqrt_dk_answer recovered by its grade id"], []),
    "truncated before the answer": Damage(truncated_before_answer, [
        "rebuilt from the released notebook: the file is cut short or is not valid JSON; 42 complete cells "
        "could be read", "written answer sqrt_dk_answer could not be recovered; it was graded as released (blank)"],
        [], answer=STUB),
    "truncated in the exercises": Damage(truncated_in_the_exercises, [
        "rebuilt from the released notebook: the file is cut short or is not valid JSON; 21 complete cells "
        "could be read", "written answer sqrt_dk_answer could not be recovered; it was graded as released (blank)",
        "graded cell sdpa_hidden was not in the submission; put back as released"], [], answer=STUB),
    "rewritten by a front end": Damage(rewritten_by_a_front_end, [
        "rebuilt from the released notebook: it does not follow the notebook format ('outputs' is a required "
        "property)", "written answer sqrt_dk_answer recovered by its grade id"], []),
    "written answer moved": Damage(answer_moved, [], []),
    "written answer moved, its metadata dropped": Damage(answer_moved_and_metadata_dropped, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer recovered by its content (the one markdown cell the released "
        "notebook does not have)"], []),
    "written answer over two cells, metadata dropped": Damage(answer_split_and_metadata_dropped, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer recovered by its position between the same neighbours "
        "(2 cells there, joined)"], [], answer="First: " + ANSWER + "\n\nSecond: and a note."),
    "written answer deleted": Damage(answer_deleted, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer could not be recovered; it was graded as released (blank)"],
        [], answer=STUB),
    "unanswered, metadata dropped": Damage(unanswered_and_metadata_dropped, [
        REBUILT_NO_ID, "written answer sqrt_dk_answer was not answered"], [], answer=STUB),
}


def graded_as(text: str) -> tuple[list[str], list[str], nbformat.NotebookNode]:
    """What the grader does before nbgrader runs: recover, then tampering's check; the notes of each
    and the notebook nbgrader then grades."""
    original = released()
    recovery = recover.recover(original, text)
    notebook = recovery.notebook or nbformat.reads(text, as_version=4)
    return recovery.notes, tampering.restore(original, notebook, trusted_ids=set(TESTS)), notebook


def _cell(notebook, grade_id: str):
    found = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(found) == 1, f"{grade_id} appears {len(found)} times"
    return found[0]


def test_the_corpus_is_large_enough():
    assert len(KINDS) >= 12


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_damage_kind_keeps_the_written_answer_with_exactly_its_notes(kind):
    damage = KINDS[kind]
    recovered, tampered, notebook = graded_as(damage.make())
    assert recovered == damage.recovered
    assert tampered == damage.tampering
    assert _cell(notebook, ANSWER_ID).source == damage.answer
    nbformat.validate(notebook)
    original = released()
    for grade_id in TESTS:  # what nbgrader grades: every graded cell once, as released
        if any(grade_id in note and "deleted" in note for note in tampered):
            continue
        wanted = _cell(original, grade_id)
        assert _cell(notebook, grade_id).source == wanted.source
        assert _cell(notebook, grade_id).metadata["nbgrader"] == wanted.metadata["nbgrader"]
    notice = [c for c in notebook.cells if c.cell_type == "markdown" and c.source.startswith(recover.NOTICE)]
    if recovered:  # the instructor (formgrader) and the learner (feedback) see why, first thing
        assert notebook.cells[0] is notice[0] and all(f"- {note}" in notice[0].source for note in recovered)
    else:
        assert notice == []


def test_a_learners_own_cells_are_kept_where_they_were():
    data = answered()
    index = _index(data, ANSWER_ID)
    data["cells"].insert(10, nbformat.v4.new_code_cell("print('my experiment')"))
    data["cells"][12]["source"] = "# my edit of an ordinary cell"  # an unlocked cell of the lesson
    for cell in data["cells"]:
        cell["metadata"].pop("nbgrader", None)
    recovery = recover.recover(released(), _text(data))
    sources = [c.source for c in recovery.notebook.cells]
    assert sources.index("print('my experiment')") == 11  # after the notice, where it was
    assert "# my edit of an ordinary cell" in sources
    assert _cell(recovery.notebook, ANSWER_ID).source == ANSWER
    assert index  # the answer was not the cell moved


def test_two_answers_missing_between_the_same_neighbours_are_not_guessed():
    """Which of two loose cells answers which question is a guess: neither is carried over, and the
    notes say so (the cells stay in the notebook, as ordinary cells, for the instructor to read)."""
    def answer(grade_id):
        return new_markdown_cell("YOUR ANSWER HERE", metadata={"nbgrader": {
            "grade": True, "solution": True, "locked": False, "points": 1, "grade_id": grade_id,
            "schema_version": 3}})

    original = nbformat.v4.new_notebook(cells=[new_markdown_cell("Question one and two"), answer("a1"),
                                               answer("a2"), new_markdown_cell("The end")])
    submitted = copy.deepcopy(original)
    for cell, text in zip(submitted.cells[1:3], ("First answer", "Second answer")):
        cell.source = text
        del cell.metadata["nbgrader"]
    recovery = recover.recover(original, nbformat.writes(submitted))
    assert recovery.notes == [
        "rebuilt from the released notebook: no cell carries the grade id of written answers a1, a2",
        "written answer a1 could not be recovered; it was graded as released (blank)",
        "written answer a2 could not be recovered; it was graded as released (blank)"]
    assert [c.source for c in recovery.notebook.cells[1:]] == [
        "Question one and two", "YOUR ANSWER HERE", "YOUR ANSWER HERE", "First answer", "Second answer", "The end"]


def test_nothing_readable_is_left_to_tampering():
    """Text with no complete cell (or no JSON object at all) is not rebuilt: the grader reports the
    notebook as not notebook JSON, as before."""
    for text in ('{"cells": [ this is not json', "", "[1, 2]", '{"cells": "no"}'):
        assert recover.recover(released(), text) == recover.Recovery()


def test_complete_cells_reads_up_to_the_cut():
    text = '{"metadata": {}, "cells": [{"cell_type": "code", "source": "a"}, {"cell_type": "mark'
    assert recover.complete_cells(text) == [{"cell_type": "code", "source": "a"}]
    assert recover.complete_cells('{"cells": []}') == []
    assert recover.complete_cells('{"nothing": 1}') == []


def test_the_submission_folder_is_rebuilt_and_named_in_each_note(tmp_path):
    source, release, submitted = (tmp_path / name for name in ("source", "release", "submitted"))
    for folder in (source, release, submitted):
        folder.mkdir()
    for folder in (source, release):
        (folder / NOTEBOOK).write_bytes(RELEASED.read_bytes())
    (submitted / NOTEBOOK).write_text(metadata_dropped_everywhere())
    notes = recover.recover_submission(source, release, submitted)
    assert notes == [f"{NOTEBOOK}: {note}" for note in KINDS["metadata dropped from all cells"].recovered]
    assert _cell(nbformat.read(submitted / NOTEBOOK, as_version=4), ANSWER_ID).source == ANSWER
    (submitted / NOTEBOOK).write_text(ids_regenerated())
    before = (submitted / NOTEBOOK).read_text()
    assert recover.recover_submission(source, release, submitted) == []
    assert (submitted / NOTEBOOK).read_text() == before  # a notebook needing nothing is not rewritten
