"""Reference multi-head attention from assignment 04, imported by later notebooks."""

import torch
import torch.nn.functional as F
from torch import nn


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, t, k) -> (b, heads, t, k // heads): each head gets a contiguous slice of the features."""
    b, t, k = x.shape
    return x.view(b, t, heads, k // heads).transpose(1, 2)  # (b, h, t, s)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, heads, t, s) -> (b, t, heads * s), the inverse of split_heads."""
    b, h, t, s = x.shape
    return x.transpose(1, 2).reshape(b, t, h * s)  # (b, t, k)


def attend(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """The output of course.scaling.scaled_dot_product_attention (assignment 03), without its weights.

    The modules below never return the weights, so they take PyTorch's fused kernel: it computes the same
    softmax(q·kᵀ/√s)·v with the same mask convention (bool, True = allowed; a row with nothing allowed gives
    zeros) but never stores the (tq, tk) weights, which makes it several times faster on long sequences
    (benchmarks/attention.py). To look at the weights, call scaled_dot_product_attention.
    """
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)


def _heads_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A mask broadcastable to (b, tq, tk) made broadcastable to (b, h, tq, tk)."""
    if mask is None or mask.dim() < 3:
        return mask  # (tq, tk) and (tk,) already broadcast over batch and heads
    return mask.unsqueeze(-3)  # (b, 1, tq, tk)


class MultiHeadAttention(nn.Module):
    """Narrow multi-head attention: `heads` heads of size k // heads, scores scaled by √(k // heads).

    forward(x (b, tq, k), context (b, tk, k) or None for self-attention, mask broadcastable to (b, tq, tk),
    True where allowed) -> (b, tq, k).
    """

    def __init__(self, k: int, heads: int):
        super().__init__()
        if k % heads != 0:
            raise ValueError(f"embedding size k={k} is not divisible by heads={heads}")
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)
        self.unify_heads = nn.Linear(k, k)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        queries = split_heads(self.to_queries(x), self.heads)  # (b, h, tq, s)
        keys = split_heads(self.to_keys(context), self.heads)  # (b, h, tk, s)
        values = split_heads(self.to_values(context), self.heads)  # (b, h, tk, s)
        out = attend(queries, keys, values, _heads_mask(mask))  # (b, h, tq, s)
        return self.unify_heads(merge_heads(out))  # (b, tq, k)


class WideMultiHeadAttention(nn.Module):
    """Wide multi-head attention: every head has the full size k, scores scaled by √k; same forward as above."""

    def __init__(self, k: int, heads: int):
        super().__init__()
        self.k, self.heads = k, heads
        self.to_queries = nn.Linear(k, k * heads, bias=False)
        self.to_keys = nn.Linear(k, k * heads, bias=False)
        self.to_values = nn.Linear(k, k * heads, bias=False)
        self.unify_heads = nn.Linear(k * heads, k)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        queries = split_heads(self.to_queries(x), self.heads)  # (b, h, tq, k)
        keys = split_heads(self.to_keys(context), self.heads)  # (b, h, tk, k)
        values = split_heads(self.to_values(context), self.heads)  # (b, h, tk, k)
        out = attend(queries, keys, values, _heads_mask(mask))  # (b, h, tq, k)
        return self.unify_heads(merge_heads(out))  # (b, tq, k)
