"""PyTorch's own modules with the check's weights copied in: the oracles the judges compare against.

Every builder forks the global RNG first, so a judge leaves the caller's random state as it found it. Masks follow
the course's convention (bool, True where attention is allowed); :func:`torch_mask` turns them into PyTorch's. The
weights are passed with torch.func.functional_call, so autograd reaches them; :func:`course_layer` and
:func:`course_module_attention` translate the names of the course's own modules' weights.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import torch
from torch import nn
from torch.func import functional_call


def causal_mask(t: int) -> torch.Tensor:
    """The course's causal mask, (t, t) bool, True where key j <= query i: the complement of PyTorch's own
    nn.Transformer.generate_square_subsequent_mask."""
    return ~torch.isinf(nn.Transformer.generate_square_subsequent_mask(t))


def attention_parameters(projections: Mapping[str, torch.Tensor | None], *, query_scale: float = 1.0,
                         prefix: str = "") -> dict[str, torch.Tensor]:
    """nn.MultiheadAttention's parameters, by name (after prefix), carrying projections by role: (k, k) query, key and
    value weights wq, wk, wv, an output projection wo (identity when missing or None) and biases bq, bk, bv, bo (zero
    when missing or None). query_scale multiplies the query's weight and bias (:func:`unscaled` undoes its scaling)."""
    wq, wo = projections["wq"], projections.get("wo")
    zero = torch.zeros(wq.shape[0])
    bq, bk, bv, bo = (zero if projections.get(role) is None else projections[role] for role in ("bq", "bk", "bv", "bo"))
    return {f"{prefix}in_proj_weight": torch.cat([wq * query_scale, projections["wk"], projections["wv"]]),
            f"{prefix}in_proj_bias": torch.cat([bq * query_scale, bk, bv]),
            f"{prefix}out_proj.weight": torch.eye(wq.shape[0]) if wo is None else wo,
            f"{prefix}out_proj.bias": bo}


def torch_mask(mask: torch.Tensor | None, b: int, tq: int, tk: int, heads: int) -> torch.Tensor | None:
    """The course's mask (bool, True = allowed, broadcastable to (b, tq, tk)) as PyTorch's attn_mask for
    nn.MultiheadAttention and the transformer layers: (b·heads, tq, tk), True = NOT allowed."""
    if mask is None:
        return None
    return ~torch.broadcast_to(mask, (b, tq, tk)).repeat_interleave(heads, dim=0)  # (b·h, tq, tk)


@functools.cache
def _attention_module(k: int, heads: int) -> nn.MultiheadAttention:
    with torch.random.fork_rng(devices=[]):  # building it draws random weights: leave the caller's RNG alone
        return nn.MultiheadAttention(k, heads, batch_first=True).eval()


def attention(x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None, heads: int,
              projections: Mapping[str, torch.Tensor | None], query_scale: float = 1.0) -> torch.Tensor:
    """nn.MultiheadAttention with these projections (by role, as :func:`attention_parameters` takes them, query_scale
    too) on x (b, tq, k), reading context (b, tk, k) (x itself when None); mask bool, True = allowed, broadcastable to
    (b, tq, tk). Autograd reaches the projections and the inputs."""
    source = x if context is None else context
    params = attention_parameters(projections, query_scale=query_scale)
    y, _ = functional_call(_attention_module(x.shape[-1], heads), params, (x, source, source),
                           {"attn_mask": torch_mask(mask, x.shape[0], x.shape[1], source.shape[1], heads),
                            "need_weights": False})
    return y


