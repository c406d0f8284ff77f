"""Math in feedback pages with no network: TeX rendered to MathML when the page is made.

nbgrader's feedback template loads MathJax from a CDN, so a student who opens the page offline sees raw ``$$...$$``.
:class:`FeedbackExporter` (nbgrader_config.py: ``GenerateFeedback.exporter_class``) renders every math span of
markdown (cells and markdown outputs) and every ``text/latex`` output that is one formula as MathML, which browsers
lay out natively (Chromium 109+, Firefox, Safari), and leaves MathJax out: a feedback page loads nothing and runs no
script. Measured: 01's real feedback page is 200 kB with MathML, 4 kB more than nbgrader's page with MathJax from a
CDN (the eight solutions: 3.5-8 kB more, 25-82 formulas each); inlining the MathJax 2 that jupyter-server-mathjax
pins would add over 400 kB to every page of every student (its combined TeX configuration alone is 366 kB, before
MathJax.js and fonts). All 402 formulas of source/*/*.ipynb convert (0.06 s for all; each is converted once per
process).

latex2mathml (pinned in requirements.txt) parses the TeX; its element tree is written out here, not by latex2mathml,
whose own output unescapes text (``\\text{<img onerror=...>}`` would become markup). Only :data:`MATHML_TAGS`, with
the attributes :func:`mathml_attribute_allowed` accepts, are written: no ``href``, ``style``, ``class``, ``id``,
event handler, ``maction``, ``mglyph`` or annotation. The same allowlist is part of the course's bleach cleaner
(autograder/sanitise.py), which every HTML and markdown output passes. A span that latex2mathml cannot convert, or
converts with an unknown command left as text, or that needs an element outside the allowlist, is shown as its TeX
in ``<code>``: never dropped.
"""

from __future__ import annotations

import functools
import html
import re
from xml.etree.ElementTree import Element

import jinja2
from latex2mathml.converter import convert_to_element
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from traitlets import default

try:
    from jinja2 import pass_context
except ImportError:  # pragma: no cover - Jinja 2 before 3.0
    from jinja2 import contextfilter as pass_context

#: MathML elements a page may hold: MathML Core's presentation elements (and menclose), nothing that links, loads or
#: switches (maction, mglyph, semantics and its annotations are left out)
MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "munder", "mover",
    "munderover", "mmultiscripts", "mprescripts", "none", "mfrac", "msqrt", "mroot", "mstyle", "mpadded", "mphantom",
    "menclose", "mtable", "mtr", "mtd", "merror",
})

_BOOL = r"true|false"
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_LENGTH = rf"{_NUMBER}(?:em|ex|px|pt|mu|%)?|(?:negative)?(?:very){{0,2}}(?:thin|thick|medium)mathspace"
_LENGTHS = rf"(?:{_LENGTH})(?: +(?:{_LENGTH}))*"
_ALIGN = r"(?:left|center|right|top|bottom|baseline|axis)(?: +(?:left|center|right|top|bottom|baseline|axis))*"
_LINES = r"(?:none|solid|dashed)(?: +(?:none|solid|dashed))*"
#: attribute -> the values it may take (a full match); every other attribute is left out
MATHML_ATTRIBUTES = {name: re.compile(pattern) for name, pattern in {
    "display": r"block|inline",
    "mathvariant": r"[a-z-]{1,32}",
    "displaystyle": _BOOL, "stretchy": _BOOL, "fence": _BOOL, "separator": _BOOL, "accent": _BOOL,
    "accentunder": _BOOL, "largeop": _BOOL, "movablelimits": _BOOL, "symmetric": _BOOL,
    "form": r"prefix|infix|postfix",
    "lspace": _LENGTH, "rspace": _LENGTH, "width": _LENGTH, "height": _LENGTH, "depth": _LENGTH,
    "voffset": _LENGTH, "minsize": _LENGTH, "maxsize": _LENGTH, "mathsize": _LENGTH,
    "linethickness": rf"{_LENGTH}|thin|medium|thick",
    "scriptlevel": r"[+-]?\d{1,2}",
    "columnalign": _ALIGN, "rowalign": _ALIGN, "columnspacing": _LENGTHS, "rowspacing": _LENGTHS,
    "columnlines": _LINES, "rowlines": _LINES, "frame": _LINES,
    "notation": r"[a-z]{1,24}(?: +[a-z]{1,24}){0,8}",
}.items()}


