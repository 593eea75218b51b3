"""The class report's page (``python -m autograder report``) in Chromium: opened from disk
(file://), it shows both charts, decoded from the page itself, and the tables."""

from __future__ import annotations

from autograder import report
from tests.graded_class import LESSONS, graded_cells, make_course


def test_the_report_page_shows_both_charts_and_the_tables(browser, tmp_path):
    course = make_course(tmp_path / "course")
    assert report.report(course) == 0
    context = browser.new_context()
    try:
        context.route("http*://**", lambda route: route.abort())  # a self-contained page fetches nothing
        page = context.new_page()
        page.goto((course / "report" / "index.html").as_uri())
        for chart in ("#pass-rate", "#scores"):
            image = page.locator(f"img{chart}")
            image.wait_for()
            width = image.evaluate("img => img.complete ? img.naturalWidth : 0")
            assert width > 0, chart
        rows = page.locator("table.exercises tr")
        assert rows.count() == 1 + sum(len(graded_cells(lesson.number)) for lesson in LESSONS)
        assert page.locator("table.lessons tr").count() == 1 + len(LESSONS)
        assert "Pass rate by exercise" in page.locator("img#pass-rate").get_attribute("alt")
        with (course / "report" / "notes.csv").open() as handle:
            noted = len(handle.read().strip().splitlines()) - 1
        assert noted > 0 and page.locator("table.notes tr").count() == 1 + noted
    finally:
        context.close()
