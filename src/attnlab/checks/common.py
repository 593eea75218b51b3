"""Shared pieces of the visible checks: generic assertions with diagnostic messages, the runner,
and trusted float64 references. Each lesson's checks (``attnlab.checks.<module>``) build on them.

1. generic assertions (``assert_close``, ``assert_shape``, ``assert_dtype``, ``assert_finite``,
   ``assert_rows_sum_to_one``, ``assert_zero_where``, ``assert_not_modified``,
   ``explain_mismatch``) and the runner ``run_checks``;
2. float64 references (``reference_softmax``, ``reference_attention``, ``causal_allowed``).
"""

from __future__ import annotations

import inspect
import math
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

Array = Any  # a torch.Tensor or a numpy array


# --------------------------------------------------------------------------------------------
# 1. Generic assertions
# --------------------------------------------------------------------------------------------


def _as_float64(x: Array) -> torch.Tensor:
    """A detached float64 CPU copy of a tensor, array or number (for comparisons only)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64)
    return torch.as_tensor(np.asarray(x), dtype=torch.float64)


def _shape(x: Array) -> tuple[int, ...]:
    return tuple(int(n) for n in np.shape(x)) if not isinstance(x, torch.Tensor) else tuple(x.shape)


def _num(x: float) -> str:
    """A number as learners read it: 3 significant digits."""
    return f"{float(x):.3g}"


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


def _join(message: str, hint: str) -> str:
    """``message``, then ``hint`` as a sentence of its own (if any)."""
    hint = hint.strip()
    if not hint:
        return message
    # Capitalise a word, never a name: "grad_lse", "New_hidden" stay as written.
    first = hint.split()[0]
    if first.isalpha() and first.islower():
        hint = hint[0].upper() + hint[1:]
    return f"{message}. {hint}"


def tolerances(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for comparing a result of ``dtype`` with a float64 reference.

    float64 results must agree to about 1e-10; float32 to about 1e-5; half precision to 1e-2.
    """
    name = str(dtype).replace("torch.", "")
    if name in ("float16", "bfloat16"):
        return 1e-2, 1e-2
    if name == "float32":
        return 1e-4, 1e-5
    return 1e-8, 1e-10


def assert_shape(actual: Array, expected: Sequence[int], *, what: str = "output",
                 meaning: str | None = None, hint: str = "") -> None:
    """``actual`` has shape ``expected``.

    meaning names the dimensions, as in ``"(..., n_q, d_v)"``; the message then reads
    "output has shape (2, 5, 4), expected (2, 5, 3) = (..., n_q, d_v)".
    """
    got, want = _shape(actual), tuple(int(n) for n in expected)
    if got != want:
        message = f"{what} has shape {got}, expected {want}"
        if meaning:
            message += f" = {meaning}"
        raise AssertionError(_join(message, hint))


def assert_dtype(actual: Array, expected: Any, *, what: str = "output", hint: str = "") -> None:
    """``actual`` has dtype ``expected`` (a torch or numpy dtype)."""
    got = actual.dtype
    if str(got).replace("torch.", "") != str(expected).replace("torch.", ""):
        raise AssertionError(_join(
            f"{what} has dtype {got}, expected {expected}",
            hint or "keep the dtype of the inputs (no .double(), no float64 constants that "
                    "upcast the result)"))


def assert_finite(actual: Array, *, what: str = "output", hint: str = "") -> None:
    """No entry of ``actual`` is nan or ±inf; the message names the first bad entry."""
    values = _as_float64(actual)
    bad = ~torch.isfinite(values)
    if bad.any():
        flat = int(torch.nonzero(bad.reshape(-1))[0])
        value = values.reshape(-1)[flat].item()
        raise AssertionError(_join(
            f"{what} contains {_num(value)} ({int(bad.sum())} of {bad.numel()} entries are nan "
            f"or inf; the first at index {_index(flat, tuple(values.shape))})", hint))


