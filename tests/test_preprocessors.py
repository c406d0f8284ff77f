"""The course's grading steps, each an nbgrader preprocessor, run alone on in-memory notebooks (as nbgrader's own
tests do): what each one changes, and what it leaves exactly as it was."""

import copy
import os

import nbformat
import pytest
from conftest import ROOT, release_notebook
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

from autograder.cells import RestoreCells
from autograder.execute import STUB, GradingExecute
from autograder.feedback import HIDDEN_NOTE, HideHiddenTests
from autograder.judging import ClearEvidence, JudgeEvidence
from autograder.notebooks import grade_id, grading_notes
from autograder.tamper import FlagTampering
from course.checks.evidence import FOLDER

A, NB = "01_self_attention", "self_attention"


def _resources(path=None) -> dict:
    resources = {"nbgrader": {"assignment": A, "notebook": NB, "student": "alice"}}
    if path is not None:
        resources["metadata"] = {"path": str(path)}
    return resources


def _course_config() -> Config:
    config = Config()
    config.CourseDirectory.root = str(ROOT)
    return config


def _tests(nb):
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


# ------------------------------------------------------------------------------------------------ RestoreCells

def test_restore_cells_puts_deleted_cells_back_in_source_order_and_resets_metadata():
    release = release_notebook(A, f"{NB}.ipynb")
    nb = copy.deepcopy(release)
    deleted = [grade_id(c) for c in _tests(nb)[:2]] + ["demo_02"]
    nb.cells = [c for c in nb.cells if grade_id(c) not in deleted]
    first_test = _tests(nb)[0]
    first_test.metadata["nbgrader"]["points"] = 100
    invented = new_code_cell("pass", metadata={"nbgrader": {"grade": True, "grade_id": "my_own_test", "points": 5,
                                                             "locked": False, "solution": False}})
    nb.cells.append(invented)
    nb, _ = RestoreCells(config=_course_config()).preprocess(nb, _resources())
    order = [grade_id(c) for c in nb.cells if grade_id(c)]
    assert order == [grade_id(c) for c in release.cells if grade_id(c)]
    assert _tests(nb)[2].metadata["nbgrader"]["points"] != 100
    assert "nbgrader" not in nb.cells[-1].metadata, "an invented test id stays an ordinary cell"
    assert any("put back 3 deleted cell(s)" in note for note in grading_notes(nb)["notes"])


def test_restore_cells_leaves_a_complete_submission_as_it_is():
    nb = release_notebook(A, f"{NB}.ipynb")
    sources = [c.source for c in nb.cells]
    nb, _ = RestoreCells(config=_course_config()).preprocess(nb, _resources())
    assert [c.source for c in nb.cells] == sources
    assert not grading_notes(nb)


# ------------------------------------------------------------------------------------------------ FlagTampering

def test_flag_tampering_notes_the_students_lines_and_changes_nothing():
    nb = release_notebook(A, f"{NB}.ipynb")
    answer = next(c for c in nb.cells if grade_id(c) == "attention_weights")
    answer.source = "# my comment stays\nimport sys\ndef attention_weights(x):\n    return x\n"
    locked = _tests(nb)[0]
    locked.source = "setattr(check, 'x', 1)"  # nbgrader restores locked cells: not the student's to answer for
    before = [c.source for c in nb.cells]
    nb, _ = FlagTampering(config=_course_config()).preprocess(nb, _resources())
    assert [c.source for c in nb.cells] == before
    assert grading_notes(nb)["flags"] == [f"{NB}.ipynb cell attention_weights line 2 imports sys"]


# ------------------------------------------------------------------------------------------------ GradingExecute

def test_a_cell_that_kills_the_kernel_is_stopped_and_the_rest_still_runs(tmp_path):
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_code_cell("import os\nos._exit(1)"),
                             new_code_cell("print(x + 1)")])
    (tmp_path / FOLDER).mkdir()
    (tmp_path / FOLDER / "stale").write_text("from the run that died")
    nb, _ = GradingExecute(config=Config(), timeout=60).preprocess(nb, _resources(tmp_path))
    assert nb.cells[1].source == STUB
    assert nb.cells[1].outputs[0].ename == "RuntimeError"
    assert nb.cells[2].outputs[0].text == "2\n"
    assert grading_notes(nb)["stopped"] == [f"{NB}.ipynb cell 1"]


def test_output_past_the_limit_is_dropped_with_one_note(tmp_path):
    nb = new_notebook(cells=[new_code_cell("print('x' * 3000)"), new_code_cell("print('y' * 3000)")])
    nb, _ = GradingExecute(config=Config(), timeout=60, output_limit_bytes=4000).preprocess(nb, _resources(tmp_path))
    texts = [o.text for c in nb.cells for o in c.outputs]
    assert texts[0].startswith("x" * 3000)
    assert "output limit" in texts[1] and "y" * 100 not in texts[1]


# ------------------------------------------------------------------------------------------------ judging

def test_judge_evidence_replaces_what_the_kernel_said_with_the_verdict(tmp_path):
    nb = release_notebook(A, f"{NB}.ipynb")
    test = _tests(nb)[0]
    test.outputs = [nbformat.v4.new_output("stream", name="stdout", text="All good!\n")]
    os.makedirs(tmp_path / FOLDER)
    nb, _ = ClearEvidence().preprocess(nb, _resources(tmp_path))
    assert not (tmp_path / FOLDER).exists()
    nb, _ = JudgeEvidence().preprocess(nb, _resources(tmp_path))
    assert test.outputs[0].output_type == "error"
    assert "no evidence was recorded" in test.outputs[0].evalue
    assert test.metadata["judge"] == {"passed": False, "mistake": "bad-evidence"}


# ------------------------------------------------------------------------------------------------ feedback

def test_hide_hidden_tests_keeps_results_and_drops_code():
    source = nbformat.read(ROOT / "source" / A / f"{NB}.ipynb", as_version=4)
    hidden = next(c for c in source.cells if "BEGIN HIDDEN TESTS" in c.source)
    block = hidden.source.split("### BEGIN HIDDEN TESTS", 1)[1]
    secret = next(line.strip() for line in block.splitlines() if line.strip().startswith("check."))
    hidden.outputs = [nbformat.v4.new_output("stream", name="stdout", text="Passed.\n")]
    leak = new_code_cell("print(In)", outputs=[nbformat.v4.new_output("stream", name="stdout", text=secret)])
    nb = new_notebook(cells=[hidden, leak])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert HIDDEN_NOTE in nb.cells[0].source and secret not in nb.cells[0].source
    assert nb.cells[0].outputs[0].text == "Passed.\n"
    assert secret not in nb.cells[1].outputs[0].text


@pytest.mark.parametrize("step", [RestoreCells, FlagTampering, GradingExecute, ClearEvidence, JudgeEvidence,
                                  HideHiddenTests])
def test_every_step_is_named_in_the_course_configuration(step):
    config = (ROOT / "nbgrader_config.py").read_text()
    assert f"{step.__module__}.{step.__name__}" in config
