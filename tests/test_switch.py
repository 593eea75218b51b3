"""The reference switch: stubs by default, the reference on request, with a notice; never silently."""

from __future__ import annotations

import textwrap

CALL_SOFTMAX = "import torch; from attnlab import attention; print(attention.softmax(torch.tensor([3.0, 1.0, 0.0])))"


def test_the_stub_raises_naming_lesson_function_and_how_to_borrow(python, tmp_path):
    done = python(CALL_SOFTMAX, cwd=tmp_path)
    assert done.returncode != 0
    assert "NotImplementedError" in done.stderr
    assert "Lesson 02: softmax()" in done.stderr
    assert "attnlab.use_reference('attention')" in done.stderr


def test_use_reference_borrows_and_says_so_and_use_own_goes_back(python, tmp_path):
    code = textwrap.dedent(
        """
        import attnlab, torch
        attnlab.use_reference("attention")
        from attnlab import attention
        print("source:", attnlab.source_of("attention"), attention.__file__)
        print(attention.softmax(torch.tensor([3.0, 1.0, 0.0])).tolist())
        attnlab.use_own("attention")
        print("source:", attnlab.source_of("attention"), attnlab.attention.__file__)
        """
    )
    done = python(code, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "course's reference implementation (lesson 02" in lines[0]
    assert lines[1].startswith("source: reference") and lines[1].endswith("solutions/attnlab/attention.py")
    weights = eval(lines[2])
    assert [round(w, 2) for w in weights] == [0.84, 0.11, 0.04]
    assert lines[3].startswith("source: yours") and lines[3].endswith("src/attnlab/attention.py")


def test_environment_variable_selects_every_reference(python, tmp_path):
    done = python(CALL_SOFTMAX, cwd=tmp_path, env={"ATTNLAB_REFERENCE": "all"})
    assert done.returncode == 0, done.stderr
    assert "reference implementation" in done.stdout


def test_unknown_module_names_are_refused_with_the_known_ones(python, tmp_path):
    done = python("import attnlab; attnlab.use_reference('atention')", cwd=tmp_path)
    assert done.returncode != 0
    assert "'atention'" in done.stderr and "attention" in done.stderr
    done = python("import attnlab", cwd=tmp_path, env={"ATTNLAB_REFERENCE": "nope"})
    assert "ATTNLAB_REFERENCE names ['nope']" in done.stderr


def test_a_module_being_graded_cannot_be_borrowed(python, tmp_path):
    done = python(
        "import attnlab; attnlab.use_reference('attention')", cwd=tmp_path, env={"ATTNLAB_NO_REFERENCE": "attention"}
    )
    assert done.returncode != 0
    assert "cannot be borrowed here: lesson 02 is being graded" in done.stderr


def test_a_missing_reference_folder_is_a_clear_error(python, tmp_path):
    done = python(
        "import attnlab; attnlab.use_reference('attention')",
        cwd=tmp_path,
        env={"ATTNLAB_REFERENCE_DIR": str(tmp_path / "nowhere")},
    )
    assert done.returncode != 0
    assert "no reference of attnlab.attention in this copy of the course" in done.stderr


def test_the_module_beside_the_notebook_wins_over_the_installed_one(python, tmp_path):
    (tmp_path / "attention.py").write_text("def softmax(x, dim=-1):\n    return 'assignment copy'\n")
    done = python("import attnlab; from attnlab import attention; print(attnlab.source_of('attention'), attention.softmax(0))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "assignment assignment copy"
