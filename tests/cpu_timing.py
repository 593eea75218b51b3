"""The CPU time of one drawing call, for the tests that hold an interactive figure to a speed bound."""

from __future__ import annotations

import gc
import time
from typing import Any, Callable


def cpu_seconds(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Run ``call(*args, **kwargs)``; return its result and the CPU seconds this process spent in it.

    CPU time, so other programs on the machine do not count. The garbage collector runs before the
    call and is paused during it: a collection walks the whole test process's heap (the facts and
    figures of every earlier test), which a learner's kernel does not hold; one landed inside a
    redraw in CI and took a second.
    """
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        result = call(*args, **kwargs)
        return result, time.process_time() - start
    finally:
        gc.enable()
