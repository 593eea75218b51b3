"""nbgrader for an instructor on the class hub: the class's exchange and course, and the course
directory that ``python -m autograder build --course ~/course`` makes (its own nbgrader_config.py
holds the course's settings; formgrader and the nbgrader commands find it here)."""

import os

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.Exchange.root = os.environ["ATTNLAB_HUB_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["ATTNLAB_HUB_COURSE_ID"]
c.CourseDirectory.root = os.path.join(os.path.expanduser("~"), os.environ["ATTNLAB_HUB_COURSE_DIR"])
