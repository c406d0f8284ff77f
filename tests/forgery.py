"""Honest evidence records and forgeries of them, for tests of what a judge refuses.

An honest record is what a check's probe wrote for the solution notebook (replayed in-process, tests/replay.py).
"""

import dataclasses
import warnings
from collections.abc import Callable
from functools import cache

import torch
from replay import records

from autograder import course_dir
from autograder.judging import checks_module
from course.checks.check import Check, checks_of
from course.checks.evidence import Evidence


@cache
def honest_records(assignment: str) -> dict[str, Evidence]:
    """check name -> the solution's record, probed with warnings as errors: a warning in a test cell goes to
    stderr, and nbgrader scores such a cell 0 however it passed."""
    found: dict[str, Evidence] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for notebook in course_dir.notebooks(assignment):
            found.update(records(assignment, notebook))
    return found


def check(assignment: str, name: str) -> Check:
    return checks_of(checks_module(assignment))[name]


def honest(assignment: str, name: str) -> Evidence:
    """A fresh copy of the solution's record of one check (tests may change it freely)."""
    ev = honest_records(assignment)[name]
    return dataclasses.replace(ev, tensors=dict(ev.tensors), facts=dict(ev.facts))


def forged(assignment: str, name: str, change: Callable[[str, torch.Tensor], torch.Tensor]) -> Evidence:
    """The solution's record of one check with every tensor replaced by change(key, tensor)."""
    ev = honest(assignment, name)
    return dataclasses.replace(ev, tensors={key: change(key, t) for key, t in ev.tensors.items()})
