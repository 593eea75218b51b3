"""Trusted scores: a lesson's autograded cells, scored outside the learner's kernel.

A fresh sandboxed worker (``autograder.worker``) imports the learner's modules of the lesson (every
other exercise module is the reference) and runs the lesson's cases (``autograder.cases``) on inputs
made here. The outputs come back as plain data and are compared here with the reference's outputs
on the same inputs: structure, shape, dtype, values (within a tolerance for the dtype), and inputs
left unchanged. A grade cell earns its points when every one of its cases passes, as nbgrader
scores a test cell.

Time is bounded, whatever the library does:

- the worker must finish importing the library within ``import_s`` (its first answer line); a
  library whose import hangs or spins is found once, and every function fails with a note saying
  the import did not finish, with no retry;
- answers stream back call by call, so a worker that is killed or ends halfway keeps the answers
  it gave; the call it was in names the function that hung or crashed, whose remaining cases fail
  with the reason, and one fresh worker runs the calls of the other functions that were left;
- nothing runs past the submission's deadline: cases left then fail with a note.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnlab import switch
from attnlab.lessons import Lesson, exercise_modules
from autograder import paths, sandbox, worker
from autograder.cases import Case


def quoted(text: str, limit: int = 100) -> str:
    """A learner's message as a note quotes it: one line, printable, short, in quotes."""
    flat = "".join(ch if ch.isprintable() else " " for ch in str(text)).strip()
    return json.dumps(flat[:limit] + ("…" if len(flat) > limit else ""), ensure_ascii=False)

RESPONSE_LIMIT = 64 * 1024 * 1024
TOLERANCE = {  # (rtol, atol) by dtype name
    "float16": (2e-2, 2e-3), "bfloat16": (3e-2, 3e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12),
}


@dataclass
class CellResult:
    """The trusted verdict on one grade cell."""

    grade_id: str
    passed: bool
    cases: int
    failure: str = ""  # the first failing case and why


