"""A check is a probe and a judge.

``probe(student, rec)`` runs the student's code on inputs the check chooses and records plain data in ``rec``
(a :class:`~course.checks.evidence.Recorder`). ``judge(evidence)`` decides from that data alone: it recomputes
inputs and oracles from the same seeds and raises CheckFailed with a diagnosis, or returns. Probes live in
course/checks/ (what the student's kernel imports), judges in course/judges/ (hidden from the kernel under grading).

In a notebook, ``check.NAME(student_code, device)`` probes and then judges in the kernel, so a student sees the
verdict at once (also under ``nbgrader validate``). Under grading (``NBGRADER_EXECUTION=autograde``) the kernel
only probes and writes the evidence to ``.evidence/NAME/``; the grader judges it in its own process
(``autograder.judging``), and the test cell's score and message are the judge's.

The test cell whose grade_id is ``test_NAME`` calls exactly the check ``NAME``. A check with prerequisites also
says, when it fails, which earlier exercise that the tested code uses does not pass its own tests yet.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
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
    the judge when it is first asked for, so merely probing never imports the judges. With prerequisites, the probe
    also records their checks on the parts of those names in namespace(student) (the notebook's globals), and a
    failure notes which of them fail their own tests (user: what the tested code is called in that note)."""

    def __init__(self, name: str, probe: Callable[[Any, Recorder], None], *, prerequisites: Iterable[Prerequisite] = (),
                 namespace: Callable[[Any], Any] | None = None, user: str = ""):
        self.name = name
        self.prerequisites = tuple(prerequisites)
        self._namespace = namespace
        self._user = user
        self._probe = probe
        self._judge: Callable[[Evidence], None] | None = None

    @property
    def module(self) -> str:
        """The module of course/checks that declares this check: the one that binds it under its name."""
        return declaring_module(self)

    @property
    def judge(self) -> Callable[[Evidence], None]:
        """The judge of this check (imported from course.judges on first use; not importable under grading)."""
        if self._judge is None:
            from course.judges import judge_of  # noqa: PLC0415 - only the judging side may import the judges

            base = judge_of(self.module, self.name)
            self._judge = _noting_prerequisites(base, self.prerequisites, self._user) if self.prerequisites else base
        return self._judge

    @judge.setter
    def judge(self, value: Callable[[Evidence], None]) -> None:
        self._judge = value

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
        """Run the student's code and record what it gives (and, with prerequisites, what those give)."""
        self._probe(student, rec)
        if not self.prerequisites or self._namespace is None:
            return
        found = self._namespace(student)
        if not isinstance(found, dict):
            return
        for part_name, _, checks in self.prerequisites:
            if callable(found.get(part_name)):
                for check in checks:
                    _sub_record(rec, prerequisite_key(check.name), check, found[part_name])

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


def declaring_module(check: Check) -> str:
    """The module of course/checks that binds check under its name (imported by then: a check is used through it);
    outside the course (the worked example of docs/contributors.md), a module named `checks` that binds it."""
    homes = [name for name, found in list(sys.modules.items())
             if name.startswith("course.checks.") and getattr(found, check.name, None) is check]
    homes = homes or [name for name, found in list(sys.modules.items())
                      if name.rsplit(".", 1)[-1] == "checks" and getattr(found, check.name, None) is check]
    if len(homes) != 1:
        raise LookupError(f"the check {check.name!r} is bound under its name in {len(homes)} modules of course/checks, "
                          f"not one ({', '.join(homes)})")
    return homes[0].rsplit(".", 1)[-1]


def checks_of(module: Any) -> dict[str, Check]:
    """name -> Check for every check a checks module defines."""
    return {name: value for name, value in vars(module).items() if isinstance(value, Check)}


# ------------------------------------------------------------------------------------------- earlier exercises

#: (the name an earlier exercise defines in the notebook, its exercise number, the checks that test it)
Prerequisite = tuple[str, int, tuple["Check", ...]]


def _noting_prerequisites(judge: Callable[[Evidence], None], prerequisites: tuple[Prerequisite, ...],
                          user: str) -> Callable[[Evidence], None]:
    """judge, whose failures also name the earlier exercises whose own checks fail on the recorded parts."""

    def note(ev: Evidence) -> str:
        notes = []
        for part_name, exercise, checks in prerequisites:
            for check in checks:
                sub = _sub_evidence(ev, prerequisite_key(check.name), check)
                if sub is None:
                    continue
                try:
                    check.judge(sub)
                except CheckFailed:
                    notes.append(f"your {part_name} (exercise {exercise}) does not pass its own tests yet")
                    break
                except Exception:  # noqa: BLE001, S112 - a record that trips a prerequisite judge says nothing
                    continue
        return (f"Note: {' and '.join(notes)}, and {user} is built from it. Fix that first; this test may then pass "
                "too.") if notes else ""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        try:
            judge(ev)
        except CheckFailed as failure:
            text = note(ev)
            if not text:
                raise
            raise CheckFailed(f"{failure}\n\n{text}", failure.mistake) from None

    judged.__doc__ = judge.__doc__
    judged.passed = getattr(judge, "passed", None)
    return judged


def _sub_record(rec: Recorder, prefix: str, check: Check, part: Any) -> None:
    """Probe another check on part and keep its record under prefix (read back with _sub_evidence)."""
    try:
        sub = check.record(part, rec.device)
    except Exception:  # noqa: BLE001 - a prerequisite that breaks its probe is simply not reported
        return
    rec.fact(prefix, True)
    for key, value in sub.facts.items():
        rec.evidence.facts[f"{prefix}.{key}"] = value
    for key, value in sub.tensors.items():
        rec.evidence.tensors[f"{prefix}.{key}"] = value


def _sub_evidence(ev: Evidence, prefix: str, check: Check) -> Evidence | None:
    if ev.facts.get(prefix) is not True:
        return None
    start = prefix + "."
    return Evidence(check.name, ev.device, {k[len(start):]: v for k, v in ev.tensors.items() if k.startswith(start)},
                    {k[len(start):]: v for k, v in ev.facts.items() if k.startswith(start)})
