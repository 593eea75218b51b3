"""Stubs are cut from reference modules with nbgrader's markers, and name the lesson."""

from __future__ import annotations

import pytest

from autograder.stubs import make_stub, solution_regions

REFERENCE = '''"""Module docstring."""


def kept(x):
    """Docstring stays."""
    check = x  # outside the region: stays
    ### BEGIN SOLUTION
    secret = x * 2
    return secret
    ### END SOLUTION


class Thing:
    def method(self):
        ### BEGIN SOLUTION
        return "hidden body"
        ### END SOLUTION
'''


def test_regions_become_not_implemented_errors_naming_the_lesson():
    stub = make_stub(REFERENCE, "attention")
    assert stub.startswith("# Generated from solutions/attnlab/attention.py")
    assert "secret" not in stub and "hidden body" not in stub
    assert '"""Docstring stays."""' in stub and "check = x  # outside the region: stays" in stub
    assert "Lesson 02: kept() in attnlab/attention.py is not written yet" in stub
    assert "Lesson 02: Thing.method() in attnlab/attention.py" in stub
    namespace: dict = {}
    exec(compile(stub, "stub", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="use_reference\\('attention'\\)"):
        namespace["kept"](1)


@pytest.mark.parametrize(
    "text, message",
    [
        ("def f():\n    ### BEGIN SOLUTION\n    pass\n", "never closed"),
        ("def f():\n    pass\n    ### END SOLUTION\n", "without a"),
        ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n", "inside another"),
    ],
)
def test_unbalanced_markers_are_refused_with_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        solution_regions(text)


def test_a_region_outside_a_function_is_refused():
    with pytest.raises(ValueError, match="outside any function"):
        make_stub("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "attention")
