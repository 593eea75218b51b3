"""JupyterHub for a class on one machine (``start.sh`` starts it; settings: ``settings.py``).

- Log-in with the machine's Unix accounts (PAM): members of the learners' and instructors' groups
  may log in; instructors are the hub's admins.
- Each user's JupyterLab runs as that Unix user, in their home folder. Learners get the learners'
  environment (``prepare.py``: the course's packages and the blank library, no solutions, no
  grader) with the learner settings of ``lab-settings/`` (nbgrader's Assignment List and Validate,
  no instructor tools); instructors get the instructors' environment (the course's ``.venv`` with
  the clone's course tool) with formgrader, on the course directory ``~/course`` that
  ``python -m autograder build`` makes.
- nbgrader's exchange is one folder every user's server reads and writes, or, with
  ``ATTNLAB_HUB_EXCHANGE_SERVICE=ngshare``, the ngshare service (``ngshare_service.py``), which the
  hub starts and which keeps releases, submissions and feedback in its own database: no folder is
  shared between users, and each request is made with the user's own hub token.
- The proxy is ``configurable-http-proxy`` from npm (``npm ci --prefix deploy/jupyterhub``).
- Servers idle for ``ATTNLAB_HUB_IDLE_S`` seconds are stopped by ``jupyterhub-idle-culler``.
"""

import grp
import pwd
import sys
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prepare import library_path  # noqa: E402
from settings import HERE, ROOT, Settings  # noqa: E402 (this folder is not a package)

c = get_config()  # noqa: F821 (provided by traitlets when JupyterHub loads this file)
settings = Settings.from_environment()

# nbgrader's course id, from the one place the course sets it
COURSE_ID = PyFileConfigLoader(str(ROOT / "autograder" / "nbgrader_config.py")).load_config().CourseDirectory.course_id

# --- where the hub listens and keeps its state -------------------------------------------------
c.JupyterHub.bind_url = settings.url
c.JupyterHub.hub_bind_url = settings.api_url
c.ConfigurableHTTPProxy.api_url = settings.proxy_api_url
_private = settings.state / "hub"
c.JupyterHub.db_url = f"sqlite:///{_private / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(_private / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(_private / "proxy.pid")
_proxy = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
if _proxy.exists():
    c.ConfigurableHTTPProxy.command = [str(_proxy)]

# --- who may log in -----------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.allowed_groups = {settings.learners_group, settings.instructors_group}
c.PAMAuthenticator.admin_groups = {settings.instructors_group}


def is_instructor(name: str) -> bool:
    group = grp.getgrnam(settings.instructors_group)
    return name in group.gr_mem or pwd.getpwnam(name).pw_gid == group.gr_gid


def instructors() -> list[str]:
    """The instructors' group now (members, and accounts whose primary group it is)."""
    group = grp.getgrnam(settings.instructors_group)
    return sorted({*group.gr_mem, *(p.pw_name for p in pwd.getpwall() if p.pw_gid == group.gr_gid)})


# --- each user's server -------------------------------------------------------------------------
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"
# Generous: a class logging in at once on a small machine starts many servers together.
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300


def pre_spawn_hook(spawner):
    """The environment and settings of the user's role."""
    instructor = is_instructor(spawner.user.name)
    role = "instructor" if instructor else "learner"
    python = settings.env(role) / "bin" / "python"
    spawner.cmd = [str(python), "-m", "jupyterhub.singleuser"]
    spawner.environment = {
        **spawner.environment,
        **library_path(settings),  # where prepare.py copied the base Python
        # the role's jupyter_server_config.py and nbgrader_config.py (prepare.py writes them)
        "JUPYTER_CONFIG_PATH": str(settings.role_config(role)),
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "ATTNLAB_HUB_COURSE_ID": COURSE_ID,
        "ATTNLAB_HUB_COURSE_DIR": settings.course_dir,
        # the role's nbgrader_config.py picks the exchange from these
        **({"ATTNLAB_HUB_NGSHARE_URL": settings.ngshare_public_url} if settings.exchange_service == "ngshare"
           else {"ATTNLAB_HUB_EXCHANGE": str(settings.exchange)}),
    }


c.Spawner.pre_spawn_hook = pre_spawn_hook

# --- the idle culler --------------------------------------------------------------------------
c.JupyterHub.services = [
    {"name": "idle-culler", "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={settings.idle_s}"]},
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
     "services": ["idle-culler"]},
]

# --- the exchange as a service: ngshare -----------------------------------------------------------
# ngshare identifies each caller by the hub token the caller sends (a user's server sends its own),
# so it needs no scopes of its own. Its admins, who may create courses, are the instructors when the
# hub starts; instructors then enrol learners (ngshare-course-management add_student).
if settings.exchange_service == "ngshare":
    _ngshare = settings.ngshare_state
    c.JupyterHub.services.append({
        "name": "ngshare",
        "url": settings.ngshare_url,
        "command": [sys.executable, str(HERE / "ngshare_service.py"),
                    f"--database=sqlite:///{_ngshare / 'ngshare.sqlite'}", f"--storage={_ngshare / 'files'}",
                    f"--admins={','.join(instructors())}"],
    })
