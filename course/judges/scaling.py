"""Judges for assignment 03 (probes in course/checks/scaling.py): F.scaled_dot_product_attention for the function
(its weights are its output when the values are the identity), nn.MultiheadAttention with one head for the module,
and the typical mistakes they can name, each written as a student writes it with the message beside it
(course/judges/variants.py); only the properties are written out."""

import contextlib
from collections.abc import Iterable
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import compare, modules
from course.checks import scaling as probes
from course.checks.compare import Mistake, expect_close, expect_tuple, fail, matches_any, output, raised, randn, tensor
from course.checks.evidence import Evidence, gradient_key, item_key
from course.checks.kinds import Case
from course.checks.scaling import CHANGED, GAINS, UPSTREAM_SEEDS
from course.judges import judge, kinds, oracles
from course.judges.attention_modules import expect_structure, projection_count, projections
from course.judges.kinds import ForwardOracle, against_forward, anchor_forward, each_case, expect_causal, forward_output
from course.judges.variants import Simulator, Variants, Written, calling, module_output, simulators

SDPA_NAME = SDPA = "scaled_dot_product_attention"
MODULE_NAME = "ScaledSelfAttention"

# ---------------------------------------------------------------- mistakes
# Edits of the reference answers in course/scaling.py; of two that match, the first declared is named. Mistakes every
# check names (a shape, an error, a detached output) and those named by a property here are in catalogue/scaling.py.

WRITTEN = Variants(__name__, reference="course.scaling")
edit = WRITTEN.edit
SCORES = "scores = queries @ keys.transpose(-2, -1) / math.sqrt(d)"
FILL = 'scores = scores.masked_fill(~mask, float("-inf"))'
SOFTMAX = "weights = F.softmax(scores, dim=-1)"
ZERO_ROWS = "weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)"
NO_FILL = (f"if mask is not None:\n        {FILL}\n    ", "")
NO_ZEROED_ROWS = (f"\n    if mask is not None:\n        {ZERO_ROWS}", "")
RETURN = "return weights @ values, weights"

# the scale, and the softmax: these show without a mask
edit("scaling-unscaled", SDPA, (SCORES, "scores = queries @ keys.transpose(-2, -1)"), mistake="unscaled",
     says="the scores are not scaled. Divide queries·keysᵀ by √d, d the size of a query (queries.shape[-1]).")
edit("scaling-divided-by-d", SDPA, ("/ math.sqrt(d)", "/ d"), mistake="divided-by-d",
     says="the scores are divided by d; divide by √d (math.sqrt(d)), the standard deviation of q·k. (Did the queries "
          "get scaled before calling a function that scales again?)")
edit("scaling-by-value-size", SDPA, ("math.sqrt(d)", "math.sqrt(values.shape[-1])"), mistake="scaled-by-value-size",
     says="the scores are divided by the square root of the value size; the scale is √d with d the size of a query "
          "and a key (queries.shape[-1]), not of a value.")
# on one matrix (tq, d) size(1) is d; declared after the value size, which it equals when tq == dv
edit("scaling-d-from-size-1", SDPA, ("d = queries.shape[-1]", "d = queries.size(1)"), mistake="scaled-by-size-1",
     says="the scores are divided by √(queries.size(1)): on a batch (b, tq, d) that is the number of queries, not "
          "their size (on one matrix (tq, d) it happens to be d). Take d from the last dimension: queries.size(-1).")
SCALES = tuple(written.name for written in WRITTEN.of(SDPA))  # the module's mask dropped leaks with these too
edit("scaling-softmax-over-queries", SDPA, NO_FILL, NO_ZEROED_ROWS, (SOFTMAX, SOFTMAX.replace("-1", "-2")),
     mistake="softmax-over-queries", says="the softmax runs over the queries (dim=-2). Each query's weights over the "
     "keys must sum to 1: use dim=-1.")  # and no mask yet: the first version a student writes, as it was simulated
edit("scaling-softmax-by-hand", SDPA, (SOFTMAX, "weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)"),
     mistake="softmax-overflow", says="the softmax is written as exp(scores) / sum(exp(scores)): on large scores (past "
     "about 88 in float32) exp is infinite and the weights come out NaN. Subtract each row's maximum before exp, or "
     "use F.softmax, which does.")

#: the mistakes above show without a mask; those below only with one (without, they compute what the reference does)
WITHOUT_A_MASK = tuple(written.name for written in WRITTEN.of(SDPA))
edit("scaling-large-negative-fill", SDPA, (FILL, "scores = scores.masked_fill(~mask, -1e9)"), NO_ZEROED_ROWS,
     mistake="large-negative-fill", says="a query that may attend to nothing gets equal weights on every key. That "
     "happens when masked scores are filled with a large negative number instead of −∞ and such rows are not zeroed; "
     "the convention is all-zero weights and a zero output for them.")
