"""Judges for assignment 04 (probes in course/checks/multi_head.py): torch.stack/torch.cat for the head layout,
nn.MultiheadAttention (narrow) and F.scaled_dot_product_attention on the projections (wide), the typical mistakes
they can name; only the structure, the context, the causal mask and the loop over the heads are written out."""

import math
from collections.abc import Callable
from functools import partial
from itertools import product
from typing import Any

import torch
import torch.nn.functional as F

from course.checks import multi_head as probes
from course.checks.compare import Mistake, expect_close, expect_value_error, fail
from course.checks.evidence import Evidence
from course.checks.kinds import Built, RunsCheck
from course.checks.multi_head import GAINS, GRAD_HEADS, LAYERS, hand_heads, hand_x
from course.judges import judge, kinds, mistakes, oracles
from course.judges.attention_modules import anchored, expect_structure, mistake_combinations
from course.judges.kinds import ForwardOracle, Oracle, against, against_forward, declared, simulated

NARROW_NAME = "MultiHeadAttention"
WIDE_NAME = "WideMultiHeadAttention"

#: more matrix products than this in the graph of an 8-head forward pass: a Python loop over the heads
MAX_MATMULS = 12

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/multi_head.txt


_MASK_HINT = ("The mask broadcasts to (b, tq, tk), the scores are (b, heads, tq, tk): give it a heads axis, e.g. "
              "torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1).")
_SHAPES_RECIPE = ("Follow the shapes: project (b, t, k), split_heads to (b, heads, t, s), attention, merge_heads to "
                 "(b, t, k), unify_heads.")


# ---------------------------------------------------------------- split_heads and merge_heads

