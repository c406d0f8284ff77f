"""Variants of the answers of assignment 02_qkv."""
# ruff: noqa: F821 - variants use the notebook's names (torch, F, nn, math, attention), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "02_qkv"


# ------------------------------------------------------------------ attention: mistakes

@mistake("softmax-over-queries", "attention")
def attention_softmax_queries(queries, keys, values):
    return F.softmax(queries @ keys.transpose(1, 2), dim=1) @ values


@mistake("no-softmax", "attention")
def attention_no_softmax(queries, keys, values):
    return (queries @ keys.transpose(1, 2)) @ values


@mistake("wrong-shape", "attention")
def attention_keys_as_values(queries, keys, values):
    return F.softmax(queries @ keys.transpose(1, 2), dim=-1) @ keys


@mistake("raised", "attention")
def attention_transposed(queries, keys, values):
    w = F.softmax(queries @ keys.transpose(1, 2), dim=-1)
    return w.transpose(1, 2) @ values


@mistake("scaled", "attention")
def attention_scaled(queries, keys, values):
    s = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])
    return F.softmax(s, dim=-1) @ values


@mistake("wrong-shape", "attention")
def attention_returns_weights(queries, keys, values):
    return F.softmax(queries @ keys.transpose(1, 2), dim=-1)


# ------------------------------------------------------------------ SelfAttentionQKV: mistakes

@mistake("projection-bias", "self_attention_qkv")
class module_bias(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=True)
        self.to_keys = nn.Linear(k, k, bias=True)
        self.to_values = nn.Linear(k, k, bias=True)

    def forward(self, x):
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


@mistake("shared-layer", "self_attention_qkv")
class module_shared_projection(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = self.to_keys = self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


@mistake("values-not-projected", "self_attention_qkv")
class module_values_not_projected(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return attention(self.to_queries(x), self.to_keys(x), x)


@mistake("keys-as-values", "self_attention_qkv")
class module_keys_as_values(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        k = self.to_keys(x)
        return attention(self.to_queries(x), k, k)


@mistake("queries-as-values", "self_attention_qkv")
class module_queries_as_values(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        q = self.to_queries(x)
        return attention(q, self.to_keys(x), q)


@mistake("queries-for-every-role", "self_attention_qkv")
class module_queries_for_all(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        q = self.to_queries(x)
        return attention(q, q, q)


@mistake("keys-from-queries", "self_attention_qkv")
class module_keys_from_queries(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        q = self.to_queries(x)
        return attention(q, q, self.to_values(x))


@mistake("queries-keys-swapped", "self_attention_qkv")
class module_queries_keys_swapped(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return attention(self.to_keys(x), self.to_queries(x), self.to_values(x))


@mistake("scaled", "self_attention_qkv")
class module_scaled(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return attention(self.to_queries(x) / math.sqrt(self.k), self.to_keys(x), self.to_values(x))


@mistake("wrong-layer-size", "self_attention_qkv")
class module_wrong_size(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, 2 * k, bias=False)
        self.to_keys = nn.Linear(k, 2 * k, bias=False)
        self.to_values = nn.Linear(k, 2 * k, bias=False)

    def forward(self, x):
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


@mistake("missing-layer", "self_attention_qkv")
class module_layers_named_differently(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_query = nn.Linear(k, k, bias=False)
        self.to_key = nn.Linear(k, k, bias=False)
        self.to_value = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return attention(self.to_query(x), self.to_key(x), self.to_value(x))


@mistake("several-mistakes", "self_attention_qkv")
class module_fused_scaled_raw_values(nn.Module):
    """Two mistakes at once: PyTorch's fused attention scales by default, and the values are not projected."""

    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.to_queries(x), self.to_keys(x), x)


@mistake("parameter-count", "self_attention_qkv")
class module_extra_layer(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify = nn.Linear(k, k, bias=False)  # registered, never used

    def forward(self, x):
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


@mistake("detached", "self_attention_qkv")
class module_detached(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        with torch.no_grad():
            return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


@mistake("not-a-module", "self_attention_qkv")
class module_plain_class:
    def __init__(self, k):
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def __call__(self, x):
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


# ------------------------------------------------------------------ correct, written differently

@alternative("attention")
def attention_fused(queries, keys, values):
    return F.scaled_dot_product_attention(queries, keys, values, scale=1.0)


@alternative("attention")
def attention_einsum(queries, keys, values):
    w = torch.einsum("bqk,btk->bqt", queries, keys).softmax(-1)
    return torch.einsum("bqt,btv->bqv", w, values)


@alternative("self_attention_qkv")
class module_one_matrix_split(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])
        q, k, v = F.linear(x, w).chunk(3, dim=-1)
        return attention(q, k, v)


@alternative("self_attention_qkv")
class module_fused_attention(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.to_queries(x), self.to_keys(x), self.to_values(x), scale=1.0)


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("attention-softmax-queries", "module-values-not-projected")
