"""Grade a notebook's answers in this process, through the same evidence files and judges as real grading.

``grade(assignment, answers)`` runs the source notebook's setup cell and its answer cells (the solution's, or
the given replacements) in a fresh namespace, then every test cell with NBGRADER_EXECUTION=autograde, as the
kernel does under grading: each check probes and writes its record. The records are then judged with
``autograder.judging.judge``, exactly as the grader's JudgeEvidence step does after nbgrader ran the kernel.
Demo cells are not run. Seconds per notebook instead of nbgrader's many.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder import course_dir
from autograder.judging import Verdict, check_for, judge
from autograder.notebooks import answer, grade_id
from course.checks.check import AwaitingJudge


@dataclass
class Result:
    score: float
    max_score: float
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # test grade_id -> verdict
    points: dict[str, float] = field(default_factory=dict)  # test grade_id -> its points

    @property
    def mistakes(self) -> set[str]:
        return {v.mistake for v in self.verdicts.values() if not v.passed and v.mistake}

    def failures(self) -> str:
        return "\n\n".join(f"{gid}: {v.message}" for gid, v in self.verdicts.items() if not v.passed)


def notebook_of(assignment: str, cell: str) -> str:
    for notebook in course_dir.notebooks(assignment):
        nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
        if any(grade_id(c) == cell for c in nb.cells):
            return notebook
    raise KeyError(f"{assignment} has no cell {cell}")


@contextlib.contextmanager
def _autograding(folder: Path):
    before, cwd = os.environ.get("NBGRADER_EXECUTION"), os.getcwd()
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        if before is None:
            os.environ.pop("NBGRADER_EXECUTION", None)
        else:
            os.environ["NBGRADER_EXECUTION"] = before


def grade(assignment: str, answers: dict[str, str] | None = None, notebook: str | None = None,
          device: str = "cpu") -> Result:
    """Score one notebook of an assignment with these answer cells replaced (grade_id -> code)."""
    answers = answers or {}
    notebook = notebook or (notebook_of(assignment, next(iter(answers))) if answers
                            else course_dir.notebooks(assignment)[0])
    nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    result = Result(0.0, 0.0)
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp, _autograding(Path(tmp)):
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if cell.cell_type != "code":
                continue
            if gid == "setup":
                exec(compile(cell.source, f"<{notebook}:setup>", "exec"), namespace)
                namespace["device"] = device
            elif meta.get("solution"):
                code = answers.get(gid, answer(cell.source))
                try:
                    exec(compile(code, f"<{notebook}:{gid}>", "exec"), namespace)
                except Exception:  # noqa: BLE001 - a broken answer cell fails its tests, as in a kernel
                    pass
            elif meta.get("grade"):
                try:
                    exec(compile(cell.source, f"<{notebook}:{gid}>", "exec"), namespace)
                except AwaitingJudge:
                    pass
                except Exception:  # noqa: BLE001 - the probe failed to write: the judge finds no record
                    pass
                check = check_for(assignment, gid)
                verdict = judge(check, Path(tmp) / ".evidence") if check else Verdict(False, "no check", "no-check")
                points = float(meta.get("points", 0))
                result.verdicts[gid] = verdict
                result.points[gid] = points
                result.max_score += points
                result.score += points if verdict.passed else 0.0
    return result
