"""Variants of the answers of assignment 04_multi_head."""
# ruff: noqa: F821 - variants use the notebook's names (split_heads, merge_heads, scaled_dot_product_attention), as a
# student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "04_multi_head"


# ------------------------------------------------------------------ split_heads: mistakes

@mistake("split-without-transpose", "split_heads")
def mh_split_no_transpose(x, heads):
    b, t, k = x.shape
    return x.reshape(b, heads, t, k // heads)


@mistake("split-interleaved", "split_heads")
def mh_split_interleaved(x, heads):
    b, t, k = x.shape
    return x.view(b, t, k // heads, heads).permute(0, 3, 1, 2)


@mistake("wrong-shape", "split_heads")
def mh_split_transpose_missing(x, heads):
    b, t, k = x.shape
    return x.view(b, t, heads, k // heads)


# ------------------------------------------------------------------ merge_heads: mistakes

@mistake("merge-without-transpose", "merge_heads")
def mh_merge_no_transpose(x):
    b, h, t, s = x.shape
    return x.reshape(b, t, h * s)


@mistake("merge-interleaved", "merge_heads")
def mh_merge_interleaved(x):
    b, h, t, s = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, t, h * s)


@mistake("wrong-shape", "merge_heads")
def mh_merge_not_flattened(x):
    return x.transpose(1, 2)


# ------------------------------------------------------------------ MultiHeadAttention: mistakes

@mistake("scaled-by-model-size", "multi_head_attention")
class mh_scaled_by_model_size(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.unify_heads(merge_heads(out))


@mistake("heads-reshaped-without-transpose", "multi_head_attention")
class mh_reshape_without_transpose(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        s = self.to_queries.out_features // self.heads
        q = self.to_queries(x).reshape(b, self.heads, tq, s)
        k = self.to_keys(context).reshape(b, self.heads, tk, s)
        v = self.to_values(context).reshape(b, self.heads, tk, s)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(out.reshape(b, tq, self.heads * s))


@mistake("heads-interleaved", "multi_head_attention")
class mh_interleaved_heads(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = self.to_queries(x).view(b, tq, -1, self.heads).permute(0, 3, 1, 2)
        k = self.to_keys(context).view(b, tk, -1, self.heads).permute(0, 3, 1, 2)
        v = self.to_values(context).view(b, tk, -1, self.heads).permute(0, 3, 1, 2)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(out.permute(0, 2, 3, 1).reshape(b, tq, -1))


@mistake("heads-split-without-transpose", "multi_head_attention")
class mh_split_by_reshape(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        s = self.k // self.heads
        q = self.to_queries(x).reshape(b, self.heads, tq, s)  # (b, h, tq, s)
        k = self.to_keys(context).reshape(b, self.heads, tk, s)  # (b, h, tk, s)
        v = self.to_values(context).reshape(b, self.heads, tk, s)  # (b, h, tk, s)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("heads-merged-without-transpose", "multi_head_attention")
class mh_merge_by_reshape(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)  # (b, h, tq, s)
        return self.unify_heads(out.reshape(b, tq, self.k))


@mistake("heads-split-interleaved", "multi_head_attention")
class mh_split_interleaved_inline(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        s = self.k // self.heads
        q = self.to_queries(x).view(b, tq, s, self.heads).permute(0, 3, 1, 2)  # (b, h, tq, s)
        k = self.to_keys(context).view(b, tk, s, self.heads).permute(0, 3, 1, 2)  # (b, h, tk, s)
        v = self.to_values(context).view(b, tk, s, self.heads).permute(0, 3, 1, 2)  # (b, h, tk, s)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("heads-merged-interleaved", "multi_head_attention")
class mh_merge_interleaved_inline(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)  # (b, h, tq, s)
        return self.unify_heads(out.permute(0, 2, 3, 1).reshape(b, tq, self.k))


@mistake("scaled-by-k-times-heads", "multi_head_attention")
class mh_scaled_by_k_times_heads(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        d = self.k * self.heads  # the size of all the heads together
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.unify_heads(merge_heads(out))


@mistake("several-mistakes", "multi_head_attention")
class mh_scaled_by_model_size_merged_by_reshape(nn.Module):
    """Two mistakes at once: the scale of the whole model, and the heads merged without a transpose."""

    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v  # (b, h, tq, s)
        return self.unify_heads(out.reshape(b, tq, self.k))


@mistake("context-ignored", "multi_head_attention")
class mh_context_ignored(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("mask-ignored", "multi_head_attention")
class mh_mask_ignored(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        out, _ = scaled_dot_product_attention(q, k, v)
        return self.unify_heads(merge_heads(out))


@mistake("raised", "multi_head_attention")
class mh_mask_not_broadcast_over_heads(nn.Module):
    """A (b, tq, tk) mask passed on as it is: it does not broadcast against (b, heads, tq, tk) scores."""

    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("softmax-over-queries", "multi_head_attention")
class mh_softmax_over_queries(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-2) @ v
        return self.unify_heads(merge_heads(out))


@mistake("unify-no-bias", "multi_head_attention")
class mh_unify_without_bias(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k, bias=False)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("unify-skipped", "multi_head_attention")
class mh_unify_skipped(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return merge_heads(out)


@mistake("no-divisibility-check", "multi_head_attention")
class mh_no_divisibility_check(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("loop-over-heads", "multi_head_attention")
class mh_loop_over_heads(nn.Module):
    """The right numbers, computed the slow way: one attention call per head."""

    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        s = self.k // self.heads
        q, k, v = self.to_queries(x), self.to_keys(context), self.to_values(context)
        outs = []
        for i in range(self.heads):
            part = slice(i * s, (i + 1) * s)
            outs.append(scaled_dot_product_attention(q[..., part], k[..., part], v[..., part], mask)[0])
        return self.unify_heads(torch.cat(outs, dim=-1))


@mistake("parameter-count", "multi_head_attention")
class mh_extra_layer_registered(nn.Module):
    """An unused layer, registered in an nn.ModuleList: its parameters count (in a plain list they would not)."""

    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)
        self.extra = nn.ModuleList([nn.Linear(k, k)])

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


# ------------------------------------------------------------------ WideMultiHeadAttention: mistakes

@mistake("scaled-by-projected-size", "wide_multi_head_attention")
class wide_scaled_by_projected_size(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        scale = math.sqrt(self.to_queries.out_features)
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = q @ k.transpose(-2, -1) / scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.unify_heads(merge_heads(out))


@mistake("scaled-by-head-fraction", "wide_multi_head_attention")
class wide_scaled_by_head_fraction(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.k / self.heads)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.unify_heads(merge_heads(out))


@mistake("wrong-layer-size", "wide_multi_head_attention")
class wide_narrow_projections(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("wrong-layer-type", "wide_multi_head_attention")
class wide_one_layer_per_head(nn.Module):
    """Each head its own k -> k projection, kept in an nn.ModuleList instead of one nn.Linear(k, k * heads)."""

    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.ModuleList([nn.Linear(k, k, bias=False) for _ in range(heads)])
        self.to_keys = nn.ModuleList([nn.Linear(k, k, bias=False) for _ in range(heads)])
        self.to_values = nn.ModuleList([nn.Linear(k, k, bias=False) for _ in range(heads)])
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = torch.stack([layer(x) for layer in self.to_queries], dim=1)  # (b, h, tq, k)
        k = torch.stack([layer(context) for layer in self.to_keys], dim=1)  # (b, h, tk, k)
        v = torch.stack([layer(context) for layer in self.to_values], dim=1)  # (b, h, tk, k)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("context-ignored", "wide_multi_head_attention")
class wide_context_ignored(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@mistake("heads-reshaped-without-transpose", "wide_multi_head_attention")
class wide_reshape_without_transpose(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        s = self.to_queries.out_features // self.heads
        q = self.to_queries(x).reshape(b, self.heads, tq, s)
        k = self.to_keys(context).reshape(b, self.heads, tk, s)
        v = self.to_values(context).reshape(b, self.heads, tk, s)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(out.reshape(b, tq, self.heads * s))


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
        assert k % heads == 0, "k must be divisible by heads"
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


@alternative("multi_head_attention")
class mh_einsum_by_hand(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = torch.einsum("bhqs,bhks->bhqk", q, k) / math.sqrt(self.k // self.heads)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.einsum("bhqk,bhks->bhqs", scores.softmax(-1), v)
        return self.unify_heads(merge_heads(out))


@alternative("multi_head_attention")
class mh_unused_layer_in_plain_list(nn.Module):
    """An unused layer kept in a plain Python list is not registered: the parameter count does not see it."""

    def __init__(self, k, heads):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)
        self.extra = [nn.Linear(k, k)]

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.unify_heads(merge_heads(out))


@alternative("wide_multi_head_attention")
class wide_einsum_by_hand(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
        q = split_heads(self.to_queries(x), self.heads)
        k = split_heads(self.to_keys(context), self.heads)
        v = split_heads(self.to_values(context), self.heads)
        if mask is not None:
            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)
        scores = torch.einsum("bhqs,bhks->bhqk", q, k) / math.sqrt(self.k)
        if mask is not None:
            scores = torch.where(mask, scores, float("-inf"))
        out = torch.einsum("bhqk,bhks->bhqs", scores.softmax(-1), v)
        return self.unify_heads(merge_heads(out))


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("mh-split-interleaved", "mh-merge-no-transpose", "mh-scaled-by-model-size", "wide-context-ignored")
