"""Assignment 05's checks: what the catalogue and the generic forgeries (test_forged_records.py) do not cover."""

import forgery
import pytest
import torch
import torch.nn.functional as F

from course import transformer_block as reference
from course.checks import transformer_block
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence
from course.checks.kinds import Built
from course.judges import oracles
from course.judges import transformer_block as judges

A = "05_transformer_block"


def test_the_hand_example_alone_earns_nothing():
    """|x| - 1 written into the record, and no real feed-forward output on the check's own weights."""
    forged = forgery.forged(A, "feed_forward_structure", lambda key, t: t if key == "y_hand" else torch.zeros_like(t))
    with pytest.raises(CheckFailed, match="it is not the feed-forward layer"):
        transformer_block.feed_forward_structure.judge(forged)


def test_normalised_outputs_of_no_block_earn_nothing():
    """Outputs normalised per position pass the property, not the anchor."""
    noise = F.layer_norm(torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0)), (8,))
    forged = forgery.forged(A, "transformer_block_normalised", lambda key, t: noise)
    with pytest.raises(CheckFailed, match="it is not a transformer block"):
        transformer_block.transformer_block_normalised.judge(forged)


def test_shuffled_tokens_giving_one_answer_earn_nothing():
    """Order-blind logits that no classifier computes with the judge's weights."""
    forged = forgery.forged(A, "transformer_classifier_order_blind",
                     lambda key, t: torch.zeros_like(t) if key in ("y", "y_perm") else t)
    with pytest.raises(CheckFailed, match="does not match the reference"):
        transformer_block.transformer_classifier_order_blind.judge(forged)


def test_a_claimed_structure_with_other_parameter_names_needs_real_outputs():
    """Structure facts renamed (the feed-forward layers under other names): the weights are recreated by the claimed
    names, so the reference's outputs no longer match."""
    honest = forgery.honest(A, "transformer_block_oracle")
    facts = dict(honest.facts)
    for key, value in honest.facts.items():
        if key.endswith(".modules"):
            facts[key] = [{**m, "name": m["name"].replace("ff.net.", "ff.layers.")} for m in value]
        if key.endswith(".params"):
            facts[key] = [[n.replace("ff.net.", "ff.layers."), shape] for n, shape in value]
    with pytest.raises(CheckFailed):
        transformer_block.transformer_block_oracle.judge(Evidence(honest.check, "cpu", dict(honest.tensors), facts))


def test_a_claimed_number_of_heads_needs_real_outputs():
    honest = forgery.honest(A, "transformer_block_oracle")
    facts = {key: ([{**f, "heads": 1} for f in value] if key.endswith(".blocks") else value)
             for key, value in honest.facts.items()}
    with pytest.raises(CheckFailed):
        transformer_block.transformer_block_oracle.judge(Evidence(honest.check, "cpu", dict(honest.tensors), facts))


def test_the_oracle_layer_agrees_with_the_block_run_as_its_variants_run():
    """nn.TransformerEncoderLayer (the oracle) and the reference block run as the judge runs its variants (built on the
    meta device, the check's weights given by role) agree, and with norm_first so does the pre-norm variant: a
    variant's output differs from the oracle's only by its mistake."""
    honest = forgery.honest(A, "transformer_block_oracle")
    roles, w = judges._encoder_block_weights(honest, Built(key="module0", args=(12, 3, 4), seed=1400), strict=True)
    v = judges._values(roles, w)
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(1))
    (pre_norm,) = (variant for variant in judges.WRITTEN.of("TransformerBlock") if variant.mistake.id == "pre-norm")
    params = judges._layer_parameters(v)
    with torch.no_grad():
        for mask in (None, torch.ones(5, 5, dtype=torch.bool).tril()):
            oracle = judges._block(roles, None, None, w, x=x, mask=mask)
            assert (judges._run_block(None, None, v, x, mask, 3, 1e-5, 0.0) - oracle).abs().max() < 1e-5
            pre = torch.func.functional_call(oracles.encoder_layer(12, 3, 48, 1e-5, norm_first=True), params, (x,),
                                             {"src_mask": oracles.torch_mask(mask, 2, 5, 5, 3)})
            assert (judges._run_block(pre_norm, None, v, x, mask, 3, 1e-5, 0.0) - pre).abs().max() < 1e-5
            assert (pre - oracle).abs().max() > 1e-2


def test_the_oracle_is_the_reference_block():
    """The judge's encoder layer with the check's weights computes what course/transformer_block.py computes."""
    block = reference.TransformerBlock(12, 3).eval()
    honest = forgery.honest(A, "transformer_block_oracle")
    roles, w = judges._encoder_block_weights(honest, Built(key="module0", args=(12, 3, 4), seed=1400), strict=True)
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.copy_(w[name])
        x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(2))
        expected = judges._block(roles, None, None, w, x=x)
        assert (block(x) - expected).abs().max() < 1e-5
