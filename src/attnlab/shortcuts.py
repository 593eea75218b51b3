"""Shortcuts an exercise may not take, and the watcher that sees them taken.

Some exercises ask learners to write what PyTorch already has (a softmax, a layer norm, an unfold):
calling PyTorch's version would pass any comparison with it and prove nothing. ``FORBIDDEN`` is the
one table of those rules, by exercise (``"module.name"``); both sides of the course read it:

- the visible checks (``attnlab.checks``) wrap the learner's function or class with ``police`` and
  fail a case that calls a forbidden operator, with a message naming it;
- the trusted cases (``autograder/cases``) carry ``forbidden(exercise)``, and the grading worker
  watches the same operators with ``ForbiddenCalls``.

An entry is a tuple of operator name prefixes: aten operators (``"_softmax"`` matches
``aten._softmax``) and torch functions (the same prefix without its leading underscore matches
``torch.softmax``). Every Python alias of an operator (``torch.softmax``, ``F.softmax``,
``Tensor.softmax``, ``torch.ops.aten._softmax``) reaches the dispatcher as the same aten operator,
so the watcher sees them all.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any, Callable, Iterable

__all__ = ["FORBIDDEN", "ForbiddenCalls", "carried", "forbidden", "police"]

_SOFTMAX = ("_softmax", "_safe_softmax", "_log_softmax")
_FUSED_ATTENTION = ("scaled_dot_product_attention", "_scaled_dot_product", "_safe_softmax")

FORBIDDEN: dict[str, tuple[str, ...]] = {
    # lesson 02: the lesson is writing these two
    "attention.softmax": _SOFTMAX,
    "attention.scaled_dot_product_attention": _SOFTMAX + ("_scaled_dot_product", "scaled_dot_product"),
    # lesson 03: masked attention built on the learner's own attention, not PyTorch's fused kernel
    "masking.masked_attention": _FUSED_ATTENTION,
    # lesson 06: the norms are the exercise (group and instance norm of one group are layer norm too)
    "feedforward.LayerNorm": ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm",
                              "instance_norm", "batch_norm", "native_batch_norm"),
    "feedforward.RMSNorm": ("rms_norm", "_fused_rms_norm"),
    # lesson 08: cutting patches with reshape and permute is the exercise (the prose says so);
    # nn.Unfold / F.unfold reach aten.im2col, Tensor.unfold aten.unfold, and F.pixel_unshuffle
    # cuts the same patches in one call
    "cost.patchify": ("im2col", "unfold", "pixel_unshuffle"),
    # lesson 09: the online softmax is the exercise; the tiled attention is written, not borrowed
    # from PyTorch's fused kernels (on a CPU, aten._scaled_dot_product_flash_attention_for_cpu
    # returns the log-sum-exp too)
    "flash.online_softmax": _SOFTMAX + ("logsumexp",),
    "flash.flash_attention_torch": _FUSED_ATTENTION,
}

# What a forbidden operator is called where learners meet it.
_NAMES = {
    "_softmax": "softmax (torch.softmax, F.softmax or Tensor.softmax)",
    "_safe_softmax": "F.scaled_dot_product_attention (its masked softmax, aten._safe_softmax)",
    "_log_softmax": "log_softmax (torch.log_softmax or F.log_softmax)",
    "_scaled_dot_product": "F.scaled_dot_product_attention",
    "logsumexp": "torch.logsumexp (or Tensor.logsumexp)",
    "scaled_dot_product": "F.scaled_dot_product_attention",
    "scaled_dot_product_attention": "F.scaled_dot_product_attention",
    "layer_norm": "F.layer_norm (or nn.LayerNorm)",
    "native_layer_norm": "F.layer_norm (or nn.LayerNorm)",
    "rms_norm": "F.rms_norm (or nn.RMSNorm)",
    "_fused_rms_norm": "F.rms_norm (or nn.RMSNorm)",
    "group_norm": "F.group_norm (or nn.GroupNorm)",
    "native_group_norm": "F.group_norm (or nn.GroupNorm)",
    "instance_norm": "F.instance_norm (or nn.InstanceNorm1d)",
    "batch_norm": "F.batch_norm (or nn.BatchNorm1d)",
    "native_batch_norm": "F.batch_norm, F.instance_norm (or nn.BatchNorm1d, nn.InstanceNorm1d)",
    "im2col": "F.unfold, nn.Unfold or Tensor.unfold",  # one name: F.unfold is seen as both
    "unfold": "F.unfold, nn.Unfold or Tensor.unfold",
    "pixel_unshuffle": "F.pixel_unshuffle (or nn.PixelUnshuffle)",
}


def forbidden(exercise: str) -> tuple[str, ...]:
    """The operator prefixes ``exercise`` ("attention.softmax") may not call; () if none."""
    return FORBIDDEN.get(exercise, ())


# The watchers entered in this thread, innermost last: PyTorch's modes are per thread, so ``carried``
# needs them to watch a worker thread too.
_entered = threading.local()


def _watchers() -> list["ForbiddenCalls"]:
    if not hasattr(_entered, "stack"):
        _entered.stack = []
    return _entered.stack


class ForbiddenCalls:
    """A context that records calls of forbidden torch operators, by name prefix (see the module).

    It watches the thread that enters it (PyTorch's modes are per thread); work handed to other
    threads is watched when it is wrapped with ``carried``."""

    def __init__(self, prefixes: Iterable[str]):
        self.prefixes = tuple(prefixes)
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def _saw(self, name: str, functions: bool) -> None:
        for prefix in self.prefixes:
            wanted = prefix.lstrip("_") if functions else prefix
            if name.startswith(wanted):
                with self._lock:  # a worker thread of ``carried`` may report at the same time
                    if prefix not in self.seen:
                        self.seen.append(prefix)

    def __enter__(self):
        if not self.prefixes:
            return self
        _watchers().append(self)
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        watcher = self

        class Functions(TorchFunctionMode):  # torch.softmax, F.scaled_dot_product_attention, ...
            def __torch_function__(self, func, types, args=(), kwargs=None):
                watcher._saw(getattr(func, "__name__", ""), functions=True)
                return func(*args, **(kwargs or {}))

        class Operators(TorchDispatchMode):  # what every path reaches: aten._softmax, ...
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                watcher._saw(str(func).split(".", 1)[-1], functions=False)  # "aten._softmax.default"
                return func(*args, **(kwargs or {}))

        self.modes = [Operators(), Functions()]
        for mode in self.modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        for mode in reversed(getattr(self, "modes", [])):
            mode.__exit__(*exc)
        if self.prefixes:
            _watchers().remove(self)
        return False

    def names(self) -> str:
        """What the learner called, each function once (one call reaches several operators:
        F.scaled_dot_product_attention is both its own entry point and a masked softmax)."""
        named: dict[str, str] = {}
        for prefix in self.seen:
            text = _NAMES.get(prefix, prefix)
            named.setdefault(text.split(" (")[0], text)
        return ", ".join(named.values())

    def message(self) -> str:
        return (f"calls {self.names()}, which this exercise asks you to write yourself "
                "(the check compares with it, so using it proves nothing)")


def carried(fn: Callable) -> Callable:
    """``fn``, to be run in other threads (a pool's workers), watched by every ``ForbiddenCalls``
    active in this thread when ``carried`` is called: without it a forbidden call made in a worker
    thread would go unseen, since PyTorch's modes are per thread."""
    watchers = list(_watchers())
    if not watchers:
        return fn

    @functools.wraps(fn)
    def watched(*args, **kwargs):
        with contextlib.ExitStack() as stack:
            here = [stack.enter_context(ForbiddenCalls(w.prefixes)) for w in watchers]
            try:
                return fn(*args, **kwargs)
            finally:
                for outer, inner in zip(watchers, here):
                    for prefix in inner.seen:
                        outer._saw(prefix, functions=False)

    return watched


def police(target: Any, exercise: str) -> Any:
    """``target`` (a function or an ``nn.Module`` class) wrapped so that calling it, or calling
    an instance of it, raises ``AssertionError`` when it uses an operator ``FORBIDDEN[exercise]``
    lists. Without rules for ``exercise``, ``target`` itself."""
    prefixes = forbidden(exercise)
    if not prefixes:
        return target

    def watched(call: Callable, *args, **kwargs):
        with ForbiddenCalls(prefixes) as watch:
            result = call(*args, **kwargs)
        if watch.seen:
            raise AssertionError(
                f"your {exercise.split('.')[-1]} {watch.message()}")
        return result

    if inspect.isclass(target):
        # A subclass whose construction and forward are watched: what the grader watches too.
        class Policed(target):  # type: ignore[misc, valid-type]
            def __init__(self, *args, **kwargs):
                watched(super().__init__, *args, **kwargs)

            def forward(self, *args, **kwargs):
                return watched(super().forward, *args, **kwargs)

        Policed.__name__ = Policed.__qualname__ = target.__name__
        Policed.__module__ = target.__module__
        Policed.__doc__ = target.__doc__
        return Policed

    @functools.wraps(target)
    def policed(*args, **kwargs):
        return watched(target, *args, **kwargs)

    return policed
