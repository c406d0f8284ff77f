"""The site for self-learners: a course map, one page per notebook with its figures, navigation, a link to each
exercise notebook, and nothing loaded from the network. tests/test_browser.py opens a page in Chromium."""

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from autograder import GradingError, course_dir
from autograder.__main__ import main as cli
from autograder.website import build_site, describe

ROOT = course_dir.ROOT
NOTEBOOKS = [(a, n) for a in course_dir.assignments() for n in course_dir.notebooks(a)]
#: tag -> attributes whose URL the browser loads by itself (a link that is only followed when clicked is not one)
LOADED = {"script": "src", "link": "href", "img": "src", "iframe": "src", "source": "src", "video": "src",
          "audio": "src", "embed": "src", "object": "data"}


class Page(HTMLParser):
    """The URLs and ids of one HTML file."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.urls: list[tuple[str, str, str]] = []  # (tag, attribute, url)
        self.ids: set[str] = set()
        self.images: list[str] = []
        self.feed(path.read_text())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for name in ("href", "src", "data"):
            if attrs.get(name):
                self.urls.append((tag, name, attrs[name]))
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "a" and "class" in attrs:
            self.urls.append((f"a.{attrs['class']}", "href", attrs.get("href", "")))

    def links(self, css_class: str) -> list[str]:
        return [url for tag, _, url in self.urls if tag == f"a.{css_class}"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(out)
    return out


@pytest.fixture(scope="module")
def pages(site) -> list[Page]:
    return [Page(site / (a + ".html")) for a, _ in NOTEBOOKS]


def _remote(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https") or url.startswith("//")


def test_the_map_lists_every_assignment_in_course_order_with_what_you_build(site):
    index = Page(site / "index.html")
    hrefs = [url for tag, _, url in index.urls if tag == "a" and url.endswith(".html")]
    assert hrefs == [f"{a}.html" for a, _ in NOTEBOOKS]
    text = (site / "index.html").read_text()
    for assignment, notebook in NOTEBOOKS:
        page = describe(assignment, notebook, nbformat.read(ROOT / "solutions" / assignment / notebook, 4),
                        nbformat.read(ROOT / "release" / assignment / notebook, 4))
        assert page.title and page.time and page.points and page.builds and page.lead_html, page
        assert page.title in text and all(f"<code>{name}</code>" in text for name in page.builds)
    assert "<code>attention_weights</code>, <code>basic_self_attention</code>" in text


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_every_notebook_has_a_page_with_its_figures(site, assignment, notebook):
    solution = nbformat.read(ROOT / "solutions" / assignment / notebook, as_version=4)
    figures = [o for c in solution.cells if c.cell_type == "code"
               for o in c.outputs if "image/png" in o.get("data", {})]
    page = Page(site / f"{assignment}.html")
    assert len(page.images) == len(figures) > 0
    for src in page.images:
        assert (site / src).read_bytes().startswith(b"\x89PNG"), src
    assert "Executed solution, generated" not in page.path.read_text(), "the notebook's banner is for the file only"


def test_every_link_and_image_resolves_to_a_file_in_the_site(site, pages):
    for page in [Page(site / "index.html"), *pages]:
        for tag, _, url in page.urls:
            parts = urlsplit(url)
            if tag.startswith("a") and (parts.scheme in ("http", "https", "mailto")):
                continue  # a reference the reader may follow when online
            if not parts.path:
                assert parts.fragment in page.ids, f"{page.path.name}: no element with id {parts.fragment!r}"
                continue
            target = (page.path.parent / unquote(parts.path)).resolve()
            assert target.is_file() and target.is_relative_to(site.resolve()), f"{page.path.name}: {url}"


def test_nothing_is_loaded_from_the_network(site):
    for html in site.glob("*.html"):
        page = Page(html)
        loaded = [url for tag, attribute, url in page.urls if LOADED.get(tag) == attribute]
        assert loaded and not [url for url in loaded if _remote(url)], html.name
        assert "cdn" not in html.read_text().lower(), html.name
    for css in (site / "static").glob("*.css"):
        assert "url(http" not in css.read_text().replace(" ", "").replace("'", "").replace('"', ""), css.name
    assert (site / "static" / "mathjax" / "MathJax.js").is_file()
    assert (site / "static" / "mathjax" / "config" / "TeX-AMS-MML_HTMLorMML-full.js").is_file()


def test_navigation_walks_the_course_in_order(pages):
    names = [page.path.name for page in pages]
    for i, page in enumerate(pages):
        assert set(page.links("site-nav-map")) == {"index.html"}
        assert set(page.links("site-nav-prev")) == ({names[i - 1]} if i > 0 else set())
        assert set(page.links("site-nav-next")) == ({names[i + 1]} if i + 1 < len(names) else set())


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_each_page_links_its_exercise_notebook_from_release(site, assignment, notebook):
    page = Page(site / f"{assignment}.html")
    assert page.links("site-exercise-link") == [f"release/{assignment}/{notebook}"]
    released = (ROOT / "release" / assignment / notebook).read_bytes()
    assert (site / "release" / assignment / notebook).read_bytes() == released


def test_math_is_left_to_the_sites_own_mathjax(site):
    text = (site / "03_scaling.html").read_text()
    assert "$\\sqrt{d}$" in text or "\\sqrt{d}" in text
    assert '<script src="static/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"></script>' in text


def test_the_command_builds_again_over_its_own_site_but_never_over_another_folder(tmp_path, capsys):
    out = tmp_path / "site"
    assert cli(["site", "--out", str(out), "--assignment", "01_self_attention"]) == 0
    assert "open" in capsys.readouterr().out
    (out / "stale.html").write_text("from an earlier build")
    assert cli(["site", "--out", str(out), "--assignment", "01_self_attention"]) == 0
    assert not (out / "stale.html").exists() and (out / "01_self_attention.html").exists()
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep")
    with pytest.raises(GradingError, match="not a site"):
        build_site(other, only=["01_self_attention"])
    assert (other / "mine.txt").read_text() == "keep"
