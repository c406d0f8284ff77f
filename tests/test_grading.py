"""Real nbgrader, in the sandbox, grades a representative slice: full marks for solutions, zero for untouched
releases, catalogued mistakes below full marks and named — and every grade equals the in-process replay of the same
submission with the same secret grading seed, so the catalogue replays in test_catalogue.py (which also replay every
variant under grading seeds) stand for real grading. (That the same batch graded again
gives identical rows is shown by test_gradebook.py, which grades one class three times.)"""

import csv

import pytest
from conftest import ASSIGNMENTS, end_to_end_variants, feedback_text
from replay import grade as replay

SLICE = [(a, v) for a in ASSIGNMENTS for v in end_to_end_variants(a)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solved_notebook_scores_full_marks(graded_batch, assignment):
    row = graded_batch["complete", assignment]
    assert row.status == "graded", row.message
    assert row.max_score > 0
    assert row.score == row.max_score, feedback_text(graded_batch.out, "complete", assignment)[-3000:]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_scores_zero(graded_batch, assignment):
    row = graded_batch["untouched", assignment]
    assert row.status == "graded", row.message
    assert row.score == 0
    assert "not implemented yet" in feedback_text(graded_batch.out, "untouched", assignment)


@pytest.mark.parametrize("assignment,variant", SLICE, ids=[f"{a}:{v.name}" for a, v in SLICE])
def test_variant_graded_end_to_end_as_in_process(graded_batch, assignment, variant):
    row = graded_batch[variant.name, assignment]
    assert row.status == "graded", row.message
    assert row.seed is not None, "graded without a secret seed"
    alone = replay(assignment, {variant.cell: variant.code}, seed=row.seed)  # the inputs the grader's kernel drew
    assert (row.score, row.max_score) == (alone.score, alone.max_score), alone.failures()
    if variant.is_mistake:
        assert row.score < row.max_score, f"{variant.name} was not caught"
        assert variant.mistake in {m for _, m in row.mistakes}, \
            f"{variant.name}: the judge did not name {variant.mistake}"
        failing = [gid for gid, v in alone.verdicts.items() if not v.passed]
        assert all(row.cells[gid][0] == 0 for gid in failing)
    else:
        assert row.score == row.max_score, feedback_text(graded_batch.out, variant.name, assignment)[-3000:]


def test_grades_csv_has_a_row_per_student_and_assignment(graded_batch):
    with (graded_batch.out / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["student", "assignment", "score", "max_score", "status", "late", "message"]
    students = {r["student"] for r in rows}
    assert len(rows) == len(students) * len(ASSIGNMENTS)
    if len(ASSIGNMENTS) < 2:
        pytest.skip("the batch holds one assignment only (COURSE_TEST_ASSIGNMENTS)")
    name, own = SLICE[0][1].name, SLICE[0][0]  # a variant submits only its own assignment
    other = next(a for a in ASSIGNMENTS if a != own)
    assert {(r["student"], r["assignment"]): r["status"] for r in rows}[name, other] == "missing"
