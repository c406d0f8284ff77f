"""Judges for assignment 04 (probes in course/checks/multi_head.py): torch.stack/torch.cat for the head layout,
nn.MultiheadAttention (narrow) and F.scaled_dot_product_attention on the projections (wide), the typical mistakes
they can name; only the structure, the context, the causal mask and the loop over the heads are written out."""

from collections.abc import Callable
from functools import cache, partial
from itertools import product

import torch
import torch.nn.functional as F

from course.checks import multi_head as probes
from course.checks.compare import Mistake, expect_close, expect_value_error, fail
from course.checks.evidence import Evidence
from course.checks.kinds import Built, RunsCheck
from course.checks.multi_head import GAINS, GRAD_HEADS, LAYERS, hand_heads, hand_x
from course.judges import judge, kinds, oracles
from course.judges.attention_modules import anchored, expect_structure
from course.judges.kinds import Advice, ForwardOracle, Oracle, against, against_forward, declared, simulated
from course.judges.variants import Variants, both, edited, module_output, reference_source

NARROW_NAME = "MultiHeadAttention"
WIDE_NAME = "WideMultiHeadAttention"

#: more matrix products than this in the graph of an 8-head forward pass: a Python loop over the heads
MAX_MATMULS = 12

_MASK_HINT = ("The mask broadcasts to (b, tq, tk), the scores are (b, heads, tq, tk): give it a heads axis, e.g. "
              "torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1).")
_SHAPES_RECIPE = ("Follow the shapes: project (b, t, k), split_heads to (b, heads, t, s), attention, merge_heads to "
                 "(b, t, k), unify_heads.")


# ---------------------------------------------------------------- split_heads and merge_heads: typical mistakes
# Edits change the reference answers of course/multi_head.py:
#     split_heads: return x.view(b, t, heads, k // heads).transpose(1, 2)  # (b, h, t, s)
#     merge_heads: return x.transpose(1, 2).reshape(b, t, h * s)  # (b, t, k)
# When an output matches two of them, the first declared is named. Mistakes every check names (a wrong shape, an
# error) are in catalogue/multi_head.py.

WRITTEN = Variants(__name__, reference="course.multi_head")
edit = WRITTEN.edit
VIEW = "x.view(b, t, heads, k // heads).transpose(1, 2)"

edit("mh-split-no-transpose", "split_heads", (VIEW, "x.reshape(b, heads, t, k // heads)"),
     mistake="split-without-transpose",
     says="the tensor is reshaped to (b, heads, t, s) without a transpose, so a 'head' holds pieces of several "
          "positions. View it as (b, t, heads, s) first, then swap the middle axes: .transpose(1, 2).")
edit("mh-split-interleaved", "split_heads", (VIEW, "x.view(b, t, k // heads, heads).permute(0, 3, 1, 2)"),
     mistake="split-interleaved",
     says="the heads are split interleaved (head i gets features i, i+heads, i+2·heads, ...). Head i takes the "
          "contiguous block of features i·s to (i+1)·s − 1, as in nn.MultiheadAttention: view as (b, t, heads, s).")
edit("mh-merge-no-transpose", "merge_heads", ("x.transpose(1, 2).reshape", "x.reshape"),
     mistake="merge-without-transpose",
     says="the tensor is reshaped to (b, t, k) without a transpose, so the positions and heads get mixed up. Move the "
          "heads next to the features first: .transpose(1, 2), then reshape (or .contiguous().view).")
edit("mh-merge-interleaved", "merge_heads", ("x.transpose(1, 2)", "x.permute(0, 2, 3, 1)"),
     mistake="merge-interleaved",
     says="the heads are merged interleaved (feature j·heads + i comes from head i). Head i's features must be the "
          "contiguous block i·s to (i+1)·s − 1, the inverse of split_heads.")