def mathml_attribute_allowed(tag: str, name: str, value: str) -> bool:
    """True for an attribute a MathML element may keep: layout only, with a value of the expected form."""
    pattern = MATHML_ATTRIBUTES.get(name)
    if pattern is None or tag not in MATHML_TAGS or (name == "display" and tag != "math"):
        return False
    return bool(pattern.fullmatch(value.strip()))


class NotConverted(ValueError):
    """TeX that has no faithful MathML here: shown as TeX instead."""


_CHARACTER_REFERENCE = re.compile(r"&#(x[0-9A-Fa-f]{1,6}|[0-9]{1,7});")
_UNKNOWN_COMMAND = re.compile(r"\\[A-Za-z]+\*?")


def _text(raw: str | None) -> str:
    """latex2mathml's element text (with its &#x...; references) as escaped HTML text."""
    if not raw:
        return ""
    if _UNKNOWN_COMMAND.fullmatch(raw.strip()):
        raise NotConverted(f"unknown command {raw.strip()}")
    if raw.strip() == "&":
        raise NotConverted("an alignment '&' outside an environment")

    def character(m: re.Match) -> str:
        code = int(m.group(1)[1:], 16) if m.group(1)[0] == "x" else int(m.group(1))
        return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else "\ufffd"
    return html.escape(_CHARACTER_REFERENCE.sub(character, raw), quote=False)


def _is_letter(element: Element) -> bool:
    return (element.tag == "mi" and dict(element.attrib) == {"mathvariant": "normal"} and len(element) == 0
            and element.text is not None and len(element.text) == 1 and not (element.tail or "").strip())


def _merge_upright_letters(element: Element) -> None:
    """\\mathrm{softmax} comes as one <mi mathvariant="normal"> per letter: one <mi> per word lays out as a word."""
    children = list(element)
    for child in children:
        _merge_upright_letters(child)
    word: Element | None = None
    for child in children:
        if not _is_letter(child):
            word = None
        elif word is None:
            word = child
        else:
            word.text += child.text
            word.attrib.pop("mathvariant", None)  # an <mi> of several letters is upright already
            element.remove(child)


def _write(element: Element, out: list[str]) -> None:
    tag = element.tag
    if tag not in MATHML_TAGS:
        raise NotConverted(f"the element <{tag}>")
    attributes = "".join(f' {name}="{html.escape(str(value).strip())}"' for name, value in element.attrib.items()
                         if mathml_attribute_allowed(tag, name, str(value)))
    out.append(f"<{tag}{attributes}>{_text(element.text)}")
    for child in element:
        _write(child, out)
        out.append(_text(child.tail))
    out.append(f"</{tag}>")


_ALIGNED = re.compile(r"\\(begin|end)\{aligned\}")


