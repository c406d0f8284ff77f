"""Judges for assignment 04 (probes in course/checks/multi_head.py): torch.stack/torch.cat for the head layout,
nn.MultiheadAttention for the narrow module, F.scaled_dot_product_attention on the projections for the wide one, and
the typical mistakes they can name."""

import math
from collections.abc import Callable
from itertools import product
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules
from course.checks.compare import NOT_IMPLEMENTED, Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.multi_head import (
    GAINS,
    GRAD_HEADS,
    LAYERS,
    MERGE_CASES,
    NARROW_CASES,
    SECRET_SPLIT,
    SPLIT_CASES,
    STRUCTURE,
    WIDE_CASES,
    GradientCase,
    case_inputs,
    causal_inputs,
    context_inputs,
    hand_heads,
    hand_x,
    hidden_gradient_case,
    merge_x,
    secret_merge_x,
    secret_split_x,
    small_case,
    split_x,
    structure_x,
)
from course.checks.seeds import grading
from course.judges import judge, oracles

SPLIT_NAME = "split_heads"
MERGE_NAME = "merge_heads"
NARROW_NAME = "MultiHeadAttention"
WIDE_NAME = "WideMultiHeadAttention"

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

# structure and property failures, whose messages say them in their own words (the shared ones are in
# course/checks/modules.py)
UNIFY_NO_BIAS = Mistake("unify-no-bias", "unify_heads has no bias: use nn.Linear(k, k), whose bias is on by default.")
PROJECTION_BIAS = Mistake("projection-bias", "the projections have a bias: create them with bias=False.")
NO_DIVISIBILITY_CHECK = Mistake("no-divisibility-check", "the constructor accepts a model size that the heads do not "
                                "divide: raise a ValueError when k % heads != 0.")
LOOP_OVER_HEADS = Mistake("loop-over-heads", "the heads are computed one by one in a Python loop, not together in "
                          "one (b, heads, t, s) tensor.")
#: a combination of the module mistakes above; each message names the parts
SEVERAL = Mistake("several-mistakes", "several things at once, among the mistakes above.")

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


_SPLIT_HINT = "Head i should hold features i·s to (i+1)·s − 1 of every position, positions in order."
_MERGE_HINT = "merge_heads must undo split_heads: merge_heads(split_heads(x, h)) == x."


