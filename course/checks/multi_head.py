"""Checks for assignment 04: split_heads, merge_heads, MultiHeadAttention (narrow) and WideMultiHeadAttention."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.compare import expect_close, expect_linear, expect_tensor, fail, generator, randn, run

SPLIT_NAME = "split_heads"
MERGE_NAME = "merge_heads"
NARROW_NAME = "MultiHeadAttention"
WIDE_NAME = "WideMultiHeadAttention"

_INF = float("-inf")


# ---------------------------------------------------------------- split_heads and merge_heads

def _split(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Oracle: head i takes the i-th contiguous block of features. (b, t, k) -> (b, h, t, s)."""
    return torch.stack(x.chunk(heads, dim=-1), dim=1)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """Oracle: the heads' features side by side. (b, h, t, s) -> (b, t, h·s)."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def _split_mistakes(x: torch.Tensor, heads: int) -> dict[str, torch.Tensor]:
    b, t, k = x.shape
    s = k // heads
    return {
        "the tensor is reshaped to (b, heads, t, s) without a transpose, so a 'head' holds pieces of several "
        "positions. View it as (b, t, heads, s) first, then swap the middle axes: .transpose(1, 2).":
            x.reshape(b, heads, t, s),
        "the heads are split interleaved (head i gets features i, i+heads, i+2·heads, ...). Head i takes the "
        "contiguous block of features i·s to (i+1)·s − 1, as in nn.MultiheadAttention: view as (b, t, heads, s).":
            x.view(b, t, s, heads).permute(0, 3, 1, 2),
    }


def _merge_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    b, h, t, s = x.shape
    return {
        "the tensor is reshaped to (b, t, k) without a transpose, so the positions and heads get mixed up. "
        "Move the heads next to the features first: .transpose(1, 2), then reshape (or .contiguous().view).":
            x.reshape(b, t, h * s),
        "the heads are merged interleaved (feature j·heads + i comes from head i). Head i's features must be the "
        "contiguous block i·s to (i+1)·s − 1, the inverse of split_heads.": x.permute(0, 2, 3, 1).reshape(b, t, h * s),
    }


def _by_hand_input() -> torch.Tensor:
    return torch.arange(12.0).view(1, 3, 4)  # (b, t, k) = (1, 3, 4): entry 4·position + feature


def split_by_hand(split_heads: Callable) -> None:
    """(1, 3, 4) with 2 heads: head 0 holds features 0-1 of every position, head 1 features 2-3."""
    __tracebackhide__ = True
    x = _by_hand_input()
    y = run(split_heads, x.clone(), 2, what=f"{SPLIT_NAME}(x, 2)")
    expect_tensor(y, what=f"{SPLIT_NAME}(x, 2)", shape=(1, 2, 3, 2), shape_hints={
        (1, 3, 2, 2): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2) to get (b, heads, t, s).",
        (1, 2, 3, 4): "The head size is k // heads, not k."})
    expect_close(y, _split(x, 2), what=f"{SPLIT_NAME}(x, 2)", mistakes=_split_mistakes(x, 2), case="x = arange(12) as (1, 3, 4), 2 heads",
                 otherwise="Head i should hold features i·s to (i+1)·s − 1 of every position, positions in order.")


def split_matches_oracle(split_heads: Callable, device: torch.device | str = "cpu") -> None:
    """Random shapes (several heads, one head, heads = k) against torch.stack(x.chunk(heads, -1), 1)."""
    __tracebackhide__ = True
    for i, (b, t, k, heads) in enumerate([(2, 5, 12, 3), (3, 7, 8, 4), (1, 4, 6, 1), (2, 3, 6, 6)]):
        x = randn(b, t, k, seed=100 + i, device=device)
        y = run(split_heads, x.clone(), heads, what=f"{SPLIT_NAME}(x, {heads})")
        s = k // heads
        expect_tensor(y, what=f"{SPLIT_NAME}(x, {heads})", shape=(b, heads, t, s), device=device, shape_hints={
            (b, t, heads, s): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2)."})
        expect_close(y, _split(x, heads), what=f"{SPLIT_NAME}(x, {heads})", mistakes=_split_mistakes(x, heads),
                     case=f"x of shape {(b, t, k)}, {heads} heads",
                     otherwise="Head i should hold features i·s to (i+1)·s − 1 of every position.")


def merge_by_hand(merge_heads: Callable) -> None:
    """Merging the two heads of the by-hand example gives back the (1, 3, 4) input."""
    __tracebackhide__ = True
    x = _by_hand_input()
    heads = _split(x, 2)  # (1, 2, 3, 2)
    y = run(merge_heads, heads.clone(), what=f"{MERGE_NAME}(x)")
    expect_tensor(y, what=f"{MERGE_NAME}(x)", shape=(1, 3, 4), shape_hints={
        (1, 3, 2, 2): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
    expect_close(y, x, what=f"{MERGE_NAME}(x)", mistakes=_merge_mistakes(heads), case="the two heads of arange(12) as (1, 3, 4)",
                 otherwise="merge_heads must undo split_heads: merge_heads(split_heads(x, h)) == x.")


def merge_matches_oracle(merge_heads: Callable, device: torch.device | str = "cpu") -> None:
    """Random shapes against torch.cat(x.unbind(1), -1); merging split heads gives back the input."""
    __tracebackhide__ = True
    for i, (b, h, t, s) in enumerate([(2, 3, 5, 4), (3, 4, 7, 2), (1, 1, 4, 6), (2, 6, 3, 1)]):
        x = randn(b, h, t, s, seed=150 + i, device=device)
        y = run(merge_heads, x.clone(), what=f"{MERGE_NAME}(x)")
        expect_tensor(y, what=f"{MERGE_NAME}(x)", shape=(b, t, h * s), device=device, shape_hints={
            (b, t, h, s): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
        expect_close(y, _merge(x), what=f"{MERGE_NAME}(x)", mistakes=_merge_mistakes(x),
                     case=f"x of shape {(b, h, t, s)}", otherwise="merge_heads must undo split_heads.")


# ---------------------------------------------------------------- the modules: structure

def _linear(module: nn.Module, cls_name: str, name: str, n_in: int, n_out: int, bias: bool, spec: str) -> nn.Linear:
    __tracebackhide__ = True
    hint = ("unify_heads is an ordinary linear layer with a bias, as in nn.MultiheadAttention's out_proj" if bias
            else "The query, key and value projections have none")
    return expect_linear(module, cls_name, name, n_in, n_out, bias, spec, hint)


def _layers(module: nn.Module, cls_name: str, k: int, heads: int, wide: bool) -> list[nn.Linear]:
    __tracebackhide__ = True
    width = k * heads if wide else k
    spec_in = f"nn.Linear(k, {'k * heads' if wide else 'k'}, bias=False)"
    layers = [_linear(module, cls_name, name, k, width, False, spec_in) for name in ("to_queries", "to_keys", "to_values")]
    layers.append(_linear(module, cls_name, "unify_heads", width, k, True, f"nn.Linear({'k * heads' if wide else 'k'}, k)"))
    if len({id(layer) for layer in layers}) < 4:
        fail(f"Two of {cls_name}'s projections are the same layer. Queries, keys, values and unify_heads each need "
             "their own nn.Linear.")
    return layers


def _make(cls: Callable, cls_name: str, k: int, heads: int, wide: bool, device: torch.device | str, seed: int) -> nn.Module:
    """The student's module with distinct, well-spread weights and bias, so that each mistake shows."""
    __tracebackhide__ = True
    torch.manual_seed(seed)
    module = run(cls, k, heads, what=f"{cls_name}({k}, {heads})")
    if not isinstance(module, nn.Module):
        fail(f"{cls_name}({k}, {heads}) should create an nn.Module, but gave a {type(module).__name__}.")
    layers = _layers(module, cls_name, k, heads, wide)
    module = module.to(device)
    with torch.no_grad():
        for j, layer in enumerate(layers):
            layer = getattr(module, ("to_queries", "to_keys", "to_values", "unify_heads")[j])
            gain = 2.0 if j == 0 else 1.0  # sharper attention, so a wrong scale shows clearly
            layer.weight.copy_(randn(*layer.weight.shape, seed=seed + 1 + j, device=device) * gain / math.sqrt(layer.in_features))
        module.unify_heads.bias.copy_(randn(k, seed=seed + 9, device=device))
    return module


