"""ngshare, nbgrader's exchange as a JupyterHub service, with the one fix it needs on SQLAlchemy 2.

Run exactly as ``python -m ngshare`` (same arguments): the class hub starts it as a managed
service (``jupyterhub_config.py``, ``ATTNLAB_HUB_EXCHANGE_SERVICE=ngshare``), and on Kubernetes the
exchange image runs it (``deploy/kubernetes/``).

Why a wrapper: ngshare 0.6.0 (PyPI, 2022) makes a released assignment with
``Assignment(name, course)`` and a submission with ``Submission(student, assignment)``, and relies
on SQLAlchemy 1.x's *cascade_backrefs* to put the new object into the session through the backref
it sets. SQLAlchemy 2.0 removed that cascade (the course's environment has SQLAlchemy 2, which
JupyterHub 5 and nbgrader 0.9.6 use): ngshare then answers ``{"success": true}`` to a release or a
submission, logs "SAWarning: Object of type <Assignment> not in session, add operation along
'Course.assignments' will not proceed", and stores nothing, so learners find no assignment to
fetch. The fix below is SQLAlchemy's own migration advice (add such an object to the session
explicitly), done with attribute events so that ngshare's code is used as it is.

And one change of where it listens: ngshare binds to every interface (``0.0.0.0``) at the port of
``JUPYTERHUB_SERVICE_URL``; here it binds to that URL's own host, so that on the one-machine hub
(``http://127.0.0.1:PORT``) it is reachable only through the proxy and from the machine itself. On
Kubernetes ``ngshare.yaml`` gives ``http://0.0.0.0:8080``, as a pod needs.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlparse

from sqlalchemy import event
from tornado.httpserver import HTTPServer
from sqlalchemy.orm import configure_mappers, object_session

from ngshare.database.database import Assignment, Submission


def _join_parents_session(target, value, oldvalue, initiator):
    """When a new object gets a parent that is in a session, it joins that session (what
    cascade_backrefs did in SQLAlchemy 1.x)."""
    session = object_session(value) if value is not None else None
    if session is not None and object_session(target) is None:
        session.add(target)


def install() -> None:
    configure_mappers()  # the backrefs (Assignment.course, Submission.assignment) exist from here on
    event.listen(Assignment.course, "set", _join_parents_session)
    event.listen(Submission.assignment, "set", _join_parents_session)


class _ServiceURLServer(HTTPServer):
    """ngshare's HTTP server, on the host of JUPYTERHUB_SERVICE_URL rather than on every interface."""

    def listen(self, port, address="", **kwargs):
        host = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "")).hostname
        return super().listen(port, host or address, **kwargs)


if __name__ == "__main__":
    install()
    import ngshare.ngshare

    ngshare.ngshare.HTTPServer = _ServiceURLServer
    ngshare.ngshare.main(sys.argv[1:])
