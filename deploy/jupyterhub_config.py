"""JupyterHub configuration for a class of this course (docs/instructors.md, "A class on JupyterHub").

The course is installed once, into a shared Python environment every user's server runs from (COURSE_HUB_ENV,
default /opt/transformers-course: `python -m venv` there, then `pip install -r requirements.txt` and the course's
wheel); students are the machine's users (PAM, JupyterHub's default), each in their own account; the instructor is
one of them, working in a checkout of the course in their home. Add authentication, TLS and the users' names the
way your university's hub does; tests/test_hub.py runs a class with this file (and a test-only password and ports).
"""

import os

c = get_config()  # noqa: F821 (provided by JupyterHub when it loads this file)

ENV = os.environ.get("COURSE_HUB_ENV", "/opt/transformers-course")
CONFIG = os.environ.get("COURSE_HUB_CONFIG", "/etc/jupyter")  # where deploy/nbgrader_config.py was copied

c.JupyterHub.bind_url = os.environ.get("COURSE_HUB_URL", "http://:8000")
c.JupyterHub.data_files_path = os.environ.get("COURSE_HUB_DATA", os.path.join(ENV, "share", "jupyterhub"))
# Every user's server runs from the shared environment and reads the machine-wide nbgrader configuration.
c.Spawner.cmd = [os.path.join(ENV, "bin", "python"), "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.environment = {
    "PATH": f"{os.path.join(ENV, 'bin')}:/usr/local/bin:/usr/bin:/bin",
    "JUPYTER_CONFIG_PATH": os.pathsep.join(filter(None, [CONFIG, os.environ.get("COURSE_HUB_JUPYTER_CONFIG")])),
    **{name: os.environ[name] for name in ("COURSE_HUB_EXCHANGE", "JUPYTER_PATH", "LD_LIBRARY_PATH")
       if name in os.environ},
}
# Formgrader under JupyterHub 4.1 and later: the hub forbids framing a user's pages (Content-Security-Policy
# frame-ancestors 'none'), so JupyterLab's Formgrader panel stays blank; open it in a tab of its own instead,
# https://<hub>/user/<instructor>/formgrader (nbgrader's documentation, "JupyterHub 4.1").

# Feedback a minute after Submit (docs/instructors.md, "Feedback a minute after Submit"): the grading service of one
# course, started and restarted by the hub, as the hub's own user (root on a grading host, as grading runs there).
# Uncomment and set the instructor's checkout and the assignments served; deploy/autograder-serve.service does the
# same with systemd where the grading host is not the hub.
# c.JupyterHub.services = [{
#     "name": "autograder-serve",
#     "command": ["/home/teacher/course/.venv/bin/python", "-m", "autograder", "serve", "--out", "results",
#                 "--assignment", "01_self_attention", "--per-hour", "6"],
#     "cwd": "/home/teacher/course",
# }]
