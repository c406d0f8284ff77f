"""Judges for assignment 03 (probes in course/checks/scaling.py): F.scaled_dot_product_attention for the function
(its weights are its output when the values are the identity), nn.MultiheadAttention with one head for the module,
and the typical mistakes they can name."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules
from course.checks.compare import (
    Mistake,
    expect_close,
    fail,
    matches_any,
    output,
    raised,
    requires_grad,
    tensor,
    value_kind,
)
from course.checks.evidence import Evidence
from course.checks.scaling import (
    CAUSAL_K,
    GAINS,
    GRAD_CASE,
    HAND_MASK,
    MODULE_SPECS,
    ORACLE_SPECS,
    ROLES,
    STRUCTURE_K,
    by_hand_case,
    causal_inputs,
    described,
    empty_row_case,
    module_case,
    oracle_case,
    secret_case,
    secret_empty_row_case,
    secret_inputs,
    secret_masks,
    small_case,
    small_module_case,
    structure_x,
    upstream,
)
from course.checks.seeds import grading
from course.judges import judge, oracles

SDPA_NAME = "scaled_dot_product_attention"
MODULE_NAME = "ScaledSelfAttention"
PROJECTION = "nn.Linear(k, k, bias=False)"
_INF = float("-inf")

# ---------------------------------------------------------------- mistakes

UNSCALED = Mistake("unscaled", "the scores are not scaled. Divide queries·keysᵀ by √d, d the size of a query "
                   "(queries.shape[-1]).")
DIVIDED_BY_D = Mistake("divided-by-d", "the scores are divided by d; divide by √d (math.sqrt(d)), the standard "
                       "deviation of q·k. (Did the queries get scaled before calling a function that scales "
                       "again?)")
SCALED_BY_VALUE_SIZE = Mistake("scaled-by-value-size", "the scores are divided by the square root of the value "
                               "size; the scale is √d with d the size of a query and a key (queries.shape[-1]), not "
                               "of a value.")
SOFTMAX_OVER_QUERIES = Mistake("softmax-over-queries", "the softmax runs over the queries (dim=-2). Each query's "
                               "weights over the keys must sum to 1: use dim=-1.")
LARGE_NEGATIVE_FILL = Mistake("large-negative-fill", "a query that may attend to nothing gets equal weights on "
                              "every key. That happens when masked scores are filled with a large negative number "
                              "instead of −∞ and such rows are not zeroed; the convention is all-zero weights and a "
                              "zero output for them.")
MASK_INVERTED = Mistake("mask-inverted", "the mask is inverted. True means attention is ALLOWED (PyTorch's "
                        "convention): fill the scores where the mask is False (~mask) with −∞.")
MASK_WITH_ZERO = Mistake("mask-filled-with-zero", "masked scores are set to 0 instead of −∞. A score of 0 is an "
                         "ordinary score (e⁰ = 1), so masked keys still get weight: use float('-inf').")
MASK_AFTER_SOFTMAX = Mistake("mask-after-softmax", "the mask is applied after the softmax without renormalising, "
                             "so the weights of a row no longer sum to 1. Mask the scores with −∞ before the "
                             "softmax.")
MASK_IGNORED = Mistake("mask-ignored", "the mask is ignored: masked keys still get weight. Is the mask passed on, "
                       "and are the scores where it is False filled with −∞ before the softmax?")
WEIGHTS_ARE_SCORES = Mistake("weights-are-scores", "the weights returned are the scores (before the softmax): "
                             "return the softmax of the scaled, masked scores.")
VALUES_NOT_PROJECTED = Mistake("values-not-projected", "the values are the raw inputs x; they should go through "
                               "to_values first.")

# structure and property failures, whose messages say them in their own words (the shared ones are in
# course/checks/modules.py)
NOT_A_PAIR = Mistake("not-a-pair", "scaled_dot_product_attention should return a pair (output, weights).")
NAN_IN_EMPTY_ROWS = Mistake("nan-in-empty-rows", "a query that may attend to nothing gets NaN weights and output "
                            "instead of zeros.")
NAN_GRADIENTS = Mistake("nan-gradients", "NaN gradients flow back from a query that may attend to nothing.")
PROJECTION_BIAS = Mistake("projection-bias", "the projections have a bias: use nn.Linear(k, k, bias=False).")
NO_MASK_ARGUMENT = Mistake("no-mask-argument", "forward takes no mask argument: def forward(self, x, mask=None).")
CAUSAL_LEAK = Mistake("causal-leak", "with a causal mask, a later position still changes an earlier output.")
MASK_WITHOUT_MASK = Mistake("masks-without-a-mask", "without a mask, forward still masks: every position should see "
                            "every other one.")

_SDPA_HINT = ("The inputs may have any number of leading dimensions (..., tq, d): use keys.transpose(-2, -1) "
              "(or keys.mT) rather than transpose(1, 2), and a mask that broadcasts to (..., tq, tk).")
_SDPA_RECIPE = ("scores = queries·keysᵀ / √d (d the query/key size), masked positions set to −∞ before a softmax "
                "over the keys (last dimension), output = weights·values.")
_FORWARD_HINT = ("forward should return the output of scaled_dot_product_attention(to_queries(x), to_keys(x), "
                 "to_values(x), mask).")
_MASK_ARGUMENT_HINT = "forward takes the mask as a keyword argument: def forward(self, x, mask=None)."
_SHARED = ("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: create three "
           "separate nn.Linear modules.")
_BROADCAST_HINT = ("The mask only has to be broadcastable to (..., tq, tk): use it as it is in masked_fill or "
                   "torch.where, without indexing or reshaping it.")
_EMPTY_ROW_WEIGHTS_HINT = "A row where nothing is allowed gets all-zero weights; the other rows are the usual softmax."
_EMPTY_ROW_OUTPUT_HINT = "A query that may attend to nothing gets a zero output."


# ---------------------------------------------------------------- oracle and typical mistakes

def _no_row_allowed(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else ~mask.any(dim=-1, keepdim=True)


def _zero_empty_rows(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The course's convention for a query that may attend to nothing: all-zero weights, zero output."""
    empty = _no_row_allowed(mask)
    return t if empty is None else torch.where(empty, torch.zeros_like(t), t)


