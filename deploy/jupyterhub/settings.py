"""The class hub's settings, from environment variables with defaults for one machine.

Read by ``jupyterhub_config.py``, ``prepare.py`` and the tests (``tests/hub/``), so that every
part agrees on where things are.

======================================  ===================================  ====================================
variable                                default                              what it is
======================================  ===================================  ====================================
``ATTNLAB_HUB_URL``                     ``http://127.0.0.1:8000``            where people log in (the proxy)
``ATTNLAB_HUB_API_URL``                 ``http://127.0.0.1:8081``            the hub's own API, for the servers
``ATTNLAB_HUB_PROXY_API_URL``           ``http://127.0.0.1:8001``            the proxy's API, for the hub
``ATTNLAB_HUB_STATE``                   ``/srv/attnlab-hub``                 environments, role configs, hub db
``ATTNLAB_HUB_EXCHANGE``                ``/srv/nbgrader/exchange``           nbgrader's exchange folder
``ATTNLAB_HUB_EXCHANGE_SERVICE``        ``folder``                           ``folder``, or ``ngshare``: the
                                                                             exchange as a hub service, no
                                                                             shared folder
``ATTNLAB_HUB_NGSHARE_URL``             ``http://127.0.0.1:8010``            where ngshare listens (the proxy
                                                                             serves it at /services/ngshare/)
``ATTNLAB_HUB_LEARNERS``                ``attnlab-learners``                 Unix group of the learners
``ATTNLAB_HUB_INSTRUCTORS``             ``attnlab-instructors``              Unix group of the instructors
``ATTNLAB_HUB_COURSE_DIR``              ``course``                           instructor's course, from their home
``ATTNLAB_HUB_IDLE_S``                  ``3600``                             idle servers are stopped after this
======================================  ===================================  ====================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]  # the clone of the course
# nbgrader's exchange: a folder every server reads and writes, or ngshare, a JupyterHub service that
# keeps releases, submissions and feedback in its own database (no folder shared between users)
EXCHANGE_SERVICES = ("folder", "ngshare")


@dataclass(frozen=True)
class Settings:
    url: str = "http://127.0.0.1:8000"
    api_url: str = "http://127.0.0.1:8081"
    proxy_api_url: str = "http://127.0.0.1:8001"
    state: Path = Path("/srv/attnlab-hub")
    exchange: Path = Path("/srv/nbgrader/exchange")
    exchange_service: str = "folder"  # or "ngshare"
    ngshare_url: str = "http://127.0.0.1:8010"
    learners_group: str = "attnlab-learners"
    instructors_group: str = "attnlab-instructors"
    course_dir: str = "course"
    idle_s: int = 3600

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        default = cls()

        def get(name: str, value):
            return env.get(f"ATTNLAB_HUB_{name}", value)

        return cls(
            url=get("URL", default.url).rstrip("/"),
            api_url=get("API_URL", default.api_url).rstrip("/"),
            proxy_api_url=get("PROXY_API_URL", default.proxy_api_url).rstrip("/"),
            state=Path(get("STATE", default.state)),
            exchange=Path(get("EXCHANGE", default.exchange)),
            exchange_service=get("EXCHANGE_SERVICE", default.exchange_service),
            ngshare_url=get("NGSHARE_URL", default.ngshare_url).rstrip("/"),
            learners_group=get("LEARNERS", default.learners_group),
            instructors_group=get("INSTRUCTORS", default.instructors_group),
            course_dir=get("COURSE_DIR", default.course_dir),
            idle_s=int(get("IDLE_S", default.idle_s)),
        )

    def __post_init__(self):
        if self.exchange_service not in EXCHANGE_SERVICES:
            raise ValueError(f"ATTNLAB_HUB_EXCHANGE_SERVICE must be one of {', '.join(EXCHANGE_SERVICES)}, "
                             f"not {self.exchange_service!r}")

    @property
    def ngshare_state(self) -> Path:
        """ngshare's database and stored files (root only), when the exchange is the ngshare service."""
        return self.state / "ngshare"

    @property
    def ngshare_public_url(self) -> str:
        """ngshare as the users' servers reach it: through the proxy, as a JupyterHub service."""
        return f"{self.url}/services/ngshare"

    def env(self, role: str) -> Path:
        """The Python environment of ``role`` ("learner" or "instructor"), made by ``prepare.py``."""
        return self.state / f"{role}-env"

    @property
    def runtime(self) -> Path:
        """Where ``prepare.py`` puts a copy of the base Python when not every user can run it."""
        return self.state / "python"

    def role_config(self, role: str) -> Path:
        """The Jupyter configuration folder of ``role`` ("learner" or "instructor")."""
        return self.state / "etc" / role
