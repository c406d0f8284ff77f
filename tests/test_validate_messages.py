"""A failed test reads whole: nbgrader's Validate dialog shows the lines of the error output as they are, and
`nbgrader validate` indents each line and cuts it at Validator.width, so no line the course writes there is longer
than compare.WIDTH (83) characters. tests/test_browser.py measures the dialog itself."""

import nbformat
import pytest
import torch
from conftest import ASSIGNMENTS
from nbgrader.validator import Validator

from autograder import course_dir
from autograder.judging import Verdict, verdict_outputs
from autograder.notebooks import grade_id, hidden_tests_removed
from course.checks.compare import WIDTH, CheckFailed, fail

LONG = ("attention_weights(x) is not what was asked: these are the raw dot products of the inputs with each other, "
        "so the softmax is missing; apply it over the last dimension, the keys, so that every row sums to one.")


def _failure() -> CheckFailed:
    with pytest.raises(CheckFailed) as failure:
        fail(LONG, expected=torch.eye(3), actual=torch.ones(3, 3), case="x = [[1,0],[0,1],[1,1]]", mistake="no-softmax")
    return failure.value


def _lines(traceback: list[str]) -> list[str]:
    return "\n".join(traceback).splitlines()  # what IPython and nbgrader's validator show


def test_the_width_is_what_nbgrader_validate_shows_uncut():
    validator = Validator()
    assert WIDTH == validator.width - len("...") - len(validator.indent)
    assert validator._indent("x" * WIDTH) == validator.indent + "x" * WIDTH  # noqa: SLF001 - how validate prints
    assert validator._indent("x" * (WIDTH + 1)).endswith("...")  # noqa: SLF001


def test_a_failure_is_shown_in_lines_of_at_most_83_characters():
    lines = _lines(_failure()._render_traceback_())
    assert lines[0] == "CheckFailed:"
    assert max(len(line) for line in lines) <= WIDTH
    assert " ".join(" ".join(lines[1:]).split()).startswith(LONG)


def test_a_failure_with_a_note_added_is_wrapped_too():
    note = "Note: " + "the decoder block this model is built from fails its own test; fix that first. " * 3
    lines = _lines(CheckFailed(f"{_failure()}\n\n{note}", "no-softmax")._render_traceback_())
    assert max(len(line) for line in lines) <= WIDTH


def test_a_judged_test_cell_shows_the_failure_as_the_kernel_does():
    failure = _failure()
    [output] = verdict_outputs(Verdict(False, str(failure), failure.mistake), None)
    assert output.traceback == failure._render_traceback_()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_test_cells_a_student_sees_fit_in_the_dialog(assignment):
    """nbgrader's Validate dialog shows a failing test cell's source too: its visible lines fit in WIDTH."""
    for notebook in course_dir.notebooks(assignment):
        nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                long = [line for line in hidden_tests_removed(cell.source).splitlines() if len(line) > WIDTH]
                assert not long, f"{assignment} {grade_id(cell)}: {long}"
