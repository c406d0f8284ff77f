"""Every catalogued mistake is diagnosed by name and every correct alternative scores full marks, graded in this
process through the same evidence records and judges as real grading (tests/replay.py): with the fixed seeds a
student works with, and under a secret grading seed as the grader draws them (another seed for every variant)."""

import zlib
from functools import cache

import nbformat
import pytest
from conftest import ASSIGNMENTS, source_answers
from replay import grade

from autograder import course_dir
from autograder.judging import checks_module
from autograder.notebooks import cleared, grade_id
from catalogue import alternatives, edited, mistakes, variants
from course.checks.check import GRADE_ID_PREFIX, checks_of

NOTEBOOKS = [(a, n) for a in ASSIGNMENTS for n in course_dir.notebooks(a)]


#: the share of an assignment's catalogued mistakes that a visible test must catch while the student works
VISIBLE_CATCH_RATE = 0.9


def _id(v):
    return f"{v.assignment}:{v.name}"


@cache
def _graded(variant, under_grading: bool = False):
    seed = zlib.crc32(f"{variant.assignment}/{variant.name}".encode()) if under_grading else None
    # the test cells before the variant's answer cell run before it and cannot see it: only the later ones run
    return grade(variant.assignment, {variant.cell: variant.code}, seed=seed, from_cell=variant.cell)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_solution_scores_full_marks(assignment, notebook):
    result = grade(assignment, notebook=notebook)
    assert result.max_score > 0
    assert result.score == result.max_score, result.failures()


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_untouched_release_scores_zero_and_says_not_implemented(assignment, notebook):
    stubs = {cell: cleared(code) for cell, code in _solution_cells(assignment, notebook).items()}
    result = grade(assignment, stubs, notebook=notebook)
    assert result.score == 0, [gid for gid, v in result.verdicts.items() if v.passed]
    assert "not-implemented" in result.mistakes


@pytest.mark.parametrize("variant", [v for v in mistakes() if v.assignment in ASSIGNMENTS], ids=_id)
def test_mistake_scores_below_full_marks_and_is_named(variant):
    result = _graded(variant)
    assert result.score < result.max_score, f"{variant.name} was not caught"
    assert variant.mistake in result.mistakes, f"{variant.name}: expected {variant.mistake!r}\n{result.failures()}"


@pytest.mark.parametrize("variant", [v for v in alternatives() if v.assignment in ASSIGNMENTS], ids=_id)
def test_correct_alternative_scores_full_marks(variant):
    result = _graded(variant)
    assert result.score == result.max_score, result.failures()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_visible_tests_catch_nine_in_ten_typical_mistakes(assignment):
    """A student should rarely learn of a mistake only from the grade: the tests shown while working (hidden parts
    left out) fail for at least VISIBLE_CATCH_RATE of the catalogued mistakes."""
    found = mistakes(assignment)
    missed = [v.name for v in found if not _graded(v).fails_visibly]
    caught = len(found) - len(missed)
    assert caught >= VISIBLE_CATCH_RATE * len(found), \
        f"visible tests catch {caught} of {len(found)} mistakes of {assignment}; only hidden ones catch {missed}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_answer_cell_has_catalogued_mistakes(assignment):
    for notebook in course_dir.notebooks(assignment):
        for cell in source_answers(assignment, notebook):
            found = [v for v in mistakes(assignment) if v.cell == cell]
            assert len(found) >= 2, f"{assignment}/{cell} has {len(found)} catalogued mistakes; add typical ones"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_test_cells_and_checks_map_one_to_one(assignment):
    """Test cell test_NAME calls exactly check.NAME, and every check has its test cell."""
    checks = checks_of(checks_module(assignment))
    seen = set()
    for notebook in course_dir.notebooks(assignment):
        nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
        for cell in nb.cells:
            if not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                continue
            name = grade_id(cell).removeprefix(GRADE_ID_PREFIX)
            assert name in checks, f"{grade_id(cell)} has no check {name} in {checks_module(assignment).__name__}"
            calls = [line for line in cell.source.splitlines()
                     if line.strip().startswith("check.") and not line.strip().startswith("check.when_graded(")]
            assert calls == [f"check.{name}({calls[0].split('(', 1)[1]}"] if calls else False, cell.source
            seen.add(name)
    for name, check in checks.items():
        assert check.name == name, f"the check bound to {name} calls itself {check.name}"
    assert set(checks) == seen, f"checks without a test cell: {sorted(set(checks) - seen)}"


def test_variant_names_are_unique():
    names = [(v.assignment, v.name) for v in variants()]
    assert len(names) == len(set(names))


def _solution_cells(assignment, notebook):
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    return {grade_id(c): c.source for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def test_an_edit_changes_the_solved_cell_and_one_that_no_longer_applies_is_an_error():
    solved = "def f(x):\n    y = x * 2\n    return y\n"
    assert edited(solved, (("x * 2", "x * 3"),), "times-three") == "def f(x):\n    y = x * 3\n    return y\n"
    with pytest.raises(ValueError, match="occurs 0 times"):
        edited(solved, (("x * 4", "x * 3"),), "stale")
    with pytest.raises(ValueError, match="occurs 2 times"):
        edited(solved, (("y", "z"),), "ambiguous")
