"""Judges for assignment 02 (probes in course/checks/qkv.py): F.scaled_dot_product_attention with scale 1 for
attention, nn.MultiheadAttention with one head for the module (its query weights multiplied by √k to undo its
scaling), and the typical mistakes they can name; only the properties are written out."""

import math
from collections.abc import Callable, Mapping
from functools import partial
from itertools import product

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks import qkv as probes
from course.checks.compare import Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.kinds import Built, RunsCheck
from course.checks.qkv import PERMUTATION, ROLES
from course.judges import judge, mistakes, oracles
from course.judges.kinds import (
    ForwardOracle,
    Oracle,
    against,
    against_forward,
    anchor_forward,
    block_call,
    declared,
    expect_case,
    expect_linear_layers,
    forward_output,
)

ATTENTION_NAME = "attention(queries, keys, values)"
MODULE_NAME = "SelfAttentionQKV"
PROJECTION = "nn.Linear(k, k, bias=False)"

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/qkv.txt

_SHAPES_HINT = ("Write down the shape of every step: scores (b, tq, tk), weights (b, tq, tk), output (b, tq, v). "
                "The number of queries and of keys differ here, so transposed weights do not fit the values.")
_ATTENTION_HINT = "weights = softmax(queries·keysᵀ) over the keys (last dimension), output = weights·values."
_FORWARD_HINT = "forward should compute attention(to_queries(x), to_keys(x), to_values(x))."
_SHARED = ("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: create three "
           "separate nn.Linear modules.")


# ---------------------------------------------------------------- attention written out, with its mistakes

def _unscaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        how: Mistake | None = None) -> torch.Tensor:
    """Unscaled attention with plain torch ops, or one typical mistake in it. (b, tq, k), (b, tk, k), (b, tk, v)."""
    raw = q @ k.transpose(-2, -1)  # (b, tq, tk)
    if how is M["softmax-over-queries"]:
        w = F.softmax(raw, dim=-2)
    elif how is M["no-softmax"]:
        w = raw
    elif how is M["scaled"]:
        w = F.softmax(raw / math.sqrt(q.shape[-1]), dim=-1)
    else:
        w = F.softmax(raw, dim=-1)
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
    hints: dict[tuple[int, ...], str] = {}
    for shape, hint in (
            ((b, tq, k), "The last dimension is the key size, not the value size: are the keys used as values?"),
            ((b, tk, v), ("There is one output per key instead of one per query: are the weights transposed, or "
                         "queries and keys swapped?")),
            ((b, tq, tk), "That is the shape of the weights: multiply them by the values.")):
        hints[shape] = f"{hints[shape]} Or: {hint[0].lower()}{hint[1:]}" if shape in hints else hint
    return hints


ATTENTION = Oracle(
    ATTENTION_NAME, lambda queries, keys, values: F.scaled_dot_product_attention(queries, keys, values, scale=1.0),
    "F.scaled_dot_product_attention", shape=lambda queries, keys, values: (*queries.shape[:2], values.shape[-1]),
    mistakes=_attention_mistakes, shape_hints=_shape_hints, otherwise=_ATTENTION_HINT, hint=_SHAPES_HINT)

# ---------------------------------------------------------------- attention

against(probes.attention_by_hand, ATTENTION,
        answers={"y": lambda: torch.tensor([[[10.0 * math.e / (math.e + 1) + 20.0 / (math.e + 1)]]])},  # (1, 1, 1)
        passed="One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1).")
against(probes.attention_vs_pytorch, ATTENTION,
        passed="A batch of two (tq != tk, v != k) against PyTorch's fused attention, unscaled; the gradients reach "
               "the queries, keys and values as autograd through it gives them.")
# the values of keys 2 and 0, which queries that are long copies of those keys retrieve (almost exactly)
against(probes.attention_oracle, ATTENTION, answers={"lookup": lambda: probes.lookup_inputs()["values"][:, [2, 0]]},
        passed="Random queries, keys and values of several shapes against PyTorch's fused attention, unscaled; and "
               "a query that is a long copy of one key retrieves (almost exactly) that key's value.")


