"""Feedback pages render math as MathML made on the server (autograder/math_render.py): every formula of the course
converts, a student's formula cannot become a link, a style or markup, and TeX without a conversion is shown as TeX.
In-process and fast; tests/test_feedback_delivery.py opens a real feedback page in Chromium."""

from __future__ import annotations

import copy
import re

import nbformat
import pytest
from conftest import ROOT, release_notebook
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nbgrader.converters import GenerateFeedback
from nbgrader.coursedir import CourseDirectory

from autograder.math_render import (
    FORMULA_LIMIT,
    MATHML_TAGS,
    FeedbackExporter,
    latex_output_html,
    math_html,
    tex_to_mathml,
)
from autograder.sanitise import clean_html
from autograder.workspace import course_config


class _Spans(IPythonRenderer):
    """nbconvert's markdown renderer that records the math spans it meets, as MathJax would see them."""

    def __init__(self):
        super().__init__(escape=False)
        self.spans: list[tuple[str, bool]] = []

    def block_math(self, body):
        self.spans.append((body, True))
        return ""

    def inline_math(self, body):
        self.spans.append((body, False))
        return ""

    def latex_environment(self, name, body):
        self.spans.append((f"\\begin{{{name}}}{body}\\end{{{name}}}", True))
        return ""


def math_spans(nb: nbformat.NotebookNode) -> list[tuple[str, bool]]:
    """(TeX, display) for every math span of the notebook's markdown cells."""
    renderer = _Spans()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            MarkdownWithMath(renderer=renderer).render(cell.source)
    return renderer.spans


def _feedback_page(nb: nbformat.NotebookNode, exporter_class: type | None = None) -> str:
    """The notebook rendered by the exporter nbgrader's generate_feedback makes from the course's configuration (or
    by exporter_class with the same settings)."""
    config = course_config(ROOT, "sqlite://")
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    exporter = (exporter_class or converter.exporter_class)(parent=converter, config=converter.config)
    assert isinstance(exporter, exporter_class or FeedbackExporter), "nbgrader_config.py should name the course's " \
                                                                      "feedback exporter"
    resources = {"nbgrader": {"notebook": "n", "score": 0.0, "max_score": 8.0, "late_penalty": 0.0}}
    for cell in nb.cells:  # nbgrader's GetGrades step, which reads the gradebook, puts the scores there
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader["score"] = 0.0
    return exporter.from_notebook_node(nb, resources=resources)[0]


def test_every_formula_of_the_course_converts_to_mathml():
    spans = [span for path in sorted((ROOT / "source").glob("*/*.ipynb"))
             for span in math_spans(nbformat.read(path, as_version=4))]
    assert len(spans) > 300, "the course's notebooks should hold a few hundred formulas"
    failed = [tex for tex, display in spans if tex_to_mathml(tex, display) is None]
    assert not failed, f"{len(failed)} of {len(spans)} formulas have no MathML: {failed[:5]}"


@pytest.mark.parametrize(("tex", "active"), [
    ("\\href{javascript:window.__pwned=1}{x}", "href"),
    ("\\text{<img src=x onerror=alert(1)>}", "<img"),
    ("\\texttt{</math><script>alert(1)</script>}", "<script"),
    ("\\style{background:url(http://evil)}{x}", "style"),
    ("\\class{x}{y}", "class="),
    ("\\color{red}{x}\\colorbox{blue}{y}", "math"),  # colours are left out: mathcolor, mathbackground
    ("\\unicode{x3C}script\\unicode{x3E}", "<script"),
])
def test_a_students_formula_becomes_no_link_style_or_markup(tex, active):
    mathml = tex_to_mathml(tex, False)
    assert mathml is not None, "these convert (their payload as text or left out)"
    attributes = [name for tag in re.findall(r"<[^>]*>", mathml) for name in re.findall(r"\s([a-zA-Z:-]+)=", tag)]
    assert set(attributes) <= {"display", "mathvariant", "stretchy", "width", "notation"}, attributes
    tags = set(re.findall(r"</?([a-zA-Z:-]+)", mathml))
    assert tags <= MATHML_TAGS, tags - MATHML_TAGS
    if active.startswith("<"):
        assert active not in mathml and "&lt;" in mathml, "the student's markup must stay text"
    else:
        assert f"{active}=" not in mathml.replace("<math display", "")


