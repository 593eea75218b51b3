"""Damaged notebooks keep the learner's written work: rebuilt from the released notebook before grading.

``autograder.tampering`` puts back every graded cell a learner changed, but it can only keep an
answer it finds by its grade id. A notebook whose nbgrader metadata was dropped (by a front end, or
by copying cells into a new notebook), or a file cut short while it was saved, leaves the written
answers in cells nbgrader does not know, or in no readable cell at all: formgrader then shows the
instructor nothing to hand-grade.

``recover`` rebuilds such a notebook from the pristine released notebook (``release/<assignment>/``,
the same one ``tampering`` compares with) and carries the learner's cells over:

1. by grade id, where a cell still carries one;
2. by content: a cell whose type and text are the released cell's (a locked cell, an instruction, an
   unanswered stub) is that cell (``difflib``'s longest matching blocks, so order changes are found);
3. by position: an answer cell not found so far is the cell (or the cells) of its type that sit
   between the same neighbours as in the released notebook;
4. by content again: the one cell of its type anywhere whose text the released notebook does not have.

Graded test cells and locked cells come back as released; a learner's own extra cells are kept, as
ordinary cells, where they were. A file that is not valid JSON (cut short) gives up its readable part:
every complete cell object of its ``cells`` list (``json.JSONDecoder.raw_decode``). Each notebook
rebuilt gets notes (what was recovered and how, what could not be), and a first markdown cell that
tells the instructor in formgrader and the learner on the feedback page that it was rebuilt and why.

A notebook whose answers all carry their grade ids is not touched here, whatever else changed:
``tampering`` deals with it and says so in its own words.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_raw_cell
from nbformat.v4.convert import upgrade_cell

from autograder.tampering import kept_copy, nbgrader_meta

NOTICE = "**The grader rebuilt this notebook from the released one.**"  # the first line of the notice cell


@dataclass
class Recovery:
    """What ``recover`` did to one notebook: ``notebook`` is None when nothing needed rebuilding."""

    notebook: nbformat.NotebookNode | None = None
    notes: list[str] = field(default_factory=list)


# --- reading what can be read ---------------------------------------------------------------------

_CELLS = re.compile(r'"cells"\s*:\s*\[')
_VERSION = re.compile(r'"nbformat"\s*:\s*(\d+)')


def complete_cells(text: str) -> list[dict]:
    """Every complete cell object at the start of the first ``"cells"`` list of a notebook's text
    (the readable part of a file cut short), in order; [] when there is none."""
    found = _CELLS.search(text)
    if not found:
        return []
    decoder, cells, at = json.JSONDecoder(), [], found.end()
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return cells
        try:
            cell, at = decoder.raw_decode(text, at)
        except ValueError:  # the cell the file was cut in
            return cells
        if not isinstance(cell, dict):
            return cells
        cells.append(cell)


def _v4_cell(cell: dict, version: int) -> nbformat.NotebookNode | None:
    """A cell as nbformat 4 would hold it (type, text and metadata only: enough to match and carry
    it over); None for something that is not a cell."""
    if not isinstance(cell, dict):
        return None
    cell = copy.deepcopy(cell)
    if version < 4 or "input" in cell or cell.get("cell_type") == "heading":
        cell.setdefault("metadata", {})
        try:
            cell = upgrade_cell(nbformat.from_dict(cell))  # nbformat's own v3 -> v4 conversion
        except Exception:  # noqa: BLE001 (a v3 cell too broken to convert: not a cell)
            return None
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(str(line) for line in source)
    metadata = cell.get("metadata")
    if cell.get("cell_type") not in ("code", "markdown", "raw") or not isinstance(source, str):
        return None
    return nbformat.from_dict({"cell_type": cell["cell_type"], "source": source,
                               "metadata": metadata if isinstance(metadata, dict) else {}})


def read(text: str) -> tuple[list[nbformat.NotebookNode] | None, str]:
    """The cells of a submitted notebook's text, and why it must be rebuilt whatever its cells hold
    ("" when it is a valid notebook); (None, "") when nothing of it can be read."""
    try:
        data = json.loads(text)
    except ValueError:
        version = _VERSION.search(text)
        cells = [c for c in (_v4_cell(c, int(version.group(1)) if version else 4) for c in complete_cells(text)) if c]
        if not cells:
            return None, ""
        return cells, f"the file is cut short or is not valid JSON; {len(cells)} complete cells could be read"
    if not isinstance(data, dict):
        return None, ""
    try:
        notebook = nbformat.reads(text, as_version=4)
        nbformat.validate(notebook)
        return [_v4_cell(c, 4) for c in notebook.cells], ""
    except Exception as error:  # noqa: BLE001 (any schema or conversion failure: rebuild it)
        version = data.get("nbformat") if isinstance(data.get("nbformat"), int) else 4
        raw = data.get("cells")
        sheets = data.get("worksheets")
        if raw is None and isinstance(sheets, list) and sheets and isinstance(sheets[0], dict):
            raw = sheets[0].get("cells")  # nbformat 3 keeps its cells in worksheets
        cells = [c for c in (_v4_cell(c, version) for c in (raw if isinstance(raw, list) else [])) if c]
        if not cells:
            return None, ""
        what = getattr(error, "message", None) or type(error).__name__
        return cells, f"it does not follow the notebook format ({str(what).splitlines()[0][:80]})"


# --- matching the learner's cells to the released ones --------------------------------------------

def _grade_id(cell) -> str | None:
    meta = nbgrader_meta(cell)
    grade_id = meta.get("grade_id") if meta else None
    return grade_id if isinstance(grade_id, str) else None


def _is_answer(cell) -> bool:
    return bool((nbgrader_meta(cell) or {}).get("solution"))


def _key(cell) -> tuple[str, str]:
    return cell.cell_type, cell.source.strip()


def _match(released: list, submitted: list) -> tuple[dict[int, list[int]], dict[int, str]]:
    """Released cell index -> the submitted cells that are it, and how each answer was found."""
    matched: dict[int, list[int]] = {}
    how: dict[int, str] = {}
    used: set[int] = set()
    copies: dict[str, list[int]] = {}
    for index, cell in enumerate(submitted):
        if (grade_id := _grade_id(cell)) is not None:
            copies.setdefault(grade_id, []).append(index)
    for r, cell in enumerate(released):  # 1. by grade id (nbgrader's choice of copy, as tampering's)
        found = copies.get(_grade_id(cell) or "", [])
        if found:
            keep = kept_copy(submitted, found, cell)
            matched[r], how[r] = [keep], "by its grade id"
            used.update(found)
    # 2. by content: the longest runs of cells with the released type and text, in order
    blocks = difflib.SequenceMatcher(None, [_key(c) for c in released], [_key(c) for c in submitted],
                                     autojunk=False).get_matching_blocks()
    for block in blocks:
        for step in range(block.size):
            r, s = block.a + step, block.b + step
            if r not in matched and s not in used:
                matched[r], how[r] = [s], "as released"
                used.add(s)
    released_texts = {_key(c) for c in released}

    def span(r: int) -> tuple[int, int]:
        """The submitted cells around released cell ``r``: those its matched neighbours are."""
        before = next((matched[p][0] for p in range(r - 1, -1, -1) if p in matched), -1)
        after = next((matched[n][0] for n in range(r + 1, len(released)) if n in matched), len(submitted))
        return before, after

    pending = [r for r, cell in enumerate(released) if r not in matched and _is_answer(cell)]
    spans = {r: span(r) for r in pending}
    for r in pending:  # 3. by position: the one answer missing between two neighbours
        if [spans[o] for o in pending].count(spans[r]) > 1:
            continue  # several answers missing there: which cell is which is a guess
        before, after = spans[r]
        gap = [s for s in range(before + 1, after) if s not in used
               and submitted[s].cell_type == released[r].cell_type and _key(submitted[s]) not in released_texts]
        if gap:
            matched[r] = gap
            how[r] = "by its position between the same neighbours" + (
                f" ({len(gap)} cells there, joined)" if len(gap) > 1 else "")
            used.update(gap)
    for r, cell in enumerate(released):  # 4. the one changed cell of its type anywhere
        if r in matched or not _is_answer(cell):
            continue
        loose = [s for s in range(len(submitted)) if s not in used and submitted[s].cell_type == cell.cell_type
                 and submitted[s].source.strip() and _key(submitted[s]) not in released_texts]
        if len(loose) == 1:
            matched[r] = loose
            how[r] = f"by its content (the one {cell.cell_type} cell the released notebook does not have)"
            used.update(loose)
    return matched, how


# --- rebuilding -----------------------------------------------------------------------------------

def needs_rebuilding(released, cells: list) -> list[str]:
    """Grade ids of the released answer cells that no submitted cell carries (their answers would
    not reach the gradebook)."""
    present = {_grade_id(cell) for cell in cells}
    return [grade_id for cell in released.cells if _is_answer(cell)
            and (grade_id := _grade_id(cell)) is not None and grade_id not in present]


def rebuild(released, submitted: list) -> tuple[nbformat.NotebookNode, list[str]]:
    """The released notebook with the learner's cells carried over; one note per answer cell."""
    notebook = copy.deepcopy(released)
    matched, how = _match(released.cells, submitted)
    notes: list[str] = []
    carried = {s for found in matched.values() for s in found}
    cells, placed = [], 0
    for r, cell in enumerate(released.cells):
        found = matched.get(r, [])
        while found and placed < min(found):  # the learner's own cells before this one, kept in place
            if placed not in carried:
                cells.append(_ordinary(submitted[placed]))
            placed += 1
        placed = max([placed, *[s + 1 for s in found]])
        new = copy.deepcopy(cell)
        grade_id = _grade_id(cell)
        locked = (nbgrader_meta(cell) or {}).get("locked") and not _is_answer(cell)
        if found and not locked:  # an answer, or an ordinary cell the learner may edit
            new.source = "\n\n".join(submitted[s].source for s in found)
        if _is_answer(cell):
            if not found:
                notes.append(f"written answer {grade_id} could not be recovered; it was graded as released "
                             "(blank)")
            elif new.source.strip() == cell.source.strip():
                notes.append(f"written answer {grade_id} was not answered")
            else:
                notes.append(f"written answer {grade_id} recovered {how[r]}")
        cells.append(new)
    cells += [_ordinary(submitted[s]) for s in range(placed, len(submitted)) if s not in carried]
    notebook.cells = cells
    lost = [_grade_id(cell) for r, cell in enumerate(released.cells)
            if r not in matched and (nbgrader_meta(cell) or {}).get("grade") and not _is_answer(cell)]
    if lost:
        many = len(lost) > 1
        notes.append(f"graded cell{'s' if many else ''} {', '.join(lost)} {'were' if many else 'was'} not in the "
                     "submission; put back as released")
    return notebook, notes


