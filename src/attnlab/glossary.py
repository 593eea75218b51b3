"""The course glossary: every term a lesson introduces, defined once, with the lesson that teaches it.

``attnlab.glossary.lookup("KV cache")`` (or ``attnlab.glossary("KV cache")`` from a notebook) gives
the definition and the lesson. Each lesson opens with a "Words in this lesson" box: a markdown cell
of the instructor notebook whose metadata lists the terms (``{"attnlab": {"glossary": [...]}}``);
``python -m autograder release`` and ``build`` fill the box from this table, so a definition is
written in one place only. A test checks that every listed term is defined here and that every term
here is listed by some lesson.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["TERMS", "Term", "box_markdown", "lookup"]


@dataclass(frozen=True)
class Term:
    """A word of the course: its name, a one- or two-sentence definition, the lesson that teaches it."""

    name: str
    definition: str
    lesson: str  # two-digit lesson number


# Lessons add their terms under their own heading; keep each definition to one or two plain
# sentences a newcomer can read without the lesson.
TERMS: tuple[Term, ...] = (
    # -- lesson 00 --
    # -- lesson 01 --
    # -- lesson 02 --
    # -- lesson 03 --
    # -- lesson 04 --
    # -- lesson 05 --
    # -- lesson 06 --
    # -- lesson 07 --
    # -- lesson 08 --
    # -- lesson 09 --
)


def _key(name: str) -> str:
    return " ".join(name.lower().replace("-", " ").split())


def lookup(name: str) -> Term:
    """The term called ``name`` (case, hyphens and spacing ignored); a KeyError suggests near names."""
    wanted = _key(name)
    for term in TERMS:
        if _key(term.name) == wanted:
            return term
    close = difflib.get_close_matches(wanted, [_key(t.name) for t in TERMS], n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise KeyError(f"{name!r} is not in the course glossary{hint}")


def box_markdown(names: list[str], lesson: str) -> str:
    """The "Words in this lesson" box for ``names``: each term with its definition; a term taught
    in another lesson says where."""
    lines = ["**Words in this lesson**", ""]
    for name in names:
        term = lookup(name)
        where = "" if term.lesson == lesson else f" *(from lesson {term.lesson})*"
        lines.append(f"- **{term.name}**{where}: {term.definition}")
    return "\n".join(lines)
