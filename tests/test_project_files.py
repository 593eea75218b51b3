"""The set-up files agree with each other and with the manifest."""

from __future__ import annotations

import re
import tomllib

import yaml
from packaging.requirements import Requirement

from attnlab.lessons import LESSONS, exercise_modules, lesson, owner
from autograder import paths
from autograder.build import check_manifest

# conda-forge names that differ from PyPI's
CONDA_NAMES = {"torch": "pytorch", "playwright": "playwright-python"}


def _split(requirement: str) -> tuple[str, str]:
    """(name, version specifier) of a requirement, its platform marker left out."""
    name, spec = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement.split(";")[0]).groups()
    return name.lower(), spec.replace(" ", "")


def test_pyproject_installs_platform_specific_packages_where_the_lock_does():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    markers = _lock_markers()
    for group in ("dev", "gpu"):
        for line in project["optional-dependencies"][group]:
            requirement = Requirement(line)
            if requirement.name.lower() in markers:
                assert str(requirement.marker) == markers[requirement.name.lower()], (
                    f"pyproject's {group} extra installs {requirement.name} with marker {requirement.marker}, "
                    f"requirements/dev.lock with {markers[requirement.name.lower()]}")


def _lock_markers() -> dict[str, str]:
    """Packages that requirements/dev.lock installs only on some platforms -> their marker."""
    markers = {}
    for line in (paths.ROOT / "requirements" / "dev.lock").read_text().splitlines():
        if line and not line.startswith("#") and ";" in line:
            requirement = Requirement(line)
            markers[requirement.name.lower()] = str(requirement.marker)
    return markers


def test_environment_yml_lists_what_pyproject_lists_with_the_same_versions():
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    conda = dict(_split(item) for item in env["dependencies"] if isinstance(item, str))
    pip_section = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict))
    # pip installs what conda cannot install everywhere, with a platform marker (PEP 508)
    pip = {Requirement(line).name.lower(): Requirement(line) for line in pip_section if not line.startswith("-")}
    markers = _lock_markers()
    for requirement in wanted:
        name, spec = _split(requirement)
        if name in markers:
            assert name in pip and name not in conda, (
                f"{name} is for some platforms only (requirements/dev.lock: {markers[name]}): environment.yml "
                "must install it in its pip section with that marker, not as a conda package")
            assert str(pip[name].specifier) == spec, f"{name}: environment.yml says {pip[name].specifier}, pyproject {spec!r}"
            assert str(pip[name].marker) == markers[name], (
                f"{name}: environment.yml's marker {pip[name].marker} differs from requirements/dev.lock's {markers[name]}")
            continue
        conda_name = CONDA_NAMES.get(name, name)
        assert conda_name in conda, f"environment.yml lacks {conda_name} (pyproject: {requirement})"
        assert conda[conda_name] == spec, f"{conda_name}: environment.yml says {conda[conda_name]!r}, pyproject {spec!r}"
    assert "-e ." in pip_section, "environment.yml must install the course itself (pip: -e .)"
    # conda writes the pip section to a requirements file: only options pip accepts there may appear
    assert not [line for line in pip_section if line.startswith("--no-deps")], "pip rejects --no-deps in a requirements file"
    python = project["requires-python"]
    assert f"python{python}" in conda or conda.get("python") == python


