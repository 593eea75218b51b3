"""What a learner sees in JupyterLab as `make lab` starts it (issue 35), done as a learner does it,
with nothing of the library written yet:

- a lesson opened and its kernel started is not marked unsaved (● in its tab) until the learner
  changes something;
- Run All stops at the first failing check, and that check's message is in view within 2 s
  (lab-settings/learner-view: JupyterLab itself stays at the bottom of the notebook);
- a failing check's message wraps between words, in the window of the issue and in a narrow one;
- running the set-up cell again prints no "The autoreload extension is already loaded".

The sliders of the interactive figures and the Log Console are driven in test_figures.py.
"""

from __future__ import annotations

from labdriver import NOTEBOOK

LESSON_00 = "notebooks/00_start_here.ipynb"
LESSON_02 = "notebooks/02_scaled_dot_product_attention.ipynb"
CHECK = "checks.check_softmax(attention.softmax)"  # the first check of lesson 02, failing when blank
STUB_MESSAGE = "Lesson 02: softmax() in attnlab/attention.py is not written yet"
ERROR = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
CURRENT_TAB = ".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current"

# Before Run All: note the moment the failing check's message appears in its cell (the run stops
# there), measured in the page so that the test's own round trips do not count.
_NOTE_WHEN_IT_APPEARS = """([cell, selector, text]) => {
    const there = () => Array.from(cell.querySelectorAll(selector)).some(e => e.textContent.includes(text));
    window.__attnlabErrorAt = undefined;
    const observer = new MutationObserver(() => {
        if (there()) { window.__attnlabErrorAt = performance.now(); observer.disconnect(); }
    });
    observer.observe(cell, {childList: true, subtree: true, characterData: true});
}"""

# Milliseconds from then until the message is on screen: its first and last lines are what the
# page shows at their place (not covered, not scrolled out of the notebook); false while not yet.
_SHOWN_AFTER_MS = """([cell, selector, text]) => {
    const error = Array.from(cell.querySelectorAll(selector)).find(e => e.textContent.includes(text));
    if (!error || window.__attnlabErrorAt === undefined) return false;
    const box = error.getBoundingClientRect();
    const points = [[box.left + 24, box.top + 6], [box.left + 24, box.bottom - 6]];
    const shown = box.height > 12 && points.every(([x, y]) => {
        const hit = document.elementFromPoint(x, y);
        return hit !== null && error.contains(hit);
    });
    return shown ? Math.max(1, Math.round(performance.now() - window.__attnlabErrorAt)) : false;
}"""

# The words of an output that the page shows split across two lines (each word's characters must
# lie on one line), and how many lines the page shows against how many the text has.
_SPLIT_WORDS = """(pre) => {
    const split = [];
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const match of node.data.matchAll(/\\S+/g)) {
            const range = document.createRange();
            range.setStart(node, match.index);
            range.setEnd(node, match.index + match[0].length);
            const tops = new Set(Array.from(range.getClientRects())
                .filter(r => r.width > 0).map(r => Math.round(r.top)));
            if (tops.size > 1) split.push(match[0]);
        }
    }
    const lineHeight = parseFloat(getComputedStyle(pre).lineHeight);
    return {split, shown: Math.round(pre.getBoundingClientRect().height / lineHeight),
            written: pre.innerText.replace(/\\n$/, '').split('\\n').length};
}"""


def _dirty(lab) -> bool:
    return "jp-mod-dirty" in (lab.page.locator(CURRENT_TAB).get_attribute("class") or "")


def test_a_lesson_opened_with_its_kernel_started_is_not_marked_unsaved(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.open_notebook(LESSON_00, workspace="not-unsaved")  # returns when its kernel is idle
    # The kernel's language_info (which marked it changed) arrives right after start; give it time.
    lab.page.wait_for_timeout(2000)
    assert lab.page.locator(f"{NOTEBOOK} .jp-KernelName").inner_text().strip() != "No Kernel"
    assert not _dirty(lab), "the tab shows ● (unsaved) before the learner changed anything"
    lab.shot("opened-kernel-started-no-unsaved-mark", lab.page.locator(CURRENT_TAB))

    # A change of the learner's still marks it: type into the set-up cell.
    lab.setup_cell().locator(".cm-content").click()
    lab.page.keyboard.press("End")
    lab.page.keyboard.type(" ")
    lab.page.wait_for_function("(tab) => tab.classList.contains('jp-mod-dirty')",
                               arg=lab.page.locator(CURRENT_TAB).element_handle(), timeout=10_000)
    lab.shot("typed-a-space-unsaved-mark", lab.page.locator(CURRENT_TAB))


def test_run_all_stops_at_the_failing_check_with_its_message_in_view(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.open_notebook(LESSON_02, workspace="stop-in-view")
    assert not _dirty(lab)
    check = lab.cell(CHECK)
    watched = [check.element_handle(), ERROR, STUB_MESSAGE]
    lab.page.evaluate(_NOTE_WHEN_IT_APPEARS, watched)
    lab.menu("Run", "Run All Cells")
    shown_after = lab.page.wait_for_function(_SHOWN_AFTER_MS, arg=watched, timeout=240_000, polling=50).json_value()
    lab.shot(f"run-all-stopped-message-in-view-after-{shown_after}-ms")
    assert shown_after <= 2000, f"the failing check's message came into view {shown_after} ms after the stop"
    # It stays in view once the run is over, and the failing cell is the active one.
    lab.wait_idle()
    assert lab.page.evaluate(_SHOWN_AFTER_MS, watched), \
        "the failing check's message went out of view when the run ended"
    assert "jp-mod-active" in (check.get_attribute("class") or "")
    assert "attnlab.use_reference('attention')" in lab.output_text(check)


def test_a_failing_checks_message_wraps_between_words(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.open_notebook(LESSON_02, workspace="wrap-between-words")
    lab.run_cell(lab.setup_cell())
    lab.run_cell(CHECK)
    error = lab.cell(CHECK).locator(ERROR, has_text=STUB_MESSAGE).locator("pre").first
    error.wait_for()
    wide = error.evaluate(_SPLIT_WORDS)
    lab.shot("check-message-1400-px", error)
    assert wide["split"] == [], f"words split across lines at 1400 px: {wide['split']}"

    # A narrow window (a laptop with the file browser open, a split view): the page must wrap the
    # long lines itself, and only between words.
    lab.page.set_viewport_size({"width": 760, "height": 900})
    lab.page.wait_for_timeout(1000)
    narrow = error.evaluate(_SPLIT_WORDS)
    lab.shot("check-message-760-px", error)
    assert narrow["shown"] > narrow["written"], f"the narrow window did not wrap the message: {narrow}"
    assert narrow["split"] == [], f"words split across lines at 760 px: {narrow['split']}"


def test_running_the_set_up_cell_again_prints_no_autoreload_notice(learner_server, lab_factory):
    lab = lab_factory(learner_server)
    lab.open_notebook(LESSON_02, workspace="set-up-twice")
    setup = lab.setup_cell()
    lab.run_cell(setup)
    lab.run_cell(setup)  # the learner runs it again, as a lesson's later steps ask
    output = lab.output_text(setup)
    lab.shot("set-up-cell-run-twice", setup, block="start")
    assert "Lesson 02: you write attnlab.attention" in output
    assert "already loaded" not in output, output