def _oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's fused attention: the output, and the weights (the output when the values are the identity)."""
    tk = k.shape[-2]
    eye = torch.eye(tk).expand(*k.shape[:-2], tk, tk)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    w = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    return _zero_empty_rows(out, mask), _zero_empty_rows(w, mask)


def _attend(scores: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax with the course's masking convention, then the weighted values."""
    if mask is not None:
        scores = scores.masked_fill(~mask, _INF)
    w = _zero_empty_rows(F.softmax(scores, dim=-1), mask)
    return w @ v, w


def _variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None) -> list[tuple[Mistake, tuple[torch.Tensor, torch.Tensor]]]:
    """(mistake, (output, weights)) that a typical wrong implementation returns; differentiable in q, k, v."""
    d, dv = q.shape[-1], v.shape[-1]
    raw = q @ k.transpose(-2, -1)  # (..., tq, tk)
    scaled = raw / math.sqrt(d)
    over_queries = F.softmax(scaled, dim=-2)
    found = [
        (UNSCALED, _attend(raw, v, mask)),
        (DIVIDED_BY_D, _attend(raw / d, v, mask)),
        (SCALED_BY_VALUE_SIZE, _attend(raw / math.sqrt(dv), v, mask)),
        (SOFTMAX_OVER_QUERIES, (over_queries @ v, over_queries)),
    ]
    if mask is not None:
        zero = F.softmax(scaled.masked_fill(~mask, 0.0), dim=-1)
        after = F.softmax(scaled, dim=-1) * mask
        plain = F.softmax(scaled, dim=-1)
        large = F.softmax(scaled.masked_fill(~mask, -1e9), dim=-1)
        found += [
            (LARGE_NEGATIVE_FILL, (large @ v, large)),
            (MASK_INVERTED, _attend(scaled, v, ~mask)),
            (MASK_WITH_ZERO, (zero @ v, zero)),
            (MASK_AFTER_SOFTMAX, (after @ v, after)),
            (MASK_IGNORED, (plain @ v, plain)),
        ]
        zero, plain = _zero_empty_rows(zero, mask), _zero_empty_rows(plain, mask)  # empty rows zeroed, as asked
        found += [(MASK_WITH_ZERO, (zero @ v, zero)), (MASK_IGNORED, (plain @ v, plain))]
    return found


