"""nbgrader configuration for this course. The repository root is the course directory."""

c = get_config()  # noqa: F821 (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "transformers-from-scratch"
# Only the notebooks of an assignment are part of it; keep caches and editor leftovers out of release.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "*.egg-info", ".DS_Store"]

# The stub students see in every answer cell.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Seconds one cell may run before grading moves on.
c.ExecutePreprocessor.timeout = 300

# Deleted cells: `python -m autograder grade` puts them back itself. nbgrader's add_missing_cells assumes the
# cell before a test is an answer or a test; the locked demo cells of these notebooks break that (KeyError).
c.OverwriteCells.add_missing_cells = False
