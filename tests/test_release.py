"""Generated files are in sync with solutions/, and nothing a learner receives holds a solution."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attnlab.lessons import LESSONS
from autograder import paths, release
from autograder.stubs import solution_regions

ROOT = paths.ROOT


def test_release_check_passes_on_the_committed_tree():
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "release", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def copy_of_course(tmp_path, monkeypatch):
    """The generated and source folders copied to tmp_path, with the tool pointed at them."""
    for name in ("solutions", "notebooks", "src"):
        shutil.copytree(ROOT / name, tmp_path / name)
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    monkeypatch.setattr(paths, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(paths, "SOLUTION_NOTEBOOKS", tmp_path / "solutions" / "notebooks")
    monkeypatch.setattr(paths, "REFERENCE_MODULES", tmp_path / "solutions" / "attnlab")
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(paths, "LIBRARY", tmp_path / "src" / "attnlab")
    assert release.differences() == []
    return tmp_path


def test_check_reports_a_hand_edited_notebook_and_release_repairs_it(copy_of_course, capsys):
    notebook = copy_of_course / "notebooks" / LESSONS[-1].notebook
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, notebook)
    assert release.release(check=True) == 1
    assert "out of date" in capsys.readouterr().out
    assert release.release() == 0
    assert release.differences() == []


def test_check_reports_an_edited_reference_missing_stub_and_orphan(copy_of_course):
    reference = copy_of_course / "solutions" / "attnlab" / "attention.py"
    reference.write_text(reference.read_text().replace("Lesson 02", "Lesson two"))
    (copy_of_course / "src" / "attnlab" / "attention.py").unlink()
    orphan = copy_of_course / "src" / "attnlab" / "gone.py"
    orphan.write_text("# Generated from solutions/attnlab/gone.py by `python -m autograder release`\n")
    problems = "\n".join(release.differences())
    assert "src/attnlab/attention.py: missing" in problems
    assert "src/attnlab/gone.py: generated, but its source is gone" in problems
    release.release()
    assert not orphan.exists() and release.differences() == []


# --- no solution text in anything a learner receives -------------------------------------------

def _secret_regions() -> list[list[str]]:
    """The stripped, non-empty lines of every solution region, hidden test and model answer in
    solutions/, one list per region."""
    regions: list[list[str]] = []
    for module in paths.REFERENCE_MODULES.glob("*.py"):
        lines = module.read_text().splitlines()
        for begin, end in solution_regions(module.read_text()):
            regions.append([line.strip() for line in lines[begin + 1 : end] if line.strip()])
    for notebook in paths.SOLUTION_NOTEBOOKS.glob("*.ipynb"):
        for cell in nbformat.read(notebook, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "markdown" and meta.get("solution"):
                regions.append([line.strip() for line in cell.source.splitlines() if line.strip()])
                continue
            current = None
            for line in cell.source.splitlines():
                if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                    current = []
                elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                    regions.append(current or [])
                    current = None
                elif current is not None and line.strip():
                    current.append(line.strip())
    return [region for region in regions if region]


def _signatures(min_length: int = 50) -> set[tuple[str, ...]]:
    """What counts as a leak: two consecutive lines of a region, or one long line of it. Single
    short lines ("if causal:", "return out, lse") also occur in honest public code."""
    found: set[tuple[str, ...]] = set()
    for region in _secret_regions():
        found.update(zip(region, region[1:]))
        found.update((line,) for line in region if len(line) >= min_length)
        if len(region) == 1 and len(region[0]) >= 20:
            found.add((region[0],))
    return found


def _leaks(folder: Path, signatures: set[tuple[str, ...]]) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".txt", ".json", ".html"):
            if path.suffix == ".ipynb":  # compare cell text, not JSON-escaped text
                text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            else:
                text = path.read_text(errors="replace")
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            present = set(zip(lines, lines[1:])) | {(line,) for line in lines}
            found += [f"{path}: {' / '.join(sig)}" for sig in signatures & present]
    return found


def test_the_scan_finds_secrets_where_they_are():
    signatures = _signatures()
    assert len(signatures) >= 20, "too few solution lines found: is the scan broken?"
    leaks = _leaks(paths.SOLUTIONS, signatures)
    assert len({leak.split(":")[0] for leak in leaks}) >= 3, "the scan must find the secrets in solutions/ itself"


def test_a_leaked_solution_body_would_be_found(tmp_path):
    region = next(r for r in _secret_regions() if len(r) >= 2)
    (tmp_path / "leaky.py").write_text("def f():\n    " + "\n    ".join(region) + "\n")
    assert _leaks(tmp_path, _signatures())


def test_no_solution_text_in_learner_notebooks_or_library():
    signatures = _signatures()
    assert _leaks(paths.NOTEBOOKS, signatures) == []
    assert _leaks(paths.LIBRARY, signatures) == []


def test_no_solution_text_in_an_nbgrader_release(built_course):
    secrets = _signatures()
    release_dir = built_course / "release"
    assert sorted(p.name for p in release_dir.iterdir()) == sorted(lesson.slug for lesson in LESSONS)
    assert _leaks(release_dir, secrets) == []


def test_quiz_answers_are_folded_away_in_learner_notebooks():
    for lesson in LESSONS:
        quiz_cells = [c for c in nbformat.read(paths.NOTEBOOKS / lesson.notebook, as_version=4).cells
                      if c.cell_type == "code" and "Quiz(" in c.source]
        assert quiz_cells, f"{lesson.notebook} has no quiz"
        assert all(c.metadata.get("jupyter", {}).get("source_hidden") for c in quiz_cells), lesson.notebook
