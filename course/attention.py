"""Reference attention from assignments 01, 02 and 03, imported by later notebooks.

These match the solutions of source/01_self_attention, 02_qkv and 03_scaling; the tests
run the same checks on both, so a mistake in a student's 01 never costs points in a later assignment.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def attention_weights(x: torch.Tensor) -> torch.Tensor:
    """Unscaled self-attention weights softmax(x·xᵀ) over the last dimension: (b, t, k) -> (b, t, t)."""
    return F.softmax(x @ x.transpose(-2, -1), dim=-1)  # (b, t, t)


def basic_self_attention(x: torch.Tensor) -> torch.Tensor:
    """Each output is the attention-weighted average of all inputs: (b, t, k) -> (b, t, k)."""
    return attention_weights(x) @ x


def attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Unscaled dot-product attention: (b, tq, k), (b, tk, k), (b, tk, v) -> (b, tq, v)."""
    weights = F.softmax(queries @ keys.transpose(-2, -1), dim=-1)  # (b, tq, tk)
    return weights @ values


class SelfAttentionQKV(nn.Module):
    """Unscaled self-attention with learned query, key and value projections: (b, t, k) -> (b, t, k)."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))


def scaled_dot_product_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with scores divided by √d: (..., tq, d), (..., tk, d), (..., tk, dv) -> ((..., tq, dv), (..., tq, tk)).

    mask: bool, broadcastable to (..., tq, tk), True where attention is allowed (F.scaled_dot_product_attention's
    convention). A query that may attend to nothing gets all-zero weights and a zero output, as in PyTorch.
    """
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., tq, tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # rows with nothing allowed: NaN -> 0
    return weights @ values, weights


class ScaledSelfAttention(SelfAttentionQKV):
    """SelfAttentionQKV with scores divided by √k and an optional mask: (b, t, k) -> (b, t, k)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = scaled_dot_product_attention(self.to_queries(x), self.to_keys(x), self.to_values(x), mask)
        return out
