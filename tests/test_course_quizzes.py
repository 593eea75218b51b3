"""Every lesson's quiz, read from its instructor notebook: at least five questions (lesson 00, which grades nothing: at
least two), and over the whole course the right answer is not always shown in the same place."""

from __future__ import annotations

from collections import Counter

import nbformat
import pytest

from attnlab import quiz as quiz_module
from attnlab.lessons import LESSONS
from autograder import paths


def lesson_quizzes(lesson) -> list[quiz_module.Quiz]:
    """The quizzes a lesson's notebook shows (its quiz cells run with ``show`` captured)."""
    shown = []
    original = quiz_module.Quiz.show
    quiz_module.Quiz.show = lambda self: shown.append(self)
    try:
        for cell in nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, as_version=4).cells:
            if cell.cell_type == "code" and "Quiz(" in cell.source:
                names = {"Option": quiz_module.Option, "Question": quiz_module.Question, "Quiz": quiz_module.Quiz}
                exec(compile(cell.source, f"{lesson.notebook} quiz cell", "exec"), names)
    finally:
        quiz_module.Quiz.show = original
    return shown


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_each_lesson_has_a_quiz_of_enough_questions(lesson):
    quizzes = lesson_quizzes(lesson)
    assert quizzes, f"{lesson.notebook} shows no quiz"
    questions = sum(len(q.questions) for q in quizzes)
    assert questions >= (2 if lesson.number == "00" else 5), f"{lesson.notebook}: {questions} questions"


def test_the_right_answer_moves_around_across_the_course():
    positions = Counter()
    for lesson in LESSONS:
        for quiz in lesson_quizzes(lesson):
            for question in quiz.questions:
                if not question.multiple:
                    order = quiz_module.display_order(question, "a-learner")
                    positions[order.index(question.correct_indices[0])] += 1
    total = sum(positions.values())
    assert total >= 15
    assert len(positions) >= 3, positions
    assert max(positions.values()) < 0.6 * total, positions
