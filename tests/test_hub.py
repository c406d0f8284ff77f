"""A class on a real JupyterHub: the course installed once, as a package, in a shared environment; an instructor and
two students as real users of this machine, each in their own account; assignments through one shared exchange
(deploy/nbgrader_config.py); the hub configured by deploy/jupyterhub_config.py.

As those users, through their own Jupyter servers behind the hub where a person would click (the Assignment List's
and Formgrader's own HTTP API), and with the documented commands in a terminal otherwise: the instructor releases
01; each student fetches it, fills it in, validates and submits; the instructor collects and grades into the
gradebook, sees both submissions in Formgrader with names and saves a manual score, and releases feedback; each
student fetches their feedback. Every step asserts what a person would check, and the table of steps prints.

Needs root (it makes the users, and removes them), JupyterHub (requirements-test.txt) and configurable-http-proxy
(.ci/run installs it from the npm registry into tests/.node); without them it skips, except under CI, where it fails.
Not done here: the clicks themselves in Chromium (Validate and Submit in the Assignment List, Formgrader in its tab).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import servers
from conftest import complete_submission

from autograder import course_dir

ROOT = course_dir.ROOT
A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
COURSE_ID = "transformers-from-scratch"
TEACHER, STUDENTS = "tfs-teach", ("tfs-ada", "tfs-bob")
FETCHED = f"{A}/{NB}"  # where fetching puts the notebook, in the student's home
PROXY = ROOT / "tests" / ".node" / "node_modules" / ".bin" / "configurable-http-proxy"
SERVICE_TOKEN = os.urandom(16).hex()
STEPS: list[tuple[str, str, bool, float]] = []

pytestmark = pytest.mark.slow


def _missing() -> list[str]:
    missing = []
    if os.geteuid() != 0 or not shutil.which("useradd"):
        missing.append("root with useradd (it makes the hub's users)")
    try:
        import jupyterhub  # noqa: F401, PLC0415
    except ImportError:
        missing.append("JupyterHub (.venv/bin/pip install -r requirements-test.txt)")
    if not PROXY.exists():
        missing.append(f"configurable-http-proxy ({PROXY}: .ci/run installs it)")
    return missing


def _readable_by_all(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents] if p != Path("/"))


def _interpreter(folder: Path) -> Path:
    """This Python's installation where every user can run it: itself, or (pyenv under /root) a copy of its
    interpreter and standard library, hard-linked where the file system allows, as an administrator installs one
    under /opt."""
    base = Path(sys.base_prefix)
    if _readable_by_all(base):
        return base
    copy = folder / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"

    def place(source: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
    place(Path(os.path.realpath(sys.executable)), copy / "bin" / version)
    for library in (base / "lib").glob("libpython*"):
        place(library, copy / "lib" / library.name)
    shutil.copytree(base / "lib" / version, copy / "lib" / version, copy_function=lambda s, t: place(Path(s), Path(t)),
                    ignore=lambda where, names: ["site-packages"] if Path(where) == base / "lib" / version else [])
    (copy / "lib" / version / "site-packages").mkdir()
    return copy


def _as(user: str, env: dict, *command: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A command as the user, in a login-like environment of the hub's (the one their server gets)."""
    home = Path(pwd.getpwnam(user).pw_dir)
    done = subprocess.run(["runuser", "-u", user, "--", "env", "-i", f"HOME={home}", f"USER={user}",
                           f"LOGNAME={user}", *[f"{k}={v}" for k, v in env.items()], *command],
                          cwd=cwd or home, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)} as {user}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _step(name: str, user: str, action):
    started = time.perf_counter()
    try:
        result = action()
    except BaseException:
        STEPS.append((name, user, False, time.perf_counter() - started))
        raise
    STEPS.append((name, user, True, time.perf_counter() - started))
    return result


