"""Judges for assignment 03 (probes in course/checks/scaling.py): F.scaled_dot_product_attention for the function
(its weights are its output when the values are the identity), nn.MultiheadAttention with one head for the module,
and the typical mistakes they can name; only the properties are written out."""

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import compare, modules
from course.checks import scaling as probes
from course.checks.compare import Mistake, expect_close, expect_tuple, fail, matches_any, output, raised, randn, tensor
from course.checks.evidence import Evidence, gradient_key, item_key
from course.checks.kinds import Case
from course.checks.scaling import CHANGED, GAINS, ROLES, UPSTREAM_SEEDS
from course.judges import judge, kinds, mistakes, oracles
from course.judges.attention_modules import expect_structure, projection_count, projections
from course.judges.kinds import ForwardOracle, against_forward, anchor_forward, each_case, expect_causal, forward_output

SDPA_NAME = "scaled_dot_product_attention"
MODULE_NAME = "ScaledSelfAttention"

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/scaling.txt


_SDPA_HINT = ("The inputs may have any number of leading dimensions (..., tq, d): use keys.transpose(-2, -1) "
              "(or keys.mT) rather than transpose(1, 2), and a mask that broadcasts to (..., tq, tk).")
_SDPA_RECIPE = ("scores = queries·keysᵀ / √d (d the query/key size), masked positions set to −∞ before a softmax "
                "over the keys (last dimension), output = weights·values.")
_MODULE_FORWARD_HINT = ("forward should return the output of scaled_dot_product_attention(to_queries(x), to_keys(x), "
                        "to_values(x), mask).")

# ---------------------------------------------------------------- the function: oracle and typical mistakes

Pair = tuple[torch.Tensor, torch.Tensor]  # (output, weights)


