"""Assignment 04's checks beyond the catalogue: the reference passes them, forged records fail every judge."""

import warnings

import pytest
import torch

from course import multi_head as reference
from course.checks import multi_head
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = checks_of(multi_head)


def _answer(name: str):
    if name.startswith("split_heads"):
        return reference.split_heads
    if name.startswith("merge_heads"):
        return reference.merge_heads
    return reference.WideMultiHeadAttention if name.startswith("wide") else reference.MultiHeadAttention


def _record(name: str) -> Evidence:
    return CHECKS[name].record(_answer(name), "cpu")


def _forged(name: str, change) -> Evidence:
    honest = _record(name)
    return Evidence(name, "cpu", {key: change(key, t) for key, t in honest.tensors.items()}, dict(honest.facts))


def test_every_check_has_a_reference_answer():
    assert len(CHECKS) == 13


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_reference_passes_without_warnings(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CHECKS[name](_answer(name), "cpu")


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_an_empty_record_fails(name):
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(Evidence(name))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_zeros_fail(name):
    """Structure facts, shapes and flags of the reference, every recorded tensor zero."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: torch.zeros_like(t)))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_uniform_outputs_fail(name):
    """Every output the same constant: unchanged by the context, the mask or a changed input, so every property
    holds; only the anchor can catch it."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: torch.full_like(t, 0.25)))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_other_weights_fail(name):
    """Outputs of a real computation, but with weights the judge did not choose (a little noise on each)."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: t + 0.01 * torch.randn(t.shape, generator=torch.Generator()
                                                                              .manual_seed(len(key)))))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_malformed_facts_fail_plainly(name):
    honest = _record(name)
    forged = Evidence(name, "cpu", dict(honest.tensors), {key: "forged" for key in honest.facts})
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(forged)


def test_forged_gradients_fail():
    """The right outputs and a small matrix-product count, gradients that are not autograd's."""
    forged = _forged("multi_head_gradients", lambda key, t: 2 * t if key.startswith("grad.") else t)
    with pytest.raises(CheckFailed, match="gradient"):
        multi_head.multi_head_gradients.judge(forged)


def test_a_claimed_refusal_of_indivisible_heads_needs_a_real_module():
    """A record saying MultiHeadAttention(10, 4) raised, with a forged output, earns nothing."""
    forged = _forged("multi_head_indivisible", lambda key, t: torch.zeros_like(t))
    assert forged.facts["indivisible"]["kind"] == "raised"
    with pytest.raises(CheckFailed, match="it is not multi-head attention"):
        multi_head.multi_head_indivisible.judge(forged)


def test_matmul_count_of_the_reference_is_well_below_the_limit():
    module = reference.MultiHeadAttention(16, 8)
    y = module(torch.randn(2, 5, 16, requires_grad=True))
    assert multi_head.count_matmuls(y) <= 7 < multi_head.MAX_MATMULS
