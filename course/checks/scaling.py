"""Checks for assignment 03: scaled_dot_product_attention(q, k, v, mask=None) and ScaledSelfAttention.

Each check is a probe (runs the student's code on inputs and weights chosen here) and a judge (decides from what
the probe recorded). Oracles: F.scaled_dot_product_attention for the function (its weights are its output when
the values are the identity), nn.MultiheadAttention with one head for the module. See course/checks/check.py.
"""

import math
from collections.abc import Callable
from types import MappingProxyType

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
    raised,
    randn,
    requires_grad,
    tensor,
    value_kind,
)
from course.checks.evidence import Evidence, Recorder

SDPA_NAME = "scaled_dot_product_attention"
MODULE_NAME = "ScaledSelfAttention"
ROLES = ("to_queries", "to_keys", "to_values")
PROJECTION = "nn.Linear(k, k, bias=False)"
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})
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

# ids of structure and property failures (fail(..., mistake=...)); the shared ones are in course/checks/modules.py
NOT_A_PAIR = "not-a-pair"
NAN_IN_EMPTY_ROWS = "nan-in-empty-rows"
NAN_GRADIENTS = "nan-gradients"
PROJECTION_BIAS = "projection-bias"
NO_MASK_ARGUMENT = "no-mask-argument"
CAUSAL_LEAK = "causal-leak"
MASK_WITHOUT_MASK = "masks-without-a-mask"

_SDPA_HINT = ("The inputs may have any number of leading dimensions (..., tq, d): use keys.transpose(-2, -1) "
              "(or keys.mT) rather than transpose(1, 2), and a mask that broadcasts to (..., tq, tk).")
_SDPA_RECIPE = ("scores = queries·keysᵀ / √d (d the query/key size), masked positions set to −∞ before a softmax "
                "over the keys (last dimension), output = weights·values.")
_FORWARD_HINT = ("forward should return the output of scaled_dot_product_attention(to_queries(x), to_keys(x), "
                 "to_values(x), mask).")
_MASK_ARGUMENT_HINT = "forward takes the mask as a keyword argument: def forward(self, x, mask=None)."
_SHARED = ("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: create three "
           "separate nn.Linear modules.")


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


# ---------------------------------------------------------------- scaled_dot_product_attention: probe and judge

def _call(rec: Recorder, key: str, fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          mask: torch.Tensor | None) -> object:
    """Record fn(q, k, v) or fn(q, k, v, mask=mask) on fresh copies of the check's inputs, moved to the device."""
    args = [t.to(rec.device) for t in (q, k, v)]
    if mask is None:
        return rec.call(key, fn, *args)
    return rec.call(key, fn, *args, mask=mask.to(rec.device))


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
                     mistake=m.id)
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


def _by_hand_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0]])  # (1, 4): one query, d = 4
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # (2, 4): scores 4 and 0, scaled 2 and 0
    v = torch.tensor([[10.0, 0.0], [20.0, 1.0]])  # (2, 2)
    return q, k, v


def _probe_by_hand(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *_by_hand_case(), None)


def _judge_by_hand(ev: Evidence) -> None:
    """d = 4: raw scores 4 and 0 become 2 and 0, weights e²/(e²+1) ≈ 0.881 and 1/(e²+1) ≈ 0.119."""
    _judge_case(ev, "r", *_by_hand_case(), None, "q = [1,1,1,1], keys [1,1,1,1] and 0, values [10,0] and [20,1]")


sdpa_by_hand = Check("sdpa_by_hand", _probe_by_hand, _judge_by_hand)

_HAND_MASK = ((False, True),)  # (tq, tk): the query may look at key 1 only


def _probe_masks_by_hand(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *_by_hand_case(), torch.tensor(_HAND_MASK))
    _call(rec, "r_keys", fn, *_by_hand_case(), torch.tensor(_HAND_MASK[0]))


