"""Assignment 04's checks: what the catalogue and the generic forgeries (test_forged_records.py) do not cover."""

import forgery
import pytest
import torch

from course import multi_head as reference
from course.checks import multi_head
from course.checks.compare import CheckFailed
from course.judges import multi_head as judges

A = "04_multi_head"


def test_a_claimed_refusal_of_indivisible_heads_needs_a_real_module():
    """A record saying MultiHeadAttention(10, 4) raised, with a forged output, earns nothing."""
    forged = forgery.forged(A, "multi_head_indivisible", lambda key, t: torch.zeros_like(t))
    assert forged.facts["indivisible"]["kind"] == "raised"
    with pytest.raises(CheckFailed, match="it is not multi-head attention"):
        multi_head.multi_head_indivisible.judge(forged)


def test_matmul_count_of_the_reference_is_well_below_the_limit():
    module = reference.MultiHeadAttention(16, 8)
    y = module(torch.randn(2, 5, 16, requires_grad=True))
    assert multi_head.count_matmuls(y) <= 7 < judges.MAX_MATMULS
