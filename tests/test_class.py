"""A class across every graded lesson, end to end with the course's tool (issue 28, part 4).

Five learners, each a Unix account of their own (tests/classroom.py says why accounts, not
``--student``): one who solved everything, one who submits every lesson untouched, and three who
solved everything but one exercise, each with a different classic mistake (the mutation table's).
The instructor releases every graded lesson through nbgrader's exchange; each learner fetches it,
writes their work into it as a learner does (stubs filled in: ``autograder.fill``) and submits it;
the instructor collects, grades everything at once with ``python -m autograder grade --jobs 2``,
hand-grades the written answers, exports the grades, makes feedback with ``python -m autograder
feedback`` and returns it through the exchange; each learner fetches their pages.

This one class replaces the per-lesson nbgrader round trips (tests/test_grading_roundtrip.py kept
only the benchmark) and keeps every property they asserted: the full solution gets every
autograded point and, once its written answer is graded, the lesson's points; the untouched release
gets 0, graded without errors, its notes quoting the stub; a half-correct library gets exactly the
cells it earns; the report keeps autograded points apart from hand grading; the pages show verdicts
and no hidden test; the grader runs with ``ATTNLAB_REFERENCE=all`` in its environment, so the
learner's library, not the reference, is what gets graded. (The submission with an infinite loop
that the lesson-02 round trip graded is the adversarial corpus's ``infinite_loop_cell``.)
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from attnlab.lessons import LESSONS, Lesson
from autograder import paths, sandbox
from autograder.course import nbgrader
from autograder.fill import fill, fill_notebook
from autograder.leaks import page_leaks, page_text, secrets_for
from tests.classroom import Classroom
from tests.mutation_table import MUTATIONS
from tests.parity import Mutation, mutated_source, verdicts

GRADED = [lesson for lesson in LESSONS if lesson.graded]
_BY_ID = {mutation.id: mutation for mutation in MUTATIONS}
# Learner (a Unix user name, nbgrader's student id) -> their one mistake, or None.
CORRECT, BLANK = "attn28-correct", "attn28-blank"
MISTAKES: dict[str, Mutation] = {
    "attn28-nosqrt": _BY_ID["02-sdpa-no scale"],  # the lesson-02 round trip's half-correct library
    "attn28-rope": _BY_ID["05-apply_rope-layouts swapped"],  # RoPE pairing the wrong halves
    # more queries than keys not clipped: a mistake of attention_flops alone (the table's top-left
    # mistake counts pairs in a Python loop, which makes lesson 08's crossover search, up to 2**40
    # tokens, run past the cell's time limit; leaving the diagonal out also changes layer_flops)
    "attn28-flops": _BY_ID["08-attention_flops-n_q > n_k not clipped"],
}
LEARNERS = [CORRECT, BLANK, *MISTAKES]

pytestmark = [
    pytest.mark.skipif(bool(sandbox.missing_protections()), reason="the grading sandbox is incomplete here: "
                       + "; ".join(sandbox.missing_protections())),
    pytest.mark.timeout(3600),  # the whole class is taken once, in the fixture
]


def _cells(notebook: Path) -> list[dict]:
    return [cell.metadata["nbgrader"] for cell in nbformat.read(notebook, as_version=4).cells
            if cell.metadata.get("nbgrader", {}).get("grade")]


def autograded_points(lesson: Lesson, course: Path, prefix: str = "") -> float:
    """Points of the lesson's autograded cells (whose grade id starts with ``prefix``)."""
    return sum(c["points"] for c in _cells(course / "source" / lesson.slug / lesson.notebook)
               if not c.get("solution") and c["grade_id"].startswith(prefix))


def expected_autograded(learner: str, lesson: Lesson, course: Path) -> float:
    mistake = MISTAKES.get(learner)
    if learner == BLANK:
        return 0.0
    lost = autograded_points(lesson, course, mistake.cell + "_") if mistake and mistake.lesson == lesson.number else 0.0
    return autograded_points(lesson, course) - lost


