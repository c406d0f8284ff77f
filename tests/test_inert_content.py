"""Anything a student wrote is data: graded notebooks, feedback pages, grades.csv and report.md run or evaluate none
of it. The sanitising step on in-memory notebooks, the feedback exporter on a notebook that skipped it, the CSV and
the report on hostile strings, and a real graded submission opened in headless Chromium."""

from __future__ import annotations

import base64
import copy
import csv
import html
import http.server
import json
import re
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import hostile_content as hc
import nbformat
import pytest
import servers
from conftest import ROOT, instructor_course, release_notebook, use_sandbox
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbformat.v4 import new_markdown_cell, new_notebook, new_output
from nbgrader.converters import GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder.notebooks import grade_id
from autograder.report import write as write_report
from autograder.results import Grade, table, write_csv
from autograder.sanitise import MARKDOWN_CELL_LIMIT, MARKDOWN_TOTAL_LIMIT, SanitiseStudentContent, clean_html
from autograder.workspace import course_config

A, NB = hc.A, hc.NB
PNG = hc.PNG
VERDICT = new_output("error", ename="CheckFailed", evalue="The rows of w do not sum to 1: the softmax is missing.",
                     traceback=["CheckFailed:", "The rows of w do not sum to 1: the softmax is missing."])
COURSE_OUTPUTS = [new_output("stream", name="stdout", text="running on cpu\n"),
                  new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"},
                             metadata={"image/png": {"width": 320, "height": 240}}),
                  new_output("execute_result", data={"text/plain": "tensor([1., 2.])"}, execution_count=3)]
HOSTILE_OUTPUTS = [
    new_output("display_data", data={"text/html": hc.PAYLOADS["html_script"] + hc.PAYLOADS["img_onerror"]
                                     + "<b>bold stays</b><table><tr><td>1</td></tr></table>" + hc.PAYLOADS["iframe"],
                                     "text/plain": "<IPython.core.display.HTML object>"}),
    new_output("display_data", data={"application/javascript": hc.PAYLOADS["javascript_output"]}),
    new_output("display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "abc", "version_major": 2,
                                                                                  "version_minor": 0},
                                     "text/plain": "IntSlider(value=0)"}),
    new_output("display_data", data={"image/svg+xml": hc.PAYLOADS["svg"]}),
    new_output("display_data", data={"text/markdown": hc.MARKDOWN}),
    new_output("display_data", data={"text/latex": "$\\href{javascript:window.__pwned=1}{x}$"}),
    new_output("display_data", data={"image/png": PNG}, metadata={"image/png": {"width": "1 onerror=alert(1)"}}),
]


def _resources() -> dict:
    return {"nbgrader": {"assignment": A, "notebook": NB.removesuffix(".ipynb"), "student": "mallory"}}


def _config() -> Config:
    config = Config()
    config.CourseDirectory.root = str(ROOT)
    return config


def _graded_notebook() -> nbformat.NotebookNode:
    """01 as grading leaves it, with the course's outputs and verdicts, a student's hostile outputs in an answer
    cell, a markdown cell and a raw cell of the student's, and saved widget state."""
    nb = release_notebook(A, NB)
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    answer.outputs = copy.deepcopy(COURSE_OUTPUTS + HOSTILE_OUTPUTS)
    test = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    test.outputs = [copy.deepcopy(VERDICT)]
    at = nb.cells.index(answer) + 1
    nb.cells.insert(at, new_markdown_cell(hc.MARKDOWN))
    nb.cells.insert(at + 1, nbformat.v4.new_raw_cell(hc.PAYLOADS["markdown_script"],
                                                      metadata={"raw_mimetype": "text/html"}))
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}}
    return nb


