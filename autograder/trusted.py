"""Trusted scores: a lesson's autograded cells, scored outside the learner's kernel.

For each exercise function, a fresh sandboxed worker (``autograder.worker``) imports the learner's
modules of the lesson (every other exercise module is the reference) and runs the lesson's cases
(``autograder.cases``) on inputs made here. The outputs come back as plain data and are compared
here with the reference's outputs on the same inputs: structure, shape, dtype, values (within a
tolerance for the dtype), and inputs left unchanged. A grade cell earns its points when every one
of its cases passes, as nbgrader scores a test cell.
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


def _expected(module, call: dict, arrays: dict) -> dict:
    out: dict[str, np.ndarray] = {}
    result = worker.run_call(module, call, arrays, out)
    result["arrays"] = out
    return result


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


def score(lesson: Lesson, library: dict[str, bytes], scratch: Path, limits: sandbox.Limits,
          env: dict[str, str], deadline: float | None = None) -> TrustedResult:
    """Trusted verdicts on every autograded cell of ``lesson`` for the learner's ``library``
    (module name -> source bytes; a missing module scores 0).

    env: the workers' whole environment (an allowlist, see ``autograder.grade.sandboxed_env``).
    deadline: ``time.monotonic()`` value after which no worker starts, and no worker runs past;
    the cases left are failed with a note.
    """
    reference = reference_module(lesson)
    result = TrustedResult()
    cases = load_cases(lesson)
    missing = [m for m in lesson.modules if m not in library]
    if missing:
        result.notes.append("library missing from the submission: " + ", ".join(f"{m}.py" for m in missing))
    indexed = list(enumerate(cases))
    # One worker for every call first (each worker pays for importing torch); if it gives no
    # answer (the library looped, crashed or exited), one worker per function, so that one
    # broken function does not cost the points of the others.
    groups = {"all": indexed}
    answers, answer_arrays, calls_by_index, arrays, problem = _run_group(
        lesson, library, indexed, scratch / "all", _clipped(limits, deadline), env)
    retry = bool(problem)
    if retry:
        groups = {}
        for index, case in indexed:
            groups.setdefault(case.target, []).append((index, case))
    failures: dict[str, str] = {}
    for name, group in groups.items():
        if retry:
            clipped = _clipped(limits, deadline)
            if clipped is None:
                answers, answer_arrays, problem = {}, {}, "not run: the submission's grading time was used up"
                calls_by_index = {index: _prefixed(case, index)[0] for index, case in group}
                arrays = {k: v for index, case in group for k, v in _prefixed(case, index)[1].items()}
            else:
                answers, answer_arrays, calls_by_index, arrays, problem = _run_group(
                    lesson, library, group, scratch / name, clipped, env)
            if problem:
                result.notes.append(f"{name}: {problem}")
        for index, case in group:
            call = calls_by_index[index]
            expected = _expected(reference, call, arrays)
            got = answers.get(call["id"], {"status": "none", "error": problem or "no answer"})
            why = _compare(call, expected, got, answer_arrays, arrays)
            if why and case.grade_id not in failures:
                failures[case.grade_id] = f"{case.target} ({case.label or call['id']}): {why}"
    for case in cases:
        cell = result.cells.setdefault(case.grade_id, CellResult(case.grade_id, True, 0))
        cell.cases += 1
        if case.grade_id in failures:
            cell.passed, cell.failure = False, failures[case.grade_id]
    return result


def _clipped(limits: sandbox.Limits, deadline: float | None) -> sandbox.Limits | None:
    """``limits`` with a wall clock that ends by ``deadline`` (None when no time is left)."""
    if deadline is None:
        return limits
    left = deadline - time.monotonic()
    if left < 5:
        return None
    return dataclasses.replace(limits, wall_s=min(limits.wall_s, left))


def _run_group(lesson, library, group, folder, limits, env):
    """Ask one worker for the calls of ``group``; (answers, arrays out, calls by index, arrays in, problem)."""
    calls, arrays, by_index = [], {}, {}
    for index, case in group:
        call, named = _prefixed(case, index)
        calls.append(call)
        arrays.update(named)
        by_index[index] = call
    if limits is None:
        return {}, {}, by_index, arrays, "not run: the submission's grading time was used up"
    answers, answer_arrays, problem = _ask_worker(lesson, library, calls, arrays, folder, limits, env)
    return answers, answer_arrays, by_index, arrays, problem


# The worker's code, visible inside the sandbox (the cases are not: they stay on this side).
WORKER_FILES = {f"/sandbox/grader/{name}": str(Path(__file__).with_name(name)) for name in ("worker.py", "recipes.py")}


def _ask_worker(lesson, library, calls, arrays, folder: Path, limits, env):
    """Run one sandboxed worker; (answers by call id, arrays, problem or "")."""
    _worker_folder(folder, lesson, library)
    request = json.dumps({"module": lesson.modules[0], "calls": calls, "arrays": worker.encode_arrays(arrays)})
    answer_path, log_path = folder.parent / f"{folder.name}.answer", folder.parent / f"{folder.name}.log"
    with answer_path.open("wb") as answer:
        outcome = sandbox.run(
            [sys.executable, "/sandbox/grader/worker.py"],
            sandbox.Config(workdir=str(folder), env=env, readonly=WORKER_FILES, limits=limits),
            stdin=request.encode(), stdout=answer, log=log_path,
        )
    problem = outcome.reason
    try:
        if answer_path.stat().st_size > RESPONSE_LIMIT:
            raise ValueError("answer too large")
        data = json.loads(answer_path.read_text())
        return data["results"], worker.decode_arrays(data["arrays"]), problem
    except (ValueError, KeyError, TypeError, OSError) as exc:
        if not problem:
            code = outcome.returncode
            problem = (f"the worker ended (exit {code}) without a readable answer: the library exited, "
                       f"crashed or wrote over the answer channel ({type(exc).__name__})")
        return {}, {}, problem
    finally:
        answer_path.unlink(missing_ok=True)
