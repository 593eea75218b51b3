"""Run ``nbgrader autograde`` for one submission and save what happened as data.

``python -m autograder.autograde_run RESULT.json -- NBGRADER-AUTOGRADE-ARGS...`` runs in the scratch
course (its working directory) and writes, whatever happens:

- ``status``: "ok", or the exit status / exception that stopped nbgrader;
- ``exceptions``: the types (module and name) of the exceptions nbgrader reported while handling
  them: grader-side classes such as ``nbclient.exceptions.CellTimeoutError``, never text;
- ``events``: what ``autograder.execute.BoundedExecute`` recorded (timeouts, truncated outputs).

nbgrader's log still goes to standard error, for the grading log. The grader reads notes from this
file only: a kernel runs sandboxed and writes its own output elsewhere, and no text that it printed
is ever parsed into a note.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


class ExceptionTypes(logging.Handler):
    """Records the type of the exception being handled whenever nbgrader logs from an except block."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else sys.exc_info()[1]
        if exc is not None:
            name = f"{type(exc).__module__}.{type(exc).__qualname__}"
            if name not in self.found:
                self.found.append(name)


def main(argv: list[str]) -> int:
    result_path = Path(argv[0])
    nbgrader_args = argv[argv.index("--") + 1:]
    from nbgrader.apps import AutogradeApp

    from autograder import execute

    handler = ExceptionTypes()
    logging.getLogger().addHandler(handler)
    status = "ok"
    try:
        app = AutogradeApp()
        app.initialize(nbgrader_args)
        app.log.addHandler(handler)
        app.start()
    except SystemExit as exc:
        status = "ok" if exc.code in (0, None) else f"exit {exc.code}"
    except BaseException as exc:  # noqa: BLE001 (recorded, then reported by the grader)
        status = f"{type(exc).__module__}.{type(exc).__qualname__}"
        handler.found.append(status)
    result_path.write_text(json.dumps({"status": status, "exceptions": handler.found, "events": execute.EVENTS}))
    return 0 if status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
