"""The course's one site: the pages of docs/ (MyST Markdown) and the executed notebooks of solutions/, built by
Sphinx with MyST-NB (docs/conf.py) into a static folder that is searchable and loads nothing from the network.

site/index.html                        sends the browser on to docs/index.html, the front page
site/docs/*.html                       the pages of docs/: the course map, students, instructors, trust, ...
site/solutions/NN_name/name.html       one executed notebook per page, its figures in site/_images/
site/_downloads/.../name.ipynb         the exercise notebooks of release/ that the course map links to
site/search.html, site/searchindex.js  Sphinx's search, a static index that works from file://
site/_static/mathjax/                  MathJax 2 from the pinned jupyter-server-mathjax package

Sphinx runs on a staged copy of the course, so that a page's relative links (../solutions/..., ../release/...)
are the same in the site and in the repository. docs/course.md, the course map, is generated from the notebooks
(`course_map`); the command writes it again when the notebooks changed, and a test fails when it drifts.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder import GradingError, course_dir
from autograder.notebooks import answer_cells

#: a file that marks a folder as a built site, so that building again may replace it
MARKER = ".course-site"
#: what Sphinx said while building, kept beside the site
LOG = ".build.log"
#: outputs a static page cannot show: a widget needs a live kernel (its text fallback is a stale snapshot)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: MathJax folders the site does not need: menus in other languages, and glyphs of the SVG output, which the
#: package ships without its code (the site typesets with the HTML-CSS output and the STIX-Web fonts)
MATHJAX_LEFT_OUT = ("localization", "SVG")
MAP = Path("docs") / "course.md"


@dataclass
class Assignment:
    """One notebook of the course as the course map shows it, read from the notebook itself."""

    assignment: str
    notebook: str
    number: str
    title: str
    lead: str
    objectives: list[str]
    time: str
    points: int
    builds: list[str]

    @property
    def solution(self) -> str:
        return f"solutions/{self.assignment}/{self.notebook}"

    @property
    def exercise(self) -> str:
        return f"release/{self.assignment}/{self.notebook}"


def _intro(nb: nbformat.NotebookNode) -> str:
    """The notebook's opening markdown cell."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
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


def describe(assignment: str, notebook: str, root: Path = course_dir.ROOT) -> Assignment:
    """What the course map says about one notebook: its title, opening paragraph, time and points as the
    notebook's first cell states them, and the names its answer cells define."""
    release = nbformat.read(root / "release" / assignment / notebook, as_version=4)
    intro = _intro(release)
    heading = re.search(r"^#\s+(.+)$", intro, re.MULTILINE)
    title = re.sub(r"^Assignment\s+\d+\s*[—–:-]\s*", "", heading.group(1).strip()) if heading else assignment
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", intro) if p.strip()]
    lead = next((p for p in paragraphs if not p.startswith(("#", "**", "|", "-"))), "")
    listed = re.search(r"\*\*You will learn to\*\*\s*\n((?:[-*] .*\n?(?:  +.*\n?)*)+)", intro)
    items = re.split(r"(?m)^[-*] ", listed.group(1)) if listed else []
    objectives = [" ".join(item.split()) for item in items if item.strip()]
    time = re.search(r"\*\*Time:\*\*\s*([^.]+?)(?:\.\s|\.$|,\s*of which)", intro)
    points = re.search(r"\*\*Points:\*\*\s*(\d+)", intro)
    if not (time and points):
        raise GradingError(f"release/{assignment}/{notebook}: its first cell states no **Time:** or no **Points:**,"
                           " which the course map shows")
    return Assignment(assignment=assignment, notebook=notebook, number=assignment.split("_", 1)[0], title=title,
                      lead=" ".join(lead.split()), objectives=objectives, time=time.group(1).strip(),
                      points=int(points.group(1)), builds=_built_names(release))


def assignments(root: Path = course_dir.ROOT) -> list[Assignment]:
    """Every notebook of the course, in course order."""
    return [describe(a, n, root) for a in course_dir.assignments(root) for n in course_dir.notebooks(a, root)]


