"""nbgrader for a learner on the class hub: the class's course and exchange (set by the hub).

The exchange is the folder ``ATTNLAB_HUB_EXCHANGE`` names, or, where the hub sets
``ATTNLAB_HUB_NGSHARE_URL``, the ngshare service through nbgrader's exchange plugins
(``ngshare_exchange``), which send the server's own hub token with every request. The same file
serves the Kubernetes image (``deploy/kubernetes/Dockerfile``)."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = os.environ["ATTNLAB_HUB_COURSE_ID"]
if os.environ.get("ATTNLAB_HUB_NGSHARE_URL"):
    from ngshare_exchange import configureExchange

    configureExchange(c, os.environ["ATTNLAB_HUB_NGSHARE_URL"])
else:
    c.Exchange.root = os.environ["ATTNLAB_HUB_EXCHANGE"]
