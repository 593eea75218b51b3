"""The grading worker: calls a learner's library on inputs it is given, and returns the outputs.

It runs sandboxed (``autograder.sandbox``), in a folder holding the learner's modules of the lesson
being graded and the reference of every other exercise module. It reads one request from standard
input and answers on the file descriptor that was standard output when it started; everything the
learner's code prints goes to standard error. The answer is JSON lines, each written and flushed as
soon as it is known, so that a worker killed halfway still leaves the answers it gave:

- first ``{"import": "ok"}`` (or ``{"import": "error", "error": ...}``) once the learner's module
  is imported: the trusted side waits only a short while for this line, so a library whose import
  never finishes is found at once (``sandbox.Ready``);
- then one line per call, in order: ``{"id", "result", "arrays"}``.

Both directions are plain data, with arrays as an ``.npz`` archive in base64, loaded with
``allow_pickle=False``. The worker never sees expected outputs: the trusted side compares
(``autograder.trusted``).

A call is ``{"id", "recipe", "target", "args", "kwargs"}``. Recipes:

- ``call``: ``target(*args, **kwargs)``, a function of the module;
- ``module``: ``target(**init)`` (a class of the module), parameters set from arrays, then called
  with ``args``;
- ``grad``: ``target(*args, **kwargs)`` with the arguments listed in ``grad_args`` requiring
  gradients; the sum of each output times its cotangent array (``cotangents``, one per output, or
  None) is differentiated, and the gradients of those arguments are returned.

Other recipes live in ``autograder.recipes``. A call may name ``forbidden`` operators (name
prefixes, from ``attnlab.shortcuts.FORBIDDEN``, the table the visible checks read too): if the
learner's code calls one, the call's answer is ``{"status": "forbidden"}`` with a message saying
which (``attnlab.shortcuts.ForbiddenCalls``).

An argument is a JSON value or ``{"array": name, "as": "torch"|"numpy"}``.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import os
import sys
import traceback

import numpy as np

from attnlab.shortcuts import ForbiddenCalls

try:  # as part of the autograder package (trusted side), or beside this file (in the sandbox)
    from autograder import recipes as _recipes
except ImportError:  # pragma: no cover (exercised inside the sandbox)
    import recipes as _recipes


def encode_arrays(arrays: dict[str, np.ndarray]) -> str:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode()


def decode_arrays(text: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _to_numpy(value) -> np.ndarray:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy().copy()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (bool, int, float, np.generic)):
        return np.asarray(value)
    raise TypeError(f"returned a {type(value).__name__}, not a tensor, an array or a number")


def flatten(value, prefix: str, out: dict[str, np.ndarray]) -> object:
    """Store the arrays of ``value`` (tensor, array, number, or tuple/list of them) in ``out``;
    return its structure: a name, or a list of structures."""
    if isinstance(value, (tuple, list)):
        return [flatten(item, f"{prefix}.{index}", out) for index, item in enumerate(value)]
    out[prefix] = _to_numpy(value)
    return prefix


def _argument(spec, arrays):
    if isinstance(spec, dict) and "array" in spec:
        value = arrays[spec["array"]].copy()
        if spec.get("as", "torch") == "torch":
            import torch

            return torch.from_numpy(value)
        return value
    return spec


def _dtype_name(value) -> str:
    return str(getattr(value, "dtype", type(value).__name__)).replace("torch.", "")


def run_call(module, call: dict, arrays: dict[str, np.ndarray], out: dict[str, np.ndarray],
             police: bool = False) -> dict:
    """Make one call and store its outputs in ``out``. ``police``: fail the call if it uses a
    forbidden operator (the worker sets it; the trusted side, computing the reference's answer,
    does not)."""
    args = [_argument(spec, arrays) for spec in call.get("args", [])]
    kwargs = {key: _argument(spec, arrays) for key, spec in call.get("kwargs", {}).items()}
    watch = ForbiddenCalls(call.get("forbidden", ()) if police else ())
    with watch:
        result = _call(module, call, args, kwargs, arrays)
    if watch.seen:
        return {"status": "forbidden", "error": watch.message()}
    structure = flatten(result, f"{call['id']}:out", out)
    dtypes = {name: _dtype_name(value) for name, value in _named_outputs(result, f"{call['id']}:out")}
    after = {}
    for index, value in enumerate(args):  # inputs after the call, to detect changes in place
        if hasattr(value, "shape"):
            after[str(index)] = flatten(value, f"{call['id']}:arg{index}", out)
    return {"status": "ok", "structure": structure, "dtypes": dtypes, "args_after": after}


def _call(module, call: dict, args: list, kwargs: dict, arrays: dict[str, np.ndarray]):
    recipe = call["recipe"]
    if recipe not in ("call", "module", "grad"):
        custom = _recipes.RECIPES.get(recipe)
        if custom is None:
            raise ValueError(f"unknown recipe {recipe!r}")
        return custom(module, call, args, kwargs, arrays)
    target = getattr(module, call["target"], None)
    if target is None:
        raise AttributeError(f"attnlab.{module.__name__.split('.')[-1]} has no {call['target']}")
    if recipe == "module":
        import torch

        instance = target(**call.get("init", {}))
        with torch.no_grad():
            parameters = dict(instance.named_parameters())
            for name, array_name in call.get("parameters", {}).items():
                parameters[name].copy_(torch.from_numpy(arrays[array_name]))
        return instance(*args, **kwargs)
    if recipe == "grad":
        import torch

        wanted = [args[index].requires_grad_() for index in call["grad_args"]]
        outputs = target(*args, **kwargs)
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        loss = sum((output * torch.from_numpy(arrays[name])).sum()
                   for output, name in zip(outputs, call["cotangents"]) if name is not None)
        return tuple(torch.autograd.grad(loss, wanted))
    return target(*args, **kwargs)


def _named_outputs(value, prefix):
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _named_outputs(item, f"{prefix}.{index}")
    else:
        yield prefix, value


def _line(channel, record: dict) -> None:
    channel.write(json.dumps(record) + "\n")
    channel.flush()


def main() -> int:
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the learner's code prints must not reach the answer
    request = json.loads(sys.stdin.read())
    arrays = decode_arrays(request["arrays"])
    try:
        module = importlib.import_module(f"attnlab.{request['module']}")
    except BaseException as exc:  # noqa: BLE001 (a broken import is a result, not a crash)
        message = f"importing attnlab.{request['module']} failed: {type(exc).__name__}: {exc}"
        _line(answer, {"import": "error", "error": message})
        for call in request["calls"]:
            _line(answer, {"id": call["id"], "result": {"status": "error", "error": message}, "arrays": ""})
        return 0
    _line(answer, {"import": "ok"})
    for call in request["calls"]:
        out: dict[str, np.ndarray] = {}
        try:
            result = run_call(module, call, arrays, out, police=True)
        except BaseException as exc:  # noqa: BLE001 (SystemExit and KeyboardInterrupt included)
            tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            result, out = {"status": "error", "error": tail[:500]}, {}
        _line(answer, {"id": call["id"], "result": result, "arrays": encode_arrays(out) if out else ""})
    return 0


if __name__ == "__main__":
    sys.exit(main())
