"""More ways for the grading worker to call a learner's library: recipes beyond the worker's own
``call``, ``module`` and ``grad`` (see ``autograder.worker``).

A recipe is a function ``name(module, call, args, kwargs, arrays) -> result`` registered in
``RECIPES`` under the name a ``Case`` gives as its ``recipe``. ``module`` is the learner's
exercise module (the lesson being graded), ``args``/``kwargs`` the case's arguments already turned
into tensors or arrays, ``arrays`` every input array by name; ``call`` is the whole call spec (its
``init``, ``parameters`` and any extra fields a case puts in ``options``). The result is what
``worker.flatten`` accepts: a tensor, an array, a number, or tuples and lists of them. It runs
inside the sandbox with the learner's code: it holds no expected answer, only a way of calling.

Lessons add their recipes under their own heading.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def build_module(module, call: dict, arrays: dict[str, np.ndarray]):
    """An instance of ``call["target"]`` built with ``call["init"]``, its parameters (and buffers)
    set from arrays by name, in evaluation mode."""
    import torch

    instance = getattr(module, call["target"])(**call.get("init", {}))
    state = dict(instance.named_parameters()) | dict(instance.named_buffers())
    with torch.no_grad():
        for name, array_name in call.get("parameters", {}).items():
            if name not in state:
                raise KeyError(f"{call['target']} has no parameter {name!r}; it has {sorted(state)}")
            state[name].copy_(torch.from_numpy(arrays[array_name]))
    return instance.eval()


# -- lesson 03 --
# -- lesson 04 --
# -- lesson 05 --
# -- lesson 06 --
# -- lesson 07 --
# -- lesson 08 --


RECIPES: dict[str, Callable[..., Any]] = {
    # "name": function,
}
