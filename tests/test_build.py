"""release/, samples/ and solutions/ are exactly what the build makes of source/, every notebook runs, and a build
with nothing changed changes nothing."""

import json
import shutil
import subprocess
import tempfile
from itertools import pairwise
from pathlib import Path

import nbformat
import pytest

from autograder import build, course_dir
from autograder.notebooks import GENERATED_KEY, SOLUTION_NOTICE, solution_skeleton

ROOT = course_dir.ROOT
NOTEBOOKS = [(a, n) for a in course_dir.assignments() for n in course_dir.notebooks(a)]


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def course_copy(tmp_path) -> Path:
    """Everything the build reads and writes, copied as it is here into a git repository of its own."""
    copy = tmp_path / "course"
    for name in ("source", "release", "samples", "solutions", "course"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("nbgrader_config.py", "requirements.txt"):
        shutil.copy(ROOT / name, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "as here")
    return copy


def _built_files(root: Path) -> dict[Path, int]:
    """Every file of release/, solutions/ and samples/ -> its modification time (ns)."""
    return {p: p.stat().st_mtime_ns for name in ("release", "solutions", "samples")
            for p in (root / name).rglob("*") if p.is_file()}


def _must_not_execute(nb, cwd, timeout=600):
    raise AssertionError(f"the build executed {nb.metadata.get('generated_from')} although its inputs did not change")


def _fake_execute(executed: list[str]):
    """An execute that records which notebook it was given and marks every code cell run, without a kernel."""
    def execute(nb, cwd, timeout=600):
        executed.append(nb.metadata["generated_from"])
        for count, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
            cell.execution_count = count
        return nb
    return execute


def _edit_first_code_cell(path: Path, line: str) -> None:
    nb = nbformat.read(path, as_version=4)
    next(c for c in nb.cells if c.cell_type == "code").source += f"\n{line}"
    nbformat.write(nb, path)


def test_committed_release_samples_and_solutions_match_the_build():
    drift = build.build(check=True)
    assert not drift, "run `python -m autograder build` and commit:\n" + "\n".join(drift)


def test_a_build_with_nothing_changed_writes_nothing_and_says_so(course_copy, monkeypatch, capsys):
    monkeypatch.setattr(build, "execute", _must_not_execute)
    before = _built_files(course_copy)
    assert build.main(root=course_copy) == 0
    out = capsys.readouterr().out
    assert "built release/, samples/ and solutions/: 0 files changed" in out, out
    assert _git(course_copy, "status", "--porcelain") == "", "the build changed committed files"
    assert _built_files(course_copy) == before, "the build rewrote files with the content they already had"


def test_the_summary_counts_and_names_each_file_the_build_wrote(course_copy, capsys):
    assignment, notebook = NOTEBOOKS[0]
    (course_copy / "release" / assignment / notebook).write_text("edited by hand")
    (course_copy / "samples" / "sample-complete" / assignment / notebook).unlink()
    (course_copy / "release" / assignment / "stale.txt").write_text("left from an earlier build")
    assert build.main(root=course_copy, solutions=False, only=[assignment]) == 0
    out = capsys.readouterr().out
    assert "built release/ and samples/ (solutions/ skipped): 3 files changed" in out, out
    for line in (f"release/{assignment}/{notebook} written", f"release/{assignment}/stale.txt removed",
                 f"samples/sample-complete/{assignment}/{notebook} written"):
        assert f"  {line}\n" in out, out
    assert _git(course_copy, "status", "--porcelain") == "", "the build did not restore what was committed"


def test_an_edited_source_notebook_is_executed_again_and_no_other(course_copy, monkeypatch):
    (edited, notebook), (other, other_notebook) = NOTEBOOKS[:2]
    _edit_first_code_cell(course_copy / "source" / edited / notebook, "# an edit nobody has executed")
    drift = build.build(root=course_copy, check=True, only=[edited, other])
    assert f"solutions/{edited}/{notebook}: built from another version of its source" in drift
    assert not [line for line in drift if line.startswith(f"solutions/{other}/")], drift

    executed: list[str] = []
    monkeypatch.setattr(build, "execute", _fake_execute(executed))
    changes = build.build(root=course_copy, only=[edited, other])
    assert executed == [f"source/{edited}/{notebook}"], "only the edited notebook must be executed again"
    written = f"solutions/{edited}/{notebook} written (executed again: built from another version of its source)"
    assert written in changes, changes
    solution = nbformat.read(course_copy / "solutions" / edited / notebook, as_version=4)
    assert solution.metadata[build.INPUTS_KEY] == build.solution_inputs(course_copy, edited, notebook)
    assert build.build(root=course_copy, check=True, only=[edited, other]) == []


def test_a_changed_course_module_makes_solutions_stale_though_their_cells_match(course_copy):
    assignment, notebook = NOTEBOOKS[0]
    with (course_copy / "course" / "plotting.py").open("a") as f:
        f.write("\n# an edit of the course package\n")
    drift = build.build(root=course_copy, check=True, only=[assignment])
    assert drift == [f"solutions/{assignment}/{notebook}: executed with other inputs "
                     "(course/, the kernel's pins or SOLUTION_RECIPE changed since)"], drift


def test_the_inputs_hash_covers_what_execution_reads_and_not_hidden_tests_or_graders_pins(course_copy):
    assignment, notebook = NOTEBOOKS[0]
    source = course_copy / "source" / assignment / notebook
    original = build.solution_inputs(course_copy, assignment, notebook)
    assert original == build.solution_inputs(ROOT, assignment, notebook), "the hash must not depend on the folder"

    text = source.read_text()
    nb = nbformat.read(source, as_version=4)
    hidden = next(c for c in nb.cells if "### END HIDDEN TESTS" in c.source)
    hidden.source = hidden.source.replace("### END HIDDEN TESTS", "assert True\n### END HIDDEN TESTS")
    nbformat.write(nb, source)
    assert build.solution_inputs(course_copy, assignment, notebook) == original, "a hidden test is not executed"
    source.write_text(text)

    _edit_first_code_cell(source, "# changed")
    assert build.solution_inputs(course_copy, assignment, notebook) != original, "the source notebook is an input"
    source.write_text(text)
    compare = course_copy / "course" / "checks" / "compare.py"
    compare.write_text(compare.read_text() + "\n# changed\n")
    assert build.solution_inputs(course_copy, assignment, notebook) != original, "course/ is an input"
    shutil.copy(ROOT / "course" / "checks" / "compare.py", compare)

    requirements = course_copy / "requirements.txt"
    pins = requirements.read_text()
    requirements.write_text(pins + "some-graders-tool==1.0\n")
    assert build.solution_inputs(course_copy, assignment, notebook) == original, "a pin the kernel never loads"
    for pinned in ("torch", "pillow"):  # what the notebooks import, and what matplotlib writes its PNGs with
        line = next(line for line in pins.splitlines() if line.startswith(f"{pinned}=="))
        requirements.write_text(pins.replace(line, f"{pinned}==0.0.1"))
        assert build.solution_inputs(course_copy, assignment, notebook) != original, f"the {pinned} pin is an input"
    requirements.write_text(pins)
    assert build.solution_inputs(course_copy, assignment, notebook) == original


def test_drift_is_detected(course_copy):
    assignment, notebook = NOTEBOOKS[0]
    nb = nbformat.read(course_copy / "source" / assignment / notebook, as_version=4)
    nb.cells[0].source += "\n\nAn edit that nobody rebuilt."
    nbformat.write(nb, course_copy / "source" / assignment / notebook)
    drift = build.build(root=course_copy, check=True, only=[assignment])
    assert f"release/{assignment}/{notebook} differs from what the build makes" in drift
    assert f"solutions/{assignment}/{notebook}: built from another version of its source" in drift


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_solutions_carry_their_inputs_hash_and_nothing_that_changes_from_run_to_run(assignment, notebook):
    nb = nbformat.read(ROOT / "solutions" / assignment / notebook, as_version=4)
    assert len(nb.metadata.get(build.INPUTS_KEY, "")) == 64, "built before the build recorded its inputs"
    assert "widgets" not in nb.metadata, "saved widget state (random ids, elapsed times)"
    for i, cell in enumerate(nb.cells):
        assert "execution" not in cell.metadata, f"cell {i} carries execution timestamps"
        outputs = cell.get("outputs", [])
        assert not [o for o in outputs if build.WIDGET_VIEW in o.get("data", {})], f"cell {i} shows a widget"
        streams = [o.get("name") if o.output_type == "stream" else None for o in outputs]
        assert not [a for a, b in pairwise(streams) if a and a == b], f"cell {i}: a stream split in two"


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
    first_code = next(cell for cell in nb.cells if cell.cell_type == "code")
    assert "running on cpu" in "".join(o.get("text", "") for o in first_code.outputs)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_solutions_say_they_are_generated_in_metadata_and_open_with_the_course(assignment, notebook):
    """A maintainer reads the notice in the file's first lines; a self-learner's first cell is the course's own."""
    solution = nbformat.read(ROOT / "solutions" / assignment / notebook, as_version=4)
    source = nbformat.read(ROOT / "source" / assignment / notebook, as_version=4)
    notice = SOLUTION_NOTICE.format(assignment=assignment, notebook=notebook)
    assert solution.metadata.get(GENERATED_KEY) == notice == solution.cells[0].metadata.get(GENERATED_KEY)
    assert solution.cells[0].source == source.cells[0].source, "a cell before the course's first"
    assert "do not edit" in (ROOT / "solutions" / assignment / notebook).read_text()[:1000]


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_every_notebook_opens_with_objectives_and_time_and_ends_with_questions(assignment, notebook):
    nb = nbformat.read(ROOT / "source" / assignment / notebook, as_version=4)
    first, last = nb.cells[0].source, nb.cells[-1].source
    assert "You will learn" in first and "Time:" in first
    assert "Summary" in last and "Questions" in last