def _structure(cls: Callable, cls_name: str, k: int, heads: int, wide: bool) -> None:
    __tracebackhide__ = True
    module = _make(cls, cls_name, k, heads, wide, "cpu", 200)
    count = sum(p.numel() for p in module.parameters())
    expected = 4 * heads * k * k + k if wide else 4 * k * k + k
    if count != expected:
        formula = "4·heads·k² + k" if wide else "4k² + k"
        fail(f"{cls_name}({k}, {heads}) has {count} registered parameters; it should have {formula} = {expected}. "
             "Are extra layers registered, or some kept in a plain Python list or dict (use nn.ModuleList)?")


def narrow_structure(cls: Callable) -> None:
    """to_queries, to_keys, to_values: nn.Linear(k, k, bias=False); unify_heads: nn.Linear(k, k); 4k² + k parameters."""
    __tracebackhide__ = True
    _structure(cls, NARROW_NAME, 12, 3, wide=False)


def narrow_rejects_indivisible_heads(cls: Callable) -> None:
    """MultiHeadAttention(10, 4) cannot split 10 features into 4 equal heads: construction raises an error."""
    __tracebackhide__ = True
    try:
        cls(10, 4)
    except NotImplementedError:
        fail(f"{NARROW_NAME} is not implemented yet: replace `raise NotImplementedError()` with your code.")
    except Exception:
        return
    fail(f"{NARROW_NAME}(10, 4) was created without complaint, but 10 features cannot be split into 4 heads of "
         "equal size. Check in __init__: if k % heads != 0: raise ValueError(...) with a message that says so.")


