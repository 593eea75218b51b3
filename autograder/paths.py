"""Where things are in a clone of the course."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
# Instructor notebooks sit in their own folder: a kernel started beside solutions/attnlab/ would
# import that folder (no __init__.py) as a namespace package instead of the installed attnlab.
SOLUTION_NOTEBOOKS = SOLUTIONS / "notebooks"
REFERENCE_MODULES = SOLUTIONS / "attnlab"
NOTEBOOKS = ROOT / "notebooks"
LIBRARY = ROOT / "src" / "attnlab"
NBGRADER_CONFIG = ROOT / "autograder" / "nbgrader_config.py"
