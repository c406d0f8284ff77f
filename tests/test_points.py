"""The points a notebook's text announces are the points its graded cells carry.

Each notebook states its total in its opening cell ("**Points:** N") and each exercise's share in its heading
("### Exercise n — name (P points)"); nbgrader scores the `points` of the test cells that follow that heading. A
weight changed in one place and not the other would tell the student one thing and grade another.
"""

import re

import nbformat
import pytest

from autograder import course_dir

NOTEBOOKS = [(a, n) for a in course_dir.assignments() for n in course_dir.notebooks(a)]
HEADING = re.compile(r"^### Exercise \d+ — (.+?) \((\d+) points?\)", re.MULTILINE)
TOTAL = re.compile(r"\*\*Points:\*\*\s+(\d+)")


def announced_and_graded(nb: nbformat.NotebookNode) -> list[tuple[str, int, int]]:
    """(exercise, points its heading announces, points of the graded cells up to the next heading) per exercise."""
    rows: list[list] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            rows += [[name, int(points), 0] for name, points in HEADING.findall(cell.source)]
        grading = cell.metadata.get("nbgrader", {})
        points = grading.get("points", 0) if grading.get("grade") else 0
        if points:
            assert rows, "a graded cell before the first exercise heading"
            rows[-1][2] += points
    return [tuple(row) for row in rows]


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_each_exercise_heading_announces_the_points_of_its_graded_cells(assignment, notebook):
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    rows = announced_and_graded(nb)
    assert rows, "no exercise headings found"
    wrong = [f"{name}: heading {said}, graded cells {graded}" for name, said, graded in rows if said != graded]
    assert not wrong, f"{assignment}: {wrong}"


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_the_opening_cell_announces_the_total(assignment, notebook):
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    total = TOTAL.search(nb.cells[0].source)
    assert total, "the opening cell states no **Points:**"
    assert int(total.group(1)) == sum(graded for _, _, graded in announced_and_graded(nb))
