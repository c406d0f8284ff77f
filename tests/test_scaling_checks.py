"""Assignment 03's checks: the course's reference passes all of them, and typical mistakes are named."""

import math

import pytest
import torch
import torch.nn.functional as F

from course import attention as reference
from course.checks import scaling
from course.checks.compare import CheckFailed


def _sdpa_with(scale=None, fill=float("-inf"), invert=False, zero_empty_rows=True):
    def sdpa(q, k, v, mask=None):
        d = q.shape[-1]
        scores = q @ k.transpose(-2, -1) / (math.sqrt(d) if scale is None else scale(d, v.shape[-1]))
        if mask is not None:
            allowed = ~mask if invert else mask
            scores = scores.masked_fill(~allowed, fill)
        w = F.softmax(scores, dim=-1)
        if mask is not None and zero_empty_rows:
            w = w.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return w @ v, w
    return sdpa


def test_missing_scaling_is_diagnosed():
    with pytest.raises(CheckFailed, match="scores are not scaled"):
        scaling.sdpa_by_hand(_sdpa_with(scale=lambda d, dv: 1.0))


def test_dividing_by_d_is_diagnosed():
    with pytest.raises(CheckFailed, match="divided by d"):
        scaling.sdpa_by_hand(_sdpa_with(scale=lambda d, dv: d))


def test_scaling_by_the_value_size_is_diagnosed():
    with pytest.raises(CheckFailed, match="square root of the value size"):
        scaling.sdpa_by_hand(_sdpa_with(scale=lambda d, dv: math.sqrt(dv)))


def test_inverted_mask_is_diagnosed():
    with pytest.raises(CheckFailed, match="mask is inverted"):
        scaling.sdpa_masks_by_hand(_sdpa_with(invert=True))


def test_masking_with_zero_is_diagnosed():
    with pytest.raises(CheckFailed, match="set to 0 instead of −∞"):
        scaling.sdpa_masks_by_hand(_sdpa_with(fill=0.0))


def test_nan_in_a_fully_masked_row_is_diagnosed():
    with pytest.raises(CheckFailed, match="returns NaN for a query that may attend to nothing"):
        scaling.sdpa_fully_masked_row(_sdpa_with(zero_empty_rows=False))


def test_a_finite_fill_without_zeroing_empty_rows_is_diagnosed():
    with pytest.raises(CheckFailed, match="equal weights on every key"):
        scaling.sdpa_fully_masked_row(_sdpa_with(fill=-1e9, zero_empty_rows=False))


def test_nan_gradients_from_an_additive_mask_are_diagnosed():
    def additive(q, k, v, mask=None):
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
        w = torch.nan_to_num(F.softmax(scores, dim=-1), nan=0.0)
        return w @ v, w

    scaling.sdpa_fully_masked_row(additive)  # the forward pass is right ...
    with pytest.raises(CheckFailed, match="NaN gradients"):  # ... the backward pass is not
        scaling.sdpa_passes_gradients(additive)


def test_module_without_the_mask_is_diagnosed():
    class Ignores(reference.ScaledSelfAttention):
        def forward(self, x, mask=None):
            return super().forward(x)

    with pytest.raises(CheckFailed, match="later positions leak through the mask"):
        scaling.module_is_causal_with_a_causal_mask(Ignores)