def _weight_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None) -> list[tuple[Mistake, torch.Tensor]]:
    found = [(m, w.detach()) for m, (_, w) in _variants(q, k, v, mask)]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    masked = scores if mask is None else scores.masked_fill(~mask, _INF)
    return [*found, (WEIGHTS_ARE_SCORES, masked.detach()), (WEIGHTS_ARE_SCORES, scores.detach())]


def _output_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None) -> list[tuple[Mistake, torch.Tensor]]:
    return [(m, out.detach()) for m, (out, _) in _variants(q, k, v, mask)]


# ---------------------------------------------------------------- scaled_dot_product_attention

def _result(ev: Evidence, key: str, q: torch.Tensor, k: torch.Tensor,
            v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (output, weights) pair the student's function returned, after checking types and shapes."""
    __tracebackhide__ = True
    raised(ev, key, SDPA_NAME, _SDPA_HINT)
    kind = value_kind(ev, key)
    if kind == "missing":
        fail(f"The test recorded nothing for {SDPA_NAME}: the check did not run to the end.")
    fact = ev.facts[key]
    if kind != "tuple" or fact.get("length") != 2:
        shown = f"a tuple of length {fact.get('length')}" if kind == "tuple" else (
            "None" if kind == "none" else f"a {str(fact.get('type'))[:60]}")
        fail(f"{SDPA_NAME} should return a pair (output, weights), but returned {shown}. "
             "End with `return weights @ values, weights`.", mistake=NOT_A_PAIR)
    lead, tq, tk, d, dv = tuple(q.shape[:-2]), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    out = output(ev, f"{key}.0", what=f"the output of {SDPA_NAME}", shape=(*lead, tq, dv), shape_hints={
        (*lead, tq, tk): "That is the shape of the weights: is the pair returned as (weights, output)?",
        (*lead, tq, d): "The output has the size of a key, not of a value: are the keys used as values?"})
    w = output(ev, f"{key}.1", what=f"the weights of {SDPA_NAME}", shape=(*lead, tq, tk), shape_hints={
        (*lead, tq, dv): "That is the shape of the output: is the pair returned as (weights, output)?"})
    return out, w


def _judge_case(ev: Evidence, key: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None, case: str, weights_hint: str = _SDPA_RECIPE,
                output_hint: str = "The weights are right, so look at the last step: output = weights·values.") -> None:
    __tracebackhide__ = True
    out, w = _result(ev, key, q, k, v)
    expected_out, expected_w = _oracle(q, k, v, mask)
    if not bool(torch.isfinite(w).all()):  # name a mistake whose weights hold −∞ before saying "NaN or infinite"
        for m, candidate in _weight_mistakes(q, k, v, mask):
            if not bool(torch.isfinite(candidate).all()) and matches_any(w, [candidate], ev.device):
                fail(f"The weights of {SDPA_NAME} are not what was asked: {m.explanation}", expected_w, w, case=case,
                     mistake=m)
    empty = _no_row_allowed(mask)
    if empty is not None and bool(empty.any()) and not (bool(torch.isfinite(w).all())
                                                        and bool(torch.isfinite(out).all())):
        fail(f"{SDPA_NAME} returns NaN for a query that may attend to nothing. The softmax of a row of −∞ is 0/0. "
             "The convention (PyTorch's too) is all-zero weights and a zero output for such a row: after the "
             "softmax, zero the rows where mask.any(dim=-1, keepdim=True) is False.", expected_w, w, case=case,
             mistake=NAN_IN_EMPTY_ROWS)
    expect_close(w, expected_w, what=f"the weights of {SDPA_NAME}", device=ev.device,
                 mistakes=_weight_mistakes(q, k, v, mask), otherwise=weights_hint, case=case)
    expect_close(out, expected_out, what=f"the output of {SDPA_NAME}", device=ev.device,
                 mistakes=_output_mistakes(q, k, v, mask), otherwise=output_hint, case=case)


@judge("sdpa_by_hand")
def _judge_by_hand(ev: Evidence) -> None:
    """d = 4: raw scores 4 and 0 become 2 and 0, weights e²/(e²+1) ≈ 0.881 and 1/(e²+1) ≈ 0.119."""
    _judge_case(ev, "r", *by_hand_case(), None, "q = [1,1,1,1], keys [1,1,1,1] and 0, values [10,0] and [20,1]")
    if grading():
        _judge_case(ev, "r_secret", *secret_case())


@judge("sdpa_masks_by_hand")
def _judge_masks_by_hand(ev: Evidence) -> None:
    """Masking key 0 leaves all the weight on key 1: weights [0, 1], output = value 1; a mask (tk,) broadcasts."""
    q, k, v = by_hand_case()
    _judge_case(ev, "r", q, k, v, torch.tensor(HAND_MASK), "the same case, mask [[False, True]] (True = allowed)")
    _judge_case(ev, "r_keys", q, k, v, torch.tensor(HAND_MASK[0]), "mask [False, True]", _BROADCAST_HINT,
                _BROADCAST_HINT)
    if grading():
        q, k, v = secret_inputs()
        mask, keys = secret_masks()
        _judge_case(ev, "r_secret", q, k, v, mask, described(q, k, v, mask))
        _judge_case(ev, "r_keys_secret", q, k, v, keys, described(q, k, v, keys),
                    _BROADCAST_HINT, _BROADCAST_HINT)


@judge("sdpa_fully_masked_row")
def _judge_empty_row(ev: Evidence) -> None:
    """A query that may attend to nothing gets all-zero weights and a zero output — no NaN; other rows are
    unchanged."""
    _judge_case(ev, "r", *empty_row_case(), "query 2 may attend to nothing", _EMPTY_ROW_WEIGHTS_HINT,
                _EMPTY_ROW_OUTPUT_HINT)
    if grading():
        _judge_case(ev, "r_secret", *secret_empty_row_case(), _EMPTY_ROW_WEIGHTS_HINT, _EMPTY_ROW_OUTPUT_HINT)


@judge("sdpa_oracle")
def _judge_oracle(ev: Evidence) -> None:
    """Random shapes (0-2 leading dimensions, tq != tk, dv != d) and masks against F.scaled_dot_product_attention;
    every row of weights with something allowed sums to 1 and is 0 where the mask is False."""
    for i in range(len(ORACLE_SPECS)):
        q, k, v, mask, case = oracle_case(i)
        _judge_case(ev, f"r{i}", q, k, v, mask, case)
    q, k, v, mask, case = oracle_case(1)
    _, w = _result(ev, "r1", q, k, v)
    sums = w.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        fail(f"The rows of the weights of {SDPA_NAME} do not sum to 1. Softmax over the keys (dim=-1), after "
             "masking the scores with −∞.", torch.ones_like(sums), sums, case=case)
    leaked = w.masked_select(~mask.expand_as(w)).abs().max()
    if float(leaked) > 1e-6:
        fail(f"{SDPA_NAME} gives weight up to {float(leaked):.3g} to keys the mask forbids (mask False). "
             "True means allowed: fill the scores where the mask is False with −∞ before the softmax.")


def _gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, compute: Callable,
               with_weights: bool) -> dict[str, torch.Tensor | None]:
    """Autograd of the probe's loss through compute(q, k, v, mask) -> (output, weights)."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, w = compute(q, k, v, mask)
    loss = (out * upstream(tuple(out.shape), 390)).sum()
    if with_weights:
        loss = loss + (w * upstream(tuple(w.shape), 391)).sum()
    loss.backward()
    return {"queries": q.grad, "keys": k.grad, "values": v.grad}


def _judge_gradients_of(ev: Evidence, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                        case: str) -> None:
    """Gradients reach queries, keys and values, stay finite even with a query that may attend to nothing, and
    are autograd's through PyTorch's fused attention (or through the typical mistake the output is)."""
    __tracebackhide__ = True
    out, w = _result(ev, "r", q, k, v)
    if not requires_grad(ev, "r.0"):
        fail(f"The output of {SDPA_NAME} is cut off from autograd: avoid .detach(), .data or torch.no_grad() in it.",
             mistake=modules.DETACHED)
    with_weights = requires_grad(ev, "r.1")
    expected_out, expected_w = _oracle(q, k, v, mask)
    if matches_any(out, [expected_out], ev.device) and matches_any(w, [expected_w], ev.device):
        compute = _oracle
    else:  # the computation is a known mistake (judged by the other checks), or not attention at all
        found = [i for i, (_, (o, ww)) in enumerate(_variants(q, k, v, mask))
                 if matches_any(out, [o.detach()], ev.device) and matches_any(w, [ww.detach()], ev.device)]
        if not found:
            _judge_case(ev, "r", q, k, v, mask, case)  # names the mistake, or says it is not attention
            fail(f"The result of {SDPA_NAME} is not attention.", case=case)
        index = found[0]

        def compute(*inputs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
            return _variants(*inputs)[index][1]
    grads = _gradients(q, k, v, mask, compute, with_weights)
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        got = tensor(ev, f"grad.{name}", shape=tuple(t.shape))
        if got is None or float(got.abs().sum()) == 0.0:
            fail(f"The {name} receive no gradient through {SDPA_NAME}. Are they used, and is nothing detached?",
                 mistake=modules.NO_GRADIENT)
        if not bool(torch.isfinite(got).all()):
            fail(f"NaN gradients reach the {name} from a query that may attend to nothing. The forward pass can "
                 "hide a NaN that the backward pass still sees: adding −∞ to the scores (scores + where(mask, 0, "
                 "−inf)) and repairing the NaN weights afterwards sends NaN back through the addition. Use "
                 "scores.masked_fill(~mask, float('-inf')), whose gradient is zero at masked positions.",
                 mistake=NAN_GRADIENTS)
        expect_close(got, grads[name], what=f"The gradient of a loss on {SDPA_NAME} with respect to the {name}",
                     device=ev.device, case=case,
                     otherwise="Compare with autograd through F.scaled_dot_product_attention: build the result only "
                               "from differentiable torch operations.")


@judge("sdpa_gradients")
def _judge_gradients(ev: Evidence) -> None:
    """Gradients on random shapes with queries that may attend to nothing: finite, and autograd's."""
    _judge_gradients_of(ev, *oracle_case(GRAD_CASE))