def wide_structure(cls: Callable) -> None:
    """Projections nn.Linear(k, k·heads, bias=False); unify_heads nn.Linear(k·heads, k); 4·heads·k² + k parameters."""
    __tracebackhide__ = True
    _structure(cls, WIDE_NAME, 6, 3, wide=True)


# ---------------------------------------------------------------- the modules: what they compute

def _weights(module: nn.Module) -> tuple[torch.Tensor, ...]:
    return (module.to_queries.weight, module.to_keys.weight, module.to_values.weight,
            module.unify_heads.weight, module.unify_heads.bias)


def _forward(module: nn.Module, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None, heads: int,
             scale: float, split: str = "right", merge: str = "right", use_context: bool = True, use_mask: bool = True,
             softmax_dim: int = -1, unify: bool = True) -> torch.Tensor:
    """Multi-head attention written out with plain torch ops, with switches for the typical mistakes."""
    wq, wk, wv, wo, bo = _weights(module)
    source = x if context is None or not use_context else context

    def split_(t: torch.Tensor) -> torch.Tensor:
        b, n, width = t.shape
        if split == "no transpose":
            return t.reshape(b, heads, n, width // heads)
        if split == "interleaved":
            return t.view(b, n, width // heads, heads).permute(0, 3, 1, 2)
        return _split(t, heads)

    q, k, v = split_(F.linear(x, wq)), split_(F.linear(source, wk)), split_(F.linear(source, wv))  # (b, h, t, s)
    scores = q @ k.transpose(-2, -1) / scale  # (b, h, tq, tk)
    m = None if mask is None or not use_mask else torch.broadcast_to(mask, (x.shape[0], q.shape[-2], k.shape[-2]))[:, None]
    if m is not None:
        scores = scores.masked_fill(~m, _INF)
    w = F.softmax(scores, dim=softmax_dim)
    out = w @ v  # (b, h, tq, s)
    b, h, t, s = out.shape
    if merge == "no transpose":
        out = out.reshape(b, t, h * s)
    elif merge == "interleaved":
        out = out.permute(0, 2, 3, 1).reshape(b, t, h * s)
    else:
        out = _merge(out)
    return F.linear(out, wo, bo) if unify else out


def _narrow_oracle(module: nn.Module, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
                   heads: int) -> torch.Tensor:
    """nn.MultiheadAttention with the student's weights (zero input biases)."""
    wq, wk, wv, wo, bo = _weights(module)
    k = x.shape[-1]
    source = x if context is None else context
    mha = nn.MultiheadAttention(k, heads, bias=True, batch_first=True).to(x.device)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([wq, wk, wv]))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(wo)
        mha.out_proj.bias.copy_(bo)
        attn_mask = None
        if mask is not None:  # nn.MultiheadAttention: True means NOT allowed, one (tq, tk) mask per batch and head
            full = torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))
            attn_mask = ~full.repeat_interleave(heads, dim=0)  # (b·h, tq, tk)
        y, _ = mha(x, source, source, attn_mask=attn_mask, need_weights=False)
    return y


