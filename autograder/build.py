"""Build release/, solutions/ and samples/ from source/ — or, with check=True, report where they drifted.

release/    what `nbgrader generate_assignment --no-db` makes of source/ (deterministic), with the language_info
            the pinned kernel reports, so that JupyterLab opens a release notebook without marking it modified.
solutions/  source notebooks with solutions in, hidden tests out, executed top to bottom with outputs.
samples/    a small batch of submissions in nbgrader's submitted/ layout, for the README's first command.

A build with nothing changed changes nothing. A file is written only when its bytes differ, and the build returns
(and `main` prints) each file it wrote or removed.

A solution is executed again only when something its execution depends on changed. Each solution notebook carries
in its metadata (INPUTS_KEY) the SHA-256 of its inputs (solution_inputs): its source notebook as the build executes
it (solutions in, hidden tests out: editing a hidden test changes no solution), every course/**/*.py (the notebooks
import the course package, and its judges are found at run time, so all of it counts), the pins in requirements.txt
of what the kernel loads (execution_pins: torch, numpy, matplotlib, the kernel... and what they require, as
installed; a pin only the grader or the tests use does not count) and SOLUTION_RECIPE (how the build executes and
cleans a notebook). A committed solution that carries the hash of today's inputs, holds the cells its source makes
and ran every code cell without error is left as it is. So the times some notebooks measure (04's loop over heads
against batched heads, 07's and 08's training time, 08's KV cache) stay those of the machine that last executed
them; a build elsewhere does not replace them. To measure again, delete the solution notebook and build. Not
inputs: the machine (CPU or GPU, Python's patch version) and environment variables.

What can be deterministic in an executed solution is: no execution timestamps in cell metadata, no widget state and
no widget views (their ids are random, and a static page cannot show them), consecutive stream outputs merged (how
the kernel splits printed text varies from run to run). Figures are matplotlib-inline PNGs: no creation time, and
their Software key names the pinned matplotlib.

`--check` reports exactly what a build would change, and any of it is drift (exit 1). For a solution that is:
missing, unreadable or without an input hash; "built from another version of its source" (its cells differ from
what its source makes: the content differs); "executed with other inputs" (its cells match, but course/,
execution_pins or SOLUTION_RECIPE changed since it was executed, so a build would execute it again: the committed
outputs are no longer known to be what today's course prints); a code cell not run or raising. So an edit of
course/ or of a pin the kernel loads asks for a build of every solution (2 to 3 minutes on 2 cores) before the
suite passes again.
"""

import hashlib
import importlib.metadata
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
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from autograder import GradingError, course_dir
from autograder.notebooks import answer_cells, filled, merge_streams, solution_skeleton

#: student id -> what that sample submission is
SAMPLE_STUDENTS = {
    "sample-complete": "every answer correct",
    "sample-untouched": "the release notebooks, unchanged",
    "sample-mistakes": "typical mistakes (one per exercise)",
    "sample-broken": "a notebook that is not valid JSON",
}


#: bump when how the build executes or cleans a solution changes: every solution is then executed again
SOLUTION_RECIPE = 1
#: solution notebook metadata key: the SHA-256 of everything its execution depended on (solution_inputs)
INPUTS_KEY = "build_inputs_sha256"
#: what a solution's kernel imports: the notebooks and course/ (torch, numpy, matplotlib, tqdm, safetensors), the
#: kernel and its display of figures and widgets, and the client that runs it; execution_pins adds what they require
KERNEL_DISTRIBUTIONS = ("torch", "numpy", "matplotlib", "tqdm", "safetensors", "ipykernel", "matplotlib-inline",
                        "ipywidgets", "nbclient", "nbformat")
#: a widget's view: its id is random and its state (with elapsed times) lives in notebook metadata
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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
    """Run a notebook top to bottom in a fresh kernel; raises on the first error. Records no timings and no
    widget state."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False, store_widget_state=False,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def solution_source(root: Path, assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The solution notebook before execution: its source with solutions in, hidden tests out."""
    source = nbformat.read(course_dir.source_dir(root) / assignment / notebook, as_version=4)
    return solution_skeleton(source, assignment, notebook)


def _pin_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:  # a comment, an option such as -e .
        return None


def execution_pins(root: Path) -> list[str]:
    """The lines of requirements.txt that pin KERNEL_DISTRIBUTIONS and, as installed, everything they require.

    A pin the kernel never loads (a grader's or a test's package) is not an input of the solutions."""
    pins = {name: line.strip() for line in (root / "requirements.txt").read_text().splitlines()
            if (name := _pin_name(line.strip()))}
    found: set[str] = set()
    todo = [canonicalize_name(name) for name in KERNEL_DISTRIBUTIONS]
    while todo:
        name = todo.pop()
        if name in found or name not in pins:
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            requires = []
        for line in requires:
            requirement = Requirement(line)
            if not requirement.marker or requirement.marker.evaluate({"extra": ""}):  # not an optional extra
                todo.append(canonicalize_name(requirement.name))
    return sorted(pins[name] for name in found)


def solution_inputs(root: Path, assignment: str, notebook: str) -> str:
    """SHA-256 (hex) of everything executing this solution depends on: solution_source, every course/**/*.py,
    execution_pins and SOLUTION_RECIPE."""
    digest = hashlib.sha256()

    def add(name: str, data: bytes) -> None:
        digest.update(f"{name}\n{len(data)}\n".encode())  # names and lengths: no two input sets hash alike
        digest.update(data)

    add("recipe", str(SOLUTION_RECIPE).encode())
    add("solution source", _write_json(solution_source(root, assignment, notebook)).encode())
    add("requirements.txt", "\n".join(execution_pins(root)).encode())
    for path in sorted((root / "course").rglob("*.py")):  # the code, the judges' mistakes written in it included
        if "__pycache__" not in path.parts:
            add(path.relative_to(root).as_posix(), path.read_bytes())
    return digest.hexdigest()


