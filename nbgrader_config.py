"""nbgrader configuration for this course. The repository root is the course directory."""

import importlib.util
import os
import sys

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

# nbgrader runs `alembic` from PATH when it creates a gradebook. An nbgrader or JupyterLab started as .venv/bin/...
# without an activated environment would not find it (Formgrader answers 500 and leaves a gradebook.db without its
# version record), so every nbgrader app that reads this file gets its interpreter's scripts folder on PATH.
_scripts = os.path.dirname(sys.executable)
if _scripts not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_scripts, os.environ.get("PATH", "")])

c.CourseDirectory.course_id = "transformers-from-scratch"


def _machine_exchange() -> str | None:
    """The exchange a machine-wide or user nbgrader_config.py names (a hub's, deploy/nbgrader_config.py), if any."""
    from jupyter_core.paths import jupyter_config_path  # noqa: PLC0415 - only nbgrader's own loading needs it
    from traitlets.config.loader import PyFileConfigLoader  # noqa: PLC0415

    here = os.path.dirname(os.path.abspath(__file__))
    for folder in jupyter_config_path():
        if os.path.abspath(folder) != here and os.path.isfile(os.path.join(folder, "nbgrader_config.py")):
            root = PyFileConfigLoader("nbgrader_config.py", path=folder).load_config().Exchange.get("root")
            if root:
                return root
    return None


# Assignments and feedback travel through an exchange folder inside the course (git-ignored), so JupyterLab's
# Assignment List and Formgrader work on one machine without a shared system folder; on a JupyterHub, through the
# one shared folder the hub's nbgrader_config.py names (deploy/, docs/instructors.md, "A class on JupyterHub").
_shared = _machine_exchange()
if _shared:
    c.Exchange.root = _shared
else:
    c.Exchange.root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exchange")
    os.makedirs(c.Exchange.root, exist_ok=True)  # nbgrader's exchange refuses a root that does not exist yet
# Only the notebooks of an assignment are part of it; keep caches and editor leftovers out of release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.egg-info", ".DS_Store"]

# The stub students see in every answer cell.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# The grading steps, as nbgrader preprocessors (so plain `nbgrader autograde` grades exactly as
# `python -m autograder grade` does). Sanitising: RestoreCells resets nbgrader metadata from source/ and puts deleted
# cells back before nbgrader's OverwriteCells restores locked and test cells from the gradebook; FlagTampering notes
# suspicious lines of the student's own cells for the instructor (it changes nothing). Autograding: test cells only
# probe in the kernel; ClearEvidence runs before it, GradingExecute runs it (output limit; a cell that kills the
# kernel is stopped and the rest graded), and JudgeEvidence decides every test from the recorded evidence, in this
# process, before SaveAutoGrades scores it (autograder/judging.py). SanitiseStudentContent then makes everything the
# student wrote inert (scripts, handlers, javascript: links, active outputs; autograder/sanitise.py), so the
# autograded notebook Formgrader renders and the feedback made from it run nothing of the student's in a browser.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "autograder.cells.RestoreCells",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "autograder.tamper.FlagTampering",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "autograder.judging.ClearEvidence",
    "autograder.execute.GradingExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "autograder.judging.JudgeEvidence",
    "autograder.sanitise.SanitiseStudentContent",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Feedback shows hidden tests' results, not their code, and nothing of the student's runs in it: the notebook is
# sanitised again, and every page nbconvert renders (feedback, Formgrader's views) cleans markdown, HTML outputs and
# raw cells with the course's allowlist (it keeps headings, tables and images; nbconvert's own drops them) and shows
# no JavaScript or widget output.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "autograder.feedback.HideHiddenTests",
    "autograder.sanitise.SanitiseStudentContent",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# A feedback page is handed to a student and opened anywhere, offline too: its math is MathML made here, not MathJax
# from a CDN, and the page loads and runs nothing (autograder/math_render.py).
c.GenerateFeedback.exporter_class = "autograder.math_render.FeedbackExporter"
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"clean_html": "autograder.sanitise.clean_html"}
c.HTMLExporter.preprocessors = ["autograder.sanitise.SanitiseOutputs"]
# Formgrader's page of a submission loads MathJax from this Jupyter server (jupyter-server-mathjax), not from cdnjs as
# nbgrader's template does: the course's template folder is searched first for that page's mathjax macro only
# (autograder/formgrader_templates/), then nbgrader's own templates (what nbgrader sets when this is not configured).
_grader, _nbgrader = importlib.util.find_spec("autograder"), importlib.util.find_spec("nbgrader")
if _grader is not None and _nbgrader is not None:  # where either is missing, nbgrader's own templates apply
    c.HTMLExporter.extra_template_basedirs = [
        os.path.join(os.path.dirname(_grader.origin), "formgrader_templates"),
        os.path.join(_nbgrader.submodule_search_locations[0], "server_extensions", "formgrader", "templates"),
    ]

# Seconds one cell may run before grading moves on.
c.ExecutePreprocessor.timeout = 300

# Deleted cells are put back by autograder.cells.RestoreCells. nbgrader's add_missing_cells assumes the cell before a
# test is an answer or a test; the locked demo cells of these notebooks break that (KeyError).
c.OverwriteCells.add_missing_cells = False
