"""A learner's JupyterLab on the class hub (``prepare.py`` copies this folder to the hub's state).

JupyterLab's settings for learners are those of ``make lab`` (``lab-settings/``: no news pop-up;
nbgrader's Assignment List and Validate, none of its instructor tools; the course's extension);
the instructor tools' server parts are off too.
"""

import os

c = get_config()  # noqa: F821 (provided by traitlets when the server loads this file)

HERE = os.path.dirname(os.path.abspath(__file__))
c.LabApp.app_settings_dir = os.path.join(HERE, "lab-settings")
# The course's extension, as in `make lab` (prepare.py copies it here).
c.LabApp.extra_labextensions_path = [os.path.join(HERE, "lab-settings", "labextensions")]
c.LabApp.news_url = None
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
}
# Kernels talk to the server over Unix sockets in the user's own runtime folder, not over localhost
# TCP ports: on a machine shared by a class, another user's process could reach (or, starting its
# own kernel at the same moment, take) a TCP port.
c.KernelManager.transport = "ipc"
