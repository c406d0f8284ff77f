"""Judges for assignment 02 (probes in course/checks/qkv.py): F.scaled_dot_product_attention with scale 1 for
attention, nn.MultiheadAttention with one head for the module (its query weights multiplied by √k to undo its
scaling), and the typical mistakes they can name."""

import math
from itertools import product

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules
from course.checks import qkv as probes
from course.checks.compare import Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.qkv import (
    ATTENTION_SHAPES,
    PERMUTATION,
    ROLES,
    STRUCTURE_K,
    average_inputs,
    equivariance_x,
    lookup_inputs,
    oracle_inputs,
    structure_x,
)
from course.judges import judge, oracles
from course.judges.kinds import ModuleOracle, Oracle, against, against_module

ATTENTION_NAME = "attention(queries, keys, values)"
MODULE_NAME = "SelfAttentionQKV"
PROJECTION = "nn.Linear(k, k, bias=False)"

# ---------------------------------------------------------------- mistakes

SOFTMAX_OVER_QUERIES = Mistake(
    "softmax-over-queries",
    "the softmax runs over the queries (dim=1). Each query's weights over the keys must sum to 1: use dim=-1.")
NO_SOFTMAX = Mistake("no-softmax", "the raw scores queries·keysᵀ are used as weights: the softmax is missing.")
SCALED = Mistake("scaled", "the scores are divided by √k; this assignment is unscaled (scaling is assignment 03).")
WEIGHTS_TRANSPOSED = Mistake(
    "weights-transposed",
    "the weights are transposed: row i of the weights belongs to query i, so the output is weights·values, "
    "without a transpose.")
KEYS_AS_VALUES = Mistake("keys-as-values", "the keys are used as values: the weights should multiply the values "
                         "(to_values(x) in the module).")
VALUES_NOT_PROJECTED = Mistake("values-not-projected",
                               "the values are the raw inputs x; they should go through to_values first.")
QUERIES_AS_VALUES = Mistake("queries-as-values",
                            "the queries are used as values: the weights should multiply to_values(x).")
QUERIES_FOR_EVERY_ROLE = Mistake("queries-for-every-role", "to_queries is used for every role: keys and values "
                                 "need their own projections.")
KEYS_FROM_QUERIES = Mistake("keys-from-queries", "queries and keys both come from to_queries: the keys need to_keys.")
QUERIES_KEYS_SWAPPED = Mistake("queries-keys-swapped", "queries and keys are swapped (to_keys(x) is used as the "
                               "queries and to_queries(x) as the keys), so the weights are transposed.")

# a structure failure, whose message says it in its own words (the shared ones are in course/checks/modules.py)
PROJECTION_BIAS = Mistake("projection-bias", "the projections have a bias: use nn.Linear(k, k, bias=False).")
#: a mistake in attention together with one in the module; each message names the two parts
SEVERAL = Mistake("several-mistakes", "two things at once: a mistake in attention and one in the module.")

_SHAPES_HINT = ("Write down the shape of every step: scores (b, tq, tk), weights (b, tq, tk), output (b, tq, v). "
                "The number of queries and of keys differ here, so transposed weights do not fit the values.")
_ATTENTION_HINT = "weights = softmax(queries·keysᵀ) over the keys (last dimension), output = weights·values."
_FORWARD_HINT = "forward should compute attention(to_queries(x), to_keys(x), to_values(x))."
_SHARED = ("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: create three "
           "separate nn.Linear modules.")


# ---------------------------------------------------------------- attention written out, with its mistakes

def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, how: Mistake | None = None) -> torch.Tensor:
    """Unscaled attention with plain torch ops, or one typical mistake in it. (b, tq, k), (b, tk, k), (b, tk, v)."""
    raw = q @ k.transpose(-2, -1)  # (b, tq, tk)
    if how is SOFTMAX_OVER_QUERIES:
        w = F.softmax(raw, dim=-2)
    elif how is NO_SOFTMAX:
        w = raw
    elif how is SCALED:
        w = F.softmax(raw / math.sqrt(q.shape[-1]), dim=-1)
    else:
        w = F.softmax(raw, dim=-1)
    if how is WEIGHTS_TRANSPOSED:
        w = w.transpose(-2, -1)  # only fits the values when tq == tk
    return w @ v