class Hub:
    def __init__(self, url: str, env: dict, users: dict[str, str]):
        self.url, self.env, self.tokens = url, env, users

    def api(self, path: str, method: str = "GET", data: dict | None = None, token: str = SERVICE_TOKEN,
            timeout: float = 300):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         data=None if data is None else json.dumps(data).encode(),
                                         headers={"Authorization": f"token {token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode()
        return json.loads(body) if body.strip() else None

    def as_user(self, user: str, path: str, method: str = "GET", data: dict | None = None):
        """A request to the user's own server behind the hub, with a token of theirs."""
        return self.api(f"/user/{user}{path}", method, data, token=self.tokens[user])


@pytest.fixture(scope="module")
def hub():
    missing = _missing()
    if missing and os.environ.get("CI"):
        pytest.fail("the hub test needs " + " and ".join(missing))
    if missing:
        pytest.skip("no " + " and no ".join(missing))
    base = Path(tempfile.mkdtemp(prefix="course-hub-", dir="/tmp"))
    base.chmod(0o755)
    made: list[str] = []
    process = None
    try:
        for user in (TEACHER, *STUDENTS):
            if subprocess.run(["id", user], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", user], check=True)
                made.append(user)
        # the course installed once, as a package: a wheel into a shared environment beside the packages it needs
        python = _interpreter(base)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        library = {"LD_LIBRARY_PATH": str(python / "lib")}
        env_dir = base / "env"
        subprocess.run([str(python / "bin" / version), "-m", "venv", "--without-pip", str(env_dir)], check=True,
                       env={**os.environ, **library})
        site = env_dir / "lib" / version / "site-packages"
        (site / "course-dependencies.pth").write_text(
            next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(base / "dist"), str(ROOT)], check=True, capture_output=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                        str(site), *map(str, (base / "dist").glob("*.whl"))], check=True, capture_output=True)
        shutil.rmtree(ROOT / "build", ignore_errors=True)  # what setuptools leaves in the checkout
        for script, module in (("alembic", "alembic.config"),):  # what pip installing the dependencies would write
            path = env_dir / "bin" / script
            path.write_text(f"#!{env_dir / 'bin' / 'python'}\nfrom {module} import main\nmain()\n")
            path.chmod(0o755)
        # the machine-wide nbgrader configuration and the shared exchange, as deploy/ and nbgrader's docs say
        etc = base / "etc-jupyter"
        etc.mkdir()
        shutil.copy(ROOT / "deploy" / "nbgrader_config.py", etc / "nbgrader_config.py")
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)
        env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", **library, "COURSE_HUB_EXCHANGE": str(exchange),
               "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),
               "JUPYTER_CONFIG_PATH": f"{etc}:{Path(sys.prefix) / 'etc' / 'jupyter'}"}
        # the instructor's course: a checkout of its own in their home
        teacher_home = Path(pwd.getpwnam(TEACHER).pw_dir)
        course = teacher_home / "course"
        shutil.rmtree(course, ignore_errors=True)
        tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for name in filter(None, tracked.decode().split("\0")):
            if (ROOT / name).is_file():
                (course / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, course / name)
        subprocess.run(["chown", "-R", f"{TEACHER}:{TEACHER}", str(course)], check=True)
        # the hub, with deploy/jupyterhub_config.py and a test's own password, ports and proxy
        port, hub_port, api_port = servers.free_port(), servers.free_port(), servers.free_port()
        (base / "hub").mkdir()
        (base / "hub" / "jupyterhub_config.py").write_text(f"""
c = get_config()
load_subconfig({str(ROOT / 'deploy' / 'jupyterhub_config.py')!r})
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {os.urandom(8).hex()!r}
c.Authenticator.allowed_users = {{{', '.join(repr(u) for u in (TEACHER, *STUDENTS))}}}
c.JupyterHub.db_url = "sqlite:///{base / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(base / 'hub' / 'cookie_secret')!r}
c.JupyterHub.services = [{{"name": "course-test", "api_token": {SERVICE_TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "course-test", "services": ["course-test"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"]}}]
""")
        hub_env = {**os.environ, **library, "COURSE_HUB_ENV": str(env_dir), "COURSE_HUB_URL": f"http://127.0.0.1:{port}",
                   "COURSE_HUB_CONFIG": str(etc), "COURSE_HUB_DATA": str(Path(sys.prefix) / "share" / "jupyterhub"),
                   "COURSE_HUB_EXCHANGE": str(exchange), "JUPYTER_PATH": env["JUPYTER_PATH"],
                   "COURSE_HUB_JUPYTER_CONFIG": str(Path(sys.prefix) / "etc" / "jupyter")}
        log = (base / "hub" / "hub.log").open("wb")
        process = subprocess.Popen([str(env_dir / "bin" / "python"), "-m", "jupyterhub", "-f",
                                    str(base / "hub" / "jupyterhub_config.py")], cwd=base / "hub", env=hub_env,
                                   stdout=log, stderr=log)
        log.close()
        url = f"http://127.0.0.1:{port}"
        hub = Hub(url, env, {})

        def answering() -> bool:
            try:
                return hub.api("/hub/api/users", timeout=2) is not None
            except OSError:
                return False
        servers._wait(answering, 90, "JupyterHub answering", process)
        for user in (TEACHER, *STUDENTS):
            hub.tokens[user] = hub.api(f"/hub/api/users/{user}/tokens", "POST", {"note": "course test"})["token"]
        yield hub, course, exchange
    finally:
        if process is not None:
            servers._stop(process)
        for user in (TEACHER, *STUDENTS):
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
        time.sleep(0.5)
        for user in made:
            subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _start_server(hub: Hub, user: str) -> None:
    hub.api(f"/hub/api/users/{user}/server", "POST", {})
    servers._wait(lambda: (hub.api(f"/hub/api/users/{user}")["servers"].get("") or {}).get("ready"), 120,
                  f"{user}'s server ready")


