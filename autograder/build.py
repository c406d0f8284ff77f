"""Build release/, solutions/ and samples/ from source/ — or, with check=True, report where they drifted.

release/    what `nbgrader generate_assignment --no-db` makes of source/ (deterministic), with the language_info
            the pinned kernel reports, so that JupyterLab opens a release notebook without marking it modified.
solutions/  source notebooks with solutions in, hidden tests out, executed top to bottom with outputs.
samples/    a small batch of submissions in nbgrader's submitted/ layout, for the README's first command.
"""

import json
import operator
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nbformat
from ipykernel.ipkernel import IPythonKernel
from nbclient import NotebookClient

from autograder import GradingError, course_dir
from autograder.notebooks import answer_cells, filled, solution_skeleton

#: student id -> what that sample submission is
SAMPLE_STUDENTS = {
    "sample-complete": "every answer correct",
    "sample-untouched": "the release notebooks, unchanged",
    "sample-mistakes": "typical mistakes (one per exercise)",
    "sample-broken": "a notebook that is not valid JSON",
}


def _write_json(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def kernel_language_info() -> dict:
    """The language_info the pinned environment's kernel (ipykernel's python3) reports.

    JupyterLab copies it into a notebook's metadata when the kernel starts and marks the notebook modified if
    that changes anything; a notebook that already carries it opens unmodified.
    """
    return json.loads(json.dumps(IPythonKernel.language_info))


def _same_but_python_patch(a: str, b: str) -> bool:
    """Equal texts, or notebooks that differ only in the Python patch version of their language_info.

    The patch version is the building machine's (3.11.7 or 3.11.9 are the same pinned environment): a build on
    another machine is not drift, and does not rewrite the committed files.
    """
    if a == b:
        return True
    try:
        notebooks = [json.loads(a), json.loads(b)]
    except ValueError:
        return False
    for nb in notebooks:
        info = nb.get("metadata", {}).get("language_info", {}) if isinstance(nb, dict) else {}
        if isinstance(info, dict) and "version" in info:
            info["version"] = ".".join(str(info["version"]).split(".")[:2])
    return notebooks[0] == notebooks[1]


#: nbgrader's `generate_assignment --no-db --force` of every assignment named in argv, run in a course directory
GENERATE = """
import sys
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader
config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
config.CourseDirectory.root = "."
config.SaveCells.enabled = False
config.GenerateAssignment.no_database = True
api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
for assignment in sys.argv[1:]:
    result = api.generate_assignment(assignment, force=True, create=False)
    if not result["success"]:
        sys.exit(f"nbgrader could not generate {assignment}: {result.get('error') or result.get('log')}")
"""


def generate_release(root: Path, out: Path, assignments: list[str]) -> None:
    """Run nbgrader generate_assignment --no-db for these assignments, writing out/<assignment>/; each notebook
    gets the kernel's language_info (kernel_language_info)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(course_dir.source_dir(root), work / "source")
        shutil.copy(root / "nbgrader_config.py", work / "nbgrader_config.py")
        # nbgrader's generate_assignment --no-db for every assignment, in one process (its start costs seconds)
        subprocess.run([sys.executable, "-c", GENERATE, *assignments], cwd=work, check=True)
        language_info = kernel_language_info()
        for path in (work / "release").rglob("*.ipynb"):
            nb = nbformat.read(path, as_version=4)
            nb.metadata["language_info"] = language_info
            path.write_text(_write_json(nb))
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(work / "release", out)


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in a fresh kernel; raises on the first error."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def build_solution(root: Path, assignment: str, notebook: str) -> nbformat.NotebookNode:
    source = nbformat.read(course_dir.source_dir(root) / assignment / notebook, as_version=4)
    nb = solution_skeleton(source, assignment, notebook)
    with tempfile.TemporaryDirectory() as tmp:
        return execute(nb, Path(tmp))


def _sample_mistakes(root: Path):
    """The catalogue's sample_mistakes: the catalogue is test data and lives in tests/catalogue."""
    if str(root / "tests") not in sys.path:
        sys.path.insert(0, str(root / "tests"))
    from catalogue import sample_mistakes  # noqa: PLC0415 - test data, found once tests/ is on the path

    return sample_mistakes


def sample_submissions(root: Path, release: Path, assignments: list[str]) -> dict[Path, str]:
    """Relative path -> file text of the sample submissions for these assignments, and the samples' README."""
    sample_mistakes = _sample_mistakes(root)
    files: dict[Path, str] = {}
    for assignment in assignments:
        wrong = {v.cell: v for v in sample_mistakes(assignment)}
        for notebook in course_dir.notebooks(assignment, root):
            source = nbformat.read(course_dir.source_dir(root) / assignment / notebook, as_version=4)
            released = nbformat.read(release / assignment / notebook, as_version=4)
            answers = answer_cells(source)
            files[Path("sample-complete", assignment, notebook)] = _write_json(filled(released, answers))
            files[Path("sample-untouched", assignment, notebook)] = _write_json(released)
            wrong_answers = {cell: variant.code for cell, variant in wrong.items() if cell in answers}
            files[Path("sample-mistakes", assignment, notebook)] = _write_json(filled(released, wrong_answers))
            if assignment == course_dir.assignments(root)[0]:
                broken = _write_json(filled(released, answers))
                files[Path("sample-broken", assignment, notebook)] = broken[: len(broken) // 2]  # cut off mid-file
    readme = ["# Sample submissions (generated by `python -m autograder build` — do not edit)", "",
              "Laid out like nbgrader's `submitted/` folder: `<student>/<assignment>/<notebook>.ipynb`.", ""]
    readme += [f"- `{student}`: {what}" for student, what in SAMPLE_STUDENTS.items()]
    files[Path("README.md")] = "\n".join(readme) + "\n"
    return files


def _same_skeleton(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    def skeleton(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
        return [(cell.cell_type, cell.source) for cell in nb.cells]
    return skeleton(a) == skeleton(b)


def executed_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Ways an executed notebook is incomplete: a code cell never run, or an error output."""
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if cell.execution_count is None:
            problems.append(f"cell {i} was not executed")
        problems += [f"cell {i} raised {o.get('ename')}" for o in cell.outputs if o.output_type == "error"]
    return problems


def build(root: Path = course_dir.ROOT, check: bool = False, solutions: bool = True,
          only: list[str] | None = None) -> list[str]:
    """Rebuild (or, with check, compare) release/, solutions/ and samples/, for all assignments or only some.

    Returns the drift found: files that differ from (or were missing in) what the build makes.
    """
    assignments = only or course_dir.assignments(root)
    unknown = sorted(set(assignments) - set(course_dir.assignments(root)))
    if unknown:
        raise GradingError(f"unknown assignment(s) {unknown}")
    drift: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        generate_release(root, release, assignments)
        built = {p.relative_to(release): p.read_text() for p in release.rglob("*") if p.is_file()}
        drift += _sync(root / "release", built, check, lambda rel: rel.parts[0] in assignments, _same_but_python_patch)
        samples = sample_submissions(root, release, assignments)
        drift += _sync(root / "samples", samples, check, lambda rel: len(rel.parts) < 3 or rel.parts[1] in assignments,
                       _same_but_python_patch)

    if solutions:
        for assignment in assignments:
            for notebook in course_dir.notebooks(assignment, root):
                path = root / "solutions" / assignment / notebook
                if check:
                    source = nbformat.read(course_dir.source_dir(root) / assignment / notebook, as_version=4)
                    if not path.exists():
                        drift.append(f"{path.relative_to(root)} is missing")
                        continue
                    committed = nbformat.read(path, as_version=4)
                    if not _same_skeleton(committed, solution_skeleton(source, assignment, notebook)):
                        drift.append(f"{path.relative_to(root)} was built from another version of its source")
                    drift += [f"{path.relative_to(root)}: {p}" for p in executed_problems(committed)]
                else:
                    print(f"executing {assignment}/{notebook} ...", flush=True)
                    nb = build_solution(root, assignment, notebook)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(_write_json(nb))
    return drift


def _sync(folder: Path, files: dict[Path, str], check: bool, in_scope: Callable[[Path], bool],
          same: Callable[[str, str], bool] = operator.eq) -> list[str]:
    """Make the in-scope part of folder hold exactly these files, or (check) list how it differs."""
    existing = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()
    existing = {rel for rel in existing if in_scope(rel)}
    drift = []
    for rel in sorted(existing | set(files)):
        name = f"{folder.name}/{rel}"
        if rel not in files:
            drift.append(f"{name} is not built from source/ any more")
            if not check:
                (folder / rel).unlink()
        elif rel not in existing or not same((folder / rel).read_text(), files[rel]):
            drift.append(f"{name} differs from what the build makes")
            if not check:
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(files[rel])
    return drift


def main(check: bool = False, solutions: bool = True, only: list[str] | None = None) -> int:
    drift = build(check=check, solutions=solutions, only=only)
    if check:
        for line in drift:
            print(f"drift: {line}")
        print("release/, samples/ and solutions/ are up to date." if not drift else
              "Run `python -m autograder build` and commit the result.")
        return 1 if drift else 0
    print(f"built release/, samples/ and solutions/ ({len(drift)} files changed)")
    return 0
