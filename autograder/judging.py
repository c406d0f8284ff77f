"""The verdict of every test cell, reached in the grader's process from the evidence the kernel recorded.

Under grading a test cell ``test_NAME`` only probes: the kernel writes ``.evidence/NAME/`` next to the notebook
(see course/checks/check.py). After nbgrader has executed the notebook, :class:`JudgeEvidence` reads each
record (JSON and safetensors, nothing executed), runs the check's judge on it, and replaces the cell's outputs
with the judge's verdict, so nbgrader's own SaveAutoGrades scores the cell from the judge and the feedback shows
the judge's words. Whatever the kernel printed or reported for a test cell is discarded.
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from course.checks.check import GRADE_ID_PREFIX, Check, checks_of
from course.checks.compare import CheckFailed, wrap
from course.checks.evidence import FOLDER, BadEvidence, read

#: cell metadata key holding the verdict (kept by nbgrader, read by the grader's report)
METADATA_KEY = "judge"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str = ""
    mistake: str | None = None  # id of the catalogued mistake the judge recognised


def checks_module(assignment: str) -> ModuleType:
    """The checks of an assignment: course.checks.<name> for the assignment NN_<name>."""
    return importlib.import_module(f"course.checks.{assignment.split('_', 1)[1]}")


def check_for(assignment: str, grade_id: str) -> Check | None:
    if not grade_id.startswith(GRADE_ID_PREFIX):
        return None
    return checks_of(checks_module(assignment)).get(grade_id.removeprefix(GRADE_ID_PREFIX))


def judge(check: Check, evidence_root: Path) -> Verdict:
    """Judge one check's record under evidence_root; never raises."""
    try:
        evidence = read(evidence_root / check.name, check.name)
    except BadEvidence as problem:
        return Verdict(False, f"This test has no usable evidence, so it scores 0: {problem}.", "bad-evidence")
    except Exception as problem:  # noqa: BLE001 - whatever a record does to the reader, the batch goes on
        return Verdict(False, f"This test's evidence could not be read ({type(problem).__name__}), so it scores 0.",
                       "bad-evidence")
    try:
        check.judge(evidence)
    except CheckFailed as failure:
        return Verdict(False, str(failure), failure.mistake)
    except Exception as problem:  # noqa: BLE001 - a record built to trip the judge fails only its own test
        return Verdict(False, f"The judge could not make sense of this test's evidence "
                              f"({type(problem).__name__}: {str(problem)[:200]}), so it scores 0.", "bad-evidence")
    return Verdict(True)


def verdict_outputs(verdict: Verdict, check: Check | None) -> list:
    """The outputs a judged test cell shows: a line saying it passed, or the judge's diagnosis as an error."""
    if verdict.passed:
        summary = (check.__doc__ or "").strip().splitlines()[0] if check and check.__doc__ else ""
        return [new_output("stream", name="stdout", text=wrap(f"Passed. {summary}".strip()) + "\n")]
    return [new_output("error", ename="CheckFailed", evalue=verdict.message,
                       traceback=["CheckFailed:", verdict.message])]  # as CheckFailed._render_traceback_


class ClearEvidence(NbGraderPreprocessor):
    """Before the kernel runs: remove any evidence folder, so every record judged was written by this run."""

    def preprocess(self, nb, resources):
        folder = Path((resources.get("metadata") or {}).get("path") or ".") / FOLDER
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
        elif folder.exists():
            shutil.rmtree(folder)
        return nb, resources


class JudgeEvidence(NbGraderPreprocessor):
    """After the kernel ran: every test cell's outputs become its judge's verdict on the recorded evidence."""

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        root = Path((resources.get("metadata") or {}).get("path") or ".") / FOLDER
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade"):
                continue
            check = check_for(assignment, meta.get("grade_id", ""))
            if check is None:
                verdict = Verdict(False, f"No check of {assignment} belongs to the test cell {meta.get('grade_id')!r}; "
                                         "the course's checks and notebook are out of step.", "no-check")
            else:
                verdict = judge(check, root)
            cell.outputs = verdict_outputs(verdict, check)
            cell.metadata[METADATA_KEY] = {"passed": verdict.passed, "mistake": verdict.mistake}
        return nb, resources
