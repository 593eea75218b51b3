"""Visible checks: run a learner's function on a few cases and say *what* is wrong, and where.

A check never compares with pasted numbers. It compares with trusted references (PyTorch's own
functions, computed in float64) and with invariants that any correct answer satisfies (weights are
non-negative and sum to 1, masked weights are exactly 0, inputs are left unchanged, the dtype is
kept). On failure it raises ``AssertionError`` whose message names the case, the problem and the
likely cause; on success it prints one line, such as ``✓ softmax: 9 checks passed``. A stub's
``NotImplementedError`` passes through unchanged: its message says which lesson to finish, or how to
borrow the reference.

Notebooks call ``checks.check_<function>(...)``; the package gathers:

- ``attnlab.checks.common``: generic assertions later lessons reuse and float64 references;
- one module per exercise module with that lesson's checks (``attnlab.checks.lesson02``: lesson 02).
"""


from attnlab.checks.lesson01 import *  # noqa: F401,F403
from attnlab.checks.lesson02 import *  # noqa: F401,F403
from attnlab.checks.lesson03 import *  # noqa: F401,F403
from attnlab.checks.lesson04 import *  # noqa: F401,F403
from attnlab.checks.lesson05 import *  # noqa: F401,F403
from attnlab.checks.lesson06 import *  # noqa: F401,F403
from attnlab.checks.lesson07 import *  # noqa: F401,F403
from attnlab.checks.lesson08 import *  # noqa: F401,F403
from attnlab.checks.lesson09 import *  # noqa: F401,F403
from attnlab.checks.common import *  # noqa: F401,F403
