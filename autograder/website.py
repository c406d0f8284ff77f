"""The course as a static site for self-learners, built from solutions/ and release/, fully offline.

site/index.html            the course map: every assignment, what you build in it, its time and points
site/NN_name.html          one executed solution notebook per page, with its figures and rendered math
site/figures/NN_name/      the figures of that page (PNG files nbconvert extracts from the outputs)
site/release/NN_name/*.ipynb   the exercise notebook each page links to
site/static/               JupyterLab's stylesheets (from nbconvert's lab template), the site's own, and MathJax

Pages are nbconvert's HTML export with a template of ours (autograder/site_templates/course) that extends
nbconvert's lab template and loads nothing from a CDN: MathJax 2 comes from the pinned jupyter-server-mathjax
package, and the lab template's require.js, widget and mermaid scripts are left out.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import nbformat
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from traitlets.config import Config

from autograder import GradingError, course_dir
from autograder.notebooks import answer_cells

TEMPLATES = Path(__file__).parent / "site_templates"
COURSE = "Transformers from scratch"
#: a file that marks a folder as a built site, so that building again may replace it
MARKER = ".course-site"
#: outputs a static page cannot show: a widget needs a live kernel (its text fallback is a stale snapshot)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: MathJax folders the site does not need: menus in other languages, and glyphs of the SVG output, which the
#: package ships without its code (the site typesets with the HTML-CSS output and the STIX-Web fonts)
MATHJAX_LEFT_OUT = ("localization", "SVG")


@dataclass
class Page:
    """One notebook of the course as the site shows it."""

    assignment: str
    notebook: str
    href: str
    exercise: str  # the exercise notebook's path, in the site and in the course alike
    number: str
    title: str
    time: str = ""
    points: str = ""
    builds: list[str] = field(default_factory=list)
    lead_html: str = ""
    objectives_html: str = ""
    prev: Page | None = None
    next: Page | None = None


def page_name(assignment: str, notebook: str, root: Path = course_dir.ROOT) -> str:
    """The site's file for one notebook: NN_name.html, or NN_name-notebook.html when an assignment has several."""
    if len(course_dir.notebooks(assignment, root)) == 1:
        return f"{assignment}.html"
    return f"{assignment}-{Path(notebook).stem}.html"


def _intro(nb: nbformat.NotebookNode) -> str:
    """The notebook's opening markdown cell (after the generated banner of a solution notebook)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.get("id") != "generated-banner":
            return cell.source
    return ""


def _built_names(release: nbformat.NotebookNode) -> list[str]:
    """The functions and classes a student writes: every public top-level definition in the answer cells."""
    names = []
    for source in answer_cells(release).values():
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names += [n.name for n in tree.body
                  if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]
    return names


def describe(assignment: str, notebook: str, solution: nbformat.NotebookNode, release: nbformat.NotebookNode,
             root: Path = course_dir.ROOT) -> Page:
    """What the course map says about one notebook, read from its opening cell and its answer cells."""
    intro = _intro(solution)
    heading = re.search(r"^#\s+(.+)$", intro, re.MULTILINE)
    title = heading.group(1).strip() if heading else assignment
    title = re.sub(r"^Assignment\s+\d+\s*[—–:-]\s*", "", title)
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", intro) if p.strip()]
    lead = next((p for p in paragraphs if not p.startswith(("#", "**", "|", "-"))), "")
    objectives = re.search(r"\*\*You will learn to\*\*\s*\n((?:[-*] .*\n?(?:  +.*\n?)*)+)", intro)
    time = re.search(r"\*\*Time:\*\*\s*([^.]+?)(?:\.\s|\.$|,\s*of which)", intro)
    points = re.search(r"\*\*Points:\*\*\s*(\d+)", intro)
    return Page(
        assignment=assignment, notebook=notebook, href=page_name(assignment, notebook, root),
        exercise=f"release/{assignment}/{notebook}", number=assignment.split("_", 1)[0], title=title,
        time=time.group(1).strip() if time else "", points=points.group(1) if points else "",
        builds=_built_names(release), lead_html=markdown2html_mistune(lead) if lead else "",
        objectives_html=markdown2html_mistune(objectives.group(1)) if objectives else "",
    )


def _for_the_page(nb: nbformat.NotebookNode, page: Page) -> nbformat.NotebookNode:
    """The solution notebook as a page shows it: no generated-file banner, no widget outputs, a title."""
    nb = nbformat.from_dict(nb)
    nb.cells = [cell for cell in nb.cells if cell.get("id") != "generated-banner"]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    nb.metadata.pop("widgets", None)
    nb.metadata["title"] = f"{page.number} · {page.title} — {COURSE}"
    return nb


def _exporter() -> HTMLExporter:
    config = Config()
    config.HTMLExporter.preprocessors = ["nbconvert.preprocessors.ExtractOutputPreprocessor"]
    config.ExtractOutputPreprocessor.output_filename_template = "{unique_key}_{cell_index}_{index}{extension}"
    return HTMLExporter(config=config, template_name="course", extra_template_basedirs=[str(TEMPLATES)])


def _lab_static(exporter: HTMLExporter) -> Path:
    """nbconvert's lab template folder that holds JupyterLab's stylesheets."""
    for folder in exporter.template_paths:
        if (Path(folder) / "static" / "theme-light.css").exists():
            return Path(folder) / "static"
    raise GradingError("nbconvert's lab template (static/theme-light.css) is not installed")


def mathjax_folder() -> Path:
    """MathJax 2 as the pinned jupyter-server-mathjax package ships it (found without importing the server)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise GradingError("jupyter-server-mathjax is not installed: pip install -r requirements.txt")
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    if not (folder / "MathJax.js").exists():
        raise GradingError(f"no MathJax.js in {folder}")
    return folder


