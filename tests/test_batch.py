"""A generated class: every student submits every assignment, graded with two workers; every grade must equal
the grade the same submission got alone in the catalogue batch."""

import pytest

from autograder import course_dir
from autograder.catalogue import alternatives, mistakes
from autograder.grade import grade

from conftest import ASSIGNMENTS, complete_submission, release_notebook, use_sandbox, variant_submission, write_submission

STUDENTS = 8


def _choice(assignment: str, student: int) -> str:
    names = ["complete", "untouched"] + [v.name for v in mistakes(assignment) + alternatives(assignment)]
    return names[(student * 3 + len(assignment)) % len(names)]


def test_a_generated_class_is_graded_exactly_as_each_submission_alone(graded_batch, tmp_path):
    variants = {v.name: v for v in mistakes() + alternatives()}
    batch = tmp_path / "class"
    chosen = {}
    for student in range(STUDENTS):
        for assignment in ASSIGNMENTS:
            name = _choice(assignment, student)
            chosen[f"gen-{student:02d}", assignment] = name
            for notebook in course_dir.notebooks(assignment):
                if name == "complete":
                    nb = complete_submission(assignment, notebook)
                elif name == "untouched":
                    nb = release_notebook(assignment, notebook)
                else:
                    notebook, nb = variant_submission(variants[name])
                write_submission(batch, f"gen-{student:02d}", assignment, notebook, nb)
    if len(chosen) < 50 and len(ASSIGNMENTS) == len(course_dir.assignments()):
        pytest.fail(f"only {len(chosen)} generated submissions; the class should have at least 50")
    rows = grade(batch, tmp_path / "out", ASSIGNMENTS, workers=2, sandbox=use_sandbox(), progress=False)
    assert len(rows) == len(chosen)
    wrong = []
    for row in rows:
        expected = graded_batch[chosen[row.student, row.assignment], row.assignment]
        if (row.score, row.max_score, row.status) != (expected.score, expected.max_score, expected.status):
            wrong.append(f"{row.student}/{row.assignment} ({chosen[row.student, row.assignment]}): "
                         f"{row.score}/{row.max_score} {row.status}, alone {expected.score}/{expected.max_score} {expected.status}")
    assert not wrong, "\n".join(wrong)