def _sanitised(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb, _ = SanitiseStudentContent(config=_config()).preprocess(nb, _resources())
    return nb


def _student_parts(nb: nbformat.NotebookNode) -> str:
    """What a browser would render of the student's: markdown and raw cells and every output (code is highlighted
    as text by nbconvert, so the payloads may stay in the code itself)."""
    parts = [c.source for c in nb.cells if c.cell_type in ("markdown", "raw")]
    parts += [nbformat.writes(nbformat.from_dict({"o": c.outputs})) for c in nb.cells if c.cell_type == "code"]
    parts.append(repr(nb.metadata))
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------ the notebook

def test_hostile_markup_and_outputs_lose_scripts_handlers_links_and_frames():
    nb = _graded_notebook()
    before = _student_parts(nb).lower()
    assert all(active in before for active in hc.ACTIVE), "the hostile notebook lacks a payload"
    after = _student_parts(_sanitised(nb)).lower()
    for active in hc.ACTIVE + ("<object", "<embed", "<form", "\\href", "widget-state"):
        assert active not in after, f"{active!r} survived the sanitiser"


def test_active_outputs_are_removed_and_the_removal_is_said():
    nb = _sanitised(_graded_notebook())
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    mimes = {mime for output in answer.outputs for mime in output.get("data", {})}
    assert not mimes & {"application/javascript", "application/vnd.jupyter.widget-view+json", "image/svg+xml"}
    notes = [o.data["text/plain"] for o in answer.outputs if "not shown in grading" in o.get("data", {}).get(
        "text/plain", "")]
    assert any("application/javascript" in note for note in notes) and any("svg" in note for note in notes), notes
    widget = next(o for o in answer.outputs if "IntSlider" in o.get("data", {}).get("text/plain", ""))
    assert set(widget.data) == {"text/plain"}, "a widget keeps its plain-text form only"
    odd = answer.outputs[len(COURSE_OUTPUTS) + len(HOSTILE_OUTPUTS) - 1]
    assert odd.data["image/png"] == PNG and odd.metadata == {}, "an image's metadata is numbers or nothing"


def test_safe_html_and_the_students_own_math_survive():
    nb = _sanitised(_graded_notebook())
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    html = answer.outputs[len(COURSE_OUTPUTS)].data["text/html"]
    assert "<b>bold stays</b>" in html and "<td>1</td>" in html, html
    notes = next(c for c in nb.cells if c.cell_type == "markdown" and "My notes" in c.source)
    assert "$\\sqrt{d}$" in notes.source and "[click me]" in notes.source, notes.source


def test_the_course_content_survives_unchanged():
    original = _graded_notebook()
    nb = _sanitised(copy.deepcopy(original))
    course = [c.source for c in release_notebook(A, NB).cells if c.cell_type == "markdown"]
    kept = [c.source for c in nb.cells if c.cell_type == "markdown" and "My notes" not in c.source]
    assert kept == course, "the course's own markdown (math, headings) changed"
    assert any("$y_i = \\sum_{j=1}^{t}" in source for source in kept)
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    assert answer.outputs[: len(COURSE_OUTPUTS)] == COURSE_OUTPUTS, "a figure, a print or a result changed"
    test = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    assert test.outputs == [VERDICT], "the judge's verdict changed"
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code == [c.source for c in original.cells if c.cell_type == "code"]


# ------------------------------------------------------------------------------------------------ the exporter

def _render(nb: nbformat.NotebookNode) -> str:
    """The notebook as the feedback's template (nbconvert's classic) renders it with the course's configuration."""
    config = course_config(ROOT, "sqlite://")
    return HTMLExporter(config=config, template_name="classic").from_notebook_node(nb)[0]


def test_the_feedback_exporter_cleans_a_notebook_that_skipped_the_step():
    page = _render(_graded_notebook())
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.DOTALL | re.IGNORECASE)
    assert scripts, "the template's own scripts (MathJax) are expected"
    assert not [s for s in scripts if "__pwned" in s], "a student's script reached the page"
    active = re.findall(hc.ACTIVE_MARKUP, page[page.index("<body"):], flags=re.IGNORECASE)
    assert not active, f"active markup reached the page: {active}"


@pytest.mark.parametrize("assignment", ["01_self_attention", "07_seq2seq"])
def test_the_course_pages_render_the_same_through_the_exporters_sanitiser(assignment):
    notebook = next((ROOT / "release" / assignment).glob("*.ipynb")).name
    nb = release_notebook(assignment, notebook)
    plain = HTMLExporter(template_name="classic").from_notebook_node(copy.deepcopy(nb))[0]
    assert _render(nb) == plain, "the feedback sanitiser changed the course's own headings, math or code"


# ------------------------------------------------------------------------------------------------ CSV and report