edit("scaling-mask-inverted", SDPA, (FILL, FILL.replace("~mask", "mask")),
     (ZERO_ROWS, ZERO_ROWS.replace("~mask", "~(~mask)")), mistake="mask-inverted", says="the mask is inverted. True "
     "means attention is ALLOWED (PyTorch's convention): fill the scores where the mask is False (~mask) with −∞.")
MASKED_WITH_ZERO = (FILL, "scores = scores.masked_fill(~mask, 0.0)")
edit("scaling-mask-with-zero-rows-not-zeroed", SDPA, MASKED_WITH_ZERO, NO_ZEROED_ROWS, mistake="mask-filled-with-zero",
     says="masked scores are set to 0 instead of −∞. A score of 0 is an ordinary score (e⁰ = 1), so masked keys "
          "still get weight: use float('-inf').")
edit("scaling-mask-after-softmax", SDPA, NO_FILL, (ZERO_ROWS, "weights = weights * mask"), mistake="mask-after-softmax",
     says="the mask is applied after the softmax without renormalising, so the weights of a row no longer sum to 1. "
          "Mask the scores with −∞ before the softmax.")
edit("scaling-mask-ignored", SDPA, NO_FILL, NO_ZEROED_ROWS, mistake="mask-ignored",
     says="the mask is ignored: masked keys still get weight. Is the mask passed on, and are the scores where it is "
          "False filled with −∞ before the softmax?")
edit("scaling-mask-with-zero", SDPA, MASKED_WITH_ZERO, mistake="mask-filled-with-zero")
edit("scaling-mask-ignored-rows-zeroed", SDPA, NO_FILL, mistake="mask-ignored")

#: the mistakes above change the output, and the module's through it; those below only the weights returned
OUTPUT_MISTAKES = tuple(written.name for written in WRITTEN.of(SDPA))
edit("scaling-raw-scores-as-weights", SDPA, (RETURN, "return weights @ values, scores"), mistake="weights-are-scores",
     says="the weights returned are the scores (before the softmax): return the softmax of the scaled, masked scores.")
edit("scaling-unmasked-scores-as-weights", SDPA, (FILL, FILL.replace("scores =", "masked =")),
     (SOFTMAX, "weights = F.softmax(scores if mask is None else masked, dim=-1)"),
     (RETURN, "return weights @ values, scores"), mistake="weights-are-scores")

# named by the checks' properties, not by running a variant
NOT_A_PAIR = WRITTEN.mistake("not-a-pair", "scaled_dot_product_attention should return a pair (output, weights).")
NAN_IN_EMPTY_ROWS = WRITTEN.mistake("nan-in-empty-rows", "a query that may attend to nothing gets NaN weights and "
                                    "output instead of zeros. The softmax of a row of −∞ is 0/0; the convention "
                                    "(PyTorch's too) is all-zero weights and a zero output for such a row: after the "
                                    "softmax, zero the rows where mask.any(dim=-1, keepdim=True) is False.")
NAN_GRADIENTS = WRITTEN.mistake("nan-gradients", "NaN gradients flow back from a query that may attend to nothing. "
                                "The forward pass can hide a NaN that the backward pass still sees: adding −∞ to the "
                                "scores (scores + where(mask, 0, −inf)) and repairing the NaN weights afterwards "
                                "sends NaN back through the addition. Use scores.masked_fill(~mask, float('-inf')), "
                                "whose gradient is zero at masked positions.")

# ScaledSelfAttention.forward: its own mistakes; one of scaled_dot_product_attention's it calls is named as that
CALL = "scaled_dot_product_attention(queries, keys, values, mask)"
edit("scaling-module-mask-dropped", MODULE_NAME, (CALL, CALL.replace(", mask)", ")")), mistake="mask-ignored")
edit("scaling-module-values-not-projected", MODULE_NAME, (CALL, CALL.replace("values,", "x,")),
     mistake="values-not-projected", says="the values are the raw inputs x; they should go through to_values first.")
PROJECTION_BIAS = WRITTEN.mistake("projection-bias", "the projections have a bias: use nn.Linear(k, k, bias=False).")
NO_MASK_ARGUMENT = WRITTEN.mistake("no-mask-argument", "forward takes no mask argument: def forward(self, x, "
                                   "mask=None).")
CAUSAL_LEAK = WRITTEN.mistake("causal-leak", "with a causal mask, a later position still changes an earlier output.")
MASKS_WITHOUT_A_MASK = WRITTEN.mistake("masks-without-a-mask", "without a mask, forward still masks: every position "
                                       "should see every other one.")

