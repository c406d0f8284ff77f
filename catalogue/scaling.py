"""Variants of the answers of assignment 03_scaling."""
# ruff: noqa: F821 - variants use the notebook's names (scaled_dot_product_attention), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "03_scaling"


# ------------------------------------------------------------------ scaled_dot_product_attention: mistakes

@mistake("unscaled", "scaled_dot_product_attention")
def scaling_unscaled(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("divided-by-d", "scaled_dot_product_attention")
def scaling_divided_by_d(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / queries.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("scaled-by-value-size", "scaled_dot_product_attention")
def scaling_by_value_size(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(values.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("mask-inverted", "scaled_dot_product_attention")
def scaling_mask_inverted(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~(~mask).any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("mask-filled-with-zero", "scaled_dot_product_attention")
def scaling_mask_with_zero(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, 0.0)
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("mask-after-softmax", "scaled_dot_product_attention")
def scaling_mask_after_softmax(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ values, weights


@mistake("mask-ignored", "scaled_dot_product_attention")
def scaling_mask_ignored(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    weights = F.softmax(scores, dim=-1)
    return weights @ values, weights


@mistake("weights-are-scores", "scaled_dot_product_attention")
def scaling_raw_scores_as_weights(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return F.softmax(scores, dim=-1).nan_to_num() @ values, scores


@mistake("nan-in-empty-rows", "scaled_dot_product_attention")
def scaling_nan_in_empty_rows(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    return weights @ values, weights


@mistake("large-negative-fill", "scaled_dot_product_attention")
def scaling_large_negative_fill(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = F.softmax(scores, dim=-1)
    return weights @ values, weights


@mistake("nan-gradients", "scaled_dot_product_attention")
def scaling_additive_mask(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ values, weights


@mistake("raised", "scaled_dot_product_attention")
def scaling_transpose_1_2(queries, keys, values, mask=None):
    scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights


@mistake("softmax-over-queries", "scaled_dot_product_attention")
def scaling_softmax_over_queries(queries, keys, values, mask=None):
    w = F.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-2)
    return w @ values, w


@mistake("not-a-pair", "scaled_dot_product_attention")
def scaling_returns_output_only(queries, keys, values, mask=None):
    w = F.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-1)
    return w @ values


@mistake("no-gradient", "scaled_dot_product_attention")
def scaling_weights_detached_for_plotting(queries, keys, values, mask=None):
    """The weights detached because they are returned for plotting: the queries and keys no longer learn."""
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights = weights.detach()
    return weights @ values, weights


# ------------------------------------------------------------------ scaled_dot_product_attention: alternatives

@alternative("scaled_dot_product_attention")
def scaling_where_and_nan_to_num(queries, keys, values, mask=None):
    scores = torch.matmul(queries, keys.mT) * queries.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
    return weights @ values, weights


@alternative("scaled_dot_product_attention")
def scaling_finite_fill_and_zeroed_rows(queries, keys, values, mask=None):
    queries = queries / math.sqrt(queries.shape[-1])
    scores = torch.einsum("...qd,...kd->...qk", queries, keys)
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1) * mask.any(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kv->...qv", weights, values), weights


# ------------------------------------------------------------------ ScaledSelfAttention: mistakes

@mistake("mask-ignored", "scaled_self_attention")
class scaling_module_mask_dropped(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v)[0]


@mistake("divided-by-d", "scaled_self_attention")
class scaling_module_scaled_twice(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q / math.sqrt(q.shape[-1]), k, v, mask)[0]


@mistake("values-not-projected", "scaled_self_attention")
class scaling_module_values_not_projected(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k = self.to_queries(x), self.to_keys(x)
        return scaled_dot_product_attention(q, k, x, mask)[0]


@mistake("projection-bias", "scaled_self_attention")
class scaling_module_bias(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=True)
        self.to_keys = nn.Linear(k, k, bias=True)
        self.to_values = nn.Linear(k, k, bias=True)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v, mask)[0]


@mistake("not-a-tensor", "scaled_self_attention")
class scaling_module_returns_pair(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v, mask)


@mistake("no-mask-argument", "scaled_self_attention")
class scaling_module_no_mask_argument(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v)[0]


@mistake("shared-layer", "scaled_self_attention")
class scaling_module_shared_layer(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = self.to_queries
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v, mask)[0]


@mistake("causal-leak", "scaled_self_attention")
class scaling_module_float_mask(nn.Module):
    """The mask handed to PyTorch's fused attention as floats: a float mask is added to the scores (1 where
    allowed, 0 where not), so nothing is masked."""

    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        if mask is not None:
            mask = mask.float()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@mistake("masks-without-a-mask", "scaled_self_attention")
class scaling_module_causal_by_default(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        if mask is None:
            t = x.shape[1]
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return scaled_dot_product_attention(q, k, v, mask)[0]


# ------------------------------------------------------------------ ScaledSelfAttention: alternatives

@alternative("scaled_self_attention")
class scaling_module_fused(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@alternative("scaled_self_attention")
class scaling_module_one_matrix_split(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x, mask=None):
        w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])
        q, k, v = F.linear(x, w).chunk(3, dim=-1)
        output, _ = scaled_dot_product_attention(q, k, v, mask=mask)
        return output


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("scaling-unscaled", "scaling-module-mask-dropped")
