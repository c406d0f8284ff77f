"""Real nbgrader grades real notebooks: full marks for solutions, zero for untouched releases, and every
catalogued mistake below full marks with its diagnosis in the feedback."""

import pytest

from autograder import course_dir
from autograder.catalogue import alternatives, mistakes

from conftest import ASSIGNMENTS, feedback_text


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


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_regrading_the_same_submission_gives_the_same_score(graded_batch, assignment):
    assert graded_batch["complete", assignment].score == graded_batch["complete-again", assignment].score


@pytest.mark.parametrize("variant", [v for v in mistakes() if v.assignment in ASSIGNMENTS], ids=lambda v: f"{v.assignment}:{v.name}")
def test_mistake_scores_below_full_marks_and_is_diagnosed(graded_batch, variant):
    row = graded_batch[variant.name, variant.assignment]
    assert row.status == "graded", row.message
    assert row.score < row.max_score, f"{variant.name} was not caught"
    feedback = feedback_text(graded_batch.out, variant.name, variant.assignment)
    assert variant.diagnosis in feedback, f"feedback of {variant.name} does not say {variant.diagnosis!r}"


@pytest.mark.parametrize("variant", [v for v in alternatives() if v.assignment in ASSIGNMENTS], ids=lambda v: f"{v.assignment}:{v.name}")
def test_correct_alternative_scores_full_marks(graded_batch, variant):
    row = graded_batch[variant.name, variant.assignment]
    assert row.status == "graded", row.message
    assert row.score == row.max_score, feedback_text(graded_batch.out, variant.name, variant.assignment)[-3000:]


def test_every_answer_cell_has_catalogued_mistakes():
    from conftest import source_answers

    for assignment in ASSIGNMENTS:
        for notebook in course_dir.notebooks(assignment):
            for cell in source_answers(assignment, notebook):
                found = [v for v in mistakes(assignment) if v.cell == cell]
                assert len(found) >= 2, f"{assignment}/{cell} has {len(found)} catalogued mistakes; add typical ones"


def test_grades_csv_has_a_row_per_student_and_assignment(graded_batch):
    import csv

    with (graded_batch.out / "grades.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["student", "assignment", "score", "max_score", "status", "message"]
    students = {r["student"] for r in rows}
    assert len(rows) == len(students) * len(ASSIGNMENTS)
    # students who submitted only one assignment get a 'missing' row for the others
    if len(ASSIGNMENTS) < 2:
        pytest.skip("the batch holds one assignment only (COURSE_TEST_ASSIGNMENTS)")
    variant = next(v for v in mistakes() if v.assignment in ASSIGNMENTS)
    name, other = variant.name, next(a for a in ASSIGNMENTS if a != variant.assignment)
    assert {(r["student"], r["assignment"]): r["status"] for r in rows}[name, other] == "missing"