def _judge_masks_by_hand(ev: Evidence) -> None:
    """Masking key 0 leaves all the weight on key 1: weights [0, 1], output = value 1; a mask (tk,) broadcasts."""
    q, k, v = _by_hand_case()
    _judge_case(ev, "r", q, k, v, torch.tensor(_HAND_MASK), "the same case, mask [[False, True]] (True = allowed)")
    hint = ("The mask only has to be broadcastable to (..., tq, tk): use it as it is in masked_fill or torch.where, "
            "without indexing or reshaping it.")
    _judge_case(ev, "r_keys", q, k, v, torch.tensor(_HAND_MASK[0]), "mask [False, True]", hint, hint)


sdpa_masks_by_hand = Check("sdpa_masks_by_hand", _probe_masks_by_hand, _judge_masks_by_hand)


def _empty_row_case() -> tuple[torch.Tensor, ...]:
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # (2, 4)
    _, k, v = _by_hand_case()
    mask = torch.tensor([[True, True], [False, False]])  # the second query may attend to nothing
    return q, k, v, mask


def _probe_empty_row(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *_empty_row_case())


def _judge_empty_row(ev: Evidence) -> None:
    """A query that may attend to nothing gets all-zero weights and a zero output — no NaN; other rows are
    unchanged."""
    q, k, v, mask = _empty_row_case()
    case = "query 2 may attend to nothing"
    _judge_case(ev, "r", q, k, v, mask, case,
                "A row where nothing is allowed gets all-zero weights; the other rows are the usual softmax.",
                "A query that may attend to nothing gets a zero output.")


sdpa_fully_masked_row = Check("sdpa_fully_masked_row", _probe_empty_row, _judge_empty_row)


def _random_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    mask = torch.rand(*shape, generator=generator(seed)) < 0.6
    tq, tk = shape[-2], shape[-1]
    mask[..., torch.arange(tq), torch.arange(tq) % tk] = True  # every query may attend to at least one key
    return mask


# (leading dimensions, tq, tk, d, dv, kind of mask): tq != tk, dv != d, 0-2 leading dimensions
ORACLE_SPECS = (((3,), 4, 6, 5, 2, None), ((2, 3), 5, 7, 8, 3, "random"), ((2,), 6, 6, 4, 6, "causal"),
                ((), 3, 5, 6, 4, "keys"), ((2, 3), 4, 5, 4, 3, "padding"), ((2,), 5, 4, 3, 2, "empty rows"))


def _oracle_case(i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, str]:
    """q, k, v, mask and a description of case i, on the CPU."""
    lead, tq, tk, d, dv, kind = ORACLE_SPECS[i]
    q = randn(*lead, tq, d, seed=300 + i) * 2.0  # spread scores so every mistake shows
    k = randn(*lead, tk, d, seed=310 + i)
    v = randn(*lead, tk, dv, seed=320 + i)
    if kind is None:
        mask = None
    elif kind == "random":
        mask = _random_mask((tq, tk), 330 + i)
    elif kind == "causal":
        mask = torch.ones(tq, tk, dtype=torch.bool).tril()
    elif kind == "keys":
        mask = torch.tensor([True, False, True, True, False])
    elif kind == "padding":
        lengths = torch.tensor([5, 3])  # the second sequence has two padding keys
        mask = (torch.arange(tk) < lengths[:, None])[:, None, None, :]  # (2, 1, 1, tk)
    else:
        mask = _random_mask((*lead, tq, tk), 330 + i)
        mask[0, 1] = False  # query 1 of the first batch element may attend to nothing
        mask[1, 3] = False
    what = "no mask" if mask is None else f"mask of shape {tuple(mask.shape)} ({kind})"
    case = (f"queries {'×'.join(map(str, q.shape))}, keys {'×'.join(map(str, k.shape))}, values "
            f"{'×'.join(map(str, v.shape))}, {what}")
    return q, k, v, mask, case


def _probe_oracle(fn: Callable, rec: Recorder) -> None:
    for i in range(len(ORACLE_SPECS)):
        q, k, v, mask, _ = _oracle_case(i)
        _call(rec, f"r{i}", fn, q, k, v, mask)


