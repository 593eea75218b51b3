"""Prepare this machine for the class hub (run as root by ``start.sh``, before JupyterHub starts).

Idempotent. It makes, under the state folder (``ATTNLAB_HUB_STATE``, default ``/srv/attnlab-hub``):

- ``learner-env/``: the learners' Python environment. It holds the course's packages (hard links
  to the files of the course's ``.venv``: no download, no extra disk) and a copy of the ``attnlab``
  library as learners get it (the exercise modules are the blank stubs), and nothing else of the
  clone: no ``solutions/``, no ``autograder/`` (its trusted cases), no editable install pointing
  back into the clone.
- ``instructor-env/``: the instructors' environment, the same links with the editable install of
  the clone (the course tool and the references, read from the clone, which instructors must be
  able to read).
- ``python/``, only where the course's base Python cannot be run by every user (pyenv keeps it
  under ``/root``): a copy of that interpreter (hard links, without its site-packages) that the
  two environments are made from.
- ``etc/learner/`` and ``etc/instructor/``: the Jupyter configuration folders of the two roles
  (``JUPYTER_CONFIG_PATH`` of their servers), copied from ``single-user/`` beside this file, with
  the learners' JupyterLab settings from ``lab-settings/``.
- ``hub/``: JupyterHub's own database, cookie secret and proxy pid file (root only).

and the exchange folder (``ATTNLAB_HUB_EXCHANGE``, default ``/srv/nbgrader/exchange``), writable by
every user, or, with ``ATTNLAB_HUB_EXCHANGE_SERVICE=ngshare``, ``ngshare/`` (root only: the
service's database and files) and no exchange folder; and the Unix groups of learners and
instructors.
"""

from __future__ import annotations

import errno
import grp
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from settings import ROOT, Settings  # noqa: E402 (this folder is not a package)

# Entries of the course venv's site-packages that a learner's environment must not have: the
# editable install of the clone (its finder and .pth would import attnlab, autograder and the
# references from the clone) and the course tool.
_LEFT_OUT = ("__editable__", "attnlab", "autograder", "__pycache__")


def ensure_groups(settings: Settings) -> None:
    for group in (settings.learners_group, settings.instructors_group):
        try:
            grp.getgrnam(group)
        except KeyError:
            subprocess.run(["groupadd", group], check=True)


def ensure_exchange(settings: Settings) -> None:
    """The exchange folder: every user writes into it; the sticky bit keeps them from deleting each
    other's files (nbgrader sets the modes of what it puts inside). With the ngshare service there
    is no such folder: ngshare's database and files are root's alone."""
    if settings.exchange_service == "ngshare":
        settings.ngshare_state.mkdir(parents=True, exist_ok=True)
        os.chmod(settings.ngshare_state, 0o700)
        return
    settings.exchange.mkdir(parents=True, exist_ok=True)
    os.chmod(settings.exchange, 0o1777)


def _rewrite_scripts(source_bin: Path, target_bin: Path, python: Path) -> None:
    """Console scripts of the course venv (jupyter, nbgrader, ...), pointed at ``python``."""
    course_python = f"#!{source_bin}/python"
    for script in sorted(source_bin.iterdir()):
        target = target_bin / script.name
        if target.exists() or target.is_symlink() or not script.is_file():
            continue
        try:
            text = script.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        first, _, rest = text.partition("\n")
        if first.startswith(course_python):  # python, python3, python3.11
            target.write_text(f"#!{python}\n{rest}")
            target.chmod(0o755)


def _link_or_copy(source, destination, *, follow_symlinks=True):
    """A hard link (no disk, no time), or a copy where the state folder is on another file system."""
    try:
        os.link(source, destination, follow_symlinks=follow_symlinks)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(source, destination, follow_symlinks=follow_symlinks)
    return destination


def _everyone_can_run(executable: Path) -> bool:
    """Whether any user can run ``executable``: every folder above it searchable by all, itself
    readable and executable by all (a Python under /root, as pyenv puts it, is not)."""
    executable = executable.resolve()
    if executable.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
        return False
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in executable.parents)


def _swap_in(fresh: Path, target: Path) -> None:
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    fresh.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def base_interpreter(settings: Settings) -> Path:
    """The Python the users' environments are made from: the course's own base interpreter where
    every user can run it; else a copy of it in the state folder (hard links: its program, its
    shared library, its standard library; not its site-packages)."""
    runtime = settings.runtime
    executable = Path(sys._base_executable).resolve()
    if _everyone_can_run(executable):
        shutil.rmtree(runtime, ignore_errors=True)
        return executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    fresh = runtime.with_name(runtime.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    (fresh / "bin").mkdir(parents=True)
    _link_or_copy(executable, fresh / "bin" / version)
    (fresh / "bin" / "python3").symlink_to(version)
    (fresh / "lib").mkdir()
    for library in sorted((base / "lib").glob("libpython*.so*")):
        if library.is_symlink():
            (fresh / "lib" / library.name).symlink_to(os.readlink(library))
        else:
            _link_or_copy(library, fresh / "lib" / library.name)
    shutil.copytree(base / "lib" / version, fresh / "lib" / version, symlinks=True, copy_function=_link_or_copy,
                    ignore=lambda folder, names: ["site-packages"] if Path(folder) == base / "lib" / version else [])
    (fresh / "lib" / version / "site-packages").mkdir()
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(fresh)], check=True)
    _swap_in(fresh, runtime)
    return runtime / "bin" / version


