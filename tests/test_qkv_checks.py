"""Assignment 02's checks: what the catalogue and the generic forgeries (test_forged_records.py) do not cover."""

import forgery
import pytest
import torch

from course import qkv as reference
from course.checks import qkv
from course.checks.compare import CheckFailed
from course.judges import qkv as qkv_judges

A = "02_qkv"


def test_identical_values_alone_earn_nothing():
    """The weighted-average property holds for the values themselves; the anchor on different values fails."""
    forged = forgery.forged(A, "attention_weighted_average",
                     lambda key, t: t if key == "y" else torch.zeros_like(t))
    with pytest.raises(CheckFailed, match=r"it is not\sattention"):
        qkv.attention_weighted_average.judge(forged)


def test_a_claimed_structure_needs_real_outputs():
    """The reference's structure facts with an output no computation of the exercise gives earn nothing."""
    forged = forgery.forged(A, "self_attention_qkv_structure", lambda key, t: torch.zeros_like(t))
    with pytest.raises(CheckFailed, match=r"it is not\sself-attention"):
        qkv.self_attention_qkv_structure.judge(forged)


def test_a_claimed_layer_sharing_changes_nothing():
    """Claiming the layers are shared does not make a forged equivariant output pass."""
    forged = forgery.forged(A, "self_attention_qkv_equivariance", lambda key, t: torch.full_like(t, 0.25))
    forged.facts["module.shared"] = [["to_keys", "to_queries"], ["to_values", "to_queries"]]
    with pytest.raises(CheckFailed, match=r"it is not\sself-attention"):
        qkv.self_attention_qkv_equivariance.judge(forged)


def test_the_oracle_undoes_multihead_attentions_scaling():
    """nn.MultiheadAttention with √k·W_q gives the unscaled attention of the reference module."""
    module = reference.SelfAttentionQKV(5)
    w = {name: p.detach() for name, p in module.named_parameters()}
    x = torch.randn(2, 4, 5)
    with torch.no_grad():
        assert torch.allclose(qkv_judges._qkv_oracle(w, x), module(x), atol=1e-5)
