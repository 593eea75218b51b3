"""What no feedback page may show, and finding it however it is disguised.

The secrets of an assignment: the lines inside the hidden-test regions of its instructor notebooks,
the lines of the lesson's trusted cases (``autograder/cases/lessonNN.py``), the gradebook's
password and the values of the grader's environment that look like secrets (tokens, keys,
passwords). A line that the released assignment already shows (the notebook learners got, its
modules) is no secret, whatever region it also sits in, and is left out.

Searching first normalizes the text the way a reader would see it (no tags, no zero-width or other
invisible characters, compatibility forms folded, whitespace ignored, so a line split over several
lines still matches) and also searches inside anything that decodes as base64, twice over.
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

from autograder import paths

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|AUTH|COOKIE|CREDENTIAL|SESSION", re.I)
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")


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


def normalize_keep_space(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) not in ("Cf", "Co", "Cn") or ch in "\n\t")


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


def released_text(release: Path) -> str:
    """Everything the released assignment in ``release`` shows a learner (the notebooks' cells,
    the other files' text), normalized as ``leaks`` normalizes what it searches."""
    parts = []
    for path in sorted(release.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".ipynb":
            try:
                notebook = nbformat.read(path, as_version=4)
            except Exception:  # noqa: BLE001 (an unreadable file shows nothing)
                continue
            parts += [cell.source for cell in notebook.cells]
        else:
            parts.append(path.read_text(errors="replace"))
    return normalize("\n".join(parts))


def secrets_for(course: Path, assignment: str, gradebook_password: str | None = None) -> dict[str, str]:
    """Everything no feedback page of ``assignment`` may show, each with how to name it (lines by
    themselves; passwords and environment values never, even to the instructor's console), less
    what the released assignment already shows."""
    found = {line: line for line in case_lines(assignment.split("_", 1)[0])}
    for notebook in sorted((course / "source" / assignment).glob("*.ipynb")):
        found.update({line: line for line in hidden_lines(notebook)})
    found.update({value: "a value of the grader's environment" for value in environment_secrets()})
    if gradebook_password:
        found[gradebook_password] = "the gradebook's password"
    shown = released_text(course / "release" / assignment)
    return {secret: label for secret, label in found.items() if normalize(secret) not in shown}


def page_leaks(page: str, secrets: dict[str, str]) -> list[str]:
    """What an HTML page shows of ``secrets``: in its text, and in base64 anywhere in it (an image's
    data URI is not text on the page, but anybody who saves the page can decode it)."""
    found = leaks(page_text(page), secrets)
    hidden = "\n".join(decoded_parts(page))
    return found + [label for label in leaks(hidden, secrets) if label not in found] if hidden else found


def scan_pages(folder: Path, secrets: dict[str, str]) -> dict[Path, list[str]]:
    """Each feedback page under ``folder`` that shows a secret, with what it shows."""
    bad = {}
    for page in sorted(folder.rglob("*.html")):
        found = page_leaks(page.read_text(errors="replace"), secrets)
        if found:
            bad[page] = found
    return bad
