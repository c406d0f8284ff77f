"""Hostile content for a browser: complete submissions of 01 that carry scripts in their outputs and markdown, and a
student id a spreadsheet would read as a formula. They earn full marks; what they carry must stay inert in the
feedback, in the notebooks Formgrader renders, in grades.csv and in report.md (tests/test_inert_content.py, and
test_hostile.py, whose class includes them)."""

from __future__ import annotations

import base64
import csv
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
from conftest import complete_submission, write_submission
from nbformat.v4 import new_markdown_cell, new_output, new_raw_cell

from autograder.notebooks import grade_id
from autograder.submissions import SUBMISSION_FILES, SUBMISSION_MB

A, NB = "01_self_attention", "self_attention.ipynb"
#: every payload sets window.__pwned (and the title): a page where either is set ran the student's code
MARK = "PWNED"
PAYLOADS = {
    "html_script": f"<script>window.__pwned = 'html output script'; document.title = '{MARK}';</script>",
    "img_onerror": "<img src=x onerror=\"window.__pwned = 'onerror'\">",
    "javascript_output": "window.__pwned = 'application/javascript output'",
    "markdown_script": "<script>window.__pwned = 'markdown script'</script>",
    "markdown_link": "[click me](javascript:window.__pwned='markdown_link')",
    "html_link": "<a href=\"javascript:window.__pwned='html link'\">or me</a>",
    "iframe": "<iframe srcdoc=\"<script>parent.__pwned = 'iframe'</script>\"></iframe>",
    "svg": "<svg><script>window.__pwned = 'svg'</script></svg>",
}
#: markup of the payloads in a page: an event handler in a tag, a javascript: target, a frame, an SVG, a form
ACTIVE_MARKUP = (r"""<[a-z][^>]*\son[a-z]+\s*=|(?:href|src|action)\s*=\s*["']?\s*javascript:"""
                 r"|<(?:iframe|svg|object|embed|form)\b")
#: strings of the payloads that must never reach a page or a notebook as markup
ACTIVE = ("<script", "onerror=", "javascript:", "<iframe", "<svg")
SVG_DOCUMENT = PAYLOADS["svg"].replace("<svg>", '<svg xmlns="http://www.w3.org/2000/svg">')
ANSWER = ("\nfrom IPython.display import HTML, Javascript, SVG, display\n"
          f"display(HTML({PAYLOADS['html_script'] + PAYLOADS['img_onerror'] + '<b>bold stays</b>'!r}))\n"
          f"display(Javascript({PAYLOADS['javascript_output']!r}))\n"
          f"display(SVG({SVG_DOCUMENT!r}))\n"
          "import ipywidgets\ndisplay(ipywidgets.IntSlider())\n")
MARKDOWN = ("My notes, with math: $\\sqrt{d}$.\n\n" + PAYLOADS["markdown_script"] + "\n\n" + PAYLOADS["markdown_link"]
            + "\n\n" + PAYLOADS["html_link"] + "\n\n" + PAYLOADS["iframe"]
            + "\n\n![a remote figure](http://127.0.0.1:9/remote-figure.png)\n")
#: folder names are student ids; this one is a formula to a spreadsheet
FORMULA_STUDENT = '=HYPERLINK("evil")'
SCRIPT_STUDENT = "inert-scripts"
#: a student whose markdown references a remote address in every way that loads, and holds a cell of 100 kB that
#: parses in quadratic time (77 s of feedback generation when rendered; the limit shows it as text)
REMOTE_STUDENT = "remote-and-long"
REMOTE_BASE = "http://127.0.0.1:9"
LONG_MARKDOWN = "[" * 100_000
STUDENTS = (SCRIPT_STUDENT, FORMULA_STUDENT, REMOTE_STUDENT)
#: a 1x1 PNG, an image inside the notebook
PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                     "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")).decode()


def scripted_submission() -> nbformat.NotebookNode:
    """The complete solution of 01 whose answer displays scripts, and with a markdown and a raw cell of its own."""
    nb = complete_submission(A, NB)
    cell = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    cell.source += ANSWER
    at = nb.cells.index(cell) + 1
    nb.cells.insert(at, new_markdown_cell(MARKDOWN))
    nb.cells.insert(at + 1, new_raw_cell(PAYLOADS["markdown_script"], metadata={"raw_mimetype": "text/html"}))
    return nb


