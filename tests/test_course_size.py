"""What a maintainer adding next year's assignment must find: checks that stay small because they are declared
(course/checks/kinds.py, course/judges/kinds.py), and shared helpers that live once."""

import ast
from collections import defaultdict

import nbformat

from autograder import course_dir

#: lines of the course's code per graded test cell of source/: Python under course/ (references, data, both sides of
#: the checks, the typical mistakes written beside their judges) and catalogue/ (the variants graded to prove them).
#: A ratchet, lowered whenever checks get shorter; every raise says why in its commit message (git log -p on this
#: line). 115.2 at 2294a5b, before issue 40 moved the mistakes' messages from tables (course/judges/mistakes/*.txt,
#: counted too) and their code from the catalogue into the judges modules; 113.9 after 03-06 and 09 moved; 112.7
#: once every assignment had moved and the tables' reader and the simulators nothing used were deleted; 113.9 again
#: with the records that took eight definitions off test_reading_closure's WIDE (Mask, Shift, Sampling, RunKeys),
#: kinds.py split into models.py and token_loss.py (their docstrings), and 08's oracles drawn once (caches).
LINES_PER_TEST_CELL = 114


def _graded_test_cells() -> int:
    count = 0
    for assignment in course_dir.assignments():
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            count += sum(1 for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade")
                         and not cell.metadata["nbgrader"].get("solution"))
    return count


def test_course_code_fits_its_budget_of_lines_per_graded_test_cell():
    course, catalogue = course_dir.ROOT / "course", course_dir.ROOT / "catalogue"
    lines = {path.relative_to(course_dir.ROOT): len(path.read_text(encoding="utf-8").splitlines())
             for path in (*course.rglob("*.py"), *catalogue.rglob("*.py"))}
    total, cells = sum(lines.values()), _graded_test_cells()
    assert cells > 0
    largest = [f"{path} {n}" for path, n in sorted(lines.items(), key=lambda item: -item[1])[:5]]
    assert total <= LINES_PER_TEST_CELL * cells, (
        f"course/ and catalogue/ hold {total} lines for {cells} graded test cells: {total / cells:.1f} per cell, "
        f"over the budget of {LINES_PER_TEST_CELL}. Declare checks with the kinds instead of writing them out."
        f" Largest: {largest}")


def test_no_private_helper_is_defined_in_two_modules():
    where = defaultdict(list)
    for path in sorted((course_dir.ROOT / "course").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith("_") \
                    and not node.name.startswith("__"):
                where[node.name].append(str(path.relative_to(course_dir.ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"private helpers defined in more than one module (make one shared helper): {twice}"