@functools.lru_cache(maxsize=4096)
def tex_to_mathml(tex: str, display: bool) -> str | None:
    """The TeX as one <math> element of allowlisted MathML, or None when it has no faithful conversion."""
    tex = _ALIGNED.sub(r"\\\1{align*}", tex)  # latex2mathml knows align*, not aligned (the same layout)
    try:
        root = convert_to_element(tex, display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - latex2mathml raises many kinds on TeX it cannot read: show the TeX instead
        return None
    root.attrib.pop("xmlns", None)  # HTML puts <math> in the MathML namespace itself
    for spacer in root.iter("mspace"):
        spacer.attrib.pop("linebreak", None)  # \\ outside an environment: MathJax ignores it too
    _merge_upright_letters(root)
    out: list[str] = []
    try:
        _write(root, out)
    except NotConverted:
        return None
    return "".join(out)


def math_html(tex: str, display: bool, opening: str, closing: str) -> str:
    """MathML for a math span, or, when it has none, its TeX (with its delimiters) as code."""
    mathml = tex_to_mathml(tex, display)
    if mathml is not None:
        return mathml
    return f'<code class="tex-source">{html.escape(opening + tex + closing, quote=False)}</code>'


#: an image inside the page (after nbconvert embeds a cell's attachments): the only images a feedback page shows
INLINE_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*")


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with math spans rendered as MathML instead of left for MathJax, and images only
    from data inside the page: a remote one would be fetched when the page is opened (the sanitising step writes
    those as text already; this holds for markdown it did not see, such as the course's own)."""

    def image(self, text: str, url: str, title: str | None = None) -> str:
        url = self._embed_image_or_attachment(url)
        if not INLINE_IMAGE.fullmatch(url):
            return html.escape(f"[image not shown: {url}]" if not text else f"[image not shown: {text}]", quote=False)
        return super().image(text, url, title)

    def block_math(self, body: str) -> str:
        return math_html(body, True, "$$", "$$")

    def inline_math(self, body: str) -> str:
        return math_html(body, False, "$", "$")

    def latex_environment(self, name: str, body: str) -> str:
        source = f"\\begin{{{name}}}{body}\\end{{{name}}}"
        return math_html(source, True, "", "")


#: one formula, the whole of a text/latex output (IPython's Math and Latex displays)
_WHOLE_FORMULA = re.compile(r"\s*(?:\$\$(?P<dd>.+?)\$\$|\$(?P<d>.+?)\$|\\\[(?P<b>.+?)\\\]|\\\((?P<p>.+?)\\\)"
                            r"|(?P<env>\\begin\{(?P<name>[a-z]+\*?)\}.*?\\end\{(?P=name)\}))\s*", re.DOTALL)


#: a text/latex output longer than this stays TeX text: latex2mathml's time grows faster than the formula (0.85 s for
#: 36 kB of x+x+...); the course's longest formula is a few hundred characters
FORMULA_LIMIT = 10_000


def latex_output_html(text: str) -> str | None:
    """A text/latex output that is one formula, as MathML; None for anything else (it stays TeX text)."""
    if len(text) > FORMULA_LIMIT:
        return None
    m = _WHOLE_FORMULA.fullmatch(text)
    if m is None:
        return None
    tex = next(value for key in ("dd", "d", "b", "p", "env") if (value := m.group(key)) is not None)
    return tex_to_mathml(tex, m.group("d") is None and m.group("p") is None)


class LatexOutputsAsMathML(Preprocessor):
    """A text/latex output that is one formula gets a text/html form with its MathML, which the page shows."""

    def preprocess_cell(self, cell, resources, index):
        for output in cell.get("outputs", []):
            data = output.get("data") or {}
            if isinstance(data.get("text/latex"), str) and "text/html" not in data:
                mathml = latex_output_html(data["text/latex"])
                if mathml is not None:
                    data["text/html"] = f'<div class="math-output">{mathml}</div>'
        return cell, resources


#: replaces nbconvert's mathjax.html.j2 in feedback pages: layout hints for MathML instead of a CDN's script
MATH_STYLE = """{%- macro mathjax(url="") -%}
<style type="text/css">
math[display="block"] { margin: 0.6em 0; }
mtd[columnalign="left"] { text-align: left; }
mtd[columnalign="right"] { text-align: right; }
code.tex-source { white-space: pre-wrap; }
</style>
{%- endmacro %}
"""


class FeedbackExporter(HTMLExporter):
    """nbgrader's feedback page (its template and the course's HTMLExporter settings) with math as MathML and no
    MathJax: a page that needs no network and runs no script."""

    @default("extra_loaders")
    def _extra_loaders_default(self):
        return [jinja2.DictLoader({"mathjax.html.j2": MATH_STYLE})]

    def _init_preprocessors(self):
        super()._init_preprocessors()
        self.register_preprocessor(LatexOutputsAsMathML, enabled=True)  # after the course's sanitising step

    @pass_context
    def markdown2html(self, context, source):
        """nbconvert's markdown filter, with MathMLRenderer."""
        cell = context.get("cell", {})
        renderer = MathMLRenderer(
            escape=False, attachments=cell.get("attachments", {}), embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text, exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options)
        return MarkdownWithMath(renderer=renderer).render(source)
