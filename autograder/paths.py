"""Where things are in a clone of the course."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
REFERENCE_MODULES = SOLUTIONS / "attnlab"
NOTEBOOKS = ROOT / "notebooks"
LIBRARY = ROOT / "src" / "attnlab"
NBGRADER_CONFIG = ROOT / "autograder" / "nbgrader_config.py"
