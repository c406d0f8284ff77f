"""Anything a student wrote is data: a graded notebook, and the feedback made from it, run none of it in a browser.

The feedback HTML and the autograded notebooks Formgrader renders for the instructor are opened in a browser that
may hold the instructor's Jupyter token. :class:`SanitiseStudentContent` (an nbgrader preprocessor, the last
autograde step before scores are saved, and again the first feedback step) makes the notebook itself inert:

- markdown cells that are not the course's own (a student's edited or added cells): HTML is cleaned to an
  allowlist (no scripts, event handlers, iframes, objects, embeds, forms or styles), link targets other than
  http(s), mailto, relative and ``#`` ones are removed, and MathJax commands that make links or run extensions
  (``\\href``, ``\\unicode``, ``\\require``...) are disarmed;
- raw cells: cleaned the same way;
- code cells' outputs: plain text, PNG/JPEG/GIF images, streams and errors are kept as they are; ``text/html`` and
  ``text/markdown`` are cleaned; ``text/latex`` with a dangerous command becomes text; anything else (JavaScript,
  widget views, SVG, PDFs, unknown types) is removed, and a line of text says so;
- notebook metadata: saved widget state is dropped.
- images only from data inside the notebook (a data: PNG, JPEG or GIF, or a cell's attachment): a markdown image
  with any other target is written as text, an <img> keeps only such a src, and nothing else that loads survives
  the allowlist, so no page made from the notebook fetches anything when it is opened;
- a student's markdown cell over :data:`MARKDOWN_CELL_LIMIT` characters, or past :data:`MARKDOWN_TOTAL_LIMIT` in the
  notebook, is shown as its exact text, not parsed (markdown parsing is quadratic on some inputs).

The course's own markdown (a cell whose text is exactly that of a markdown cell of the source notebook), its code
and the judge's verdicts are left exactly as they are. :func:`clean_html` is also the HTML exporter's ``clean_html``
filter and :class:`SanitiseOutputs` its preprocessor (nbgrader_config.py, with ``HTMLExporter.sanitize_html``): a
second layer over every page nbconvert renders with the course's configuration (feedback, Formgrader's views).
"""

from __future__ import annotations

import html
import re

import bleach
import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.math_render import MATHML_TAGS, mathml_attribute_allowed

TAGS = frozenset({
    "a", "abbr", "acronym", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "div", "dl",
    "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "ol", "p", "pre", "s",
    "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u",
    "ul", "var",
}) | MATHML_TAGS  # the MathML of feedback pages' math (autograder/math_render.py): layout attributes only
#: data: only for an <img src> that IMAGE_DATA accepts (without it, bleach drops a student's inline HTML image)
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
#: images only from data inside the page: a remote image would report that the instructor opened the page
IMAGE_DATA = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def _attribute_allowed(tag: str, name: str, value: str) -> bool:
    if tag in MATHML_TAGS:
        return mathml_attribute_allowed(tag, name, value)
    if name in ("class", "title"):
        return True
    if tag == "a":  # bleach checks the protocol of href itself; data: is for images only
        return name == "href" and not re.sub(r"[\s\x00-\x20]", "", html.unescape(value)).lower().startswith("data:")
    if tag == "img":
        return name in ("alt", "width", "height") or (name == "src" and bool(IMAGE_DATA.match(value)))
    if tag in ("td", "th"):
        return name in ("colspan", "rowspan", "align")
    if tag in ("abbr", "acronym"):
        return name == "title"
    return tag in HEADINGS and name == "id"  # nbconvert's heading anchors


_CLEANER = bleach.sanitizer.Cleaner(tags=TAGS, attributes=_attribute_allowed, protocols=PROTOCOLS, strip=True,
                                    strip_comments=True)


def clean_html(markup: str | bytes) -> str:
    """HTML with every tag and attribute outside the allowlist removed (their text kept, as text)."""
    return _CLEANER.clean(markup.decode() if isinstance(markup, bytes) else str(markup))


