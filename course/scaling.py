"""Reference answers of assignment 03 (scaled attention and masks), imported by later notebooks.

The tests grade these with the notebook's checks; while 03 is graded the grader's sandbox hides this module.
"""

import math

import torch
import torch.nn.functional as F

from course.qkv import SelfAttentionQKV


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
