"""The CPU time of one drawing call, for the tests that hold an interactive figure to a speed bound."""

from __future__ import annotations

import gc
import time
from typing import Any, Callable


def cpu_seconds(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Run ``call(*args, **kwargs)``; return its result and the CPU seconds this thread spent in it.

    The CPU time of the calling thread, which draws the figure: other programs on the machine do
    not count, nor do threads that earlier tests left running in the test process. The garbage
    collector runs before the call and is paused during it: a collection walks the whole test
    process's heap (the facts and figures of every earlier test), which a learner's kernel does
    not hold. In one CI run a redraw measured this way with the process's CPU time took a second.
    """
    gc.collect()
    gc.disable()
    try:
        start = time.thread_time()
        result = call(*args, **kwargs)
        return result, time.thread_time() - start
    finally:
        gc.enable()
