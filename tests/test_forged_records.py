"""Forged evidence earns nothing, for every check of every assignment.

Each check's honest record is what its probe wrote for the solution notebook (tests/replay.py). A forger can
write any record it likes, so every judge must refuse: an empty record; the honest facts (structure, shapes,
flags) with outputs that no computation of the exercise on the judge's inputs gives (zeros, a constant, a little
noise); garbage facts; and, where a check records gradients, gradients that are not autograd's. A refusal is a
CheckFailed with a message, never another exception.
"""

import dataclasses
import warnings
from functools import cache

import pytest
import torch
from conftest import ASSIGNMENTS
from replay import records

from autograder import course_dir
from autograder.judging import checks_module
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = [(assignment, name) for assignment in ASSIGNMENTS for name in sorted(checks_of(checks_module(assignment)))]


@cache
def _honest(assignment: str) -> dict[str, Evidence]:
    """The solution's records, probed with warnings as errors: a warning in a test cell goes to stderr, and
    nbgrader scores such a cell 0 however it passed."""
    found: dict[str, Evidence] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for notebook in course_dir.notebooks(assignment):
            found.update(records(assignment, notebook))
    return found


def _judge(assignment: str, name: str, evidence: Evidence) -> None:
    checks_of(checks_module(assignment))[name].judge(evidence)


def _forged(assignment: str, name: str, change) -> Evidence:
    honest = _honest(assignment)[name]
    return dataclasses.replace(honest, tensors={key: change(key, t) for key, t in honest.tensors.items()},
                               facts=dict(honest.facts))


def _noise(key: str, t: torch.Tensor) -> torch.Tensor:
    """A little noise on real values; the next token id or the flipped flag on integer and boolean ones."""
    if t.dtype == torch.bool:
        return ~t
    if not t.is_floating_point():
        return t + 1
    generator = torch.Generator().manual_seed(len(key))
    return t + 0.01 * torch.randn(t.shape, generator=generator).to(t.dtype)


FORGERIES = {
    "zeros": lambda key, t: torch.zeros_like(t),
    "constant": lambda key, t: torch.full_like(t, 0.25) if t.is_floating_point() else torch.ones_like(t),
    "noise": _noise,
}


def _ids(case):
    return f"{case[0]}:{case[1]}"


@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_every_check_has_an_honest_record_that_passes(assignment, name):
    assert name in _honest(assignment), f"the solution of {assignment} wrote no record for {name}"
    _judge(assignment, name, _honest(assignment)[name])


@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_an_empty_record_fails(assignment, name):
    with pytest.raises(CheckFailed):
        _judge(assignment, name, Evidence(name))


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_the_right_facts_with_forged_outputs_fail(assignment, name, forgery):
    with pytest.raises(CheckFailed):
        _judge(assignment, name, _forged(assignment, name, FORGERIES[forgery]))


@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_malformed_facts_fail_plainly(assignment, name):
    honest = _honest(assignment)[name]
    forged = dataclasses.replace(honest, tensors=dict(honest.tensors), facts={key: "forged" for key in honest.facts})
    with pytest.raises(CheckFailed):
        _judge(assignment, name, forged)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_forged_gradients_fail(assignment):
    """The honest outputs with every recorded gradient doubled, for each check that records gradients."""
    with_gradients = [name for name, ev in _honest(assignment).items()
                      if any(k.startswith("grad.") for k in ev.tensors)]
    assert with_gradients, f"no check of {assignment} records gradients"
    for name in with_gradients:
        with pytest.raises(CheckFailed, match="gradient"):
            _judge(assignment, name, _forged(assignment, name, lambda key, t: 2 * t if key.startswith("grad.") else t))
