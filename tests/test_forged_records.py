"""Forged evidence earns nothing, for every check of every assignment.

Each check's honest record is what its probe wrote for the solution notebook (tests/replay.py). A forger can
write any record it likes, so every judge must refuse: an empty record; the honest facts (structure, shapes,
flags) with outputs that no computation of the exercise on the judge's inputs gives (zeros, a constant, a little
noise); garbage facts; and, where a check records gradients, gradients that are not autograd's. A refusal is a
CheckFailed with a message, never another exception.
"""

import dataclasses

import pytest
import torch
from conftest import ASSIGNMENTS
from forgery import check, forged, honest_records

from autograder.judging import checks_module
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = [(assignment, name) for assignment in ASSIGNMENTS for name in sorted(checks_of(checks_module(assignment)))]


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
    assert name in honest_records(assignment), f"the solution of {assignment} wrote no record for {name}"
    check(assignment, name).judge(honest_records(assignment)[name])


@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_an_empty_record_fails(assignment, name):
    with pytest.raises(CheckFailed):
        check(assignment, name).judge(Evidence(name))


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_the_right_facts_with_forged_outputs_fail(assignment, name, forgery):
    with pytest.raises(CheckFailed):
        check(assignment, name).judge(forged(assignment, name, FORGERIES[forgery]))


@pytest.mark.parametrize("assignment,name", CHECKS, ids=[_ids(c) for c in CHECKS])
def test_malformed_facts_fail_plainly(assignment, name):
    honest = honest_records(assignment)[name]
    garbage = dataclasses.replace(honest, tensors=dict(honest.tensors), facts={key: "forged" for key in honest.facts})
    with pytest.raises(CheckFailed):
        check(assignment, name).judge(garbage)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_forged_gradients_fail(assignment):
    """The honest outputs with every recorded gradient doubled, for each check that records gradients."""
    with_gradients = [name for name, ev in honest_records(assignment).items()
                      if any(k.startswith("grad.") for k in ev.tensors)]
    assert with_gradients, f"no check of {assignment} records gradients"
    for name in with_gradients:
        with pytest.raises(CheckFailed, match="gradient"):
            doubled = forged(assignment, name, lambda key, t: 2 * t if key.startswith("grad.") else t)
            check(assignment, name).judge(doubled)
