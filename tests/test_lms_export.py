"""A learning-management system's flat zip export: student ids and attempts come from the file names."""

import zipfile

import nbformat
import pytest
from conftest import complete_submission, release_notebook, use_sandbox

from autograder import GradingError
from autograder.grade import grade

A, NB = "01_self_attention", "self_attention.ipynb"


def test_lms_zip_is_laid_out_by_student_and_the_latest_attempt_counts(tmp_path):
    archive = tmp_path / "gradebook_export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"Transformers A1_ada_attempt_2026-11-02-10-00-00_{NB}", nbformat.writes(release_notebook(A, NB)))
        z.writestr(f"Transformers A1_ada_attempt_2026-11-03-09-30-00_{NB}", nbformat.writes(complete_submission(A, NB)))
        z.writestr(f"Transformers A1_grace_attempt_2026-11-02-11-00-00_{NB}", nbformat.writes(release_notebook(A, NB)))
        z.writestr("Transformers A1_grace_attempt_2026-11-02-11-00-00.txt", "a comment box, not a submission")
    rows = {g.student: g for g in grade(archive, tmp_path / "out", [A], sandbox=use_sandbox(), progress=False)}
    assert set(rows) == {"ada", "grace"}
    assert (rows["ada"].score, rows["ada"].status) == (8, "graded"), "the latest attempt was not the one graded"
    assert (rows["grace"].score, rows["grace"].status) == (0, "graded")


def test_lms_zip_needs_its_assignment_named(tmp_path):
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr(f"A1_ada_attempt_2026-11-03-09-30-00_{NB}", nbformat.writes(complete_submission(A, NB)))
    with pytest.raises(GradingError, match="--assignment"):
        grade(archive, tmp_path / "out", None, progress=False)


def test_a_crafted_file_name_cannot_replace_another_students_submission(tmp_path):
    """bob uploads a file whose own name carries alice's id and a later attempt: read at the first attempt marker,
    as the LMS wrote it, it is bob's, and since it reads two ways it is refused for bob; alice keeps her grade."""
    archive = tmp_path / "gradebook_export.zip"
    crafted = f"Transformers A1_bob_attempt_2026-11-03-10-00-00_x_alice_attempt_2099-01-01-00-00-00_{NB}"
    with zipfile.ZipFile(archive, "w") as z:
        alice = f"Transformers A1_alice_attempt_2026-11-02-10-00-00_{NB}"
        z.writestr(alice, nbformat.writes(complete_submission(A, NB)))
        z.writestr(crafted, nbformat.writes(release_notebook(A, NB)))
    rows = {g.student: g for g in grade(archive, tmp_path / "out", [A], sandbox=use_sandbox(), progress=False)}
    assert set(rows) == {"alice", "bob"}
    assert (rows["alice"].score, rows["alice"].status) == (8, "graded"), "bob's file replaced alice's submission"
    assert "refused" not in rows["alice"].message
    assert rows["bob"].status == "missing-notebook" and rows["bob"].score == 0
    assert "refused the file" in rows["bob"].message and "alice" in rows["bob"].message
