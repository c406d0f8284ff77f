"""Checks for assignment 04: split_heads, merge_heads, MultiHeadAttention (narrow) and WideMultiHeadAttention.

Each check is a probe (runs the student's code on inputs and weights chosen here) and a judge (decides from what
the probe recorded). Oracles: torch.stack/torch.cat for the head layout, nn.MultiheadAttention for the narrow
module, F.scaled_dot_product_attention on the projections for the wide one. See course/checks/check.py.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules, oracles
from course.checks.check import Check
from course.checks.compare import (
    Mistake,
    expect_close,
    fail,
    generator,
    matches_any,
    output,
    randn,
)
from course.checks.evidence import Evidence, Recorder

SPLIT_NAME = "split_heads"
MERGE_NAME = "merge_heads"
NARROW_NAME = "MultiHeadAttention"
WIDE_NAME = "WideMultiHeadAttention"

LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})
#: more matrix products than this in the graph of an 8-head forward pass: a Python loop over the heads
MAX_MATMULS = 12

_INF = float("-inf")

# ---------------------------------------------------------------- mistakes

SPLIT_NO_TRANSPOSE = Mistake(
    "split-without-transpose",
    "the tensor is reshaped to (b, heads, t, s) without a transpose, so a 'head' holds pieces of several "
    "positions. View it as (b, t, heads, s) first, then swap the middle axes: .transpose(1, 2).")
SPLIT_INTERLEAVED = Mistake(
    "split-interleaved",
    "the heads are split interleaved (head i gets features i, i+heads, i+2·heads, ...). Head i takes the "
    "contiguous block of features i·s to (i+1)·s − 1, as in nn.MultiheadAttention: view as (b, t, heads, s).")
MERGE_NO_TRANSPOSE = Mistake(
    "merge-without-transpose",
    "the tensor is reshaped to (b, t, k) without a transpose, so the positions and heads get mixed up. "
    "Move the heads next to the features first: .transpose(1, 2), then reshape (or .contiguous().view).")
MERGE_INTERLEAVED = Mistake(
    "merge-interleaved",
    "the heads are merged interleaved (feature j·heads + i comes from head i). Head i's features must be the "
    "contiguous block i·s to (i+1)·s − 1, the inverse of split_heads.")

SCALED_BY_MODEL_SIZE = Mistake(
    "scaled-by-model-size",
    "the scores are divided by √k, the model size; each head's dot products are over s = k // heads "
    "features, so divide by √(k // heads), the head size.")
SCALED_BY_K_TIMES_HEADS = Mistake(
    "scaled-by-k-times-heads",
    "the scores are divided by √(k·heads); each head's dot products are over s = k // heads features, "
    "so divide by √(k // heads).")
SCALED_BY_PROJECTED_SIZE = Mistake(
    "scaled-by-projected-size",
    "the scores are divided by √(k·heads), the size of the projected queries before they are split. Each "
    "head here has size k: divide by √k.")
SCALED_BY_HEAD_FRACTION = Mistake(
    "scaled-by-head-fraction", "the scores are divided by √(k / heads); a wide head has the full size k: divide by √k.")
UNSCALED = Mistake("unscaled", "the scores are not scaled: divide them by the square root of the head size.")
HEADS_NO_TRANSPOSE = Mistake(
    "heads-reshaped-without-transpose",
    "the projections are reshaped to (b, heads, t, s) without a transpose, so each 'head' mixes pieces of "
    "different positions. Use split_heads: view as (b, t, heads, s), then .transpose(1, 2).")
HEADS_SPLIT_NO_TRANSPOSE = Mistake(
    "heads-split-without-transpose",
    "the heads are split with a reshape to (b, heads, t, s) without a transpose. "
    "Use split_heads: view as (b, t, heads, s), then .transpose(1, 2).")
HEADS_MERGED_NO_TRANSPOSE = Mistake(
    "heads-merged-without-transpose",
    "the heads are merged with a reshape to (b, t, k) without a transpose. Use merge_heads: .transpose(1, 2) "
    "first, then reshape.")
HEADS_INTERLEAVED = Mistake(
    "heads-interleaved",
    "the heads are split interleaved (head i gets features i, i+heads, ...). Head i takes the contiguous "
    "block i·s to (i+1)·s − 1, as nn.MultiheadAttention does.")
HEADS_SPLIT_INTERLEAVED = Mistake(
    "heads-split-interleaved",
    "the heads are split interleaved (head i gets features i, i+heads, ...). Head i takes the contiguous "
    "block i·s to (i+1)·s − 1: view as (b, t, heads, s), then .transpose(1, 2).")
HEADS_MERGED_INTERLEAVED = Mistake(
    "heads-merged-interleaved",
    "the heads are merged interleaved (feature j·heads + i comes from head i). Head i's features must be the "
    "contiguous block i·s to (i+1)·s − 1: .transpose(1, 2), then reshape.")
SOFTMAX_OVER_QUERIES = Mistake(
    "softmax-over-queries",
    "the softmax runs over the queries (dim=-2). Each query's weights over the keys must sum to 1: "
    "softmax over the last dimension.")
UNIFY_SKIPPED = Mistake("unify-skipped",
                        "unify_heads is not applied: the merged heads must go through self.unify_heads.")
CONTEXT_IGNORED = Mistake(
    "context-ignored",
    "the context is ignored: keys and values must come from the context (x only when context is None).")
MASK_IGNORED = Mistake(
    "mask-ignored",
    "the mask is ignored: pass it on to the attention, broadcast over the heads — (b, tq, tk) becomes "
    "(b, 1, tq, tk).")

# ids of structure and property failures (fail(..., mistake=...)); the shared ones are in course/checks/modules.py
UNIFY_NO_BIAS = "unify-no-bias"
PROJECTION_BIAS = "projection-bias"
NO_DIVISIBILITY_CHECK = "no-divisibility-check"
LOOP_OVER_HEADS = "loop-over-heads"
SEVERAL = "several-mistakes"  # a combination of the module mistakes above, named part by part

_MASK_HINT = ("The mask is broadcastable to (b, tq, tk), and the scores are (b, heads, tq, tk): put a heads axis "
              "in it, e.g. torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1), or mask.unsqueeze(1) when it has 3 "
              "dimensions. A (tq, tk) mask broadcasts as it is.")
_SHARED = ("Two of {}'s layers are the same object. Queries, keys, values and unify_heads each need their own "
           "nn.Linear.")
_FORWARD_HINT = ("Follow the shapes: project (b, t, k), split_heads to (b, heads, t, s), attention, merge_heads to "
                 "(b, t, k), unify_heads.")


# ---------------------------------------------------------------- split_heads and merge_heads

def _split(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Oracle: head i takes the i-th contiguous block of features. (b, t, k) -> (b, h, t, s)."""
    return torch.stack(x.chunk(heads, dim=-1), dim=1)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """Oracle: the heads' features side by side. (b, h, t, s) -> (b, t, h·s)."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def _split_mistakes(x: torch.Tensor, heads: int) -> list[tuple[Mistake, torch.Tensor]]:
    b, t, k = x.shape
    s = k // heads
    return [(SPLIT_NO_TRANSPOSE, x.reshape(b, heads, t, s)),
            (SPLIT_INTERLEAVED, x.reshape(b, t, s, heads).permute(0, 3, 1, 2))]


def _merge_mistakes(x: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    b, h, t, s = x.shape
    return [(MERGE_NO_TRANSPOSE, x.reshape(b, t, h * s)),
            (MERGE_INTERLEAVED, x.permute(0, 2, 3, 1).reshape(b, t, h * s))]


def _by_hand_input() -> torch.Tensor:
    return torch.arange(12.0).view(1, 3, 4)  # (b, t, k) = (1, 3, 4): entry 4·position + feature


_SPLIT_HINT = "Head i should hold features i·s to (i+1)·s − 1 of every position, positions in order."
_MERGE_HINT = "merge_heads must undo split_heads: merge_heads(split_heads(x, h)) == x."
SPLIT_CASES = ((2, 5, 12, 3), (3, 7, 8, 4), (1, 4, 6, 1), (2, 3, 6, 6))  # (b, t, k, heads)
MERGE_CASES = ((2, 3, 5, 4), (3, 4, 7, 2), (1, 1, 4, 6), (2, 6, 3, 1))  # (b, heads, t, s)


def _probe_split_by_hand(split_heads, rec: Recorder) -> None:
    rec.call("y", split_heads, _by_hand_input().to(rec.device), 2)


def _judge_split_by_hand(ev: Evidence) -> None:
    """(1, 3, 4) with 2 heads: head 0 holds features 0-1 of every position, head 1 features 2-3."""
    x = _by_hand_input()
    y = output(ev, "y", what=f"{SPLIT_NAME}(x, 2)", shape=(1, 2, 3, 2), shape_hints={
        (1, 3, 2, 2): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2) to get (b, heads, t, s).",
        (1, 2, 3, 4): "The head size is k // heads, not k."})
    expect_close(y, _split(x, 2), what=f"{SPLIT_NAME}(x, 2)", device=ev.device, mistakes=_split_mistakes(x, 2),
                 case="x = arange(12) as (1, 3, 4), 2 heads", otherwise=_SPLIT_HINT)


split_heads_by_hand = Check("split_heads_by_hand", _probe_split_by_hand, _judge_split_by_hand)


def _split_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=100 + i)


def _probe_split_oracle(split_heads, rec: Recorder) -> None:
    for i, (b, t, k, heads) in enumerate(SPLIT_CASES):
        rec.call(f"y{i}", split_heads, _split_x(i, b, t, k).to(rec.device), heads)


def _judge_split_oracle(ev: Evidence) -> None:
    """Random shapes (several heads, one head, heads = k) against torch.stack(x.chunk(heads, -1), 1)."""
    for i, (b, t, k, heads) in enumerate(SPLIT_CASES):
        x = _split_x(i, b, t, k)
        s = k // heads
        y = output(ev, f"y{i}", what=f"{SPLIT_NAME}(x, {heads})", shape=(b, heads, t, s), shape_hints={
            (b, t, heads, s): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2)."})
        expect_close(y, _split(x, heads), what=f"{SPLIT_NAME}(x, {heads})", device=ev.device,
                     mistakes=_split_mistakes(x, heads), case=f"x of shape {(b, t, k)}, {heads} heads",
                     otherwise=_SPLIT_HINT)


split_heads_oracle = Check("split_heads_oracle", _probe_split_oracle, _judge_split_oracle)


def _probe_merge_by_hand(merge_heads, rec: Recorder) -> None:
    rec.call("y", merge_heads, _split(_by_hand_input(), 2).to(rec.device))


def _judge_merge_by_hand(ev: Evidence) -> None:
    """Merging the two heads of the by-hand example gives back the (1, 3, 4) input."""
    x = _by_hand_input()
    heads = _split(x, 2)  # (1, 2, 3, 2)
    y = output(ev, "y", what=f"{MERGE_NAME}(x)", shape=(1, 3, 4), shape_hints={
        (1, 3, 2, 2): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
    expect_close(y, x, what=f"{MERGE_NAME}(x)", device=ev.device, mistakes=_merge_mistakes(heads),
                 case="the two heads of arange(12) as (1, 3, 4)", otherwise=_MERGE_HINT)


merge_heads_by_hand = Check("merge_heads_by_hand", _probe_merge_by_hand, _judge_merge_by_hand)


def _merge_x(i: int, b: int, h: int, t: int, s: int) -> torch.Tensor:
    return randn(b, h, t, s, seed=150 + i)


def _probe_merge_oracle(merge_heads, rec: Recorder) -> None:
    for i, (b, h, t, s) in enumerate(MERGE_CASES):
        rec.call(f"y{i}", merge_heads, _merge_x(i, b, h, t, s).to(rec.device))


def _judge_merge_oracle(ev: Evidence) -> None:
    """Random shapes against torch.cat(x.unbind(1), -1), the inverse of split_heads."""
    for i, (b, h, t, s) in enumerate(MERGE_CASES):
        x = _merge_x(i, b, h, t, s)
        y = output(ev, f"y{i}", what=f"{MERGE_NAME}(x)", shape=(b, t, h * s), shape_hints={
            (b, t, h, s): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
        expect_close(y, _merge(x), what=f"{MERGE_NAME}(x)", device=ev.device, mistakes=_merge_mistakes(x),
                     case=f"x of shape {(b, h, t, s)}", otherwise="merge_heads must undo split_heads.")


merge_heads_oracle = Check("merge_heads_oracle", _probe_merge_oracle, _judge_merge_oracle)


# ---------------------------------------------------------------- the modules: the probe's side

def _make(cls: Callable, rec: Recorder, key: str, k: int, heads: int, seed: int) -> nn.Module | None:
    """Build the student's module, record its structure, and load the check's weights (seed) into it."""
    return modules.build(rec, key, cls, k, heads, seed=seed, gains=GAINS, layers=LAYERS)


def _forward_kwargs(context: torch.Tensor | None, mask: torch.Tensor | None, device: torch.device) -> dict:
    kwargs = {}
    if context is not None:
        kwargs["context"] = context.to(device)
    if mask is not None:
        kwargs["mask"] = mask.to(device)
    return kwargs


def _run(rec: Recorder, key: str, module: nn.Module, x: torch.Tensor, context: torch.Tensor | None = None,
         mask: torch.Tensor | None = None) -> None:
    """Record module(x, context=..., mask=...) without gradients, on fresh copies of the check's inputs."""
    with torch.no_grad():
        rec.call(key, module, x.to(rec.device), **_forward_kwargs(context, mask, rec.device))