def remote_submission() -> nbformat.NotebookNode:
    """The complete solution of 01 with markdown of the student's that references REMOTE_BASE, an inline image,
    and LONG_MARKDOWN."""
    nb = complete_submission(A, NB)
    nb.cells += [new_markdown_cell(remote_markdown(REMOTE_BASE)), new_markdown_cell(inline_image_markdown(PNG)),
                 new_markdown_cell(LONG_MARKDOWN)]
    return nb


def build(batch: Path, expect: dict) -> None:
    """Write the hostile-content submissions of 01 into batch; expect[student] = (score, status, words)."""
    write_submission(batch, SCRIPT_STUDENT, A, NB, scripted_submission())
    expect[SCRIPT_STUDENT] = (8, "flagged", "imports IPython.display")  # a note for the instructor, no penalty
    write_submission(batch, REMOTE_STUDENT, A, NB, remote_submission())
    expect[REMOTE_STUDENT] = (8, "graded", "")  # its twin: FORMULA_STUDENT, the same answers without the markdown
    write_submission(batch, FORMULA_STUDENT, A, NB, complete_submission(A, NB))
    expect[FORMULA_STUDENT] = (8, "graded", "")
    # files no notebook is read from: over the size cap (sparse, so the test writes nothing), links to elsewhere
    folder = batch / "attack-100-mb" / A
    folder.mkdir(parents=True)
    with open(folder / NB, "wb") as f:
        f.truncate(100_000_000)
    expect["attack-100-mb"] = (0, "invalid-notebook", "is larger than 20 MB")
    write_submission(batch, "attack-symlink", A, "elsewhere.json", complete_submission(A, NB))
    (batch / "attack-symlink" / A / NB).symlink_to(batch / "attack-symlink" / A / "elsewhere.json")
    expect["attack-symlink"] = (0, "invalid-notebook", "is a symbolic link")
    write_submission(batch, "attack-hardlink", A, NB, complete_submission(A, NB))
    (batch / "attack-hardlink" / "other").hardlink_to(batch / "attack-hardlink" / A / NB)
    expect["attack-hardlink"] = (0, "invalid-notebook", "is a hard link")
    # a complete notebook in a folder over the submission's cap, in bytes (sparse: nothing written) or in files:
    # refused before any of it is read, where its twin FORMULA_STUDENT's complete notebook scores 8
    write_submission(batch, "attack-folder-bytes", A, NB, complete_submission(A, NB))
    for index in range(6):
        with open(batch / "attack-folder-bytes" / A / f"data{index}.bin", "wb") as f:
            f.truncate(19 * 2**20)
    expect["attack-folder-bytes"] = (0, "invalid-notebook", f"more than {SUBMISSION_MB} MB")
    write_submission(batch, "attack-folder-files", A, NB, complete_submission(A, NB))
    for index in range(SUBMISSION_FILES):
        (batch / "attack-folder-files" / A / f"{index}.txt").touch()
    expect["attack-folder-files"] = (0, "invalid-notebook", f"more than {SUBMISSION_FILES} files")


