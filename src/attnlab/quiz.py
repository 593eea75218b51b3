"""Check-yourself quizzes: questions as data, shown with ipywidgets, with a plain-text fallback.

A quiz is written as data and shown with one call::

    Quiz(
        title="Check yourself: lesson 02",
        questions=[
            Question(
                "What does attention let a token do?",
                [
                    Option("Gather information from other tokens, weighted by relevance",
                           correct=True, explain="Right. ..."),
                    Option("Look only at the token right before it", explain="Not quite. ..."),
                ],
            ),
        ],
    ).show()

Options are written in any order and shown shuffled (``display_order``): seeded by the question and
the learner's user name, so one learner sees the same order on every rerun, in the widgets and in
the text fallback alike, while the right answer's place varies from question to question.

The logic (checking an answer, keeping the score, recording answers) lives in ``QuizState`` and
knows nothing of widgets, so it is tested without a browser; the widgets only call it. Every
``show()`` builds fresh widgets and a fresh ``QuizState``, so re-running a cell starts cleanly.
Option indices are always the written order; only what is displayed is shuffled.
"""

from __future__ import annotations

import getpass
import hashlib
import html
import json
import random
import re
import string
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

__all__ = ["Option", "Question", "Quiz", "QuizState", "Feedback", "display_order"]


def _learner() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 (no user name: one fixed order for everybody)
        return ""


def display_order(question: "Question", learner: str | None = None) -> list[int]:
    """The written indices of ``question``'s options in the order they are shown: a shuffle seeded
    by the prompt, the options' texts and the learner (``getpass.getuser()`` by default)."""
    learner = _learner() if learner is None else learner
    key = "\0".join([learner, question.prompt, *(option.text for option in question.options)])
    order = list(range(len(question.options)))
    random.Random(hashlib.sha256(key.encode()).digest()).shuffle(order)
    return order


@dataclass(frozen=True)
class Option:
    """One answer a learner may pick.

    text:    what the learner sees.
    correct: whether picking it is right.
    explain: why it is right or wrong; the course requires one for every option, and shows it as
             written (authors start wrong ones with "Not quite. ...").
    """

    text: str
    correct: bool = False
    explain: str = ""


@dataclass(frozen=True)
class Question:
    """A question with its options.

    multiple: False for single choice (exactly one correct option, radio buttons); True when
              several options may be correct (check boxes; right only if exactly the correct ones
              are ticked).
    """

    prompt: str
    options: Sequence[Option]
    multiple: bool = False

    def __post_init__(self):
        # Frozen dataclass: store options as a tuple so a question cannot change after validation.
        object.__setattr__(self, "options", tuple(self.options))
        where = f"question {self.prompt!r}"
        if not str(self.prompt).strip():
            raise ValueError("a question needs a non-empty prompt")
        if len(self.options) < 2:
            raise ValueError(f"{where} needs at least 2 options, it has {len(self.options)}")
        for option in self.options:
            if not isinstance(option, Option):
                raise TypeError(f"{where}: options must be Option(...), got {option!r}")
            if not option.explain.strip():
                raise ValueError(
                    f"{where}: option {option.text!r} has no explanation; every option, right "
                    "or wrong, needs explain='...'"
                )
        texts = [option.text for option in self.options]
        duplicates = sorted({text for text in texts if texts.count(text) > 1})
        if duplicates:
            raise ValueError(f"{where}: option texts must be unique, repeated: {duplicates}")
        n_correct = len(self.correct_indices)
        if n_correct == 0:
            raise ValueError(f"{where} has no correct option; mark one with correct=True")
        if not self.multiple and n_correct != 1:
            raise ValueError(
                f"{where} is single choice but has {n_correct} correct options; "
                "pass multiple=True or mark exactly one correct"
            )

    @property
    def correct_indices(self) -> tuple[int, ...]:
        """Indices of the correct options, in order."""
        return tuple(i for i, option in enumerate(self.options) if option.correct)


@dataclass(frozen=True)
class Feedback:
    """The outcome of checking one answer: right or not, and the explanations to show."""

    correct: bool
    messages: list[str] = field(default_factory=list)