#: MathJax commands that make links, load extensions or set styles and ids: student math loses its backslash
MATH_COMMANDS = re.compile(r"\\(href|url|unicode|require|style|class|cssId|html|data|toggle)(?![A-Za-z])")
#: a URL scheme a browser runs or renders as a page, wherever a markdown link could carry it
ACTIVE_SCHEME = re.compile(r"(?i)\b(?:java|vb|live)\s*script\s*:|\bdata\s*:\s*(?!image/(?:png|jpeg|gif);)")
LOOKS_LIKE_HTML = re.compile(r"<\s*[A-Za-z!/?]")
#: a markdown image, ``![alt](target``, whose target is not inside the notebook (a data: PNG, JPEG or GIF, or the
#: cell's attachment): its ``![`` becomes ``!\[``, text. A remote image would be fetched when the feedback page or
#: Formgrader (whose markdown filter keeps every image) is opened. The alt text is bounded so that a line of
#: ``![![![`` costs linear time; reference images (``![alt][ref]``) are always text.
REMOTE_IMAGE = re.compile(r"!\[(?![^\]\n]{0,500}\]\(\s*<?\s*(?:data:image/(?:png|jpeg|gif);base64,|attachment:))")


#: a student's markdown cell (or markdown output) longer than this is shown as its text, not parsed: mistune and
#: nbconvert's filters take time quadratic in a cell's length on some shapes (a 100 kB line of ``[[[[`` cost 49 s,
#: of ``*_*_`` 11 s; benchmarks/feedback_markdown.py). The course's longest markdown cell is 3.5 kB.
MARKDOWN_CELL_LIMIT = 10_000
#: once a notebook's student markdown rendered reaches this, every further cell is shown as its text (the course's
#: notebooks hold 6-28 kB of markdown each): the cost of a notebook is bounded, not only of a cell
MARKDOWN_TOTAL_LIMIT = 100_000
_NOT_RENDERED_NOTE = ('<p class="markdown-not-rendered"><em>This cell\'s markdown ({length:,} characters) is '
                      "shown as text, not rendered: grading renders cells of up to {cell:,} characters, "
                      "{total:,} in a notebook.</em></p>\n")
_NOT_RENDERED_PRE = '<pre class="markdown-not-rendered">'
#: every character markdown, math or nbconvert's filters read as syntax, as an HTML character reference: the text
#: inside <pre> is then one HTML block to mistune, nothing to parse inside it, and shows exactly as written
#: (line ends too: the note and the <pre> are one line, one HTML block, which a blank line would end)
_INERT = str.maketrans({ch: f"&#{ord(ch)};" for ch in "&<>\"'$\\`*_[]~!{}|#=+-:\n\r"})


def _shown_as_text(text: str) -> str:
    note = _NOT_RENDERED_NOTE.format(length=len(text), cell=MARKDOWN_CELL_LIMIT, total=MARKDOWN_TOTAL_LIMIT)
    return f"{note}{_NOT_RENDERED_PRE}{text.translate(_INERT)}</pre>\n"


def _is_shown_as_text(text: str) -> bool:
    """A cell this step has made text already (feedback sanitises the autograded notebook again): one that has no
    syntax character between the wrapper's own markup, which renders as text whoever wrote it."""
    head, found, rest = text.partition(_NOT_RENDERED_PRE)
    return (bool(found) and head.startswith('<p class="markdown-not-rendered"><em>') and head.endswith("</em></p>\n")
            and "<" not in head[37:-10] and rest.endswith("</pre>\n")
            and not any(ch in rest[:-7] for ch in "<>\\$`*_[]"))


def _disarm_math(text: str) -> str:
    return MATH_COMMANDS.sub(r"\\mathrm{\1}", text)


def clean_markdown(text: str) -> str:
    """A student's markdown that renders without active content; markdown without HTML keeps its text."""
    if ACTIVE_SCHEME.search(html.unescape(text)):  # a link target spelled with entities: jav&#97;script:
        text = html.unescape(text)
    text = _disarm_math(ACTIVE_SCHEME.sub("removed:", text))
    text = REMOTE_IMAGE.sub(r"!\\[", text)
    # bleach escapes every '&' and '>' (code spans and quotes would show them): run it only where there is HTML
    return clean_html(text) if LOOKS_LIKE_HTML.search(text) else text


#: output types shown exactly as they are: text and raster images cannot run anything
SAFE_DATA = frozenset({"text/plain", "image/png", "image/jpeg", "image/gif"})