HOSTILE_ROWS = [Grade('=HYPERLINK("x")', A, -1.0, 8.0, "error", "@SUM(A1:A9)"),
                Grade("+cmd", A, 8.0, 8.0, "graded", "-2+3"),
                Grade("\tindented", A, 0.0, 8.0, "flagged", "\r=1"),
                Grade("<script>alert(1)</script>|x|`y`", A, 0.0, 8.0, "flagged", "a | b <img src=x onerror=y> [l](j:)")]


def test_grades_csv_neutralises_formulas_and_keeps_scores_numbers(tmp_path):
    write_csv(HOSTILE_ROWS, tmp_path / "grades.csv")
    with (tmp_path / "grades.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["student"] == "'=HYPERLINK(\"x\")" and rows[0]["message"] == "'@SUM(A1:A9)"
    assert rows[1]["student"] == "'+cmd" and rows[1]["message"] == "'-2+3"
    assert rows[2]["student"] == "'\tindented" and rows[2]["message"] == "'\r=1"
    assert float(rows[0]["score"]) == -1.0 and rows[0]["score"] == "-1" and rows[0]["max_score"] == "8"
    for row in rows:
        for column, value in row.items():
            assert column in ("score", "max_score") or not value.startswith(("=", "+", "-", "@", "\t", "\r")), row


def test_report_quotes_student_text_inertly(tmp_path):
    write_report(HOSTILE_ROWS, tmp_path / "report.md")
    report = (tmp_path / "report.md").read_text()
    assert "<script" not in report and "<img" not in report
    assert not re.search(r"(?<!\\)\]\(", report), "a student's text made a link"
    rows = [line for line in report.splitlines() if "alert(1)" in line]
    assert len(rows) == 1 and len(re.findall(r"(?<!\\)\|", rows[0])) == 5, f"a student's text split the row: {rows}"
    assert "\\`y\\`" in rows[0]


def test_printed_table_shows_no_control_characters():
    printed = table([Grade("\x1b[2Jwiped", A, 8.0, 8.0, "graded", "\x1b]0;title\x07")])
    assert "\x1b" not in printed and "\x07" not in printed


# ------------------------------------------------------------------------------------------------ in a browser

CHROMIUM = Path("/usr/bin/chromium")
#: MathJax has typeset the page's formulas: the student's $\sqrt{d}$ among them (a square root in MathJax's output)
MATH_TYPESET = ("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 && "
                "document.querySelectorAll('.MathJax').length > 0 && "
                "[...document.querySelectorAll('.MathJax')].some(e => e.querySelector('.msqrt'))")
CHECK_PAGE = "() => ({pwned: window.__pwned === undefined ? null : String(window.__pwned), title: document.title})"


def _browser_or_skip():
    try:
        from test_browser import CHROMIUM_FLAGS, _missing  # noqa: PLC0415 - the browser tests' own launcher
    except ImportError as error:
        pytest.skip(f"tests/test_browser.py cannot be imported: {error}")
    missing = _missing()
    deadline = time.monotonic() + 300  # Debian's chromium may still be installing
    while missing and not CHROMIUM.exists() and time.monotonic() < deadline and "Playwright" not in str(missing):
        time.sleep(5)
        missing = _missing()
    if missing:
        pytest.skip("no " + " and no ".join(missing))
    return CHROMIUM_FLAGS


@pytest.mark.browser
@pytest.mark.slow
def test_graded_feedback_and_formgrader_run_no_student_script_in_a_browser(tmp_path):
    """The feedback pages, and Formgrader's view of the autograded notebook in a running JupyterLab (graded into an
    instructor's gradebook), in headless Chromium: the student's payloads are there as text, none of them runs."""
    flags = _browser_or_skip()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only the browser tests need it

    from autograder.grade import grade  # noqa: PLC0415

    batch, out = tmp_path / "batch", tmp_path / "out"
    hc.write_submission(batch, hc.SCRIPT_STUDENT, A, NB, hc.scripted_submission())  # the others: test_hostile.py's
    course = instructor_course(tmp_path / "course", f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}")
    rows = {g.student: g for g in grade(batch, out, [A], sandbox=use_sandbox(), progress=False, gradebook=course)}
    assert rows[hc.SCRIPT_STUDENT].status == "flagged", rows  # its score is test_hostile.py's to check
    pages = sorted((out / "feedback" / hc.SCRIPT_STUDENT / A).glob("*.html"))
    assert pages
    html = "\n".join(p.read_text() for p in pages)
    assert "bold stays" in html and "My notes" in html, "the student's harmless content should still show"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        context = browser.new_context()
        fetched: list[str] = []

        def offline(route):
            if urlsplit(route.request.url).scheme != "file":
                fetched.append(route.request.url)
                return route.abort()
            return route.continue_()

        context.route("**/*", offline)
        page = context.new_page()
        for path in pages:
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            for link in page.locator("a", has_text="click me").all() + page.locator("a", has_text="or me").all():
                link.click(timeout=2_000)  # a javascript: link that survived would run now
            seen = page.evaluate(CHECK_PAGE)
            assert seen["pwned"] is None, f"{path.name}: the student's script ran ({seen['pwned']})"
            assert seen["title"] != hc.MARK
        with servers.jupyter_lab(course.root, tmp_path / "lab") as lab:
            status, body = lab.get(f"/formgrader/api/submitted_notebooks/{A}/{NB.removesuffix('.ipynb')}")
            assert status == 200, body[-2000:]
            notebook_id = next(n["id"] for n in json.loads(body) if n["student"] == hc.SCRIPT_STUDENT)
            formgrader = context.new_page()

            formgrader_fetched: list[str] = []

            def lab_only(route):
                if route.request.url.startswith((lab.url, "file:", "data:")):
                    return route.continue_()
                formgrader_fetched.append(route.request.url)  # a student's remote image would be asked for here
                return route.abort()

            formgrader.route("**/*", lab_only)
            formgrader.goto(f"{lab.url}/formgrader/submissions/{notebook_id}/?token={lab.token}")
            formgrader.wait_for_load_state("load")
            shown = formgrader.content()
            assert "bold stays" in shown and "My notes" in shown, "Formgrader did not show the submission"
            for link in formgrader.locator("a", has_text="click me").all() + formgrader.locator(
                    "a", has_text="or me").all():
                link.click(timeout=2_000)
            seen = formgrader.evaluate(CHECK_PAGE)
            assert seen["pwned"] is None, f"Formgrader ran the student's script ({seen['pwned']})"
            # nothing leaves the machine: not the student's remote images, nor the MathJax of nbgrader's template
            # (cdnjs), which comes from this Jupyter server (nbgrader_config.py); the student's $\sqrt{d}$ is typeset
            formgrader.wait_for_function(MATH_TYPESET, timeout=30_000)
            assert not formgrader_fetched, f"Formgrader asked the network for {formgrader_fetched}"
            assert seen["title"] != hc.MARK
        browser.close()
    # the feedback's math is MathML made by the grader (autograder/math_render.py), not MathJax from a CDN: the
    # pages ask the network for nothing, and the course's math and the student's own reach them as MathML
    assert not fetched, f"the feedback pages asked the network for {fetched}"
    assert html.count("<math ") > 10 and "<munderover><mo>∑</mo>" in html, "the course's math is not MathML in the page"
    assert "<msqrt><mrow><mi>d</mi></mrow></msqrt>" in html, "the student's $\\sqrt{d}$ is not MathML in the page"


# ------------------------------------------------------------------------------------------------ nothing remote

REMOTE = "http://127.0.0.1:9"  # a port nothing answers on: the in-process tests only read the page


def remote_loads(page: str, needle: str = REMOTE) -> list[str]:
    return hc.remote_loads(page, needle)


def _remote_notebook(base: str = REMOTE, hostile: bool = True) -> nbformat.NotebookNode:
    """01 as grading leaves it with a student's markdown and outputs that reference base (hostile), or only with a
    student's inline images (honest)."""
    nb = _graded_notebook() if hostile else release_notebook(A, NB)
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    answer.outputs += hc.remote_outputs(base) if hostile else copy.deepcopy(COURSE_OUTPUTS)
    at = nb.cells.index(answer) + 1
    nb.cells.insert(at, new_markdown_cell(hc.inline_image_markdown(PNG)))
    if hostile:
        nb.cells.insert(at, new_markdown_cell(hc.remote_markdown(base)))
    return nb


def _feedback(nb: nbformat.NotebookNode, sanitised: bool = True) -> str:
    """The notebook through the feedback's steps: sanitised again, then the exporter GenerateFeedback uses."""
    config = course_config(ROOT, "sqlite://")
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    resources = {"nbgrader": {"notebook": "n", "score": 0.0, "max_score": 8.0, "late_penalty": 0.0}}
    for cell in nb.cells:  # nbgrader's GetGrades step, which reads the gradebook, puts the scores there
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = 0.0
    return exporter.from_notebook_node(_sanitised(nb) if sanitised else nb, resources=resources)[0]


def test_feedback_pages_load_nothing_from_a_remote_address():
    nb = _remote_notebook()
    page = _feedback(nb)
    assert REMOTE in page, "the student's text (and link targets) should still show"
    loads = remote_loads(page)
    assert not loads, f"the feedback page would fetch from a remote address: {loads}"


def test_an_inline_html_image_stays_and_a_data_link_does_not():
    image = f'<img alt="dot" src="data:image/png;base64,{PNG}">'
    assert clean_html(image) == image, "a student's inline HTML image should show"
    for spelling in ("data:text/html,<script>x</script>", " DA&#x09;TA:text/html,x", "&#100;ata:text/html,x"):
        assert clean_html(f'<a href="{spelling}">x</a>') == "<a>x</a>", spelling
    for remote in ("data:image/svg+xml;base64,AAAA", "http://127.0.0.1:9/x.png", "data:text/html;base64,AA"):
        assert clean_html(f'<img src="{remote}">') == "<img>", remote


def test_the_feedback_exporter_shows_markdown_images_only_when_inline():
    """A second layer, for markdown the sanitising step did not see: the exporter's own renderer."""
    nb = new_notebook(cells=[new_markdown_cell(hc.remote_markdown(REMOTE).split("<img", 1)[0]),
                             new_markdown_cell(hc.inline_image_markdown(PNG).split("<img", 1)[0])])
    page = _feedback(nb, sanitised=False)
    assert not remote_loads(page), remote_loads(page)
    assert "[image not shown: inline]" in page
    assert re.search(r'<img alt="a dot" src="data:image/png;base64,' + re.escape(PNG[:16]), page)


def test_autograded_notebook_keeps_no_remote_image_for_formgrader():
    """Formgrader renders the autograded notebook with nbconvert's own markdown filter, which keeps every
    markdown image: the sanitised notebook must already have none that loads from a remote address."""
    nb = _sanitised(_remote_notebook())
    page = "\n".join(markdown2html_mistune(c.source) for c in nb.cells if c.cell_type == "markdown")
    loads = remote_loads(page)
    assert not loads, f"a page of the autograded notebook would fetch from a remote address: {loads}"


def test_inline_images_of_a_student_stay_in_the_feedback():
    page = _feedback(_remote_notebook())
    inline = re.findall(r'<img[^>]*src="data:image/png;base64,' + re.escape(PNG[:16]), page)
    assert len(inline) >= 3, f"the student's inline PNGs (markdown and HTML) and the figure should show: {inline}"


# ------------------------------------------------------------------------------------------------ long markdown

NOT_RENDERED = re.compile(r'<pre class="markdown-not-rendered">(.*?)</pre>', re.DOTALL)


def _long_markdown_notebook() -> nbformat.NotebookNode:
    """01 with 270 kB of a student's markdown, 30 kB of each shape that parses in quadratic time, and a short
    honest cell of the student's after it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from feedback_markdown import SHAPES, hostile_notebook  # noqa: PLC0415 - the benchmark's own shapes

    nb = release_notebook(A, NB)
    for unit in list(SHAPES.values())[:9]:
        nb.cells += hostile_notebook(unit, 30, cell_kb=30, line_kb=None).cells
    mixed = "$$x$$\n\n    indented </pre> <script>x</script>\n\n\t\\begin{a} &amp; &#91; ![i](http://x/y.png)\n"
    nb.cells.append(new_markdown_cell(mixed * (MARKDOWN_CELL_LIMIT // len(mixed) + 1)))
    nb.cells.append(new_markdown_cell("My **own** short note."))
    return nb


def test_a_long_markdown_cell_is_shown_as_its_text_not_parsed():
    nb = _long_markdown_notebook()
    long_cells = [c.source for c in nb.cells if c.cell_type == "markdown" and len(c.source) > MARKDOWN_CELL_LIMIT]
    assert sum(map(len, long_cells)) >= 270_000 and len(long_cells) == 10
    page = _feedback(nb)
    shown = [html.unescape(text) for text in NOT_RENDERED.findall(page)]
    assert shown == long_cells, "each long cell should be in the page once, as its exact text"
    assert page.count("is shown as text, not rendered") == len(long_cells), "the page should say why"
    assert "My <strong>own</strong> short note." in page, "a student's short cell is still rendered"
    assert "<math" in page and "<h1" in page, "the course's own markdown is still rendered"


def test_markdown_past_the_notebooks_budget_is_shown_as_text():
    nb = new_notebook(cells=[new_markdown_cell(f"Cell {i}: " + "*a* " * 2000) for i in range(16)])
    sources = [c.source for c in nb.cells]
    assert all(len(source) < MARKDOWN_CELL_LIMIT for source in sources)
    page = _feedback(nb)
    rendered = sum(1 for i in range(16) if f"<p>Cell {i}: <em>a</em>" in page)
    shown = [html.unescape(text) for text in NOT_RENDERED.findall(page)]
    assert rendered == MARKDOWN_TOTAL_LIMIT // len(sources[0]), "the cells within the budget are rendered"
    assert shown == sources[rendered:], "the rest are shown as their text"


def test_sanitising_twice_changes_a_long_cell_no_further():
    nb = _sanitised(_long_markdown_notebook())
    once = [c.source for c in nb.cells]
    assert [c.source for c in _sanitised(nb).cells] == once, "feedback sanitises the autograded notebook again"


def test_a_long_markdown_output_is_shown_as_text():
    nb = new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        new_output("display_data", data={"text/markdown": "[[[[" * 10_000, "text/plain": "<Markdown>"})])])
    data = _sanitised(nb).cells[0].outputs[0].data
    assert "text/markdown" not in data and data["text/plain"].endswith("[[[[" * 10), data["text/plain"][:200]


class _Remote(http.server.BaseHTTPRequestHandler):
    """The "remote" address of the browser test: it answers every request with a PNG, and records it."""

    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        self.requests.append(self.path)
        body = base64.b64decode(PNG)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.mark.browser
def test_feedback_pages_fetch_nothing_in_a_browser_and_show_inline_images(tmp_path):
    """A student's feedback page with every element, attribute and markdown form that loads from an address (served
    here on 127.0.0.1, so a leak would be answered), and an honest student's page with inline images, opened in
    headless Chromium from file://: the browser asks for nothing but the page, and the inline images show."""
    flags = _browser_or_skip()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only the browser tests need it

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Remote)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pages = {}
    for name, hostile in (("hostile", True), ("honest", False)):
        pages[name] = tmp_path / f"{name}.html"
        pages[name].write_text(_feedback(_remote_notebook(base, hostile)))
    assert base in pages["hostile"].read_text(), "the student's addresses should still show, as text"
    requested: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=flags)
            page = browser.new_page()
            page.on("request", lambda request: requested.append(request.url))
            for name, path in pages.items():
                page.goto(path.as_uri())
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(500)  # a meta refresh of 0 s, or a lazy image, would have asked by now
                images = page.evaluate("""() => [...document.images].filter(img => img.src.startsWith('data:'))
                                                  .map(img => [img.alt, img.complete, img.naturalWidth])""")
                assert {"a dot", "the dot again"} <= {alt for alt, _, _ in images}, f"{name}: {images}"
                assert all(complete and width > 0 for _, complete, width in images), f"{name}: {images}"
            browser.close()
    finally:
        server.shutdown()
    others = [url for url in requested if not url.startswith(("file://", "data:"))]
    assert not others and not _Remote.requests, f"fetched: {others}; the server was asked for {_Remote.requests}"
    assert sorted(url for url in requested if url.startswith("file://")) == sorted(p.as_uri() for p in pages.values())


# Through the real grading route, the student whose markdown references a remote address and holds a 100 kB cell of
# '[' scores as its twin does, and its feedback loads nothing remote, shows the long cell as text and keeps its inline
# images: the hostile class grades it (tests/hostile_content.py, REMOTE_STUDENT; test_hostile.py, assert_inert).
