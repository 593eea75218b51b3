"""Where the gradebook's database URL comes from, and how its password stays off command lines.

Every user of a machine can read the command line of every process on it (``ps``,
``/proc/PID/cmdline``): a password given as ``--db-url postgresql://grader:PASSWORD@host/db`` is
shown to the whole class for as long as grading runs. The grader takes the URL from, in order:

1. ``--db-url URL`` on its command line (accepted, with a warning when it holds a password);
2. ``--db-url-file PATH``: a file holding the URL, which must be a regular file owned by the user
   who runs the grader and closed to everybody else (mode 600 or stricter);
3. the environment variable ``ATTNLAB_GRADEBOOK_URL`` (a process's environment is readable by its
   own user and root only);
4. nbgrader's own setting, ``CourseDirectory.db_url``;
5. the course's ``gradebook.db``.

Best of all, the URL holds no password: PostgreSQL's client library (libpq, under the ``psycopg``
driver) then finds it in ``~/.pgpass`` (or the file ``PGPASSFILE`` names), and nbgrader's own
commands and formgrader connect the same way. Where the grader runs nbgrader as a child process, it
passes the URL without its password on the child's command line and the password in the child's
environment (``PGPASSWORD``, which libpq reads) (``for_child``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from jupyter_core.paths import jupyter_config_path
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from traitlets.config import Config
from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

ENV = "ATTNLAB_GRADEBOOK_URL"
EXAMPLE = "postgresql://grader@dbhost/gradebook"


class GradebookURLError(ValueError):
    """A gradebook URL, or the file that should hold one, that cannot be used (the message says why)."""


def parse(text: str, where: str) -> URL:
    """``text`` as a database URL; ``where`` names its source in the error (never the text itself,
    which may hold a password)."""
    try:
        return make_url(text.strip())
    except ArgumentError:
        raise GradebookURLError(f"the gradebook URL from {where} is not a database URL "
                                f"(expected something like {EXAMPLE})") from None


def read_private_file(path: Path) -> str:
    """The URL in ``path`` (its first line that is neither empty nor a # comment), after checking
    that nobody but its owner, the user running the grader, can read or change the file."""
    where = f"--db-url-file {path}"
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise GradebookURLError(f"{where}: no such file") from None
    if stat.S_ISLNK(info.st_mode):
        raise GradebookURLError(f"{where}: a symbolic link; name the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise GradebookURLError(f"{where}: not a regular file")
    if info.st_uid != os.geteuid():
        raise GradebookURLError(f"{where}: owned by uid {info.st_uid}, not by the user running the grader "
                                f"(uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise GradebookURLError(f"{where}: other users may read or change it (mode {stat.S_IMODE(info.st_mode):04o}); "
                                f"run: chmod 600 {path}")
    lines = [line.strip() for line in path.read_text().splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    if not found:
        raise GradebookURLError(f"{where}: the file holds no URL")
    parse(found[0], where)
    return found[0]


def resolve(course: Path, cli_url: str | None = None, url_file: Path | None = None,
            environ: dict[str, str] | None = None) -> str:
    """The gradebook's URL, from the first of the places the module's docstring lists."""
    environ = os.environ if environ is None else environ
    if cli_url:
        parse(cli_url, "--db-url")
        return cli_url.strip()
    if url_file is not None:
        return read_private_file(Path(url_file))
    if environ.get(ENV, "").strip():
        parse(environ[ENV], f"the environment variable {ENV}")
        return environ[ENV].strip()
    return nbgrader_db_url(course)


def nbgrader_db_url(course: Path) -> str:
    """The gradebook nbgrader uses for ``course``: ``CourseDirectory.db_url`` from an nbgrader_config.py
    in the Jupyter config path or in the course directory (as nbgrader reads them), else
    ``course/gradebook.db``."""
    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(course)]:  # the later, the stronger
        try:
            config.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
        except ConfigFileNotFound:
            pass
    return config.CourseDirectory.get("db_url") or f"sqlite:///{course / 'gradebook.db'}"


def password(url: str) -> str | None:
    """The password a URL holds (in its user part or as a ``password`` query parameter), if any."""
    parsed = make_url(url)
    return parsed.password or parsed.query.get("password") or None


def command_line_warning(url: str) -> str | None:
    """What to print when a URL holding a password was given on the command line (None otherwise)."""
    if not password(url):
        return None
    return ("warning: the gradebook URL given with --db-url holds a password, and every user of this machine "
            "can read a running program's command line (ps). Give the URL in a file only you can read "
            f"(--db-url-file), in the environment variable {ENV}, or leave the password out of the URL and "
            "keep it in ~/.pgpass.")


def shown(url: str) -> str:
    """The URL as messages may show it: its password masked."""
    return make_url(url).render_as_string(hide_password=True)


def for_child(url: str) -> tuple[str, dict[str, str]]:
    """(the URL without its password, environment variables that give a child process the password):
    what to pass to an nbgrader command the grader starts."""
    secret = password(url)
    if not secret:
        return url, {}
    # URL.set() leaves a field alone when given None; URL is a named tuple, whose _replace does not
    parsed = make_url(url)._replace(password=None).difference_update_query(["password"])
    return parsed.render_as_string(hide_password=False), {"PGPASSWORD": secret}
