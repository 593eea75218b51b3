"""The course's JupyterLab extension (lab-settings/learner-view) is loaded, without node, where
learners' JupyterLab starts, and its committed build is the build of its source.

The extension's behaviour is tested in the browser (tests/browser/test_learner_view.py); these
tests only check the files: a source change without `make lab-extension` fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from traitlets.config import Config

from autograder import paths

SETTINGS = paths.ROOT / "lab-settings"
SOURCE = SETTINGS / "learner-view"
BUILT = SETTINGS / "labextensions" / "attnlab-learner-view"


def _load_config(path: Path) -> Config:
    config = Config()
    exec(compile(path.read_text(), path.name, "exec"), {"get_config": lambda: config, "__file__": str(path)})
    return config


def test_make_lab_and_the_class_hub_load_the_prebuilt_extension():
    lab = _load_config(SETTINGS / "jupyter_lab_config.py")
    assert [Path(p) for p in lab.LabApp.extra_labextensions_path] == [BUILT.parent]
    hub = (paths.ROOT / "deploy" / "jupyterhub" / "single-user" / "learner" / "jupyter_server_config.py").read_text()
    assert 'extra_labextensions_path = [os.path.join(HERE, "lab-settings", "labextensions")]' in hub
    assert '"labextensions"' in (paths.ROOT / "deploy" / "jupyterhub" / "prepare.py").read_text()


def test_the_committed_build_is_the_build_of_the_source():
    source = json.loads((SOURCE / "package.json").read_text())
    built = json.loads((BUILT / "package.json").read_text())
    assert (built["name"], built["version"]) == (source["name"], source["version"])
    assert Path(source["jupyterlab"]["outputDir"]) == Path("..") / "labextensions" / BUILT.name
    entry = BUILT / built["jupyterlab"]["_build"]["load"]
    assert entry.is_file(), f"{entry} is missing: run make lab-extension"
    bundle = "\n".join(p.read_text() for p in (BUILT / "static").glob("*.js"))
    # Every plugin of the source, and every CSS declaration, is in the build.
    plugins = re.findall(r"id: '([\w:-]+)'", (SOURCE / "src" / "index.js").read_text())
    assert len(plugins) == 2 and all(plugin in bundle for plugin in plugins), plugins
    css = re.sub(r"/\*.*?\*/", "", (SOURCE / "style" / "index.css").read_text(), flags=re.S)
    for declaration in re.findall(r"[\w-]+:\s*[^;{}]+;", css):
        assert declaration.replace(" ", "") in bundle.replace(" ", ""), f"{declaration} is not in the build"
    # Shared with JupyterLab, never bundled: the extension works with every JupyterLab 4 the course allows.
    assert "@jupyterlab/notebook" in built["jupyterlab"].get("sharedPackages", {})
