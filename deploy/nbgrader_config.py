"""The machine-wide nbgrader configuration of a JupyterHub teaching this course (docs/instructors.md).

Copy it to a folder every user's Jupyter reads (/etc/jupyter/nbgrader_config.py, or the folder the hub's
COURSE_HUB_CONFIG names). It names the course and the one exchange all users share; the course's own
nbgrader_config.py (the instructor's checkout) then uses that exchange instead of a private one beside the course.
tests/test_hub.py runs a class with it.
"""

import os

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformers-from-scratch"
# World-writable with the sticky bit (mode 1777), made once by the hub's administrator: nbgrader's instructions.
c.Exchange.root = os.environ.get("COURSE_HUB_EXCHANGE", "/srv/nbgrader/exchange")