# ---------------------------------------------------------------- the modules: the judge's side

def _expected_params(k: int, heads: int, wide: bool) -> dict[str, tuple[int, ...]]:
    width = k * heads if wide else k
    return {"to_queries.weight": (width, k), "to_keys.weight": (width, k), "to_values.weight": (width, k),
            "unify_heads.weight": (k, width), "unify_heads.bias": (k,)}


def _weights(ev: Evidence, key: str, cls_name: str, k: int, heads: int, wide: bool,
             seed: int) -> dict[str, torch.Tensor]:
    """The four layers are separate nn.Linear of the right sizes, with a bias only on unify_heads; and the values
    the probe loaded into the five parameters (recreated here)."""
    __tracebackhide__ = True
    width, width_spec = (k * heads, "k * heads") if wide else (k, "k")
    projection = (k, width, False, f"nn.Linear(k, {width_spec}, bias=False)")
    layers = {**dict.fromkeys(LAYERS[:3], projection), "unify_heads": (width, k, True, f"nn.Linear({width_spec}, k)")}
    what = f"{cls_name}({k}, {heads})"
    modules.expect_layers(ev, key, what, cls_name, layers, _SHARED.format(cls_name),
                          {**dict.fromkeys(LAYERS[:3], PROJECTION_BIAS), "unify_heads": UNIFY_NO_BIAS})
    return modules.expect_parameters(ev, key, what, _expected_params(k, heads, wide), seed, GAINS)