def _clean_data(data: dict) -> list[str]:
    """Clean one output's data in place; the output types removed."""
    removed = []
    for mime in list(data):
        value = data[mime]
        if mime in SAFE_DATA:
            continue
        if mime == "text/html" and isinstance(value, str):
            data[mime] = clean_html(value)
        elif mime == "text/markdown" and isinstance(value, str) and len(value) > MARKDOWN_CELL_LIMIT:
            del data[mime]  # as text: nbconvert escapes text/plain and parses nothing in it
            data["text/plain"] = (f"[a markdown output of {len(value):,} characters, shown as text: grading renders "
                                  f"up to {MARKDOWN_CELL_LIMIT:,}]\n{value}")
        elif mime == "text/markdown" and isinstance(value, str):
            data[mime] = clean_markdown(value)
        elif mime == "text/latex" and isinstance(value, str) and not MATH_COMMANDS.search(value):
            continue
        else:
            del data[mime]
            removed.append(mime)
    return removed


def _clean_metadata(metadata: dict) -> dict:
    """Only an image's numeric width and height, and nbconvert's 'unconfined' flag, survive."""
    kept = {}
    for mime, value in (metadata or {}).items():
        if mime in SAFE_DATA and isinstance(value, dict):
            numbers = {k: v for k, v in value.items() if k in ("width", "height") and isinstance(v, (int, float))}
            if value.get("unconfined") is True:
                numbers["unconfined"] = True
            if numbers:
                kept[mime] = numbers
    return kept


def clean_outputs(outputs: list) -> None:
    """Make a code cell's outputs inert, in place."""
    for output in outputs:
        if output.get("output_type") not in ("display_data", "execute_result"):
            continue  # streams and errors are text: nbconvert escapes them
        data = output.setdefault("data", nbformat.NotebookNode())
        removed = _clean_data(data)
        output["metadata"] = nbformat.NotebookNode(_clean_metadata(output.get("metadata")))
        if removed and "text/plain" not in data:
            data["text/plain"] = f"[not shown in grading: an output of type {', '.join(removed)}]"


def course_markdown(source: nbformat.NotebookNode | None) -> set[str]:
    """The texts of the course's own markdown cells."""
    return {c.source for c in (source.cells if source else []) if c.cell_type == "markdown"}


def sanitise(nb: nbformat.NotebookNode, trusted: set[str] = frozenset()) -> nbformat.NotebookNode:
    """Make a notebook's student content inert, in place: markdown whose text is in trusted stays as it is; a
    student's markdown cell over MARKDOWN_CELL_LIMIT, or past MARKDOWN_TOTAL_LIMIT in the notebook, becomes its text."""
    rendered = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            clean_outputs(cell.get("outputs", []))
        elif cell.cell_type == "markdown" and cell.source not in trusted:
            if _is_shown_as_text(cell.source):
                pass
            elif len(cell.source) > MARKDOWN_CELL_LIMIT or rendered + len(cell.source) > MARKDOWN_TOTAL_LIMIT:
                cell.source = _shown_as_text(cell.source)
            else:
                rendered += len(cell.source)
                cell.source = clean_markdown(cell.source)
            attachments = cell.get("attachments") or {}
            for name, bundle in list(attachments.items()):
                kept = {m: v for m, v in (bundle or {}).items() if m in SAFE_DATA and m != "text/plain"}
                if kept:
                    attachments[name] = kept
                else:
                    del attachments[name]
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
    nb.metadata.pop("widgets", None)
    return nb


class SanitiseOutputs(Preprocessor):
    """The HTML exporter's own step (nbgrader_config.py): outputs and raw cells made inert in any page it renders,
    also of a notebook graded before this step existed. (The template sanitises markdown and HTML itself, but
    writes an image's width and height unquoted into the page.)"""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            clean_outputs(cell.get("outputs", []))
        elif cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
        return cell, resources


class SanitiseStudentContent(NbGraderPreprocessor):
    """A grading and feedback step (nbgrader_config.py): the notebook's student content made inert."""

    def preprocess(self, nb, resources):
        from autograder.cells import source_notebook  # noqa: PLC0415 - cells imports nbgrader's course directory

        try:
            source = source_notebook(self, resources)
        except (OSError, KeyError, TypeError, ValueError):  # no source notebook here: no markdown is trusted
            source = None
        return sanitise(nb, course_markdown(source)), resources
