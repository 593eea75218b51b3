"""``python -m autograder feedback``: feedback pages that hold no secret, or none at all.

nbgrader's feedback is the autograded notebook rendered to HTML. Hidden-test cells carry no test
code (only a marker; the trusted cases score them outside the notebook) and the grader has written
each trusted verdict into its cell. ``HideHiddenTests`` (installed in
``GenerateFeedback.preprocessors`` by the course's nbgrader config) removes the marker region and
keeps only the grader's verdict as the cell's output.

Feedback fails closed. Pages are generated one submission at a time, so one that nbgrader cannot
render stops no other; then every page is scanned, whatever happened before, for secrets: the
hidden regions of the instructor notebooks, the lesson's trusted cases and the grader's own
environment values (tokens, keys, passwords). The scan first normalizes the text the way a reader
would see it (no tags, no zero-width or other invisible characters, compatibility forms folded,
whitespace ignored) and also searches inside anything that decodes as base64. A page that fails
is deleted, never released, and the command exits non-zero naming the submission.
"""

from __future__ import annotations

import base64
import binascii
import html
import os
import re
import unicodedata
from pathlib import Path

import nbformat
from nbformat.v4 import new_output
from nbgrader.preprocessors import ClearHiddenTests

from autograder import paths
from autograder.course import nbgrader

HIDDEN_PASSED = "Hidden tests: passed."
HIDDEN_FAILED = "Hidden tests: at least one failed. Their code stays hidden; check your function against the lesson's visible checks and the cases its docstring names."
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|AUTH|COOKIE|CREDENTIAL|SESSION", re.I)


class HideHiddenTests(ClearHiddenTests):
    """Clears the hidden region of each graded test cell and shows only the grader's verdict."""

    def preprocess_cell(self, cell, resources, cell_index):
        meta = cell.metadata.get("nbgrader", {})
        graded_test = cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")
        if not graded_test or self.begin_test_delimeter not in cell.source:
            return cell, resources  # a learner's own cell may quote a marker: it is just text
        try:
            self._remove_hidden_test_region(cell)
        except Exception:  # noqa: BLE001 (an unbalanced region: show nothing of the cell's code)
            cell.source = "# Hidden tests"
        verdicts = [o for o in cell.get("outputs", []) if _is_verdict(o)]
        if not verdicts:  # no trusted verdict was written: say what the score says
            passed = meta.get("score") is not None and meta.get("score") == meta.get("points")
            verdicts = [new_output("stream", name="stdout", text=HIDDEN_PASSED if passed else HIDDEN_FAILED)]
        cell.outputs = verdicts
        return cell, resources


def _is_verdict(output) -> bool:
    """An output the grader wrote (``autograder.grade.verdict_output``)."""
    return output.get("ename") == "TrustedCheckFailed" or (
        output.get("output_type") == "stream" and str(output.get("text", "")).startswith("Trusted check:"))


# --- the scan -----------------------------------------------------------------------------------

def hidden_lines(notebook: Path, min_length: int = 12) -> set[str]:
    """Distinctive lines inside the hidden-test regions of an instructor notebook."""
    lines: set[str] = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) >= min_length:
                lines.add(line.strip())
    return lines


def case_lines(lesson_number: str, min_length: int = 30) -> set[str]:
    """Distinctive lines of a lesson's trusted cases (what a submission must never see)."""
    path = paths.ROOT / "autograder" / "cases" / f"lesson{lesson_number}.py"
    if not path.is_file():
        return set()
    return {line.strip() for line in path.read_text().splitlines()
            if len(line.strip()) >= min_length and not line.strip().startswith(("#", "import ", "from ", '"""'))}


def environment_secrets(environ: dict[str, str] | None = None) -> set[str]:
    """Values of the grader's environment that must not show: those of variables whose names say
    secret (token, key, password...), and any long token-like value."""
    environ = dict(os.environ if environ is None else environ)
    found = set()
    for name, value in environ.items():
        value = value.strip()
        if _SECRET_NAME.search(name) and len(value) >= 6:
            found.add(value)
        elif len(value) >= 24 and re.fullmatch(r"[A-Za-z0-9+/=_\-.]+", value) and not value.startswith(("/", ".")):
            found.add(value)
    return found


