"""Checks for assignment 02: attention(queries, keys, values) and SelfAttentionQKV."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.compare import expect_close, expect_linear, expect_tensor, fail, randn, run

ATTENTION_NAME = "attention(queries, keys, values)"
MODULE_NAME = "SelfAttentionQKV"

# (b, tq, tk, k, v): batch > 1, tq != tk, v != k, so swapped axes and roles change the shape
ATTENTION_SHAPES = ((3, 4, 6, 5, 2), (2, 7, 3, 4, 6), (1, 1, 5, 3, 3), (4, 5, 5, 2, 7))
MODULE_SHAPES = ((3, 5, 4), (2, 7, 6), (1, 1, 3))  # (b, t, k)


def _attention_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, torch.Tensor]:
    raw = q @ k.transpose(1, 2)  # (b, tq, tk)
    return {
        "the softmax runs over the queries (dim=1). Each query's weights over the keys must sum to 1: "
        "use dim=-1.": F.softmax(raw, dim=1) @ v,
        "the raw scores queries·keysᵀ are used as weights: the softmax is missing.": raw @ v,
        "the scores are divided by √k; this assignment is unscaled (scaling is assignment 03).":
            F.softmax(raw / math.sqrt(q.shape[-1]), dim=-1) @ v,
    }


def _attention_shape_hints(b: int, tq: int, tk: int, k: int, v: int) -> dict[tuple[int, ...], str]:
    return {
        (b, tq, k): "The last dimension is the key size, not the value size: are the keys used as values?",
        (b, tk, v): "There is one output per key instead of one per query: are the weights transposed, or "
                    "queries and keys swapped?",
        (b, tq, tk): "That is the shape of the weights: multiply them by the values.",
    }


_SHAPES_HINT = ("Write down the shape of every step: scores (b, tq, tk), weights (b, tq, tk), output (b, tq, v). "
                "The number of queries and of keys differ here, so transposed weights do not fit the values.")
_ATTENTION_HINT = "weights = softmax(queries·keysᵀ) over the keys (last dimension), output = weights·values."


def attention_by_hand(attention: Callable) -> None:
    """One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1)."""
    __tracebackhide__ = True
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0], [20.0]]])  # (1, 2, 1)
    e = math.e
    expected = torch.tensor([[[10.0 * e / (e + 1) + 20.0 / (e + 1)]]])
    y = run(attention, q, k, v, what=ATTENTION_NAME, hint=_SHAPES_HINT)
    expect_tensor(y, what=ATTENTION_NAME, shape=(1, 1, 1), device="cpu", shape_hints=_attention_shape_hints(1, 1, 2, 2, 1))
    expect_close(y, expected, what=ATTENTION_NAME, mistakes=_attention_mistakes(q, k, v), otherwise=_ATTENTION_HINT,
                 case="q=[1,0], keys=[1,0],[0,1], values=10,20")


def attention_matches_oracle(attention: Callable, device: torch.device | str = "cpu") -> None:
    """Random queries, keys and values of several shapes against PyTorch's fused attention, unscaled."""
    __tracebackhide__ = True
    for i, (b, tq, tk, k, v) in enumerate(ATTENTION_SHAPES):
        queries = randn(b, tq, k, seed=500 + i, device=device)
        keys = randn(b, tk, k, seed=510 + i, device=device)
        values = randn(b, tk, v, seed=520 + i, device=device)
        expected = F.scaled_dot_product_attention(queries, keys, values, scale=1.0)
        y = run(attention, queries.clone(), keys.clone(), values.clone(), what=ATTENTION_NAME, hint=_SHAPES_HINT)
        expect_tensor(y, what=ATTENTION_NAME, shape=(b, tq, v), device=device,
                      shape_hints=_attention_shape_hints(b, tq, tk, k, v))
        expect_close(y, expected, what=ATTENTION_NAME, mistakes=_attention_mistakes(queries, keys, values),
                     otherwise=_ATTENTION_HINT, case=f"b={b}, tq={tq}, tk={tk}, k={k}, v={v}")