def _mha(w: dict[str, torch.Tensor], heads: int) -> nn.MultiheadAttention:
    """nn.MultiheadAttention carrying these weights (zero input biases)."""
    return oracles.multihead_attention(w["to_queries.weight"], w["to_keys.weight"], w["to_values.weight"], heads,
                                       wo=w["unify_heads.weight"], bo=w["unify_heads.bias"])


def _narrow_oracle(w: dict[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor | None,
                   mask: torch.Tensor | None, heads: int) -> torch.Tensor:
    """nn.MultiheadAttention with the check's weights."""
    with torch.no_grad():
        return oracles.attend(_mha(w, heads), x, context, mask)


def _wide_oracle(w: dict[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor | None,
                 mask: torch.Tensor | None, heads: int) -> torch.Tensor:
    """PyTorch's fused attention on the projections, split into heads of size k (scale 1/√k)."""
    source = x if context is None else context
    q, k, v = (_split(F.linear(t, w[name]), heads)
               for t, name in ((x, "to_queries.weight"), (source, "to_keys.weight"), (source, "to_values.weight")))
    m = None if mask is None else torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))[:, None]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # (b, h, tq, k)
    return F.linear(_merge(out), w["unify_heads.weight"], w["unify_heads.bias"])


def _oracle(wide: bool) -> Callable[..., torch.Tensor]:
    return _wide_oracle if wide else _narrow_oracle


