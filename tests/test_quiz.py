"""Tests of attnlab.quiz: validation, scoring, recording, the text version and the widgets."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from attnlab.quiz import display_order, Option, Question, Quiz, QuizState


def single() -> Question:
    return Question(
        "What does attention let a token do?",
        [
            Option("Gather from other tokens", correct=True, explain="Right. It mixes values."),
            Option("Look only at the previous token", explain="Not quite. That is a bigram."),
            Option("Nothing", explain="Not quite. It does something."),
        ],
    )


def multiple() -> Question:
    return Question(
        "Which are exercise modules?",
        [
            Option("attention", correct=True, explain="Right. Lesson 02."),
            Option("masking", correct=True, explain="Right. Lesson 03."),
            Option("quiz", explain="Not quite. quiz is a support module."),
        ],
        multiple=True,
    )


def quiz(**kwargs) -> Quiz:
    return Quiz(title="Check yourself: test", questions=[single(), multiple()], **kwargs)


# --- validation -------------------------------------------------------------------------------


def test_question_needs_two_options():
    with pytest.raises(ValueError, match="at least 2 options"):
        Question("Q?", [Option("a", correct=True, explain="Right.")])


def test_question_needs_a_correct_option():
    with pytest.raises(ValueError, match="no correct option"):
        Question("Q?", [Option("a", explain="Not quite."), Option("b", explain="Not quite.")])


def test_single_choice_needs_exactly_one_correct():
    options = [
        Option("a", correct=True, explain="Right."),
        Option("b", correct=True, explain="Right."),
    ]
    with pytest.raises(ValueError, match="single choice but has 2 correct"):
        Question("Q?", options)
    assert Question("Q?", options, multiple=True).correct_indices == (0, 1)


def test_every_option_needs_an_explanation():
    with pytest.raises(ValueError, match="'b' has no explanation"):
        Question("Q?", [Option("a", correct=True, explain="Right."), Option("b", explain="  ")])


def test_option_texts_must_be_unique():
    with pytest.raises(ValueError, match="unique"):
        Question("Q?", [Option("a", correct=True, explain="Right."), Option("a", explain="No.")])


def test_quiz_needs_questions():
    with pytest.raises(ValueError, match="no questions"):
        Quiz("Empty", [])


# --- scoring ----------------------------------------------------------------------------------


def test_score_line_before_any_answer():
    state = QuizState("t", [single(), multiple()])
    assert state.score_line() == "You got 0 of 2 right."


def test_single_choice_right_and_wrong():
    state = QuizState("t", [single(), multiple()])
    wrong = state.check(0, [1])
    assert not wrong.correct
    assert wrong.messages == ["Look only at the previous token: Not quite. That is a bigram."]
    assert state.score_line() == "You got 0 of 2 right."
    right = state.check(0, [0])
    assert right.correct
    assert right.messages == ["Gather from other tokens: Right. It mixes values."]
    assert state.score_line() == "You got 1 of 2 right."


def test_single_choice_rejects_two_options():
    state = QuizState("t", [single()])
    with pytest.raises(ValueError, match="exactly one"):
        state.check(0, [0, 1])


def test_multiple_choice_all_correct():
    state = QuizState("t", [single(), multiple()])
    feedback = state.check(1, [1, 0])
    assert feedback.correct
    assert len(feedback.messages) == 2
    assert state.score_line() == "You got 1 of 2 right."


def test_partially_correct_multiple_choice_is_wrong_and_names_missed():
    state = QuizState("t", [single(), multiple()])
    feedback = state.check(1, [0])
    assert not feedback.correct
    assert feedback.messages[0] == "attention: Right. Lesson 02."
    missed = [message for message in feedback.messages if "missed" in message]
    assert missed == ["You missed a correct option: masking: Right. Lesson 03."]
    assert state.score_line() == "You got 0 of 2 right."


def test_multiple_choice_with_an_extra_wrong_option_is_wrong():
    state = QuizState("t", [multiple()])
    feedback = state.check(0, [0, 1, 2])
    assert not feedback.correct
    assert "quiz: Not quite. quiz is a support module." in feedback.messages


def test_recheck_replaces_earlier_answer():
    state = QuizState("t", [single(), multiple()])
    state.check(0, [0])
    state.check(1, [0, 1])
    assert state.score_line() == "You got 2 of 2 right."
    state.check(0, [2])
    assert state.score_line() == "You got 1 of 2 right."
    state.check(0, [0])
    assert state.score_line() == "You got 2 of 2 right."


def test_two_quizzes_do_not_share_state():
    first, second = quiz()._build(), quiz()._build()
    first.state.check(0, [0])
    assert first.state.score_line() == "You got 1 of 2 right."
    assert second.state.score_line() == "You got 0 of 2 right."
    # Showing the same quiz again (re-running the cell) starts from nothing too.
    again = quiz()._build()
    assert again.state.results == {}


# --- recording --------------------------------------------------------------------------------


def test_recording_writes_json_lines(tmp_path):
    path = tmp_path / "sub" / "answers.jsonl"
    state = quiz(record_to=path)._build().state
    state.check(0, [1])
    state.check(1, [0, 1])
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["quiz"] == "Check yourself: test"
    assert first["question"] == 0
    assert first["prompt"] == "What does attention let a token do?"
    assert first["chosen"] == ["Look only at the previous token"]
    assert first["correct"] is False
    datetime.fromisoformat(first["time"])
    assert second["chosen"] == ["attention", "masking"] and second["correct"] is True


def test_recording_is_off_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    state = quiz()._build().state
    assert state.record_to is None
    state.check(0, [0])
    assert list(tmp_path.iterdir()) == []


# --- text version -----------------------------------------------------------------------------


def test_text_contains_every_question_and_option():
    q = quiz()
    text = q.text()
    assert text.startswith("Check yourself: test")
    assert "1. What does attention let a token do?" in text
    assert "2. Which are exercise modules?" in text
    for question in q.questions:
        for option in question.options:
            assert option.text in text
            assert option.explain in text  # answer key
    assert "Answer key" in text


def test_text_without_answers_hides_the_key():
    text = quiz().text(include_answers=False)
    assert ") Gather from other tokens" in text
    assert "Answer key" not in text
    assert "Right. It mixes values." not in text


def test_show_outside_ipython_prints_text(capsys):
    quiz().show()
    out = capsys.readouterr().out
    assert "What does attention let a token do?" in out
    assert "Answer key" not in out


def test_show_in_ipython_displays_widget_with_text_fallback(monkeypatch):
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    quiz().show()
    (bundle, raw), = shown
    assert raw
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "What does attention let a token do?" in bundle["text/plain"]
    assert "Answer key" not in bundle["text/plain"]


# --- widgets ----------------------------------------------------------------------------------


def test_widgets_single_choice_check_updates_feedback_and_score():
    view = quiz()._build()
    first = view.questions[0]
    assert view.score.value == "You got 0 of 2 right."
    assert first.selector.index is None  # nothing preselected

    first.button.click()  # nothing picked yet
    assert "Pick an answer first" in first.feedback.value
    assert view.score.value == "You got 0 of 2 right."

    labels = [label for label, _ in first.selector.options]
    first.selector.index = labels.index("Look only at the previous token")
    first.button.click()
    assert "previous token: That is a bigram." in first.feedback.value and "Not quite" not in first.feedback.value
    assert view.score.value == "You got 0 of 2 right."

    first.selector.index = labels.index("Gather from other tokens")
    first.button.click()
    assert "Gather from other tokens: It mixes values." in first.feedback.value
    assert "Not quite" not in first.feedback.value
    assert view.score.value == "You got 1 of 2 right."


def test_widgets_multiple_choice_check_names_missed_option():
    view = quiz()._build()
    second = view.questions[1]
    boxes = {box.description: box for box in second.selector.children}
    assert len(boxes) == 3
    boxes["attention"].value = True
    second.button.click()
    assert "You missed a correct option: masking" in second.feedback.value
    assert view.score.value == "You got 0 of 2 right."
    boxes["masking"].value = True
    second.button.click()
    assert "missed" not in second.feedback.value
    assert view.score.value == "You got 1 of 2 right."


# --- shuffling ----------------------------------------------------------------------------------


def _four_options(prompt="Which is right?", right=0):
    texts = ["first", "second", "third", "fourth"]
    return Question(prompt, [Option(t, correct=i == right, explain="Right." if i == right else "Not quite.")
                             for i, t in enumerate(texts)])


def test_the_display_order_is_stable_for_a_learner_and_varies_between_learners():
    question = _four_options()
    assert display_order(question, "ada") == display_order(question, "ada")
    assert sorted(display_order(question, "ada")) == [0, 1, 2, 3]
    orders = {tuple(display_order(question, f"learner{n}")) for n in range(40)}
    assert len(orders) > 10


def test_the_right_answer_written_first_is_not_always_shown_first():
    shown = [display_order(_four_options(f"question {n}?"), "ada").index(0) for n in range(40)]
    assert len(set(shown)) == 4  # every position occurs


def test_widgets_and_text_show_the_same_order():
    q = Quiz("Order", [_four_options()], learner="ada")
    order = display_order(q.questions[0], "ada")
    text = q.text()
    expected = [f"   {letter}) {q.questions[0].options[i].text}" for letter, i in zip("abcd", order)]
    assert [line for line in text.splitlines() if line.startswith("   ") and ") " in line][:4] == expected
    assert f"1. {'abcd'[order.index(0)]}" in text  # the key names the right option by its shown letter
    view = q._build()
    assert [label for label, _ in view.questions[0].selector.options] == [q.questions[0].options[i].text for i in order]


def test_feedback_says_right_or_wrong_once():
    from attnlab.quiz import _feedback_html

    question = Question("Which?", [Option("this one", correct=True, explain="Right. It is this one."),
                                   Option("that one", explain="Not quite. That one is wrong.")])
    state = QuizState("q", [question])
    right = _feedback_html(state.check(0, [0]))
    assert right.count("Right") == 1 and "this one: It is this one." in right, right
    wrong = _feedback_html(state.check(0, [1]))
    assert "Not quite" not in wrong and "Not right yet" in wrong and "that one: That one is wrong." in wrong, wrong
