"""``python -m autograder release``: regenerate what learners get from the single source.

- ``notebooks/<lesson>.ipynb`` from ``solutions/notebooks/<lesson>.ipynb`` with nbgrader's own preprocessors,
  in the order ``nbgrader generate_assignment`` uses (less the database and header steps);
- ``src/attnlab/<module>.py`` from ``solutions/attnlab/<module>.py`` (see ``autograder.stubs``).

``release --check`` writes nothing: it exits 1 and prints what differs when a generated file is
out of date, missing, or has no source any more.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import nbformat
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    LockCells,
)

from attnlab.glossary import fill_boxes
from attnlab.lessons import LESSONS
from autograder import paths
from autograder.build import check_manifest
from autograder.stubs import stub_for

REGENERATE = "python -m autograder release"

# As in nbgrader's GenerateAssignment.preprocessors: checksums are taken again after the hidden
# tests are cleared, so nbgrader's validate and autograde accept the learner's notebook.
_PIPELINE = (
    LockCells,
    ClearSolutions,
    ClearOutput,
    CheckCellMetadata,
    ComputeChecksums,
    ClearHiddenTests,
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadata,
)


def learner_notebook(source: Path) -> str:
    """The learner's notebook (JSON text) made from the instructor's notebook ``source``."""
    nb = nbformat.read(source, as_version=4)
    fill_boxes(nb, source.name[:2])  # "Words in this lesson", from the course glossary
    resources: dict = {}
    for preprocessor in _PIPELINE:
        nb, resources = preprocessor().preprocess(nb, resources)
    nb.metadata["attnlab"] = {
        "generated_from": f"solutions/notebooks/{source.name}",
        "regenerate_with": REGENERATE,
    }
    return nbformat.writes(nb) + "\n"


def expected_files() -> dict[Path, str]:
    """Every generated file and the text it should have."""
    problems = check_manifest()
    if problems:
        raise SystemExit("The manifest and solutions/ disagree:\n  " + "\n  ".join(problems))
    files: dict[Path, str] = {}
    for lesson in LESSONS:
        files[paths.NOTEBOOKS / lesson.notebook] = learner_notebook(paths.SOLUTION_NOTEBOOKS / lesson.notebook)
    for reference in sorted(paths.REFERENCE_MODULES.glob("*.py")):
        files[paths.LIBRARY / reference.name] = stub_for(reference)
    return files


def _is_generated(path: Path) -> bool:
    """Whether ``path`` carries the generated-file mark (so a stale one can be found)."""
    if path.suffix == ".py":
        return path.read_text().startswith("# Generated from solutions/")
    return '"generated_from"' in path.read_text()


def stale_files() -> list[Path]:
    """Generated files on disk whose source is gone."""
    expected = set(expected_files())
    candidates = list(paths.NOTEBOOKS.glob("*.ipynb")) + list(paths.LIBRARY.glob("*.py"))
    return sorted(p for p in candidates if p not in expected and _is_generated(p))


def differences() -> list[str]:
    """Human-readable reasons why the generated files are out of date (empty when in sync)."""
    problems: list[str] = []
    for path, text in expected_files().items():
        rel = path.relative_to(paths.ROOT)
        if not path.exists():
            problems.append(f"{rel}: missing")
            continue
        current = path.read_text()
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"{rel} (on disk)", f"{rel} (regenerated)",
                lineterm="", n=1,
            )
            shown = list(diff)[:40]
            problems.append(f"{rel}: out of date\n" + "\n".join(shown))
    for path in stale_files():
        problems.append(f"{path.relative_to(paths.ROOT)}: generated, but its source is gone")
    return problems


def release(check: bool = False) -> int:
    """Regenerate (or, with ``check``, compare); returns the exit status."""
    if check:
        problems = differences()
        for problem in problems:
            print(problem)
        if problems:
            print(f"\n{len(problems)} generated file(s) out of date: run `{REGENERATE}` and commit.")
            return 1
        print("Generated notebooks and library stubs are up to date.")
        return 0
    for path, text in expected_files().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(paths.ROOT)}")
    for path in stale_files():
        path.unlink()
        print(f"removed {path.relative_to(paths.ROOT)} (its source is gone)")
    return 0