def _attention_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    found = [(m, _attend(q, k, v, m)) for m in (SOFTMAX_OVER_QUERIES, NO_SOFTMAX, SCALED)]
    if q.shape[-2] == k.shape[-2]:
        found.append((WEIGHTS_TRANSPOSED, _attend(q, k, v, WEIGHTS_TRANSPOSED)))
    if k.shape[-1] == v.shape[-1]:
        found.append((KEYS_AS_VALUES, _attend(q, k, k)))
    return found


def _attention_oracle(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(queries, keys, values, scale=1.0)


def _shape_hints(b: int, tq: int, tk: int, k: int, v: int) -> dict[tuple[int, ...], str]:
    hints: dict[tuple[int, ...], str] = {}
    for shape, hint in (
            ((b, tq, k), "The last dimension is the key size, not the value size: are the keys used as values?"),
            ((b, tk, v), ("There is one output per key instead of one per query: are the weights transposed, or "
                         "queries and keys swapped?")),
            ((b, tq, tk), "That is the shape of the weights: multiply them by the values.")):
        hints[shape] = f"{hints[shape]} Or: {hint[0].lower()}{hint[1:]}" if shape in hints else hint
    return hints


def _attention_output(ev: Evidence, key: str, b: int, tq: int, tk: int, k: int, v: int) -> torch.Tensor:
    __tracebackhide__ = True
    return output(ev, key, what=ATTENTION_NAME, shape=(b, tq, v), shape_hints=_shape_hints(b, tq, tk, k, v),
                  hint=_SHAPES_HINT)


def _anchor_attention(ev: Evidence, y: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      claim: str, case: str) -> None:
    """Fail unless y is what attention (or one of its typical mistakes) computes on these inputs."""
    __tracebackhide__ = True
    expected = _attention_oracle(q, k, v)
    if not matches_any(y, [expected, *(m for _, m in _attention_mistakes(q, k, v))], ev.device):
        fail(f"{claim}, but it is not attention over these inputs: {_ATTENTION_HINT}", expected, y, case=case)


# ---------------------------------------------------------------- attention

def _hand_answer() -> torch.Tensor:
    """One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1)."""
    e = math.e
    return torch.tensor([[[10.0 * e / (e + 1) + 20.0 / (e + 1)]]])


ATTENTION = Oracle(
    ATTENTION_NAME, _attention_oracle, "F.scaled_dot_product_attention",
    shape=lambda queries, keys, values: (queries.shape[0], queries.shape[1], values.shape[-1]),
    mistakes=lambda queries, keys, values: _attention_mistakes(queries, keys, values), otherwise=_ATTENTION_HINT,
    hint=_SHAPES_HINT,
    shape_hints=lambda queries, keys, values: _shape_hints(queries.shape[0], queries.shape[1], keys.shape[1],
                                                            keys.shape[-1], values.shape[-1]))

against(probes.attention_by_hand, ATTENTION, answers={"y": _hand_answer},
        passed="One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1).")
against(probes.attention_vs_pytorch, ATTENTION,
        passed="A batch of two (tq != tk, v != k) against PyTorch's fused attention, unscaled; the gradients reach "
               "the queries, keys and values as autograd through it gives them.")


@judge("attention_weighted_average")
def _judge_average(ev: Evidence) -> None:
    """If every value is the same vector, every output is that vector: the weights sum to 1 over the keys."""
    queries, keys, same, different = average_inputs()
    y = _attention_output(ev, "y", 2, 3, 6, 4, 5)
    expect_close(y, same[:, :3], what=f"{ATTENTION_NAME} with identical values", device=ev.device,
                 mistakes=_attention_mistakes(queries, keys, same), case="all values equal",
                 otherwise="Each output must be a weighted average of the values, with weights that sum to 1 over "
                           "the keys (softmax over the last dimension).")
    y = _attention_output(ev, "y_anchor", 2, 3, 6, 4, 5)
    _anchor_attention(ev, y, queries, keys, different, f"{ATTENTION_NAME} averages identical values correctly",
                      "queries (2, 3, 4), keys (2, 6, 4), values (2, 6, 5)")


@judge("attention_oracle")
def _judge_attention_oracle(ev: Evidence) -> None:
    """Random queries, keys and values of several shapes against PyTorch's fused attention, unscaled; and a query
    that is a long copy of one key retrieves (almost exactly) that key's value."""
    for i, (b, tq, tk, k, v) in enumerate(ATTENTION_SHAPES):
        queries, keys, values = oracle_inputs(i, b, tq, tk, k, v)
        y = _attention_output(ev, f"y{i}", b, tq, tk, k, v)
        expect_close(y, _attention_oracle(queries, keys, values), what=ATTENTION_NAME, device=ev.device,
                     mistakes=_attention_mistakes(queries, keys, values), otherwise=_ATTENTION_HINT,
                     case=f"b={b}, tq={tq}, tk={tk}, k={k}, v={v}")
    queries, keys, values = lookup_inputs()
    y = _attention_output(ev, "lookup", 1, 2, 4, 4, 3)
    if not torch.allclose(y, values[:, [2, 0]], atol=1e-4):
        fail(f"{ATTENTION_NAME} does not act as a lookup: a query equal to 30 × key j should return value j. "
             "Check that the weights come from queries·keysᵀ and multiply the values.", values[:, [2, 0]], y,
             case="queries = 30·key 2, 30·key 0")
    _anchor_attention(ev, y, queries, keys, values, f"{ATTENTION_NAME} acts as a lookup",
                      "queries = 30·key 2, 30·key 0")


# ---------------------------------------------------------------- the module: oracle and typical mistakes

def _linear(x: torch.Tensor, w: dict[str, torch.Tensor], role: str) -> torch.Tensor:
    return F.linear(x, w[f"{role}.weight"], w.get(f"{role}.bias"))


#: the module's typical mistakes: which of x, to_queries(x), to_keys(x), to_values(x) plays queries, keys, values
_ROLE_MISTAKES = ((VALUES_NOT_PROJECTED, ("q", "k", "x")), (KEYS_AS_VALUES, ("q", "k", "k")),
                  (QUERIES_AS_VALUES, ("q", "k", "q")), (QUERIES_FOR_EVERY_ROLE, ("q", "q", "q")),
                  (KEYS_FROM_QUERIES, ("q", "q", "v")), (QUERIES_KEYS_SWAPPED, ("k", "q", "v")))
#: mistakes of the attention cell, which the module calls (tq == tk here, so transposed weights fit)
_ATTENTION_MISTAKES = (SOFTMAX_OVER_QUERIES, NO_SOFTMAX, SCALED, WEIGHTS_TRANSPOSED)


def _module_mistakes(w: dict[str, torch.Tensor], x: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    """Each typical mistake alone, then a mistake of the attention cell together with one of the module's."""
    projected = {"x": x, "q": _linear(x, w, "to_queries"), "k": _linear(x, w, "to_keys"),
                 "v": _linear(x, w, "to_values")}
    single, several = [], []
    for (m_roles, roles), how in product(((None, ("q", "k", "v")), *_ROLE_MISTAKES), (None, *_ATTENTION_MISTAKES)):
        parts = [m for m in (how, m_roles) if m is not None]
        y = _attend(*(projected[r] for r in roles), how)
        if len(parts) == 1:
            single.append((parts[0], y))
        elif parts:
            several.append((Mistake(SEVERAL.id, "two things at once. " + " ".join(
                f"({i}) {m.explanation[0].upper()}{m.explanation[1:]}" for i, m in enumerate(parts, 1))), y))
    return single + several


def _mha(w: dict[str, torch.Tensor], k: int) -> nn.MultiheadAttention:
    """nn.MultiheadAttention with one head carrying these projections, an identity output projection, and its
    division of the scores by √k undone."""
    return oracles.multihead_attention(
        w["to_queries.weight"], w["to_keys.weight"], w["to_values.weight"], bq=w.get("to_queries.bias"),
        bk=w.get("to_keys.bias"), bv=w.get("to_values.bias"), query_scale=oracles.unscaled(k))


def _module_oracle(w: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return oracles.attend(_mha(w, x.shape[-1]), x)


def _weights(ev: Evidence, key: str, k: int, seed: int) -> dict[str, torch.Tensor]:
    """Three separate bias-free k×k nn.Linear projections, and the values the probe loaded into their weights."""
    __tracebackhide__ = True
    what = f"{MODULE_NAME}({k})"
    modules.expect_layers(ev, key, what, MODULE_NAME, dict.fromkeys(ROLES, (k, k, False, PROJECTION)), _SHARED,
                          dict.fromkeys(ROLES, PROJECTION_BIAS))
    return modules.expect_parameters(ev, key, what, {f"{role}.weight": (k, k) for role in ROLES}, seed)


def _any_weights(ev: Evidence, key: str, k: int, seed: int) -> dict[str, torch.Tensor] | None:
    """The projections the probe loaded, whatever the structure: shared layers and biases allowed (a property
    check keeps its credit for them); None when some role has no k×k weight."""
    loaded = modules.loaded(ev, key, seed)
    shared = ev.facts.get(f"{key}.shared")
    same_as = {e[0]: e[1] for e in shared if isinstance(e, list) and len(e) == 2} if isinstance(shared, list) else {}
    found = {}
    for role in ROLES:
        source = same_as.get(role, role)
        weight, bias = loaded.get(f"{source}.weight"), loaded.get(f"{source}.bias")
        if source not in ROLES or weight is None or tuple(weight.shape) != (k, k):
            return None
        found[f"{role}.weight"] = weight
        if bias is not None and tuple(bias.shape) == (k,):
            found[f"{role}.bias"] = bias
    return found


def _module_output(ev: Evidence, key: str, shape: tuple[int, int, int]) -> torch.Tensor:
    __tracebackhide__ = True
    return output(ev, key, what=f"{MODULE_NAME}.forward(x)", shape=shape, hint=_FORWARD_HINT)


def _anchor_module(ev: Evidence, y: torch.Tensor, w: dict[str, torch.Tensor] | None, x: torch.Tensor,
                   claim: str) -> None:
    """Fail unless y is what the module (or one of its typical mistakes) computes with the check's weights."""
    __tracebackhide__ = True
    expected = _module_oracle(w, x) if w is not None else None
    if w is None or not matches_any(y, [expected, *(m for _, m in _module_mistakes(w, x))], ev.device):
        fail(f"{claim}, but it is not self-attention with the projections to_queries, to_keys and to_values: its "
             f"output matches neither the reference nor a known mistake. {_FORWARD_HINT}", expected, y,
             case=f"x of shape {tuple(x.shape)}")


# ---------------------------------------------------------------- the module

@judge("self_attention_qkv_structure")
def _judge_structure(ev: Evidence) -> None:
    """Three separate bias-free k×k projections, registered as parameters: 3k² in all."""
    k = STRUCTURE_K
    w = _weights(ev, "module", k, 200)
    modules.expect_parameter_count(ev, "module", f"{MODULE_NAME}({k})", 3 * k * k, "three k×k matrices make 3k²",
                                   "Are extra layers or biases registered, or some projection kept outside the module?")
    x = structure_x()
    y = _module_output(ev, "y", tuple(x.shape))
    _anchor_module(ev, y, w, x, f"{MODULE_NAME} has the right layers")


def _oracle_gradients(w: dict[str, torch.Tensor], x: torch.Tensor,
                      upstream: torch.Tensor) -> dict[str, torch.Tensor]:
    """Autograd through nn.MultiheadAttention with these weights: gradients of x and of the three weights."""
    k = x.shape[-1]
    # MultiheadAttention's query weight is √k times the module's, so the module's gradient is √k times its
    return oracles.as_course(oracles.gradients(_mha(w, k), x, upstream, query_scale=oracles.unscaled(k)))


MODULE = ModuleOracle(
    f"{MODULE_NAME}.forward(x)", lambda ev, built: _weights(ev, built.key, *built.args, built.seed),
    compute=_module_oracle, gradients=lambda w, upstream, x: _oracle_gradients(w, x, upstream),
    name="nn.MultiheadAttention", mistakes=_module_mistakes, hint=_FORWARD_HINT,
    otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT)

against_module(probes.self_attention_qkv_vs_pytorch, MODULE,
               passed="A batch of two against PyTorch's own multi-head attention (one head) with the check's "
                      "weights loaded into your module; the gradients reach the input and the three projections.")
against_module(probes.self_attention_qkv_oracle, MODULE,
               passed="Random weights and inputs against PyTorch's own multi-head attention (one head) with the "
                      "same weights; and the gradients of a loss on the output, with respect to the input and the "
                      "three weights, against autograd through it.")


@judge("self_attention_qkv_equivariance")
def _judge_equivariance(ev: Evidence) -> None:
    """Like basic self-attention, the projected version ignores where a vector sits."""
    modules.built(ev, "module", f"{MODULE_NAME}(4)")
    y = _module_output(ev, "y", (2, 6, 4))
    y_perm = _module_output(ev, "y_perm", (2, 6, 4))
    expect_close(y_perm, y[:, list(PERMUTATION)], what=f"{MODULE_NAME}.forward on permuted positions",
                 device=ev.device, case="permutation [5, 2, 0, 4, 1, 3]",
                 otherwise="Permuting the input positions should permute the outputs the same way and change "
                           "nothing else.")
    _anchor_module(ev, y, _any_weights(ev, "module", 4, 800), equivariance_x(),
                   f"{MODULE_NAME} is permutation equivariant")
