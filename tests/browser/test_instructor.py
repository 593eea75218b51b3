"""An instructor in JupyterLab started in the course directory that `python -m autograder build` made:
nbgrader's formgrader lists the course's assignments, one per lesson."""

from __future__ import annotations

from attnlab.lessons import LESSONS


def test_formgrader_lists_the_course_assignments(instructor_server, lab_factory):
    lab = lab_factory(instructor_server)
    lab.goto("/lab/workspaces/formgrader")
    # The file browser shows the course directory: nbgrader's source/ and release/ folders.
    for folder in ("source", "release"):
        lab.page.locator(".jp-DirListing-itemText", has_text=folder).first.wait_for()
    assert "Formgrader" in lab.menu_items("Nbgrader")
    lab.page.locator(".lm-Menu-itemLabel", has_text="Formgrader").first.click()

    formgrader = lab.page.frame_locator("#formgrader iframe")
    names = formgrader.locator("td.name a")
    names.first.wait_for(timeout=60_000)
    listed = sorted(names.all_inner_texts())
    assert listed == sorted(lesson.slug for lesson in LESSONS), listed
    assert formgrader.locator("#warning-exchange, #warning-course-id").count() == 0
    lab.shot("formgrader-lists-the-assignments")
