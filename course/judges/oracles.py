"""PyTorch's own modules with the check's weights copied in: the oracles the judges compare against.

Building a PyTorch module draws random initial weights; every builder here forks the global RNG first, so a
judge leaves the caller's random state exactly as it found it. Masks follow the course's convention (bool,
broadcastable to (b, tq, tk), True where attention is allowed); :func:`attend` and :func:`torch_mask` turn them
into nn.MultiheadAttention's, which marks what is NOT allowed. Where a judge needs gradients through the oracle,
the weights are passed with torch.func.functional_call (attention, layer_parameters), so autograd reaches them.
The course's own modules name their weights differently: :func:`course_attention` and
:func:`course_layer_parameters` translate.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call


def causal_mask(t: int) -> torch.Tensor:
    """The course's causal mask, (t, t) bool, True where key j <= query i: the complement of PyTorch's own
    nn.Transformer.generate_square_subsequent_mask."""
    return ~torch.isinf(nn.Transformer.generate_square_subsequent_mask(t))


def attention_parameters(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, *, wo: torch.Tensor | None = None,
                         bo: torch.Tensor | None = None, bq: torch.Tensor | None = None, bk: torch.Tensor | None = None,
                         bv: torch.Tensor | None = None, query_scale: float = 1.0,
                         prefix: str = "") -> dict[str, torch.Tensor]:
    """nn.MultiheadAttention's parameters, by name (after prefix), carrying these projections: (k, k) query, key
    and value weights, an output projection (identity when wo is None) and biases (zero when None).

    For torch.func.functional_call, through which autograd reaches the given tensors; query_scale as in
    :func:`multihead_attention`."""
    k = wq.shape[0]
    zero = torch.zeros(k)
    return {f"{prefix}in_proj_weight": torch.cat([wq * query_scale, wk, wv]),
            f"{prefix}in_proj_bias": torch.cat([(zero if bq is None else bq) * query_scale,
                                                zero if bk is None else bk, zero if bv is None else bv]),
            f"{prefix}out_proj.weight": torch.eye(k) if wo is None else wo,
            f"{prefix}out_proj.bias": zero if bo is None else bo}


def multihead_attention(wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, heads: int = 1, *,
                        wo: torch.Tensor | None = None, bo: torch.Tensor | None = None,
                        bq: torch.Tensor | None = None, bk: torch.Tensor | None = None,
                        bv: torch.Tensor | None = None, query_scale: float = 1.0) -> nn.MultiheadAttention:
    """nn.MultiheadAttention (batch first) computing with these projections: (k, k) query, key and value weights,
    an output projection (identity when wo is None) and biases (zero when None).

    nn.MultiheadAttention divides the scores by √(k / heads). To model attention scaled differently, pass
    query_scale: the query weight and bias are multiplied by it (√(k / heads) undoes the scaling entirely).
    """
    with torch.random.fork_rng(devices=[]):
        mha = nn.MultiheadAttention(wq.shape[0], heads, bias=True, batch_first=True)
    values = attention_parameters(wq, wk, wv, wo=wo, bo=bo, bq=bq, bk=bk, bv=bv, query_scale=query_scale)
    with torch.no_grad():
        for name, value in values.items():
            mha.get_parameter(name).copy_(value)
    return mha


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
              **projections: torch.Tensor | None) -> torch.Tensor:
    """nn.MultiheadAttention with these projections (the keywords of :func:`attention_parameters`) on x (b, tq, k),
    reading context (b, tk, k) (x itself when None); mask bool, True = allowed, broadcastable to (b, tq, tk).
    Autograd reaches the projections and the inputs."""
    source = x if context is None else context
    params = attention_parameters(**projections)
    y, _ = functional_call(_attention_module(x.shape[-1], heads), params, (x, source, source),
                           {"attn_mask": torch_mask(mask, x.shape[0], x.shape[1], source.shape[1], heads),
                            "need_weights": False})
    return y


@functools.cache
def encoder_layer(k: int, heads: int, hidden: int, eps: float = 1e-5,
                  norm_first: bool = False) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer (batch first, ReLU, no dropout) of these sizes, for functional_call with
    :func:`layer_parameters`: post-norm, or pre-norm with norm_first."""
    with torch.random.fork_rng(devices=[]):
        return nn.TransformerEncoderLayer(k, heads, dim_feedforward=hidden, dropout=0.0, activation="relu",
                                          layer_norm_eps=eps, batch_first=True, norm_first=norm_first).eval()


@functools.cache
def decoder_layer(k: int, heads: int, hidden: int) -> nn.TransformerDecoderLayer:
    """nn.TransformerDecoderLayer (batch first, post-norm, ReLU, no dropout), for functional_call."""
    with torch.random.fork_rng(devices=[]):
        return nn.TransformerDecoderLayer(k, heads, dim_feedforward=hidden, dropout=0.0, activation="relu",
                                          batch_first=True, norm_first=False).eval()