@judge("sdpa_vs_pytorch")
def _judge_vs_pytorch(ev: Evidence) -> None:
    """A small masked batch against F.scaled_dot_product_attention (output and weights, an empty row zeroed);
    gradients reach queries, keys and values, finite and as autograd gives them."""
    _judge_case(ev, "r", *small_case())
    _judge_gradients_of(ev, *small_case())


# ---------------------------------------------------------------- ScaledSelfAttention: oracle and typical mistakes

def _weights(ev: Evidence, key: str, k: int, seed: int) -> dict[str, torch.Tensor]:
    """Three separate bias-free k×k nn.Linear projections, and the values the probe loaded into their weights."""
    __tracebackhide__ = True
    what = f"{MODULE_NAME}({k})"
    modules.expect_layers(ev, key, what, MODULE_NAME, dict.fromkeys(ROLES, (k, k, False, PROJECTION)), _SHARED,
                          dict.fromkeys(ROLES, PROJECTION_BIAS))
    return modules.expect_parameters(ev, key, what, {f"{role}.weight": (k, k) for role in ROLES}, seed, GAINS)


def _mha(w: dict[str, torch.Tensor]) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with one head carrying these projections and an identity output: it scales by √k."""
    return oracles.multihead_attention(*(w[f"{role}.weight"] for role in ROLES))


def _module_oracle(w: dict[str, torch.Tensor], x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    with torch.no_grad():
        return oracles.attend(_mha(w), x, mask=mask)


def _module_mistakes(w: dict[str, torch.Tensor], x: torch.Tensor,
                     mask: torch.Tensor | None) -> list[tuple[Mistake, torch.Tensor]]:
    """The mistakes of scaled_dot_product_attention (which the module calls), and the module's own."""
    with torch.no_grad():
        q, k, v = (F.linear(x, w[f"{role}.weight"]) for role in ROLES)
        found = _output_mistakes(q, k, v, mask)
        found.append((VALUES_NOT_PROJECTED, _attend(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), x, mask)[0]))
        if mask is not None:  # the mask dropped in forward: attention without a mask
            found.append((MASK_IGNORED, _oracle(q, k, v, None)[0]))
    return found