def assert_close(actual: Array, expected: Array, *, what: str = "output",
                 rtol: float | None = None, atol: float | None = None, hint: str = "") -> None:
    """``actual`` agrees with the reference ``expected`` entry by entry.

    Tolerances default to ``tolerances(actual.dtype)``. The message gives the largest error,
    where it is, both values there and the tolerance; ``hint`` is appended.
    """
    assert_shape(actual, _shape(expected), what=what)
    default_rtol, default_atol = tolerances(getattr(actual, "dtype", "float64"))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    a, e = _as_float64(actual), _as_float64(expected)
    both_nan = torch.isnan(a) & torch.isnan(e)
    same_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    error = (a - e).abs().masked_fill(both_nan | same_inf, 0.0).nan_to_num(nan=math.inf)
    excess = error - (atol + rtol * e.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0))
    if (excess > 0).any():
        flat = int(torch.argmax(excess.reshape(-1)))
        where = _index(flat, tuple(a.shape))
        yours, ref = a.reshape(-1)[flat].item(), e.reshape(-1)[flat].item()
        count = int((excess > 0).sum())
        raise AssertionError(_join(
            f"{what} and the reference disagree: largest error "
            f"{_num(error.reshape(-1)[flat])} at index {where} (yours {_num(yours)}, expected "
            f"{_num(ref)}); {count} of {a.numel()} entries are off by more than "
            f"{atol:g} + {rtol:g}·|expected|", hint))


def assert_nonnegative(weights: Array, *, what: str = "your weights", hint: str = "") -> None:
    """Every entry of ``weights`` is >= 0 (probabilities cannot be negative)."""
    values = _as_float64(weights)
    if (values < 0).any():
        flat = int(torch.argmin(values.reshape(-1)))
        raise AssertionError(_join(
            f"{what} has negative entries (smallest {_num(values.reshape(-1)[flat])} at index "
            f"{_index(flat, tuple(values.shape))}); weights from a softmax are never negative",
            hint))


def assert_rows_sum_to_one(weights: Array, *, dim: int = -1, what: str = "your weights",
                           axis: str = "the key axis", atol: float | None = None,
                           hint: str = "did you normalise over the wrong dimension?") -> None:
    """The entries of ``weights`` along ``dim`` sum to 1 (within ``atol``).

    The message reads "your weights do not sum to 1 along the key axis (dim=-1): row sums range
    from 0.3 to 2.1 — did you normalise over the wrong dimension?".
    """
    values = _as_float64(weights)
    atol = 10 * tolerances(getattr(weights, "dtype", "float64"))[1] if atol is None else atol
    sums = values.sum(dim=dim)
    if not torch.isfinite(sums).all() or ((sums - 1).abs() > atol).any():
        finite = sums[torch.isfinite(sums)]
        spread = (f"row sums range from {_num(finite.min())} to {_num(finite.max())}"
                  if finite.numel() else "every row sum is nan or inf")
        if 0 < finite.numel() < sums.numel():
            spread += f", and {sums.numel() - finite.numel()} row sums are nan or inf"
        raise AssertionError(
            f"{what} do not sum to 1 along {axis} (dim={dim}): {spread}"
            + (f" — {hint}" if hint else "")
        )


def assert_zero_where(weights: Array, where: Array, *, what: str = "your weights",
                      region: str = "where the mask is False", hint: str = "") -> None:
    """``weights`` is exactly 0 wherever the boolean ``where`` (broadcastable) is True."""
    values = _as_float64(weights)
    region_mask = torch.as_tensor(np.asarray(where) if not isinstance(where, torch.Tensor)
                                  else where, dtype=torch.bool).expand_as(values)
    leaked = values.abs().masked_fill(~region_mask, 0.0).nan_to_num(nan=math.inf)
    if (leaked != 0).any():
        flat = int(torch.argmax(leaked.reshape(-1)))
        raise AssertionError(_join(
            f"{what} are not exactly 0 {region}: {int((leaked != 0).sum())} of "
            f"{int(region_mask.sum())} such entries are nonzero (largest "
            f"{_num(values.reshape(-1)[flat])} at index {_index(flat, tuple(values.shape))})",
            hint))


