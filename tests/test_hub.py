"""A class on a real JupyterHub: the course installed once, as a package, in a shared environment; an instructor and
two students as real users of this machine, each in their own account; assignments through one shared exchange
(deploy/nbgrader_config.py); the hub configured by deploy/jupyterhub_config.py.

As those users, with the documented commands in a terminal and, where a person clicks, in headless Chromium
through the hub: the instructor releases 01; one student logs in, fetches 01 in JupyterLab's Assignment List, fills
it in, clicks Validate (reads the dialog) and Submit; the other does the same through the Assignment List's HTTP API
without answering; the instructor collects and grades into the gradebook, opens Formgrader in a tab of its own (the
hub forbids framing it: JupyterLab's panel stays blank), sees both submissions with the roster's names and saves a
manual score, which the feedback made again takes up; releases feedback; each student fetches theirs and reads
their score there. Every step asserts what a person would check; the table of steps prints.

Needs root (it makes the users, and removes them), JupyterHub and Playwright (requirements-test.txt), Debian's
chromium and configurable-http-proxy (.ci/run installs it from the npm registry into tests/.node); without them it
skips, except under CI, where it fails. About 80 s on 2 cores (the browser adds about 10): worth it as the only
run of the path a class takes on a hub (one hub started for everything, one browser).
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
from test_browser import CHROMIUM, CHROMIUM_FLAGS, _new_page, sync_playwright
from test_wheel import build_wheel

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
    if not CHROMIUM.exists() or sync_playwright is None:
        missing.append(f"Chromium ({CHROMIUM}) and Playwright (.ci/run installs them)")
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
    def __init__(self, url: str, env: dict, users: dict[str, str], password: str):
        self.url, self.env, self.tokens, self.password = url, env, users, password

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
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                        str(site), str(build_wheel(base))], check=True, capture_output=True)
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
        password = os.urandom(8).hex()
        (base / "hub").mkdir()
        (base / "hub" / "jupyterhub_config.py").write_text(f"""
c = get_config()
load_subconfig({str(ROOT / 'deploy' / 'jupyterhub_config.py')!r})
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
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
        hub = Hub(url, env, {}, password)

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


@pytest.fixture(scope="module")
def chromium(hub):
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def _log_in(browser, hub: Hub, user: str, wait_until: str = "load"):
    """The hub's login page, as the user; the hub then starts their server and sends them to JupyterLab on it (for
    wait_until="commit", no further than its first byte: the instructor goes on to Formgrader's own address)."""
    context, page = _new_page(browser)
    page.set_default_timeout(60_000)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(f"{hub.url}/user/{user}/**", wait_until=wait_until)
    return page


# ------------------------------------------------------------------ what a student clicks (JupyterLab under the hub)

RELEASED = "#released_assignments_list > .list_item"
FETCHED_LIST = "#fetched_assignments_list > .list_item"
SUBMITTED = "#submitted_assignments_list > .list_item"


def _open_assignment_list(page) -> None:
    page.locator("#jp-main-dock-panel").wait_for()
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator('#jp-mainmenu-nbgrader li[data-command="nbgrader:open-assignment-list"]').click()
    page.locator(RELEASED, has_text=A).wait_for()


def _click_fetch(page) -> str:
    page.locator(RELEASED, has_text=A).locator(".item_status button", has_text="Fetch").click()
    fetched = page.locator(FETCHED_LIST, has_text=A)
    fetched.wait_for()
    return fetched.inner_text()


def _click_validate(page) -> str:
    """Open the fetched assignment's notebooks, click Validate on the notebook; the dialog's text, then close it."""
    page.locator("#fetched_assignments_list a", has_text=A).click()
    page.locator("#fetched_assignments_list .list_item", has_text=NB[:-6]).locator(
        ".item_status button", has_text="Validate").click()
    dialog = page.locator(".nbgrader-SuccessDialog, .nbgrader-ErrorDialog")
    dialog.wait_for()
    text = dialog.inner_text()
    dialog.locator("button.jp-Dialog-button").click()
    return text


def _click_submit(page) -> str:
    page.locator(FETCHED_LIST, has_text=A).locator(".item_status button", has_text="Submit").first.click()
    submitted = page.locator(SUBMITTED, has_text=A)
    submitted.wait_for()
    return submitted.inner_text()


# ------------------------------------------------------------------ what the instructor clicks (Formgrader in its tab)

def _formgrader_submissions(page, hub: Hub) -> tuple[dict, str]:
    """Formgrader's page of 01's submissions, opened by its address: {student id: (name, score)}, and the
    Content-Security-Policy the page came with."""
    answer = page.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_submissions/{A}")
    page.wait_for_function("() => document.querySelectorAll('#main-table td.student-id').length >= 2")
    rows = page.locator("#main-table tr")
    cell = lambda i, name: rows.nth(i).locator(name).inner_text().strip()  # noqa: E731
    seen = {cell(i, ".student-id"): (cell(i, ".student-name"), cell(i, ".score")) for i in range(rows.count())}
    return seen, answer.headers.get("content-security-policy", "")