@judge("attention_weighted_average")
def _judge_average(ev: Evidence) -> None:
    """If every value is the same vector, every output is that vector: the weights sum to 1 over the keys."""
    __tracebackhide__ = True
    same, different = probes.attention_weighted_average.cases
    expect_case(ev, same, ATTENTION)
    inputs = dict(different.inputs())
    y = output(ev, different.key, what=ATTENTION_NAME, shape=ATTENTION.shape(**inputs),
               shape_hints=_shape_hints(**inputs), hint=_SHAPES_HINT)
    expected = ATTENTION.compute(**inputs)
    if not matches_any(y, [expected, *(m for _, m in _attention_mistakes(**inputs))], ev.device):
        fail(f"{ATTENTION_NAME} averages identical values correctly, but it is not attention over these inputs: "
             f"{_ATTENTION_HINT}", expected, y, case=different.label)


# ---------------------------------------------------------------- the module: oracle and typical mistakes

#: the module's typical mistakes: which of x, to_queries(x), to_keys(x), to_values(x) plays queries, keys, values
_ROLE_MISTAKES = ((M["values-not-projected"], ("q", "k", "x")), (M["keys-as-values"], ("q", "k", "k")),
                  (M["queries-as-values"], ("q", "k", "q")), (M["queries-for-every-role"], ("q", "q", "q")),
                  (M["keys-from-queries"], ("q", "q", "v")), (M["queries-keys-swapped"], ("k", "q", "v")))
#: mistakes of the attention cell, which the module calls (tq == tk here, so transposed weights fit)
_ATTENTION_MISTAKES = (M["softmax-over-queries"], M["no-softmax"], M["scaled"], M["weights-transposed"])


def _projected(roles: tuple[str, str, str], how: Mistake | None, w: dict[str, torch.Tensor], k: int,
               x: torch.Tensor) -> torch.Tensor:
    """Unscaled attention (with the mistake how) of the projections of x (b, t, k) that roles name as queries, keys
    and values ("x": x itself). (b, t, k)"""
    projected = {"x": x, **{r: F.linear(x, w[f"{role}.weight"], w.get(f"{role}.bias"))
                            for r, role in zip("qkv", ROLES, strict=True)}}
    return _unscaled_attention(*(projected[r] for r in roles), how)


def _qkv_simulators(k: int, x: torch.Tensor) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    """Each typical mistake alone, then a mistake of the attention cell together with one of the module's."""
    single, several = [], []
    for (m_roles, roles), how in product(((None, ("q", "k", "v")), *_ROLE_MISTAKES), (None, *_ATTENTION_MISTAKES)):
        parts = [m for m in (how, m_roles) if m is not None]
        simulate = partial(_projected, roles, how)
        if len(parts) == 1:
            single.append((parts[0], simulate))
        elif parts:
            several.append((Mistake(M["several-mistakes"].id, "two things at once. " + " ".join(
                f"({i}) {m.explanation[0].upper()}{m.explanation[1:]}" for i, m in enumerate(parts, 1))), simulate))
    return single + several


