"""Feedback reaches the student, whatever way the submission came: a folder submission of 01 (no timestamp.txt, no
submission_secret.txt: what a shared drive or an LMS gives) graded by real nbgrader into an instructor's gradebook.

Its feedback page, opened in headless Chromium with every request off the machine refused, shows the notebook's math
laid out as MathML; nbgrader's own release_feedback releases it into the exchange, and nbgrader's fetch_feedback run
as the student brings it home (autograder/math_render.py, autograder/exchange.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from conftest import complete_submission, instructor_course, use_sandbox, write_submission
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange.default import ExchangeList
from test_math_render import math_spans
from traitlets.config import Config

from autograder.exchange import (
    KEPT_IN,
    SECRET,
    TIMESTAMP,
    feedback_name,
    make_releasable,
    release_files,
    write_student_cache,
)
from autograder.grade import grade

A, NB = "01_self_attention", "self_attention.ipynb"
PAGE = NB.replace(".ipynb", ".html")
STUDENT = "zoe"
COURSE_ID = "transformers-from-scratch"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory):
    """(course, output folder): one folder submission of 01 graded into an instructor's SQLite gradebook."""
    root = tmp_path_factory.mktemp("feedback-delivery")
    write_submission(root / "batch", STUDENT, A, NB, complete_submission(A, NB))
    course = instructor_course(root / "course", f"sqlite:///{root / 'course' / 'gradebook.db'}")
    rows = grade(root / "batch", root / "out", [A], sandbox=use_sandbox(), progress=False, gradebook=course)
    assert [(row.student, row.status, row.score) for row in rows] == [(STUDENT, "graded", 8.0)], rows
    return course, root / "out"


def _nbgrader(cwd: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess:
    """An nbgrader command run as a person would: in cwd, the course environment not activated."""
    env = {**os.environ, "PATH": "/usr/bin:/bin", **({"HOME": str(home)} if home else {})}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    return done


# ------------------------------------------------------------------------------------------------ math, offline

#: per math element of the markdown: laid out by the browser as MathML (its display type), its size, and whether
#: every fraction has its numerator above its denominator; and the markdown's visible text
LAYOUT = """() => {
  const maths = [...document.querySelectorAll('.text_cell_render math')];
  return {
    maths: maths.map(m => {
      const box = m.getBoundingClientRect();
      return {ns: m.namespaceURI, display: getComputedStyle(m).display, width: box.width, height: box.height};
    }),
    fractions: [...document.querySelectorAll('.text_cell_render mfrac')].map(f => {
      const [top, bottom] = [...f.children].map(c => c.getBoundingClientRect());
      return top.bottom <= bottom.top + 1;
    }),
    text: [...document.querySelectorAll('.text_cell_render')].map(c => c.innerText),
  };
}"""


@pytest.mark.browser
@pytest.mark.slow
def test_the_feedback_page_shows_its_math_offline_in_a_browser(graded):
    from test_inert_content import _browser_or_skip  # noqa: PLC0415 - Chromium present, or skipped/failed as there

    flags = _browser_or_skip()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only the browser tests need it

    _, out = graded
    page_path = out / "feedback" / STUDENT / A / PAGE
    html = page_path.read_text()
    assert "<script" not in html.lower(), "a feedback page runs no script: no MathJax, nothing else"
    expected = len(math_spans(nbformat.read(out.parent / "batch" / STUDENT / A / NB, as_version=4)))
    refused: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        context = browser.new_context()

        def offline(route):
            if urlsplit(route.request.url).scheme != "file":
                refused.append(route.request.url)
                return route.abort()
            return route.continue_()

        context.route("**/*", offline)
        page = context.new_page()
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        seen = page.evaluate(LAYOUT)
        browser.close()
    assert not refused, f"the feedback page asked the network for {refused}"
    maths = seen["maths"]
    assert len(maths) == expected > 10, f"{len(maths)} math elements for the notebook's {expected} formulas"
    assert all(m["ns"] == "http://www.w3.org/1998/Math/MathML" and "math" in m["display"] for m in maths), maths[:3]
    assert all(m["width"] > 0 and m["height"] > 0 for m in maths), "a formula was laid out with no size"
    assert seen["fractions"] and all(seen["fractions"]), "a fraction's numerator is not above its denominator"
    raw = [text for text in seen["text"] if "$" in text or "\\frac" in text or "\\sum" in text]
    assert not raw, f"TeX left as text: {raw[:2]}"


# ------------------------------------------------------------------------------------------------ the exchange

def _listed_with_feedback(exchange: Path, cache: Path) -> bool:
    """What the student's Assignment List (nbgrader's list of cached submissions) says: feedback ready to fetch."""
    config = Config()
    config.Exchange.root, config.Exchange.cache = str(exchange), str(cache)
    config.CourseDirectory.course_id, config.CourseDirectory.student_id = COURSE_ID, STUDENT
    lister = ExchangeList(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config),
                          config=config)
    lister.cached = True
    listed = lister.start()
    return [(a["assignment_id"], [s["has_exchange_feedback"] for s in a["submissions"]]) for a in listed] == \
        [(A, [True])]


def test_a_folder_submissions_feedback_goes_back_through_nbgraders_exchange(graded, tmp_path):
    course, _ = graded
    # grade.py puts release_files' secret into the submission before grading it; a course graded before that (as
    # this one may be) gets one from make_releasable; either way nbgrader keeps it where a submitted one would be
    make_releasable(course.root, A)
    secret = (course.root / "submitted" / STUDENT / A / SECRET).read_text()
    assert len(secret) == 128, "a secret as nbgrader's submit makes them"
    assert all((course.root / kind / STUDENT / A / SECRET).read_text() == secret for kind in KEPT_IN)
    assert release_files(course.root, STUDENT, A, {}) == {SECRET: secret.encode()}, "a regrade keeps the secret"

    _nbgrader(course.root, "release_feedback", A)  # as the instructor, in the course folder
    released = course.root / "exchange" / COURSE_ID / "feedback" / feedback_name(secret, NB)
    assert released.read_bytes() == (course.root / "feedback" / STUDENT / A / PAGE).read_bytes()

    # as the student, in their own folder: their cache holds what submit would have left there
    home, cache = tmp_path / "home", tmp_path / "cache"
    home.mkdir()
    submitted = course.root / "submitted" / STUDENT / A
    entry = write_student_cache(cache, COURSE_ID, STUDENT, A, {NB: (submitted / NB).read_bytes()},
                                {name: (submitted / name).read_bytes() for name in (SECRET, TIMESTAMP)})
    assert _listed_with_feedback(course.root / "exchange", cache), "the Assignment List would offer no feedback"
    _nbgrader(home, "fetch_feedback", A, f"--Exchange.root={course.root / 'exchange'}",
              f"--CourseDirectory.course_id={COURSE_ID}", f"--Exchange.cache={cache}",
              f"--CourseDirectory.student_id={STUDENT}", home=home)
    fetched = list((home / A / "feedback").glob(f"*/{PAGE}"))
    assert [p.parent.name for p in fetched] == [entry.name.rsplit("+", 1)[1]], fetched
    assert fetched[0].read_bytes() == released.read_bytes()
