"""Plots of the course: attention heatmaps, line plots over a scale, diagrams, lesson figures.

Every function draws with matplotlib only, puts a title and axis labels (with units where there are
any) on what it draws, and returns the ``Figure``, so a notebook can show it, save it or test it.
Functions that take ``ax=`` draw into an existing axes (and return its figure).

``attnlab.plots.common`` holds the plots every lesson uses; a lesson's own figures live in
``attnlab.plots.lessonNN``. Notebooks call ``plots.<function>(...)`` either way. Interactive
figures are made with ``attnlab.interactive``.
"""

from attnlab.plots.common import *  # noqa: F401,F403
from attnlab.plots.lesson01 import *  # noqa: F401,F403
from attnlab.plots.lesson02 import *  # noqa: F401,F403
from attnlab.plots.lesson03 import *  # noqa: F401,F403
from attnlab.plots.lesson04 import *  # noqa: F401,F403
from attnlab.plots.lesson05 import *  # noqa: F401,F403
from attnlab.plots.lesson06 import *  # noqa: F401,F403
from attnlab.plots.lesson07 import *  # noqa: F401,F403
from attnlab.plots.lesson08 import *  # noqa: F401,F403
from attnlab.plots.lesson09 import *  # noqa: F401,F403