def layer_parameters(attentions: Mapping[str, Mapping[str, torch.Tensor | None]],
                     norms: Sequence[tuple[torch.Tensor, torch.Tensor]],
                     feed_forward: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]
                     ) -> dict[str, torch.Tensor]:
    """The parameters of an encoder or decoder layer, by name: attentions maps the layer's attention attribute
    ("self_attn", "multihead_attn") to the keywords of :func:`attention_parameters`; norms are (weight, bias) of
    norm1, norm2, ...; feed_forward is (W1, b1, W2, b2), a missing bias zero."""
    params = {}
    for name, projections in attentions.items():
        params.update(attention_parameters(**projections, prefix=f"{name}."))
    for i, (weight, bias) in enumerate(norms, 1):
        params[f"norm{i}.weight"], params[f"norm{i}.bias"] = weight, bias
    w1, b1, w2, b2 = feed_forward
    params.update({"linear1.weight": w1, "linear1.bias": torch.zeros(w1.shape[0]) if b1 is None else b1,
                   "linear2.weight": w2, "linear2.bias": torch.zeros(w2.shape[0]) if b2 is None else b2})
    return params


def course_attention(w: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The course's MultiHeadAttention whose weights in w are named prefix + to_queries.weight, ... as the keywords
    of :func:`attention_parameters`: queries, keys and values without bias, the output projection unify_heads."""
    return {"wq": w[f"{prefix}to_queries.weight"], "wk": w[f"{prefix}to_keys.weight"],
            "wv": w[f"{prefix}to_values.weight"], "wo": w[f"{prefix}unify_heads.weight"],
            "bo": w[f"{prefix}unify_heads.bias"]}


def course_layer_parameters(w: Mapping[str, torch.Tensor], prefix: str, attentions: Mapping[str, str],
                            norms: int) -> dict[str, torch.Tensor]:
    """A block of the course's parts (MultiHeadAttention, norm1..norm<norms>, FeedForward `ff`) whose weights in w
    start with prefix, as the parameters of PyTorch's encoder or decoder layer (:func:`layer_parameters`);
    attentions maps the block's attention attributes to the layer's ("attention" -> "self_attn")."""
    return layer_parameters(
        {torch_name: course_attention(w, f"{prefix}{name}.") for name, torch_name in attentions.items()},
        [(w[f"{prefix}norm{i}.weight"], w[f"{prefix}norm{i}.bias"]) for i in range(1, norms + 1)],
        (w[f"{prefix}ff.net.0.weight"], w[f"{prefix}ff.net.0.bias"], w[f"{prefix}ff.net.2.weight"],
         w[f"{prefix}ff.net.2.bias"]))


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


def course_projections(w: Mapping[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """The weights in w of one of the course's attention modules (prefix + to_queries.weight, to_keys.weight,
    to_values.weight, each with its bias if w has one, and unify_heads.weight and .bias if w has them) as the
    keywords of :func:`attention_parameters`; what w lacks stays an identity output or a zero bias."""
    names = {"wq": "to_queries.weight", "wk": "to_keys.weight", "wv": "to_values.weight", "bq": "to_queries.bias",
             "bk": "to_keys.bias", "bv": "to_values.bias", "wo": "unify_heads.weight", "bo": "unify_heads.bias"}
    return {keyword: w[prefix + name] for keyword, name in names.items() if prefix + name in w}


def course_module_attention(w: Mapping[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None, *, heads: int = 1,
                            query_scale: float = 1.0) -> torch.Tensor:
    """nn.MultiheadAttention with `heads` heads carrying the weights w of one of the course's attention modules
    (:func:`course_projections`) on x (b, tq, k), keys and values from context (b, tk, k) (x when None), under the
    course's mask (True = allowed, broadcastable to (b, tq, tk)); (b, tq, k). It divides the scores by
    √(k / heads) / query_scale (query_scale = :func:`unscaled`: no scaling). Autograd reaches w and the inputs."""
    return attention(x, context, mask, heads, **course_projections(w), query_scale=query_scale)


def dense(w: Mapping[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    """torch's F.linear on x (..., n_in) with the weights in w of the nn.Linear `name` (name.weight, and name.bias
    where w has one): (..., n_out). Autograd reaches w."""
    return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def layer_norm(w: Mapping[str, torch.Tensor], name: str, x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """torch's F.layer_norm over the last dimension of x with the weights in w of the nn.LayerNorm `name`
    (name.weight, name.bias). Autograd reaches w."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], eps)
