"""release/, samples/ and solutions/ are exactly what the build makes of source/, and every notebook runs."""

import json
import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import build, course_dir
from autograder.notebooks import solution_skeleton

ROOT = course_dir.ROOT
NOTEBOOKS = [(a, n) for a in course_dir.assignments() for n in course_dir.notebooks(a)]


def test_committed_release_samples_and_solutions_match_the_build():
    drift = build.build(check=True)
    assert not drift, "run `python -m autograder build` and commit:\n" + "\n".join(drift)


def test_drift_is_detected(tmp_path):
    copy = tmp_path / "course"
    for name in ("source", "release", "samples", "solutions"):
        (copy / name).mkdir(parents=True)
        os.system(f"cp -r {ROOT / name}/. {copy / name}")
    (copy / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    assignment, notebook = NOTEBOOKS[0]
    nb = nbformat.read(copy / "source" / assignment / notebook, as_version=4)
    nb.cells[0].source += "\n\nAn edit that nobody rebuilt."
    nbformat.write(nb, copy / "source" / assignment / notebook)
    drift = build.build(root=copy, check=True, only=[assignment])
    assert f"release/{assignment}/{notebook} differs from what the build makes" in drift
    assert any("built from another version of its source" in line for line in drift)


@pytest.mark.parametrize("folder", ["source", "release"])
def test_notebooks_carry_no_outputs(folder):
    notebooks = sorted((ROOT / folder).rglob("*.ipynb"))
    assert notebooks, f"no notebooks in {folder}/"
    for path in notebooks:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, f"{path} carries outputs"


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_solutions_are_executed_with_figures_and_without_errors(assignment, notebook):
    nb = nbformat.read(ROOT / "solutions" / assignment / notebook, as_version=4)
    assert not build.executed_problems(nb)
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert images, "a solution notebook without a single figure"
    text = json.dumps(nb)
    for marker in ("BEGIN SOLUTION", "HIDDEN TESTS", "NotImplementedError"):
        assert marker not in text, f"solutions/{assignment}/{notebook} contains {marker}"


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_solution_notebook_runs_top_to_bottom_on_cpu(assignment, notebook, monkeypatch):
    """Every cell of the solution still runs with today's course package. Training is cut short, as under
    nbgrader (NBGRADER_EXECUTION); the build runs it in full, and claims about the trained model are asserted there."""
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    source = nbformat.read(ROOT / "source" / assignment / notebook, as_version=4)
    nb = solution_skeleton(source, assignment, notebook)
    with tempfile.TemporaryDirectory() as tmp:
        build.execute(nb, Path(tmp))
    assert not build.executed_problems(nb)
    assert "running on cpu" in "".join(o.get("text", "") for o in nb.cells[2].outputs)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_every_notebook_opens_with_objectives_and_time_and_ends_with_questions(assignment, notebook):
    nb = nbformat.read(ROOT / "source" / assignment / notebook, as_version=4)
    first, last = nb.cells[0].source, nb.cells[-1].source
    assert "You will learn" in first and "Time:" in first
    assert "Summary" in last and "Questions" in last