def test_the_lock_pins_every_dev_dependency_and_not_torch():
    lock = {}
    for line in (paths.ROOT / "requirements" / "dev.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            lock[name.lower().replace("_", "-")] = version
    project = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        name = _split(requirement)[0].replace("_", "-")
        if name != "torch":
            assert name in lock, f"requirements/dev.lock does not pin {name}"
    assert "torch" not in lock, "torch is installed first, on its own (see the Makefile)"


def test_manifest_agrees_with_solutions_and_lookups_work():
    assert check_manifest() == []
    assert [l.number for l in LESSONS] == sorted(l.number for l in LESSONS)
    assert len({l.slug for l in LESSONS}) == len(LESSONS)
    for module in exercise_modules():
        assert (paths.REFERENCE_MODULES / f"{module}.py").is_file()
        assert (paths.LIBRARY / f"{module}.py").is_file()
        assert lesson(module) is owner(module)
    assert lesson("02").slug == lesson("02_attention").slug == lesson("attention").slug


def test_the_nbgrader_config_keeps_exactly_the_owned_modules():
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(str(paths.NBGRADER_CONFIG)).load_config()
    assert config.Autograde.exclude_overwriting == {l.slug: [f"{m}.py" for m in l.modules] for l in LESSONS}


def test_ci_runs_the_readme_test_command():
    readme = (paths.ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    ci = (paths.ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


def test_every_graded_lesson_has_trusted_cases_for_each_autograded_cell():
    import nbformat

    from autograder import trusted

    for item in LESSONS:
        if not item.modules:
            continue
        assert trusted.has_cases(item), f"autograder/cases/lesson{item.number}.py is missing"
        autograded = {
            cell.metadata["nbgrader"]["grade_id"]
            for cell in nbformat.read(paths.SOLUTION_NOTEBOOKS / item.notebook, as_version=4).cells
            if cell.metadata.get("nbgrader", {}).get("grade") and not cell.metadata["nbgrader"].get("solution")
        }
        covered = {case.grade_id for case in trusted.load_cases(item)}
        assert covered == autograded, f"lesson {item.number}: cases cover {sorted(covered)}, cells are {sorted(autograded)}"


def test_the_learners_jupyterlab_culls_idle_kernels_and_loads_no_instructor_server_extension():
    """`make lab`'s settings: a kernel idle for an hour is shut down (each open lesson holds 0.4 to
    1 GB), and nbgrader's formgrader and course list, switched off in the page, are not loaded on
    the server either (the formgrader warned twice at each start that a clone has no course)."""
    from traitlets.config import Config

    config = Config()
    code = (paths.ROOT / "lab-settings" / "jupyter_lab_config.py").read_text()
    exec(compile(code, "jupyter_lab_config.py", "exec"),
         {"get_config": lambda: config, "__file__": str(paths.ROOT / "lab-settings" / "jupyter_lab_config.py")})
    assert config.MappingKernelManager.cull_idle_timeout == 3600
    import nbformat  # lesson 00 tells learners so, in these words

    lesson00 = nbformat.read(paths.SOLUTION_NOTEBOOKS / "00_start_here.ipynb", as_version=4)
    assert any("a kernel that has run nothing for an hour is shut down" in c.source for c in lesson00.cells)
    assert 0 < config.MappingKernelManager.cull_interval <= 600
    assert config.MappingKernelManager.cull_connected is True
    off = config.ServerApp.jpserver_extensions
    assert off["nbgrader.server_extensions.formgrader"] is False
    assert off["nbgrader.server_extensions.course_list"] is False
    assert "nbgrader.server_extensions.assignment_list" not in off  # learners keep fetch and submit


def test_the_quick_loop_leaves_out_only_files_that_exist_and_every_run_prints_its_slowest_tests():
    """`make test-fast` is `pytest -m "not slow"`; the slow list names real files (a renamed test
    would otherwise fall into the quick loop unnoticed), and every run lists the 20 slowest tests."""
    from tests.conftest import SLOW_FILES, SLOW_FOLDERS

    tests = paths.ROOT / "tests"
    assert all((tests / name).is_file() for name in SLOW_FILES), sorted(n for n in SLOW_FILES if not (tests / n).is_file())
    assert all((tests / name).is_dir() for name in SLOW_FOLDERS)
    makefile = (paths.ROOT / "Makefile").read_text()
    assert '$(BIN)/python -m pytest -m "not slow"' in makefile.split("test-fast: $(STAMP)")[1].split("\n\n")[0]
    addopts = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "--durations=20" in addopts.split()
