"""The course as a package: a wheel built from the repository's tracked files (as from a fresh clone), installed
into a fresh environment, gives every release notebook what it imports, run from a folder that holds nothing of the
course. This is how students work on a hub, on a laptop without a checkout, or in a hosted notebook.

For each of the nine release notebooks, in one Python process of that environment: every import statement of every
code cell, then the cells from the top to the first visible test cell, which runs a check end to end (the probe, the
evidence, the judge and its catalogue of mistakes, read from the package's data files). The only errors allowed are
the unfinished exercises' own (NotImplementedError, and the check saying the function is not implemented yet).
Running the whole notebooks proves no more about packaging and costs about a minute more.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import course_dir

ROOT = course_dir.ROOT
PACKAGES = ("course", "autograder", "catalogue")
#: what an unfinished release notebook is allowed to raise before its first test cell: the stub, and the check
#: saying so ("... is not implemented yet")
EXPECTED_ERRORS = {"NotImplementedError", "CheckFailed"}

pytestmark = pytest.mark.slow


def tracked_package_files(root: Path = ROOT) -> list[str]:
    """The files git tracks in the course's packages, plus pyproject.toml: what a wheel is built from."""
    listed = subprocess.run(["git", "ls-files", "-z", "pyproject.toml", *PACKAGES], cwd=root, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (root / name).is_file()]


def build_wheel(folder: Path, root: Path = ROOT) -> Path:
    """The course's wheel, built from a copy of the tracked package files in folder/src (never in the checkout,
    where setuptools' build/ would be shared by tests running side by side, and untracked files could slip in)."""
    source = folder / "src"
    for name in tracked_package_files(root):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(folder / "dist"), str(source)], check=True, capture_output=True)
    return next((folder / "dist").glob("*.whl"))


def missing_from_wheel(wheel: Path, root: Path = ROOT) -> list[str]:
    """Tracked files of the packages that the wheel lacks (tests of the packages aside, if any)."""
    with zipfile.ZipFile(wheel) as archive:
        inside = set(archive.namelist())
    return [name for name in tracked_package_files(root) if name != "pyproject.toml" and name not in inside]


def install_into_fresh_environment(folder: Path, wheel: Path) -> Path:
    """A new environment (python -m venv) with the wheel installed and, on its path, this environment's packages
    for the course's dependencies (installing torch again would take minutes and prove nothing about the course).
    Its Python."""
    env = folder / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = env / "lib" / version / "site-packages"
    dependencies = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    # a path line in a .pth only extends sys.path: the .pth files there (the checkout's editable install) stay unread
    (site / "course-dependencies.pth").write_text(dependencies + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(site), str(wheel)], check=True, capture_output=True)
    return env / "bin" / "python"


#: run in the fresh environment, from an empty folder: the notebooks' code arrives on stdin, errors leave on stdout
RUNNER = r"""
import json, sys, traceback
import matplotlib
matplotlib.use("Agg")
import course
results = {"course": course.__file__, "notebooks": {}}
for name, (imports, cells) in json.load(sys.stdin).items():
    errors = []
    for code in imports:
        try:
            exec(compile(code, f"<{name}>", "exec"), {"__name__": "__main__"})
        except BaseException as error:
            errors.append([code, type(error).__name__, str(error)[:300]])
    scope = {"__name__": "__main__"}
    for n, code in enumerate(cells):
        try:
            exec(compile(code, f"<{name} cell {n}>", "exec"), scope)
        except BaseException as error:
            errors.append([f"cell {n}", type(error).__name__, str(error)[:300]])
    results["notebooks"][name] = errors
print(json.dumps(results))
"""


def _imports(cells: list[str]) -> list[str]:
    """Every import statement in the cells, each as code of its own."""
    found = []
    for source in cells:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(ast.unparse(node))
    return found


def _up_to_first_test(nb: nbformat.NotebookNode) -> list[str]:
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    graded = [i for i, cell in enumerate(code)
              if cell.metadata.get("nbgrader", {}).get("grade") and not cell.metadata["nbgrader"].get("solution")]
    return [cell.source for cell in code[:graded[0] + 1]]


def run_release_notebooks(python: Path, folder: Path) -> dict:
    """The RUNNER's answer for the nine release notebooks, run by `python` in folder (empty, outside the course)."""
    notebooks = {}
    for assignment in course_dir.assignments():
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(ROOT / "release" / assignment / notebook, as_version=4)
            cells = [cell.source for cell in nb.cells if cell.cell_type == "code"]
            notebooks[f"{assignment}/{notebook}"] = (_imports(cells), _up_to_first_test(nb))
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run([str(python), "-I", "-c", RUNNER], input=json.dumps(notebooks), cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_every_tracked_file_of_the_packages(wheel):
    assert not missing_from_wheel(wheel), "pyproject.toml's package data leaves these out: " + \
        ", ".join(missing_from_wheel(wheel))


def test_every_release_notebook_gets_what_it_imports_from_the_wheel(wheel, tmp_path):
    """5 s on an idle machine, 15 s on a busy one (one process imports torch and runs nine notebooks' first cells):
    the only proof that a student without a checkout can work."""
    python = install_into_fresh_environment(tmp_path, wheel)
    seen = run_release_notebooks(python, tmp_path / "elsewhere")
    assert Path(seen["course"]).is_relative_to(tmp_path / "env"), f"course imported from {seen['course']}"
    assert len(seen["notebooks"]) == 9, sorted(seen["notebooks"])
    unexpected = {name: [e for e in errors if e[1] not in EXPECTED_ERRORS]
                  for name, errors in seen["notebooks"].items()}
    assert not any(unexpected.values()), json.dumps(unexpected, indent=1)
    # each notebook reached its first check, which said the exercise is unfinished (and nothing else went wrong)
    for name, errors in seen["notebooks"].items():
        assert any(kind == "CheckFailed" and "not implemented yet" in message for _, kind, message in errors), \
            f"{name}: its first check never ran: {errors}"
