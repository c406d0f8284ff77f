"""The course's reference parts pass every check of their assignment, and a few properties of the checks."""

import importlib
import pkgutil
import warnings

import nbformat
import pytest
import torch
from conftest import ASSIGNMENTS
from replay import grade

import course.checks
from autograder import course_dir
from autograder.notebooks import answer_cells, grade_id
from autograder.tamper import CHECKS_NAME
from catalogue import defined_name
from course.device import get_device

NOTEBOOKS = [(a, n) for a in ASSIGNMENTS for n in course_dir.notebooks(a)]


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_reference_module_scores_full_marks_without_warnings(assignment, notebook):
    """course/<name>.py holds the answers of assignment NN_<name>; graded in place of the answers, full marks."""
    module = course_dir.module_name(assignment)
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    answers = {cell: f"from course.{module} import {defined_name(code)}\n" for cell, code in answer_cells(nb).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning in a test cell scores it 0
        result = grade(assignment, answers, notebook=notebook)
    assert result.score == result.max_score, result.failures()


def test_device_can_be_forced_by_environment(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        monkeypatch.setenv("COURSE_DEVICE", "cuda")
        with pytest.raises(RuntimeError, match="no CUDA device"):
            get_device()


def test_check_modules_hold_no_mutable_state():
    """A student's cell could empty a list of test shapes with a method call; constants must be immutable."""
    for info in pkgutil.iter_modules(course.checks.__path__):
        module = importlib.import_module(f"course.checks.{info.name}")
        for name, value in vars(module).items():
            if not name.startswith("_") and isinstance(value, (list, dict, set, bytearray)):
                raise AssertionError(f"course.checks.{info.name}.{name} is a mutable {type(value).__name__}: "
                                     "use a tuple or a mapping proxy")


def test_every_setup_cell_binds_its_checks_to_the_name_the_tamper_flags_watch():
    """tamper.CHECKS_NAME is the name student code has no reason to touch; every notebook binds its checks to it."""
    for assignment in course_dir.assignments():
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            setup = next(c for c in nb.cells if grade_id(c) == "setup")
            module = course_dir.module_name(assignment)
            assert f"from course.checks import {module} as {CHECKS_NAME}" in setup.source, assignment