def test_tex_without_a_conversion_is_shown_as_tex_never_dropped():
    for tex in ("\\frac{1}{", "\\cssId{x}{y}", "x^", "a & b"):
        assert tex_to_mathml(tex, False) is None, tex
        shown = math_html(tex, False, "$", "$")
        assert shown.startswith('<code class="tex-source">$') and tex.replace("&", "&amp;") in shown


def test_the_course_cleaner_keeps_mathml_and_nothing_active_in_it():
    mathml = tex_to_mathml("\\frac{q^\\top k}{\\sqrt{d}}", True)
    assert clean_html(mathml) == mathml, "the allowlist must keep the MathML the feedback makes"
    hostile = ('<math display="block" href="javascript:alert(1)" onclick="alert(1)" style="x" class="y" id="z">'
               '<maction actiontype="toggle"><mi xlink:href="javascript:alert(1)">a</mi></maction>'
               '<mglyph src="http://evil/x.png"></mglyph><semantics><annotation-xml encoding="text/html">'
               '<img src=x onerror=alert(1)></annotation-xml></semantics><mi mathcolor="red">b</mi></math>')
    cleaned = clean_html(hostile)
    assert "<math" in cleaned and "<mi>a</mi>" in cleaned and "<mi>b</mi>" in cleaned
    for active in ("href", "onclick", "style", "class", "id=", "maction", "mglyph", "annotation", "onerror",
                   "mathcolor", "javascript", "http://"):
        assert active not in cleaned, f"{active!r} survived: {cleaned}"


def test_the_feedback_exporter_renders_every_formula_and_loads_no_mathjax():
    nb = release_notebook("01_self_attention", "self_attention.ipynb")
    page = _feedback_page(copy.deepcopy(nb))
    assert "<script" not in page and "cdnjs" not in page, "the feedback page still loads MathJax (or another script)"
    assert page.count("<math ") == len(math_spans(nb)) > 10
    assert "tex-source\">" not in page and "$$" not in page


def test_a_formula_displayed_by_code_renders_as_mathml():
    outputs = [new_output("display_data", data={"text/latex": "$\\displaystyle x^2$", "text/plain": "<Math>"}),
               new_output("display_data", data={"text/latex": "a table \\begin{tabular}{c}1\\end{tabular} and $x$",
                                                "text/plain": "<Latex>"})]
    nb = new_notebook(cells=[new_markdown_cell("Inline $a$ and\n\n$$b$$"),
                             new_code_cell("display(Math('x^2'))", outputs=outputs)])
    page = _feedback_page(nb)
    assert '<div class="math-output"><math display="inline"><mrow><mstyle' in page
    assert page.count("<math ") == 3, "two formulas of the markdown, one of the Math output"
    assert "a table \\begin{tabular}" in page, "LaTeX that is not one formula stays as its text"


def test_mathml_costs_a_feedback_page_a_few_kilobytes():
    """Measured on 01's solution, outputs included: 190 kB with nbgrader's exporter (MathJax from a CDN), 4 kB more
    with MathML. Inlining MathJax 2 would add over 400 kB (its combined TeX configuration alone is 366 kB)."""
    nb = nbformat.read(ROOT / "solutions" / "01_self_attention" / "self_attention.ipynb", as_version=4)
    with_cdn = len(_feedback_page(copy.deepcopy(nb), HTMLExporter).encode())
    with_mathml = len(_feedback_page(copy.deepcopy(nb)).encode())
    assert 0 < with_mathml - with_cdn < 20_000, f"{with_cdn} bytes with MathJax from a CDN, {with_mathml} with MathML"


def test_a_long_latex_output_stays_tex_text():
    """latex2mathml's time grows faster than the formula (0.85 s for 36 kB of x+x+...): a text/latex output over
    FORMULA_LIMIT is not converted, and the page shows it as TeX text."""
    short, long = "$" + "x+" * 100 + "x$", "$" + "x+" * 50_000 + "x$"
    assert latex_output_html(short) is not None and len(long) > FORMULA_LIMIT
    assert latex_output_html(long) is None
