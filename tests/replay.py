"""Grade a notebook's answers in this process, through the same evidence files and judges as real grading.

``grade(assignment, answers)`` runs the source notebook's setup cell and its answer cells (the solution's, or
the given replacements) in a fresh namespace, then every test cell with NBGRADER_EXECUTION=autograde, as the
kernel does under grading: each check probes and writes its record. The records are then judged with
``autograder.judging.judge``, exactly as the grader's JudgeEvidence step does after nbgrader ran the kernel.
Demo cells are not run. Seconds per notebook instead of nbgrader's many. ``records`` keeps the records themselves,
for tests that forge them.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType

import nbformat

from autograder import course_dir
from autograder.judging import Verdict, check_for, judge
from autograder.notebooks import answer, grade_id
from course.checks import seeds
from course.checks.check import AwaitingJudge
from course.checks.evidence import FOLDER, Evidence, read


@dataclass
class Result:
    score: float
    max_score: float
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # test grade_id -> verdict
    points: dict[str, float] = field(default_factory=dict)  # test grade_id -> its points
    hidden: set[str] = field(default_factory=set)  # grade_ids of the test cells a student does not see

    @property
    def fails_visibly(self) -> bool:
        """True when a test the student sees while working fails (not only hidden ones)."""
        return any(not v.passed for gid, v in self.verdicts.items() if gid not in self.hidden)

    @property
    def mistakes(self) -> set[str]:
        return {v.mistake for v in self.verdicts.values() if not v.passed and v.mistake}

    def failures(self) -> str:
        return "\n\n".join(f"{gid}: {v.message}" for gid, v in self.verdicts.items() if not v.passed)


HIDDEN_TESTS_MARKER = "### BEGIN HIDDEN TESTS"


def notebook_of(assignment: str, cell: str) -> str:
    for notebook in course_dir.notebooks(assignment):
        nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
        if any(grade_id(c) == cell for c in nb.cells):
            return notebook
    raise KeyError(f"{assignment} has no cell {cell}")


@contextlib.contextmanager
def _autograding(folder: Path, seed: int | None):
    """The environment of a kernel under grading (with the grader's secret seed, when one is given), in folder."""
    names = ("NBGRADER_EXECUTION", seeds.ENV)
    before, cwd = {name: os.environ.get(name) for name in names}, os.getcwd()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    if seed is None:
        os.environ.pop(seeds.ENV, None)
    else:
        os.environ[seeds.ENV] = str(seed)
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _exec_cell(code: str, filename: str, namespace: dict) -> None:
    """exec a cell as IPython does: its lines registered with linecache, so tracebacks show the code that raised."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    exec(_compiled(code, filename), namespace)  # noqa: S102 - the notebook's own cells, as a kernel runs them


@functools.lru_cache(maxsize=4096)
def _compiled(code: str, filename: str) -> CodeType:
    """A cell compiled once: every replay of a notebook runs the same setup and test cells again (a code object is
    immutable; each exec gets a fresh namespace)."""
    return compile(code, filename, "exec")


def _run(assignment: str, answers: dict[str, str], notebook: str, device: str, folder: Path,
         visit: Callable[[str, dict], None], seed: int | None = None, from_cell: str | None = None) -> None:
    """Run the setup, answer and test cells of the source notebook in one namespace, as a kernel under grading
    does (NBGRADER_EXECUTION=autograde, so every check only probes and writes its record under folder), and
    call visit(grade_id, nbgrader metadata) after each test cell; with from_cell, the test cells before that
    answer cell are skipped."""
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    reached = from_cell is None
    with _autograding(folder, seed):
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if cell.cell_type != "code":
                continue
            if gid == "setup":
                _exec_cell(cell.source, f"<{notebook}:setup>", namespace)
                namespace["device"] = device
            elif meta.get("solution"):
                reached = reached or gid == from_cell
                code = answers.get(gid, answer(cell.source))
                try:
                    _exec_cell(code, f"<{notebook}:{gid}>", namespace)
                except Exception:  # noqa: BLE001 - a broken answer cell fails its tests, as in a kernel
                    pass
            elif meta.get("grade") and reached:
                try:
                    _exec_cell(cell.source, f"<{notebook}:{gid}>", namespace)
                except AwaitingJudge:
                    pass
                except Exception:  # noqa: BLE001 - the probe failed to write: the judge finds no record
                    pass
                visit(gid, {**meta, "hidden": HIDDEN_TESTS_MARKER in cell.source})


def _notebook(assignment: str, answers: dict[str, str], notebook: str | None) -> str:
    if notebook:
        return notebook
    return notebook_of(assignment, next(iter(answers))) if answers else course_dir.notebooks(assignment)[0]


def grade(assignment: str, answers: dict[str, str] | None = None, notebook: str | None = None,
          device: str = "cpu", seed: int | None = None, from_cell: str | None = None) -> Result:
    """Score one notebook of an assignment with these answer cells replaced (grade_id -> code); seed: the grader's
    secret seed, for the kernel's probes and the judges (None: the fixed seeds a student works with). from_cell:
    only the test cells after this answer cell are run and scored (the ones before it cannot see it)."""
    answers = answers or {}
    result = Result(0.0, 0.0)
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        def judged(gid: str, meta: dict) -> None:
            check = check_for(assignment, gid)
            with seeds.grading_seed(seed):
                verdict = judge(check, Path(tmp) / FOLDER) if check else Verdict(False, "no check", "no-check")
            points = float(meta.get("points", 0))
            result.verdicts[gid] = verdict
            result.points[gid] = points
            result.max_score += points
            result.score += points if verdict.passed else 0.0
            if meta.get("hidden"):
                result.hidden.add(gid)

        _run(assignment, answers, _notebook(assignment, answers, notebook), device, Path(tmp), judged, seed,
             from_cell)
    return result


def records(assignment: str, notebook: str, answers: dict[str, str] | None = None,
            device: str = "cpu") -> dict[str, Evidence]:
    """check name -> the evidence record its probe wrote for this notebook's solution (or these answers)."""
    found: dict[str, Evidence] = {}
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        def kept(gid: str, meta: dict) -> None:
            check = check_for(assignment, gid)
            if check is not None:
                found[check.name] = read(Path(tmp) / FOLDER / check.name, check.name)

        _run(assignment, answers or {}, notebook, device, Path(tmp), kept)
    return found
