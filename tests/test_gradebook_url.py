"""Where the grader finds the gradebook's URL (``autograder.gradebook_url``), and that its password
stays off every command line: a private file or the environment instead of ``--db-url``, clear
errors for a file others can read, a warning when a password is on the command line, and nbgrader's
child processes given the password in their environment. tests/hub/test_hub_grading_postgres.py
watches real graders' command lines while they write a password-protected PostgreSQL gradebook."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autograder import gradebook_url
from autograder.gradebook_url import ENV, GradebookURLError, for_child, read_private_file, resolve
from tests.conftest import ROOT

URL = "postgresql://grader:s3cret-pw@dbhost:5432/gradebook"


def _private(path, text=URL, mode=0o600):
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_the_url_comes_from_the_first_place_that_gives_one(tmp_path):
    url_file = _private(tmp_path / "url")
    other = "postgresql://someone@elsewhere/gradebook"
    environ = {ENV: "postgresql://grader@envhost/gradebook"}
    assert resolve(tmp_path, other, url_file, environ) == other
    assert resolve(tmp_path, None, url_file, environ) == URL
    assert resolve(tmp_path, None, None, environ) == "postgresql://grader@envhost/gradebook"
    assert resolve(tmp_path, None, None, {}) == f"sqlite:///{tmp_path / 'gradebook.db'}"
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.db_url = 'sqlite:////x.db'\n")
    assert resolve(tmp_path, None, None, {}) == "sqlite:////x.db"


def test_the_file_skips_comments(tmp_path):
    assert read_private_file(_private(tmp_path / "url", f"# the class's gradebook\n\n{URL}")) == URL


@pytest.mark.parametrize("problem, make, message", [
    ("readable by others", lambda p: _private(p, mode=0o644), "other users may read or change it (mode 0644); run: chmod 600"),
    ("writable by the group", lambda p: _private(p, mode=0o620), "mode 0620"),
    ("missing", lambda p: None, "no such file"),
    ("a folder", lambda p: p.mkdir(mode=0o700), "not a regular file"),
    ("a link", lambda p: p.symlink_to(_private(p.with_name("real"))), "a symbolic link"),
    ("empty", lambda p: _private(p, "# nothing here"), "the file holds no URL"),
    ("not a URL", lambda p: _private(p, "grader:s3cret-pw at dbhost"), "is not a database URL"),
])
def test_a_file_that_is_not_private_or_holds_no_url_is_refused_with_the_reason(tmp_path, problem, make, message):
    path = tmp_path / "url"
    make(path)
    with pytest.raises(GradebookURLError) as error:
        read_private_file(path)
    assert message in str(error.value) and str(path) in str(error.value)
    assert "s3cret-pw" not in str(error.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_owned_by_another_user_is_refused(tmp_path):
    path = _private(tmp_path / "url")
    os.chown(path, 65534, 65534)
    with pytest.raises(GradebookURLError, match="owned by uid 65534, not by the user running the grader"):
        read_private_file(path)


def test_a_child_gets_the_url_without_its_password_and_the_password_in_its_environment():
    assert for_child(URL) == ("postgresql://grader@dbhost:5432/gradebook", {"PGPASSWORD": "s3cret-pw"})
    assert for_child("postgresql://grader@dbhost/gradebook?password=pw2&sslmode=require") == (
        "postgresql://grader@dbhost/gradebook?sslmode=require", {"PGPASSWORD": "pw2"})
    assert for_child("postgresql://grader:p%40ss@dbhost/gradebook")[1] == {"PGPASSWORD": "p@ss"}
    assert for_child("sqlite:////srv/course/gradebook.db") == ("sqlite:////srv/course/gradebook.db", {})
    assert gradebook_url.shown(URL) == "postgresql://grader:***@dbhost:5432/gradebook"


def test_a_password_on_the_command_line_is_warned_about():
    assert gradebook_url.command_line_warning("postgresql://grader@dbhost/gradebook") is None
    warning = gradebook_url.command_line_warning(URL)
    assert "ps" in warning and "--db-url-file" in warning and ENV in warning and "~/.pgpass" in warning
    assert "s3cret-pw" not in warning


def test_the_commands_warn_and_refuse_as_they_should(tmp_path):
    """``grade --db-url`` with a password warns on standard error; ``--db-url-file`` naming a file
    others can read stops with the reason, before any submission is touched."""
    run = [sys.executable, "-m", "autograder", "grade", "--course", str(tmp_path), "--lesson", "02"]
    done = subprocess.run(run + ["--db-url", URL], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "holds a password" in done.stderr and "s3cret-pw" not in done.stdout + done.stderr
    assert "No submissions" in done.stdout
    loose = _private(tmp_path / "url", mode=0o644)
    done = subprocess.run(run + ["--db-url-file", str(loose)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "chmod 600" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(run + ["--db-url", "not a url"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not a database URL" in done.stderr, done.stdout + done.stderr