def assert_pair(result: Any, *, what: str, names: str = "(out, weights)") -> tuple[Any, Any]:
    """``result`` is a pair, as in ``out, weights = fn(...)``; returns it."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__
        size = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        raise AssertionError(f"{what} must return a pair {names}, got a {kind}{size}")
    return result[0], result[1]


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (tuple, list)):  # *args, or a list of tensors
        copies = [_copy(item) for item in value]
        return copies if any(c is not None for c in copies) else None
    return None  # numbers, None, strings: nothing to modify


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, list):
        return len(before) == len(after) and all(b is None or _unchanged(b, a) for b, a in zip(before, after))
    if isinstance(before, torch.Tensor):
        return before.shape == after.shape and before.dtype == after.dtype and bool(
            torch.equal(before, after) or (before.is_floating_point() and torch.allclose(
                before, after, rtol=0, atol=0, equal_nan=True)))
    return before.shape == after.shape and before.dtype == after.dtype and bool(
        np.array_equal(before, after, equal_nan=before.dtype.kind in "fc"))


def assert_not_modified(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)``, fail if it changed any tensor or array argument in place.

    Returns what ``fn`` returned. The message names the argument by its parameter name.
    """
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
        named = dict(bound)
    except (TypeError, ValueError):
        named = {f"argument {i + 1}": a for i, a in enumerate(args)} | dict(kwargs)
    saved = {name: _copy(value) for name, value in named.items()}
    result = fn(*args, **kwargs)
    for name, before in saved.items():
        if before is not None and not _unchanged(before, named[name]):
            raise AssertionError(
                f"your function changed its input in place: {name} is different after the "
                "call. Build new tensors instead (x = x - m, not x -= m, x.sub_(m) or "
                "x[...] = ...); the caller still needs the original"
            )
    return result


def explain_mismatch(actual: Array, candidates: Mapping[str, Array],
                     rtol: float | None = None, atol: float | None = None) -> str:
    """The hint of the first candidate that ``actual`` matches, or "".

    ``candidates`` maps a hint ("you did not divide by sqrt(d)") to what a function with that
    mistake would return; a check uses it to turn "wrong numbers" into "this is why".
    """
    default_rtol, default_atol = tolerances(getattr(actual, "dtype", "float64"))
    rtol = default_rtol if rtol is None else rtol
    atol = 10 * default_atol if atol is None else atol
    a = _as_float64(actual)
    for hint, candidate in candidates.items():
        c = _as_float64(candidate)
        if a.shape == c.shape and torch.allclose(a, c, rtol=rtol, atol=atol, equal_nan=True):
            return hint
    return ""


class CheckFailed(AssertionError):
    """A visible check failed. IPython shows it in a few lines (``_render_traceback_``): which
    check and case, what is wrong, and the line of the learner's code that raised, if any; the
    checks' own frames stay out of sight. nbgrader still records the cell as failed."""

    def __init__(self, message: str, where: str = ""):
        super().__init__(message)
        self.where = where

    def _render_traceback_(self) -> list[str]:
        return short_traceback(type(self).__name__, str(self), self.where)


_RED, _RESET = "\x1b[0;31m", "\x1b[0m"
_CHECKS_DIR = Path(__file__).resolve().parent
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()


WRAP_COLUMNS = 100  # JupyterLab wraps longer lines anywhere, even mid-word ("a ttnlab.use_reference")