class QuizState:
    """The answers of one showing of a quiz: checks answers, keeps the score, records answers.

    Holds no widgets. ``record_to`` is a JSON-lines file to which each check is appended.
    """

    def __init__(
        self, title: str, questions: Sequence[Question], record_to: str | Path | None = None
    ):
        self.title = title
        self.questions = tuple(questions)
        self.record_to = Path(record_to) if record_to is not None else None
        # question index -> whether its latest check was right; a re-check replaces the entry.
        self.results: dict[int, bool] = {}

    def check(self, question_index: int, chosen_indices: Sequence[int]) -> Feedback:
        """Check the options ``chosen_indices`` of question ``question_index``.

        Right means exactly the correct options were chosen. The messages give the explanation of
        each chosen option and, for multiple choice, name the correct options not chosen, with
        their explanations.
        """
        question = self.questions[question_index]
        chosen = sorted(set(chosen_indices))
        if not chosen:
            raise ValueError("choose at least one option before checking")
        for index in chosen:
            if not 0 <= index < len(question.options):
                raise IndexError(
                    f"option {index} does not exist; question {question_index} has "
                    f"{len(question.options)} options"
                )
        if not question.multiple and len(chosen) != 1:
            raise ValueError("a single-choice question takes exactly one option")

        correct = chosen == list(question.correct_indices)
        messages = [f"{question.options[i].text}: {question.options[i].explain}" for i in chosen]
        # Single choice shows only the pick's explanation, so the learner can try again; multiple
        # choice also names the correct options left unticked (else "partly right" is a puzzle).
        missed = [i for i in question.correct_indices if i not in chosen and question.multiple]
        for i in missed:
            messages.append(
                f"You missed a correct option: {question.options[i].text}: "
                f"{question.options[i].explain}"
            )
        self.results[question_index] = correct
        self._record(question_index, chosen, correct)
        return Feedback(correct, messages)

    def score(self) -> int:
        """Number of questions whose latest check was right."""
        return sum(self.results.values())

    def score_line(self) -> str:
        """The running score as learners see it."""
        return f"You got {self.score()} of {len(self.questions)} right."

    def _record(self, question_index: int, chosen: list[int], correct: bool) -> None:
        if self.record_to is None:
            return
        question = self.questions[question_index]
        entry = {
            "quiz": self.title,
            "question": question_index,
            "prompt": question.prompt,
            "chosen": [question.options[i].text for i in chosen],
            "correct": correct,
            "time": datetime.now(timezone.utc).isoformat(),
        }
        self.record_to.parent.mkdir(parents=True, exist_ok=True)
        with self.record_to.open("a", encoding="utf-8") as file:
            file.write(json.dumps(entry) + "\n")


@dataclass
class _QuestionView:
    """The widgets of one question (kept so tests can drive them like a learner would)."""

    selector: object  # RadioButtons (single choice) or a VBox of Checkboxes (multiple choice)
    button: object
    feedback: object
    order: list[int] = field(default_factory=list)  # written index of each displayed option

    def chosen(self) -> list[int]:
        """Written indices of the options currently selected."""
        import ipywidgets as widgets

        if isinstance(self.selector, widgets.RadioButtons):
            return [] if self.selector.value is None else [self.selector.value]
        return sorted(self.order[i] for i, box in enumerate(self.selector.children) if box.value)


@dataclass
class _QuizView:
    """A built quiz: the widget to display, its state and the parts tests reach into."""

    box: object
    state: QuizState
    questions: list[_QuestionView]
    score: object


_VERDICT_WORD = re.compile(r": (?:Right|Not quite)[.,!]\s+")


def _feedback_html(feedback: Feedback) -> str:
    verdict = "✔ Right." if feedback.correct else "✘ Not right yet."
    colour = "green" if feedback.correct else "#b00"
    lines = [f'<b style="color:{colour}">{verdict}</b>']
    # The verdict already says right or not: an explanation's own opening word is not repeated.
    lines += [html.escape(_VERDICT_WORD.sub(": ", message, count=1)) for message in feedback.messages]
    return "<br>".join(lines)