_SDPA_HINT = ("The inputs may have any number of leading dimensions (..., tq, d): use keys.transpose(-2, -1) "
              "(or keys.mT) rather than transpose(1, 2), and a mask that broadcasts to (..., tq, tk).")
_SDPA_RECIPE = ("scores = queries·keysᵀ / √d (d the query/key size), masked positions set to −∞ before a softmax "
                "over the keys (last dimension), output = weights·values.")
_MODULE_FORWARD_HINT = ("forward should return the output of scaled_dot_product_attention(to_queries(x), to_keys(x), "
                        "to_values(x), mask).")

# ---------------------------------------------------------------- the function: oracle and typical mistakes

Pair = tuple[torch.Tensor, torch.Tensor]  # (output, weights)


def _sdpa_oracle(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 mask: torch.Tensor | None = None) -> Pair:
    """PyTorch's fused attention: the output, and the weights (the output when the values are the identity); a query
    that may attend to nothing gets all-zero weights and a zero output (the course's convention)."""
    tk = keys.shape[-2]
    eye = torch.eye(tk).expand(*keys.shape[:-2], tk, tk)  # (..., tk, tk)
    pair = [F.scaled_dot_product_attention(queries, keys, v, attn_mask=mask) for v in (values, eye)]
    return tuple(t if mask is None else torch.where(~mask.any(dim=-1, keepdim=True), torch.zeros_like(t), t)
                 for t in pair)


def _sdpa_mistakes(inputs: dict[str, torch.Tensor]) -> list[tuple[Written, Pair]]:
    """(variant, its (output, weights) on the inputs) for each written mistake of the function that shows on them
    and runs, in declaration order, without autograd (a variant that raises matches nothing)."""
    found = []
    for written in WRITTEN.of(SDPA):
        if "mask" in inputs or written.name in WITHOUT_A_MASK or written.name not in OUTPUT_MISTAKES:
            with torch.no_grad(), contextlib.suppress(Exception):
                found.append((written, written.run(**inputs)))
    return found


# ---------------------------------------------------------------- the function

def _result(ev: Evidence, case: Case) -> Pair:
    """The (output, weights) pair the student's function returned, after checking types and shapes."""
    __tracebackhide__ = True
    raised(ev, case.key, SDPA_NAME, _SDPA_HINT)
    expect_tuple(ev, case.key, SDPA_NAME, f"{SDPA_NAME} should return a pair (output, weights): end with "
                 "`return weights @ values, weights`.", 2, NOT_A_PAIR)
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
    mistakes = [(written.mistake, pair) for written, pair in _sdpa_mistakes(inputs)]
    weight_mistakes = [(m, weights) for m, (_, weights) in mistakes]
    if not bool(torch.isfinite(w).all()):  # name a mistake whose weights hold −∞ before saying "NaN or infinite"
        for m, candidate in weight_mistakes:
            if not bool(torch.isfinite(candidate).all()) and matches_any(w, [candidate], ev.device):
                fail(f"The weights of {SDPA_NAME} are not what was asked: {m.explanation}", expected_w, w,
                     case=case.label, mistake=m)
    mask = inputs.get("mask")
    if mask is not None and not bool(mask.any(dim=-1).all()) and not (
            bool(torch.isfinite(w).all()) and bool(torch.isfinite(out).all())):
        fail(f"{SDPA_NAME} is not what was asked: {NAN_IN_EMPTY_ROWS.explanation}", expected_w, w,
             case=case.label, mistake=NAN_IN_EMPTY_ROWS)
    expect_close(w, expected_w, what=f"the weights of {SDPA_NAME}", device=ev.device, mistakes=weight_mistakes,
                 otherwise=_SDPA_RECIPE, case=case.label)
    expect_close(out, expected_out, what=f"the output of {SDPA_NAME}", device=ev.device, case=case.label,
                 mistakes=[(m, o) for m, (o, _) in mistakes], otherwise=_SDPA_RECIPE)
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
    # a mistake only in the weights returned is named by the other checks: its gradients are not attention's
    computations = [(_sdpa_oracle, _sdpa_oracle(**inputs)), *(
        (written.run, pair) for written, pair in _sdpa_mistakes(inputs) if written.name in OUTPUT_MISTAKES)]
    found = [compute for compute, pair in computations if all(
        matches_any(got, [want], ev.device) for got, want in zip((out, w), pair, strict=True))]
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
            fail(f"The gradient of the {name} is not what was asked: {NAN_GRADIENTS.explanation}",
                 mistake=NAN_GRADIENTS)
    modules.expect_gradients(ev, grads, owner=SDPA_NAME, case=case.label, oracle="F.scaled_dot_product_attention")