def wrapped(text: str, width: int = WRAP_COLUMNS, indent: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken between words only (names,
    paths and code stay whole); continuation lines are indented."""
    import textwrap

    lines = []
    for paragraph in text.splitlines() or [""]:
        lines += textwrap.wrap(paragraph, width=width, subsequent_indent=indent, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return lines


def short_traceback(name: str, message: str, where: str = "") -> list[str]:
    """The lines a learner sees for a failed check: the message first, wrapped between words, then
    where in their code."""
    first, *rest = wrapped(f"{name}: {message}")
    lines = [f"{_RED}{name}{_RESET}{first[len(name):]}", *rest]
    if where:
        lines.append(f"  raised in your code: {where}")
    return lines


def your_line(tb) -> str:
    """'attention.py, line 42, in softmax: return x / s' for the innermost frame of ``tb`` that is
    the learner's code (not the checks, not the standard library, not an installed package)."""
    from attnlab.lessons import exercise_modules

    for frame in reversed(traceback.extract_tb(tb)):
        path = Path(frame.filename).resolve()
        ours = path.stem in exercise_modules() and _CHECKS_DIR not in path.parents
        support = _CHECKS_DIR in path.parents or path.parent == _CHECKS_DIR.parent  # attnlab's own modules
        if not ours and (support or _STDLIB in path.parents or "site-packages" in path.parts):
            continue
        code = f": {frame.line.strip()}" if frame.line else ""
        return f"{path.name}, line {frame.lineno}, in {frame.name}{code}"
    return ""


class Waiting(Exception):
    """A case that cannot run yet: it needs an exercise of a later lesson that is not written.

    ``run_checks`` raises nothing for it: it prints the case as waiting, never counts it as passed,
    and the later lesson runs it again (``rerun_waiting``)."""

    def __init__(self, lesson: str, reason: str):
        super().__init__(reason)
        self.lesson, self.reason = lesson, reason


@dataclass
class CheckReport:
    """What the last run of a check found: cases passed, and cases waiting (description, lesson)."""

    name: str
    passed: int
    waiting: list[tuple[str, str]]

    def line(self) -> str:
        text = f"✓ {self.name}: {self.passed} checks passed"
        if self.waiting:
            lessons = sorted({lesson for _, lesson in self.waiting})
            cases = ", ".join(f"'{description}'" for description, _ in self.waiting)
            text += (f"; {len(self.waiting)} {'waits' if len(self.waiting) == 1 else 'wait'} for lesson "
                     f"{' and '.join(lessons)} ({cases}: not run, not counted; lesson "
                     f"{lessons[-1]} runs {'it' if len(self.waiting) == 1 else 'them'} again)")
        return text


LAST_REPORTS: dict[str, CheckReport] = {}  # check name -> its last report (attnlab.progress reads it)

# Checks with cases that wait for a later lesson, by that lesson: (exercise module, check function,
# names of the module's exercises it is given). ``rerun_waiting`` runs them in the later lesson;
# a test proves that no other check has a case that waits.
WAITS_FOR: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "05": (("multihead", "check_multi_head_attention", ("MultiHeadAttention",)),
           ("multihead", "check_kv_cache", ("KVCache", "MultiHeadAttention"))),
}


def rerun_waiting(lesson: str) -> list[CheckReport]:
    """Run again, on your own code, the checks of earlier lessons whose cases waited for
    ``lesson`` (say "05": lesson 04's rotary cases need lesson 05's ``apply_rope``). A module you
    borrowed is not yours to check; one the course stood in for (``attnlab.start_lesson``) is
    checked from your own file all the same."""
    import importlib

    from attnlab import switch

    checks = importlib.import_module("attnlab.checks")
    reports = []
    for module_name, check, names in WAITS_FOR.get(lesson, ()):
        if switch.source_of(module_name) == "reference" and switch.borrowed_for(module_name) is None:
            print(f"… {check} not run again: attnlab.{module_name} is the course's reference "
                  f"(you borrowed it)")
            continue
        try:
            module = (switch.load_own(module_name) if switch.source_of(module_name) == "reference"
                      else importlib.import_module(f"attnlab.{module_name}"))
            getattr(checks, check)(*(getattr(module, name) for name in names))
        except NotImplementedError as missing:  # the earlier lesson is not written yet either
            print(f"… {check} not run again: {str(missing).splitlines()[0]}")
            continue
        reports.append(list(LAST_REPORTS.values())[-1])  # run_checks stores the newest last
    return reports


def _lesson_of_caller(depth: int = 2) -> str | None:
    """The lesson number of the checks module that called ``run_checks`` (``checks.lesson04``)."""
    module = sys._getframe(depth).f_globals.get("__name__", "")
    tail = module.rsplit(".", 1)[-1]
    return tail[len("lesson"):] if tail.startswith("lesson") and tail[len("lesson"):].isdigit() else None


def later_lesson_not_written(error: NotImplementedError, lesson: str | None) -> str | None:
    """The number of the lesson whose unwritten exercise raised ``error``, if it comes after
    ``lesson`` (so the case waits for it); None if the stub belongs to ``lesson`` or earlier."""
    from attnlab.lessons import exercise_modules, owner

    if lesson is None:
        return None
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        stem = Path(frame.filename).stem
        if stem in exercise_modules() and _CHECKS_DIR not in Path(frame.filename).resolve().parents:
            later = owner(stem).number
            return later if later > lesson else None
    return None


