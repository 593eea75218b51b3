"""Quizzes cannot be passed without reading the lesson: the lint of every question of all ten
lessons.

- Per question, no right option is longer than 1.25 times the longest wrong one.
- Per lesson, "pick the longest" (and "pick the shortest") scores no better than chance plus one
  question. For a question with k right options the strategy ticks the k longest (shortest): the
  strongest form of the bias, as if the learner knew k.
- Positions count from 0 everywhere: a question that numbers keys, queries, positions or tokens
  says so in its prompt ("counting from 0"), and no quiz counts from 1.
- No wrong option is used twice in the course (a distractor learners have seen refuted elsewhere
  gives the answer away).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pytest

from attnlab.lessons import LESSONS
from tests.test_course_quizzes import lesson_quizzes

LENGTH_RATIO = 1.25
NUMBERED = re.compile(r"\b(keys?|quer(?:y|ies)|positions?|tokens?)\s+\d", re.IGNORECASE)
FROM_ONE = re.compile(r"(count(?:ing|ed|s)?|number(?:ed|ing)?|index(?:ed)?)\s+from\s+1\b|\b1-based\b", re.IGNORECASE)


def _questions(lesson):
    return [question for quiz in lesson_quizzes(lesson) for question in quiz.questions]


def _texts(question) -> list[str]:
    return [question.prompt] + [text for option in question.options for text in (option.text, option.explain)]


def strategy_score(question, longest: bool) -> float:
    """Expected score of ticking the k longest (or shortest) options, k = the number of right
    ones, ties broken at random."""
    lengths = [len(option.text) * (1 if longest else -1) for option in question.options]
    right = set(question.correct_indices)
    k = len(right)
    threshold = sorted(lengths, reverse=True)[k - 1]
    sure = {i for i, n in enumerate(lengths) if n > threshold}
    tied = {i for i, n in enumerate(lengths) if n == threshold}
    need = k - len(sure)
    if not sure <= right or len(right & tied) != need:
        return 0.0
    return 1.0 / math.comb(len(tied), need)


def chance(question) -> float:
    return 1.0 / math.comb(len(question.options), len(question.correct_indices))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_no_right_option_stands_out_by_length(lesson):
    too_long = []
    for number, question in enumerate(_questions(lesson)):
        right = max(len(question.options[i].text) for i in question.correct_indices)
        wrong = max(len(o.text) for i, o in enumerate(question.options) if i not in question.correct_indices)
        if right > LENGTH_RATIO * wrong:
            too_long.append(f"Q{number + 1} ({right} vs {wrong} characters): {question.prompt[:70]}")
    assert not too_long, f"{lesson.notebook}: the right option is over {LENGTH_RATIO}x the longest wrong one in\n" + "\n".join(too_long)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
@pytest.mark.parametrize("longest", [True, False], ids=["longest", "shortest"])
def test_picking_by_length_scores_no_better_than_chance(lesson, longest):
    questions = _questions(lesson)
    score = sum(strategy_score(q, longest) for q in questions)
    expected = sum(chance(q) for q in questions)
    assert score <= expected + 1, (
        f"{lesson.notebook}: 'pick the {'longest' if longest else 'shortest'}' scores {score:.1f} of "
        f"{len(questions)}, chance {expected:.1f}")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_positions_count_from_zero(lesson):
    problems = []
    for number, question in enumerate(_questions(lesson)):
        texts = _texts(question)
        if any(FROM_ONE.search(text) for text in texts):
            problems.append(f"Q{number + 1} counts from 1")
        if any(NUMBERED.search(text) for text in texts) and "from 0" not in question.prompt:
            problems.append(f"Q{number + 1} numbers keys, queries, positions or tokens but its prompt does "
                            "not say 'counting from 0'")
    assert not problems, f"{lesson.notebook}: " + "; ".join(problems)


def test_no_distractor_is_used_twice_in_the_course():
    seen = defaultdict(list)
    for lesson in LESSONS:
        for number, question in enumerate(_questions(lesson)):
            for index, option in enumerate(question.options):
                if index not in question.correct_indices:
                    key = re.sub(r"\W+", " ", option.text.lower()).strip()
                    seen[key].append(f"{lesson.number} Q{number + 1}")
    repeated = {text: where for text, where in seen.items() if len(where) > 1}
    assert not repeated, repeated


def test_the_lint_catches_a_biased_quiz():
    """The strategy scores above are what they claim: a question whose right option is the
    longest is won by 'pick the longest', lost by 'pick the shortest'."""
    from attnlab.quiz import Option, Question

    biased = Question("Why?", [Option("A long and careful right answer", correct=True, explain="Yes."),
                               Option("No", explain="No."), Option("Nope", explain="No.")])
    assert strategy_score(biased, longest=True) == 1.0 and strategy_score(biased, longest=False) == 0.0
    tied = Question("Which?", [Option("aaaa", correct=True, explain="."), Option("bbbb", explain="."),
                               Option("c", explain=".")])
    assert strategy_score(tied, longest=True) == 0.5 and chance(tied) == pytest.approx(1 / 3)
    several = Question("Which two?", [Option("aaaa", correct=True, explain="."),
                                      Option("bbbbb", correct=True, explain="."),
                                      Option("c", explain="."), Option("dd", explain=".")], multiple=True)
    assert strategy_score(several, longest=True) == 1.0 and chance(several) == pytest.approx(1 / 6)
