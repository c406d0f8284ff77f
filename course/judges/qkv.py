"""Judges for assignment 02 (probes in course/checks/qkv.py): F.scaled_dot_product_attention with scale 1, and
nn.MultiheadAttention with one head (its 1/√k undone), and the typical mistakes; only the properties are written out."""

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks import qkv as probes
from course.checks.compare import Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence, fact_key
from course.checks.kinds import Built
from course.checks.qkv import PERMUTATION, ROLES
from course.judges import judge, kinds, mistakes, oracles
from course.judges.attention_modules import (
    anchored,
    expect_structure,
    mistake_combinations,
    projection_count,
    projections,
)
from course.judges.kinds import ForwardOracle, Oracle, against, against_forward, declared

ATTENTION_NAME = "attention(queries, keys, values)"
MODULE_NAME = "SelfAttentionQKV"

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/qkv.txt

_FORWARD_HINT = "forward should compute attention(to_queries(x), to_keys(x), to_values(x))."


# ---------------------------------------------------------------- attention written out, with its mistakes

def _unscaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        how: Mistake | None = None) -> torch.Tensor:
    """Unscaled attention with plain torch ops, or one typical mistake in it. (b, tq, k), (b, tk, k), (b, tk, v)."""
    raw = q @ k.transpose(-2, -1)  # (b, tq, tk)
    scores = raw / math.sqrt(q.shape[-1]) if how is M["scaled"] else raw
    w = raw if how is M["no-softmax"] else F.softmax(scores, dim=-2 if how is M["softmax-over-queries"] else -1)
    if how is M["weights-transposed"]:
        w = w.transpose(-2, -1)  # only fits the values when tq == tk
    return w @ (k if how is M["keys-as-values"] else v)