def _forward(w: dict[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
             heads: int, scale: float, split: str = "right", merge: str = "right", use_context: bool = True,
             use_mask: bool = True, softmax_dim: int = -1, unify: bool = True) -> torch.Tensor:
    """Multi-head attention written out with plain torch ops, with switches for the typical mistakes."""
    source = x if context is None or not use_context else context

    def split_(t: torch.Tensor) -> torch.Tensor:
        b, n, width = t.shape
        if split == "no transpose":
            return t.reshape(b, heads, n, width // heads)
        if split == "interleaved":
            return t.reshape(b, n, width // heads, heads).permute(0, 3, 1, 2)
        return _split(t, heads)

    q = split_(F.linear(x, w["to_queries.weight"]))  # (b, h, tq, s)
    k = split_(F.linear(source, w["to_keys.weight"]))  # (b, h, tk, s)
    v = split_(F.linear(source, w["to_values.weight"]))  # (b, h, tk, s)
    scores = q @ k.transpose(-2, -1) / scale  # (b, h, tq, tk)
    if mask is not None and use_mask:
        m = torch.broadcast_to(mask, (x.shape[0], q.shape[-2], k.shape[-2]))[:, None]  # (b, 1, tq, tk)
        scores = scores.masked_fill(~m, _INF)
    out = F.softmax(scores, dim=softmax_dim) @ v  # (b, h, tq, s)
    b, h, t, s = out.shape
    if merge == "no transpose":
        out = out.reshape(b, t, h * s)
    elif merge == "interleaved":
        out = out.permute(0, 2, 3, 1).reshape(b, t, h * s)
    else:
        out = _merge(out)
    return F.linear(out, w["unify_heads.weight"], w["unify_heads.bias"]) if unify else out


def _mistake_specs(k: int, heads: int, wide: bool, x: torch.Tensor, context: torch.Tensor | None,
                   mask: torch.Tensor | None) -> list[tuple[Mistake, dict[str, Any]]]:
    """The typical mistakes for this case, as switches of _forward: each one alone, then combined.

    The module calls the student's own split_heads and merge_heads, so a mistake there shows up in the module
    too, and may come together with one in the module's cell (a wrong scale, say). Combinations of one scale, one
    split, one merge and one other mistake are real computations of the exercise; they keep the property checks'
    credit and are named, part by part, by the oracle check."""
    right = math.sqrt(k if wide else k // heads)
    wrong = (((SCALED_BY_PROJECTED_SIZE, math.sqrt(k * heads)), (SCALED_BY_HEAD_FRACTION, math.sqrt(k / heads)))
             if wide else ((SCALED_BY_MODEL_SIZE, math.sqrt(k)), (SCALED_BY_K_TIMES_HEADS, math.sqrt(k * heads))))
    scales = ((None, right), *wrong, (UNSCALED, 1.0))
    splits = ((None, "right"), (HEADS_SPLIT_NO_TRANSPOSE, "no transpose"), (HEADS_SPLIT_INTERLEAVED, "interleaved"))
    merges = ((None, "right"), (HEADS_MERGED_NO_TRANSPOSE, "no transpose"), (HEADS_MERGED_INTERLEAVED, "interleaved"))
    both = {"no transpose": HEADS_NO_TRANSPOSE, "interleaved": HEADS_INTERLEAVED}
    others: list[tuple[Mistake | None, dict[str, Any]]] = [
        (None, {}), (SOFTMAX_OVER_QUERIES, {"softmax_dim": -2}), (UNIFY_SKIPPED, {"unify": False})]
    if context is not None and (mask is None or context.shape[1] == x.shape[1]):
        others.append((CONTEXT_IGNORED, {"use_context": False}))
    if mask is not None:
        others.append((MASK_IGNORED, {"use_mask": False}))
    single, several = [], []
    for (m_scale, scale), (m_split, split), (m_merge, merge), (m_other, other) in product(scales, splits, merges,
                                                                                         others):
        layout = [both[split]] if m_split and m_merge and split == merge else [m for m in (m_split, m_merge) if m]
        parts = [m for m in (m_scale, *layout, m_other) if m is not None]
        switches = {"scale": scale, "split": split, "merge": merge, **other}
        if len(parts) == 1:
            single.append((parts[0], switches))
        elif parts:
            several.append((Mistake(SEVERAL, "several things at once. " + " ".join(
                f"({i}) {m.explanation[0].upper()}{m.explanation[1:]}" for i, m in enumerate(parts, 1))), switches))
    return single + several


def _mistakes(w: dict[str, torch.Tensor], k: int, heads: int, wide: bool, x: torch.Tensor,
              context: torch.Tensor | None, mask: torch.Tensor | None) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        return [(m, _forward(w, x, context, mask, heads, **kw)) for m, kw in _mistake_specs(k, heads, wide, x, context,
                                                                                             mask)]


def _anchor(ev: Evidence, y: torch.Tensor, w: dict[str, torch.Tensor], k: int, heads: int, wide: bool,
            x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None, claim: str, case: str) -> None:
    """Fail unless y is what multi-head attention (or one of its typical mistakes) computes with these weights."""
    __tracebackhide__ = True
    expected = _oracle(wide)(w, x, context, mask, heads)
    if not matches_any(y, [expected, *(m for _, m in _mistakes(w, k, heads, wide, x, context, mask))], ev.device):
        fail(f"{claim}, but it is not multi-head attention: its output matches neither the reference nor a known "
             f"mistake. {_FORWARD_HINT}", expected, y, case=case)


def _module_output(ev: Evidence, key: str, cls_name: str, x: torch.Tensor, context: torch.Tensor | None,
                   mask: torch.Tensor | None) -> torch.Tensor:
    __tracebackhide__ = True
    b, tq, k = x.shape
    tk = tq if context is None else context.shape[1]
    signature = ", ".join(["x", *(["context"] if context is not None else []), *(["mask"] if mask is not None else [])])
    hint = _FORWARD_HINT + (" " + _MASK_HINT if mask is not None else "")
    hint += " forward's signature is forward(self, x, context=None, mask=None)." if signature != "x" else ""
    return output(ev, key, what=f"{cls_name}.forward({signature})", shape=(b, tq, k), hint=hint, shape_hints={
        (b, tk, k): "There is one output per context position: the queries must come from x, keys and values from "
                    "the context."})


def _describe_case(k: int, heads: int, x: torch.Tensor, context: torch.Tensor | None, mask: torch.Tensor | None,
                   kind: str | None = None) -> str:
    what = f"k={k}, {heads} heads, x {tuple(x.shape)}"
    what += ", no context" if context is None else f", context {tuple(context.shape)}"
    what += "" if mask is None else f", {kind + ' ' if kind else ''}mask {tuple(mask.shape)}"
    return what


# ---------------------------------------------------------------- structure

_STRUCTURE = MappingProxyType({False: (12, 3), True: (6, 3)})  # wide -> (k, heads)


def _structure_x(k: int) -> torch.Tensor:
    return randn(2, 4, k, seed=201)


def _probe_structure(cls: Callable, rec: Recorder, wide: bool) -> None:
    k, heads = _STRUCTURE[wide]
    module = _make(cls, rec, "module", k, heads, 200)
    if module is not None:
        _run(rec, "y", module, _structure_x(k))


def _judge_structure(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    k, heads = _STRUCTURE[wide]
    cls_name = WIDE_NAME if wide else NARROW_NAME
    w = _weights(ev, "module", cls_name, k, heads, wide, 200)
    modules.expect_parameter_count(
        ev, "module", f"{cls_name}({k}, {heads})", 4 * heads * k * k + k if wide else 4 * k * k + k,
        f"it should have {'4·heads·k² + k' if wide else '4k² + k'}",
        "Are extra layers registered, or some kept in a plain Python list or dict (use nn.ModuleList)?")
    x = _structure_x(k)
    y = _module_output(ev, "y", cls_name, x, None, None)
    _anchor(ev, y, w, k, heads, wide, x, None, None, f"{cls_name} has the right layers",
            _describe_case(k, heads, x, None, None))


def _judge_narrow_structure(ev: Evidence) -> None:
    """to_queries, to_keys, to_values: nn.Linear(k, k, bias=False); unify_heads: nn.Linear(k, k); 4k² + k
    parameters."""
    _judge_structure(ev, wide=False)


def _judge_wide_structure(ev: Evidence) -> None:
    """Projections nn.Linear(k, k·heads, bias=False); unify_heads nn.Linear(k·heads, k); 4·heads·k² + k
    parameters."""
    _judge_structure(ev, wide=True)


multi_head_structure = Check("multi_head_structure", lambda cls, rec: _probe_structure(cls, rec, False),
                             _judge_narrow_structure)
wide_structure = Check("wide_structure", lambda cls, rec: _probe_structure(cls, rec, True), _judge_wide_structure)


def _probe_indivisible(cls: Callable, rec: Recorder) -> None:
    rec.call("indivisible", cls, 10, 4)
    _probe_structure(cls, rec, False)


def _judge_indivisible(ev: Evidence) -> None:
    """MultiHeadAttention(10, 4) cannot split 10 features into 4 equal heads: construction raises an error."""
    fact = ev.facts.get("indivisible")
    if not isinstance(fact, dict):
        fail(f"The test recorded nothing for {NARROW_NAME}(10, 4): the check did not run to the end.")
    if fact.get("kind") == "raised" and fact.get("not_implemented"):
        fail(f"{NARROW_NAME} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             mistake="not-implemented")
    if fact.get("kind") != "raised":
        fail(f"{NARROW_NAME}(10, 4) was created without complaint, but 10 features cannot be split into 4 heads of "
             "equal size. Check in __init__: if k % heads != 0: raise ValueError(...) with a message that says so.",
             mistake=NO_DIVISIBILITY_CHECK)
    k, heads = _STRUCTURE[False]
    w = _weights(ev, "module", NARROW_NAME, k, heads, False, 200)
    x = _structure_x(k)
    y = _module_output(ev, "y", NARROW_NAME, x, None, None)
    _anchor(ev, y, w, k, heads, False, x, None, None, f"{NARROW_NAME}(10, 4) raises an error",
            _describe_case(k, heads, x, None, None))


multi_head_indivisible = Check("multi_head_indivisible", _probe_indivisible, _judge_indivisible)


# ---------------------------------------------------------------- shapes and context

def _context_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return randn(2, 3, 8, seed=401), randn(2, 5, 8, seed=402)


def _probe_context(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 8, 2, 400)
    if module is None:
        return
    x, context = _context_inputs()
    _run(rec, "y_self", module, x)
    _run(rec, "y_explicit", module, x, x)
    _run(rec, "y_cross", module, x, context)


def _judge_context(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    cls_name = WIDE_NAME if wide else NARROW_NAME
    w = _weights(ev, "module", cls_name, 8, 2, wide, 400)
    x, context = _context_inputs()
    y_self = _module_output(ev, "y_self", cls_name, x, None, None)
    y_explicit = _module_output(ev, "y_explicit", cls_name, x, x, None)
    y_cross = _module_output(ev, "y_cross", cls_name, x, context, None)
    expect_close(y_explicit, y_self, what=f"{cls_name}.forward(x, context=x)", device=ev.device, case="x (2, 3, 8)",
                 otherwise="With context=None the keys and values come from x, so forward(x) and forward(x, "
                           "context=x) must agree.")
    if torch.allclose(y_cross, y_self, atol=1e-5):
        fail(f"{cls_name}.forward(x, context=c) gives the same result as forward(x): the context is ignored. "
             "Keys and values come from the context when one is given.", mistake=CONTEXT_IGNORED.id)
    for y, c in ((y_self, None), (y_cross, context)):
        _anchor(ev, y, w, 8, 2, wide, x, c, None, f"{cls_name} takes its keys and values from the context",
                _describe_case(8, 2, x, c, None))


def _judge_narrow_context(ev: Evidence) -> None:
    """(b, tq, k) out for self- and cross-attention; forward(x) equals forward(x, context=x); the context
    matters."""
    _judge_context(ev, wide=False)


def _judge_wide_context(ev: Evidence) -> None:
    """The same for the wide module."""
    _judge_context(ev, wide=True)


multi_head_context = Check("multi_head_context", _probe_context, _judge_narrow_context)
wide_context = Check("wide_context", _probe_context, _judge_wide_context)


# ---------------------------------------------------------------- a causal mask

_CAUSAL_T = 6


def _causal_inputs() -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    x = randn(2, _CAUSAL_T, 8, seed=421)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0
    causal = torch.ones(_CAUSAL_T, _CAUSAL_T, dtype=torch.bool).tril()  # (t, t)
    return x, x_changed, (causal, causal.expand(2, _CAUSAL_T, _CAUSAL_T).clone())


def _probe_causal(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 8, 4, 420)
    if module is None:
        return
    x, x_changed, masks = _causal_inputs()
    for i, mask in enumerate(masks):
        _run(rec, f"y{i}", module, x, None, mask)
        _run(rec, f"y_changed{i}", module, x_changed, None, mask)


def _judge_causal(ev: Evidence) -> None:
    """With a causal mask, (t, t) or one per batch element (b, t, t), changing input 4 changes no earlier output."""
    w = _weights(ev, "module", NARROW_NAME, 8, 4, False, 420)
    x, x_changed, masks = _causal_inputs()
    for i, mask in enumerate(masks):
        y = _module_output(ev, f"y{i}", NARROW_NAME, x, None, mask)
        y_changed = _module_output(ev, f"y_changed{i}", NARROW_NAME, x_changed, None, mask)
        if not matches_any(y_changed[:, :4], [y[:, :4]], ev.device):
            what = (f"{NARROW_NAME}.forward with a causal mask of shape {tuple(mask.shape)}: changing input 4 "
                    "changed an earlier output (0-3)")
            for m, y_mistake in _mistakes(w, 8, 4, False, x, None, mask):
                if m is not MASK_IGNORED and matches_any(y, [y_mistake], ev.device):  # leaks for another reason
                    fail(f"{what}. The output is not what was asked: {m.explanation}", y[:, :4], y_changed[:, :4],
                         case="input 4 changed", mistake=m.id)
            ignored = _forward(w, x, None, None, 4, math.sqrt(2))
            fail(f"{what}, so the mask is not applied to every head. {_MASK_HINT}", y[:, :4], y_changed[:, :4],
                 case="input 4 changed", mistake=MASK_IGNORED.id if matches_any(y, [ignored], ev.device) else None)
        _anchor(ev, y, w, 8, 4, False, x, None, mask, f"{NARROW_NAME} respects the causal mask",
                _describe_case(8, 4, x, None, mask, "causal"))


multi_head_causal = Check("multi_head_causal", _probe_causal, _judge_causal)


# ---------------------------------------------------------------- against the oracle

@dataclass(frozen=True)
class Case:
    """One oracle case: model size k, heads, batch b, tq queries, tk keys (None: self-attention) and a mask kind
    (None, "causal", "random" or "padding")."""

    k: int
    heads: int
    b: int
    tq: int
    tk: int | None = None
    mask: str | None = None


# head size != k, tq != tk, batch > 1, three mask shapes
NARROW_CASES = (Case(12, 3, 3, 5), Case(8, 2, 2, 4, 7), Case(8, 4, 2, 6, mask="causal"),
                Case(12, 4, 2, 5, 6, "random"), Case(6, 3, 2, 5, 5, "padding"), Case(6, 1, 2, 3))
WIDE_CASES = (Case(6, 3, 3, 5), Case(4, 2, 2, 4, 7), Case(4, 4, 2, 6, mask="causal"),
              Case(6, 2, 2, 5, 6, "random"), Case(4, 3, 2, 5, 5, "padding"))


def _case(i: int, case: Case) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """x, context and mask of one case, on the CPU."""
    k, b, tq, tk, kind = case.k, case.b, case.tq, case.tk, case.mask
    x = randn(b, tq, k, seed=250 + i)
    context = None if tk is None else randn(b, tk, k, seed=260 + i)
    n = tq if tk is None else tk
    if kind == "causal":
        mask = torch.ones(tq, n, dtype=torch.bool).tril()  # (tq, tk)
    elif kind == "random":
        mask = torch.rand(b, tq, n, generator=generator(270 + i)) < 0.5
        mask[:, torch.arange(tq), torch.arange(tq) % n] = True  # nobody is left with nothing to attend to; (b, tq, tk)
    elif kind == "padding":
        mask = (torch.arange(n) < torch.tensor([n, 3])[:, None])[:, None, :]  # (b, 1, tk)
    else:
        mask = None
    return x, context, mask


def _probe_oracle(cls: Callable, rec: Recorder, wide: bool) -> None:
    for i, case in enumerate(WIDE_CASES if wide else NARROW_CASES):
        module = _make(cls, rec, f"module{i}", case.k, case.heads, 300 + 20 * i)
        if module is None:
            return
        x, context, mask = _case(i, case)
        _run(rec, f"y{i}", module, x, context, mask)


def _judge_oracle(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    cls_name = WIDE_NAME if wide else NARROW_NAME
    oracle = "PyTorch's fused attention on your projections" if wide else "nn.MultiheadAttention with your weights"
    for i, case in enumerate(WIDE_CASES if wide else NARROW_CASES):
        k, heads = case.k, case.heads
        w = _weights(ev, f"module{i}", cls_name, k, heads, wide, 300 + 20 * i)
        x, context, mask = _case(i, case)
        y = _module_output(ev, f"y{i}", cls_name, x, context, mask)
        expect_close(y, _oracle(wide)(w, x, context, mask, heads), what=f"{cls_name}.forward", device=ev.device,
                     mistakes=_mistakes(w, k, heads, wide, x, context, mask),
                     case=_describe_case(k, heads, x, context, mask, case.mask),
                     otherwise=f"It differs from {oracle}. " + _FORWARD_HINT)


def _judge_narrow_oracle(ev: Evidence) -> None:
    """Self- and cross-attention, 1-4 heads, masks (tq, tk), (b, tq, tk), (b, 1, tk) against
    nn.MultiheadAttention."""
    _judge_oracle(ev, wide=False)


def _judge_wide_oracle(ev: Evidence) -> None:
    """The same cases against F.scaled_dot_product_attention on the projections, heads of size k."""
    _judge_oracle(ev, wide=True)


multi_head_oracle = Check("multi_head_oracle", lambda cls, rec: _probe_oracle(cls, rec, False), _judge_narrow_oracle)
wide_oracle = Check("wide_oracle", lambda cls, rec: _probe_oracle(cls, rec, True), _judge_wide_oracle)


# ---------------------------------------------------------------- gradients, and no loop over the heads

def count_matmuls(y: torch.Tensor) -> int:
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


#: a case with gradients: k, heads, the module's seed, x (b, tq, k), context (b, tk, k), mask or None, upstream
GradientCase = tuple[int, int, int, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]


def _probe_gradient_case(cls: Callable, rec: Recorder, case: GradientCase) -> None:
    """Record forward(x, context=..., mask=...), its matrix products and the gradients a loss on it leaves on x,
    the context and every parameter."""
    k, heads, seed, x, context, mask, upstream = case
    module = _make(cls, rec, "module", k, heads, seed)
    if module is None:
        return
    x, context = (t.to(rec.device).requires_grad_(True) for t in (x, context))
    y = rec.call("y", module, x, **_forward_kwargs(context, mask, rec.device))
    if isinstance(y, torch.Tensor) and y.requires_grad:
        rec.fact("matmuls", count_matmuls(y))
    modules.backward(rec, y, upstream, {"x": x, "context": context}, module)


def _oracle_gradients(w: dict[str, torch.Tensor], case: GradientCase, wide: bool,
                      switches: dict[str, Any] | None = None) -> dict[str, torch.Tensor | None]:
    """Autograd of the probe's loss through the oracle (nn.MultiheadAttention, or PyTorch's fused attention on the
    projections for wide heads), or through one typical mistake's computation (switches of _forward)."""
    _, heads, _, x, context, mask, upstream = case
    if switches is None and not wide:
        return oracles.as_course(oracles.gradients(_mha(w, heads), x, upstream, context, mask), oracles.COURSE_NAMES)

    def forward(leaves: dict[str, torch.Tensor], x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        if switches is None:
            return _wide_oracle(leaves, x, context, mask, heads)
        return _forward(leaves, x, context, mask, heads, **switches)
    return modules.autograd(forward, w, {"x": x, "context": context}, upstream)


def _judge_gradient_case(ev: Evidence, case: GradientCase, wide: bool, named: bool) -> None:
    """The gradients of a loss on the output, with respect to x, the context and every parameter, are autograd's
    through the oracle; the heads are computed together, not in a Python loop (narrow heads). named: the output
    must be the oracle's, or fail naming the typical mistake it is; otherwise the gradients of a typical mistake
    are those of its computation (another check names it)."""
    __tracebackhide__ = True
    k, heads, seed, x, context, mask, _ = case
    cls_name = WIDE_NAME if wide else NARROW_NAME
    w = _weights(ev, "module", cls_name, k, heads, wide, seed)
    y = _module_output(ev, "y", cls_name, x, context, mask)
    described = _describe_case(k, heads, x, context, mask)
    modules.expect_attached(ev, "y", f"{cls_name}.forward")
    expected = _oracle(wide)(w, x, context, mask, heads)
    oracle = "PyTorch's fused attention on your projections" if wide else "nn.MultiheadAttention with your weights"
    mistake, switches = None, None
    if not matches_any(y, [expected], ev.device):
        found = [] if named else [(m, kw) for m, kw in _mistake_specs(k, heads, wide, x, context, mask)
                                  if matches_any(y, [_forward(w, x, context, mask, heads, **kw)], ev.device)]
        if not found:
            expect_close(y, expected, what=f"{cls_name}.forward", device=ev.device, case=described,
                         mistakes=[] if not named else _mistakes(w, k, heads, wide, x, context, mask),
                         otherwise=f"It differs from {oracle}. " + _FORWARD_HINT)
        mistake, switches = found[0]
    modules.expect_gradients(ev, _oracle_gradients(w, case, wide, switches), owner=f"{cls_name}.forward",
                             case=described, oracle=oracle.removesuffix(" with your weights"), because=mistake)
    if not wide:
        _expect_no_loop(ev)


def _expect_no_loop(ev: Evidence) -> None:
    __tracebackhide__ = True
    count = ev.facts.get("matmuls")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        fail(f"The test recorded nothing about the computation of {NARROW_NAME}.forward: the check did not run to "
             "the end.")
    if count > MAX_MATMULS:
        fail(f"{NARROW_NAME}.forward with {_GRAD_HEADS} heads performs {count} matrix products; computed together, "
             "the heads need about 6. It looks like a Python loop over the heads: split the projections into a "
             "(b, heads, t, s) tensor and let one batched attention call handle every head at once.",
             mistake=LOOP_OVER_HEADS)


_GRAD_K, _GRAD_HEADS = 16, 8


def _hidden_gradient_case() -> GradientCase:
    """x (2, 5, 16), context (2, 7, 16), no mask."""
    return _GRAD_K, _GRAD_HEADS, 440, randn(2, 5, 16, seed=441), randn(2, 7, 16, seed=442), None, \
        randn(2, 5, 16, seed=443)


def _judge_gradients(ev: Evidence) -> None:
    """Gradients reach every parameter, x and the context, as autograd through nn.MultiheadAttention gives them;
    the heads are computed together, not in a Python loop."""
    _judge_gradient_case(ev, _hidden_gradient_case(), wide=False, named=False)


multi_head_gradients = Check("multi_head_gradients",
                             lambda cls, rec: _probe_gradient_case(cls, rec, _hidden_gradient_case()),
                             _judge_gradients)


# ---------------------------------------------------------------- a small case against PyTorch, visible

def _small_case(wide: bool) -> GradientCase:
    """Cross-attention on a batch of two, 3 queries and 4 keys, a mask (b, tq, tk): 8 heads of size 2 (narrow) or 2
    heads of size 4 (wide)."""
    k, heads, seed = (4, 2, 475) if wide else (_GRAD_K, _GRAD_HEADS, 465)
    mask = torch.rand(2, 3, 4, generator=generator(seed + 2)) < 0.5
    mask[:, torch.arange(3), torch.arange(3)] = True  # every query may attend to something
    return k, heads, seed, randn(2, 3, k, seed=seed + 1), randn(2, 4, k, seed=seed + 3), mask, \
        randn(2, 3, k, seed=seed + 4)


def _judge_narrow_vs_pytorch(ev: Evidence) -> None:
    """A small masked cross-attention case against nn.MultiheadAttention with the check's weights loaded into your
    module; gradients reach x, the context and every parameter; no Python loop over the heads."""
    _judge_gradient_case(ev, _small_case(False), wide=False, named=True)


def _judge_wide_vs_pytorch(ev: Evidence) -> None:
    """A small masked cross-attention case against PyTorch's fused attention on your projections, split into heads
    of size k; gradients reach x, the context and every parameter."""
    _judge_gradient_case(ev, _small_case(True), wide=True, named=True)


multi_head_vs_pytorch = Check("multi_head_vs_pytorch",
                              lambda cls, rec: _probe_gradient_case(cls, rec, _small_case(False)),
                              _judge_narrow_vs_pytorch)
wide_vs_pytorch = Check("wide_vs_pytorch", lambda cls, rec: _probe_gradient_case(cls, rec, _small_case(True)),
                        _judge_wide_vs_pytorch)
