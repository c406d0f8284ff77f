"""nbgrader configuration for this course. The repository root is the course directory."""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformers-from-scratch"
# Only the notebooks of an assignment are part of it; keep caches and editor leftovers out of release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.egg-info", ".DS_Store"]

# The stub students see in every answer cell.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Test cells only probe under autograde; the verdict is the judge's, reached in nbgrader's own process from the
# evidence the kernel recorded (autograder/judging.py). ClearEvidence runs before the kernel, JudgeEvidence after
# the outputs are final and before SaveAutoGrades scores them.
c.Autograde.autograde_preprocessors = [
    "autograder.judging.ClearEvidence",
    "nbgrader.preprocessors.Execute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "autograder.judging.JudgeEvidence",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Seconds one cell may run before grading moves on.
c.ExecutePreprocessor.timeout = 300

# Deleted cells: `python -m autograder grade` puts them back itself. nbgrader's add_missing_cells assumes the
# cell before a test is an answer or a test; the locked demo cells of these notebooks break that (KeyError).
c.OverwriteCells.add_missing_cells = False
