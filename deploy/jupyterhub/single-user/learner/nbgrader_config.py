"""nbgrader for a learner on the class hub: the class's exchange and course (set by the hub)."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.Exchange.root = os.environ["ATTNLAB_HUB_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["ATTNLAB_HUB_COURSE_ID"]
