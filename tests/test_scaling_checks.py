"""Assignment 03's checks beyond the catalogue: the reference passes them, forged records fail every judge."""

import warnings

import pytest
import torch

from course import scaling as reference
from course.checks import scaling
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = checks_of(scaling)


def _answer(name: str):
    return reference.ScaledSelfAttention if name.startswith("scaled_self_attention") \
        else reference.scaled_dot_product_attention


def _record(name: str) -> Evidence:
    return CHECKS[name].record(_answer(name), "cpu")


def _forged(name: str, change) -> Evidence:
    honest = _record(name)
    return Evidence(name, "cpu", {key: change(key, t) for key, t in honest.tensors.items()}, dict(honest.facts))


def test_every_check_has_a_reference_answer():
    assert len(CHECKS) == 8


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
    """Every output the same constant: unchanged by a changed input, rows that sum to 1 where the weights have 4
    keys; only the oracle or the anchor can catch it."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: torch.full_like(t, 0.25)))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_other_values_fail(name):
    """Outputs of a real computation, a little off (other weights or inputs than the judge chose)."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: t + 0.01 * torch.randn(
            t.shape, generator=torch.Generator().manual_seed(len(key))) if t.is_floating_point() else t))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_malformed_facts_fail_plainly(name):
    honest = _record(name)
    forged = Evidence(name, "cpu", dict(honest.tensors), {key: "forged" for key in honest.facts})
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(forged)


def test_forged_gradients_fail():
    """The right outputs, gradients that are not autograd's."""
    forged = _forged("sdpa_gradients", lambda key, t: 2 * t if key.startswith("grad.") else t)
    with pytest.raises(CheckFailed, match="gradient"):
        scaling.sdpa_gradients.judge(forged)


def test_a_causal_module_needs_a_real_output():
    """Outputs with the causal property (and that change without a mask) but not attention earn nothing."""
    def change(key, t):
        if not key.startswith("y"):
            return t
        return torch.cumsum(torch.ones_like(t), dim=1) + (key == "y_free_changed")

    with pytest.raises(CheckFailed, match="it is not scaled self-attention"):
        scaling.scaled_self_attention_causal.judge(_forged("scaled_self_attention_causal", change))