def _work(learner: str, course: Path) -> dict:
    """What a learner writes into each fetched assignment: the notebook with every stub filled in,
    and each owned module's stub filled with the reference's bodies (a mutated one for a mistake)."""
    if learner == BLANK:
        return {}
    work = {}
    for lesson in GRADED:
        source, release = course / "source" / lesson.slug, course / "release" / lesson.slug
        notebook = fill_notebook(nbformat.read(release / lesson.notebook, as_version=4),
                                 nbformat.read(source / lesson.notebook, as_version=4))
        files = {lesson.notebook: nbformat.writes(notebook)}
        mistake = MISTAKES.get(learner)
        for module in lesson.modules:
            wrong = mistake is not None and mistake.lesson == lesson.number
            reference = mutated_source(mistake) if wrong else (paths.REFERENCE_MODULES / f"{module}.py").read_text()
            files[f"{module}.py"] = fill((release / f"{module}.py").read_text(), reference)
        work[lesson.slug] = files
    return work


@dataclass
class Class:
    """Everything the class left behind, read before the accounts went."""

    course: Path
    grade: subprocess.CompletedProcess
    feedback: subprocess.CompletedProcess
    report: dict  # (learner, slug) -> row of grading_report.csv
    exported: list  # rows of grades.csv as `grade` exported them (autograded only)
    final: list  # rows of the export after hand grading
    pages: dict  # (learner, slug) -> the feedback page the learner fetched (HTML)
    inbound_owners: dict  # learner -> owners (uids) of their files in the exchange's inbound
    uids: dict
    seconds: dict = field(default_factory=dict)


