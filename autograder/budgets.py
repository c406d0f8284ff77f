"""Each assignment's time budget under grading, derived from its reference solution's own measured run.

A looping or sleeping submission may hold a grading worker only as long as its assignment needs: the budget of a
notebook (``GradingExecute.notebook_timeout``: every cell and every rerun after a crash, together) is MULTIPLE times
what grading the assignment's reference solution took when it was measured, and never less than FLOOR seconds. The
measurements live in ``budgets.json`` beside this file, written by ``python -m autograder budgets`` (it grades each
solution, samples/sample-complete/, with the documented grader, in the sandbox where there is one, one assignment at
a time, and records the wall time of each, workspace set-up included); commit it. MULTIPLE leaves room for a slower
or busier grading machine; ``--notebook-timeout`` overrides the budget for a batch.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from pathlib import Path

from autograder import course_dir

FILE = Path(__file__).with_name("budgets.json")
#: the reference solution as a student hands it in: the release notebook with source/'s answers (built with samples/)
REFERENCE = course_dir.ROOT / "samples" / "sample-complete"
#: no notebook gets less than this, however fast its solution grades
FLOOR = 60
#: the budget is this many times the solution's measured grading
MULTIPLE = 10


def measured(path: Path = FILE) -> dict[str, float]:
    """assignment -> seconds its solution took to grade when measured (empty when nothing was measured)."""
    try:
        return {a: float(s) for a, s in json.loads(path.read_text())["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def budget(assignment: str, cell_seconds: int, seconds: dict[str, float] | None = None) -> int:
    """Seconds one notebook of assignment may run in all: MULTIPLE x its solution's measured grading, at least FLOOR;
    ten cells' worth (10 x cell_seconds) for an assignment never measured."""
    seconds = measured() if seconds is None else seconds
    if assignment not in seconds:
        return 10 * cell_seconds
    return max(FLOOR, math.ceil(MULTIPLE * seconds[assignment]))


def measure(assignments: list[str] | None = None, sandbox: bool = True) -> dict[str, float]:
    """Grade each assignment's solution (samples/sample-complete/) as one student's submission and time it."""
    from autograder.grade import grade  # noqa: PLC0415 - grade imports workspace, which imports this module

    seconds = {}
    for assignment in assignments or course_dir.assignments():
        scratch = Path(tempfile.mkdtemp(prefix="budget-"))
        try:
            folder = scratch / "batch" / "reference" / assignment
            folder.mkdir(parents=True)
            for notebook in course_dir.notebooks(assignment):
                shutil.copy(REFERENCE / assignment / notebook, folder / notebook)
            begun = time.monotonic()
            rows = grade(scratch / "batch", scratch / "out", [assignment], workers=1, sandbox=sandbox,
                         progress=False, notebook_seconds=3600)
            took = time.monotonic() - begun
            row = next(r for r in rows if r.student == "reference")
            if row.score != row.max_score:
                raise RuntimeError(f"the solution of {assignment} scored {row.score}/{row.max_score} "
                                   f"({row.status}: {row.message}): not a measurement of a right answer")
            seconds[assignment] = round(took, 1)
            print(f"{assignment}: {took:.1f} s -> budget {budget(assignment, 120, seconds)} s", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def write(seconds: dict[str, float], path: Path = FILE) -> None:
    """Merge new measurements into budgets.json."""
    kept = {**measured(path), **seconds}
    path.write_text(json.dumps({
        "generated": "by `python -m autograder budgets` (autograder/budgets.py): seconds each assignment's solution "
                     "took to grade; the notebook budget is max(FLOOR, MULTIPLE x this)",
        "seconds": dict(sorted(kept.items()))}, indent=1) + "\n")
