"""An instructor's JupyterLab on the class hub (``prepare.py`` copies this folder to the hub's state):
all of nbgrader's tools, formgrader on the course directory (``nbgrader_config.py`` beside this
file says where it is), and no news pop-up."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when the server loads this file)

HERE = os.path.dirname(os.path.abspath(__file__))
c.LabApp.app_settings_dir = os.path.join(HERE, "lab-settings")
c.LabApp.news_url = None
# Kernels talk to the server over Unix sockets in the user's own runtime folder, not over localhost
# TCP ports: on a machine shared by a class, another user's process could reach (or, starting its
# own kernel at the same moment, take) a TCP port.
c.KernelManager.transport = "ipc"
