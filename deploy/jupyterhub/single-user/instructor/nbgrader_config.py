"""nbgrader for an instructor on the class hub: the class's exchange and course, and the course
directory that ``python -m autograder build --course ~/course`` makes (its own nbgrader_config.py
holds the course's settings; formgrader and the nbgrader commands find it here).

The exchange is the folder ``ATTNLAB_HUB_EXCHANGE`` names, or, where the hub sets
``ATTNLAB_HUB_NGSHARE_URL``, the ngshare service (``ngshare_exchange``). The gradebook is the
course's ``gradebook.db`` unless ``ATTNLAB_GRADEBOOK_URL`` names a database (PostgreSQL on
Kubernetes: ``deploy/kubernetes/values.yaml``)."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = os.environ["ATTNLAB_HUB_COURSE_ID"]
c.CourseDirectory.root = os.path.join(os.path.expanduser("~"), os.environ["ATTNLAB_HUB_COURSE_DIR"])
if os.environ.get("ATTNLAB_GRADEBOOK_URL"):
    c.CourseDirectory.db_url = os.environ["ATTNLAB_GRADEBOOK_URL"]
if os.environ.get("ATTNLAB_HUB_NGSHARE_URL"):
    from ngshare_exchange import configureExchange

    configureExchange(c, os.environ["ATTNLAB_HUB_NGSHARE_URL"])
else:
    c.Exchange.root = os.environ["ATTNLAB_HUB_EXCHANGE"]