def library_path(settings: Settings) -> dict[str, str]:
    """What the users' servers need in their environment to run ``base_interpreter``'s copy: its
    shared library (the original program looks for it where the original lives)."""
    lib = settings.runtime / "lib"
    return {"LD_LIBRARY_PATH": str(lib)} if any(lib.glob("libpython*.so*")) else {}


def build_env(settings: Settings, role: str, interpreter: Path) -> Path:
    """(Re)build the Python environment of ``role`` beside the old one, then swap it in.

    Both hold the course's packages as hard links to the files of the course's ``.venv``. The
    instructors' has everything the ``.venv`` has, the editable install of the clone included (the
    course tool, the references, nbgrader's formgrader). The learners' has the library as learners
    get it (a copy of ``src/attnlab``: the exercise modules are the blank stubs) and nothing else
    of the clone."""
    target = settings.env(role)
    fresh = target.with_name(target.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    env = {**os.environ, **library_path(settings)}
    subprocess.run([str(interpreter), "-m", "venv", "--without-pip", str(fresh)], check=True, env=env)
    site = Path(sysconfig.get_paths()["purelib"])  # the course venv's site-packages
    fresh_site = fresh / site.relative_to(sys.prefix)
    for entry in sorted(site.iterdir()):
        if role == "learner" and entry.name.startswith(_LEFT_OUT):
            continue
        destination = fresh_site / entry.name
        if entry.is_dir() and not entry.is_symlink():
            # compiled files too: users cannot write them into this root-owned environment, and
            # without them every kernel would compile torch's sources again
            shutil.copytree(entry, destination, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, destination, follow_symlinks=False)
    if role == "learner":  # the library as learners get it, compiled here
        shutil.copytree(ROOT / "src" / "attnlab", fresh_site / "attnlab", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run([str(fresh / "bin" / "python"), "-m", "compileall", "-q", str(fresh_site / "attnlab")],
                       check=True, env=env)
        subprocess.run(["chmod", "-R", "a+rX,go-w", str(fresh_site / "attnlab")], check=True)
    # Jupyter's data and config of the environment: the nbgrader and widget extensions
    for folder in ("share/jupyter", "etc/jupyter"):
        if (Path(sys.prefix) / folder).is_dir():
            shutil.copytree(Path(sys.prefix) / folder, fresh / folder, symlinks=True, copy_function=_link_or_copy,
                            dirs_exist_ok=True)
    _rewrite_scripts(Path(sys.prefix) / "bin", fresh / "bin", target / "bin" / "python")
    # (no chmod of the links: they share their modes with the course's .venv, readable by all)
    _swap_in(fresh, target)
    return target


def write_role_configs(settings: Settings) -> None:
    etc = settings.state / "etc"
    fresh = settings.state / "etc.new"
    shutil.rmtree(fresh, ignore_errors=True)
    shutil.copytree(HERE / "single-user", fresh, ignore=shutil.ignore_patterns("__pycache__"))
    for role, names in (("learner", ("overrides.json5", "page_config.json5")), ("instructor", ("overrides.json5",))):
        (fresh / role / "lab-settings").mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy(ROOT / "lab-settings" / name, fresh / role / "lab-settings" / name)
    # the course's prebuilt JupyterLab extension (lab-settings/learner-view/README.md)
    shutil.copytree(ROOT / "lab-settings" / "labextensions", fresh / "learner" / "lab-settings" / "labextensions")
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(fresh)], check=True)
    shutil.rmtree(etc, ignore_errors=True)
    fresh.rename(etc)


def prepare(settings: Settings) -> None:
    if os.geteuid() != 0:
        sys.exit("prepare.py must run as root: the hub starts each user's server as that user.")
    settings.state.mkdir(parents=True, exist_ok=True)
    os.chmod(settings.state, 0o755)
    (settings.state / "hub").mkdir(exist_ok=True)
    os.chmod(settings.state / "hub", 0o700)
    ensure_groups(settings)
    ensure_exchange(settings)
    write_role_configs(settings)
    private = [folder for folder in [ROOT, *ROOT.parents] if not folder.stat().st_mode & stat.S_IXOTH]
    if private:
        print(f"Note: instructors' servers import the course tool from {ROOT}, and {private[-1]} is private: only "
              "its owner (and root) can be an instructor on this hub. That is as it should be when the clone is in "
              "the instructor's home.")
    interpreter = base_interpreter(settings)
    for role in ("learner", "instructor"):
        build_env(settings, role, interpreter)


if __name__ == "__main__":
    prepare(Settings.from_environment())
    print("Prepared the class hub's environment and folders.")
