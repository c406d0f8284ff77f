"""Assignment 03's checks: what the catalogue and the generic forgeries (test_forged_records.py) do not cover."""

import forgery
import pytest
import torch

from course.checks import scaling
from course.checks.compare import CheckFailed

A = "03_scaling"


def test_a_causal_module_needs_a_real_output():
    """Outputs with the causal property (and that change without a mask) but not attention earn nothing."""
    def change(key, t):
        if not key.startswith("y"):
            return t
        return torch.cumsum(torch.ones_like(t), dim=1) + (key == "y_free_changed")

    with pytest.raises(CheckFailed, match="it is not scaled self-attention"):
        scaling.scaled_self_attention_causal.judge(forgery.forged(A, "scaled_self_attention_causal", change))