def _zero_empty_rows(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The course's convention for a query that may attend to nothing: all-zero weights, zero output."""
    return t if mask is None else torch.where(~mask.any(dim=-1, keepdim=True), torch.zeros_like(t), t)


def _sdpa_oracle(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 mask: torch.Tensor | None = None) -> Pair:
    """PyTorch's fused attention: the output, and the weights (the output when the values are the identity)."""
    tk = keys.shape[-2]
    eye = torch.eye(tk).expand(*keys.shape[:-2], tk, tk)  # (..., tk, tk)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    w = F.scaled_dot_product_attention(queries, keys, eye, attn_mask=mask)
    return _zero_empty_rows(out, mask), _zero_empty_rows(w, mask)


def _simulated(how: Mistake | None, zeroed: bool, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: torch.Tensor | None = None) -> Pair:
    """(output, weights) of scaled attention written out (how None) or with one typical mistake; zeroed: rows where
    the mask allows nothing zeroed as asked. Differentiable in queries (..., tq, d), keys (..., tk, d), values."""
    d, dv = queries.shape[-1], values.shape[-1]
    divisor = {M["unscaled"]: 1.0, M["divided-by-d"]: d, M["scaled-by-value-size"]: math.sqrt(dv),
               M["scaled-by-size-1"]: math.sqrt(queries.shape[1])}.get(how, math.sqrt(d))
    scores = queries @ keys.transpose(-2, -1) / divisor  # (..., tq, tk)
    mask = ~mask if how is M["mask-inverted"] and mask is not None else mask
    if how is M["softmax-overflow"]:  # exp of the scores as they are: past about 88, float32's exp is infinite
        e = (scores if mask is None else scores.masked_fill(~mask, float("-inf"))).exp()
        w = e / e.sum(dim=-1, keepdim=True)
    elif how is M["softmax-over-queries"]:
        w = F.softmax(scores, dim=-2)
    elif mask is None or how is M["mask-ignored"]:
        w = F.softmax(scores, dim=-1)
    elif how is M["mask-after-softmax"]:
        w = F.softmax(scores, dim=-1) * mask
    else:
        fill = {M["large-negative-fill"]: -1e9, M["mask-filled-with-zero"]: 0.0}.get(how, float("-inf"))
        w = F.softmax(scores.masked_fill(~mask, fill), dim=-1)
    w = _zero_empty_rows(w, mask) if zeroed else w
    return w @ values, w


#: the typical mistakes of the function, each with whether its empty rows come out zeroed; those after the first
#: six need a mask
_SDPA_MISTAKES = ((M["unscaled"], True), (M["divided-by-d"], True), (M["scaled-by-value-size"], True),
                  (M["scaled-by-size-1"], True), (M["softmax-over-queries"], False), (M["softmax-overflow"], True),
                  (M["large-negative-fill"], False), (M["mask-inverted"], True), (M["mask-filled-with-zero"], False),
                  (M["mask-after-softmax"], False), (M["mask-ignored"], False), (M["mask-filled-with-zero"], True),
                  (M["mask-ignored"], True))


def _typical(masked: bool) -> tuple[tuple[Mistake, bool], ...]:
    """The typical mistakes that show on a call with a mask (all of them) or without one (the first six)."""
    return _SDPA_MISTAKES[: None if masked else 6]


def _sdpa_mistakes(inputs: dict[str, torch.Tensor]) -> list[tuple[Mistake, Pair]]:
    """(mistake, its (output, weights) on the inputs) for the typical mistakes that show on them."""
    return [(m, _simulated(m, zeroed, **inputs)) for m, zeroed in _typical("mask" in inputs)]


def _sdpa_weight_mistakes(inputs: dict[str, torch.Tensor]) -> list[tuple[Mistake, torch.Tensor]]:
    scores = inputs["queries"] @ inputs["keys"].transpose(-2, -1) / math.sqrt(inputs["queries"].shape[-1])
    masked = scores if "mask" not in inputs else scores.masked_fill(~inputs["mask"], float("-inf"))
    return [*((m, w) for m, (_, w) in _sdpa_mistakes(inputs)), (M["weights-are-scores"], masked),
            (M["weights-are-scores"], scores)]


# ---------------------------------------------------------------- the function

def _result(ev: Evidence, case: Case) -> Pair:
    """The (output, weights) pair the student's function returned, after checking types and shapes."""
    __tracebackhide__ = True
    raised(ev, case.key, SDPA_NAME, _SDPA_HINT)
    expect_tuple(ev, case.key, SDPA_NAME, f"{SDPA_NAME} should return a pair (output, weights): end with "
                 "`return weights @ values, weights`.", 2, M["not-a-pair"])
    inputs = dict(case.inputs())
    q, k, v = inputs["queries"], inputs["keys"], inputs["values"]
    lead, tq, tk, d, dv = tuple(q.shape[:-2]), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    swapped = "That is the shape of the {}: is the pair returned as (weights, output)?"
    out = output(ev, item_key(case.key, 0), what=f"the output of {SDPA_NAME}", shape=(*lead, tq, dv), shape_hints={
        (*lead, tq, tk): swapped.format("weights"),
        (*lead, tq, d): "The output has the size of a key, not of a value: are the keys used as values?"})
    w = output(ev, item_key(case.key, 1), what=f"the weights of {SDPA_NAME}", shape=(*lead, tq, tk),
               shape_hints={(*lead, tq, dv): swapped.format("output")})
    return out, w


def _expect_sdpa(ev: Evidence, case: Case) -> Pair:
    """The pair recorded for case against the oracle, naming the typical mistake it matches; returns it."""
    __tracebackhide__ = True
    out, w = _result(ev, case)
    inputs = dict(case.inputs())
    expected_out, expected_w = _sdpa_oracle(**inputs)
    weight_mistakes = _sdpa_weight_mistakes(inputs)
    if not bool(torch.isfinite(w).all()):  # name a mistake whose weights hold −∞ before saying "NaN or infinite"
        for m, candidate in weight_mistakes:
            if not bool(torch.isfinite(candidate).all()) and matches_any(w, [candidate], ev.device):
                fail(f"The weights of {SDPA_NAME} are not what was asked: {m.explanation}", expected_w, w,
                     case=case.label, mistake=m)
    mask = inputs.get("mask")
    if mask is not None and not bool(mask.any(dim=-1).all()) and not (
            bool(torch.isfinite(w).all()) and bool(torch.isfinite(out).all())):
        fail(f"{SDPA_NAME} is not what was asked: {M['nan-in-empty-rows'].explanation}", expected_w, w,
             case=case.label, mistake=M["nan-in-empty-rows"])
    expect_close(w, expected_w, what=f"the weights of {SDPA_NAME}", device=ev.device, mistakes=weight_mistakes,
                 otherwise=_SDPA_RECIPE, case=case.label)
    expect_close(out, expected_out, what=f"the output of {SDPA_NAME}", device=ev.device, case=case.label,
                 mistakes=[(m, o) for m, (o, _) in _sdpa_mistakes(inputs)], otherwise=_SDPA_RECIPE)
    return out, w


for sdpa_check, passed in (
        (probes.sdpa_by_hand, "d = 4: raw scores 4 and 0 become 2 and 0, weights e²/(e²+1) ≈ 0.881 and 1/(e²+1) ≈ "
                              "0.119."),
        (probes.sdpa_masks_by_hand, "Masking key 0 leaves all the weight on key 1: weights [0, 1], output = value 1; "
                                    "a mask (tk,) broadcasts."),
        (probes.sdpa_fully_masked_row, "A query that may attend to nothing gets all-zero weights and a zero output — "
                                       "no NaN; other rows are unchanged."),
        (probes.sdpa_oracle, "Random shapes (0-2 leading dimensions, tq != tk, dv != d) and masks against "
                             "F.scaled_dot_product_attention, queries that may attend to nothing zeroed.")):
    each_case(sdpa_check, _expect_sdpa, passed=passed)


def _expect_sdpa_gradients(ev: Evidence, case: Case, strict: bool = False) -> None:
    """Gradients reach queries, keys and values, stay finite even with a query that may attend to nothing, and
    are autograd's through PyTorch's fused attention (or, unless strict, through the typical mistake the output is,
    which the other checks name)."""
    __tracebackhide__ = True
    out, w = _expect_sdpa(ev, case) if strict else _result(ev, case)
    modules.expect_attached(ev, item_key(case.key, 0), f"The output of {SDPA_NAME}")
    inputs = dict(case.inputs())
    computations = [_sdpa_oracle, *(partial(_simulated, m, zeroed) for m, zeroed in _typical("mask" in inputs))]
    found = [compute for compute in computations if all(
        matches_any(got, [want], ev.device) for got, want in zip((out, w), compute(**inputs), strict=True))]
    if not found:  # not attention, nor a typical mistake of it
        _expect_sdpa(ev, case)
        fail(f"The result of {SDPA_NAME} is not attention.", case=case.label)
    # the loss: sum(output · upstream), plus sum(weights · upstream) where the student's weights are in the graph
    seeds = UPSTREAM_SEEDS[: 2 if compare.requires_grad(ev, item_key(case.key, 1)) else 1]
    grads = modules.autograd(lambda _, **given: found[0](**given), {}, inputs, lambda pair: sum(
        (t * randn(*t.shape, seed=seed)).sum() for t, seed in zip(pair, seeds, strict=False)))
    for name, want in grads.items():
        got = tensor(ev, gradient_key(name), shape=tuple(want.shape))
        if got is not None and not bool(torch.isfinite(got).all()):
            fail(f"The gradient of the {name} is not what was asked: {M['nan-gradients'].explanation}",
                 mistake=M["nan-gradients"])
    modules.expect_gradients(ev, grads, owner=SDPA_NAME, case=case.label, oracle="F.scaled_dot_product_attention")


each_case(probes.sdpa_gradients, _expect_sdpa_gradients,
          passed="Gradients on random shapes with queries that may attend to nothing: finite, and autograd's.")
each_case(probes.sdpa_vs_pytorch, partial(_expect_sdpa_gradients, strict=True),
          passed="A small masked batch against F.scaled_dot_product_attention (output and weights, an empty row "
                 "zeroed); gradients reach queries, keys and values, finite and as autograd gives them.")


# ---------------------------------------------------------------- ScaledSelfAttention: oracle and typical mistakes

_scaled_projections = partial(projections, owner=MODULE_NAME, gains=GAINS, bias_mistake=M["projection-bias"])


def _through_module(how: Mistake | None, zeroed: bool, w: dict[str, torch.Tensor], k: int, x: torch.Tensor,
                    mask: torch.Tensor | None = None, *, raw_values: bool = False,
                    unmasked: bool = False) -> torch.Tensor:
    """The module's output when scaled_dot_product_attention is simulated(how, zeroed); raw_values: x used as the
    values; unmasked: the mask not passed on. (b, t, k)"""
    q, keys, v = (F.linear(x, w[f"{role}.weight"]) for role in ROLES)
    return _simulated(how, zeroed, q, keys, x if raw_values else v, None if unmasked else mask)[0]


def _module_simulators(k: int, x: torch.Tensor, mask: torch.Tensor | None = None) -> list[tuple[Mistake, Callable]]:
    """The mistakes of scaled_dot_product_attention (which the module calls), and the module's own."""
    found = [(m, partial(_through_module, m, zeroed)) for m, zeroed in _typical(mask is not None)]
    found.append((M["values-not-projected"], partial(_through_module, None, True, raw_values=True)))
    if mask is not None:  # the mask dropped in forward: attention without a mask
        found.append((M["mask-ignored"], partial(_through_module, None, True, unmasked=True)))
    return found


def _both_mistakes(w: dict[str, torch.Tensor], k: int, x: torch.Tensor,
                   mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    """A mistake of the function together with the values not projected: a real computation no check names."""
    return [_through_module(m, zeroed, w, k, x, mask, raw_values=True) for m, zeroed in _typical(mask is not None)]


MODULE = ForwardOracle(
    MODULE_NAME, "scaled self-attention with the projections to_queries, to_keys and to_values", _scaled_projections,
    lambda w, k, x, mask=None: oracles.course_module_attention(w, x, mask=mask), "nn.MultiheadAttention",
    simulators=_module_simulators, anchors=_both_mistakes,
    hint=lambda x, mask=None: _MODULE_FORWARD_HINT + ("" if mask is None else " " + M["no-mask-argument"].explanation),
    keyword_mistake=M["no-mask-argument"],
    otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _MODULE_FORWARD_HINT)

against_forward(probes.scaled_self_attention_vs_pytorch, MODULE,
                passed="A small masked batch against nn.MultiheadAttention (one head, which scales by √k) with the "
                       "check's weights loaded into your module; the gradients reach the input and the three "
                       "projections.")
against_forward(probes.scaled_self_attention_oracle, MODULE,
                passed="Random weights, inputs and masks against nn.MultiheadAttention (one head) with the check's "
                       "weights.")


kinds.declared(probes.scaled_self_attention_structure, partial(
    expect_structure, check=probes.scaled_self_attention_structure, oracle=MODULE,
    claim=f"{MODULE_NAME} has the right layers", count=projection_count(probes.STRUCTURE_K)),
    passed="Three separate bias-free k×k projections, registered as parameters: 3k² in all.")


@judge("scaled_self_attention_causal")
def _judge_scaled_causal(ev: Evidence) -> None:
    """With a lower-triangular mask, changing a later input changes no earlier output; without a mask it does."""
    (run,) = probes.scaled_self_attention_causal.runs
    w, args = _scaled_projections(ev, run.module), run.module.args
    inputs = [dict(case.inputs()) for case in run.cases]
    y, y_changed, y_free, y_free_changed = (forward_output(ev, case.key, MODULE, given)
                                            for case, given in zip(run.cases, inputs, strict=True))
    leaks = [(m, simulate(w, *args, **inputs[0])) for m, simulate in _module_simulators(*args, **inputs[0])]
    leaks += [(M["mask-ignored"], _through_module(m, zeroed, w, *args, **inputs[0], unmasked=True))
              for m, zeroed in _SDPA_MISTAKES[:4]]  # the mask dropped together with a mistake of the function
    expect_causal(ev, y, y_changed, CHANGED, f"{MODULE_NAME}.forward with a causal mask", leaks,
                  "Later positions leak through the mask. Is the mask passed on to scaled_dot_product_attention, and "
                  "is True 'allowed'?", M["causal-leak"])
    if matches_any(y_free_changed[:, :CHANGED], [y_free[:, :CHANGED]], ev.device):
        fail(f"Without a mask, {MODULE_NAME} should let every position see every other one, but changing input 4 "
             "changed no earlier output. Does forward use a mask when none is given?",
             mistake=M["masks-without-a-mask"])
    for value, case, given in zip((y, y_changed, y_free, y_free_changed), run.cases, inputs, strict=True):
        anchor_forward(ev, value, MODULE, w, args, given, f"{MODULE_NAME} respects the causal mask", case.label)