def _ordinary(cell) -> nbformat.NotebookNode:
    """A learner's own cell, kept as an ordinary cell: its text only (nbgrader metadata would make
    nbgrader grade it; a front end's other metadata may not follow the schema; nbgrader clears
    outputs anyway)."""
    make = {"code": new_code_cell, "markdown": new_markdown_cell, "raw": new_raw_cell}[cell.cell_type]
    return make(cell.source)


def recover(released, text: str) -> Recovery:
    """Rebuild a submitted notebook (its file's ``text``) from ``released`` if its written answers
    would otherwise be lost: the file is not a valid notebook (cut short, not JSON, against the
    schema) but cells can be read from it, or an answer cell has lost its grade id."""
    cells, broken = read(text)
    if cells is None:
        return Recovery()  # nothing readable: tampering reports the notebook as not notebook JSON
    missing = needs_rebuilding(released, cells)
    if not broken and not missing:
        return Recovery()
    plural = "s" if len(missing) > 1 else ""
    why = broken or f"no cell carries the grade id of written answer{plural} " + ", ".join(missing)
    notebook, answers = rebuild(released, cells)
    notes = [f"rebuilt from the released notebook: {why}", *answers]
    notice = new_markdown_cell(NOTICE + "\n\n" + "\n".join(f"- {note}" for note in notes))
    notebook.cells.insert(0, notice)
    nbformat.validate(notebook)
    return Recovery(notebook, notes)


def recover_submission(source: Path, release: Path, submitted: Path) -> list[str]:
    """Rebuild, in the grader's scratch copy ``submitted``, every notebook of the assignment (those
    in ``source``) whose written answers would be lost; notes, each naming its notebook. A notebook
    that needs nothing is not rewritten."""
    notes = []
    for path in sorted(source.glob("*.ipynb")):
        handed_in, pristine = submitted / path.name, release / path.name
        if not (handed_in.is_file() and pristine.is_file()):
            continue  # tampering says that a notebook is missing
        recovery = recover(nbformat.read(pristine, as_version=4), handed_in.read_text(errors="replace"))
        if recovery.notebook is not None:
            nbformat.write(recovery.notebook, handed_in)
            notes += [f"{path.name}: {note}" for note in recovery.notes]
    return notes