def _anchors(w: dict[str, torch.Tensor], x: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
    """Every output a real computation of the exercise gives: the oracle, each mistake, and a mistake of the
    function together with the values not projected."""
    with torch.no_grad():
        q, k, _ = (F.linear(x, w[f"{role}.weight"]) for role in ROLES)
        both = [out for _, out in _output_mistakes(q, k, x, mask)]
    return [_module_oracle(w, x, mask), *(m for _, m in _module_mistakes(w, x, mask)), *both]


def _module_output(ev: Evidence, key: str, x: torch.Tensor, with_mask: bool) -> torch.Tensor:
    __tracebackhide__ = True
    fact = ev.facts.get(key)
    if (with_mask and isinstance(fact, dict) and fact.get("kind") == "raised" and fact.get("type") == "TypeError"
            and "mask" in str(fact.get("message"))):
        fail(f"{MODULE_NAME}.forward(x, mask=...) raised TypeError: {str(fact.get('message'))[:200]}. "
             + _MASK_ARGUMENT_HINT, mistake=NO_MASK_ARGUMENT)
    what = f"{MODULE_NAME}.forward(x{', mask' if with_mask else ''})"
    return output(ev, key, what=what, shape=tuple(x.shape),
                  hint=_FORWARD_HINT + (" " + _MASK_ARGUMENT_HINT if with_mask else ""))


def _anchor(ev: Evidence, y: torch.Tensor, w: dict[str, torch.Tensor], x: torch.Tensor, mask: torch.Tensor | None,
            claim: str, case: str) -> None:
    """Fail unless y is what the module (or one of its typical mistakes) computes with the check's weights."""
    __tracebackhide__ = True
    if not matches_any(y, _anchors(w, x, mask), ev.device):
        fail(f"{claim}, but it is not scaled self-attention with the projections to_queries, to_keys and to_values: "
             f"its output matches neither the reference nor a known mistake. {_FORWARD_HINT}",
             _module_oracle(w, x, mask), y, case=case)


# ---------------------------------------------------------------- ScaledSelfAttention

@judge("scaled_self_attention_structure")
def _judge_structure(ev: Evidence) -> None:
    """Three separate bias-free k×k projections, registered as parameters: 3k² in all."""
    k = STRUCTURE_K
    w = _weights(ev, "module", k, 400)
    modules.expect_parameter_count(ev, "module", f"{MODULE_NAME}({k})", 3 * k * k, "three k×k matrices make 3k²",
                                   "Are extra layers or biases registered, or some projection kept outside the module?")
    x = structure_x()
    y = _module_output(ev, "y", x, False)
    _anchor(ev, y, w, x, None, f"{MODULE_NAME} has the right layers", f"x of shape {tuple(x.shape)}, no mask")


@judge("scaled_self_attention_vs_pytorch")
def _judge_module_vs_pytorch(ev: Evidence) -> None:
    """A small masked batch against nn.MultiheadAttention (one head, which scales by √k) with the check's weights
    loaded into your module; the gradients reach the input and the three projections."""
    w = _weights(ev, "module", 4, 495)
    x, mask, grad = small_module_case()
    case = "x of shape (2, 5, 4), padding mask of shape (2, 1, 5)"
    y = _module_output(ev, "y", x, True)
    expect_close(y, _module_oracle(w, x, mask), what=f"{MODULE_NAME}.forward", device=ev.device,
                 mistakes=_module_mistakes(w, x, mask), case=case,
                 otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT)
    modules.expect_attached(ev, "y", f"{MODULE_NAME}.forward(x, mask)")
    modules.expect_gradients(ev, oracles.as_course(oracles.gradients(_mha(w), x, grad, mask=mask)),
                             owner=f"{MODULE_NAME}.forward", case=case, oracle="nn.MultiheadAttention")


@judge("scaled_self_attention_causal")
def _judge_causal(ev: Evidence) -> None:
    """With a lower-triangular mask, changing a later input changes no earlier output; without a mask it does."""
    w = _weights(ev, "module", CAUSAL_K, 480)
    x, x_changed, causal = causal_inputs()
    y = _module_output(ev, "y", x, True)
    y_changed = _module_output(ev, "y_changed", x_changed, True)
    y_free = _module_output(ev, "y_free", x, False)
    y_free_changed = _module_output(ev, "y_free_changed", x_changed, False)
    case = "position 4 of the input changed"
    if not matches_any(y_changed[:, :4], [y[:, :4]], ev.device):
        with torch.no_grad():  # the mask dropped, perhaps together with a mistake of the function
            q, k, v = (F.linear(x, w[f"{role}.weight"]) for role in ROLES)
            unmasked = [(MASK_IGNORED, y_mistake) for _, y_mistake in _output_mistakes(q, k, v, None)]
        named = next((m for m, y_mistake in [*_module_mistakes(w, x, causal), *unmasked]
                      if matches_any(y, [y_mistake], ev.device)), None)
        fail(f"{MODULE_NAME}.forward with a causal mask: changing input 4 changed an earlier output (0-3), so later "
             "positions leak through the mask. Is the mask passed on to scaled_dot_product_attention, and is True "
             "'allowed'?" + (f" The output is not what was asked: {named.explanation}" if named else ""),
             y[:, :4], y_changed[:, :4], case=case, mistake=named or CAUSAL_LEAK)
    if matches_any(y_free_changed[:, :4], [y_free[:, :4]], ev.device):
        fail(f"Without a mask, {MODULE_NAME} should let every position see every other one, but changing input 4 "
             "changed no earlier output. Does forward use a mask when none is given?", mistake=MASK_WITHOUT_MASK)
    for value, inputs, mask in ((y, x, causal), (y_changed, x_changed, causal), (y_free, x, None),
                                (y_free_changed, x_changed, None)):
        _anchor(ev, value, w, inputs, mask, f"{MODULE_NAME} respects the causal mask",
                f"x of shape {tuple(inputs.shape)}, " + ("causal mask" if mask is not None else "no mask"))


@judge("scaled_self_attention_oracle")
def _judge_module_oracle(ev: Evidence) -> None:
    """Random weights, inputs and masks against nn.MultiheadAttention (one head) with the check's weights."""
    for i, (_, _, k, _) in enumerate(MODULE_SPECS):
        w = _weights(ev, f"module{i}", k, 440 + 10 * i)
        x, mask, case = module_case(i)
        y = _module_output(ev, f"y{i}", x, mask is not None)
        expect_close(y, _module_oracle(w, x, mask), what=f"{MODULE_NAME}.forward", device=ev.device,
                     mistakes=_module_mistakes(w, x, mask), case=case, otherwise=_FORWARD_HINT)