def _save_manual_score(page, hub: Hub, student: str) -> str:
    """From the notebook's submissions (names shown), open the student's submission, type 1 into the first score
    box and leave it (Formgrader saves on change); reload the page and read the box again."""
    page.goto(f"{hub.url}/user/{TEACHER}/formgrader/gradebook/{A}/{NB[:-6]}")
    link = page.locator("a.name-shown", has_text=f"Last {student}")
    link.wait_for(state="attached")
    page.goto(hub.url + link.get_attribute("href"))
    loaded = "() => window.formgrader && formgrader.grades && formgrader.grades.loaded"  # the boxes save from then on
    page.wait_for_function(loaded)
    box = page.locator("input.score").first
    with page.expect_response(lambda r: "/api/grade/" in r.url and r.request.method == "PUT") as saved:
        box.fill("1")
        box.press("Tab")
    assert saved.value.ok, saved.value.status
    page.reload()
    page.wait_for_function(loaded)
    return page.locator("input.score").first.input_value()


def test_a_term_on_the_hub(hub, chromium):
    hub, course, exchange = hub
    teacher = lambda *command: _as(TEACHER, hub.env, *command, cwd=course)  # noqa: E731 - read as a prompt
    ada, bob = STUDENTS

    _step("release 01 (nbgrader release_assignment)", TEACHER,
          lambda: teacher("python", "-m", "nbgrader", "release_assignment", A))
    assert (exchange / COURSE_ID / "outbound" / A / NB).is_file()

    # ada, in Chromium: what she clicks in JupyterLab's Assignment List, and what she reads there
    page = _step("log in; the hub starts JupyterLab (browser)", ada, lambda: _log_in(chromium, hub, ada))
    _step("open the Assignment List: 01 released (Nbgrader menu)", ada, lambda: _open_assignment_list(page))
    listed = _step("click Fetch (Assignment List)", ada, lambda: _click_fetch(page))
    assert COURSE_ID in listed and (Path(pwd.getpwnam(ada).pw_dir) / FETCHED).is_file(), listed
    nb = json.loads(nbformat.writes(complete_submission(A, NB)))
    _step("fill in the answers (save in JupyterLab)", ada, lambda: hub.as_user(
        ada, f"/api/contents/{FETCHED}", "PUT", {"type": "notebook", "format": "json", "content": nb}))
    said = _step("click Validate (Assignment List)", ada, lambda: _click_validate(page))
    assert "Success! Your notebook passes all the tests." in said, said
    # the grading service (python -m autograder serve) runs while ada submits: her feedback comes without the teacher
    service = _serve(hub, course)
    try:
        listed = _step("click Submit (Assignment List)", ada, lambda: _click_submit(page))
        assert COURSE_ID in listed, listed
        page.context.close()
        feedback = _step("the grading service grades and releases; fetch feedback within a minute", ada,
                         lambda: _feedback_within(hub, ada, 60))
        assert "Graded" in feedback and "after you submitted" in feedback, feedback[:3000]
    finally:
        # SIGTERM to the service itself (runuser would answer its own with SIGKILL after 2 s): it ends its step
        subprocess.run(["pkill", "-TERM", "-u", TEACHER, "-f", "autograder serve"], check=False)
        assert service.wait(timeout=120) == 0, service.communicate()[1][-3000:]
    assert "released feedback" in (course / "results" / "serve.log").read_text()

    # bob, through the same Assignment List's HTTP API, hands in what he fetched without answering
    _step("start their server through the hub", bob, lambda: _start_server(hub, bob))
    listed = _step("fetch 01 (Assignment List's API)", bob, lambda: hub.as_user(
        bob, "/assignments/fetch", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
    assert any(a["assignment_id"] == A and a["status"] == "fetched" for a in _listed(listed)), listed
    said = _step("validate (Assignment List's API)", bob, lambda: hub.as_user(
        bob, "/assignments/validate", "POST", {"path": FETCHED}))
    verdict = json.loads(said["value"]) if isinstance(said["value"], str) else said["value"]
    assert said["success"] and (verdict.get("failed") or verdict.get("errored")), said
    listed = _step("submit (Assignment List's API)", bob, lambda: hub.as_user(
        bob, "/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
    assert any(a["assignment_id"] == A and a["status"] == "submitted" for a in _listed(listed)), listed

    collected = _step("collect (python -m autograder collect)", TEACHER,
                      lambda: teacher("python", "-m", "autograder", "collect", A))
    assert f"{bob}: collected" in collected.stdout and f"{ada}: nothing newer" in collected.stdout, collected.stdout
    roster = "id,first_name,last_name,email\n" + "".join(f"{s},First {s},Last {s},{s}@uni.test\n" for s in STUDENTS)
    (course / "roster.csv").write_text(roster)
    teacher("python", "-m", "nbgrader", "db", "student", "import", "roster.csv")
    graded = _step("grade into the gradebook (python -m autograder grade --gradebook)", TEACHER, lambda: teacher(
        "python", "-m", "autograder", "grade", "submitted", "--assignment", A, "--gradebook", "--out", "results"))
    # the students' course is the hub's wheel, the instructor grades with their checkout: said before grading
    assert f"grading with the course folder's course, {course / 'course'}" in graded.stderr, graded.stderr
    assert "/env/lib/" in graded.stderr and "the same files" in graded.stderr, graded.stderr
    rows = {r["student"]: r for r in _csv(course / "results" / "grades.csv")}
    assert rows[ada]["score"] == rows[ada]["max_score"] and rows[bob]["score"] == "0", rows
    full = rows[ada]["max_score"]

    # docs/instructors.md: the instructor points their own nbgrader (Formgrader) at the course folder
    config = course.parent / ".jupyter" / "nbgrader_config.py"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f"c = get_config()\nc.CourseDirectory.root = {str(course)!r}\n")
    subprocess.run(["chown", "-R", f"{TEACHER}:{TEACHER}", str(config.parent)], check=True)
    page = _step("log in; the hub starts their server (browser)", TEACHER,
                 lambda: _log_in(chromium, hub, TEACHER, wait_until="commit"))
    seen, policy = _step("open Formgrader in its own tab: both submissions, names and scores", TEACHER,
                         lambda: _formgrader_submissions(page, hub))
    assert "frame-ancestors 'none'" in policy, f"the hub now allows framing ({policy!r}): README's advice is moot"
    expected = {ada: (f"Last {ada}, First {ada}", f"{float(full):g} / {float(full):g}"),
                bob: (f"Last {bob}, First {bob}", f"0 / {float(full):g}")}
    assert seen == expected, seen
    value = _step("type a manual score for bob's first answer; it stays after a reload", TEACHER,
                  lambda: _save_manual_score(page, hub, bob))
    assert float(value) == 1.0, value
    seen, _ = _formgrader_submissions(page, hub)
    assert seen[bob][1] == f"1 / {float(full):g}", seen
    page.context.close()

    # the pages grading wrote predate the manual score: made again from the gradebook before they are released
    _step("feedback again after manual grading (nbgrader generate_feedback --force)", TEACHER,
          lambda: teacher("python", "-m", "nbgrader", "generate_feedback", A, "--force"))
    _step("release feedback (nbgrader release_feedback)", TEACHER,
          lambda: teacher("python", "-m", "nbgrader", "release_feedback", A))
    scores = {ada: f"Score: {float(full):.1f} / {float(full):.1f}", bob: f"Score: 1.0 / {float(full):.1f}"}
    for student in STUDENTS:
        _step("fetch feedback (Assignment List's API)", student, lambda s=student: hub.as_user(
            s, "/assignments/fetch_feedback", "POST", {"course_id": COURSE_ID, "assignment_id": A}))
        pages = list((Path(pwd.getpwnam(student).pw_dir) / A / "feedback").rglob("*.html"))
        assert len(pages) == 1, pages
        page = pages[0].read_text()
        assert "Self-attention" in page or NB[:-6] in page
        assert scores[student] in page, (student, scores[student], page[:3000])

    print("\n| step | user | worked | seconds |\n|---|---|---|---|")
    for name, user, worked, seconds in STEPS:
        print(f"| {name} | {user} | {'yes' if worked else 'no'} | {seconds:.1f} |")


def _serve(hub: Hub, course: Path) -> subprocess.Popen:
    """The grading service as the instructor starts it (docs/instructors.md), in the background."""
    home = Path(pwd.getpwnam(TEACHER).pw_dir)
    return subprocess.Popen(["runuser", "-u", TEACHER, "--", "env", "-i", f"HOME={home}", f"USER={TEACHER}",
                             f"LOGNAME={TEACHER}", *[f"{k}={v}" for k, v in hub.env.items()], "python", "-m",
                             "autograder", "serve", "--assignment", A, "--out", "results", "--poll", "0.5"],
                            cwd=course, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _feedback_within(hub: Hub, student: str, seconds: float) -> str:
    """Fetch Feedback (the Assignment List's API) until the student's feedback page is there; its text."""
    deadline = time.monotonic() + seconds
    folder = Path(pwd.getpwnam(student).pw_dir) / A / "feedback"
    while time.monotonic() < deadline:
        hub.as_user(student, "/assignments/fetch_feedback", "POST", {"course_id": COURSE_ID, "assignment_id": A})
        pages = list(folder.rglob("*.html"))
        if pages:
            return pages[0].read_text()
        time.sleep(2)
    raise AssertionError(f"no feedback for {student} {seconds:.0f} s after Submit")


def _listed(reply: dict) -> list[dict]:
    """The assignments the Assignment List's answer lists (it says {"success": ..., "value": [...]})."""
    assert reply.get("success"), reply
    return reply["value"]


def _csv(path: Path) -> list[dict]:
    import csv  # noqa: PLC0415

    with path.open() as f:
        return list(csv.DictReader(f))