def course_map(root: Path = course_dir.ROOT) -> str:
    """docs/course.md: a table of the assignments, then one section each, all read from the notebooks."""
    parts = assignments(root)
    lines = [
        "<!-- Generated from the notebooks by `python -m autograder site` (autograder/docs.py): do not edit. -->",
        "# The course map", "",
        f"{len(parts)} assignments, {sum(p.points for p in parts)} points in all. Each builds a part of a transformer "
        "in plain PyTorch; later assignments import the course's own reference versions of earlier parts, so a "
        "mistake in one never costs points in the next. Work the exercise notebook (from `release/`, see "
        "[For students](students.md)); the executed notebook is the same notebook with the reference solutions "
        "in place, run top to bottom.", "",
        "| # | assignment | time | points |", "|---|---|---|---|",
    ]
    lines += [f"| {p.number} | [{p.title}](../{p.solution}) | {p.time} | {p.points} |" for p in parts]
    for p in parts:
        lines += ["", f"## {p.number} · {p.title}", "", p.lead, ""]
        if p.objectives:
            lines += ["You will learn to:", "", *(f"* {item}" for item in p.objectives), ""]
        lines += [f"- **You build:** {', '.join(f'`{name}`' for name in p.builds)}",
                  f"- **Time:** {p.time}; **points:** {p.points}",
                  f"- [The executed notebook](../{p.solution}) · [the exercise notebook](../{p.exercise})"
                  f" (`{p.exercise}`)"]
    return "\n".join(lines) + "\n"


def update_map(root: Path = course_dir.ROOT) -> bool:
    """Write docs/course.md from the notebooks when it differs; True when it was written."""
    text, path = course_map(root), root / MAP
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def mathjax_folder() -> Path:
    """MathJax 2 as the pinned jupyter-server-mathjax package ships it (found without importing the server)."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise GradingError("jupyter-server-mathjax is not installed: pip install -r requirements.txt")
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    if not (folder / "MathJax.js").exists():
        raise GradingError(f"no MathJax.js in {folder}")
    return folder


def _for_the_page(path: Path, exercise: str) -> nbformat.NotebookNode:
    """A solution notebook as its page shows it: no widget outputs, and after its opening
    cell a link to the exercise notebook (exercise: its path in the course, e.g. release/01_x/x.ipynb)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(
        f"> This page is the notebook executed with the reference solutions in place. The exercises are in "
        f"[`{exercise}`](../../{exercise}) ([how to work them](../../docs/students.md#doing-an-assignment)).",
        id="site-exercise-link"))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
    nb.metadata.pop("widgets", None)
    return nb


def stage(root: Path, staging: Path) -> None:
    """The sources Sphinx reads, laid out as in the course: docs/ (with a fresh course map and MathJax),
    solutions/ as its pages show them, release/ as it is."""
    shutil.copytree(root / "docs", staging / "docs", ignore=shutil.ignore_patterns("_build", "__pycache__"))
    (staging / MAP).write_text(course_map(root))
    shutil.copytree(mathjax_folder(), staging / "docs" / "_static" / "mathjax",
                    ignore=shutil.ignore_patterns(*MATHJAX_LEFT_OUT))
    for p in assignments(root):
        solution = root / p.solution
        if not solution.exists():
            raise GradingError(f"{solution} is missing: run `python -m autograder build` first")
        (staging / p.solution).parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_for_the_page(solution, p.exercise), staging / p.solution)
        (staging / p.exercise).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / p.exercise, staging / p.exercise)


def _prepare(out: Path) -> None:
    """An empty folder for the site; an earlier build is replaced, anything else is never deleted."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / MARKER).exists()):
            raise GradingError(f"{out} exists and is not a site built by this command; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("Built by `python -m autograder site`; rebuilt (deleted and written anew) each time.\n")


def build_site(out: Path, root: Path = course_dir.ROOT) -> Path:
    """Write the site into out (replacing an earlier build there); returns its front page."""
    _prepare(out)
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        staging = Path(tmp) / "course"
        stage(root, staging)
        # a process of its own: Sphinx registers its nodes and roles in docutils for the life of a process
        # Sphinx writes into tmp, then the site is copied to out: MyST-NB puts the notebooks' images in a
        # jupyter_execute/ folder beside its output folder, which would otherwise land beside out (in the checkout)
        html = Path(tmp) / "html"
        command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-j", "1",
                   "-c", str(staging / "docs"), "-d", str(Path(tmp) / "doctrees"), str(staging), str(html)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            shutil.copytree(html, out, dirs_exist_ok=True)
    (out / LOG).write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise GradingError("Sphinx could not build the site (warnings count as errors, so that no broken link or "
                           "missing page is published): " + "\n".join(said[-15:]) + f"\nwhole log: {out / LOG}")
    return out / "index.html"


def main(out: Path, root: Path = course_dir.ROOT) -> int:
    front = build_site(out, root)
    print(f"wrote the site to {out}/; open {front} in a browser")
    if update_map(root):  # the site was built from the notebooks either way; the committed copy follows them
        print(f"{root / MAP} written again from the notebooks: commit it")
    return 0