def _wide_oracle(module: nn.Module, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
                 heads: int) -> torch.Tensor:
    """PyTorch's fused attention on the student's projections, split into heads of size k (scale 1/√k)."""
    wq, wk, wv, wo, bo = _weights(module)
    source = x if context is None else context
    q, k, v = (_split(F.linear(t, w), heads) for t, w in ((x, wq), (source, wk), (source, wv)))  # (b, h, t, k)
    m = None if mask is None else torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))[:, None]
    return F.linear(_merge(F.scaled_dot_product_attention(q, k, v, attn_mask=m)), wo, bo)


def _mistakes(module: nn.Module, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
              heads: int, wide: bool) -> dict[str, torch.Tensor]:
    k = x.shape[-1]
    right = math.sqrt(k if wide else k // heads)

    def f(**kw):
        return _forward(module, x, context, mask, heads, kw.pop("scale", right), **kw)

    found = {}
    if wide:
        found["the scores are divided by √(k·heads), the size of the projected queries before they are split. Each "
              "head here has size k: divide by √k."] = f(scale=math.sqrt(k * heads))
        found["the scores are divided by √(k / heads); a wide head has the full size k: divide by √k."] = \
            f(scale=math.sqrt(k / heads))
    else:
        found["the scores are divided by √k, the model size; each head's dot products are over s = k // heads "
              "features, so divide by √(k // heads), the head size."] = f(scale=math.sqrt(k))
        found["the scores are divided by √(k·heads); each head's dot products are over s = k // heads features, "
              "so divide by √(k // heads)."] = f(scale=math.sqrt(k * heads))
    found["the scores are not scaled: divide them by the square root of the head size."] = f(scale=1.0)
    found["the projections are reshaped to (b, heads, t, s) without a transpose, so each 'head' mixes pieces of "
          "different positions. Use split_heads: view as (b, t, heads, s), then .transpose(1, 2)."] = \
        f(split="no transpose", merge="no transpose")
    found["the heads are split with a reshape to (b, heads, t, s) without a transpose (merge_heads is right). "
          "Use split_heads: view as (b, t, heads, s), then .transpose(1, 2)."] = f(split="no transpose")
    found["the heads are merged with a reshape to (b, t, k) without a transpose. Use merge_heads: .transpose(1, 2) "
          "first, then reshape."] = f(merge="no transpose")
    found["the heads are split interleaved (head i gets features i, i+heads, ...). Head i takes the contiguous "
          "block i·s to (i+1)·s − 1, as nn.MultiheadAttention does."] = f(split="interleaved", merge="interleaved")
    found["the softmax runs over the queries (dim=-2). Each query's weights over the keys must sum to 1: "
          "softmax over the last dimension."] = f(softmax_dim=-2)
    found["unify_heads is not applied: the merged heads must go through self.unify_heads."] = f(unify=False)
    if context is not None and (mask is None or context.shape[1] == x.shape[1]):
        found["the context is ignored: keys and values must come from the context (x only when context is None)."] = \
            f(use_context=False)
    if mask is not None:
        found["the mask is ignored: pass it on to the attention, broadcast over the heads — (b, tq, tk) becomes "
              "(b, 1, tq, tk)."] = f(use_mask=False)
    return found


_MASK_HINT = ("The mask is broadcastable to (b, tq, tk), and the scores are (b, heads, tq, tk): put a heads axis "
              "in it, e.g. torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1), or mask.unsqueeze(1) when it has 3 "
              "dimensions. A (tq, tk) mask broadcasts as it is.")
_FORWARD_HINT = ("Follow the shapes: project (b, t, k), split_heads to (b, heads, t, s), attention, merge_heads to "
                 "(b, t, k), unify_heads. ")


def _cases(device: torch.device | str, wide: bool) -> list[tuple[int, int, torch.Tensor, torch.Tensor | None, torch.Tensor | None, str]]:
    """(k, heads, x, context, mask, description): head size != k, tq != tk, batch > 1, masks of three shapes."""
    specs = [(12, 3, 3, 5, None, None), (8, 2, 2, 4, 7, None), (8, 4, 2, 6, None, "causal"),
             (12, 4, 2, 5, 6, "random"), (6, 3, 2, 5, 5, "padding"), (6, 1, 2, 3, None, None)]
    if wide:
        specs = [(6, 3, 3, 5, None, None), (4, 2, 2, 4, 7, None), (4, 4, 2, 6, None, "causal"),
                 (6, 2, 2, 5, 6, "random"), (4, 3, 2, 5, 5, "padding")]
    cases = []
    for i, (k, heads, b, tq, tk, kind) in enumerate(specs):
        x = randn(b, tq, k, seed=250 + i, device=device)
        context = None if tk is None else randn(b, tk, k, seed=260 + i, device=device)
        n = tq if tk is None else tk
        if kind == "causal":
            mask = torch.ones(tq, n, dtype=torch.bool, device=device).tril()  # (tq, tk)
        elif kind == "random":
            mask = torch.rand(b, tq, n, generator=generator(270 + i)) < 0.5
            mask[:, torch.arange(tq), torch.arange(tq) % n] = True  # nobody is left with nothing to attend to
            mask = mask.to(device)  # (b, tq, tk)
        elif kind == "padding":
            mask = (torch.arange(n, device=device) < torch.tensor([n, 3], device=device)[:, None])[:, None, :]  # (b, 1, tk)
        else:
            mask = None
        what = f"k={k}, {heads} heads, x {(b, tq, k)}"
        what += ", no context" if context is None else f", context {(b, tk, k)}"
        what += "" if mask is None else f", {kind} mask {tuple(mask.shape)}"
        cases.append((k, heads, x, context, mask, what))
    return cases


def _call(module: nn.Module, cls_name: str, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
          device: torch.device | str) -> torch.Tensor:
    __tracebackhide__ = True
    kwargs = {}
    if context is not None:
        kwargs["context"] = context.clone()
    if mask is not None:
        kwargs["mask"] = mask.clone()
    signature = ", ".join(["x", *kwargs])
    hint = _FORWARD_HINT + (_MASK_HINT if mask is not None else "")
    hint += " forward's signature is forward(self, x, context=None, mask=None)." if kwargs else ""
    y = run(module, x.clone(), **kwargs, what=f"{cls_name}.forward({signature})", hint=hint)
    b, tq, k = x.shape
    tk = x.shape[1] if context is None else context.shape[1]
    expect_tensor(y, what=f"{cls_name}.forward", shape=(b, tq, k), device=device, shape_hints={
        (b, tk, k): "There is one output per context position: the queries must come from x, keys and values from "
                    "the context."})
    return y


def _matches_oracle(cls: Callable, cls_name: str, device: torch.device | str, wide: bool) -> None:
    __tracebackhide__ = True
    for i, (k, heads, x, context, mask, what) in enumerate(_cases(device, wide)):
        module = _make(cls, cls_name, k, heads, wide, device, 300 + 20 * i)
        with torch.no_grad():
            y = _call(module, cls_name, x, context, mask, device)
            expected = (_wide_oracle if wide else _narrow_oracle)(module, x, context, mask, heads)
            mistakes = _mistakes(module, x, context, mask, heads, wide)
        oracle = "PyTorch's fused attention on your projections" if wide else "nn.MultiheadAttention with your weights"
        expect_close(y, expected, what=f"{cls_name}.forward", mistakes=mistakes, case=what,
                     otherwise=f"It differs from {oracle}. " + _FORWARD_HINT)


def narrow_matches_oracle(cls: Callable, device: torch.device | str = "cpu") -> None:
    """Self- and cross-attention, 1-4 heads, masks (tq, tk), (b, tq, tk), (b, 1, tk) against nn.MultiheadAttention."""
    __tracebackhide__ = True
    _matches_oracle(cls, NARROW_NAME, device, wide=False)


def wide_matches_oracle(cls: Callable, device: torch.device | str = "cpu") -> None:
    """The same cases against F.scaled_dot_product_attention on the student's projections, heads of size k."""
    __tracebackhide__ = True
    _matches_oracle(cls, WIDE_NAME, device, wide=True)


def _shapes_and_context(cls: Callable, cls_name: str, device: torch.device | str, wide: bool) -> None:
    __tracebackhide__ = True
    module = _make(cls, cls_name, 8, 2, wide, device, 400)
    x = randn(2, 3, 8, seed=401, device=device)
    context = randn(2, 5, 8, seed=402, device=device)
    with torch.no_grad():
        y_self = _call(module, cls_name, x, None, None, device)
        y_explicit = _call(module, cls_name, x, x, None, device)
        y_cross = _call(module, cls_name, x, context, None, device)
    expect_close(y_explicit, y_self, what=f"{cls_name}.forward(x, context=x)", case="x (2, 3, 8)",
                 otherwise="With context=None the keys and values come from x, so forward(x) and forward(x, "
                           "context=x) must agree.")
    if torch.allclose(y_cross, y_self, atol=1e-5):
        fail(f"{cls_name}.forward(x, context=c) gives the same result as forward(x): the context is ignored. "
             "Keys and values come from the context when one is given.")


def narrow_shapes_and_context(cls: Callable, device: torch.device | str = "cpu") -> None:
    """(b, tq, k) out for self- and cross-attention; forward(x) equals forward(x, context=x); the context matters."""
    __tracebackhide__ = True
    _shapes_and_context(cls, NARROW_NAME, device, wide=False)


def wide_shapes_and_context(cls: Callable, device: torch.device | str = "cpu") -> None:
    """The same for the wide module."""
    __tracebackhide__ = True
    _shapes_and_context(cls, WIDE_NAME, device, wide=True)


def narrow_respects_a_causal_mask(cls: Callable, device: torch.device | str = "cpu") -> None:
    """With a causal mask, (t, t) or one per batch element (b, t, t), changing input 4 changes no earlier output."""
    __tracebackhide__ = True
    t = 6
    module = _make(cls, NARROW_NAME, 8, 4, False, device, 420)
    x = randn(2, t, 8, seed=421, device=device)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (t, t)
    for mask in (causal, causal.expand(2, t, t).clone()):
        with torch.no_grad():
            y = _call(module, NARROW_NAME, x, None, mask, device)
            y_changed = _call(module, NARROW_NAME, x_changed, None, mask, device)
        expect_close(y_changed[:, :4], y[:, :4], what=f"{NARROW_NAME}.forward with a causal mask of shape "
                     f"{tuple(mask.shape)}, outputs 0-3", case="input 4 changed",
                     otherwise="Changing input 4 changed an earlier output: the mask is not applied to every head. "
                               + _MASK_HINT)


def _count_matmuls(y: torch.Tensor) -> int:
    """Matrix products in the autograd graph of y: a loop over heads repeats them once per head."""
    seen, stack, count = set(), [y.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__.lower()
        if "mm" in name or "matmul" in name or "scaleddotproduct" in name or "attention" in name:
            count += 1
        stack.extend(next_node for next_node, _ in node.next_functions)
    return count


def narrow_passes_gradients_without_a_loop(cls: Callable, device: torch.device | str = "cpu") -> None:
    """Gradients reach every parameter, x and the context; the heads are computed together, not in a Python loop."""
    __tracebackhide__ = True
    heads = 8
    module = _make(cls, NARROW_NAME, 16, heads, False, device, 440)
    x = randn(2, 5, 16, seed=441, device=device).requires_grad_(True)
    context = randn(2, 7, 16, seed=442, device=device).requires_grad_(True)
    y = run(module, x, context=context, what=f"{NARROW_NAME}.forward(x, context)", hint=_FORWARD_HINT)
    expect_tensor(y, what=f"{NARROW_NAME}.forward", shape=(2, 5, 16), device=device)
    if not y.requires_grad:
        fail(f"{NARROW_NAME}.forward is cut off from autograd: avoid .detach(), .data or torch.no_grad() in it.")
    (y * randn(2, 5, 16, seed=443, device=device)).sum().backward()
    for name, p in module.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0.0:
            fail(f"The parameter {name} receives no gradient, so it would never learn. Is it used in forward?")
    for name, t in (("x", x), ("context", context)):
        if t.grad is None or float(t.grad.abs().sum()) == 0.0:
            fail(f"The input {name} receives no gradient through {NARROW_NAME}.forward.")
    count = _count_matmuls(y)
    if count > 12:
        fail(f"{NARROW_NAME}.forward with {heads} heads performs {count} matrix products; computed together, the "
             "heads need about 6. It looks like a Python loop over the heads: split the projections into a "
             "(b, heads, t, s) tensor and let one batched attention call handle every head at once.")