def attention_is_a_weighted_average(attention: Callable, device: torch.device | str = "cpu") -> None:
    """If every value is the same vector, every output is that vector: the weights sum to 1 over the keys."""
    __tracebackhide__ = True
    queries = randn(2, 3, 4, seed=530, device=device)
    keys = randn(2, 6, 4, seed=531, device=device)
    values = randn(2, 1, 5, seed=532, device=device).expand(2, 6, 5).contiguous()
    y = run(attention, queries, keys, values, what=ATTENTION_NAME, hint=_SHAPES_HINT)
    expect_tensor(y, what=ATTENTION_NAME, shape=(2, 3, 5), device=device, shape_hints=_attention_shape_hints(2, 3, 6, 4, 5))
    expect_close(y, values[:, :3], what=f"{ATTENTION_NAME} with identical values",
                 otherwise="Each output must be a weighted average of the values, with weights that sum to 1 over "
                           "the keys (softmax over the last dimension).", case="all values equal")


def attention_hard_lookup_limit(attention: Callable, device: torch.device | str = "cpu") -> None:
    """A query that is a long copy of one key retrieves (almost exactly) that key's value."""
    __tracebackhide__ = True
    keys = torch.eye(4, device=device).unsqueeze(0)  # (1, 4, 4): orthonormal keys
    values = randn(1, 4, 3, seed=540, device=device)
    queries = 30.0 * keys[:, [2, 0]]  # (1, 2, 4): look up keys 2 and 0
    y = run(attention, queries, keys, values, what=ATTENTION_NAME, hint=_SHAPES_HINT)
    expect_tensor(y, what=ATTENTION_NAME, shape=(1, 2, 3), device=device, shape_hints=_attention_shape_hints(1, 2, 4, 4, 3))
    if not torch.allclose(y, values[:, [2, 0]], atol=1e-4):
        fail(f"{ATTENTION_NAME} does not act as a lookup: a query equal to 30 × key j should return value j. "
             "Check that the weights come from queries·keysᵀ and multiply the values.", values[:, [2, 0]], y,
             case="queries = 30·key 2, 30·key 0")


def _projection(module: nn.Module, name: str, k: int) -> nn.Linear:
    __tracebackhide__ = True
    return expect_linear(module, MODULE_NAME, name, k, k, False, "nn.Linear(k, k, bias=False)",
                         "The projections are plain matrices")


def module_structure(SelfAttentionQKV: Callable, k: int = 6) -> None:
    """Three separate bias-free k×k projections, registered as parameters: 3k² in all."""
    __tracebackhide__ = True
    module = run(SelfAttentionQKV, k, what=f"{MODULE_NAME}({k})")
    if not isinstance(module, nn.Module):
        fail(f"{MODULE_NAME}({k}) should create an nn.Module, but gave a {type(module).__name__}.")
    layers = [_projection(module, name, k) for name in ("to_queries", "to_keys", "to_values")]
    if len({id(layer) for layer in layers}) < 3:
        fail("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: "
             "create three separate nn.Linear modules.")
    count = sum(p.numel() for p in module.parameters())
    if count != 3 * k * k:
        fail(f"{MODULE_NAME}({k}) has {count} parameters; three k×k matrices make 3k² = {3 * k * k}. "
             "Are extra layers or biases registered, or some projection kept outside the module?")