def _qkv_oracle(w: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """nn.MultiheadAttention with one head carrying the module's projections w, its division of the scores by √k
    undone, on x (b, t, k): (b, t, k). Autograd reaches w and x."""
    return oracles.course_module_attention(w, x, query_scale=oracles.unscaled(x.shape[-1]))


def projections(ev: Evidence, built: Built, owner: str = MODULE_NAME, gains: Mapping[str, float] | None = None,
                bias_mistake: Mistake = M["projection-bias"]) -> dict[str, torch.Tensor]:
    """The module built (owner: its class) has three separate bias-free k×k nn.Linear projections to_queries,
    to_keys and to_values (bias_mistake: what a bias is); the values the probe loaded into their weights (gains)."""
    __tracebackhide__ = True
    (k,) = built.args
    return expect_linear_layers(ev, built.key, f"{owner}({k})", owner, dict.fromkeys(ROLES, (k, k, False, PROJECTION)),
                                _SHARED, dict.fromkeys(ROLES, bias_mistake), built.seed, gains)


def _any_projections(ev: Evidence, built: Built) -> dict[str, torch.Tensor] | None:
    """The projections the probe loaded, whatever the structure: shared layers and biases allowed (a property
    check keeps its credit for them); None when some role has no k×k weight."""
    (k,) = built.args
    loaded = modules.loaded(ev, built.key, built.seed)
    shared = ev.facts.get(f"{built.key}.shared")
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


MODULE = ForwardOracle(
    MODULE_NAME, "self-attention with the projections to_queries, to_keys and to_values", projections,
    lambda w, k, x: _qkv_oracle(w, x), "nn.MultiheadAttention", simulators=_qkv_simulators,
    hint=lambda **_: _FORWARD_HINT,
    otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT)


def expect_structure(ev: Evidence, check: RunsCheck, oracle: ForwardOracle, claim: str,
                     count: tuple[int, str, str] | None = None) -> None:
    """The module of check (one run of one case) has the right layers (oracle.weights) and, with count (values,
    formula, hint), that many parameter values; its output is oracle's computation, or a typical mistake's, with
    the check's weights."""
    __tracebackhide__ = True
    (run,) = check.runs
    (case,) = run.cases
    w = oracle.weights(ev, run.module)
    if count is not None:
        modules.expect_parameter_count(ev, run.module.key, block_call(run.module, oracle.owner), *count)
    inputs = dict(case.inputs())
    anchor_forward(ev, forward_output(ev, case.key, oracle, inputs), oracle, w, run.module.args, inputs, claim,
                   case.label)


def projection_count(k: int) -> tuple[int, str, str]:
    """What expect_structure's count is for three bias-free k×k projections: 3k² values."""
    return 3 * k * k, "three k×k matrices make 3k²", ("Are extra layers or biases registered, or some projection "
                                                      "kept outside the module?")


# ---------------------------------------------------------------- the module

against_forward(probes.self_attention_qkv_vs_pytorch, MODULE,
                passed="A batch of two against PyTorch's own multi-head attention (one head) with the check's "
                       "weights loaded into your module; the gradients reach the input and the three projections.")
against_forward(probes.self_attention_qkv_oracle, MODULE,
                passed="Random weights and inputs against PyTorch's own multi-head attention (one head) with the "
                       "same weights; and the gradients of a loss on the output, with respect to the input and the "
                       "three weights, against autograd through it.")
declared(probes.self_attention_qkv_structure,
         partial(expect_structure, check=probes.self_attention_qkv_structure, oracle=MODULE,
                 claim=f"{MODULE_NAME} has the right layers", count=projection_count(probes.STRUCTURE_K)),
         "Three separate bias-free k×k projections, registered as parameters: 3k² in all.")


@judge("self_attention_qkv_equivariance")
def _judge_qkv_equivariance(ev: Evidence) -> None:
    """Like basic self-attention, the projected version ignores where a vector sits."""
    (run,) = probes.self_attention_qkv_equivariance.runs
    modules.built(ev, run.module.key, f"{MODULE_NAME}(4)")
    case, permuted = run.cases
    inputs = dict(case.inputs())
    y = forward_output(ev, case.key, MODULE, inputs)
    expect_close(forward_output(ev, permuted.key, MODULE, permuted.inputs()), y[:, list(PERMUTATION)],
                 what=f"{MODULE_NAME}.forward on permuted positions", device=ev.device, case=permuted.label,
                 otherwise="Permuting the input positions should permute the outputs the same way and change "
                           "nothing else.")
    w = _any_projections(ev, run.module)
    if w is None:
        fail(f"{MODULE_NAME} is permutation equivariant, but it is not {MODULE.kind}: not all three are k×k "
             "nn.Linear layers.", None, y, case=case.label)
    anchor_forward(ev, y, MODULE, w, run.module.args, inputs, f"{MODULE_NAME} is permutation equivariant", case.label)