@functools.cache
def encoder_layer(k: int, heads: int, hidden: int, eps: float = 1e-5,
                  norm_first: bool = False) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer (batch first, ReLU, no dropout) of these sizes, for functional_call: post-norm, or
    pre-norm with norm_first."""
    with torch.random.fork_rng(devices=[]):
        return nn.TransformerEncoderLayer(k, heads, dim_feedforward=hidden, dropout=0.0, activation="relu",
                                          layer_norm_eps=eps, batch_first=True, norm_first=norm_first).eval()


@functools.cache
def decoder_layer(k: int, heads: int, hidden: int) -> nn.TransformerDecoderLayer:
    """nn.TransformerDecoderLayer (batch first, post-norm, ReLU, no dropout), for functional_call."""
    with torch.random.fork_rng(devices=[]):
        return nn.TransformerDecoderLayer(k, heads, dim_feedforward=hidden, dropout=0.0, activation="relu",
                                          batch_first=True, norm_first=False).eval()


#: the roles of attention_parameters() -> the names of the course's attention modules' weights
_COURSE_PROJECTIONS = {"wq": "to_queries.weight", "wk": "to_keys.weight", "wv": "to_values.weight",
                       "bq": "to_queries.bias", "bk": "to_keys.bias", "bv": "to_values.bias",
                       "wo": "unify_heads.weight", "bo": "unify_heads.bias"}


def course_layer(w: Mapping[str, torch.Tensor], prefix: str, heads: int, x: torch.Tensor,
                 memory: torch.Tensor | None = None, *, causal: bool = False, pad: torch.Tensor | None = None,
                 norm_first: bool = False) -> torch.Tensor:
    """PyTorch's layer carrying a block of the course's parts whose weights in w start with prefix, on x (b, t, k):
    without memory nn.TransformerEncoderLayer (MultiHeadAttention `attention`, norm1-2, FeedForward `ff`; pre-norm
    with norm_first), with memory (b, s, k) nn.TransformerDecoderLayer (`self_attention`, `cross_attention` reading
    memory, norm1-3, `ff`; post-norm). causal: self-attention under the causal mask; pad (b, s): bool, True at the
    real positions of the source (x without memory, memory with it), the others masked out. Autograd reaches w."""
    attentions = ({"attention": "self_attn"} if memory is None
                  else {"self_attention": "self_attn", "cross_attention": "multihead_attn"})
    norms = [(f"norm{i}",) * 2 for i in range(1, len(attentions) + 2)]
    renamed = [("linear1", "ff.net.0"), ("linear2", "ff.net.2"), *norms]  # PyTorch's name, the course's
    params = {f"{name}.{leaf}": w[f"{prefix}{ours}.{leaf}"] for name, ours in renamed for leaf in ("weight", "bias")}
    for name, torch_name in attentions.items():  # the course's queries, keys and values have no bias: PyTorch's is 0
        part = f"{prefix}{name}."
        params.update({f"{torch_name}.in_proj_weight": torch.cat([w[f"{part}to_{role}.weight"]
                                                                  for role in ("queries", "keys", "values")]),
                       f"{torch_name}.in_proj_bias": torch.zeros(3 * x.shape[-1]),
                       f"{torch_name}.out_proj.weight": w[f"{part}unify_heads.weight"],
                       f"{torch_name}.out_proj.bias": w[f"{part}unify_heads.bias"]})
    k, hidden = x.shape[-1], w[f"{prefix}ff.net.0.weight"].shape[0]
    future = ~causal_mask(x.shape[1]) if causal else None  # PyTorch's masks: True = NOT allowed
    ignored = None if pad is None else ~pad
    if memory is None:
        return functional_call(encoder_layer(k, heads, hidden, norm_first=norm_first), params, (x,),
                               {"src_mask": future, "src_key_padding_mask": ignored})
    return functional_call(decoder_layer(k, heads, hidden), params, (x, memory),
                           {"tgt_mask": future, "memory_key_padding_mask": ignored})


def unscaled(k: int, heads: int = 1) -> float:
    """The query_scale that undoes nn.MultiheadAttention's division by √(head size)."""
    return math.sqrt(k / heads)


def course_module_attention(w: Mapping[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None, *, heads: int = 1,
                            query_scale: float = 1.0) -> torch.Tensor:
    """:func:`attention` (b, tq, k) with the weights w of one of the course's attention modules (what w lacks: an
    identity output, a zero bias); the scores are divided by √(k / heads) / query_scale."""
    found = {keyword: w[name] for keyword, name in _COURSE_PROJECTIONS.items() if name in w}
    return attention(x, context, mask, heads, found, query_scale)


def dense(w: Mapping[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    """torch's F.linear on x (..., n_in) with the weights in w of the nn.Linear `name` (name.weight, and name.bias
    where w has one): (..., n_out). Autograd reaches w."""
    return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def layer_norm(w: Mapping[str, torch.Tensor], name: str, x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """torch's F.layer_norm over the last dimension of x with the weights in w of the nn.LayerNorm `name`
    (name.weight, name.bias). Autograd reaches w."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], eps)


def sinusoidal_table(max_len: int, k: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(same), computed in float64 and returned as float32 (06's
    judges also compute it with its typical mistakes: judges/positional_encoding.py's _formula)."""
    p = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    i = torch.arange(k // 2, dtype=torch.float64)  # (k/2,) pair index; the column index of the sine is j = 2i
    angles = p / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2 * i / k)  # (max_len, k/2)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=2).reshape(max_len, k).float()  # interleaved
