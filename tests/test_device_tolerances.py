"""Tolerances per device live in one table, course/device.py's TOLERANCES, and every comparison of a result computed
on a student's device reads it; and the device a notebook runs on is chosen, and announced, as course/device.py's
docstring decides (COURSE_DEVICE, else CUDA, else the CPU: Apple's MPS only when named)."""

import ast
import json
import re
from pathlib import Path

import pytest
import torch

from course import device as course_device
from course.checks import compare

ROOT = Path(__file__).resolve().parent.parent
DEVICE_NAMES = {"cpu", "cuda", "mps"}


def test_the_table_names_each_device_with_a_tolerance_no_tighter_than_the_cpus():
    rows = course_device.TOLERANCES
    assert set(rows) == DEVICE_NAMES
    for name, row in rows.items():
        assert set(row) == {"rtol", "atol", "update"}, name
        for key, value in row.items():
            assert 0 < value < 0.1, f"{name} {key}={value}: a tolerance, not a typo"
            assert value >= rows["cpu"][key], f"{name} is stricter than the CPU on {key}"


def test_a_device_reads_its_own_row_and_an_unnamed_gpu_the_loosest():
    assert course_device.tolerance("cpu") == {"rtol": 1e-4, "atol": 1e-5}
    assert course_device.tolerance(torch.device("cuda", 1)) == {"rtol": 2e-3, "atol": 2e-4}
    assert course_device.device_row("meta") == course_device.TOLERANCES["cuda"]


def test_the_checks_compare_with_the_tables_tolerance():
    for name in DEVICE_NAMES:
        assert compare.tolerance(name) == course_device.tolerance(name)
    # a check's own looser tolerance wins only where it is looser
    assert compare.tolerance("cpu", {"atol": 1e-3, "rtol": 1e-6}) == {"rtol": 1e-4, "atol": 1e-3}


def _device_branches_with_small_numbers(tree: ast.AST) -> list[int]:
    """Lines of `if` statements and conditional expressions that test a device's name and choose a number below 1
    (a tolerance written out beside a device, as `1e-3 if device == "cpu" else 1e-2` was)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If | ast.IfExp):
            continue
        tested = {c.value for c in ast.walk(node.test) if isinstance(c, ast.Constant)}
        branches = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [*node.body, *node.orelse]
        numbers = [c.value for b in branches for c in ast.walk(b) if isinstance(c, ast.Constant)
                   and isinstance(c.value, float) and 0 < c.value < 1]
        if tested & DEVICE_NAMES and numbers:
            lines.append(node.lineno)
    return lines


def test_no_module_of_the_course_writes_a_device_tolerance_outside_the_table():
    found = {}
    for path in sorted((ROOT / "course").rglob("*.py")):
        if path.name == "device.py" and path.parent.name == "course":
            continue
        lines = _device_branches_with_small_numbers(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"tolerances chosen by device outside course/device.py's TOLERANCES: {found}"


def test_the_rule_above_sees_a_tolerance_chosen_by_device():
    assert _device_branches_with_small_numbers(ast.parse('rtol = 1e-3 if device == "cpu" else 1e-2')) == [1]
    assert not _device_branches_with_small_numbers(ast.parse('rtol = tolerance(device)["rtol"]'))


def test_no_notebook_compares_tensors_on_the_device_with_a_tolerance_of_its_own():
    """A demo cell that puts tensors on `device` and compares them with a literal atol/rtol would hold on the
    author's CPU and fail on a student's GPU: it passes **tolerance(device) instead. (Cells on CPU tensors keep
    their literal tolerances: they say what the text claims, on the one device they run on.)"""
    literal = re.compile(r"(allclose|isclose)\([^\n]*\b(atol|rtol)=\d")
    found = []
    for path in sorted((ROOT / "source").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            code = "".join(cell["source"])
            if cell["cell_type"] == "code" and "device" in code and literal.search(code):
                found.append(f"{path.parent.name} {cell.get('id')}")
    assert not found, f"cells comparing device tensors with a literal tolerance: {found}"


@pytest.mark.parametrize(("env", "cuda", "mps", "expected", "why"), [
    ("", False, False, "cpu", "no CUDA GPU found"),
    ("", True, True, "cuda", "PyTorch sees a CUDA GPU"),
    ("", False, True, "cpu", "COURSE_DEVICE=mps"),  # decided: an Apple GPU only when asked for
    ("cpu", True, True, "cpu", "COURSE_DEVICE=cpu"),
    ("mps", False, True, "mps", "COURSE_DEVICE=mps"),
])
def test_the_device_is_chosen_and_announced_with_its_reason(monkeypatch, capsys, env, cuda, mps, expected, why):
    monkeypatch.setenv("COURSE_DEVICE", env)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert course_device.get_device().type == expected
    assert course_device.announce_device().type == expected
    line = capsys.readouterr().out
    assert f"running on {expected} (" in line and why in line, line


def test_a_named_device_the_machine_lacks_is_refused(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="Apple MPS is not available"):
        course_device.get_device()
