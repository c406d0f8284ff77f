"""Sphinx configuration of the course's site: `python -m autograder site` builds it (autograder/docs.py).

The build runs on a staged copy of the course (docs/, solutions/, release/), so the pages' relative links are
the same in the site and on a code host: docs/students.md links ../solutions/01_self_attention/self_attention.ipynb.
Everything a page loads ships in the built folder (Furo's assets, Sphinx's search index, MathJax 2 from the pinned
jupyter-server-mathjax package), so the site works from file:// on a machine with no network.
"""

import re

project = "Transformers from scratch"
author = "the course's authors"
root_doc = "docs/index"
extensions = ["myst_nb", "sphinx.ext.mathjax"]
# only the course's pages and the executed notebooks are documents; release/ holds the exercise notebooks that
# pages link to as downloads
exclude_patterns = ["release/**", "**/.ipynb_checkpoints", "docs/_extra/**", "docs/_static/**"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# MyST writes MathJax 3's configuration by default, which MathJax 2 would read as its own; the site's is below
myst_update_mathjax = False
# the notebooks of solutions/ are shown as committed (executed by `python -m autograder build`), never run here
nb_execution_mode = "off"
# no widget manager from a CDN: the site shows no live widgets (the builder drops their outputs)
nb_ipywidgets_js = {}
# a notebook's stderr (PyTorch's warnings) is part of what the reader would see running it
nb_output_stderr = "show"

html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_extra_path = ["_extra"]
html_css_files = ["course.css"]
html_copy_source = False
html_show_sourcelink = False
html_show_copyright = False
html_last_updated_fmt = None

# MathJax 2 from the site's own _static/mathjax (the builder copies it from jupyter-server-mathjax), never a CDN
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
mathjax2_config = {
    "TeX": {"equationNumbers": {"autoNumber": "AMS", "useLabelIds": True}},
    "tex2jax": {"inlineMath": [["\\(", "\\)"]], "displayMath": [["\\[", "\\]"]], "processEscapes": True,
                "processEnvironments": True,
                # Sphinx marks every formula with the class math; MyST marks a page's text tex2jax_ignore
                "processClass": "math", "ignoreClass": "tex2jax_ignore"},
    "MMLorHTML": {"prefer": "HTML"},
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None,
                 "linebreaks": {"automatic": True}},
    "fast-preview": {"disabled": True},
    "messageStyle": "none",
}


def _exercise_links_as_downloads(app, docname, source):
    """A page's link to an exercise notebook (../release/...ipynb) is a file to download, not a page: MyST would
    look for a document of that name, so the site marks it `path:`; the page stays a plain link on a code host."""
    source[0] = re.sub(r"\]\(((?:\.\./)+release/)", r"](path:\1", source[0])


def setup(app):
    app.connect("source-read", _exercise_links_as_downloads)
