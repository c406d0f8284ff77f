"""The course's site (python -m autograder site: Sphinx and MyST-NB over docs/ and solutions/), built once for this
module and read as a reader's browser reads it: every page and figure there, every internal link resolving, the
course map true to the notebooks, search and math working from file:// in headless Chromium with no request
leaving the machine. README, the front door, stays small and its links resolve."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from test_browser import CHROMIUM, CHROMIUM_FLAGS, _new_page, require_browser

from autograder import GradingError, course_dir, docs
from autograder.__main__ import main as cli

ROOT = course_dir.ROOT
ASSIGNMENTS = docs.assignments()
#: tag -> the attribute whose URL the browser loads by itself (a link that is only followed when clicked is not one)
LOADED = {"script": "src", "link": "href", "img": "src", "iframe": "src", "source": "src", "video": "src",
          "audio": "src", "embed": "src", "object": "data"}
README_LIMIT = 10 * 1024


class Page(HTMLParser):
    """The URLs and ids of one HTML file."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, url)
        self.ids: set[str] = set()
        self.feed(path.read_text())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src", "data"):
            if attrs.get(name):
                self.urls.append((tag, name, attrs[name]))

    def loaded(self) -> list[str]:
        return [url for tag, attribute, url in self.urls if LOADED.get(tag) == attribute]

    def images(self) -> list[str]:
        return [url for tag, _, url in self.urls if tag == "img"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The whole site, built once (about 15 s on 2 cores): every test of this module reads the same build."""
    out = tmp_path_factory.mktemp("site") / "site"
    docs.build_site(out)
    return out


def test_the_build_writes_nothing_beside_the_site(site):
    """MyST-NB keeps the notebooks' images in a jupyter_execute/ folder beside its output folder: built straight into
    --out, that folder appeared in the checkout, untracked."""
    assert [p.name for p in site.parent.iterdir()] == ["site"]
    assert list(site.rglob("*.png")), "the notebooks' figures are in the site"


@pytest.fixture(scope="module")
def pages(site) -> list[Page]:
    return [Page(path) for path in sorted(site.rglob("*.html"))]


def _remote(url: str) -> bool:
    return urlsplit(url).scheme not in ("", "file", "data")


def _page_of(site: Path, notebook_path: str) -> Path:
    return site / Path(notebook_path).with_suffix(".html")


# ------------------------------------------------------------------ the pages


def test_the_committed_course_map_is_the_one_the_notebooks_give():
    committed = (ROOT / docs.MAP).read_text()
    assert committed == docs.course_map(), (
        "docs/course.md differs from what the notebooks say: run `python -m autograder site` and commit it")


@pytest.mark.parametrize("entry", ASSIGNMENTS, ids=lambda entry: entry.assignment)
def test_the_map_states_the_points_nbgrader_counts_and_the_names_a_student_writes(entry):
    release = nbformat.read(ROOT / entry.exercise, as_version=4)
    graded = sum(cell.metadata.get("nbgrader", {}).get("points", 0) for cell in release.cells)
    assert entry.points == graded, f"{entry.exercise} says **Points:** {entry.points}; its tests are worth {graded}"
    assert entry.title and entry.lead and re.search(r"\d|hour|minute", entry.time), entry
    solved = "\n".join(cell.source for cell in nbformat.read(ROOT / entry.solution, as_version=4).cells)
    assert entry.builds and all(re.search(rf"\b(def|class) {name}\b", solved) for name in entry.builds), entry.builds


def test_the_front_page_leads_to_every_guide_and_every_notebook(site):
    front = Page(site / "docs" / "index.html")
    targets = {os.path.normpath(site / "docs" / urlsplit(url).path) for tag, _, url in front.urls
               if tag == "a" and not _remote(url)}
    wanted = [site / "docs" / f"{name}.html" for name in
              ("course", "students", "instructors", "trust", "contributors", "benchmarks")]
    wanted += [_page_of(site, entry.solution) for entry in ASSIGNMENTS]
    assert not [str(path.relative_to(site)) for path in wanted if str(path) not in targets]
    assert "docs/index.html" in (site / "index.html").read_text(), "site/index.html must send the reader on"


@pytest.mark.parametrize("entry", ASSIGNMENTS, ids=lambda entry: entry.assignment)
def test_every_notebook_has_a_page_with_its_figures(site, entry):
    solution = nbformat.read(ROOT / entry.solution, as_version=4)
    figures = [o for c in solution.cells if c.cell_type == "code"
               for o in c.outputs if "image/png" in o.get("data", {})]
    page = Page(_page_of(site, entry.solution))
    assert len(page.images()) == len(figures) > 0
    for src in page.images():
        assert (page.path.parent / src).read_bytes().startswith(b"\x89PNG"), src
    assert "Executed solution, generated" not in page.path.read_text(), "the notebook's banner is for the file only"


def _downloads(page: Page) -> list[str]:
    return [url for tag, _, url in page.urls if tag == "a" and url.endswith(".ipynb")]


def test_the_map_and_each_notebook_page_link_the_exercise_notebook_as_a_download(site):
    course = Page(site / "docs" / "course.html")
    assert len(_downloads(course)) == len(ASSIGNMENTS)
    for entry, url in zip(ASSIGNMENTS, _downloads(course), strict=True):
        notebook_page = Page(_page_of(site, entry.solution))
        for page, link in [(course, url), *((notebook_page, u) for u in _downloads(notebook_page))]:
            assert link.endswith("/" + entry.notebook), f"{page.path.relative_to(site)}: {link}"
            assert (page.path.parent / unquote(link)).read_bytes() == (ROOT / entry.exercise).read_bytes()
        assert _downloads(notebook_page), f"{entry.solution}'s page does not link its exercise notebook"


def test_every_internal_link_resolves_to_a_file_and_an_anchor_in_the_site(site, pages):
    ids = {page.path.resolve(): page.ids for page in pages}
    broken = []
    for page in pages:
        for _, _, url in page.urls:
            if _remote(url) or url.startswith(("mailto:", "javascript:")):
                continue
            parts = urlsplit(url)
            target = (page.path.parent / unquote(parts.path)).resolve() if parts.path else page.path.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not (target.is_file() and target.is_relative_to(site.resolve())):
                broken.append(f"{page.path.relative_to(site)}: {url} (no such file)")
            elif parts.fragment and target in ids and unquote(parts.fragment) not in ids[target]:
                broken.append(f"{page.path.relative_to(site)}: {url} (no element with that id)")
    assert not broken, "\n".join(broken[:20])


def test_no_page_or_stylesheet_loads_anything_from_the_network(site, pages):
    for page in pages:
        remote = [url for url in page.loaded() if _remote(url)]
        assert not remote, f"{page.path.relative_to(site)} loads {remote}"
    for css in site.rglob("*.css"):
        text = css.read_text(errors="replace").replace(" ", "").replace("'", "").replace('"', "")
        assert "url(http" not in text and "url(//" not in text and "@importhttp" not in text and (
            "@importurl(http" not in text), css.relative_to(site)
    assert (site / "_static" / "mathjax" / "MathJax.js").is_file()


def test_the_command_replaces_its_own_site_but_never_another_folder(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(GradingError, match="not a site built by this command"):
        cli(["site", "--out", str(other)])
    assert (other / "mine.txt").read_text() == "keep"
    own = tmp_path / "site"
    docs._prepare(own)
    (own / "stale.html").write_text("from an earlier build")
    docs._prepare(own)
    assert not (own / "stale.html").exists() and (own / docs.MARKER).exists()


# ------------------------------------------------------------------ README, the front door


def test_readme_is_a_front_door_of_at_most_10_kb_whose_links_resolve():
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= README_LIMIT, f"README.md is {readme.stat().st_size} bytes: move text to docs/"
    text = readme.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links), "README links into the site's pages"
    for link in links:
        if _remote(link):
            continue
        parts = urlsplit(link)
        target = ROOT / unquote(parts.path)
        assert target.exists(), f"README links {link}: no such file"
        if parts.fragment and target.suffix == ".md":
            anchors = {_github_anchor(h) for h in re.findall(r"^#+\s+(.+)$", target.read_text(), re.MULTILINE)}
            assert parts.fragment in anchors, f"README links {link}: no heading with that anchor"


def _github_anchor(heading: str) -> str:
    """The anchor a code host and MyST (myst_heading_anchors) give a heading: lower case, punctuation dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# ------------------------------------------------------------------ in a browser


@pytest.fixture(scope="module")
def browser():
    require_browser("the site's browser tests")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only .ci/run installs it

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A page that may load files and this machine only: every other request is counted and refused."""
    context, page = _new_page(browser)
    yield page
    assert not page.remote_requests, f"requests left the machine: {page.remote_requests}"
    context.close()


def _search(page, site: Path, words: str) -> list[str]:
    """The pages Sphinx's search lists for words, opened from file:// as a reader without a network would."""
    page.goto((site / "search.html").as_uri() + "?q=" + words.replace(" ", "+"))
    page.wait_for_function("() => (document.querySelector('.search-summary') || {}).textContent"
                           " && document.querySelector('.search-summary').textContent.includes('found')",
                           timeout=30_000)
    hrefs = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
    return [urlsplit(href).path for href in hrefs]


@pytest.mark.parametrize("words,expected", [
    ("rotary", "solutions/09_modern_decoder/modern_decoder.html"),
    ("late penalty", "docs/instructors.html"),
])
def test_searching_the_site_finds_the_page_a_reader_wants(site, page, words, expected):
    found = _search(page, site, words)
    assert any(path.endswith(expected) for path in found), f"searching {words!r} found {found}"


def test_a_notebook_page_shows_its_math_typeset_and_its_figures_offline(site, page):
    page.goto(_page_of(site, "solutions/03_scaling/scaling.ipynb").as_uri())
    page.wait_for_function("() => window.MathJax && MathJax.isReady", timeout=60_000)
    page.evaluate("() => new Promise(done => MathJax.Hub.Queue(() => done(true)))")  # after the first typesetting
    seen = page.evaluate("""() => {
      const scripts = [...document.querySelectorAll('script[type^="math/tex"]')];
      return {
        images: [...document.images].filter(img => img.src.includes('_images')).map(img => img.naturalWidth),
        math: scripts.length,
        rendered: scripts.filter(s => { const f = document.getElementById(s.id + '-Frame');
                                         return f && f.getBoundingClientRect().width > 0; }).length,
        errors: document.querySelectorAll('.merror, .MathJax_Error').length,
        prose: document.querySelector('article').innerText,
      };
    }""")
    assert seen["images"] and all(width > 0 for width in seen["images"]), seen["images"]
    assert seen["math"] > 0 and seen["rendered"] == seen["math"], f"{seen['rendered']} of {seen['math']} formulas"
    assert not seen["errors"]
    raw = re.findall(r"\$\$|\\\(|\\\[", seen["prose"])
    assert not raw, f"math left as TeX: {raw[:5]}"
