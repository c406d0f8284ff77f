"""The judges: what decides a test from the evidence its probe recorded, with the oracles and the typical mistakes.

course/judges/<assignment>.py holds the mistakes its judges can name, the oracles and one judge per check of
course/checks/<assignment>.py, registered with :func:`judge`. A mistake is written as the code a student writes, with
its message beside it (variants.py: an edit of the reference answer, a rewrite, or WRITTEN.mistake for one the judge
names without running a variant). The grading sandbox hides this package from the student's kernel: the grader judges
in its own process (autograder/judging.py); while a student works, a test cell imports its judge from here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from course.checks.evidence import Evidence

Judge = Callable[[Evidence], None]
_JUDGES: dict[tuple[str, str], Judge] = {}


def judge(check: str) -> Callable[[Judge], Judge]:
    """Register the decorated function as the judge of the check named `check` in this module's assignment."""

    def register(fn: Judge) -> Judge:
        key = (fn.__module__.rsplit(".", 1)[-1], check)
        if key in _JUDGES:
            raise ValueError(f"two judges for the check {check!r} in {fn.__module__}")
        _JUDGES[key] = fn
        return fn

    return register


def judge_of(module: str, check: str) -> Judge:
    """The judge of check `check` of course/checks/<module>.py (imported from course/judges/<module>.py unless it is
    registered already, as the worked example's judge of tests/example_check/ is)."""
    if (module, check) not in _JUDGES:
        importlib.import_module(f"{__name__}.{module}")
    try:
        return _JUDGES[module, check]
    except KeyError:
        raise LookupError(f"course/judges/{module}.py registers no judge for the check {check!r}") from None


def judged(module: str) -> set[str]:
    """Names of the checks course/judges/<module>.py has judges for."""
    importlib.import_module(f"{__name__}.{module}")
    return {name for (mod, name) in _JUDGES if mod == module}