def test_a_term_on_the_hub(hub):
    hub, course, exchange = hub
    teacher = lambda *command: _as(TEACHER, hub.env, *command, cwd=course)  # noqa: E731 - read as a prompt

    _step("release 01 (nbgrader release_assignment)", TEACHER,
          lambda: teacher("python", "-m", "nbgrader", "release_assignment", A))
    assert (exchange / COURSE_ID / "outbound" / A / NB).is_file()

    for student, solved in zip(STUDENTS, (True, False), strict=True):
        _step("start their server through the hub", student, lambda s=student: _start_server(hub, s))
        listed = _step("fetch 01 (Assignment List)", student, lambda s=student: hub.as_user(
            s, "/assignments/fetch", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
        assert any(a["assignment_id"] == A and a["status"] == "fetched" for a in _listed(listed)), listed
        if solved:
            nb = json.loads(nbformat.writes(complete_submission(A, NB)))
            _step("fill in the answers (save in JupyterLab)", student, lambda s=student, n=nb: hub.as_user(
                s, f"/api/contents/{FETCHED}", "PUT", {"type": "notebook", "format": "json", "content": n}))
        said = _step("validate (Assignment List's Validate)", student, lambda s=student: hub.as_user(
            s, "/assignments/validate", "POST", {"path": FETCHED}))
        assert said["success"], said
        verdict = json.loads(said["value"]) if isinstance(said["value"], str) else said["value"]
        assert bool(solved) == (not verdict.get("failed") and not verdict.get("errored")), verdict
        listed = _step("submit (Assignment List's Submit)", student, lambda s=student: hub.as_user(
            s, "/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
        assert any(a["assignment_id"] == A and a["status"] == "submitted" for a in _listed(listed)), listed

    collected = _step("collect (python -m autograder collect)", TEACHER,
                      lambda: teacher("python", "-m", "autograder", "collect", A))
    assert all(f"{s}: collected" in collected.stdout for s in STUDENTS), collected.stdout
    roster = "id,first_name,last_name,email\n" + "".join(f"{s},First {s},Last {s},{s}@uni.test\n" for s in STUDENTS)
    (course / "roster.csv").write_text(roster)
    teacher("python", "-m", "nbgrader", "db", "student", "import", "roster.csv")
    _step("grade into the gradebook (python -m autograder grade --gradebook)", TEACHER, lambda: teacher(
        "python", "-m", "autograder", "grade", "submitted", "--assignment", A, "--gradebook", "--out", "results"))
    rows = {r["student"]: r for r in _csv(course / "results" / "grades.csv")}
    assert rows[STUDENTS[0]]["score"] == rows[STUDENTS[0]]["max_score"] and rows[STUDENTS[1]]["score"] == "0", rows

    # docs/instructors.md: the instructor points their own nbgrader (Formgrader) at the course folder
    config = course.parent / ".jupyter" / "nbgrader_config.py"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f"c = get_config()\nc.CourseDirectory.root = {str(course)!r}\n")
    subprocess.run(["chown", "-R", f"{TEACHER}:{TEACHER}", str(config.parent)], check=True)
    _step("start the instructor's server through the hub", TEACHER, lambda: _start_server(hub, TEACHER))
    listed = _step("Formgrader lists both submissions with names", TEACHER,
                   lambda: hub.as_user(TEACHER, f"/formgrader/api/submissions/{A}"))
    names = {s["student"]: (s["first_name"], s["last_name"]) for s in listed}
    assert names == {s: (f"First {s}", f"Last {s}") for s in STUDENTS}, names
    bob = next(s for s in listed if s["student"] == STUDENTS[1])
    notebook = hub.as_user(TEACHER, f"/formgrader/api/submitted_notebooks/{A}/{NB[:-6]}")
    grade_id = next(n for n in notebook if n["student"] == STUDENTS[1])["id"]
    grades = hub.as_user(TEACHER, f"/formgrader/api/grades?submission_id={grade_id}")
    target = next(g for g in grades if g["max_score"] >= 1)
    saved = _step("save a manual score in Formgrader", TEACHER, lambda: hub.as_user(
        TEACHER, f"/formgrader/api/grade/{target['id']}", "PUT", {"manual_score": 1.0}))
    assert saved["manual_score"] == 1.0 and bob["student"] == STUDENTS[1]

    _step("release feedback (nbgrader release_feedback)", TEACHER,
          lambda: teacher("python", "-m", "nbgrader", "release_feedback", A))
    for student in STUDENTS:
        _step("fetch feedback (Assignment List)", student, lambda s=student: hub.as_user(
            s, "/assignments/fetch_feedback", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
        pages = list((Path(pwd.getpwnam(student).pw_dir) / A / "feedback").rglob("*.html"))
        assert len(pages) == 1, pages
        assert "Self-attention" in pages[0].read_text() or NB[:-6] in pages[0].read_text()

    print("\n| step | user | worked | seconds |\n|---|---|---|---|")
    for name, user, worked, seconds in STEPS:
        print(f"| {name} | {user} | {'yes' if worked else 'no'} | {seconds:.1f} |")


def _listed(reply: dict) -> list[dict]:
    """The assignments the Assignment List's answer lists (it says {"success": ..., "value": [...]})."""
    assert reply.get("success"), reply
    return reply["value"]


def _csv(path: Path) -> list[dict]:
    import csv  # noqa: PLC0415

    with path.open() as f:
        return list(csv.DictReader(f))