def _judge_oracle(ev: Evidence) -> None:
    """Random shapes (0-2 leading dimensions, tq != tk, dv != d) and masks against F.scaled_dot_product_attention;
    every row of weights with something allowed sums to 1 and is 0 where the mask is False."""
    for i in range(len(ORACLE_SPECS)):
        q, k, v, mask, case = _oracle_case(i)
        _judge_case(ev, f"r{i}", q, k, v, mask, case)
    q, k, v, mask, case = _oracle_case(1)
    _, w = _result(ev, "r1", q, k, v)
    sums = w.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        fail(f"The rows of the weights of {SDPA_NAME} do not sum to 1. Softmax over the keys (dim=-1), after "
             "masking the scores with −∞.", torch.ones_like(sums), sums, case=case)
    leaked = w.masked_select(~mask.expand_as(w)).abs().max()
    if float(leaked) > 1e-6:
        fail(f"{SDPA_NAME} gives weight up to {float(leaked):.3g} to keys the mask forbids (mask False). "
             "True means allowed: fill the scores where the mask is False with −∞ before the softmax.")


sdpa_oracle = Check("sdpa_oracle", _probe_oracle, _judge_oracle)


_GRAD_CASE = len(ORACLE_SPECS) - 1  # the case with queries that may attend to nothing


def _upstream(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed)


def _probe_gradients_of(fn: Callable, rec: Recorder, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor) -> None:
    """Record fn(q, k, v, mask=mask) and the gradients a loss on its output and weights leaves on q, k and v."""
    q, k, v = (t.to(rec.device).requires_grad_(True) for t in (q, k, v))
    result = rec.call("r", fn, q, k, v, mask=mask.to(rec.device))
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result)):
        return
    out, w = result
    if not out.requires_grad or out.shape != q.shape[:-1] + v.shape[-1:] or w.shape != q.shape[:-1] + k.shape[-2:-1]:
        return
    loss = (out * _upstream(tuple(out.shape), 390).to(rec.device)).sum()
    if w.requires_grad:
        loss = loss + (w * _upstream(tuple(w.shape), 391).to(rec.device)).sum()
    loss.backward()
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        rec.tensor(f"grad.{name}", t.grad)


def _probe_gradients(fn: Callable, rec: Recorder) -> None:
    _probe_gradients_of(fn, rec, *_oracle_case(_GRAD_CASE)[:4])


def _gradients(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, compute: Callable,
               with_weights: bool) -> dict[str, torch.Tensor | None]:
    """Autograd of the probe's loss through compute(q, k, v, mask) -> (output, weights)."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, w = compute(q, k, v, mask)
    loss = (out * _upstream(tuple(out.shape), 390)).sum()
    if with_weights:
        loss = loss + (w * _upstream(tuple(w.shape), 391)).sum()
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
             mistake="detached")
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


def _judge_gradients(ev: Evidence) -> None:
    """Gradients on random shapes with queries that may attend to nothing: finite, and autograd's."""
    _judge_gradients_of(ev, *_oracle_case(_GRAD_CASE))


sdpa_gradients = Check("sdpa_gradients", _probe_gradients, _judge_gradients)


def _small_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """A batch of two: tq=3 queries, tk=4 keys, d=4, dv=2, a mask (2, 3, 4) in which query 2 of the second
    element may attend to nothing."""
    mask = _random_mask((2, 3, 4), 363)
    mask[1, 2] = False
    q, k, v = randn(2, 3, 4, seed=360) * 2.0, randn(2, 4, 4, seed=361), randn(2, 4, 2, seed=362)
    return q, k, v, mask, "queries 2×3×4, keys 2×4×4, values 2×4×2, a mask (2, 3, 4) with an empty row"


def _probe_vs_pytorch(fn: Callable, rec: Recorder) -> None:
    _probe_gradients_of(fn, rec, *_small_case()[:4])


