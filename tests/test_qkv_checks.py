"""Assignment 02's checks beyond the catalogue: the reference passes them, forged records fail every judge."""

import warnings

import pytest
import torch

from course import qkv as reference
from course.checks import qkv
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = checks_of(qkv)


def _answer(name: str):
    return reference.attention if name.startswith("attention") else reference.SelfAttentionQKV


def _record(name: str) -> Evidence:
    return CHECKS[name].record(_answer(name), "cpu")


def _forged(name: str, change) -> Evidence:
    honest = _record(name)
    return Evidence(name, "cpu", {key: change(key, t) for key, t in honest.tensors.items()}, dict(honest.facts))


def test_every_check_has_a_reference_answer():
    assert len(CHECKS) == 6


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
    """Every output the same constant: a permutation or identical values change nothing, so every property holds;
    only the anchor can catch it."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: torch.full_like(t, 0.25)))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_other_weights_fail(name):
    """Outputs of a real computation, but not on the judge's inputs or weights (a little noise on each)."""
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(name, lambda key, t: t + 0.01 * torch.randn(t.shape, generator=torch.Generator()
                                                                              .manual_seed(len(key)))))


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_malformed_facts_fail_plainly(name):
    honest = _record(name)
    forged = Evidence(name, "cpu", dict(honest.tensors), {key: "forged" for key in honest.facts})
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(forged)


def test_identical_values_alone_earn_nothing():
    """The weighted-average property holds for the values themselves; the anchor on different values fails."""
    forged = _forged("attention_weighted_average",
                     lambda key, t: t if key == "y" else torch.zeros_like(t))
    with pytest.raises(CheckFailed, match=r"it is not\sattention"):
        qkv.attention_weighted_average.judge(forged)


def test_a_claimed_structure_needs_real_outputs():
    """The reference's structure facts with an output no computation of the exercise gives earn nothing."""
    forged = _forged("self_attention_qkv_structure", lambda key, t: torch.zeros_like(t))
    with pytest.raises(CheckFailed, match=r"it is not\sself-attention"):
        qkv.self_attention_qkv_structure.judge(forged)


def test_a_claimed_layer_sharing_changes_nothing():
    """Claiming the layers are shared does not make a forged equivariant output pass."""
    forged = _forged("self_attention_qkv_equivariance", lambda key, t: torch.full_like(t, 0.25))
    forged.facts["module.shared"] = [["to_keys", "to_queries"], ["to_values", "to_queries"]]
    with pytest.raises(CheckFailed, match=r"it is not\sself-attention"):
        qkv.self_attention_qkv_equivariance.judge(forged)


def test_forged_gradients_fail():
    """The right outputs, gradients that are not autograd's."""
    forged = _forged("self_attention_qkv_oracle", lambda key, t: 2 * t if key.startswith("grad.") else t)
    with pytest.raises(CheckFailed, match="gradient"):
        qkv.self_attention_qkv_oracle.judge(forged)


def test_the_oracle_undoes_multihead_attentions_scaling():
    """nn.MultiheadAttention with √k·W_q gives the unscaled attention of the reference module."""
    module = reference.SelfAttentionQKV(5)
    w = {name: p.detach() for name, p in module.named_parameters()}
    x = torch.randn(2, 4, 5)
    with torch.no_grad():
        assert torch.allclose(qkv._module_oracle(w, x), module(x), atol=1e-5)
