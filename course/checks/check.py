"""A check is a probe and a judge.

``probe(student, rec)`` runs the student's code on inputs the check chooses and records plain data in ``rec``
(a :class:`~course.checks.evidence.Recorder`). ``judge(evidence)`` decides from that data alone: it recomputes
inputs and oracles from the same seeds and raises CheckFailed with a diagnosis, or returns. Probes live in
course/checks/ (what the student's kernel imports), judges in course/judges/ (hidden from the kernel under grading).

In a notebook, ``check.NAME(student_code, device)`` probes and then judges in the kernel, so a student sees the
verdict at once (also under ``nbgrader validate``). Under grading (``NBGRADER_EXECUTION=autograde``) the kernel
only probes and writes the evidence to ``.evidence/NAME/``; the grader judges it in its own process
(``autograder.judging``), and the test cell's score and message are the judge's.

The test cell whose grade_id is ``test_NAME`` calls exactly the check ``NAME``. A check with prerequisites
(course/checks/kinds.py's AfterPrerequisites) also says, when it fails, which earlier exercise that the tested code
uses does not pass its own tests yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from course.checks.compare import CheckFailed, wrap
from course.checks.evidence import FOLDER, Evidence, Recorder, prerequisite_key, write

GRADE_ID_PREFIX = "test_"


def when_graded(what: str) -> None:
    """Print what a hidden-test cell checks: its tests are removed from the notebook you work on and run when your
    notebook is graded."""
    print(wrap(f"Checked when your notebook is graded: {what}"))


class AwaitingJudge(Exception):
    """Raised by a test cell under grading: its evidence is written and only the grader's judge decides (a cell no
    judge replaced, under nbgrader without the course's configuration, scores 0 rather than passing unjudged)."""


def recording() -> bool:
    """True while nbgrader autogrades: the kernel records evidence and leaves the verdict to the grader."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


class Check:
    """One test: a probe that runs student code, and the name of the judge that decides from the evidence alone.

    The probe lives here, in course/checks/<assignment>.py, which the student's kernel imports. The judge lives in
    course/judges/<assignment>.py (registered with ``course.judges.judge(name)``), which the grading sandbox hides:
    nothing the kernel can import under grading holds an oracle or a reference computation. ``check.judge`` finds
    the judge when it is first asked for, so merely probing never imports the judges."""

    def __init__(self, name: str, probe: Callable[[Any, Recorder], None]):
        self.name = name
        self._probe = probe

    @property
    def module(self) -> str:
        """The module of course/checks that binds this check under its name (imported by then: a check is used
        through it); outside the course (the worked example of docs/contributors.md), a module named `checks` that
        binds it."""
        homes = [name for name, found in list(sys.modules.items())
                 if name.startswith("course.checks.") and getattr(found, self.name, None) is self]
        homes = homes or [name for name, found in list(sys.modules.items())
                          if name.rsplit(".", 1)[-1] == "checks" and getattr(found, self.name, None) is self]
        if len(homes) != 1:
            raise LookupError(f"the check {self.name!r} is bound under its name in {len(homes)} modules of "
                              f"course/checks, not one ({', '.join(homes)})")
        return homes[0].rsplit(".", 1)[-1]

    @cached_property
    def judge(self) -> Callable[[Evidence], None]:
        """The judge of this check (imported from course.judges on first use; not importable under grading)."""
        return self._found_judge()

    def _found_judge(self) -> Callable[[Evidence], None]:
        from course.judges import judge_of  # noqa: PLC0415 - only the judging side may import the judges

        return judge_of(self.module, self.name)

    @property
    def passed(self) -> str:
        """What a passing test says after "Passed.": the judge's declared pass message (course/judges/kinds.py),
        else the first line of its docstring."""
        declared = getattr(self.judge, "passed", None)
        return declared or (self.judge.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ").strip()

    @property
    def __doc__(self) -> str:  # type: ignore[override]
        """What the test checks: its pass message."""
        return self.passed

    def probe(self, student: Any, rec: Recorder) -> None:
        """Run the student's code and record what it gives."""
        self._probe(student, rec)

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


# ------------------------------------------------------------------------------------------- earlier exercises

#: (the name an earlier exercise defines in the notebook, its exercise number, the checks that test it)
Prerequisite = tuple[str, int, tuple["Check", ...]]


def record_prerequisites(rec: Recorder, found: Any, prerequisites: tuple[Prerequisite, ...]) -> None:
    """Record each prerequisite's checks on the part of that name in found (the namespace the tested code is built
    in), under prerequisite_key(check); a check whose probe breaks is left out."""
    for part_name, _, checks in prerequisites if isinstance(found, dict) else ():
        for check in checks if callable(found.get(part_name)) else ():
            try:
                sub = check.record(found[part_name], rec.device)
            except Exception:  # noqa: BLE001, S112 - a prerequisite that breaks its probe is simply not reported
                continue
            prefix = prerequisite_key(check.name)
            rec.fact(prefix, True)
            rec.evidence.facts.update({f"{prefix}.{key}": value for key, value in sub.facts.items()})
            rec.evidence.tensors.update({f"{prefix}.{key}": value for key, value in sub.tensors.items()})


def noting_prerequisites(judge: Callable[[Evidence], None], prerequisites: tuple[Prerequisite, ...],
                         user: str) -> Callable[[Evidence], None]:
    """judge, whose failures also name the earlier exercises whose own checks fail on the recorded parts."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        try:
            judge(ev)
        except CheckFailed as failure:
            notes = [f"your {part_name} (exercise {exercise}) does not pass its own tests yet"
                     for part_name, exercise, checks in prerequisites if any(_fails(check, ev) for check in checks)]
            if not notes:
                raise
            raise CheckFailed(f"{failure}\n\nNote: {' and '.join(notes)}, and {user} is built from it. Fix that "
                              "first; this test may then pass too.", failure.mistake) from None

    judged.__doc__ = judge.__doc__
    judged.passed = getattr(judge, "passed", None)
    return judged


def _fails(check: Check, ev: Evidence) -> bool:
    """True when check's judge fails its record in ev (made by record_prerequisites); a record that trips the judge
    otherwise says nothing."""
    prefix = prerequisite_key(check.name)
    if ev.facts.get(prefix) is not True:
        return False
    start = prefix + "."
    try:
        check.judge(Evidence(check.name, ev.device,
                             {k[len(start):]: v for k, v in ev.tensors.items() if k.startswith(start)},
                             {k[len(start):]: v for k, v in ev.facts.items() if k.startswith(start)}))
    except CheckFailed:
        return True
    except Exception:  # noqa: BLE001 - a record that trips a prerequisite judge says nothing
        return False
    return False