@pytest.fixture(scope="module")
def taken(built_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("class") / "course"
    shutil.copytree(built_course, course)
    slugs = [lesson.slug for lesson in GRADED]
    seconds, clock = {}, time.perf_counter()

    def lap(name):
        nonlocal clock
        seconds[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    with Classroom.open(LEARNERS) as room:
        room.instructor("ReleaseAssignment", course, slugs)
        for learner in LEARNERS:
            room.learner(learner, "submit", slugs, _work(learner, course))
        inbound = room.exchange / "attention-course" / "inbound"
        owners = {learner: {path.stat().st_uid for path in inbound.glob(f"{learner}+*/**/*")} for learner in LEARNERS}
        uids = {learner: room.home(learner).stat().st_uid for learner in LEARNERS}
        room.instructor("Collect", course, slugs)
        lap("release, fetch, submit, collect")

        env = {**os.environ, "ATTNLAB_REFERENCE": "all", "OMP_NUM_THREADS": "1"}
        graded = subprocess.run([sys.executable, "-m", "autograder", "grade", "--course", str(course), "--jobs", "2"],
                                cwd=paths.ROOT, capture_output=True, text=True, env=env, timeout=3000)
        print(graded.stdout[-6000:], graded.stderr[-3000:])
        lap("grade")
        with (course / "grading_report.csv").open() as handle:
            report = {(row["student"], row["assignment"]): row for row in csv.DictReader(handle)}
        with (course / "grades.csv").open() as handle:
            exported = list(csv.DictReader(handle))

        # The instructor grades the written answers: full marks where one was written.
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            for learner in LEARNERS:
                for slug in slugs:
                    for notebook in gradebook.find_submission(slug, learner).notebooks:
                        for grade in notebook.grades:
                            if grade.needs_manual_grade:
                                grade.manual_score = 0.0 if learner == BLANK else grade.max_score
            gradebook.db.commit()
        final_csv = course / "grades_after_hand_grading.csv"
        export = nbgrader(course, "export", "--to", str(final_csv))
        assert export.returncode == 0, export.output[-3000:]
        with final_csv.open() as handle:
            final = list(csv.DictReader(handle))

        made = subprocess.run([sys.executable, "-m", "autograder", "feedback", "--course", str(course)],
                              cwd=paths.ROOT, capture_output=True, text=True, timeout=1200)
        lap("hand grading, export, feedback")
        room.instructor("ReleaseFeedback", course, slugs)
        pages = {}
        for learner in LEARNERS:
            room.learner(learner, "feedback", slugs)
            for lesson in GRADED:
                found = sorted(room.home(learner).glob(f"{lesson.slug}/feedback/*/{Path(lesson.notebook).stem}.html"))
                if found:
                    pages[(learner, lesson.slug)] = found[-1].read_text()
        lap("feedback returned and fetched")
    print("class test, seconds per phase:", {k: round(v, 1) for k, v in seconds.items()})
    return Class(course, graded, made, report, exported, final, pages, owners, uids, seconds)


def test_every_submission_came_through_the_exchange_and_was_graded(taken):
    assert taken.grade.returncode == 0, taken.grade.stdout[-3000:] + taken.grade.stderr[-3000:]
    for learner in LEARNERS:  # the exchange holds each learner's files as theirs: nobody submits for another
        assert taken.inbound_owners[learner] == {taken.uids[learner]}, learner
    assert sorted(taken.report) == sorted((learner, lesson.slug) for learner in LEARNERS for lesson in GRADED)
    statuses = {key: row["status"] for key, row in taken.report.items()}
    assert set(statuses.values()) == {"graded"}, {k: (v, taken.report[k]["notes"]) for k, v in statuses.items()
                                                  if v != "graded"}


def test_the_exported_grades_have_one_row_per_learner_and_lesson_with_the_right_scores(taken):
    graded = {lesson.slug for lesson in GRADED}
    for every, hand_graded in ((taken.exported, False), (taken.final, True)):
        # nbgrader exports every assignment of the gradebook: lesson 00 too, which has no points
        assert all(float(row["max_score"]) == 0 for row in every if row["assignment"] not in graded)
        rows = [row for row in every if row["assignment"] in graded]
        by_key = {(row["student_id"], row["assignment"]): row for row in rows}
        assert len(rows) == len(by_key) == len(LEARNERS) * len(GRADED), len(rows)
        for learner in LEARNERS:
            for lesson in GRADED:
                row = by_key[(learner, lesson.slug)]
                expected = expected_autograded(learner, lesson, taken.course)
                if hand_graded and learner != BLANK:
                    expected += lesson.points - autograded_points(lesson, taken.course)
                assert float(row["max_score"]) == lesson.points, row
                assert float(row["score"]) == pytest.approx(expected), (learner, lesson.slug, row)


def test_the_report_keeps_autograded_points_apart_from_hand_grading(taken):
    for lesson in GRADED:
        auto = autograded_points(lesson, taken.course)
        row = taken.report[(CORRECT, lesson.slug)]
        assert float(row["autograded"]) == float(row["autograded_max"]) == auto > 0, row
        assert float(row["awaiting_hand_grading"]) == lesson.points - auto > 0, row
        assert "await hand grading" in row["notes"], row
        assert f"{auto:g}/{auto:g} autograded, {lesson.points - auto:g} points await hand grading" in taken.grade.stdout


def test_the_untouched_release_gets_zero_with_the_stubs_message(taken):
    for lesson in GRADED:
        row = taken.report[(BLANK, lesson.slug)]
        assert float(row["autograded"]) == 0.0 and row["status"] == "graded", row
        assert f'raised "NotImplementedError: Lesson {lesson.number}' in row["notes"], row
        assert "nbgrader" not in row["notes"], row


@pytest.mark.parametrize("learner", list(MISTAKES))
def test_a_mistake_costs_exactly_the_cells_of_its_exercise(taken, learner):
    mistake = MISTAKES[learner]
    for lesson in GRADED:
        got = float(taken.report[(learner, lesson.slug)]["autograded"])
        if lesson.number == mistake.lesson:
            assert 0 < got == expected_autograded(learner, lesson, taken.course) < autograded_points(lesson, taken.course)
        else:
            assert got == autograded_points(lesson, taken.course), (lesson.slug, taken.report[(learner, lesson.slug)])


def test_every_learner_fetches_a_page_for_every_lesson_through_the_exchange(taken):
    assert taken.feedback.returncode == 0, taken.feedback.stdout[-3000:] + taken.feedback.stderr[-3000:]
    missing = [(learner, lesson.slug) for learner in LEARNERS for lesson in GRADED if (learner, lesson.slug) not in taken.pages]
    assert not missing, missing


def test_the_correct_and_the_blank_pages_say_so(taken):
    for lesson in GRADED:
        correct = page_text(taken.pages[(CORRECT, lesson.slug)])
        assert "Trusted check: passed" in correct, lesson.slug
        assert "TrustedCheckFailed" not in correct and "Trusted check failed" not in correct, lesson.slug
        blank = page_text(taken.pages[(BLANK, lesson.slug)])
        # the case, then the stub's own words (quoted, cut at a hundred characters)
        assert re.search(rf'(TrustedCheckFailed|Trusted check failed): \w+ \(.*?\): raised "NotImplementedError: '
                         rf'Lesson {lesson.number}: \w+(\.\w+)?\(\) in attnlab/{lesson.modules[0]}\.py is not', blank), lesson.slug


@pytest.mark.parametrize("learner", list(MISTAKES))
def test_a_mistakes_page_names_the_failing_case_and_the_mistake_in_words(taken, learner):
    """The page of the lesson with the mistake shows, for every cell it failed, the trusted case
    that failed and why (the same words the grading comparison gives in this process), and, in the
    learner's notebook as the grader ran it, the visible check's diagnosis of the mistake (the
    mutation table's ``says``); no traceback."""
    mistake = MISTAKES[learner]
    slug = next(lesson.slug for lesson in GRADED if lesson.number == mistake.lesson)
    page = page_text(taken.pages[(learner, slug)])
    expected = verdicts(mistake.lesson, mutated_source(mistake))
    failing = {grade_id: why for grade_id, why in expected.trusted.items() if why}
    assert failing and all(grade_id.startswith(mistake.cell + "_") for grade_id in failing), failing
    for grade_id, label_why in failing.items():  # "label: why", shown as "TrustedCheckFailed: target (label): why"
        shown = [f"({label_why[:i]}): {label_why[i + 2:]}" for i in range(len(label_why)) if label_why.startswith(": ", i)]
        assert any(text in page for text in shown), (grade_id, label_why)
    assert "could not run your" not in page, "the grader's own page: the notebook did not run to the end"
    assert re.search(mistake.says, " ".join(page.split()), re.I), mistake.says
    assert "Traceback (most recent call last)" not in page
    for lesson in GRADED:
        if lesson.slug != slug:
            assert "TrustedCheckFailed" not in page_text(taken.pages[(learner, lesson.slug)]), lesson.slug


def test_no_page_shows_a_hidden_test_or_another_secret(taken):
    for lesson in GRADED:
        secrets = secrets_for(taken.course, lesson.slug)
        assert secrets
        for learner in LEARNERS:
            assert not page_leaks(taken.pages[(learner, lesson.slug)], secrets), (learner, lesson.slug)


def test_the_class_report_and_the_lms_export_read_this_class(taken):
    """``autograder report`` and ``export`` over the class graded for real above (after hand
    grading): every learner passed every autograded cell but the blank one, and each mistake fails
    exactly the cells of its exercise; the Moodle export's lesson columns are nbgrader's own."""
    from autograder import lms_export, report

    assert report.report(taken.course) == 0
    with (taken.course / "report" / "exercises.csv").open() as handle:
        exercises = [row for row in csv.DictReader(handle) if row["kind"] == "autograded"]
    assert {row["lesson"] for row in exercises} == {lesson.slug for lesson in GRADED}
    for row in exercises:
        lesson = next(lesson for lesson in GRADED if lesson.slug == row["lesson"])
        failing = {learner for learner, mistake in MISTAKES.items()
                   if mistake.lesson == lesson.number and row["cell"].startswith(mistake.cell + "_")}
        assert int(row["submissions"]) == len(LEARNERS), row
        assert int(row["passed"]) == len(LEARNERS) - 1 - len(failing), row  # the blank learner fails them all
    assert "<img" in (taken.course / "report" / "index.html").read_text()

    out = taken.course / "grades-moodle.csv"
    assert lms_export.export(taken.course, "moodle", out) == 0
    with out.open() as handle:
        moodle = {row["Username"]: row for row in csv.DictReader(handle)}
    assert sorted(moodle) == sorted(LEARNERS)
    graded = {lesson.slug for lesson in GRADED}  # the export's columns: the graded lessons
    assert [name for name in next(iter(moodle.values())) if name in graded or name.startswith("0")] == \
        [lesson.slug for lesson in GRADED]
    for row in taken.final:  # nbgrader export after hand grading
        if row["assignment"] in graded:
            assert float(moodle[row["student_id"]][row["assignment"]]) == pytest.approx(float(row["score"])), row
