"""Variants of the answers of assignment 03_scaling."""
# ruff: noqa: F821 - variants use the notebook's names (scaled_dot_product_attention), as a student's cell does

import math

import torch
import torch.nn.functional as F

from catalogue import alternative, edits, mistake, written
from course.judges.scaling import WRITTEN

ASSIGNMENT = "03_scaling"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT


# the mistakes course/judges/scaling.py writes as code and names by running them, and those it names by a property
written(WRITTEN, cells={"ScaledSelfAttention": "scaled_self_attention"})


# ------------------------------------------------------------------ scaled_dot_product_attention: mistakes, as edits

SDPA = "scaled_dot_product_attention"
FILL = 'scores = scores.masked_fill(~mask, float("-inf"))'
ZERO_ROWS = "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)"
NO_ZEROED_ROWS = (f"\n    if mask is not None:\n        {ZERO_ROWS}", "")
RETURN = "return weights @ values, weights"

edit("scaling-nan-in-empty-rows", SDPA, NO_ZEROED_ROWS, mistake="nan-in-empty-rows")
edit("scaling-additive-mask", SDPA,
     (FILL, 'scores = scores + torch.zeros_like(scores).masked_fill(~mask, float("-inf"))'),
     (ZERO_ROWS, "weights = torch.nan_to_num(weights, nan=0.0)"), mistake="nan-gradients")
edit("scaling-transpose-1-2", SDPA, ("keys.transpose(-2, -1)", "keys.transpose(1, 2)"), mistake="raised")


@mistake("not-a-pair", "scaled_dot_product_attention")
def scaling_returns_output_only(queries, keys, values, mask=None):
    w = F.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-1)
    return w @ values


# the weights detached because they are returned for plotting: the queries and keys no longer learn
edit("scaling-weights-detached-for-plotting", SDPA, (RETURN, f"weights = weights.detach()\n    {RETURN}"),
     mistake="no-gradient")


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


# ------------------------------------------------------------------ ScaledSelfAttention: mistakes, as edits

MODULE = "scaled_self_attention"
Q, K, V = (f"self.to_{role} = nn.Linear(k, k, bias=False)" for role in ("queries", "keys", "values"))
CALL = "output, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, t, k)\n        return output"
FORWARD = "def forward(self, x, mask=None):"
PROJECTED = ("queries = self.to_queries(x)  # (b, t, k)\n        keys = self.to_keys(x)  # (b, t, k)\n"
             "        values = self.to_values(x)  # (b, t, k)")

edit("scaling-module-scaled-twice", MODULE, ("(queries, keys", "(queries / math.sqrt(x.shape[-1]), keys"),
     mistake="divided-by-d")
edit("scaling-module-bias", MODULE, *((line, line.replace("bias=False", "bias=True")) for line in (Q, K, V)),
     mistake="projection-bias")
edit("scaling-module-returns-pair", MODULE, (CALL, "return scaled_dot_product_attention(queries, keys, values, mask)"),
     mistake="not-a-tensor")
edit("scaling-module-no-mask-argument", MODULE, (FORWARD, "def forward(self, x):"), ("values, mask)", "values)"),
     mistake="no-mask-argument")
edit("scaling-module-shared-layer", MODULE, (K, "self.to_keys = self.to_queries"), mistake="shared-layer")
# the mask handed to PyTorch's fused attention as floats: a float mask is added to the scores (1 where allowed, 0
# where not), so nothing is masked
edit("scaling-module-float-mask", MODULE, (CALL, "if mask is not None:\n            mask = mask.float()\n"
                                                 "        return F.scaled_dot_product_attention(queries, keys, values, "
                                                 "attn_mask=mask)"), mistake="causal-leak")
edit("scaling-module-causal-by-default", MODULE, (FORWARD, f"{FORWARD}\n        if mask is None:\n"
                                                           "            t = x.shape[1]\n            mask = torch.ones("
                                                           "t, t, dtype=torch.bool, device=x.device).tril()"),
     mistake="masks-without-a-mask")

# ------------------------------------------------------------------ ScaledSelfAttention: alternatives

edit("scaling-module-fused", MODULE,
     (CALL, "return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)"))
edit("scaling-module-one-matrix-split", MODULE, (PROJECTED, (
    "w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])  # (3k, k)\n"
    "        queries, keys, values = F.linear(x, w).chunk(3, dim=-1)  # (b, t, k) each")))


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("scaling-unscaled", "scaling-module-mask-dropped")