class Quiz:
    """A check-yourself quiz. ``show()`` displays it; ``text()`` is a plain-text version.

    record_to: optional path of a JSON-lines file; each checked answer is appended as one line
               (quiz, question, prompt, chosen, correct, time). Off by default.
    """

    def __init__(
        self, title: str, questions: Sequence[Question], record_to: str | Path | None = None,
        learner: str | None = None,
    ):
        self.title = title
        self.questions = tuple(questions)
        self.record_to = record_to
        self.learner = learner  # seeds the shuffle; the user name when None
        if not self.questions:
            raise ValueError(f"quiz {title!r} has no questions")
        for question in self.questions:
            if not isinstance(question, Question):
                raise TypeError(
                    f"quiz {title!r}: questions must be Question(...), got {question!r}"
                )

    def text(self, include_answers: bool = True) -> str:
        """Plain-text rendering: title, numbered questions, lettered options, then an answer key."""
        lines = [self.title, "=" * len(self.title), ""]
        orders = [display_order(question, self.learner) for question in self.questions]
        for number, (question, order) in enumerate(zip(self.questions, orders), start=1):
            hint = " (several may be right)" if question.multiple else ""
            lines.append(f"{number}. {question.prompt}{hint}")
            for letter, index in zip(string.ascii_lowercase, order):
                lines.append(f"   {letter}) {question.options[index].text}")
            lines.append("")
        if include_answers:
            lines += ["Answer key", "----------"]
            for number, (question, order) in enumerate(zip(self.questions, orders), start=1):
                right = ", ".join(string.ascii_lowercase[order.index(i)] for i in question.correct_indices)
                lines.append(f"{number}. {right}")
                for letter, index in zip(string.ascii_lowercase, order):
                    lines.append(f"   {letter}) {question.options[index].explain}")
            lines.append("")
        return "\n".join(lines)

    def _build(self) -> _QuizView:
        """Build fresh widgets and a fresh state, wired together; displays nothing."""
        import ipywidgets as widgets

        state = QuizState(self.title, self.questions, self.record_to)
        score = widgets.Label(value=state.score_line())
        views: list[_QuestionView] = []
        parts: list = [widgets.HTML(f"<h3>{html.escape(self.title)}</h3>")]
        for index, question in enumerate(self.questions):
            hint = " <i>(tick every right option)</i>" if question.multiple else ""
            prompt = widgets.HTML(f"<b>{index + 1}. {html.escape(question.prompt)}</b>{hint}")
            order = display_order(question, self.learner)
            if question.multiple:
                selector = widgets.VBox(
                    [
                        widgets.Checkbox(
                            value=False, description=question.options[i].text, indent=False,
                            layout=widgets.Layout(width="auto"),
                        )
                        for i in order
                    ]
                )
            else:
                # (label, written index) pairs in the shuffled order; nothing starts selected.
                selector = widgets.RadioButtons(
                    options=[(question.options[i].text, i) for i in order],
                    index=None, layout=widgets.Layout(width="auto"),
                )
            view = _QuestionView(selector, widgets.Button(description="Check"), widgets.HTML(), order)
            view.button.on_click(self._on_check(state, index, view, score))
            views.append(view)
            parts.append(widgets.VBox([prompt, selector, view.button, view.feedback]))
        parts.append(score)
        return _QuizView(widgets.VBox(parts), state, views, score)

    @staticmethod
    def _on_check(state: QuizState, index: int, view: _QuestionView, score):
        def on_click(_button):
            chosen = view.chosen()
            if not chosen:
                view.feedback.value = "<i>Pick an answer first.</i>"
                return
            view.feedback.value = _feedback_html(state.check(index, chosen))
            score.value = state.score_line()

        return on_click

    def show(self) -> None:
        """Display the quiz: widgets where they render, the questions as text elsewhere."""
        try:
            from IPython import get_ipython
        except ImportError:
            get_ipython = lambda: None  # noqa: E731
        if get_ipython() is None:
            print(self.text(include_answers=False))
            return
        from IPython.display import display

        view = self._build()
        # One output with both forms: a widget frontend shows the widget; nbconvert, nbclient and
        # plain-text frontends fall back to the questions as text (without the answer key).
        bundle = view.box._repr_mimebundle_()
        bundle["text/plain"] = self.text(include_answers=False)
        display(bundle, raw=True)
