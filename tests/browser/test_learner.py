"""A learner in JupyterLab as `make lab` starts it, on a copy of the course.

- JupyterLab opens the course at lesson 00, shows no news pop-up, renders widgets, and has the
  nbgrader extensions a learner needs (Assignment List, Validate) and not the instructor's.
- Lesson 02 with the blank library: the first check shows the stub's message; the quiz explains a
  wrong option, confirms a right one and updates its score; after borrowing the reference, every
  check passes.
"""

from __future__ import annotations

import re
import shutil

from labdriver import NOTEBOOK, ROOT

# Cells are found by code on their first line: CodeMirror leaves lines out of view unrendered.
QUIZ_CELL = "from attnlab.quiz import"
LESSON_02 = "notebooks/02_scaled_dot_product_attention.ipynb"
ANSWER = (
    "Without the scale, the scores q·k have variance d_k, so they spread further apart as d_k grows. "
    "The softmax then saturates: one weight is close to 1 and the others close to 0. Its derivative is "
    "then close to 0, so almost no gradient reaches W_Q and W_K and training stalls."
)


def test_lab_opens_lesson_00_without_news_with_widgets_and_the_learners_nbgrader(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.goto("/")  # what the URL printed by `make lab` leads to
    lab.wait_for_notebook()
    page = lab.page
    assert page.url.split("?")[0].endswith("/lab/tree/notebooks/00_start_here.ipynb")
    current = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
    assert current.inner_text().strip() == "00_start_here.ipynb"
    lab.shot("lesson-00-opens-first")

    # The news question appears soon after start-up when it is not switched off; give it time.
    page.wait_for_timeout(3000)
    assert page.locator(".Toastify__toast").count() == 0, page.locator(".Toastify__toast").all_inner_texts()
    assert page.locator(".jp-Notification-Status").inner_text().strip() == "0"

    lab.run_all()
    quiz = lab.cell("Quiz(").locator(".jupyter-widgets .widget-radio-box")
    quiz.first.wait_for()
    assert "Check yourself: how the course works" in lab.output_text("Quiz(")
    lab.shot("lesson-00-ran-quiz-widget-renders", lab.cell("Quiz("))

    assert "Validate" in page.locator(f"{NOTEBOOK} .jp-Toolbar .validate-button").inner_text()
    items = lab.menu_items("Nbgrader")
    lab.shot("nbgrader-menu-for-learners")
    lab.close_menu()
    assert items == ["Assignment List"], items


def test_lesson_02_checks_quiz_and_borrowing(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.open_notebook(LESSON_02, workspace="lesson-02")
    lab.shot("lesson-02-opened")

    # Run all: with the blank library, the first check stops the run with the stub's message.
    lab.run_all()
    check = "checks.check_softmax(attention.softmax)"
    message = lab.output_text(check)
    assert "NotImplementedError" in message
    assert "Lesson 02: softmax() in attnlab/attention.py is not written yet" in message
    assert "attnlab.use_reference('attention')" in message
    # The short form: the message first, then the learner's line that raised; no checks' internals.
    assert len([line for line in message.splitlines() if line.strip()]) <= 4, message
    assert "run_checks" not in message and "raised in your code: attention.py" in message
    lab.shot("blank-check-shows-its-message", lab.cell(check).locator(".jp-OutputArea-output").last, block="end")

    # Borrow the reference above the set-up cell, then run everything again: every check passes.
    lab.insert_cell_above(lab.setup_cell(), 'import attnlab\nattnlab.use_reference("attention")')
    lab.run_all()
    notice = lab.output_text('attnlab.use_reference("attention")')
    assert "Note: attnlab.attention is the course's reference implementation" in notice
    setup = lab.page.locator(f"{NOTEBOOK} .jp-CodeCell").nth(1)  # below the borrowing cell
    assert "Lesson 02: you write attnlab.attention (the course's reference)" in lab.output_text(setup)
    lab.shot("borrowed-reference-notice", lab.cell('attnlab.use_reference("attention")'))
    for function in ("softmax", "attention_numpy", "scaled_dot_product_attention"):
        output = lab.output_text(f"checks.check_{function}(")
        assert re.search(rf"✓ {function}: \d+ checks passed", output), output
    # JupyterLab stops Run All at the first error: every code cell ran, so none failed.
    # (A folded quiz cell shows no prompt.)
    prompts = [prompt for prompt in lab.prompts() if prompt]
    assert all(re.fullmatch(r"\[\d+\]:", prompt) for prompt in prompts), prompts
    lab.shot("checks-pass-with-the-reference", lab.cell("checks.check_scaled_dot_product_attention("))

    # The quiz ran with everything else (its code, the answers, is folded away): answer a question.
    quiz = lab.cell(QUIZ_CELL)
    question = quiz.locator(".widget-vbox").filter(has_text="What does attention let a token do?").last
    score = quiz.locator(".widget-label", has_text=re.compile("^You got"))
    questions = int(re.fullmatch(r"You got 0 of (\d+) right\.", score.inner_text()).group(1))
    question.get_by_label("token right before it", exact=False).check()
    question.get_by_role("button", name="Check").click()
    feedback = question.locator(".widget-html").last
    page = lab.page
    page.wait_for_function("(el) => el.innerText.includes('Not right yet')", arg=feedback.element_handle())
    assert "That is a fixed, local rule" in feedback.inner_text()
    assert score.inner_text() == f"You got 0 of {questions} right."
    lab.shot("quiz-wrong-option-explained", question)

    question.get_by_label("other tokens' values", exact=False).check()
    question.get_by_role("button", name="Check").click()
    page.wait_for_function("(el) => el.innerText.includes('Right.')", arg=feedback.element_handle())
    assert "weighted average of value vectors" in feedback.inner_text()
    page.wait_for_function(
        "([el, line]) => el.innerText === line", arg=[score.element_handle(), f"You got 1 of {questions} right."]
    )
    lab.shot("quiz-right-option-confirmed", question, block="start")
    lab.shot("quiz-score-updated", score, block="end")


def test_validate_fails_for_the_blank_release_and_passes_when_completed(learner_server, lab_factory):
    # The assignment as fetched: notebook and the stub attention.py beside it (see conftest).
    assignment = learner_server.root / "02_attention"
    lab = lab_factory(learner_server)
    lab.open_notebook("02_attention/02_scaled_dot_product_attention.ipynb", workspace="validate")
    validate = lab.page.locator(f"{NOTEBOOK} .jp-Toolbar .validate-button")

    validate.click()
    dialog = lab.dialog(timeout=240_000)
    body = dialog.locator(".jp-Dialog-body")
    assert "Validation Results" in dialog.inner_text()
    assert dialog.locator(".validation-failed").count() == 1, dialog.inner_html()[:3000]
    text = body.inner_text()
    assert "Lesson 02: softmax() in attnlab/attention.py is not written yet" in text
    assert "You did not provide a response." in text  # the written answer
    lab.shot("validate-blank-release-fails")
    lab.shot("validate-blank-release-fails-written-answer", body.locator("pre").last, block="end")
    lab.close_dialog()

    # The learner completes the assignment: the library (here, the course's reference) and the answer.
    shutil.copy(ROOT / "solutions" / "attnlab" / "attention.py", assignment / "attention.py")
    lab.write_markdown("YOUR ANSWER HERE", ANSWER)
    lab.shot("written-answer-filled-in", lab.page.locator(f"{NOTEBOOK} .jp-MarkdownCell", has_text="Without the scale").first)

    validate.click()
    dialog = lab.dialog(timeout=240_000)
    assert dialog.locator(".validation-success").count() == 1, dialog.inner_text()
    assert "Success! Your notebook passes all the tests." in dialog.inner_text()
    lab.shot("validate-completed-succeeds")
    lab.close_dialog()
