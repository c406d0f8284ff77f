"""Variants of the answers of assignment 04_multi_head."""
# ruff: noqa: F821 - variants use the notebook's names (split_heads, merge_heads, scaled_dot_product_attention), as a
# student's cell does

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, edits, mistake, written
from course.judges.multi_head import PROJECTIONS, WRITTEN, splits

ASSIGNMENT = "04_multi_head"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

# the mistakes course/judges/multi_head.py writes as code and names by running them
written(WRITTEN, cells={"MultiHeadAttention": "multi_head_attention",
                        "WideMultiHeadAttention": "wide_multi_head_attention"})


# ------------------------------------------------------------------ split_heads: mistakes

@mistake("wrong-shape", "split_heads")
def mh_split_transpose_missing(x, heads):
    b, t, k = x.shape
    return x.view(b, t, heads, k // heads)


# ------------------------------------------------------------------ merge_heads: mistakes

@mistake("wrong-shape", "merge_heads")
def mh_merge_not_flattened(x):
    return x.transpose(1, 2)


# ------------------------------------------------------------------ the modules: texts of the solved cells they change
# (the mistakes the judge names by output are course/judges/multi_head.py's, above; these are the checks' shared ones)

MHA, WIDE = "multi_head_attention", "wide_multi_head_attention"
SDPA = "out, _ = scaled_dot_product_attention(queries, keys, values, mask)"


def wide_layers(projection: str, unify: str) -> tuple[tuple[str, str], ...]:
    """The wide module's three projections created by `projection` (formatted with layer), unify_heads by unify."""
    return (*((f"self.{layer} = nn.Linear(k, k * heads, bias=False)",
               f"self.{layer} = {projection.format(layer=layer)}") for layer, _ in PROJECTIONS),
            ("self.unify_heads = nn.Linear(k * heads, k)", f"self.unify_heads = {unify}"))


UNIFY = "self.unify_heads = nn.Linear(k, k)\n"


def extra_layer(how: str) -> tuple[str, str]:
    """An unused k -> k layer, kept as `how` says (formatted with layer)."""
    return UNIFY, UNIFY + f"        self.extra = {how.format(layer='nn.Linear(k, k)')}\n"


def einsum(scale: str, fill: str) -> tuple[str, str]:
    """The attention call written out with torch.einsum, the scores divided by `scale`, masked by `fill`."""
    return SDPA, (f"scores = torch.einsum(\"bhqs,bhks->bhqk\", queries, keys) / {scale}\n"
                  f"        if mask is not None:\n            scores = {fill}\n"
                  "        out = torch.einsum(\"bhqk,bhks->bhqs\", scores.softmax(-1), values)")


# ------------------------------------------------------------------ MultiHeadAttention: mistakes

# a (b, tq, tk) mask passed on as it is: it does not broadcast against (b, heads, tq, tk) scores
edit("mh-mask-not-broadcast-over-heads", MHA, ("torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)", "mask"),
     mistake="raised")
edit("mh-unify-without-bias", MHA, (UNIFY, UNIFY.replace("(k, k)", "(k, k, bias=False)")), mistake="unify-no-bias")
DIVISIBLE = ("if k % heads != 0:\n"
             "            raise ValueError(f\"the embedding size k={k} is not divisible by heads={heads}\")\n        ")
edit("mh-no-divisibility-check", MHA, (DIVISIBLE, ""), mistake="no-divisibility-check")
edit("mh-divisibility-asserted", MHA, (DIVISIBLE, "assert k % heads == 0, \"heads must divide k\"\n        "),
     mistake="not-a-value-error")
# the right numbers, computed the slow way: one attention call per head
edit("mh-loop-over-heads", MHA, (SDPA, "outs = [scaled_dot_product_attention(queries[:, i:i + 1], keys[:, i:i + 1], "
                                       "values[:, i:i + 1], mask)[0]\n                for i in range(self.heads)]  "
                                       "# (b, 1, tq, s) each\n        out = torch.cat(outs, dim=1)"),
     mistake="loop-over-heads")
# an unused layer, registered in an nn.ModuleList: its parameters count (in a plain list they would not)
edit("mh-extra-layer-registered", MHA, extra_layer("nn.ModuleList([{layer}])"), mistake="parameter-count")

# ------------------------------------------------------------------ WideMultiHeadAttention: mistakes

edit("wide-narrow-projections", WIDE, *wide_layers("nn.Linear(k, k, bias=False)", "nn.Linear(k, k)"),
     mistake="wrong-layer-size")
# each head its own k -> k projection, kept in an nn.ModuleList instead of one nn.Linear(k, k * heads)
edit("wide-one-layer-per-head", WIDE,
     *wide_layers("nn.ModuleList([nn.Linear(k, k, bias=False) for _ in range(heads)])", "nn.Linear(k * heads, k)"),
     *splits("torch.stack([layer({source}) for layer in self.{layer}], dim=1)"), mistake="wrong-layer-type")


# ------------------------------------------------------------------ correct, written differently

@alternative("split_heads")
def mh_split_unflatten(x, heads):
    return x.unflatten(-1, (heads, x.shape[-1] // heads)).transpose(1, 2)


@alternative("split_heads")
def mh_split_chunk(x, heads):
    return torch.stack(x.chunk(heads, dim=-1), dim=1)


@alternative("merge_heads")
def mh_merge_flatten(x):
    return x.transpose(1, 2).flatten(2)


@alternative("merge_heads")
def mh_merge_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


@alternative("multi_head_attention")
class mh_fused_one_matrix(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads:
            raise ValueError(f"{heads} heads do not divide k = {k}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_heads(self.to_queries(x), self.heads)
        w_kv = torch.cat([self.to_keys.weight, self.to_values.weight])
        k, v = (split_heads(t, self.heads) for t in F.linear(context, w_kv).chunk(2, dim=-1))
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.unify_heads(merge_heads(out))


edit("mh-einsum-by-hand", MHA, einsum("math.sqrt(self.k // self.heads)", "scores.masked_fill(~mask, float(\"-inf\"))"))
# an unused layer kept in a plain Python list is not registered: the parameter count does not see it
edit("mh-unused-layer-in-plain-list", MHA, extra_layer("[{layer}]"))
edit("wide-einsum-by-hand", WIDE, einsum("math.sqrt(self.k)", "torch.where(mask, scores, float(\"-inf\"))"))


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("mh-split-interleaved", "mh-merge-no-transpose", "mh-scaled-by-model-size", "wide-context-ignored")
