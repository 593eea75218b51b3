"""JupyterLab as learners get it from `make lab`; the browser tests (tests/browser/) start it the same way.

    jupyter lab --config=lab-settings/jupyter_lab_config.py --ServerApp.root_dir=<the course>

The settings beside this file: overrides.json5 (JupyterLab defaults: no news pop-up) and
page_config.json5 (nbgrader's instructor extensions off for learners).
"""

import os

c = get_config()  # noqa: F821 (provided by traitlets when JupyterLab loads this file)

HERE = os.path.dirname(os.path.abspath(__file__))

# Lesson 00 opens first.
c.LabApp.default_url = "/lab/tree/notebooks/00_start_here.ipynb"
# JupyterLab reads overrides.json5 and page_config.json5 from its application settings folder.
c.LabApp.app_settings_dir = HERE
# No announcements are fetched from the internet (the pop-up itself is off in overrides.json5).
c.LabApp.news_url = None
# Local only; the URL with its token is printed, as `make lab` works without a display.
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.open_browser = False
