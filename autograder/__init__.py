"""The course tool: ``python -m autograder release|build|grade|feedback``."""
