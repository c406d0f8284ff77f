"""Where a check's random inputs come from: fixed seeds while a student works, secret ones under grading.

Every input and weight a probe draws goes through :func:`salted`. Without a grading seed it returns the seed as
written, so a student sees the same cases and messages every time. Under grading the grader derives a seed from a
course secret and the submission (autograder/secrets.py) and gives it to the kernel (``COURSE_GRADING_SEED``) and
to the judge (:func:`grading_seed`, never read from the record), so outputs memorised in advance match nothing,
while a regrade of the same submission draws the same inputs again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator

ENV = "COURSE_GRADING_SEED"
_UNSET = object()
_judging: object = _UNSET  # the seed the grader's judge uses, set by grading_seed(); beats the environment


def current() -> int | None:
    """The grading seed in force: the judge's (set by the grader), else the kernel's while it records evidence
    under nbgrader's autograde, else None (fixed seeds)."""
    if _judging is not _UNSET:
        return _judging  # type: ignore[return-value]
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        value = os.environ.get(ENV, "")
        if value.isdigit():
            return int(value)
    return None


def salted(seed: int) -> int:
    """seed itself without a grading seed; under grading a 62-bit number derived from both."""
    secret = current()
    if secret is None:
        return int(seed)
    digest = hashlib.sha256(f"{secret}:{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (1 << 62)


@contextlib.contextmanager
def grading_seed(seed: int | None) -> Iterator[None]:
    """Judge (in the grader's process) with this grading seed; None: the fixed seeds a student's kernel uses."""
    global _judging
    before, _judging = _judging, seed
    try:
        yield
    finally:
        _judging = before


def grading() -> bool:
    """True under grading with a secret seed: probes then add a secret case even to the checks worked by hand (whose
    inputs the notebook shows), and judges expect it."""
    return current() is not None