def _judge_vs_pytorch(ev: Evidence) -> None:
    """A small masked batch against F.scaled_dot_product_attention (output and weights, an empty row zeroed);
    gradients reach queries, keys and values, finite and as autograd gives them."""
    _judge_case(ev, "r", *_small_case())
    _judge_gradients_of(ev, *_small_case())


sdpa_vs_pytorch = Check("sdpa_vs_pytorch", _probe_vs_pytorch, _judge_vs_pytorch)


# ---------------------------------------------------------------- ScaledSelfAttention: the probe's side

def _make(cls: Callable, rec: Recorder, key: str, k: int, seed: int) -> nn.Module | None:
    """Build the student's module, record its structure, and load the check's weights (seed) into it."""
    return modules.build(rec, key, cls, k, seed=seed, gains=GAINS, layers=ROLES)


def _run(rec: Recorder, key: str, module: nn.Module, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Record module(x) or module(x, mask=mask) without gradients, on fresh copies of the check's inputs."""
    with torch.no_grad():
        if mask is None:
            rec.call(key, module, x.to(rec.device))
        else:
            rec.call(key, module, x.to(rec.device), mask=mask.to(rec.device))


# ---------------------------------------------------------------- ScaledSelfAttention: the judge's side

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


# ---------------------------------------------------------------- ScaledSelfAttention: structure

_STRUCTURE_K = 6


def _structure_x() -> torch.Tensor:
    return randn(2, 4, _STRUCTURE_K, seed=401)


def _probe_structure(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", _STRUCTURE_K, 400)
    if module is not None:
        _run(rec, "y", module, _structure_x())


def _judge_structure(ev: Evidence) -> None:
    """Three separate bias-free k×k projections, registered as parameters: 3k² in all."""
    k = _STRUCTURE_K
    w = _weights(ev, "module", k, 400)
    modules.expect_parameter_count(ev, "module", f"{MODULE_NAME}({k})", 3 * k * k, "three k×k matrices make 3k²",
                                   "Are extra layers or biases registered, or some projection kept outside the module?")
    x = _structure_x()
    y = _module_output(ev, "y", x, False)
    _anchor(ev, y, w, x, None, f"{MODULE_NAME} has the right layers", f"x of shape {tuple(x.shape)}, no mask")


scaled_self_attention_structure = Check("scaled_self_attention_structure", _probe_structure, _judge_structure)


# ---------------------------------------------------------------- ScaledSelfAttention: a small case against PyTorch

def _small_module_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (2, 5, 4), a padding mask (2, 1, 5) that hides the last two keys of the second sequence, and the upstream
    gradient of the output."""
    mask = (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, :]  # (b, 1, t)
    return randn(2, 5, 4, seed=490), mask, randn(2, 5, 4, seed=491)


def _probe_module_vs_pytorch(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 4, 495)
    if module is None:
        return
    x, mask, upstream = _small_module_case()
    x = x.to(rec.device).requires_grad_(True)
    modules.backward(rec, rec.call("y", module, x, mask=mask.to(rec.device)), upstream, {"x": x}, module)


def _judge_module_vs_pytorch(ev: Evidence) -> None:
    """A small masked batch against nn.MultiheadAttention (one head, which scales by √k) with the check's weights
    loaded into your module; the gradients reach the input and the three projections."""
    w = _weights(ev, "module", 4, 495)
    x, mask, upstream = _small_module_case()
    case = "x of shape (2, 5, 4), padding mask of shape (2, 1, 5)"
    y = _module_output(ev, "y", x, True)
    expect_close(y, _module_oracle(w, x, mask), what=f"{MODULE_NAME}.forward", device=ev.device,
                 mistakes=_module_mistakes(w, x, mask), case=case,
                 otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT)
    modules.expect_attached(ev, "y", f"{MODULE_NAME}.forward(x, mask)")
    modules.expect_gradients(ev, oracles.as_course(oracles.gradients(_mha(w), x, upstream, mask=mask)),
                             owner=f"{MODULE_NAME}.forward", case=case, oracle="nn.MultiheadAttention")


scaled_self_attention_vs_pytorch = Check("scaled_self_attention_vs_pytorch", _probe_module_vs_pytorch,
                                         _judge_module_vs_pytorch)


# ---------------------------------------------------------------- ScaledSelfAttention: a causal mask

_CAUSAL_T, _CAUSAL_K = 6, 4


def _causal_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = randn(2, _CAUSAL_T, _CAUSAL_K, seed=481)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0  # change position 4 only
    causal = torch.ones(_CAUSAL_T, _CAUSAL_T, dtype=torch.bool).tril()  # (t, t): query i sees keys 0..i
    return x, x_changed, causal


def _probe_causal(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", _CAUSAL_K, 480)
    if module is None:
        return
    x, x_changed, causal = _causal_inputs()
    _run(rec, "y", module, x, causal)
    _run(rec, "y_changed", module, x_changed, causal)
    _run(rec, "y_free", module, x)
    _run(rec, "y_free_changed", module, x_changed)


def _judge_causal(ev: Evidence) -> None:
    """With a lower-triangular mask, changing a later input changes no earlier output; without a mask it does."""
    w = _weights(ev, "module", _CAUSAL_K, 480)
    x, x_changed, causal = _causal_inputs()
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
             y[:, :4], y_changed[:, :4], case=case, mistake=named.id if named else CAUSAL_LEAK)
    if matches_any(y_free_changed[:, :4], [y_free[:, :4]], ev.device):
        fail(f"Without a mask, {MODULE_NAME} should let every position see every other one, but changing input 4 "
             "changed no earlier output. Does forward use a mask when none is given?", mistake=MASK_WITHOUT_MASK)
    for value, inputs, mask in ((y, x, causal), (y_changed, x_changed, causal), (y_free, x, None),
                                (y_free_changed, x_changed, None)):
        _anchor(ev, value, w, inputs, mask, f"{MODULE_NAME} respects the causal mask",
                f"x of shape {tuple(inputs.shape)}, " + ("causal mask" if mask is not None else "no mask"))


scaled_self_attention_causal = Check("scaled_self_attention_causal", _probe_causal, _judge_causal)


# ---------------------------------------------------------------- ScaledSelfAttention: against the oracle

MODULE_SPECS = ((3, 5, 4, None), (2, 7, 6, "causal"), (2, 6, 8, "padding"), (1, 1, 3, None))  # (b, t, k, mask)


def _module_case(i: int) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    b, t, k, kind = MODULE_SPECS[i]
    x = randn(b, t, k, seed=420 + i)
    if kind == "causal":
        mask = torch.ones(t, t, dtype=torch.bool).tril()  # (t, t)
    elif kind == "padding":
        mask = (torch.arange(t) < torch.tensor([6, 4])[:, None])[:, None, :]  # (b, 1, t)
    else:
        mask = None
    return x, mask, f"x of shape {(b, t, k)}, " + ("no mask" if mask is None else
                                                    f"{kind} mask of shape {tuple(mask.shape)}")


def _probe_module_oracle(cls: Callable, rec: Recorder) -> None:
    for i, (_, _, k, _) in enumerate(MODULE_SPECS):
        module = _make(cls, rec, f"module{i}", k, 440 + 10 * i)
        if module is None:
            return
        x, mask, _ = _module_case(i)
        _run(rec, f"y{i}", module, x, mask)


def _judge_module_oracle(ev: Evidence) -> None:
    """Random weights, inputs and masks against nn.MultiheadAttention (one head) with the check's weights."""
    for i, (_, _, k, _) in enumerate(MODULE_SPECS):
        w = _weights(ev, f"module{i}", k, 440 + 10 * i)
        x, mask, case = _module_case(i)
        y = _module_output(ev, f"y{i}", x, mask is not None)
        expect_close(y, _module_oracle(w, x, mask), what=f"{MODULE_NAME}.forward", device=ev.device,
                     mistakes=_module_mistakes(w, x, mask), case=case, otherwise=_FORWARD_HINT)


scaled_self_attention_oracle = Check("scaled_self_attention_oracle", _probe_module_oracle, _judge_module_oracle)