@dataclass
class TrustedResult:
    cells: dict[str, CellResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _cases_module(lesson: Lesson):
    return importlib.import_module(f"autograder.cases.lesson{lesson.number}")


def load_cases(lesson: Lesson) -> list[Case]:
    return _cases_module(lesson).cases()


def worker_env(lesson: Lesson) -> dict[str, str]:
    """Environment a lesson's worker needs (``WORKER_ENV`` of its cases module), e.g. Triton's
    interpreter on a machine without a GPU."""
    return dict(getattr(_cases_module(lesson), "WORKER_ENV", {}))


def has_cases(lesson: Lesson) -> bool:
    return (paths.ROOT / "autograder" / "cases" / f"lesson{lesson.number}.py").is_file()


def _call_spec(case: Case, index: int) -> dict:
    return {"id": f"c{index}", "recipe": case.recipe, "target": case.target, "args": case.args,
            "kwargs": case.kwargs, "init": case.init, "parameters": case.parameters,
            "grad_args": case.grad_args, "cotangents": case.cotangents, "options": case.options,
            "forbidden": list(case.forbidden)}


def _prefixed(case: Case, index: int) -> tuple[dict, dict]:
    """The call spec and arrays of ``case`` with array names made unique across a request."""
    rename = {name: f"c{index}_{name}" for name in case.arrays}

    def fix(spec):
        if isinstance(spec, dict) and "array" in spec:
            return {**spec, "array": rename[spec["array"]]}
        if isinstance(spec, dict):
            return {key: fix(value) for key, value in spec.items()}
        if isinstance(spec, list):
            return [fix(value) for value in spec]
        return spec

    call = _call_spec(case, index)
    call["args"] = [fix(a) for a in case.args]
    call["kwargs"] = {k: fix(v) for k, v in case.kwargs.items()}
    call["options"] = fix(case.options)  # array references inside a recipe's options too
    call["parameters"] = {k: rename[v] for k, v in case.parameters.items()}
    call["cotangents"] = [None if c is None else rename[c] for c in case.cotangents]
    return call, {rename[name]: value for name, value in case.arrays.items()}


_REFERENCE_LOCK = threading.Lock()  # submissions are graded in threads; the switch is per process


def reference_module(lesson: Lesson):
    """The reference of the lesson's module, loaded in this (trusted) process, in the same
    environment as the worker's (set before the import: Triton reads it when kernels are defined)."""
    with _REFERENCE_LOCK:
        for key, value in worker_env(lesson).items():
            os.environ.setdefault(key, value)
        if switch.source_of(lesson.modules[0]) != "reference":
            switch.use_reference("all", quiet=True)
        return importlib.import_module(f"attnlab.{lesson.modules[0]}")


# The reference's answers are computed in this process, in the grading threads. Recipes seed and
# read torch's global random generator (lesson 01's module_initialisation), which threads share: two
# submissions computing them at once drew each other's numbers, and an honest learner lost a
# lesson-01 case in a class graded with --jobs 2. One submission's reference calls at a time.
_EXPECTED_LOCK = threading.Lock()


def _expected(module, call: dict, arrays: dict) -> dict:
    out: dict[str, np.ndarray] = {}
    result = worker.run_call(module, call, arrays, out)
    result["arrays"] = out
    return result


def expected_results(module, prepared: list[tuple[dict, dict]]) -> list[dict]:
    """The reference ``module``'s answer to each prepared (call, arrays) pair, in order; computed
    under ``_EXPECTED_LOCK``."""
    with _EXPECTED_LOCK:
        return [_expected(module, call, arrays) for call, arrays in prepared]


def _compare(call: dict, expected: dict, got: dict, got_arrays: dict, arrays: dict) -> str:
    """Why ``got`` is wrong ("" when it is right)."""
    if got.get("status") == "forbidden":
        return got.get("error", "called a function this exercise must not use")
    if got.get("status") != "ok":
        error = got.get("error", "no answer")
        return f"raised {quoted(error)}" if got.get("status") == "error" and "error" in got else error
    if got.get("structure") != expected["structure"]:
        return f"returned {_shape_of(got['structure'])}, expected {_shape_of(expected['structure'])}"
    for name, want_dtype in expected["dtypes"].items():
        have, want = got_arrays.get(name), expected["arrays"][name]
        if have is None:
            return f"output {name} missing"
        if got["dtypes"].get(name) != want_dtype:
            return f"output has dtype {got['dtypes'].get(name)}, expected {want_dtype}"
        if have.shape != want.shape:
            return f"output has shape {have.shape}, expected {want.shape}"
        rtol, atol = TOLERANCE.get(want_dtype, (1e-6, 1e-8))
        if have.dtype.kind == "b" or want.dtype.kind == "b":
            if not np.array_equal(have, want):
                return "boolean output differs"
        elif not np.allclose(have, want, rtol=rtol, atol=atol, equal_nan=True):
            yours, ref = have.astype(np.float64), want.astype(np.float64)
            stray = np.isnan(yours) & ~np.isnan(ref)
            if stray.any():
                return f"nan in the output where the reference has numbers ({int(stray.sum())} of {yours.size} entries)"
            error = np.nanmax(np.abs(yours - ref)) if yours.size else 0.0
            return f"values differ from the reference (largest difference {error:.3g})"
    for index, spec in enumerate(call["args"]):
        if isinstance(spec, dict) and "array" in spec:
            after = got_arrays.get(f"{call['id']}:arg{index}")
            if after is not None and not np.array_equal(after, arrays[spec["array"]], equal_nan=True):
                return f"argument {index} was modified in place"
    return ""


def _shape_of(structure) -> str:
    return f"a tuple of {len(structure)}" if isinstance(structure, list) else "a single value"


def _worker_folder(folder: Path, lesson: Lesson, library: dict[str, bytes]) -> None:
    """The worker's folder: the learner's modules of the lesson, the reference of the others."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for module in exercise_modules():
        target = folder / f"{module}.py"
        if module in lesson.modules:
            if module in library:
                target.write_bytes(library[module])
        else:
            shutil.copy(switch.reference_path(module), target)


IMPORT_SECONDS = 60.0  # how long a worker may take to import the library (torch included)


def score(lesson: Lesson, library: dict[str, bytes], scratch: Path, limits: sandbox.Limits,
          env: dict[str, str], deadline: float | None = None, import_s: float = IMPORT_SECONDS) -> TrustedResult:
    """Trusted verdicts on every autograded cell of ``lesson`` for the learner's ``library``
    (module name -> source bytes; a missing module scores 0).

    env: the workers' whole environment (an allowlist, see ``autograder.grade.sandboxed_env``).
    deadline: ``time.monotonic()`` value after which no worker starts, and no worker runs past;
    the cases left are failed with a note.
    import_s: seconds a worker may take to import the library before it is killed.
    """
    reference = reference_module(lesson)
    result = TrustedResult()
    cases = load_cases(lesson)
    missing = [m for m in lesson.modules if m not in library]
    if missing:
        result.notes.append("library missing from the submission: " + ", ".join(f"{m}.py" for m in missing))
    prepared = {index: _prefixed(case, index) for index, case in enumerate(cases)}
    got: dict[int, tuple[dict, dict]] = {}  # index -> (answer, arrays) of every call answered
    failed: dict[int, str] = {}  # index -> why a call has no answer
    pending = list(range(len(cases)))
    attempt = 0
    while pending:
        clipped = _clipped(limits, deadline)
        if clipped is None:
            _fail(pending, "not run: the submission's grading time was used up", cases, failed, result)
            break
        attempt += 1
        answered, imported, problem, returncode = _ask_worker(
            lesson, library, [prepared[i] for i in pending], scratch / f"worker-{attempt}", clipped, env, import_s)
        for index in pending:
            if prepared[index][0]["id"] in answered:
                got[index] = answered[prepared[index][0]["id"]]
        pending = [index for index in pending if index not in got]
        if not imported:  # the library never finished importing: what is left fails, no retry
            if attempt == 1:
                for index in pending:
                    failed[index] = problem
                result.notes.append(f"{problem}; every trusted check of the library failed")
            else:
                _fail(pending, problem, cases, failed, result)
            break
        if pending:  # the worker stopped inside the first call it did not answer
            culprit = cases[pending[0]].target
            why = problem or (f"the worker ended (exit {returncode}) without answering: the library exited, "
                              "crashed or wrote over the answer channel")
            _fail([i for i in pending if cases[i].target == culprit], why, cases, failed, result)
            pending = [i for i in pending if cases[i].target != culprit]
    failures: dict[str, str] = {}
    expected_all = expected_results(reference, list(prepared.values()))  # in the cases' order
    for index, case in enumerate(cases):
        call, arrays = prepared[index]
        expected = expected_all[index]
        answer, answer_arrays = got.get(index, ({"status": "none", "error": failed.get(index, "no answer")}, {}))
        why = _compare(call, expected, answer, answer_arrays, arrays)
        if why and case.grade_id not in failures:
            failures[case.grade_id] = f"{case.target} ({case.label or call['id']}): {why}"
    for case in cases:
        cell = result.cells.setdefault(case.grade_id, CellResult(case.grade_id, True, 0))
        cell.cases += 1
        if case.grade_id in failures:
            cell.passed, cell.failure = False, failures[case.grade_id]
    return result


def _fail(indices: list[int], why: str, cases: list[Case], failed: dict[int, str], result: TrustedResult) -> None:
    """Record ``why`` for the calls ``indices``, and one note per function among them."""
    for index in indices:
        failed[index] = why
    for target in dict.fromkeys(cases[index].target for index in indices):
        note = f"{target}: {why}"
        if note not in result.notes:
            result.notes.append(note)


def _clipped(limits: sandbox.Limits, deadline: float | None) -> sandbox.Limits | None:
    """``limits`` with a wall clock that ends by ``deadline`` (None when no time is left)."""
    if deadline is None:
        return limits
    left = deadline - time.monotonic()
    if left < 5:
        return None
    return dataclasses.replace(limits, wall_s=min(limits.wall_s, left))


# The worker's code, visible inside the sandbox (the cases are not: they stay on this side).
WORKER_FILES = {f"/sandbox/grader/{name}": str(Path(__file__).with_name(name)) for name in ("worker.py", "recipes.py")}


def _ask_worker(lesson, library, prepared, folder: Path, limits, env, import_s: float):
    """Run one sandboxed worker on ``prepared`` calls ((call, arrays) pairs, in order);
    (answers by call id as (answer, arrays), whether the library finished importing, problem or "",
    the worker's exit status)."""
    _worker_folder(folder, lesson, library)
    arrays = {name: value for _, named in prepared for name, value in named.items()}
    request = json.dumps({"module": lesson.modules[0], "calls": [call for call, _ in prepared],
                          "arrays": worker.encode_arrays(arrays)})
    answer_path, log_path = folder.parent / f"{folder.name}.answer", folder.parent / f"{folder.name}.log"
    module = f"attnlab.{lesson.modules[0]}"
    try:
        with answer_path.open("wb") as answer:
            outcome = sandbox.run(
                [sys.executable, "/sandbox/grader/worker.py"],
                sandbox.Config(workdir=str(folder), env=env, readonly=WORKER_FILES, limits=limits),
                stdin=request.encode(), stdout=answer, log=log_path,
                ready=sandbox.Ready(min(import_s, limits.wall_s), lambda: _first_line_written(answer_path)),
            )
        imported, answers = _read_answers(answer_path)
    finally:
        answer_path.unlink(missing_ok=True)
    if outcome.not_ready:
        return answers, False, f"importing {module} did not finish within {min(import_s, limits.wall_s):g} s (killed)", None
    if not imported:
        why = outcome.reason or f"exit {outcome.returncode}"
        return answers, False, f"the worker ended before importing {module} finished ({why})", outcome.returncode
    return answers, True, outcome.reason, outcome.returncode


def _first_line_written(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return b"\n" in handle.read(4096)
    except OSError:
        return False


def _read_answers(path: Path) -> tuple[bool, dict[str, tuple[dict, dict]]]:
    """(whether the import line came, answers by call id) from a worker's answer file: every
    complete, well-formed line up to ``RESPONSE_LIMIT`` bytes; the first that is not ends the
    reading (a worker killed mid-line, or a library that wrote over the channel)."""
    imported, answers = False, {}
    try:
        with path.open("rb") as handle:
            text = handle.read(RESPONSE_LIMIT)
    except OSError:
        return imported, answers
    for number, line in enumerate(text.split(b"\n")[:-1]):  # the part after the last newline is cut
        try:
            record = json.loads(line)
            if number == 0:
                imported = record.get("import") in ("ok", "error")
                continue
            answers[str(record["id"])] = (dict(record["result"]),
                                          worker.decode_arrays(record["arrays"]) if record["arrays"] else {})
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            break
    return imported, answers