def _attention_mistakes(queries: torch.Tensor, keys: torch.Tensor,
                        values: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    fits = {M["weights-transposed"]: queries.shape[-2] == keys.shape[-2],
            M["keys-as-values"]: keys.shape[-1] == values.shape[-1]}
    return [(m, _unscaled_attention(queries, keys, values, m)) for m in (
        M["softmax-over-queries"], M["no-softmax"], M["scaled"], M["weights-transposed"], M["keys-as-values"])
        if fits.get(m, True)]


def _shape_hints(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> dict[tuple[int, ...], str]:
    (b, tq, k), tk, v = queries.shape, keys.shape[1], values.shape[-1]
    return {(b, tq, tk): "That is the shape of the weights: multiply them by the values.",
            (b, tk, v): "There is one output per key, not per query: are the weights transposed?",
            (b, tq, k): "The last dimension is the key size, not the value size: are the keys used as values?"}


ATTENTION = Oracle(
    ATTENTION_NAME, lambda queries, keys, values: F.scaled_dot_product_attention(queries, keys, values, scale=1.0),
    "F.scaled_dot_product_attention", shape=lambda queries, keys, values: (*queries.shape[:2], values.shape[-1]),
    mistakes=_attention_mistakes, shape_hints=_shape_hints,
    otherwise="weights = softmax(queries·keysᵀ) over the keys (last dimension), output = weights·values.",
    hint="Write down the shape of every step: scores (b, tq, tk), weights (b, tq, tk), output (b, tq, v). The "
         "numbers of queries and keys differ here, so transposed weights do not fit the values.")

# ---------------------------------------------------------------- attention

against(probes.attention_by_hand, ATTENTION,
        answers={"y": lambda: torch.tensor([[[10.0 * math.e / (math.e + 1) + 20.0 / (math.e + 1)]]])},  # (1, 1, 1)
        passed="One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1).")
against(probes.attention_vs_pytorch, ATTENTION,
        passed="A batch of two (tq != tk, v != k) and its gradients against PyTorch's fused attention, unscaled.")
# the values of keys 2 and 0, which queries that are long copies of those keys retrieve (almost exactly)
against(probes.attention_oracle, ATTENTION, answers={"lookup": lambda: probes.lookup_inputs()["values"][:, [2, 0]]},
        passed="Several shapes against PyTorch's fused attention, unscaled; a long copy of a key retrieves its value.")


@judge("attention_weighted_average")
def _judge_average(ev: Evidence) -> None:
    """If every value is the same vector, every output is that vector: the weights sum to 1 over the keys."""
    __tracebackhide__ = True
    same, different = probes.attention_weighted_average.cases
    kinds.expect_case(ev, same, ATTENTION)
    inputs = dict(different.inputs())
    y = output(ev, different.key, what=ATTENTION_NAME, shape=ATTENTION.shape(**inputs),
               shape_hints=_shape_hints(**inputs), hint=ATTENTION.hint)
    expected = ATTENTION.compute(**inputs)
    if not matches_any(y, [expected, *(m for _, m in _attention_mistakes(**inputs))], ev.device):
        fail(f"{ATTENTION_NAME} averages identical values, but it is not attention: {ATTENTION.otherwise}",
             expected, y, case=different.label)


# ---------------------------------------------------------------- the module: oracle and typical mistakes

#: the module's typical mistakes: which of x, to_queries(x), to_keys(x), to_values(x) plays queries, keys, values
_ROLE_MISTAKES = ((M["values-not-projected"], ("q", "k", "x")), (M["keys-as-values"], ("q", "k", "k")),
                  (M["queries-as-values"], ("q", "k", "q")), (M["queries-for-every-role"], ("q", "q", "q")),
                  (M["keys-from-queries"], ("q", "q", "v")), (M["queries-keys-swapped"], ("k", "q", "v")))
#: mistakes of the attention cell, which the module calls (tq == tk here, so transposed weights fit)
_ATTENTION_MISTAKES = (M["softmax-over-queries"], M["no-softmax"], M["scaled"], M["weights-transposed"])


def _projected(w: dict[str, torch.Tensor], k: int, x: torch.Tensor, *, roles: tuple[str, str, str] = ("q", "k", "v"),
               how: Mistake | None = None) -> torch.Tensor:
    """Unscaled attention (mistake how) of x's projections (or x) that roles name as q, k, v. (b, t, k)"""
    projected = {"x": x, **{r: F.linear(x, w[f"{role}.weight"], w.get(f"{role}.bias"))
                            for r, role in zip("qkv", ROLES, strict=True)}}
    return _unscaled_attention(*(projected[r] for r in roles), how)


def _qkv_simulators(k: int, x: torch.Tensor) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    """Each typical mistake alone, then one of the module's together with a mistake of the attention cell."""
    return mistake_combinations(((((), {}), *(((m,), {"roles": roles}) for m, roles in _ROLE_MISTAKES)),
                                 (((), {}), *(((m,), {"how": m}) for m in _ATTENTION_MISTAKES))), _projected,
                                M["several-mistakes"])


def _qkv_oracle(w: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """nn.MultiheadAttention with one head, the projections w and its 1/√k undone. (b, t, k) -> (b, t, k)"""
    return oracles.course_module_attention(w, x, query_scale=oracles.unscaled(x.shape[-1]))


def _any_projections(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The loaded projections, shared layers and biases allowed (a property keeps its credit for them)."""
    (k,) = built.args
    loaded = modules.loaded(ev, built.key, built.seed)
    shared = ev.facts.get(fact_key(built.key, "shared"))
    same_as = {e[0]: e[1] for e in shared if isinstance(e, list) and len(e) == 2} if isinstance(shared, list) else {}
    found = {}
    for role in ROLES:
        source = same_as.get(role, role)
        weight, bias = loaded.get(f"{source}.weight"), loaded.get(f"{source}.bias")
        if source not in ROLES or weight is None or tuple(weight.shape) != (k, k):
            fail(f"{MODULE_NAME} runs, but it is not {MODULE.kind}: it has no k×k nn.Linear {role}.")
        found[f"{role}.weight"] = weight
        if bias is not None and tuple(bias.shape) == (k,):
            found[f"{role}.bias"] = bias
    return found


MODULE = ForwardOracle(
    MODULE_NAME, "self-attention with the projections to_queries, to_keys and to_values",
    partial(projections, owner=MODULE_NAME, bias_mistake=M["projection-bias"]),
    lambda w, k, x: _qkv_oracle(w, x), "nn.MultiheadAttention", simulators=_qkv_simulators,
    hint=lambda **_: _FORWARD_HINT,
    otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT)


# ---------------------------------------------------------------- the module

against_forward(probes.self_attention_qkv_vs_pytorch, MODULE,
                passed="A batch of two and its gradients against nn.MultiheadAttention (one head) with your weights.")
against_forward(probes.self_attention_qkv_oracle, MODULE,
                passed="Random weights, inputs and gradients against nn.MultiheadAttention (one head), same weights.")
declared(probes.self_attention_qkv_structure,
         partial(expect_structure, check=probes.self_attention_qkv_structure, oracle=MODULE,
                 claim=f"{MODULE_NAME} has the right layers", count=projection_count(probes.STRUCTURE_K)),
         "Three separate bias-free k×k projections, registered as parameters: 3k² in all.")


@judge("self_attention_qkv_equivariance")
def _judge_qkv_equivariance(ev: Evidence) -> None:
    """Like basic self-attention, the projected version ignores where a vector sits."""
    (run,) = probes.self_attention_qkv_equivariance.runs
    modules.built(ev, run.module.key, f"{MODULE_NAME}(4)")
    for case in run.cases:  # a wrong shape is named before the weights
        kinds.forward_output(ev, case.key, MODULE, case.inputs())
    y = anchored(ev, run, MODULE, f"{MODULE_NAME} runs", _any_projections(ev, run.module))
    expect_close(y["y_perm"], y["y"][:, list(PERMUTATION)], what=f"{MODULE_NAME}.forward on permuted positions",
                 device=ev.device, case=run.cases[1].label,
                 otherwise="Permuting the input positions should permute the outputs the same way, nothing else.")
