"""Reference answers of assignment 03 (scaled attention and masks), imported by later notebooks.

The tests grade these with the notebook's checks; while 03 is graded the grader's sandbox hides this module.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def scaled_dot_product_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with scores divided by √d: (..., tq, d), (..., tk, d), (..., tk, dv) -> ((..., tq, dv), (..., tq, tk)).

    mask: bool, broadcastable to (..., tq, tk), True where attention is allowed (F.scaled_dot_product_attention's
    convention). A query that may attend to nothing gets all-zero weights and a zero output, as in PyTorch.
    """
    d = queries.shape[-1]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d)  # (..., tq, tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)  # (..., tq, tk); NaN in rows where nothing is allowed
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ values, weights  # (..., tq, dv), (..., tq, tk)


# not a course.qkv.SelfAttentionQKV, which the answer cell its mistakes are graded in (judges/scaling.py) cannot name
class ScaledSelfAttention(nn.Module):
    """Self-attention with learned projections, scores divided by √k and an optional mask: (b, t, k) -> (b, t, k)."""

    def __init__(self, k: int):
        super().__init__()
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, k, bias=False)
        self.to_values = nn.Linear(k, k, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        queries = self.to_queries(x)  # (b, t, k)
        keys = self.to_keys(x)  # (b, t, k)
        values = self.to_values(x)  # (b, t, k)
        output, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, t, k)
        return output
