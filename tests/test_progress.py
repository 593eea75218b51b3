"""attnlab.progress(): the blank stubs (nothing written), the references copied in (all written), a
mix (written, failing, borrowed, not written), one lesson's row, and no file changed."""

from __future__ import annotations

import hashlib
import json
import shutil

from attnlab.lessons import LESSONS
from autograder import paths

RUN = ("import attnlab, json\n{before}\n"
       "table = attnlab.progress({lesson})\n"
       "print(json.dumps([[r.lesson, r.exercise, r.status, r.detail] for r in table.rows]))\n"
       "print(str(table).splitlines()[-1]); assert '<table>' in table._repr_html_()")


def _table(python, cwd=None, before="", lesson=""):
    done = python(RUN.format(before=before, lesson=lesson), cwd=cwd)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    return {tuple(row[:2]): (row[2], row[3]) for row in json.loads(lines[-2])}, lines[-1]


def _fingerprint():
    digest = {}
    for folder in (paths.NOTEBOOKS, paths.LIBRARY, paths.SOLUTIONS):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def test_blank_stubs_mean_nothing_is_written(python):
    before = _fingerprint()
    table, summary = _table(python)
    graded = {lesson.number for lesson in LESSONS if lesson.modules}
    assert {lesson for lesson, _ in table} == graded
    assert {status for status, _ in table.values()} == {"not written yet"}, table
    assert summary.startswith(f"0 of {len(table)} exercises written")
    assert _fingerprint() == before, "progress() changed a file"


def test_references_copied_in_mean_everything_is_written(python, tmp_path):
    for reference in paths.REFERENCE_MODULES.glob("*.py"):
        shutil.copy(reference, tmp_path / reference.name)  # modules beside the working folder win
    table, summary = _table(python, cwd=tmp_path)
    assert {status for status, _ in table.values()} == {"written"}, table
    assert summary == f"{len(table)} of {len(table)} exercises written"


def test_a_mix_and_one_lesson(python, tmp_path):
    reference = (paths.REFERENCE_MODULES / "attention.py").read_text()
    broken = reference.replace("shifted = x - x.amax(dim=dim, keepdim=True)", "shifted = x")
    broken = broken.replace("return exps / exps.sum(dim=dim, keepdim=True)", "return exps")
    assert broken != reference
    (tmp_path / "attention.py").write_text(broken)
    shutil.copy(paths.REFERENCE_MODULES / "additive.py", tmp_path / "additive.py")
    table, _ = _table(python, cwd=tmp_path, before="attnlab.use_reference('flash', quiet=True)")
    assert table[("01", "additive_scores")][0] == "written"
    status, detail = table[("02", "softmax")]
    assert status == "failing" and "softmax" in detail, (status, detail)
    assert table[("02", "attention_numpy")][0] == "written"
    assert table[("09", "online_softmax")] == ("borrowed", "attnlab.use_own('flash') switches back")
    one, _ = _table(python, cwd=tmp_path, lesson="'02'")
    assert {lesson for lesson, _ in one} == {"02"}


def test_lesson_00_shows_the_whole_table_and_every_lesson_ends_with_its_own_rows():
    import nbformat

    for lesson in LESSONS:
        for folder in (paths.SOLUTION_NOTEBOOKS, paths.NOTEBOOKS):
            code = [c.source.strip() for c in nbformat.read(folder / lesson.notebook, as_version=4).cells
                    if c.cell_type == "code"]
            if lesson.number == "00":
                assert "attnlab.progress()" in code, f"{folder.name}/{lesson.notebook} does not show progress()"
            else:
                assert code[-1] == f'attnlab.progress("{lesson.number}")', \
                    f"{folder.name}/{lesson.notebook}: the last code cell is {code[-1][:60]!r}"


