"""The instructor's record is never lost as a side effect: a batch with no submission at all is refused with what was
expected and what was found, and writes nothing. (Grading into a folder that holds earlier results keeps them:
test_hostile.py regrades part of its class into a copy of its results, then prunes them explicitly.)"""

import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, complete_submission

from autograder import GradingError
from autograder.grade import grade

A, NB = "01_self_attention", "self_attention.ipynb"


def _snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _results(folder: Path) -> Path:
    """An output folder holding a class's results, as an earlier run leaves it."""
    (folder / "feedback" / "ada" / A).mkdir(parents=True)
    (folder / "feedback" / "ada" / A / "self_attention.html").write_text("<p>ada's feedback</p>")
    (folder / "grades.csv").write_text("student,assignment,score,max_score,status,message\nada,01_self_attention,8,8,"
                                       "graded,\n")
    (folder / "report.md").write_text("# report\n")
    return folder


def _canvas_export(batch: Path) -> None:
    """A flat folder of notebooks named as Canvas names them (not the default LMS convention)."""
    batch.mkdir()
    for student in ("ada", "bob"):
        nbformat.write(complete_submission(A, NB), batch / f"{student}_12345_67890_{NB}")


def _no_assignment_folder(batch: Path) -> None:
    """student/notebook.ipynb: the assignment folder left out."""
    for student in ("ada", "bob"):
        (batch / student).mkdir(parents=True)
        nbformat.write(complete_submission(A, NB), batch / student / NB)


@pytest.mark.parametrize("layout", [_canvas_export, _no_assignment_folder], ids=["canvas-export", "no-assignment"])
def test_a_batch_with_no_submission_writes_nothing_and_says_what_it_expected(tmp_path, layout):
    out = _results(tmp_path / "out")
    before = _snapshot(out)
    layout(tmp_path / "batch")
    with pytest.raises(GradingError) as refused:
        grade(tmp_path / "batch", out, [A], progress=False)
    message = str(refused.value)
    assert "found no submission" in message and "<student>/<assignment>/<notebook>.ipynb" in message
    assert "ada" in message and "Nothing was written" in message, message  # what it found, by name
    assert _snapshot(out) == before, "a refused batch changed the results folder"


def test_the_command_exits_non_zero_on_an_empty_batch(tmp_path):
    _no_assignment_folder(tmp_path / "batch")
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(tmp_path / "batch"), "--out",
                           str(tmp_path / "out"), "--assignment", A, "--no-sandbox"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0
    assert "found no submission" in done.stderr and "inside the folders: ada/self_attention.ipynb" in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_error_row_points_to_a_saved_log_with_the_whole_traceback(tmp_path, monkeypatch):
    from autograder import grade as grading  # noqa: PLC0415 - patched here only
    from autograder.workspace import failure  # noqa: PLC0415

    def broken(job):
        raise RuntimeError(f"the grader tripped over {job.student}'s notebook")

    def workers_that_fail(jobs, options, workers, scratch):
        """What the pool yields when grading a job raised in its worker (_serve sends failure(error))."""
        for item in jobs:
            try:
                broken(item)
            except RuntimeError as error:
                yield item, None, failure(error)

    monkeypatch.setattr(grading, "_locally", workers_that_fail)
    (tmp_path / "batch" / "alice" / A).mkdir(parents=True)
    nbformat.write(complete_submission(A, NB), tmp_path / "batch" / "alice" / A / NB)
    [row] = grade(tmp_path / "batch", tmp_path / "out", [A], progress=False)
    assert row.status == "error" and "tripped over alice's notebook" in row.message
    assert row.message.endswith(f"(the whole log: logs/alice/{A}.log)"), row.message
    log = (tmp_path / "out" / "logs" / "alice" / f"{A}.log").read_text()
    assert "Traceback (most recent call last)" in log and "def broken" not in log and "in broken" in log