each_case(probes.sdpa_gradients, _expect_sdpa_gradients,
          passed="Gradients on random shapes with queries that may attend to nothing: finite, and autograd's.")
each_case(probes.sdpa_vs_pytorch, partial(_expect_sdpa_gradients, strict=True),
          passed="A small masked batch against F.scaled_dot_product_attention (output and weights, an empty row "
                 "zeroed); gradients reach queries, keys and values, finite and as autograd gives them.")


# ---------------------------------------------------------------- ScaledSelfAttention: oracle and typical mistakes

_scaled_projections = partial(projections, owner=MODULE_NAME, gains=GAINS, bias_mistake=PROJECTION_BIAS)
_SHOWN = {False: WITHOUT_A_MASK, True: OUTPUT_MISTAKES}  # the function's mistakes that show without a mask, with one
#: the module's own mistakes, then the reference module calling each of the function's that shows
_MODULE_MISTAKES = {masked: [*simulators(WRITTEN, MODULE_NAME), *calling(WRITTEN, MODULE_NAME, names)]
                    for masked, names in _SHOWN.items()}


def _module_calling(name: str, called: Iterable[str]) -> list[tuple[Mistake, Simulator]]:
    """The module's variant `name` calling each variant of the function in called: named as the module's."""
    (module,) = (written for written in WRITTEN.written if written.name == name)
    return [(module.mistake, partial(module_output, module.code, MODULE_NAME, WRITTEN.reference, ((f.code, SDPA),)))
            for f in WRITTEN.of(SDPA) if f.name in called]


#: the values not projected together with a mistake of the function: real computations no check names (no mistake:
#: an output they give keeps a property's credit, kinds.anchor_forward)
_RAW_VALUES_AND = {m: [(None, run) for _, run in _module_calling("scaling-module-values-not-projected", shown)]
                   for m, shown in _SHOWN.items()}
#: the mask dropped together with a mistake of the scale: it leaks as the mask dropped does
_MASK_DROPPED_AND = _module_calling("scaling-module-mask-dropped", SCALES)


def _refused_keyword(ev: Evidence, key: str, inputs: kinds.Tensors) -> None:
    """The module's forward raised a TypeError naming one of its keyword inputs (mask): it takes no such argument."""
    __tracebackhide__ = True
    first, *keywords = inputs
    fact = ev.facts.get(key)
    if isinstance(fact, dict) and fact.get("kind") == "raised" and fact.get("type") == "TypeError":
        message = str(fact.get("message"))
        for name in keywords:
            if name in message:
                fail(f"{MODULE_NAME}.forward({first}, {name}=...) raised TypeError: {message[:200]}. "
                     f"{NO_MASK_ARGUMENT.explanation[0].upper()}{NO_MASK_ARGUMENT.explanation[1:]}",
                     mistake=NO_MASK_ARGUMENT)


MODULE = ForwardOracle(
    MODULE_NAME, "scaled self-attention with the projections to_queries, to_keys and to_values", _scaled_projections,
    lambda w, k, x, mask=None: oracles.course_module_attention(w, x, mask=mask), "nn.MultiheadAttention",
    simulators=lambda *_, mask=None, **__: _MODULE_MISTAKES[mask is not None] + _RAW_VALUES_AND[mask is not None],
    advice=kinds.Advice(
        otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _MODULE_FORWARD_HINT,
        hint=lambda x, mask=None: _MODULE_FORWARD_HINT + ("" if mask is None else " " + NO_MASK_ARGUMENT.explanation),
        refused=_refused_keyword))

against_forward(probes.scaled_self_attention_vs_pytorch, MODULE, gradients=kinds.expect_forward_gradients,
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
    leaks = [(m, simulate(w, *args, **inputs[0])) for m, simulate in [*_MODULE_MISTAKES[True], *_MASK_DROPPED_AND]]
    expect_causal(ev, y, y_changed, CHANGED, f"{MODULE_NAME}.forward with a causal mask", leaks,
                  "Later positions leak through the mask. Is the mask passed on to scaled_dot_product_attention, and "
                  "is True 'allowed'?", CAUSAL_LEAK)
    if matches_any(y_free_changed[:, :CHANGED], [y_free[:, :CHANGED]], ev.device):
        fail(f"Without a mask, {MODULE_NAME} should let every position see every other one, but changing input 4 "
             "changed no earlier output. Does forward use a mask when none is given?",
             mistake=MASKS_WITHOUT_A_MASK)
    for value, case, given in zip((y, y_changed, y_free, y_free_changed), run.cases, inputs, strict=True):
        anchor_forward(ev, value, MODULE, w, args, given, f"{MODULE_NAME} respects the causal mask", case.label)