def assert_inert(out: Path) -> None:
    """The graded output folder shows these students' content inertly: no script of theirs, event handler or
    javascript: link in their feedback pages, and no cell of grades.csv a spreadsheet reads as a formula."""
    for student in STUDENTS:
        pages = sorted((out / "feedback" / student / A).glob("*.html"))
        assert pages, f"{student} has no feedback"
        for page in pages:
            text = page.read_text()
            scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, flags=re.DOTALL | re.IGNORECASE)
            assert not [s for s in scripts if "__pwned" in s], f"{page}: a student's script is in the page"
            body = text[text.index("<body"):]
            assert not re.search(ACTIVE_MARKUP, body, flags=re.IGNORECASE), f"{page}: active markup"
    for page in (out / "feedback" / REMOTE_STUDENT / A).glob("*.html"):
        text = page.read_text()
        assert not remote_loads(text, REMOTE_BASE), f"{page}: would fetch {remote_loads(text, REMOTE_BASE)}"
        assert long_cell_shown_as_text(text), f"{page}: the long cell is not shown as its text"
        assert text.count(f'src="data:image/png;base64,{PNG}"') == 2, f"{page}: the student's inline images"
    with (out / "grades.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert any(row["student"] == "'" + FORMULA_STUDENT for row in rows), "the formula student's row is missing"
    for row in rows:
        assert not any(value.startswith(("=", "+", "@", "\t", "\r")) for value in row.values()), row
        assert not row["student"].startswith("-") and not row["message"].startswith("-"), row


def remote_markdown(base: str) -> str:
    """A student's markdown that, rendered naively, makes a browser fetch from base (an address the test serves):
    markdown images (inline, reference, angle-bracketed) and every HTML element or attribute that loads."""
    svg = base64.b64encode(f'<svg xmlns="http://www.w3.org/2000/svg"><image href="{base}/svg-in-data"/></svg>'
                           .encode()).decode()
    return "\n\n".join([
        "Remote figures:",
        f"![inline]({base}/md-inline.png)",
        f"![angled](<{base}/md-angled.png>)",
        f'![titled]({base}/md-titled.png "t")',
        "![reference][fig]",
        "![shortcut]",
        f"[fig]: {base}/md-reference.png",
        f"[shortcut]: {base}/md-shortcut.png",
        f"[![linked]({base}/md-linked.png)]({base}/target)",
        f'<img src="{base}/img-src"> <img srcset="{base}/img-srcset 1x">',
        f'<picture><source srcset="{base}/picture-source"><img src="{base}/picture-img"></picture>',
        f'<p style="background: url({base}/style-attribute)">styled</p>',
        f"<style>body {{ background: url({base}/style-block) }}</style>",
        f'<link rel="stylesheet" href="{base}/link-stylesheet"><link rel="preload" href="{base}/link-preload">'
        f'<link rel="prefetch" href="{base}/link-prefetch"><link rel="icon" href="{base}/link-icon">',
        f'<svg><image href="{base}/svg-image"/><image xlink:href="{base}/svg-xlink"/>'
        f'<use href="{base}/svg-use#a"/></svg>',
        f'<img src="data:image/svg+xml;base64,{svg}">',
        f'![svg in data](data:image/svg+xml;base64,{svg})',
        f'<meta http-equiv="refresh" content="0; url={base}/meta-refresh">',
        f'<base href="{base}/base/"><img src="relative-to-base.png">',
        f'<iframe src="{base}/iframe"></iframe><object data="{base}/object"></object>'
        f'<embed src="{base}/embed">',
        f'<video poster="{base}/video-poster" src="{base}/video-src"></video><audio src="{base}/audio" autoplay>'
        "</audio>",
        f'<form action="{base}/form"><input type="image" src="{base}/input-image"></form>',
        f'<table background="{base}/table-background"><tr><td>cell</td></tr></table>',
    ])


def remote_outputs(base: str) -> list:
    """Outputs of a student's cell that carry the same remote references: HTML, SVG and markdown."""
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
           f'<image href="{base}/output-svg-image"/><image xlink:href="{base}/output-svg-xlink"/></svg>')
    return [new_output("display_data", data={"text/html": remote_markdown(base).split("\n\n", 9)[-1],
                                             "text/plain": "<HTML>"}),
            new_output("display_data", data={"image/svg+xml": svg, "text/plain": "<SVG>"}),
            new_output("display_data", data={"text/markdown": remote_markdown(base), "text/plain": "<Markdown>"})]


def inline_image_markdown(png_base64: str) -> str:
    """An honest student's markdown with an image kept inside the notebook: a data: PNG, in markdown and in HTML."""
    return (f"My own figure: ![a dot](data:image/png;base64,{png_base64})\n\n"
            f'<img alt="the dot again" src="data:image/png;base64,{png_base64}">\n')


def long_cell_shown_as_text(page: str) -> bool:
    """LONG_MARKDOWN is in the page whole, as the text of the sanitiser's <pre>, not parsed as markdown."""
    shown = re.findall(r'<pre class="markdown-not-rendered">(.*?)</pre>', page, flags=re.DOTALL)
    return any(html.unescape(text) == LONG_MARKDOWN for text in shown)


class _Loads(HTMLParser):
    """Every attribute of a page that names an address, but a link's target (a click, not a load), and every
    <style> block that does."""

    def __init__(self, needle: str):
        super().__init__()
        self.needle, self.found, self._in_style = needle, [], False

    def handle_starttag(self, tag, attrs):
        self._in_style = tag == "style"
        self.found += [f"<{tag} {name}={value}>" for name, value in attrs
                       if value and self.needle in value and (tag, name) != ("a", "href")]

    def handle_data(self, data):
        if self._in_style and self.needle in data:
            self.found.append(f"<style>{data[:80]}")


def remote_loads(page: str, needle: str) -> list[str]:
    """What in the page would load from an address containing needle when a browser opens it."""
    parser = _Loads(needle)
    parser.feed(page)
    return parser.found