def page_text(page: str) -> str:
    """The text of an HTML page as a reader sees it: highlighted code splits a line into many
    tags, so tags are dropped and entities decoded before lines are searched for."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def normalize(text: str) -> str:
    """Fold compatibility forms, drop invisible characters (zero-width, bidi marks, other format
    characters and controls) and all whitespace, so that disguised text compares equal."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if not ch.isspace() and unicodedata.category(ch) not in ("Cf", "Cc", "Co", "Cn"))


_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


def decoded_parts(text: str, depth: int = 2) -> list[str]:
    """Pieces of ``text`` that decode as base64 (standard or URL-safe) to readable text, decoded;
    decoded again up to ``depth`` times."""
    found = []
    for match in _BASE64.finditer(text):
        chunk = match.group(0)
        for decoder in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                data = decoder(chunk + "=" * (-len(chunk) % 4))
                decoded = data.decode("utf-8")
            except (binascii.Error, ValueError, UnicodeDecodeError):
                continue
            if decoded and sum(ch.isprintable() or ch.isspace() for ch in decoded) >= 0.9 * len(decoded):
                found.append(decoded)
                if depth > 1:
                    found += decoded_parts(normalize_keep_space(decoded), depth - 1)
                break
    return found


def normalize_keep_space(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) not in ("Cf", "Co", "Cn") or ch in "\n\t")


def leaks(text: str, secrets: dict[str, str] | set[str]) -> list[str]:
    """What ``text`` (a page's visible text) shows of ``secrets``, disguised or not: the label of
    each secret found (``secrets`` maps a secret to how to name it; a set names it by itself)."""
    secrets = secrets if isinstance(secrets, dict) else {secret: secret for secret in secrets}
    visible = normalize_keep_space(text)
    haystacks = [normalize(visible)] + [normalize(part) for part in decoded_parts(visible)]
    found = []
    for secret in sorted(secrets):
        needle = normalize(secret)
        if needle and any(needle in haystack for haystack in haystacks):
            found.append(secrets[secret])
    return found


def secrets_for(course: Path, assignment: str) -> dict[str, str]:
    """Everything no feedback page of ``assignment`` may show, each with how to name it (lines by
    themselves; environment values never, even to the instructor's console)."""
    found = {line: line for line in case_lines(assignment.split("_", 1)[0])}
    for notebook in sorted((course / "source" / assignment).glob("*.ipynb")):
        found.update({line: line for line in hidden_lines(notebook)})
    found.update({value: "a value of the grader's environment" for value in environment_secrets()})
    return found


def scan_pages(folder: Path, secrets: dict[str, str]) -> dict[Path, list[str]]:
    """Each feedback page under ``folder`` that shows a secret, with what it shows."""
    bad = {}
    for page in sorted(folder.rglob("*.html")):
        found = leaks(page_text(page.read_text(errors="replace")), secrets)
        if found:
            bad[page] = found
    return bad


def _students(course: Path, assignment: str) -> list[str]:
    return sorted(p.parent.name for p in (course / "autograded").glob(f"*/{assignment}") if p.is_dir())


def feedback(course: Path, assignments: list[str]) -> int:
    """Generate and scan feedback for ``assignments`` in ``course``; 1 if any page could not be made
    or was withheld."""
    status = 0
    for assignment in assignments:
        secrets = secrets_for(course, assignment)
        students = _students(course, assignment)
        if not students:
            print(f"{assignment}: nothing autograded yet")
            continue
        for student in students:
            run = nbgrader(course, "generate_feedback", assignment, "--student", student, "--force")
            if run.returncode != 0:
                status = 1
                errors = [line for line in run.output.splitlines() if "ERROR" in line or "Error" in line]
                print(f"{assignment} {student}: nbgrader generate_feedback failed (exit {run.returncode}): "
                      f"{(errors or ['see nbgrader output'])[-1][:200]}")
        released = 0
        for student in students:  # every page is scanned, whether or not this run made it
            for page, found in scan_pages(course / "feedback" / student / assignment, secrets).items():
                page.unlink()
                status = 1
                print(f"{assignment} {student}: feedback withheld, {page.name} showed {len(found)} secret "
                      f"line(s) (first: {found[0][:60]!r}); the page was deleted")
            released += len(list((course / "feedback" / student / assignment).glob("*.html")))
        print(f"{assignment}: {released} feedback page(s) under {course / 'feedback'}, each scanned")
    return status