def cleaned(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """An executed notebook without what changes from run to run though nothing changed: widget views and state
    dropped, consecutive stream outputs of one stream merged."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = [output for output in cell.outputs if WIDGET_VIEW not in output.get("data", {})]
        merge_streams(cell)
    nb.metadata.pop("widgets", None)
    return nb


def build_solution(root: Path, assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The solution notebook executed, cleaned, and marked with the hash of its inputs."""
    nb = solution_source(root, assignment, notebook)
    with tempfile.TemporaryDirectory() as tmp:
        nb = cleaned(execute(nb, Path(tmp)))
    nb.metadata[INPUTS_KEY] = solution_inputs(root, assignment, notebook)
    return nb


def solution_problems(root: Path, assignment: str, notebook: str) -> list[str]:
    """Why the committed solution is not what a build would leave (empty: the build leaves it as it is)."""
    path = root / "solutions" / assignment / notebook
    if not path.exists():
        return ["missing"]
    try:
        committed = nbformat.read(path, as_version=4)
    except Exception as error:  # whatever makes it unreadable (not JSON, not a notebook), the build replaces it
        return [f"not a readable notebook ({type(error).__name__})"]
    if not _same_skeleton(committed, solution_source(root, assignment, notebook)):
        problems = ["built from another version of its source"]
    elif INPUTS_KEY not in committed.metadata:
        problems = [f"without a record of its inputs ({INPUTS_KEY})"]
    elif committed.metadata[INPUTS_KEY] != solution_inputs(root, assignment, notebook):
        problems = ["executed with other inputs (course/, the kernel's pins or SOLUTION_RECIPE changed since)"]
    else:
        problems = []
    return problems + executed_problems(committed)


def sample_submissions(root: Path, release: Path, assignments: list[str]) -> dict[Path, str]:
    """Relative path -> file text of the sample submissions for these assignments, and the samples' README."""
    from catalogue import sample_mistakes  # noqa: PLC0415 - the catalogue is needed to build, not to grade

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

    Returns one line per file, starting with its path: with check, each that differs from (or is missing in) what
    the build makes; without, each the build wrote or removed.
    """
    assignments = only or course_dir.assignments(root)
    unknown = sorted(set(assignments) - set(course_dir.assignments(root)))
    if unknown:
        raise GradingError(f"unknown assignment(s) {unknown}")
    changes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        generate_release(root, release, assignments)
        built = {p.relative_to(release): p.read_text() for p in release.rglob("*") if p.is_file()}
        changes += _sync(root / "release", built, check, lambda rel: rel.parts[0] in assignments,
                         _same_but_python_patch)
        samples = sample_submissions(root, release, assignments)
        changes += _sync(root / "samples", samples, check,
                         lambda rel: len(rel.parts) < 3 or rel.parts[1] in assignments, _same_but_python_patch)

    if solutions:
        for assignment in assignments:
            for notebook in course_dir.notebooks(assignment, root):
                path = root / "solutions" / assignment / notebook
                name = path.relative_to(root).as_posix()
                problems = solution_problems(root, assignment, notebook)
                if check:
                    changes += [f"{name}: {problem}" for problem in problems]
                elif not problems:
                    print(f"{assignment}/{notebook}: its inputs have not changed, not executed again", flush=True)
                else:
                    print(f"executing {assignment}/{notebook} ({problems[0]}) ...", flush=True)
                    text = _write_json(build_solution(root, assignment, notebook))
                    if not path.exists() or path.read_text() != text:
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_text(text)
                        changes.append(f"{name} written (executed again: {problems[0]})")
    return changes


def _sync(folder: Path, files: dict[Path, str], check: bool, in_scope: Callable[[Path], bool],
          same: Callable[[str, str], bool] = operator.eq) -> list[str]:
    """Make the in-scope part of folder hold exactly these files, writing only those that differ; or (check) list
    how it differs."""
    existing = {p.relative_to(folder) for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()
    existing = {rel for rel in existing if in_scope(rel)}
    changes = []
    for rel in sorted(existing | set(files)):
        name = f"{folder.name}/{rel.as_posix()}"
        if rel not in files:
            changes.append(f"{name} is not built from source/ any more" if check else f"{name} removed")
            if not check:
                (folder / rel).unlink()
        elif rel not in existing or not same((folder / rel).read_text(), files[rel]):
            changes.append(f"{name} differs from what the build makes" if check else f"{name} written")
            if not check:
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(files[rel])
    return changes


def main(check: bool = False, solutions: bool = True, only: list[str] | None = None,
         root: Path = course_dir.ROOT) -> int:
    changes = build(root=root, check=check, solutions=solutions, only=only)
    if check:
        for line in changes:
            print(f"drift: {line}")
        print("release/, samples/ and solutions/ are up to date." if not changes else
              "Run `python -m autograder build` and commit the result.")
        return 1 if changes else 0
    folders = "release/, samples/ and solutions/" if solutions else "release/ and samples/ (solutions/ skipped)"
    print(f"built {folders}: {len(changes)} file{'' if len(changes) == 1 else 's'} changed")
    for line in changes:
        print(f"  {line}")
    return 0
