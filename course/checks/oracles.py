"""PyTorch's own modules with the check's weights copied in: the oracles the judges compare against.

Building a PyTorch module draws random initial weights; every builder here forks the global RNG first, so a
judge leaves the caller's random state exactly as it found it. Masks follow the course's convention (bool,
broadcastable to (b, tq, tk), True where attention is allowed); :func:`attend` turns them into
nn.MultiheadAttention's, which marks what is NOT allowed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from types import MappingProxyType

import torch
from torch import nn


def multihead_attention(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, heads: int = 1, *,
                        wo: torch.Tensor | None = None, bo: torch.Tensor | None = None,
                        bq: torch.Tensor | None = None, bk: torch.Tensor | None = None,
                        bv: torch.Tensor | None = None, query_scale: float = 1.0) -> nn.MultiheadAttention:
    """nn.MultiheadAttention (batch first) computing with these projections: (k, k) query, key and value weights,
    an output projection (identity when wo is None) and biases (zero when None).

    nn.MultiheadAttention divides the scores by √(k / heads). To model attention scaled differently, pass
    query_scale: the query weight and bias are multiplied by it (√(k / heads) undoes the scaling entirely).
    """
    k = wq.shape[0]
    with torch.random.fork_rng(devices=[]):
        mha = nn.MultiheadAttention(k, heads, bias=True, batch_first=True)
    zero = torch.zeros(k)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([wq * query_scale, wk, wv]))
        mha.in_proj_bias.copy_(torch.cat([(zero if bq is None else bq) * query_scale,
                                          zero if bk is None else bk, zero if bv is None else bv]))
        mha.out_proj.weight.copy_(torch.eye(k) if wo is None else wo)
        mha.out_proj.bias.copy_(torch.zeros(mha.out_proj.bias.shape) if bo is None else bo)
    return mha


#: the keys of :func:`projection_gradients` -> the names of the course's modules' parameters
COURSE_NAMES = MappingProxyType({"q": "to_queries.weight", "k": "to_keys.weight", "v": "to_values.weight",
                                 "o": "unify_heads.weight", "o_bias": "unify_heads.bias"})


def unscaled(k: int, heads: int = 1) -> float:
    """The query_scale that undoes nn.MultiheadAttention's division by √(head size)."""
    return math.sqrt(k / heads)


def projection_gradients(mha: nn.MultiheadAttention, query_scale: float = 1.0) -> dict[str, torch.Tensor | None]:
    """After a backward pass through mha: the gradients of the query, key, value and output weights, in the
    coordinates of the weights passed to :func:`multihead_attention` (the query's undone by query_scale)."""
    grad = mha.in_proj_weight.grad
    gq, gk, gv = grad.chunk(3) if grad is not None else (None, None, None)
    return {"q": None if gq is None else gq * query_scale, "k": gk, "v": gv,
            "o": mha.out_proj.weight.grad, "o_bias": mha.out_proj.bias.grad}


def attend(mha: nn.MultiheadAttention, x: torch.Tensor, context: torch.Tensor | None = None,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """mha's output for queries from x (b, tq, k) and keys and values from context (b, tk, k), x when None, under
    the course's mask (True where allowed), applied to every head."""
    source = x if context is None else context
    attn_mask = None
    if mask is not None:  # nn.MultiheadAttention: True means NOT allowed, one (tq, tk) mask per batch element and head
        full = torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))
        attn_mask = ~full.repeat_interleave(mha.num_heads, dim=0)  # (b·heads, tq, tk)
    y, _ = mha(x, source, source, attn_mask=attn_mask, need_weights=False)
    return y


def gradients(mha: nn.MultiheadAttention, x: torch.Tensor, upstream: torch.Tensor,
              context: torch.Tensor | None = None, mask: torch.Tensor | None = None,
              query_scale: float = 1.0) -> dict[str, torch.Tensor | None]:
    """Autograd of sum(attend(mha, x, context, mask) * upstream): the gradients of x, of the context (when one is
    given) and of the projections, keyed as in :func:`projection_gradients`. Use a freshly built mha."""
    x = x.clone().requires_grad_(True)
    context = None if context is None else context.clone().requires_grad_(True)
    (attend(mha, x, context, mask) * upstream).sum().backward()
    found = {"x": x.grad, **projection_gradients(mha, query_scale)}
    if context is not None:
        found["context"] = context.grad
    return found


def as_course(grads: dict[str, torch.Tensor | None],
              roles: Iterable[str] = ("q", "k", "v")) -> dict[str, torch.Tensor | None]:
    """The gradients of x, of the context (if any) and of these projections, under the course's parameter names."""
    return {**{name: grads[name] for name in ("x", "context") if name in grads},
            **{COURSE_NAMES[role]: grads[role] for role in roles}}
