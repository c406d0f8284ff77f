"""Assignment 05's checks beyond the catalogue: the reference passes them, forged records fail every judge."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from course import transformer_block as reference
from course.checks import transformer_block
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = checks_of(transformer_block)


def _answer(name: str):
    if name.startswith("feed_forward"):
        return reference.FeedForward
    return reference.TransformerBlock if name.startswith("transformer_block") else reference.TransformerClassifier


def _record(name: str) -> Evidence:
    return CHECKS[name].record(_answer(name), "cpu")


def _forged(name: str, change) -> Evidence:
    honest = _record(name)
    return Evidence(name, "cpu", {key: change(key, t) for key, t in honest.tensors.items()}, dict(honest.facts))


def test_every_check_has_a_reference_answer():
    assert len(CHECKS) == 10


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
    """Every output the same constant: position-wise, equivariant and order-blind, so every property holds; only
    the anchor can catch it."""
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


@pytest.mark.parametrize("name", ["transformer_block_gradients", "transformer_classifier_order_blind"])
def test_forged_gradients_fail(name):
    """The right outputs, gradients that are not autograd's."""
    with pytest.raises(CheckFailed, match="gradient"):
        CHECKS[name].judge(_forged(name, lambda key, t: 2 * t if key.startswith("grad.") else t))


def test_the_hand_example_alone_earns_nothing():
    """|x| - 1 written into the record, and no real feed-forward output on the check's own weights."""
    forged = _forged("feed_forward_structure", lambda key, t: t if key == "y_hand" else torch.zeros_like(t))
    with pytest.raises(CheckFailed, match="it is not the feed-forward layer"):
        transformer_block.feed_forward_structure.judge(forged)


def test_normalised_outputs_of_no_block_earn_nothing():
    """Outputs normalised per position pass the property, not the anchor."""
    noise = F.layer_norm(torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0)), (8,))
    forged = _forged("transformer_block_normalised", lambda key, t: noise)
    with pytest.raises(CheckFailed, match="it is not a transformer block"):
        transformer_block.transformer_block_normalised.judge(forged)


def test_shuffled_tokens_giving_one_answer_earn_nothing():
    """Order-blind logits that no classifier computes with the judge's weights."""
    forged = _forged("transformer_classifier_order_blind",
                     lambda key, t: torch.zeros_like(t) if key in ("y", "y_perm") else t)
    with pytest.raises(CheckFailed, match="does not match the reference"):
        transformer_block.transformer_classifier_order_blind.judge(forged)


def test_a_claimed_structure_with_other_parameter_names_needs_real_outputs():
    """Structure facts renamed (the feed-forward layers under other names): the weights are recreated by the claimed
    names, so the reference's outputs no longer match."""
    honest = _record("transformer_block_oracle")
    facts = dict(honest.facts)
    for key, value in honest.facts.items():
        if key.endswith(".modules"):
            facts[key] = [{**m, "name": m["name"].replace("ff.net.", "ff.layers.")} for m in value]
        if key.endswith(".params"):
            facts[key] = [[n.replace("ff.net.", "ff.layers."), shape] for n, shape in value]
    with pytest.raises(CheckFailed):
        transformer_block.transformer_block_oracle.judge(Evidence(honest.check, "cpu", dict(honest.tensors), facts))


def test_a_claimed_number_of_heads_needs_real_outputs():
    honest = _record("transformer_block_oracle")
    facts = {key: ([{**f, "heads": 1} for f in value] if key.endswith(".blocks") else value)
             for key, value in honest.facts.items()}
    with pytest.raises(CheckFailed):
        transformer_block.transformer_block_oracle.judge(Evidence(honest.check, "cpu", dict(honest.tensors), facts))


def test_the_oracle_layer_agrees_with_the_functional_block():
    """nn.TransformerEncoderLayer (the oracle, and with norm_first the pre-norm mistake) and the block written out
    with torch.nn.functional (used for the other mistakes) agree, so a mistake differs from the oracle only by the
    mistake."""
    honest = _record("transformer_block_oracle")
    roles, w = transformer_block._block_values(honest, "module0", 12, 3, 4, 1400, strict=True)
    v = transformer_block._values(roles, w)
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for mask in (None, torch.ones(5, 5, dtype=torch.bool).tril()):
            for layout in ("post", "pre-norm"):
                layer = transformer_block._block_forward(v, x, mask, 3, 1e-5, layout)
                functional = transformer_block._block_forward(v, x, mask, 3, 1e-5, layout, oracle=False)
                assert (layer - functional).abs().max() < 1e-5


def test_the_oracle_is_the_reference_block():
    """The judge's encoder layer with the check's weights computes what course/transformer_block.py computes."""
    block = reference.TransformerBlock(12, 3).eval()
    honest = _record("transformer_block_oracle")
    roles, w = transformer_block._block_values(honest, "module0", 12, 3, 4, 1400, strict=True)
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(w[name])
        x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(2))
        expected = transformer_block._block_forward(transformer_block._values(roles, w), x, None, 3, 1e-5)
        assert (block(x) - expected).abs().max() < 1e-5