def _split(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Head i holds the i-th block of features. (b, t, k) -> (b, h, t, s)"""
    return torch.stack(x.chunk(heads, dim=-1), dim=1)  # (b, h, t, s)


def _merge(x: torch.Tensor) -> torch.Tensor:
    """The heads' features side by side. (b, h, t, s) -> (b, t, h·s)."""
    return torch.cat(x.unbind(dim=1), dim=-1)  # (b, t, h·s)


SPLIT = Oracle("split_heads(x, heads)", _split, "torch.stack(x.chunk(heads, -1), 1)",
               shape=lambda x, heads: (x.shape[0], heads, x.shape[1], x.shape[2] // heads),
               mistakes=lambda **inputs: WRITTEN.outputs("split_heads", **inputs), advice=Advice(
                   otherwise="Head i should hold features i·s to (i+1)·s − 1 of every position, positions in order.",
                   shape_hints=lambda x, heads: {
                       (x.shape[0], x.shape[1], heads, x.shape[2] // heads): "That is (b, t, heads, s): swap the "
                       "middle axes with .transpose(1, 2) to get (b, heads, t, s).",
                       (x.shape[0], heads, x.shape[1], x.shape[2]): "The head size is k // heads, not k."}))
MERGE = Oracle("merge_heads(x)", _merge, "torch.cat(x.unbind(1), -1)",
               shape=lambda x: (x.shape[0], x.shape[2], x.shape[1] * x.shape[3]),
               mistakes=lambda **inputs: WRITTEN.outputs("merge_heads", **inputs), advice=Advice(
                   otherwise="merge_heads must undo split_heads: merge_heads(split_heads(x, h)) == x.",
                   shape_hints=lambda x: {(x.shape[0], x.shape[2], x.shape[1], x.shape[3]): "Flatten the last two "
                                          "dimensions (heads, s) into one of size heads·s."}))

against(probes.split_heads_by_hand, SPLIT, answers={"y": hand_heads},
        passed="(1, 3, 4) with 2 heads: head 0 holds features 0-1 of every position, head 1 features 2-3.")
against(probes.split_heads_oracle, SPLIT,
        passed="Random shapes (several heads, one head, heads = k) against torch.stack(x.chunk(heads, -1), 1).")
against(probes.merge_heads_by_hand, MERGE, answers={"y": hand_x},
        passed="Merging the two heads of the by-hand example gives back the (1, 3, 4) input.")
against(probes.merge_heads_oracle, MERGE,
        passed="Random shapes against torch.cat(x.unbind(1), -1), the inverse of split_heads.")

# ---------------------------------------------------------------- the modules: typical mistakes
# Edits change the reference modules of course/multi_head.py, whose forward ends
#         out = attend(queries, keys, values, _heads_mask(mask))  # (b, h, tq, s)
#         return self.unify_heads(merge_heads(out))  # (b, tq, k)
# attend and _heads_mask are not the notebook's: every mistake writes the attention out (BY_HAND), so that its code
# runs there too. Mistakes of different kinds (_KINDS) together are named several-mistakes, with each one's message.

SCALE = "math.sqrt(queries.shape[-1])"  # the head size: k // heads (narrow), k (wide)
MASKED = ("        if mask is not None:\n"
          "            heads_mask = mask.unsqueeze(1) if mask.dim() == 3 else mask  # (b, tq, tk) -> (b, 1, tq, tk)\n"
          "            scores = scores.masked_fill(~heads_mask, float(\"-inf\"))\n")
BY_HAND = ("out = attend(queries, keys, values, _heads_mask(mask))",
           f"scores = queries @ keys.transpose(-2, -1) / {SCALE}  # (b, h, tq, tk)\n{MASKED}"
           "        out = F.softmax(scores, dim=-1) @ values")
#: each module's typical mistakes by kind, tried in this order: (the mistakes made, the changes after BY_HAND)
_KINDS = {answer: {"scale": [], "layout": [], "other": []} for answer in (NARROW_NAME, WIDE_NAME)}
SEVERAL = WRITTEN.mistake("several-mistakes", "several things at once, among the mistakes above.")


def forward_mistake(kind: str, answer: str, name: str | None, *changes: tuple[str, str], mistake: str,
                    says: str | None = None) -> None:
    """answer's reference with its attention written out (BY_HAND) and changes: mistake, of kind (scale, layout,
    other). name: its catalogue name; None: not catalogued (the other module's same change is)."""
    if name is not None:
        edit(name, answer, BY_HAND, *changes, mistake=mistake, says=says)
    elif says:
        WRITTEN.mistake(mistake, says)
    _KINDS[answer][kind].append(((WRITTEN[mistake],), changes))


# the scale: each module's own wrong sizes, then none
MODEL_SIZE = (SCALE, "math.sqrt(self.k)")
forward_mistake("scale", NARROW_NAME, "mh-scaled-by-model-size", MODEL_SIZE, mistake="scaled-by-model-size",
                says="the scores are divided by √k, the model size; each head's dot products are over s = k // heads "
                     "features, so divide by √(k // heads), the head size.")
forward_mistake("scale", NARROW_NAME, "mh-scaled-by-k-times-heads", (SCALE, "math.sqrt(self.k * self.heads)"),
                mistake="scaled-by-k-times-heads",
                says="the scores are divided by √(k·heads); each head's dot products are over s = k // heads "
                     "features, so divide by √(k // heads).")
forward_mistake("scale", WIDE_NAME, "wide-scaled-by-projected-size", (SCALE, "math.sqrt(self.to_queries.out_features)"),
                mistake="scaled-by-projected-size",
                says="the scores are divided by √(k·heads), the size of the projected queries before they are split. "
                     "Each head here has size k: divide by √k.")
forward_mistake("scale", WIDE_NAME, "wide-scaled-by-head-fraction", (SCALE, "math.sqrt(self.k / self.heads)"),
                mistake="scaled-by-head-fraction",
                says="the scores are divided by √(k / heads); a wide head has the full size k: divide by √k.")
# not catalogued here: 03's scaling-unscaled makes the same mistake
forward_mistake("scale", NARROW_NAME, None, (f" / {SCALE}", ""), mistake="unscaled",
                says="the scores are not scaled: divide them by the square root of the head size.")
forward_mistake("scale", WIDE_NAME, None, (f" / {SCALE}", ""), mistake="unscaled")

# the heads' layout: the projections split, or the heads merged, by hand without the transpose or interleaved
PROJECTIONS = (("to_queries", "x"), ("to_keys", "context"), ("to_values", "context"))


def splits(how: str) -> tuple[tuple[str, str], ...]:
    """Each projection split into heads by how (formatted with layer and source) instead of split_heads."""
    return tuple((f"split_heads(self.{layer}({source}), self.heads)", how.format(layer=layer, source=source))
                 for layer, source in PROJECTIONS)


SPLIT_BY = {  # mistake id -> changes
    WRITTEN.mistake("heads-split-without-transpose",
                    "the heads are split with a reshape to (b, heads, t, s) without a transpose. Use split_heads: "
                    "view as (b, t, heads, s), then .transpose(1, 2)."):
        splits("self.{layer}({source}).reshape({source}.shape[0], self.heads, {source}.shape[1], -1)"),
    WRITTEN.mistake("heads-split-interleaved",
                    "the heads are split interleaved (head i gets features i, i+heads, ...). Head i takes the "
                    "contiguous block i·s to (i+1)·s − 1: view as (b, t, heads, s), then .transpose(1, 2)."):
        splits("self.{layer}({source}).unflatten(-1, (-1, self.heads)).permute(0, 3, 1, 2)")}
MERGE_BY = {
    WRITTEN.mistake("heads-merged-without-transpose",
                    "the heads are merged with a reshape to (b, t, k) without a transpose. Use merge_heads: "
                    ".transpose(1, 2) first, then reshape."):
        (("merge_heads(out)", "out.reshape(out.shape[0], out.shape[2], -1)"),),
    WRITTEN.mistake("heads-merged-interleaved",
                    "the heads are merged interleaved (feature j·heads + i comes from head i). Head i's features must "
                    "be the contiguous block i·s to (i+1)·s − 1: .transpose(1, 2), then reshape."):
        (("merge_heads(out)", "out.permute(0, 2, 3, 1).flatten(2)"),)}
#: the same layout mistake on both sides, named as one
BOTH = {
    ("heads-split-without-transpose", "heads-merged-without-transpose"): WRITTEN.mistake(
        "heads-reshaped-without-transpose",
        "the projections are reshaped to (b, heads, t, s) without a transpose, so each 'head' mixes pieces of "
        "different positions. Use split_heads: view as (b, t, heads, s), then .transpose(1, 2)."),
    ("heads-split-interleaved", "heads-merged-interleaved"): WRITTEN.mistake(
        "heads-interleaved",
        "the heads are split interleaved (head i gets features i, i+heads, ...). Head i takes the contiguous block "
        "i·s to (i+1)·s − 1, as nn.MultiheadAttention does.")}
CATALOGUED = {  # the catalogue names of the layout mistakes graded end to end
    NARROW_NAME: {"heads-split-without-transpose": "mh-split-by-reshape", "heads-merged-without-transpose":
                  "mh-merge-by-reshape", "heads-reshaped-without-transpose": "mh-reshape-without-transpose",
                  "heads-split-interleaved": "mh-split-interleaved-inline", "heads-merged-interleaved":
                  "mh-merge-interleaved-inline", "heads-interleaved": "mh-interleaved-heads"},
    WIDE_NAME: {"heads-reshaped-without-transpose": "wide-reshape-without-transpose"}}
for answer in (NARROW_NAME, WIDE_NAME):
    for split, merge in product((None, *SPLIT_BY), (None, *MERGE_BY)):
        made = [m for m in (split, merge) if m is not None]
        changes = (*SPLIT_BY.get(split, ()), *MERGE_BY.get(merge, ()))
        if split and merge and (split.id, merge.id) in BOTH:
            made = [BOTH[split.id, merge.id]]
        if len(made) == 1:
            forward_mistake("layout", answer, CATALOGUED[answer].get(made[0].id), *changes, mistake=made[0].id)
        elif made:  # one of each kind of layout mistake: named several-mistakes
            _KINDS[answer]["layout"].append((tuple(made), changes))

# the rest
OTHERS = (  # (catalogue names of NARROW_NAME and WIDE_NAME, the change, mistake id, says)
    (("mh-softmax-over-queries", None), ("dim=-1", "dim=-2"), "softmax-over-queries",
     "the softmax runs over the queries (dim=-2). Each query's weights over the keys must sum to 1: softmax over the "
     "last dimension."),
    (("mh-unify-skipped", None), ("self.unify_heads(merge_heads(out))", "merge_heads(out)"), "unify-skipped",
     "unify_heads is not applied: the merged heads must go through self.unify_heads."),
    (("mh-context-ignored", "wide-context-ignored"), ("context = x if context is None else context", "context = x"),
     "context-ignored",
     "the context is ignored: keys and values must come from the context (x only when context is None)."),
    (("mh-mask-ignored", None), (MASKED, ""), "mask-ignored",
     "the mask is ignored: pass it on to the attention, broadcast over the heads — (b, tq, tk) becomes (b, 1, tq, "
     "tk)."))
for names, change, mistake, says in OTHERS:
    for answer, name in zip((NARROW_NAME, WIDE_NAME), names, strict=True):
        forward_mistake("other", answer, name, change, mistake=mistake, says=says if answer == NARROW_NAME else None)

# two mistakes at once, graded end to end: the scale of the whole model, and the heads merged without a transpose
edit("mh-scaled-by-model-size-merged-by-reshape", NARROW_NAME, BY_HAND, MODEL_SIZE,
     *MERGE_BY[WRITTEN["heads-merged-without-transpose"]], mistake="several-mistakes")

# structure mistakes, named by the checks below
PROJECTION_BIAS = WRITTEN.mistake("projection-bias", "the projections have a bias: create them with bias=False.")
UNIFY_NO_BIAS = WRITTEN.mistake("unify-no-bias",
                                "unify_heads has no bias: use nn.Linear(k, k), whose bias is on by default.")
NO_DIVISIBILITY_CHECK = WRITTEN.mistake(
    "no-divisibility-check",
    "the constructor accepts a model size that the heads do not divide: raise a ValueError when k % heads != 0.")
NOT_A_VALUE_ERROR = WRITTEN.mistake(
    "not-a-value-error",
    "the constructor rejects k % heads != 0, but not with a ValueError, the exception Python uses for an argument of "
    "the right type and a wrong value. (An assert is not the way: it is switched off by python -O, and an "
    "AssertionError says the code is wrong, not its input.)")
LOOP_OVER_HEADS = WRITTEN.mistake(
    "loop-over-heads", "the heads are computed one by one in a Python loop, not together in one (b, heads, t, s) "
                       "tensor.")


def _simulators(k: int, heads: int, x: torch.Tensor, context: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, answer: str) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    """answer's typical mistakes that these inputs can show: not context-ignored without a context (or where keys from
    x no longer fit the mask), not mask-ignored without a mask."""
    unseen = {"context-ignored"} if context is None or (mask is not None and context.shape[1] != x.shape[1]) else set()
    return list(_combinations(answer, frozenset(unseen | ({"mask-ignored"} if mask is None else set()))))


@cache
def _combinations(answer: str, unseen: frozenset[str]) -> tuple[tuple[Mistake, Callable[..., torch.Tensor]], ...]:
    """answer's mistakes alone, then one of each kind together (named several-mistakes, each one's message), without
    those of unseen: the same for every case that cannot show them, so made once. Each runs as a written mistake
    does (module_output), its changes applied the rest's first: unify-skipped changes what a merge by hand changes."""
    axes = [[((), ()), *((made, changes) for made, changes in found if not {m.id for m in made} & unseen)]
            for found in _KINDS[answer].values()]  # scale, layout, other
    reference, alone, together = reference_source(WRITTEN.reference, answer), [], []
    for choice in product(*axes):
        made = [m for mistakes, _ in choice for m in mistakes]
        changes = (BY_HAND, *(change for _, of_kind in reversed(choice) for change in of_kind))
        code = edited(reference, changes, f"{answer} with {changes}")
        run = partial(module_output, code, answer, WRITTEN.reference, ())
        if len(made) == 1:
            alone.append((made[0], run))
        elif made:
            together.append((both(SEVERAL, *made), run))
    return (*alone, *together)


def _multi_head_weights(ev: Evidence, built: Built, *, wide: bool) -> dict[str, torch.Tensor]:
    """The four separate nn.Linear (a bias only on unify_heads) and the weights the probe loaded."""
    __tracebackhide__ = True
    k, heads = built.args
    owner = WIDE_NAME if wide else NARROW_NAME
    width, spec = (k * heads, "k * heads") if wide else (k, "k")
    projection = (k, width, False, f"nn.Linear(k, {spec}, bias=False)", PROJECTION_BIAS)
    layers = {**dict.fromkeys(LAYERS[:3], projection),
              "unify_heads": (width, k, True, f"nn.Linear({spec}, k)", UNIFY_NO_BIAS)}
    return kinds.expect_linear_layers(ev, built.key, f"{owner}({k}, {heads})", owner, layers,
                                      f"Two of {owner}'s layers are the same object: each needs its own nn.Linear.",
                                      built.seed, GAINS)


def _wide_attention(w: dict[str, torch.Tensor], k: int, heads: int, x: torch.Tensor,
                    context: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """PyTorch's fused attention on the projections (b, t, k·heads), split into heads of size k (scale 1/√k)."""
    source = x if context is None else context
    q, keys, v = (_split(F.linear(t, w[name]), heads)  # (b, h, t, k)
                  for t, name in ((x, "to_queries.weight"), (source, "to_keys.weight"), (source, "to_values.weight")))
    m = None if mask is None else torch.broadcast_to(mask, (x.shape[0], x.shape[1], source.shape[1]))[:, None]
    out = F.scaled_dot_product_attention(q, keys, v, attn_mask=m)  # (b, h, tq, k)
    return F.linear(_merge(out), w["unify_heads.weight"], w["unify_heads.bias"])


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
    "nn.MultiheadAttention", simulators=partial(_simulators, answer=NARROW_NAME), advice=Advice(
        otherwise="It differs from nn.MultiheadAttention with your weights. " + _SHAPES_RECIPE,
        hint=_head_layout_hint, shape_hints=_output_shape_hints))
WIDE = ForwardOracle(
    WIDE_NAME, "multi-head attention", partial(_multi_head_weights, wide=True), _wide_attention,
    "PyTorch's fused attention on your projections", simulators=partial(_simulators, answer=WIDE_NAME),
    advice=Advice(otherwise="It differs from PyTorch's fused attention on your projections. " + _SHAPES_RECIPE,
                  hint=_head_layout_hint, shape_hints=_output_shape_hints))

# ---------------------------------------------------------------- the modules: the checks


def _expect_no_loop(ev: Evidence) -> None:
    """At most MAX_MATMULS matrix products in the graph of an 8-head forward pass: the heads computed together."""
    __tracebackhide__ = True
    count = ev.facts.get("matmuls")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        fail(f"The test recorded nothing about {NARROW_NAME}.forward's graph: the check did not run to the end.")
    if count > MAX_MATMULS:
        fail(f"{NARROW_NAME}.forward with {GRAD_HEADS} heads performs {count} matrix products, where the heads "
             f"computed together need about 6: {LOOP_OVER_HEADS.explanation}", mistake=LOOP_OVER_HEADS)


against_forward(probes.multi_head_oracle, NARROW,
                passed="Self- and cross-attention, 1-4 heads, masks of three shapes against nn.MultiheadAttention.")
against_forward(probes.wide_oracle, WIDE,
                passed="The same cases against F.scaled_dot_product_attention on the projections, heads of size k.")
against_forward(probes.multi_head_gradients, NARROW, then=_expect_no_loop,
                gradients=partial(kinds.expect_forward_gradients, tolerate_mistakes=True),
                passed="Gradients reach every parameter, x and the context as through nn.MultiheadAttention; no loop.")
against_forward(probes.multi_head_vs_pytorch, NARROW, then=_expect_no_loop, gradients=kinds.expect_forward_gradients,
                passed="A small masked cross-attention case and its gradients against nn.MultiheadAttention; no loop.")
against_forward(probes.wide_vs_pytorch, WIDE, gradients=kinds.expect_forward_gradients,
                passed="A small masked cross-attention case and its gradients against PyTorch's fused attention.")


def _structure(check: RunsCheck, oracle: ForwardOracle, count: Callable[[int, int], int], formula: str,
               passed: str) -> None:
    """Register check's judge: its module has the right layers, and count(k, heads) parameters (formula in words)."""
    declared(check, partial(expect_structure, check=check, oracle=oracle, claim=f"{oracle.owner} has the right layers",
                            count=(count(*check.runs[0].module.args), f"it should have {formula}",
                                   "Extra layers, or some kept in a plain list (use nn.ModuleList)?")), passed)


_structure(probes.multi_head_structure, NARROW, lambda k, heads: 4 * k * k + k, "4k² + k",
           "Three bias-free k×k projections and unify_heads nn.Linear(k, k): 4k² + k parameters.")
_structure(probes.wide_structure, WIDE, lambda k, heads: 4 * heads * k * k + k, "4·heads·k² + k",
           "Projections nn.Linear(k, k·heads, bias=False), unify_heads nn.Linear(k·heads, k): 4·heads·k² + k.")


@judge("multi_head_indivisible")
def _indivisible(ev: Evidence) -> None:
    """MultiHeadAttention(10, 4) cannot split 10 features into 4 equal heads: construction raises a ValueError."""
    __tracebackhide__ = True
    call = f"{NARROW_NAME}(10, 4)"
    expect_value_error(ev, "indivisible", call, NO_DIVISIBILITY_CHECK, NOT_A_VALUE_ERROR)
    (run,) = probes.multi_head_structure.runs  # the probe then builds and runs the structure check's module
    anchored(ev, run, NARROW, f"{call} raises a ValueError", NARROW.weights(ev, run.module))


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
             f"{WRITTEN['context-ignored'].explanation}", mistake=WRITTEN["context-ignored"])


CONTEXT_PASSED = ("(b, tq, k) out for self- and cross-attention; forward(x) equals forward(x, context=x); the context "
                  "matters.")
declared(probes.multi_head_context, partial(_expect_context, check=probes.multi_head_context, oracle=NARROW),
         CONTEXT_PASSED)
declared(probes.wide_context, partial(_expect_context, check=probes.wide_context, oracle=WIDE), CONTEXT_PASSED)


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
