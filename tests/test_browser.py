"""A student's session in a real browser (headless Chromium from Debian's package,
driven by Playwright, both installed by .ci/run from requirements-test.txt; setup.sh installs neither).

- JupyterLab started as docs/students.md says (`.venv/bin/jupyter lab release/`, here on a copy of release/);
- a release notebook opens without being marked modified;
- it runs from the top; its answer cells are typed in (the solutions of source/); it runs again without errors;
- nbgrader's Validate button reports that every test passes, and with a catalogued mistake typed in instead,
  shows the course's diagnosis; neither dialog needs horizontal scrolling.

tests/test_site.py opens the course's site in the same browser.

Without Chromium or Playwright the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from conftest import source_answers

from autograder import course_dir
from autograder.judging import judges_module
from autograder.notebooks import grade_id
from catalogue import mistakes
from course.checks.compare import WIDTH

ROOT = course_dir.ROOT
CHROMIUM = Path(os.environ.get("COURSE_TEST_CHROMIUM", "/usr/bin/chromium"))
#: headless Chromium kept off the network: no background requests, no component updates, no QUIC
CHROMIUM_FLAGS = ["--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
ASSIGNMENT, NOTEBOOK = "01_self_attention", "self_attention.ipynb"
WRONG = "weights-no-softmax"  # catalogue: attention_weights without its softmax
VIEWPORT = {"width": 1280, "height": 800}  # a laptop's screen
STEPS: list[tuple[str, float]] = []

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError:  # only .ci/run installs it
    sync_playwright = PlaywrightTimeout = None

pytestmark = pytest.mark.browser


def _missing() -> list[str]:
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"Chromium ({CHROMIUM}; Debian: apt-get install chromium)")
    if sync_playwright is None:
        missing.append("Playwright (.venv/bin/pip install -r requirements-test.txt)")
    return missing


def require_browser(who: str) -> None:
    """Fail under CI (which installs them), else skip, when Chromium or Playwright is missing."""
    missing = _missing()
    if missing and os.environ.get("CI"):
        pytest.fail(f"{who} need " + " and ".join(missing) + "; .ci/run installs them")
    if missing:
        pytest.skip("no " + " and no ".join(missing) + " (.ci/run installs them; setup.sh does not)")


@pytest.fixture(scope="module", autouse=True)
def _browser_tools():
    require_browser("the browser tests")
    STEPS.clear()
    yield
    total = sum(seconds for _, seconds in STEPS)
    print("\n\nbrowser test steps:\n" + "\n".join(f"  {seconds:5.1f} s  {step}" for step, seconds in STEPS)
          + f"\n  {total:5.1f} s  in all")


class Timer:
    def __init__(self):
        self.last = time.monotonic()

    def step(self, what: str) -> None:
        now = time.monotonic()
        STEPS.append((what, now - self.last))
        self.last = now


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab as a student starts it, `.venv/bin/jupyter lab release/`, on a copy of the course's release/ (and
    its nbgrader_config.py), with its own port and Jupyter folders, no browser and no token."""
    timer = Timer()
    tmp = tmp_path_factory.mktemp("lab")
    course = tmp / "course"
    shutil.copytree(ROOT / "release", course / "release")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    env = dict(os.environ)
    for variable, folder in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                             ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                             ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")]:
        env[variable] = str(tmp / folder)
    port = _free_port()
    command = [str(Path(sys.executable).with_name("jupyter")), "lab", "release/", f"--port={port}",
               "--ip=127.0.0.1", "--no-browser", "--IdentityProvider.token=", "--ServerApp.password="]
    if os.geteuid() == 0:
        command.append("--allow-root")  # CI runs as root; a student does not
    log = open(tmp / "jupyter.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(command, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start:\n{(tmp / 'jupyter.log').read_text()[-3000:]}")
            time.sleep(0.3)
        timer.step("start JupyterLab (.venv/bin/jupyter lab release/)")
        yield {"url": url, "course": course, "log": tmp / "jupyter.log"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def _new_page(browser):
    """A fresh page that may reach this machine only: any other request is recorded and refused."""
    context = browser.new_context(viewport=VIEWPORT)
    fetched: list[str] = []

    def only_local(route):
        parts = urlsplit(route.request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in ("127.0.0.1", "localhost"):
            fetched.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", only_local)
    page = context.new_page()
    page.remote_requests = fetched
    return context, page


@pytest.fixture
def page(browser):
    context, page = _new_page(browser)
    yield page
    context.close()


@pytest.fixture(scope="module")
def notebook(browser, lab):
    """The release notebook open in JupyterLab, its kernel started: one page that the student's tests share."""
    timer = Timer()
    context, page = _new_page(browser)
    _open(page, lab, f"{ASSIGNMENT}/{NOTEBOOK}")
    timer.step("open a release notebook in JupyterLab, kernel started")
    yield page
    context.close()


# ------------------------------------------------------------------ JupyterLab

NOTEBOOK_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
MEASURE_DIALOG = """() => {
  const body = document.querySelector('.jp-Dialog-body');
  const pres = [...document.querySelectorAll('#validation-message pre')];
  return {
    body: [body.scrollWidth, body.clientWidth],
    pres: pres.map(pre => [pre.scrollWidth, pre.clientWidth]),
    errors: pres.map(pre => pre.innerText).filter(text => text.startsWith('CheckFailed')),
    text: document.querySelector('#validation-message').innerText,
  };
}"""


def _open(page, lab, path: str) -> None:
    page.goto(f"{lab['url']}/lab/tree/{path}?reset")  # ?reset: no workspace restored
    page.locator(f"{NOTEBOOK_PANEL} .jp-Cell").first.wait_for(timeout=60_000)
    _wait_idle(page)


#: the execution prompts of the notebook's cells, e.g. ["[1]:", "[*]:", "[ ]:"]
_PROMPTS = f"() => [...document.querySelectorAll('{NOTEBOOK_PANEL} .jp-InputPrompt')].map(p => p.textContent)"


def _wait_idle(page, timeout: float = 120) -> None:
    """Until the kernel is idle and no cell waits to run ([*]), twice in a row."""
    deadline, calm = time.monotonic() + timeout, 0
    while calm < 2:
        busy = page.evaluate(f"""() => {{
          const status = document.querySelector('{NOTEBOOK_PANEL} .jp-Notebook-ExecutionIndicator');
          const waiting = [...document.querySelectorAll('{NOTEBOOK_PANEL} .jp-InputPrompt')]
            .some(p => p.textContent.includes('*'));
          return !status || status.dataset.status !== 'idle' || waiting;
        }}""")
        calm = 0 if busy else calm + 1
        assert time.monotonic() < deadline, "the kernel stayed busy"
        time.sleep(0.5)


def _dirty_tabs(page) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty')].map(t => t.textContent)")


def _run_all(page) -> None:
    before = page.evaluate(_PROMPTS)
    changed = f"before => JSON.stringify(({_PROMPTS})()) !== JSON.stringify(before)"
    for attempt in range(4):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        # on a busy machine the first cell may start seconds later, and a click on a menu still being drawn may
        # be lost: wait until some prompt has changed, and click again if none has
        try:
            page.wait_for_function(changed, arg=before, timeout=45_000)
            break
        except PlaywrightTimeout:
            assert attempt < 3, "Run All Cells never started the notebook"
            page.keyboard.press("Escape")
    _wait_idle(page)


def _error_outputs(page) -> list[str]:
    return page.locator(f"{NOTEBOOK_PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                        ).all_text_contents()  # innerText is empty for cells scrolled out of view


def _type_into(page, index: int, code: str) -> None:
    """Replace the text of the cell at index by code, as a student's keyboard would, and leave the editor."""
    cell = page.locator(f"{NOTEBOOK_PANEL} .jp-Notebook .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.keyboard.press("Escape")
    first_line = code.strip().splitlines()[0]
    assert first_line in cell.locator(".cm-content").inner_text(), f"typing into cell {index} failed"


def _validate(page) -> dict:
    page.locator(f"{NOTEBOOK_PANEL} .validate-button").click()
    page.locator("#validation-message").wait_for(timeout=120_000)
    seen = page.evaluate(MEASURE_DIALOG)
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.locator("#validation-message").wait_for(state="detached")
    return seen


def _assert_fits(seen: dict) -> None:
    """No horizontal scrolling, and no line of the course's messages longer than compare.WIDTH."""
    scroll, client = seen["body"]
    assert scroll <= client, f"the Validate dialog scrolls sideways ({scroll} > {client} px)"
    for scroll, client in seen["pres"]:
        assert scroll <= client, f"a block of the Validate dialog scrolls sideways ({scroll} > {client} px)"
    for error in seen["errors"]:
        assert max(len(line) for line in error.splitlines()) <= WIDTH, error


def _words(text: str) -> str:
    return " ".join(text.split())


def test_opening_a_release_notebook_does_not_mark_it_modified(notebook):
    time.sleep(2)  # JupyterLab writes the kernel's language_info into the notebook once the kernel is up
    assert not _dirty_tabs(notebook), "JupyterLab changed the notebook on opening it: see autograder/build.py"
    STEPS.append(("... and it is not marked modified", 2.0))


def test_a_student_runs_fills_in_and_validates_a_release_notebook(notebook):
    timer, page = Timer(), notebook
    release = nbformat.read(ROOT / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    index = {grade_id(cell): i for i, cell in enumerate(release.cells)}
    answers = source_answers(ASSIGNMENT, NOTEBOOK)
    page.wait_for_function(f"() => document.querySelectorAll('{NOTEBOOK_PANEL} .jp-Notebook .jp-Cell').length"
                           f" === {len(release.cells)}")  # JupyterLab adds the cells a few at a time

    _run_all(page)
    outputs = page.locator(f"{NOTEBOOK_PANEL} .jp-OutputArea-output").all_text_contents()
    assert any("running on" in text for text in outputs), outputs
    assert _error_outputs(page), "a release notebook with nothing filled in ran without a failure"
    timer.step("run all from the top (stops at the first unfinished exercise)")

    for cell, code in answers.items():
        _type_into(page, index[cell], code)
    timer.step(f"type the {len(answers)} answers in")

    _run_all(page)
    assert not _error_outputs(page), _error_outputs(page)
    timer.step("run all again: no errors")

    seen = _validate(page)
    assert "Success! Your notebook passes all the tests." in seen["text"], seen["text"]
    _assert_fits(seen)
    timer.step("Validate: every test passes")

    wrong = next(v for v in mistakes(ASSIGNMENT) if v.name == WRONG)
    _type_into(page, index[wrong.cell], wrong.code)
    seen = _validate(page)
    explanation = judges_module(ASSIGNMENT).WRITTEN[wrong.mistake].explanation  # 01 writes its mistakes as code
    assert "The following cell failed" in seen["text"]
    assert _words(explanation) in _words(seen["text"]), f"the dialog does not say {explanation!r}:\n{seen['text']}"
    assert "softmax" in seen["text"]
    _assert_fits(seen)
    timer.step(f"type a mistake ({wrong.mistake}), Validate: the course's diagnosis")
    assert not page.remote_requests, page.remote_requests