def _split(x: torch.Tensor, heads: int, how: str = "right") -> torch.Tensor:
    """Head i holds the i-th block of features, or a mistake's layout how. (b, t, k) -> (b, h, t, s)"""
    b, t, k = x.shape
    if how == "no transpose":
        return x.reshape(b, heads, t, k // heads)  # (b, h, t, s) without the transpose
    if how == "interleaved":
        return x.reshape(b, t, k // heads, heads).permute(0, 3, 1, 2)  # (b, h, t, s), interleaved
    return torch.stack(x.chunk(heads, dim=-1), dim=1)  # (b, h, t, s)


def _merge(x: torch.Tensor, how: str = "right") -> torch.Tensor:
    """The heads' features side by side, or how a typical mistake lays them out. (b, h, t, s) -> (b, t, h·s)."""
    b, h, t, s = x.shape
    if how == "no transpose":
        return x.reshape(b, t, h * s)  # (b, t, h·s) without the transpose
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(b, t, h * s)  # (b, t, h·s), interleaved
    return torch.cat(x.unbind(dim=1), dim=-1)  # (b, t, h·s)


SPLIT = Oracle("split_heads(x, heads)", _split, "torch.stack(x.chunk(heads, -1), 1)",
               shape=lambda x, heads: (x.shape[0], heads, x.shape[1], x.shape[2] // heads),
               mistakes=lambda x, heads: [(M["split-without-transpose"], _split(x, heads, "no transpose")),
                                          (M["split-interleaved"], _split(x, heads, "interleaved"))],
               shape_hints=lambda x, heads: {
                   (x.shape[0], x.shape[1], heads, x.shape[2] // heads): "That is (b, t, heads, s): swap the middle "
                   "axes with .transpose(1, 2) to get (b, heads, t, s).",
                   (x.shape[0], heads, x.shape[1], x.shape[2]): "The head size is k // heads, not k."},
               otherwise="Head i should hold features i·s to (i+1)·s − 1 of every position, positions in order.")
MERGE = Oracle("merge_heads(x)", _merge, "torch.cat(x.unbind(1), -1)",
               shape=lambda x: (x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
               mistakes=lambda x: [(M["merge-without-transpose"], _merge(x, "no transpose")),
                                   (M["merge-interleaved"], _merge(x, "interleaved"))],
               shape_hints=lambda x: {(x.shape[0], x.shape[2], x.shape[1], x.shape[3]): "Flatten the last two "
                                      "dimensions (heads, s) into one of size heads·s."},
               otherwise="merge_heads must undo split_heads: merge_heads(split_heads(x, h)) == x.")

against(probes.split_heads_by_hand, SPLIT, answers={"y": hand_heads},
        passed="(1, 3, 4) with 2 heads: head 0 holds features 0-1 of every position, head 1 features 2-3.")
against(probes.split_heads_oracle, SPLIT,
        passed="Random shapes (several heads, one head, heads = k) against torch.stack(x.chunk(heads, -1), 1).")
against(probes.merge_heads_by_hand, MERGE, answers={"y": hand_x},
        passed="Merging the two heads of the by-hand example gives back the (1, 3, 4) input.")
against(probes.merge_heads_oracle, MERGE,
        passed="Random shapes against torch.cat(x.unbind(1), -1), the inverse of split_heads.")

# ---------------------------------------------------------------- the modules: oracles and typical mistakes


def _multi_head_weights(ev: Evidence, built: Built, *, wide: bool) -> dict[str, torch.Tensor]:
    """The four separate nn.Linear (a bias only on unify_heads) and the weights the probe loaded."""
    __tracebackhide__ = True
    k, heads = built.args
    owner = WIDE_NAME if wide else NARROW_NAME
    width, spec = (k * heads, "k * heads") if wide else (k, "k")
    projection = (k, width, False, f"nn.Linear(k, {spec}, bias=False)")
    layers = {**dict.fromkeys(LAYERS[:3], projection), "unify_heads": (width, k, True, f"nn.Linear({spec}, k)")}
    return kinds.expect_linear_layers(ev, built.key, f"{owner}({k}, {heads})", owner, layers,
                                      f"Two of {owner}'s layers are the same object: each needs its own nn.Linear.",
                                      {**dict.fromkeys(LAYERS[:3], M["projection-bias"]),
                                       "unify_heads": M["unify-no-bias"]}, built.seed, GAINS)


def _wide_attention(w: dict[str, torch.Tensor], k: int, heads: int, x: torch.Tensor,
                    context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's fused attention on the projections (b, t, k·heads), split into heads of size k (scale 1/√k)."""
    source = x if context is None else context
    q, keys, v = (_split(F.linear(t, w[name]), heads)  # (b, h, t, k)
                  for t, name in ((x, "to_queries.weight"), (source, "to_keys.weight"), (source, "to_values.weight")))
    m = None if mask is None else torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))[:, None]
    out = F.scaled_dot_product_attention(q, keys, v, attn_mask=m)  # (b, h, tq, k)
    return F.linear(_merge(out), w["unify_heads.weight"], w["unify_heads.bias"])


def _forward(w: dict[str, torch.Tensor], k: int, heads: int, x: torch.Tensor, context: torch.Tensor | None = None,
             mask: torch.Tensor | None = None, *, scale: float, split: str = "right", merge: str = "right",
             use_context: bool = True, use_mask: bool = True, softmax_dim: int = -1,
             unify: bool = True) -> torch.Tensor:
    """Multi-head attention with switches for the typical mistakes. x (b, tq, k), context (b, tk, k)."""
    source = x if context is None or not use_context else context
    q = _split(F.linear(x, w["to_queries.weight"]), heads, split)  # (b, h, tq, s)
    keys = _split(F.linear(source, w["to_keys.weight"]), heads, split)  # (b, h, tk, s)
    v = _split(F.linear(source, w["to_values.weight"]), heads, split)  # (b, h, tk, s)
    scores = q @ keys.transpose(-2, -1) / scale  # (b, h, tq, tk)
    if mask is not None and use_mask:
        m = torch.broadcast_to(mask, (x.shape[0], q.shape[-2], keys.shape[-2]))[:, None]  # (b, 1, tq, tk)
        scores = scores.masked_fill(~m, float("-inf"))
    out = _merge(F.softmax(scores, dim=softmax_dim) @ v, merge)  # (b, tq, h·s)
    return F.linear(out, w["unify_heads.weight"], w["unify_heads.bias"]) if unify else out


def _simulators(k: int, heads: int, x: torch.Tensor, context: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, wide: bool) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    """The typical mistakes as switches of _forward, alone then together (named part by part)."""
    wrong = (((M["scaled-by-projected-size"], math.sqrt(k * heads)),
              (M["scaled-by-head-fraction"], math.sqrt(k / heads))) if wide
             else ((M["scaled-by-model-size"], math.sqrt(k)), (M["scaled-by-k-times-heads"], math.sqrt(k * heads))))
    scales = [((), {"scale": math.sqrt(k if wide else k // heads)}),
              *(((m,), {"scale": scale}) for m, scale in (*wrong, (M["unscaled"], 1.0)))]
    splits = ((None, "right"), (M["heads-split-without-transpose"], "no transpose"),
              (M["heads-split-interleaved"], "interleaved"))
    merges = ((None, "right"), (M["heads-merged-without-transpose"], "no transpose"),
              (M["heads-merged-interleaved"], "interleaved"))
    both = {"no transpose": M["heads-reshaped-without-transpose"], "interleaved": M["heads-interleaved"]}
    layouts = [((both[split],) if m_split and m_merge and split == merge else tuple(m for m in (m_split, m_merge) if m),
                {"split": split, "merge": merge}) for (m_split, split), (m_merge, merge) in product(splits, merges)]
    others: list[tuple[tuple[Mistake, ...], dict[str, Any]]] = [
        ((), {}), ((M["softmax-over-queries"],), {"softmax_dim": -2}), ((M["unify-skipped"],), {"unify": False})]
    if context is not None and (mask is None or context.shape[1] == x.shape[1]):
        others.append(((M["context-ignored"],), {"use_context": False}))
    if mask is not None:
        others.append(((M["mask-ignored"],), {"use_mask": False}))
    return mistake_combinations((scales, layouts, others), _forward, M["several-mistakes"])


def _head_layout_hint(x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> str:
    hint = _SHAPES_RECIPE + (" " + _MASK_HINT if mask is not None else "")
    keywords = context is not None or mask is not None
    return hint + (" forward's signature is forward(self, x, context=None, mask=None)." if keywords else "")


def _output_shape_hints(x: torch.Tensor, context: torch.Tensor | None = None,
                        mask: torch.Tensor | None = None) -> dict[tuple[int, ...], str]:
    tk = (x if context is None else context).shape[1]
    return {(x.shape[0], tk, x.shape[2]): "There is one output per context position: the queries come from x."}


NARROW = ForwardOracle(
    NARROW_NAME, "multi-head attention", partial(_multi_head_weights, wide=False),
    lambda w, k, heads, x, context=None, mask=None: oracles.course_module_attention(w, x, context, mask, heads=heads),
    "nn.MultiheadAttention", simulators=partial(_simulators, wide=False), hint=_head_layout_hint,
    shape_hints=_output_shape_hints,
    otherwise="It differs from nn.MultiheadAttention with your weights. " + _SHAPES_RECIPE)
WIDE = ForwardOracle(
    WIDE_NAME, "multi-head attention", partial(_multi_head_weights, wide=True), _wide_attention,
    "PyTorch's fused attention on your projections", simulators=partial(_simulators, wide=True),
    hint=_head_layout_hint, shape_hints=_output_shape_hints,
    otherwise="It differs from PyTorch's fused attention on your projections. " + _SHAPES_RECIPE)

# ---------------------------------------------------------------- the modules: the checks


def _expect_no_loop(ev: Evidence) -> None:
    """At most MAX_MATMULS matrix products in the graph of an 8-head forward pass: the heads computed together."""
    __tracebackhide__ = True
    count = ev.facts.get("matmuls")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        fail(f"The test recorded nothing about {NARROW_NAME}.forward's graph: the check did not run to the end.")
    if count > MAX_MATMULS:
        fail(f"{NARROW_NAME}.forward with {GRAD_HEADS} heads performs {count} matrix products, where the heads "
             f"computed together need about 6: {M['loop-over-heads'].explanation}", mistake=M["loop-over-heads"])


against_forward(probes.multi_head_oracle, NARROW,
                passed="Self- and cross-attention, 1-4 heads, masks of three shapes against nn.MultiheadAttention.")
against_forward(probes.wide_oracle, WIDE,
                passed="The same cases against F.scaled_dot_product_attention on the projections, heads of size k.")
against_forward(probes.multi_head_gradients, NARROW, tolerate_mistakes=True, then=_expect_no_loop,
                passed="Gradients reach every parameter, x and the context as through nn.MultiheadAttention; no loop.")
against_forward(probes.multi_head_vs_pytorch, NARROW, then=_expect_no_loop,
                passed="A small masked cross-attention case and its gradients against nn.MultiheadAttention; no loop.")
against_forward(probes.wide_vs_pytorch, WIDE,
                passed="A small masked cross-attention case and its gradients against PyTorch's fused attention.")


#: each module's structure check, its oracle, its parameter count from (k, heads) and as a formula, its pass line
_STRUCTURES = ((probes.multi_head_structure, NARROW, lambda k, heads: 4 * k * k + k, "4k² + k",
                "Three bias-free k×k projections and unify_heads nn.Linear(k, k): 4k² + k parameters."),
               (probes.wide_structure, WIDE, lambda k, heads: 4 * heads * k * k + k, "4·heads·k² + k",
                "Projections nn.Linear(k, k·heads, bias=False), unify_heads nn.Linear(k·heads, k): 4·heads·k² + k."))
for check, oracle, count, formula, passed in _STRUCTURES:
    declared(check, partial(expect_structure, check=check, oracle=oracle, claim=f"{oracle.owner} has the right layers",
                            count=(count(*check.runs[0].module.args), f"it should have {formula}",
                                   "Extra layers, or some kept in a plain list (use nn.ModuleList)?")), passed)


@judge("multi_head_indivisible")
def _indivisible(ev: Evidence) -> None:
    """MultiHeadAttention(10, 4) cannot split 10 features into 4 equal heads: construction raises a ValueError."""
    __tracebackhide__ = True
    call = f"{NARROW_NAME}(10, 4)"
    expect_value_error(ev, "indivisible", call, M["no-divisibility-check"], M["not-a-value-error"])
    expect_structure(ev, probes.multi_head_structure, NARROW, f"{call} raises a ValueError")


def _expect_context(ev: Evidence, *, check: RunsCheck, oracle: ForwardOracle) -> None:
    """forward(x) == forward(x, context=x) != forward(x, context=c), all anchored to the oracle."""
    __tracebackhide__ = True
    (run,) = check.runs
    y = anchored(ev, run, oracle, f"{oracle.owner} takes its keys and values from the context",
                 oracle.weights(ev, run.module))
    expect_close(y["y_explicit"], y["y_self"], what=f"{oracle.owner}.forward(x, context=x)", device=ev.device,
                 case="x (2, 3, 8)", otherwise="With context=None the keys and values come from x, so forward(x) and "
                                               "forward(x, context=x) must agree.")
    if torch.allclose(y["y_cross"], y["y_self"], atol=1e-5):
        fail(f"{oracle.owner}.forward(x, context=c) gives the same result as forward(x): "
             f"{M['context-ignored'].explanation}", mistake=M["context-ignored"])


for check, oracle in ((probes.multi_head_context, NARROW), (probes.wide_context, WIDE)):
    declared(check, partial(_expect_context, check=check, oracle=oracle),
             "(b, tq, k) out for self- and cross-attention; forward(x) equals forward(x, context=x); the context "
             "matters.")


@judge("multi_head_causal")
def _causal_mask(ev: Evidence) -> None:
    """With a causal mask, (t, t) or one per batch element (b, t, t), changing input 4 changes no earlier output."""
    (run,) = probes.multi_head_causal.runs
    w = NARROW.weights(ev, run.module)
    y = anchored(ev, run, NARROW, f"{NARROW_NAME} runs with a causal mask", w)
    for case, changed in zip(run.cases[::2], run.cases[1::2], strict=True):
        inputs = case.inputs()
        kinds.expect_causal(ev, y[case.key], y[changed.key], probes.CHANGED,
                            f"{NARROW_NAME}.forward with a causal mask of shape {tuple(inputs['mask'].shape)}",
                            simulated(NARROW, w, run.module.args, inputs), f"Mask every head. {_MASK_HINT}")