def run_checks(name: str, cases: Sequence[tuple[str, Callable[[], None]]], *,
               lesson: str | None = None) -> CheckReport:
    """Run ``cases`` (description, function) in order; print one line if none fails.

    A failing case raises ``CheckFailed`` (an ``AssertionError``) naming the check and the case,
    shown in a few lines. A stub's ``NotImplementedError`` propagates unchanged but for the same
    short display, unless the stub belongs to a later lesson than the check's (``lesson``, by
    default read from the calling module's name, ``attnlab.checks.lessonNN``): that case, like one
    that raises ``Waiting``, waits. It is printed as waiting and not counted; it never passes.
    Any other error raised by the learner's code is reported as a failure of that case, with the
    line of their code that raised.
    """
    lesson = lesson or _lesson_of_caller()
    report = CheckReport(name, 0, [])
    for description, case in cases:
        try:
            case()
        except Waiting as waiting:
            report.waiting.append((description, waiting.lesson))
            continue
        except NotImplementedError as error:
            later = later_lesson_not_written(error, lesson)
            if later:
                report.waiting.append((description, later))
                continue
            lines = short_traceback("NotImplementedError", str(error), your_line(error.__traceback__))
            error._render_traceback_ = lambda: lines
            raise
        except AssertionError as error:
            raise CheckFailed(f"{name}, case '{description}': {error}", your_line(error.__traceback__)) from None
        except Exception as error:  # the learner's code crashed: say on which case, and where
            raise CheckFailed(
                f"{name}, case '{description}': your function raised {type(error).__name__}: {error}",
                your_line(error.__traceback__),
            ) from error
        report.passed += 1
    LAST_REPORTS.pop(name, None)
    LAST_REPORTS[name] = report
    print(report.line())
    return report


# --------------------------------------------------------------------------------------------
# 2. Trusted references (float64)
# --------------------------------------------------------------------------------------------


def reference_softmax(x: Array, dim: int = -1) -> torch.Tensor:
    """``torch.softmax`` of ``x`` in float64."""
    return torch.softmax(_as_float64(x), dim=dim)


def causal_allowed(n_q: int, n_k: int | None = None) -> torch.Tensor:
    """(n_q, n_k) boolean: True where query i may attend key j, i.e. j <= i + (n_k - n_q).

    Bottom-right aligned, like ``torch.nn.attention.bias.causal_lower_right``: the last query
    sees every key, so with n_q < n_k the queries are the last n_q positions of the sequence.
    """
    n_k = n_q if n_k is None else n_k
    return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)


def reference_attention(q: Array, k: Array, v: Array, mask: Array | None = None,
                        scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, weights) of scaled dot-product attention in float64.

    ``out`` comes from ``torch.nn.functional.scaled_dot_product_attention`` (boolean mask, True =
    may attend); ``weights`` from ``torch.softmax`` of the same scaled, masked scores. Leading
    dimensions broadcast. Every query must be allowed at least one key.
    """
    q, k, v = _as_float64(q), _as_float64(k), _as_float64(v)
    allowed = None if mask is None else torch.as_tensor(
        mask if isinstance(mask, torch.Tensor) else np.asarray(mask), dtype=torch.bool)
    lead = [t.shape[:-2] for t in (q, k, v)] + ([] if allowed is None else [allowed.shape[:-2]])
    common = torch.broadcast_shapes(*lead)  # the batch shape of the result
    q, k, v = (t.expand(*common, *t.shape[-2:]) for t in (q, k, v))
    factor = q.shape[-1] ** -0.5 if scale is None else float(scale)
    logits = torch.einsum("...qd,...kd->...qk", q, k) * factor
    if allowed is not None:
        allowed = allowed.expand(*common, *allowed.shape[-2:])
        logits = logits.masked_fill(~allowed, -math.inf)
    weights = torch.softmax(logits, dim=-1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=factor)
    return out, weights


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


