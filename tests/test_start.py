"""``attnlab.start_lesson``, every lesson's set-up cell: a half-done course is a normal state.

The modules a lesson builds on (``Lesson.builds_on``) are exactly those its code and notebook use;
unwritten ones are stood in for by the reference at once (one line switches back) and progress
still checks the learner's own code; a written module whose check fails stops the set-up cell with
a message naming its module and lesson; a second run prints no autoreload notice.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys

import nbformat
import pytest

from attnlab.lessons import LESSONS, exercise_modules, owner
from autograder import paths

MODULES = set(exercise_modules())


def _used(tree: ast.AST) -> set[str]:
    """Modules of attnlab that ``tree`` names: imports, ``attnlab.x``, ``import_module("attnlab.x")``
    and the lazy ``_Library("x")`` handles of the exercise modules."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if node.module == "attnlab":
                found |= {alias.name for alias in node.names}
            elif parts[0] == "attnlab":
                found.add(".".join(parts[1:]))
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("attnlab.")}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "attnlab":
            found.add(node.attr)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name, value = getattr(node.func, "attr", getattr(node.func, "id", "")), node.args[0].value
            if name == "import_module" and isinstance(value, str) and value.startswith("attnlab."):
                found.add(value[len("attnlab."):])
            elif name == "_Library" and isinstance(value, str):
                found.add(value)
    return {name for name in found if name}


def _source(name: str) -> str | None:
    if name in MODULES:
        return (paths.REFERENCE_MODULES / f"{name}.py").read_text()
    for path in (paths.LIBRARY / f"{name.replace('.', '/')}.py", paths.LIBRARY / name.replace(".", "/") / "__init__.py"):
        if path.is_file():
            return path.read_text()
    return None


def used_modules(lesson) -> set[str]:
    """Exercise modules the lesson's own modules and its notebook use, through any support module."""
    notebook = nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, as_version=4)
    code = "\n".join(line for cell in notebook.cells if cell.cell_type == "code"
                     for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
    todo, seen = list(set(lesson.modules) | _used(ast.parse(code))), set()
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] in ("checks", "plots"):  # checks and plots take what they are given
            continue
        seen.add(name)
        text = _source(name)
        todo += list(_used(ast.parse(text))) if text else []
    return seen & MODULES


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_builds_on_lists_exactly_the_earlier_modules_a_lesson_uses(lesson):
    earlier = {m for m in used_modules(lesson) if owner(m).number < lesson.number}
    assert set(lesson.builds_on) == earlier, (lesson.number, sorted(earlier))
    assert list(lesson.builds_on) == sorted(lesson.builds_on, key=lambda m: (owner(m).number, m))


@pytest.mark.parametrize("lesson", [lesson for lesson in LESSONS if lesson.modules], ids=lambda lesson: lesson.slug)
def test_every_set_up_cell_starts_its_lesson(lesson):
    for folder in (paths.SOLUTION_NOTEBOOKS, paths.NOTEBOOKS):
        code = [c.source for c in nbformat.read(folder / lesson.notebook, as_version=4).cells if c.cell_type == "code"]
        setup = next(c for c in code if "import attnlab" in c)
        assert f'attnlab.start_lesson("{lesson.number}")' in setup, f"{folder.name}/{lesson.notebook}"
        assert "%load_ext autoreload" not in setup, "start_lesson loads autoreload quietly"


def test_blank_learner_in_lesson_07_gets_every_earlier_module_stood_in_for(python):
    done = python("import attnlab\nattnlab.start_lesson('07')\nprint(attnlab.progress('04'))\n"
                  "print([attnlab.source_of(m) for m in ('attention', 'stacks')])")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Not written yet, so the course's reference stands in for them:" in out
    for module in ("additive", "attention", "masking", "multihead", "positions", "feedforward"):
        assert f"attnlab.{module} (lesson {owner(module).number}):" in out, out
    assert "attnlab.use_own('additive', 'attention', 'masking', 'multihead', 'positions', 'feedforward')" in out
    assert "not written yet (lesson 07 ran on the reference)" in out
    assert "['reference', 'yours']" in out


