"""A check is a probe and a judge.

``probe(student, rec)`` runs the student's code on inputs the check chooses and records plain data in ``rec``
(a :class:`~course.checks.evidence.Recorder`). ``judge(evidence)`` decides from that data alone: it recomputes
inputs and oracles from the same seeds and raises CheckFailed with a diagnosis, or returns.

In a notebook, ``check.NAME(student_code, device)`` probes and then judges in the kernel, so a student sees the
verdict at once (also under ``nbgrader validate``). Under grading (``NBGRADER_EXECUTION=autograde``) the kernel
only probes and writes the evidence to ``.evidence/NAME/``; the grader judges it in its own process
(``autograder.judging``), and the test cell's score and message are the judge's.

The test cell whose grade_id is ``test_NAME`` calls exactly the check ``NAME``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from course.checks.evidence import FOLDER, Evidence, Recorder, write

GRADE_ID_PREFIX = "test_"


class AwaitingJudge(Exception):
    """Raised by a test cell under grading: its evidence is written and only the grader's judge decides.

    If no judge replaced this cell's result (nbgrader run without the course's configuration), the cell
    scores 0 rather than passing unjudged."""


def recording() -> bool:
    """True while nbgrader autogrades: the kernel records evidence and leaves the verdict to the grader."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


class Check:
    """One test: a probe that runs student code and a judge that decides from the evidence alone."""

    def __init__(self, name: str, probe: Callable[[Any, Recorder], None], judge: Callable[[Evidence], None],
                 doc: str = ""):
        self.name = name
        self.probe = probe
        self.judge = judge
        self.__doc__ = doc or (judge.__doc__ or "")

    @property
    def grade_id(self) -> str:
        return GRADE_ID_PREFIX + self.name

    def record(self, student: Any, device: torch.device | str = "cpu") -> Evidence:
        """Run the probe on the student's code and return what it recorded."""
        rec = Recorder(self.name, device)
        self.probe(student, rec)
        return rec.evidence

    def __call__(self, student: Any, device: torch.device | str = "cpu") -> None:
        __tracebackhide__ = True
        evidence = self.record(student, device)
        if recording():
            write(evidence, Path.cwd() / FOLDER / self.name)
            raise AwaitingJudge(f"Evidence for {self.name} is recorded; the grader's judge decides this test.")
        self.judge(evidence)

    def __repr__(self) -> str:
        return f"Check({self.name!r})"


def checks_of(module: Any) -> dict[str, Check]:
    """name -> Check for every check a checks module defines."""
    return {name: value for name, value in vars(module).items() if isinstance(value, Check)}