def _qkv_weights(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return module.to_queries.weight, module.to_keys.weight, module.to_values.weight


def _module_mistakes(module: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    wq, wk, wv = _qkv_weights(module)
    q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
    raw = q @ k.transpose(1, 2)  # (b, t, t)
    w = F.softmax(raw, dim=-1)
    return {
        "the values are the raw inputs x; they should go through to_values first.": w @ x,
        "the keys are used as values: the weights should multiply to_values(x).": w @ k,
        "the queries are used as values: the weights should multiply to_values(x).": w @ q,
        "to_queries is used for every role: keys and values need their own projections.":
            F.softmax(q @ q.transpose(1, 2), dim=-1) @ q,
        "queries and keys both come from to_queries: the keys need to_keys.": F.softmax(q @ q.transpose(1, 2), dim=-1) @ v,
        "the softmax runs over the queries (dim=1) instead of the keys (dim=-1).": F.softmax(raw, dim=1) @ v,
        "the softmax is missing: the raw scores are used as weights.": raw @ v,
        "the scores are divided by √k; this assignment is unscaled (scaling is assignment 03).":
            F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1) @ v,
        "queries and keys are swapped, so the weights are transposed.": F.softmax(raw.transpose(1, 2), dim=-1) @ v,
    }


def _oracle(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """nn.MultiheadAttention with one head and the student's weights copied in, its scaling undone."""
    wq, wk, wv = _qkv_weights(module)
    k = x.shape[-1]
    mha = nn.MultiheadAttention(k, num_heads=1, bias=False, batch_first=True).to(x.device)
    with torch.no_grad():
        # MultiheadAttention divides scores by √k; scaling the query weights by √k cancels it.
        mha.in_proj_weight.copy_(torch.cat([wq * math.sqrt(k), wk, wv]))
        mha.out_proj.weight.copy_(torch.eye(k, device=x.device))
        y, _ = mha(x, x, x, need_weights=False)
    return y


def module_matches_oracle(SelfAttentionQKV: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and inputs against PyTorch's own multi-head attention (one head) with the same weights."""
    __tracebackhide__ = True
    for i, (b, t, k) in enumerate(MODULE_SHAPES):
        torch.manual_seed(600 + i)
        module = run(SelfAttentionQKV, k, what=f"{MODULE_NAME}({k})")
        for name in ("to_queries", "to_keys", "to_values"):
            _projection(module, name, k)
        module = module.to(device)
        with torch.no_grad():  # distinct, well-spread weights so each mistake shows
            for j, layer in enumerate((module.to_queries, module.to_keys, module.to_values)):
                layer.weight.copy_(randn(k, k, seed=610 + 10 * i + j, device=device) / math.sqrt(k))
        x = randn(b, t, k, seed=650 + i, device=device)
        with torch.no_grad():
            y = run(module, x.clone(), what=f"{MODULE_NAME}.forward(x)")
            expected = _oracle(module, x)
            mistakes = _module_mistakes(module, x)
        expect_tensor(y, what=f"{MODULE_NAME}.forward(x)", shape=(b, t, k), device=device)
        expect_close(y, expected, what=f"{MODULE_NAME}.forward(x)", mistakes=mistakes, case=f"x of shape {(b, t, k)}",
                     otherwise="forward should compute attention(to_queries(x), to_keys(x), to_values(x)).")


def module_passes_gradients(SelfAttentionQKV: Callable, device: torch.device | str = "cpu") -> None:
    """A loss on the output sends a non-zero gradient to all three weight matrices and to the input."""
    __tracebackhide__ = True
    torch.manual_seed(700)
    module = run(SelfAttentionQKV, 4, what=f"{MODULE_NAME}(4)").to(device)
    x = randn(2, 5, 4, seed=701, device=device).requires_grad_(True)
    y = run(module, x, what=f"{MODULE_NAME}.forward(x)")
    expect_tensor(y, what=f"{MODULE_NAME}.forward(x)", shape=(2, 5, 4), device=device)
    if not y.requires_grad:
        fail(f"{MODULE_NAME}.forward(x) is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    (y * randn(2, 5, 4, seed=702, device=device)).sum().backward()
    for name in ("to_queries", "to_keys", "to_values"):
        grad = getattr(module, name).weight.grad
        if grad is None or float(grad.abs().sum()) == 0.0:
            fail(f"{MODULE_NAME}.{name} receives no gradient, so it would never learn. Is it used in forward?")
    if x.grad is None or float(x.grad.abs().sum()) == 0.0:
        fail(f"The input x of {MODULE_NAME}.forward receives no gradient.")


def module_is_permutation_equivariant(SelfAttentionQKV: Callable, device: torch.device | str = "cpu") -> None:
    """Like basic self-attention, the projected version ignores where a vector sits."""
    __tracebackhide__ = True
    torch.manual_seed(800)
    module = run(SelfAttentionQKV, 4, what=f"{MODULE_NAME}(4)").to(device)
    x = randn(2, 6, 4, seed=801, device=device)
    perm = torch.tensor([5, 2, 0, 4, 1, 3], device=device)
    with torch.no_grad():
        y = run(module, x, what=f"{MODULE_NAME}.forward(x)")
        y_perm = run(module, x[:, perm], what=f"{MODULE_NAME}.forward(x)")
    expect_tensor(y, what=f"{MODULE_NAME}.forward(x)", shape=(2, 6, 4), device=device)
    expect_close(y_perm, y[:, perm], what=f"{MODULE_NAME}.forward on permuted positions", case="permutation [5, 2, 0, 4, 1, 3]",
                 otherwise="Permuting the input positions should permute the outputs the same way and change nothing else.")