def _expect_split(ev: Evidence, key: str, x: torch.Tensor, heads: int) -> None:
    """split_heads's output recorded under key against the oracle on x, naming a typical mistake if one matches."""
    __tracebackhide__ = True
    b, t, k = x.shape
    s = k // heads
    y = output(ev, key, what=f"{SPLIT_NAME}(x, {heads})", shape=(b, heads, t, s), shape_hints={
        (b, t, heads, s): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2)."})
    expect_close(y, _split(x, heads), what=f"{SPLIT_NAME}(x, {heads})", device=ev.device,
                 mistakes=_split_mistakes(x, heads), case=f"x of shape {(b, t, k)}, {heads} heads",
                 otherwise=_SPLIT_HINT)


def _expect_merge(ev: Evidence, key: str, x: torch.Tensor) -> None:
    """merge_heads's output recorded under key against the oracle on x, naming a typical mistake if one matches."""
    __tracebackhide__ = True
    b, h, t, s = x.shape
    y = output(ev, key, what=f"{MERGE_NAME}(x)", shape=(b, t, h * s), shape_hints={
        (b, t, h, s): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
    expect_close(y, _merge(x), what=f"{MERGE_NAME}(x)", device=ev.device, mistakes=_merge_mistakes(x),
                 case=f"x of shape {(b, h, t, s)}", otherwise="merge_heads must undo split_heads.")


@judge("split_heads_by_hand")
def _judge_split_by_hand(ev: Evidence) -> None:
    """(1, 3, 4) with 2 heads: head 0 holds features 0-1 of every position, head 1 features 2-3."""
    x = hand_x()
    y = output(ev, "y", what=f"{SPLIT_NAME}(x, 2)", shape=(1, 2, 3, 2), shape_hints={
        (1, 3, 2, 2): "That is (b, t, heads, s): swap the middle axes with .transpose(1, 2) to get (b, heads, t, s).",
        (1, 2, 3, 4): "The head size is k // heads, not k."})
    expect_close(y, _split(x, 2), what=f"{SPLIT_NAME}(x, 2)", device=ev.device, mistakes=_split_mistakes(x, 2),
                 case="x = arange(12) as (1, 3, 4), 2 heads", otherwise=_SPLIT_HINT)
    if grading():
        _expect_split(ev, "y_secret", secret_split_x(), SECRET_SPLIT[3])


@judge("split_heads_oracle")
def _judge_split_oracle(ev: Evidence) -> None:
    """Random shapes (several heads, one head, heads = k) against torch.stack(x.chunk(heads, -1), 1)."""
    for i, (b, t, k, heads) in enumerate(SPLIT_CASES):
        _expect_split(ev, f"y{i}", split_x(i, b, t, k), heads)


@judge("merge_heads_by_hand")
def _judge_merge_by_hand(ev: Evidence) -> None:
    """Merging the two heads of the by-hand example gives back the (1, 3, 4) input."""
    x = hand_x()
    heads = hand_heads()  # (1, 2, 3, 2)
    y = output(ev, "y", what=f"{MERGE_NAME}(x)", shape=(1, 3, 4), shape_hints={
        (1, 3, 2, 2): "Flatten the last two dimensions (heads, s) into one of size heads·s."})
    expect_close(y, x, what=f"{MERGE_NAME}(x)", device=ev.device, mistakes=_merge_mistakes(heads),
                 case="the two heads of arange(12) as (1, 3, 4)", otherwise=_MERGE_HINT)
    if grading():
        _expect_merge(ev, "y_secret", secret_merge_x())


@judge("merge_heads_oracle")
def _judge_merge_oracle(ev: Evidence) -> None:
    """Random shapes against torch.cat(x.unbind(1), -1), the inverse of split_heads."""
    for i, (b, h, t, s) in enumerate(MERGE_CASES):
        _expect_merge(ev, f"y{i}", merge_x(i, b, h, t, s))


# ---------------------------------------------------------------- the modules

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
            several.append((Mistake(SEVERAL.id, "several things at once. " + " ".join(
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


# ---------------------------------------------------------------- the modules: checks

def _judge_structure(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    k, heads = STRUCTURE[wide]
    cls_name = WIDE_NAME if wide else NARROW_NAME
    w = _weights(ev, "module", cls_name, k, heads, wide, 200)
    modules.expect_parameter_count(
        ev, "module", f"{cls_name}({k}, {heads})", 4 * heads * k * k + k if wide else 4 * k * k + k,
        f"it should have {'4·heads·k² + k' if wide else '4k² + k'}",
        "Are extra layers registered, or some kept in a plain Python list or dict (use nn.ModuleList)?")
    x = structure_x(k)
    y = _module_output(ev, "y", cls_name, x, None, None)
    _anchor(ev, y, w, k, heads, wide, x, None, None, f"{cls_name} has the right layers",
            _describe_case(k, heads, x, None, None))


@judge("multi_head_structure")
def _judge_narrow_structure(ev: Evidence) -> None:
    """to_queries, to_keys, to_values: nn.Linear(k, k, bias=False); unify_heads: nn.Linear(k, k); 4k² + k
    parameters."""
    _judge_structure(ev, wide=False)


@judge("wide_structure")
def _judge_wide_structure(ev: Evidence) -> None:
    """Projections nn.Linear(k, k·heads, bias=False); unify_heads nn.Linear(k·heads, k); 4·heads·k² + k
    parameters."""
    _judge_structure(ev, wide=True)


@judge("multi_head_indivisible")
def _judge_indivisible(ev: Evidence) -> None:
    """MultiHeadAttention(10, 4) cannot split 10 features into 4 equal heads: construction raises an error."""
    fact = ev.facts.get("indivisible")
    if not isinstance(fact, dict):
        fail(f"The test recorded nothing for {NARROW_NAME}(10, 4): the check did not run to the end.")
    if fact.get("kind") == "raised" and fact.get("not_implemented"):
        fail(f"{NARROW_NAME} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             mistake=NOT_IMPLEMENTED)
    if fact.get("kind") != "raised":
        fail(f"{NARROW_NAME}(10, 4) was created without complaint, but 10 features cannot be split into 4 heads of "
             "equal size. Check in __init__: if k % heads != 0: raise ValueError(...) with a message that says so.",
             mistake=NO_DIVISIBILITY_CHECK)
    k, heads = STRUCTURE[False]
    w = _weights(ev, "module", NARROW_NAME, k, heads, False, 200)
    x = structure_x(k)
    y = _module_output(ev, "y", NARROW_NAME, x, None, None)
    _anchor(ev, y, w, k, heads, False, x, None, None, f"{NARROW_NAME}(10, 4) raises an error",
            _describe_case(k, heads, x, None, None))


def _judge_context(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    cls_name = WIDE_NAME if wide else NARROW_NAME
    w = _weights(ev, "module", cls_name, 8, 2, wide, 400)
    x, context = context_inputs()
    y_self = _module_output(ev, "y_self", cls_name, x, None, None)
    y_explicit = _module_output(ev, "y_explicit", cls_name, x, x, None)
    y_cross = _module_output(ev, "y_cross", cls_name, x, context, None)
    expect_close(y_explicit, y_self, what=f"{cls_name}.forward(x, context=x)", device=ev.device, case="x (2, 3, 8)",
                 otherwise="With context=None the keys and values come from x, so forward(x) and forward(x, "
                           "context=x) must agree.")
    if torch.allclose(y_cross, y_self, atol=1e-5):
        fail(f"{cls_name}.forward(x, context=c) gives the same result as forward(x): the context is ignored. "
             "Keys and values come from the context when one is given.", mistake=CONTEXT_IGNORED)
    for y, c in ((y_self, None), (y_cross, context)):
        _anchor(ev, y, w, 8, 2, wide, x, c, None, f"{cls_name} takes its keys and values from the context",
                _describe_case(8, 2, x, c, None))


@judge("multi_head_context")
def _judge_narrow_context(ev: Evidence) -> None:
    """(b, tq, k) out for self- and cross-attention; forward(x) equals forward(x, context=x); the context
    matters."""
    _judge_context(ev, wide=False)


@judge("wide_context")
def _judge_wide_context(ev: Evidence) -> None:
    """The same for the wide module."""
    _judge_context(ev, wide=True)


@judge("multi_head_causal")
def _judge_causal(ev: Evidence) -> None:
    """With a causal mask, (t, t) or one per batch element (b, t, t), changing input 4 changes no earlier output."""
    w = _weights(ev, "module", NARROW_NAME, 8, 4, False, 420)
    x, x_changed, masks = causal_inputs()
    for i, mask in enumerate(masks):
        y = _module_output(ev, f"y{i}", NARROW_NAME, x, None, mask)
        y_changed = _module_output(ev, f"y_changed{i}", NARROW_NAME, x_changed, None, mask)
        if not matches_any(y_changed[:, :4], [y[:, :4]], ev.device):
            what = (f"{NARROW_NAME}.forward with a causal mask of shape {tuple(mask.shape)}: changing input 4 "
                    "changed an earlier output (0-3)")
            for m, y_mistake in _mistakes(w, 8, 4, False, x, None, mask):
                if m is not MASK_IGNORED and matches_any(y, [y_mistake], ev.device):  # leaks for another reason
                    fail(f"{what}. The output is not what was asked: {m.explanation}", y[:, :4], y_changed[:, :4],
                         case="input 4 changed", mistake=m)
            ignored = _forward(w, x, None, None, 4, math.sqrt(2))
            fail(f"{what}, so the mask is not applied to every head. {_MASK_HINT}", y[:, :4], y_changed[:, :4],
                 case="input 4 changed", mistake=MASK_IGNORED if matches_any(y, [ignored], ev.device) else None)
        _anchor(ev, y, w, 8, 4, False, x, None, mask, f"{NARROW_NAME} respects the causal mask",
                _describe_case(8, 4, x, None, mask, "causal"))


def _judge_oracle(ev: Evidence, wide: bool) -> None:
    __tracebackhide__ = True
    cls_name = WIDE_NAME if wide else NARROW_NAME
    oracle = "PyTorch's fused attention on your projections" if wide else "nn.MultiheadAttention with your weights"
    for i, case in enumerate(WIDE_CASES if wide else NARROW_CASES):
        k, heads = case.k, case.heads
        w = _weights(ev, f"module{i}", cls_name, k, heads, wide, 300 + 20 * i)
        x, context, mask = case_inputs(i, case)
        y = _module_output(ev, f"y{i}", cls_name, x, context, mask)
        expect_close(y, _oracle(wide)(w, x, context, mask, heads), what=f"{cls_name}.forward", device=ev.device,
                     mistakes=_mistakes(w, k, heads, wide, x, context, mask),
                     case=_describe_case(k, heads, x, context, mask, case.mask),
                     otherwise=f"It differs from {oracle}. " + _FORWARD_HINT)


@judge("multi_head_oracle")
def _judge_narrow_oracle(ev: Evidence) -> None:
    """Self- and cross-attention, 1-4 heads, masks (tq, tk), (b, tq, tk), (b, 1, tk) against
    nn.MultiheadAttention."""
    _judge_oracle(ev, wide=False)


@judge("wide_oracle")
def _judge_wide_oracle(ev: Evidence) -> None:
    """The same cases against F.scaled_dot_product_attention on the projections, heads of size k."""
    _judge_oracle(ev, wide=True)


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
        fail(f"{NARROW_NAME}.forward with {GRAD_HEADS} heads performs {count} matrix products; computed together, "
             "the heads need about 6. It looks like a Python loop over the heads: split the projections into a "
             "(b, heads, t, s) tensor and let one batched attention call handle every head at once.",
             mistake=LOOP_OVER_HEADS)


@judge("multi_head_gradients")
def _judge_gradients(ev: Evidence) -> None:
    """Gradients reach every parameter, x and the context, as autograd through nn.MultiheadAttention gives them;
    the heads are computed together, not in a Python loop."""
    _judge_gradient_case(ev, hidden_gradient_case(), wide=False, named=False)


@judge("multi_head_vs_pytorch")
def _judge_narrow_vs_pytorch(ev: Evidence) -> None:
    """A small masked cross-attention case against nn.MultiheadAttention with the check's weights loaded into your
    module; gradients reach x, the context and every parameter; no Python loop over the heads."""
    _judge_gradient_case(ev, small_case(False), wide=False, named=True)


@judge("wide_vs_pytorch")
def _judge_wide_vs_pytorch(ev: Evidence) -> None:
    """A small masked cross-attention case against PyTorch's fused attention on your projections, split into heads
    of size k; gradients reach x, the context and every parameter."""
    _judge_gradient_case(ev, small_case(True), wide=True, named=True)
