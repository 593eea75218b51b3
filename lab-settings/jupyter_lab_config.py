"""JupyterLab as learners get it from `make lab`; the browser tests (tests/browser/) start it the same way.

    jupyter lab --config=lab-settings/jupyter_lab_config.py --ServerApp.root_dir=<the course>

The settings beside this file: overrides.json5 (JupyterLab defaults: no news pop-up),
page_config.json5 (nbgrader's instructor extensions off for learners) and labextensions/ (the
course's own small extension, built from learner-view/: after Run All stops at an error the error
is in view, opening a notebook does not mark it unsaved, output text wraps between words).
"""

import os

c = get_config()  # noqa: F821 (provided by traitlets when JupyterLab loads this file)

HERE = os.path.dirname(os.path.abspath(__file__))

# Lesson 00 opens first.
c.LabApp.default_url = "/lab/tree/notebooks/00_start_here.ipynb"
# JupyterLab reads overrides.json5 and page_config.json5 from its application settings folder.
c.LabApp.app_settings_dir = HERE
# The course's extension, prebuilt (no node needed to use it): see learner-view/README.md.
c.LabApp.extra_labextensions_path = [os.path.join(HERE, "labextensions")]
# No announcements are fetched from the internet (the pop-up itself is off in overrides.json5).
c.LabApp.news_url = None
# Local only; the URL with its token is printed, as `make lab` works without a display.
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.open_browser = False
# nbgrader's instructor server extensions stay off too (their front-ends are off in
# page_config.json5): the formgrader would look for a course's nbgrader_config.py at every start
# and warn, twice, that a learner's clone has none.
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
}
# Each open lesson keeps a kernel of its own (0.4 to 1 GB): one idle for an hour is shut down
# (its notebook stays open; run the set-up cell again to go on). Lesson 00 says how to shut down
# the kernels of finished lessons by hand.
c.MappingKernelManager.cull_idle_timeout = 3600
c.MappingKernelManager.cull_interval = 300
c.MappingKernelManager.cull_connected = True
