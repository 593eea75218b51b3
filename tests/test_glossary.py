"""The course glossary: every term a lesson lists is defined once, every defined term is used, and
the release step writes the definitions into the notebooks learners get."""

from __future__ import annotations

import nbformat
import pytest

import attnlab
from attnlab import glossary
from attnlab.lessons import LESSONS
from autograder import paths
from autograder.release import learner_notebook


def _listed(lesson) -> list[str]:
    return glossary.listed_terms(nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, as_version=4))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.slug)
def test_each_lesson_opens_with_its_words_and_each_is_defined(lesson):
    names = _listed(lesson)
    assert len(names) >= 3, f"{lesson.notebook}: a 'Words in this lesson' box with at least 3 terms"
    for name in names:
        glossary.lookup(name)  # raises, naming the term, if it is not defined
    first_code = next(i for i, c in enumerate(nbformat.reads(learner_notebook(paths.SOLUTION_NOTEBOOKS / lesson.notebook), 4).cells)
                      if c.cell_type == "code")
    box = next(i for i, c in enumerate(nbformat.read(paths.SOLUTION_NOTEBOOKS / lesson.notebook, 4).cells)
               if "glossary" in c.metadata.get("attnlab", {}))
    assert box < first_code, "the box comes before the first code cell"


def test_every_defined_term_is_used_by_some_lesson_and_defined_once():
    used = {glossary.lookup(name).name for lesson in LESSONS for name in _listed(lesson)}
    defined = [term.name for term in glossary.TERMS]
    assert sorted(set(defined) - used) == []
    assert len(defined) == len({name.lower() for name in defined}), "a term is defined twice"
    for term in glossary.TERMS:
        assert term.definition.endswith(".") and 20 <= len(term.definition) <= 400, term
        assert any(lesson.number == term.lesson for lesson in LESSONS), term


def test_release_writes_the_definitions_into_the_learner_notebook():
    for lesson in LESSONS:
        names = _listed(lesson)
        if not names:
            continue
        cells = nbformat.reads(learner_notebook(paths.SOLUTION_NOTEBOOKS / lesson.notebook), 4).cells
        box = next(c for c in cells if "glossary" in c.metadata.get("attnlab", {}))
        for name in names:
            term = glossary.lookup(name)
            assert f"**{term.name}**" in box.source and term.definition in box.source


def test_lookup_is_forgiving_and_helpful():
    term = glossary.TERMS[0] if glossary.TERMS else None
    if term is not None:
        assert attnlab.glossary(term.name.upper()) == term
        assert str(term).startswith(f"{term.name} (lesson {term.lesson}): ")
    with pytest.raises(KeyError, match="not in the course glossary"):
        attnlab.glossary("flux capacitor")
