"""The reference's answers, computed in the grading process while several submissions are graded
in threads (``grade --jobs N``), come out as they do one submission at a time
(``autograder.trusted.expected_results``)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from attnlab.lessons import lesson
from autograder import trusted


def test_reference_calls_of_two_submissions_never_overlap(monkeypatch):
    inside, most = [], []

    def slow_call(module, call, arrays, out):
        inside.append(call["id"])
        most.append(len(inside))
        time.sleep(0.01)
        inside.remove(call["id"])
        return {"status": "ok"}

    monkeypatch.setattr(trusted.worker, "run_call", slow_call)
    prepared = [({"id": f"c{i}"}, {}) for i in range(5)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: trusted.expected_results(None, prepared), range(4)))
    assert max(most) == 1
    assert all(len(r) == 5 and all(answer["status"] == "ok" for answer in r) for r in results)


def test_lesson_01s_seeded_initialisation_answers_the_same_in_threads():
    # the case an honest learner lost: module_initialisation seeds torch's global generator
    one = lesson("01")
    reference = trusted.reference_module(one)
    cases = [(i, c) for i, c in enumerate(trusted.load_cases(one)) if c.recipe == "module_initialisation"]
    assert cases
    prepared = [trusted._prefixed(case, index) for index, case in cases]
    serial = trusted.expected_results(reference, prepared)
    with ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: trusted.expected_results(reference, prepared), range(16)))
    for run in runs:
        for got, want in zip(run, serial):
            assert got["status"] == want["status"] == "ok"
            for name, array in want["arrays"].items():
                assert np.array_equal(got["arrays"][name], array), name
