"""The course's nbgrader settings, loaded by every course directory that ``build`` makes.

What differs between lessons comes from the ownership manifest (``attnlab.lessons``), never from
a second list kept here.
"""

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

from attnlab.lessons import LESSONS
from autograder.execute import BoundedExecute
from autograder.feedback import HideHiddenTests
from autograder.scrub import ScrubLeaks

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "attention-course"

# A lesson's learners submit the modules it owns beside the notebook; autograde must keep those and
# replace every other file with the source version (the reference), which isolates the lesson.
c.Autograde.exclude_overwriting = {
    lesson.slug: [f"{module}.py" for module in lesson.modules] for lesson in LESSONS
}

# Execution during autograde: a cell that runs too long is interrupted and recorded as an error,
# and the remaining cells still run (nbgrader's Execute always allows errors; interrupting is its
# default, stated here because grading relies on it).
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
# nbgrader's own pipeline, with Execute replaced by one that caps output bytes (per cell and per
# notebook) and records timeouts as data (autograder.execute).
c.Autograde.autograde_preprocessors = [
    BoundedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
    AssignLatePenalties, CheckCellMetadata,
]

# Feedback shows neither hidden tests nor their output, and nothing else the grader keeps hidden
# (see autograder.feedback and autograder.scrub).
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, ScrubLeaks, CSSHTMLHeaderPreprocessor]