def test_a_written_module_that_fails_its_check_stops_the_set_up(python, tmp_path):
    reference = (paths.REFERENCE_MODULES / "attention.py").read_text()
    (tmp_path / "attention.py").write_text(
        reference.replace("shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x"))
    done = python("import attnlab\nattnlab.start_lesson('03')", cwd=tmp_path)
    assert done.returncode != 0
    assert "StartFailed: lesson 03 builds on your attnlab.attention of lesson 02" in done.stderr, done.stderr
    assert "softmax" in done.stderr and "attnlab.use_reference('attention')" in done.stderr


def test_written_modules_pass_and_a_borrowed_one_is_named(python, tmp_path):
    for module in ("attention", "masking"):
        shutil.copy(paths.REFERENCE_MODULES / f"{module}.py", tmp_path / f"{module}.py")
    done = python("import attnlab\nattnlab.use_reference('masking', quiet=True)\nattnlab.start_lesson('04')",
                  cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "It builds on your attnlab.attention (lesson 02): their checks pass." in done.stdout
    assert "Borrowed by you (the course's reference): attnlab.masking (lesson 03)." in done.stdout


def test_running_the_set_up_cell_twice_prints_no_autoreload_notice(tmp_path):
    script = tmp_path / "twice.ipy"
    script.write_text("import attnlab\nattnlab.start_lesson('02')\nattnlab.start_lesson('02')\n")
    done = subprocess.run([sys.executable, "-m", "IPython", "--no-banner", str(script)], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Lesson 02: you write attnlab.attention") == 2, done.stdout
    assert "already loaded" not in done.stdout + done.stderr


def test_a_lessons_own_module_in_progress_is_not_blamed_on_an_earlier_lesson(python, tmp_path):
    """Lesson 04's rotary cases run lesson 05's apply_rope (checks.common.WAITS_FOR). In lesson
    05, whose apply_rope the learner is still getting right (here: pairing the wrong halves), the
    set-up cell does not stop on lesson 04's multihead for it: it checks multihead with the
    reference's apply_rope. (That lesson 07 names positions, not multihead, for the same mistake:
    tests/test_mistakes_carried_forward.py.)"""
    from tests.mutation_table import MUTATIONS
    from tests.parity import mutated_source

    for module in ("attention", "masking", "multihead"):
        shutil.copy(paths.REFERENCE_MODULES / f"{module}.py", tmp_path / f"{module}.py")
    rope = next(m for m in MUTATIONS if m.id == "05-apply_rope-layouts swapped")
    (tmp_path / "positions.py").write_text(mutated_source(rope))
    done = python("import attnlab\nattnlab.start_lesson('05')\nprint(attnlab.source_of('positions'))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("It builds on your attnlab.attention (lesson 02), attnlab.masking (lesson 03), attnlab.multihead "
            "(lesson 04): their checks pass.") in done.stdout, done.stdout
    assert done.stdout.strip().endswith("assignment"), "the learner's own positions.py is back in use"


def test_checking_written_modules_leaves_the_random_numbers_as_borrowing_does(python, tmp_path):
    """The set-up cell checks the modules a learner wrote (the checks build modules, which draws
    random numbers) and not those borrowed: either way the lesson then starts from the same random
    numbers, so a learner who wrote everything gets the results the lesson states."""
    earlier = ["additive", "attention", "masking", "multihead", "positions"]
    for module in earlier:
        shutil.copy(paths.REFERENCE_MODULES / f"{module}.py", tmp_path / f"{module}.py")
    code = ("import torch, random, numpy, attnlab\n{borrow}"
            "torch.manual_seed(0); random.seed(0); numpy.random.seed(0)\n"
            "attnlab.start_lesson('06')\n"
            "print('DRAWN', torch.rand(1).item(), random.random(), numpy.random.rand())\n")
    drawn, said = {}, {}
    for name, borrow in (("written", ""), ("borrowed", f"attnlab.use_reference(*{earlier!r}, quiet=True)\n")):
        done = python(code.format(borrow=borrow), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        said[name] = done.stdout
        drawn[name] = next(line for line in done.stdout.splitlines() if line.startswith("DRAWN"))
    assert "their checks pass" in said["written"] and "their checks pass" not in said["borrowed"], said
    assert drawn["written"] == drawn["borrowed"], drawn
