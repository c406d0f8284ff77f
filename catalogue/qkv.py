"""Variants of the answers of assignment 02_qkv."""
# ruff: noqa: F821 - variants use the notebook's names (torch, F, nn, math, attention), as a student's cell does


import torch
import torch.nn.functional as F

from catalogue import alternative, edits, mistake, written
from course.judges.qkv import WRITTEN

ASSIGNMENT = "02_qkv"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

# the mistakes course/judges/qkv.py writes as code and names by running them
written(WRITTEN, cells={"SelfAttentionQKV": "self_attention_qkv"})


# ------------------------------------------------------------------ attention: mistakes

@mistake("wrong-shape", "attention")
def attention_returns_weights(queries, keys, values):
    return F.softmax(queries @ keys.transpose(1, 2), dim=-1)


# ------------------------------------------------------------------ SelfAttentionQKV: mistakes, as edits

MODULE = "self_attention_qkv"
Q, K, V = (f"self.to_{role} = nn.Linear(k, k, bias=False)" for role in ("queries", "keys", "values"))
PROJECTED = ("queries = self.to_queries(x)  # (b, t, k)\n        keys = self.to_keys(x)  # (b, t, k)\n"
             "        values = self.to_values(x)  # (b, t, k)")
RETURN = "return attention(queries, keys, values)"

edit("module-bias", MODULE, *((line, line.replace("bias=False", "bias=True")) for line in (Q, K, V)),
     mistake="projection-bias")
edit("module-shared-projection", MODULE,
     (f"{Q}\n        {K}\n        {V}", f"self.to_queries = self.to_keys = self.{V[5:]}"),
     mistake="shared-layer")
edit("module-scaled", MODULE, (RETURN, "return attention(queries / math.sqrt(x.shape[-1]), keys, values)"),
     mistake="scaled")
edit("module-wrong-size", MODULE, *((line, line.replace("(k, k,", "(k, 2 * k,")) for line in (Q, K, V)),
     mistake="wrong-layer-size")
edit("module-layers-named-differently", MODULE,
     *((f"self.to_{role}{end}", f"self.to_{name}{end}") for role, name in (("queries", "query"), ("keys", "key"),
                                                                     ("values", "value")) for end in (" = nn", "(x)")),
     mistake="missing-layer")
# two mistakes at once: PyTorch's fused attention scales by default, and the values are not projected
edit("module-fused-scaled-raw-values", MODULE, (RETURN, "return F.scaled_dot_product_attention(queries, keys, x)"),
     mistake="several-mistakes")
EXTRA = "self.unify = nn.Linear(k, k, bias=False)  # registered, never used"
edit("module-extra-layer", MODULE, (V, f"{V}\n        {EXTRA}"), mistake="parameter-count")
edit("module-detached", MODULE, (RETURN, f"with torch.no_grad():\n            {RETURN}"), mistake="detached")
edit("module-plain-class", MODULE, ("class SelfAttentionQKV(nn.Module):", "class SelfAttentionQKV:"),
     ("super().__init__()\n        ", ""), ("def forward(self, x):", "def __call__(self, x):"), mistake="not-a-module")


# ------------------------------------------------------------------ correct, written differently

@alternative("attention")
def attention_fused(queries, keys, values):
    return F.scaled_dot_product_attention(queries, keys, values, scale=1.0)


@alternative("attention")
def attention_einsum(queries, keys, values):
    w = torch.einsum("bqk,btk->bqt", queries, keys).softmax(-1)
    return torch.einsum("bqt,btv->bqv", w, values)


edit("module-one-matrix-split", MODULE, (PROJECTED, (
    "w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])  # (3k, k)\n"
    "        queries, keys, values = F.linear(x, w).chunk(3, dim=-1)  # (b, t, k) each")))
edit("module-fused-attention", MODULE,
     (RETURN, "return F.scaled_dot_product_attention(queries, keys, values, scale=1.0)"))


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("attention-softmax-queries", "module-values-not-projected")
