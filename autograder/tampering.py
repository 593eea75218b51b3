"""What a learner changed in the cells nbgrader grades: put back before grading, and said exactly.

nbgrader guards graded cells itself, but not every change, and not in words: it puts back the
source of a locked cell, its points, its type and its locked flag, saying only that a checksum
(which mixes source and metadata) changed; and it stops, grading nothing of the notebook, when a
graded cell's grade or solution flag was flipped or a graded cell appears twice (a cell copied and
pasted in JupyterLab keeps its grade id).

``restore`` compares each cell the released notebook gives a grade id to with the submitted
notebook, field by field (type, the grade, solution, locked and task flags, points, and the source
of a locked cell), writes the released value back wherever they differ, and returns one note per
change: "points of cell sdpa_visible changed from 2 to 100; the original points were used". The
grader runs it on its scratch copy of the submission before nbgrader sees it, so nbgrader always
grades the notebook, and every note is true by construction: the grader itself put the original
back. The learner's own work (the source of solution cells, other cells) is left as it is.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from autograder.trusted import quoted

FLAGS = ("grade", "solution", "locked", "task")  # nbgrader's flags; a learner may change none


def nbgrader_meta(cell) -> dict | None:
    """A cell's nbgrader metadata, or None where it has none or it is not a mapping (a learner's edit)."""
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else None


def _shown(value) -> str:
    """A metadata value as a note shows it (a learner's text quoted)."""
    if isinstance(value, bool) or value is None:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    return quoted(value, 40)


def _points(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _set_type(cell, cell_type: str) -> None:
    """Turn ``cell`` into a ``cell_type`` cell, keeping its source (as nbgrader's OverwriteCells does)."""
    cell.cell_type = cell_type
    if cell_type == "code":
        cell.pop("attachments", None)
        cell.outputs, cell.execution_count = [], None
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def kept_copy(cells, copies: list[int], original) -> int:
    """Which copy of a cell that appears more than once is graded: nbgrader's choice, the last,
    except that for a learner's answer (a solution cell) it is the last one with an answer in it."""
    if (nbgrader_meta(original) or {}).get("solution"):
        answered = [index for index in copies if cells[index].source != original.source]
        if answered:
            return answered[-1]
    return copies[-1]


def restore(released, submitted, trusted_ids: set[str] = frozenset(), instructor=None) -> list[str]:
    """Put the released version of every field a learner may not change back into ``submitted``
    (a notebook, changed in place); one note per change, in the released notebook's order.
    ``trusted_ids``: grade ids the trusted checks score (what the note on a deleted cell says).
    ``instructor``: the source notebook, whose version of a locked cell (a hidden-test cell's,
    with its hidden region) is no edit either: nbgrader puts that version back in any case."""
    originals = {meta["grade_id"]: cell for cell in released.cells
                 if (meta := nbgrader_meta(cell)) is not None and isinstance(meta.get("grade_id"), str)}
    sources = {meta["grade_id"]: cell.source for cell in (instructor.cells if instructor else [])
               if (meta := nbgrader_meta(cell)) is not None and isinstance(meta.get("grade_id"), str)}
    notes: list[str] = []
    copies: dict[str, list[int]] = {}
    for index, cell in enumerate(submitted.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        meta = nbgrader_meta(cell)
        grade_id = meta.get("grade_id") if meta is not None else None
        if isinstance(grade_id, str) and grade_id in originals:
            copies.setdefault(grade_id, []).append(index)
            continue
        if meta is None or any(meta.get(flag) for flag in FLAGS):
            name = f"cell {quoted(grade_id, 40)}" if grade_id is not None else f"cell {index + 1}"
            notes.append(f"{name} is not a graded cell of the released notebook; it was kept as an ordinary "
                         "cell, worth no points")
        del cell.metadata["nbgrader"]  # nbgrader would stop on it, or grade what was never released

    deleted: dict[str, list[str]] = {}
    for grade_id, original in originals.items():
        found = copies.get(grade_id, [])
        wanted = nbgrader_meta(original)
        if not found:
            if wanted.get("grade"):
                written = original.cell_type == "markdown" and wanted.get("solution")
                kind = "trusted" if grade_id in trusted_ids else "written" if written else "other"
                deleted.setdefault(kind, []).append(grade_id)
            continue
        keep = kept_copy(submitted.cells, found, original)
        if len(found) > 1:
            notes.append(f"cell {grade_id} appears {len(found)} times; copy {found.index(keep) + 1} of "
                         f"{len(found)} was graded, the others were kept as ordinary cells")
            for index in found:
                if index != keep:
                    del submitted.cells[index].metadata["nbgrader"]
        notes += _restore_cell(submitted.cells[keep], original, grade_id, sources.get(grade_id))

    outcomes = {"trusted": "the trusted checks scored the library for {them}",
                "written": "0 points unless graded by hand", "other": "0 points"}
    for kind, ids in deleted.items():
        many = len(ids) > 1
        subject = f"cells {', '.join(ids)} were" if many else f"cell {ids[0]} was"
        notes.append(f"{subject} deleted; " + outcomes[kind].format(them="them" if many else "it"))
    return notes


def _restore_cell(cell, original, grade_id: str, instructor_source: str | None = None) -> list[str]:
    """Put the released type, flags, points and (for a locked cell) source back into ``cell``."""
    notes = []
    wanted, have = nbgrader_meta(original), nbgrader_meta(cell)
    if cell.cell_type != original.cell_type:
        shown = cell.cell_type if cell.cell_type in ("code", "markdown", "raw") else _shown(cell.cell_type)
        notes.append(f"type of cell {grade_id} changed from {original.cell_type} to {shown}; the original type was used")
        _set_type(cell, original.cell_type)
    for flag in FLAGS:
        if bool(have.get(flag)) != bool(wanted.get(flag)):
            notes.append(f"{flag} flag of cell {grade_id} changed from {_shown(bool(wanted.get(flag)))} to "
                         f"{_shown(bool(have.get(flag)))}; the original flag was used")
    if wanted.get("grade") and _points(have.get("points")) != _points(wanted.get("points")):
        notes.append(f"points of cell {grade_id} changed from {_shown(wanted.get('points'))} to "
                     f"{_shown(have.get('points'))}; the original points were used")
    if wanted.get("locked") and not wanted.get("solution") and cell.source not in (original.source, instructor_source):
        notes.append(f"source of cell {grade_id} was edited; the original source was used")
        cell.source = original.source
    cell.metadata["nbgrader"] = copy.deepcopy(wanted)
    return notes


def restore_submission(source: Path, release: Path, submitted: Path, trusted_ids: set[str] = frozenset()) -> list[str]:
    """Check and restore every notebook of an assignment in ``submitted`` (the grader's scratch copy)
    against the released notebooks; notes, each naming its notebook. A notebook that is missing or
    is not notebook JSON is reported; one with nothing changed is not rewritten."""
    notes = []
    for notebook in sorted(source.glob("*.ipynb")):
        handed_in = submitted / notebook.name
        if not handed_in.is_file():
            notes.append(f"{notebook.name}: notebook missing from the submission (its cells scored 0)")
            continue
        try:
            submission = nbformat.read(handed_in, as_version=4)
        except Exception:  # noqa: BLE001 (any parse failure)
            notes.append(f"{notebook.name}: the notebook is not valid notebook JSON")
            continue
        if not (release / notebook.name).is_file():
            continue
        before = nbformat.writes(submission)
        changes = restore(nbformat.read(release / notebook.name, as_version=4), submission, trusted_ids,
                          nbformat.read(notebook, as_version=4))
        notes += [f"{notebook.name}: {change}" for change in changes]
        if nbformat.writes(submission) != before:
            nbformat.write(submission, handed_in)
    return notes