def _prepare(out: Path) -> None:
    """An empty folder for the site; an earlier build is replaced, anything else is never deleted."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists()):
            raise GradingError(f"{out} exists and is not a site built by this command; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("Built by `python -m autograder site`; rebuilt (deleted and written anew) each time.\n")


def build_site(out: Path, root: Path = course_dir.ROOT, only: list[str] | None = None) -> list[Page]:
    """Write the site into out (replacing an earlier build there); returns its pages in course order."""
    assignments = only or course_dir.assignments(root)
    unknown = sorted(set(assignments) - set(course_dir.assignments(root)))
    if unknown:
        raise GradingError(f"unknown assignment(s) {unknown}")
    _prepare(out)
    exporter = _exporter()

    solutions, pages = {}, []
    for assignment in assignments:
        for notebook in course_dir.notebooks(assignment, root):
            solution_path = root / "solutions" / assignment / notebook
            if not solution_path.exists():
                raise GradingError(f"{solution_path} is missing: run `python -m autograder build` first")
            solution = nbformat.read(solution_path, as_version=4)
            release = nbformat.read(root / "release" / assignment / notebook, as_version=4)
            page = describe(assignment, notebook, solution, release, root)
            solutions[page.href] = solution
            pages.append(page)
    for before, after in zip(pages, pages[1:], strict=False):
        before.next, after.prev = after, before

    for page in pages:
        nb = _for_the_page(solutions[page.href], page)
        html, resources = exporter.from_notebook_node(nb, resources={
            "output_files_dir": f"figures/{page.assignment}",
            "unique_key": Path(page.notebook).stem,
            "site_page": page,
        })
        (out / page.href).write_text(html)
        for name, data in resources.get("outputs", {}).items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(data)
        exercise = out / page.exercise
        exercise.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / page.exercise, exercise)

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES / "course"), autoescape=True)
    (out / "index.html").write_text(env.get_template("map.html.j2").render(course=COURSE, pages=pages))

    static = out / "static"
    lab = _lab_static(exporter)
    static.mkdir()
    shutil.copyfile(lab / "index.css", static / "jupyterlab.css")
    for theme in ("theme-light.css", "theme-dark.css"):
        shutil.copyfile(lab / theme, static / theme)
    shutil.copyfile(TEMPLATES / "site.css", static / "site.css")
    shutil.copytree(mathjax_folder(), static / "mathjax", ignore=shutil.ignore_patterns(*MATHJAX_LEFT_OUT))
    return pages


def main(out: Path, only: list[str] | None = None) -> int:
    pages = build_site(out, only=only)
    print(f"wrote {len(pages)} pages and the course map to {out}/; open {out / 'index.html'} in a browser")
    return 0
