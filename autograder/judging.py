"""The verdict of every test cell, reached in the grader's process from the evidence the kernel recorded.

Under grading a test cell ``test_NAME`` only probes: the kernel writes ``.evidence/NAME/`` next to the notebook
(see course/checks/check.py). After nbgrader has executed the notebook, :class:`JudgeEvidence` reads each
record (JSON and safetensors, nothing executed), runs the check's judge on it, and replaces the cell's outputs
with the judge's verdict, so nbgrader's own SaveAutoGrades scores the cell from the judge and the feedback shows
the judge's words. Whatever the kernel printed or reported for a test cell is discarded.

Two facts come from the grader, never from the record: the grading seed the probes drew their inputs from (derived
from the course secret and the submission, autograder/secret.py) and the device the grader offered the kernel,
whose tolerance the judge applies (a record that claims a GPU on a machine without one is judged as CPU output).
A record is judged within a time limit, so a record built to make a judge work for hours fails only its own test.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Float, Unicode

from autograder import course_dir
from autograder.secret import notebook_seed
from course.checks import seeds
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
    return importlib.import_module(f"course.checks.{course_dir.module_name(assignment)}")


def judges_module(assignment: str) -> ModuleType:
    """The judges of an assignment, with the mistakes they name: course.judges.<name> for NN_<name>."""
    return importlib.import_module(f"course.judges.{course_dir.module_name(assignment)}")


def check_for(assignment: str, grade_id: str) -> Check | None:
    if not grade_id.startswith(GRADE_ID_PREFIX):
        return None
    return checks_of(checks_module(assignment)).get(grade_id.removeprefix(GRADE_ID_PREFIX))


def offered_device() -> str:
    """The device the grader offers a kernel: what course.get_device picks on this machine (COURSE_DEVICE, else CUDA,
    else the CPU: Apple's MPS only when COURSE_DEVICE names it, as course/device.py decides)."""
    import torch  # noqa: PLC0415 - the grader imports torch anyway; kept local so this module stays light to import

    chosen = os.environ.get("COURSE_DEVICE", "").strip()
    if chosen:
        return torch.device(chosen).type
    return "cuda" if torch.cuda.is_available() else "cpu"


class JudgeTimeout(Exception):
    """A judge ran past its time limit on one record."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise JudgeTimeout in this thread after seconds (only in the main thread, where signals arrive)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum, frame):
        raise JudgeTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def judge(check: Check, evidence_root: Path, *, device: str | None = None, seconds: float = 0) -> Verdict:
    """Judge one check's record under evidence_root; never raises. device: the device the grader offered (the
    record's claim counts only when it agrees; None trusts the record, as a student's own kernel does). seconds:
    the time limit of the judge on this record (0: none)."""
    try:
        evidence = read(evidence_root / check.name, check.name)
    except BadEvidence as problem:
        return Verdict(False, f"This test has no usable evidence, so it scores 0: {problem}.", "bad-evidence")
    except Exception as problem:  # noqa: BLE001 - whatever a record does to the reader, the batch goes on
        return Verdict(False, f"This test's evidence could not be read ({type(problem).__name__}), so it scores 0.",
                       "bad-evidence")
    if device is not None and evidence.device != device:
        evidence.device = "cpu"  # a claim the grader cannot confirm gets the strictest tolerance
    try:
        with _time_limit(seconds):
            check.judge(evidence)
    except JudgeTimeout:
        return Verdict(False, f"The judge needed more than {seconds:g} s for this test's evidence, far more than an "
                              "honest record takes, so it scores 0.", "bad-evidence")
    except CheckFailed as failure:
        return Verdict(False, str(failure), failure.mistake)
    except Exception as problem:  # noqa: BLE001 - a record built to trip the judge fails only its own test
        return Verdict(False, f"The judge could not make sense of this test's evidence "
                              f"({type(problem).__name__}: {str(problem)[:200]}), so it scores 0.", "bad-evidence")
    return Verdict(True)


def verdict_outputs(verdict: Verdict, check: Check | None) -> list:
    """The outputs a judged test cell shows: a line saying it passed, or the judge's diagnosis as an error."""
    if verdict.passed:
        summary = check.passed if check else ""
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

    secret = Unicode("", help="the course secret (hex); empty: autograder.secret.course_secret()").tag(config=True)
    device = Unicode("", help="the device the grader offers kernels; empty: offered_device()").tag(config=True)
    seconds = Float(60.0, help="time limit of one judge on one record, in seconds").tag(config=True)

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        with seeds.grading_seed(notebook_seed(self.secret, resources, nb)):
            return self._judge_all(nb, resources, assignment)

    def _judge_all(self, nb, resources, assignment):
        device = self.device or offered_device()
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
                verdict = judge(check, root, device=device, seconds=self.seconds)
            cell.outputs = verdict_outputs(verdict, check)
            cell.metadata[METADATA_KEY] = {"passed": verdict.passed, "mistake": verdict.mistake}
        return nb, resources