def test_the_course_model_borrowing_on_its_own_is_not_the_learners_borrowing(python):
    """zoo.load() on blank stubs runs the course model on the references of lessons 03 to 07; the
    learner borrowed nothing, so progress still checks their own (blank) code and says why the
    reference ran. A module the learner borrows themselves stays 'borrowed'."""
    before = "from attnlab import zoo\nzoo.load(verbose=False)\nattnlab.use_reference('feedforward', quiet=True)"
    table, summary = _table(python, before=before)
    note = "the course model ran on the reference"
    for lesson in ("04", "07"):
        rows = {key: value for key, value in table.items() if key[0] == lesson}
        assert rows and all(value == ("not written yet", "") for value in rows.values()), rows
    assert table[("06", "LayerNorm")] == ("borrowed", "attnlab.use_own('feedforward') switches back")
    done = python("import attnlab\nfrom attnlab import zoo\nzoo.load(verbose=False)\n"
                  "print(attnlab.progress('04'))")
    assert done.returncode == 0, done.stderr
    assert f"not written yet ({note})" in done.stdout, done.stdout
    assert "borrowed" not in done.stdout, done.stdout
    assert summary.startswith("0 of ")


def test_the_whole_course_is_one_line_per_lesson_and_one_lesson_is_row_by_row():
    """Lesson 00 shows the whole course: one line per lesson, saying where it stands; a lesson's
    own table, progress("02"), keeps one row per exercise."""
    from attnlab.progress import Progress, Row, lesson_summary

    failing = "weights do not sum to 1 along the key axis"
    rows = [Row("01", "additive_scores", "not written yet"), Row("01", "additive_attention", "not written yet"),
            Row("02", "softmax", "failing", failing), Row("02", "attention_numpy", "written"),
            Row("02", "scaled_dot_product_attention", "not written yet"),
            Row("09", "online_softmax", "borrowed", "attnlab.use_own('flash') switches back")]
    assert lesson_summary(rows[:2]) == "2 exercises: not written yet"
    assert lesson_summary(rows[2:5]) == (f"1 of 3 exercises written; failing: softmax ({failing}); "
                                         "not written yet: scaled_dot_product_attention")
    assert lesson_summary(rows[5:]) == "1 exercise: borrowed; attnlab.use_own('flash') switches back"
    whole = Progress(rows)
    text = str(whole).splitlines()
    assert text[1:4] == ["01      2 exercises: not written yet", f"02      {lesson_summary(rows[2:5])}",
                         f"09      {lesson_summary(rows[5:])}"], text
    assert text[-1] == "1 of 6 exercises written, 3 not written yet, 1 failing, 1 borrowed"
    page = whole._repr_html_()
    assert page.count("<tr><td>") == 3 and "Scaled dot-product attention" in page and html_escape(failing) in page
    one = str(Progress(rows[2:5])).splitlines()
    assert len(one) == 1 + 3 + 2 and one[1].split() == ["02", "softmax", "failing:", *failing.split()]
    assert Progress(rows[2:5])._repr_html_().count("<tr><td>") == 3
    # the notes of one lesson's rows ("the course model ran on the reference") survive the grouping
    noted = [Row("04", name, "not written yet", note="the course model ran on the reference") for name in "ab"]
    assert lesson_summary(noted) == "2 exercises: not written yet (the course model ran on the reference)"


def html_escape(text):
    import html

    return html.escape(text)


def test_a_lesson_whose_rows_all_agree_is_said_once():
    from attnlab.progress import Row, lesson_summary

    use_own = "attnlab.use_own('additive') switches back"
    borrowed = [Row("01", name, "borrowed", use_own) for name in ("additive_scores", "AdditiveAttention")]
    assert lesson_summary(borrowed) == f"2 exercises: borrowed; {use_own}"


def test_a_triton_kernel_is_still_checked_after_lesson_00s_environment_report(python, tmp_path):
    """Lesson 00 asks bench.environment_report() (which imports Triton, for its version) before
    progress(): Triton's mode is fixed when it is imported, so without a GPU the report must turn its
    interpreter on first, or a learner's correct Triton kernel reads as failing."""
    shutil.copy(paths.REFERENCE_MODULES / "flash.py", tmp_path / "flash.py")
    done = python("import attnlab\nfrom attnlab.bench import environment_report\nenvironment_report()\n"
                  "print(attnlab.progress('09'))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("3 of 3 exercises written"), done.stdout
