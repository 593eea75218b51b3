"""``python -m attnlab.bench``: the command of ``attnlab.bench.cli`` (lessons, and
``in_fresh_process``, run it as a child process)."""

import sys

from attnlab.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
