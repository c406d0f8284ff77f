"""Judges for assignment 02 (probes in course/checks/qkv.py): F.scaled_dot_product_attention with scale 1, and
nn.MultiheadAttention with one head (its 1/√k undone), and the typical mistakes; only the properties are written out."""

import math
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks import qkv as probes
from course.checks.compare import expect_close, fail, matches_any, output
from course.checks.evidence import Evidence, fact_key
from course.checks.kinds import Built
from course.checks.qkv import PERMUTATION, ROLES
from course.judges import judge, kinds, oracles
from course.judges.attention_modules import anchored, expect_structure, projection_count, projections
from course.judges.kinds import Advice, ForwardOracle, Oracle, against, against_forward, against_gradients, declared
from course.judges.variants import Variants, calling, simulators, together

ATTENTION_NAME = "attention(queries, keys, values)"
MODULE_NAME = "SelfAttentionQKV"
_FORWARD_HINT = "forward should compute attention(to_queries(x), to_keys(x), to_values(x))."

# ---------------------------------------------------------------- mistakes
# Edits change the reference answers of course/qkv.py:
#     attention:        weights = F.softmax(queries @ keys.transpose(-2, -1), dim=-1); return weights @ values
#     SelfAttentionQKV: return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))
# When an output matches two of them, the first declared is named. Mistakes every check names (a wrong shape, an
# error, a detached output, a missing or shared layer) are in catalogue/qkv.py.

WRITTEN = Variants(__name__, reference="course.qkv")
edit = WRITTEN.edit
SCORES = "queries @ keys.transpose(-2, -1)"

edit("attention-softmax-queries", "attention", ("dim=-1", "dim=1"), mistake="softmax-over-queries",
     says="the softmax runs over the queries (dim=1). Each query's weights over the keys must sum to 1: use dim=-1.")
edit("attention-no-softmax", "attention", (f"F.softmax({SCORES}, dim=-1)", SCORES), mistake="no-softmax",
     says="the raw scores queries·keysᵀ are used as weights: the softmax is missing.")
edit("attention-exp-overflows", "attention",
     (f"F.softmax({SCORES}, dim=-1)", f"torch.exp({SCORES}) / torch.exp({SCORES}).sum(-1, keepdim=True)"),
     mistake="softmax-overflow",
     says="exp of the raw scores overflows once they pass about 88 (float32), and the rows turn to NaN. Use "
          "torch.softmax, which subtracts each row's maximum before exponentiating.")
edit("attention-scaled", "attention", (SCORES, f"{SCORES} / math.sqrt(queries.shape[-1])"), mistake="scaled",
     says="the scores are divided by √k; this assignment is unscaled (scaling is assignment 03).")
# transposed weights only fit the values when tq == tk: elsewhere the variant raises, and matches nothing
edit("attention-transposed", "attention", ("weights @ values", "weights.transpose(-2, -1) @ values"),
     mistake="weights-transposed",
     says="the weights are transposed: row i of the weights belongs to query i, so the output is weights·values, "
          "without a transpose.")
edit("attention-keys-as-values", "attention", ("weights @ values", "weights @ keys"), mistake="keys-as-values",
     says="the keys are used as values: the weights should multiply the values (to_values(x) in the module).")

PROJECTED = "attention(self.to_queries(x), self.to_keys(x), self.to_values(x))"


def roles(name: str, queries: str, keys: str, values: str, mistake: str, says: str | None = None) -> None:
    """SelfAttentionQKV.forward giving attention the queries, keys and values written here."""
    edit(name, "SelfAttentionQKV", (PROJECTED, f"attention({queries}, {keys}, {values})"), mistake=mistake, says=says)


Q, K, V = "self.to_queries(x)", "self.to_keys(x)", "self.to_values(x)"
roles("module-values-not-projected", Q, K, "x", "values-not-projected",
      says="the values are the raw inputs x; they should go through to_values first.")
roles("module-keys-as-values", Q, K, K, "keys-as-values")
roles("module-queries-as-values", Q, K, Q, "queries-as-values",
      says="the queries are used as values: the weights should multiply to_values(x).")
roles("module-queries-for-all", Q, Q, Q, "queries-for-every-role",
      says="to_queries is used for every role: keys and values need their own projections.")
roles("module-keys-from-queries", Q, Q, V, "keys-from-queries",
      says="queries and keys both come from to_queries: the keys need to_keys.")
roles("module-queries-keys-swapped", K, Q, V, "queries-keys-swapped",
      says="queries and keys are swapped (to_keys(x) is used as the queries and to_queries(x) as the keys), so the "
           "weights are transposed.")

#: the module calls the notebook's attention: a mistake there, alone or with one of the module's above (several)
CALLED = ("attention-softmax-queries", "attention-no-softmax", "attention-scaled", "attention-transposed")
SEVERAL = WRITTEN.mistake("several-mistakes", "two things at once: a mistake in attention and one in the module.")
PROJECTION_BIAS = WRITTEN.mistake("projection-bias", "the projections have a bias: use nn.Linear(k, k, bias=False).")


def _shape_hints(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> dict[tuple[int, ...], str]:
    (b, tq, k), tk, v = queries.shape, keys.shape[1], values.shape[-1]
    return {(b, tq, tk): "That is the shape of the weights: multiply them by the values.",
            (b, tk, v): "There is one output per key, not per query: are the weights transposed?",
            (b, tq, k): "The last dimension is the key size, not the value size: are the keys used as values?"}


ATTENTION = Oracle(
    ATTENTION_NAME, lambda queries, keys, values: F.scaled_dot_product_attention(queries, keys, values, scale=1.0),
    "F.scaled_dot_product_attention", shape=lambda queries, keys, values: (*queries.shape[:2], values.shape[-1]),
    mistakes=lambda **inputs: WRITTEN.outputs("attention", **inputs), advice=Advice(
        otherwise="weights = softmax(queries·keysᵀ) over the keys (last dimension), output = weights·values.",
        hint="Write down the shape of every step: scores (b, tq, tk), weights (b, tq, tk), output (b, tq, v). The "
             "numbers of queries and keys differ here, so transposed weights do not fit the values.",
        shape_hints=_shape_hints))

# ---------------------------------------------------------------- attention

against(probes.attention_by_hand, ATTENTION,
        answers={"y": lambda: torch.tensor([[[10.0 * math.e / (math.e + 1) + 20.0 / (math.e + 1)]]])},  # (1, 1, 1)
        passed="One query, two keys: the output mixes the values 10 and 20 with weights e/(e+1) and 1/(e+1).")
against_gradients(probes.attention_vs_pytorch, ATTENTION,
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
               shape_hints=_shape_hints(**inputs), hint=ATTENTION.advice.hint_for(inputs))
    expected = ATTENTION.compute(**inputs)
    if not matches_any(y, [expected, *(m for _, m in WRITTEN.outputs("attention", **inputs))], ev.device):
        fail(f"{ATTENTION_NAME} averages identical values, but it is not attention: {ATTENTION.advice.otherwise}",
             expected, y, case=different.label)


# ---------------------------------------------------------------- the module: oracle and typical mistakes

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


MODULE_MISTAKES = [*simulators(WRITTEN, MODULE_NAME), *calling(WRITTEN, MODULE_NAME, CALLED),
                   *together(WRITTEN, MODULE_NAME, CALLED, SEVERAL)]
MODULE = ForwardOracle(
    MODULE_NAME, "self-attention with the projections to_queries, to_keys and to_values",
    partial(projections, owner=MODULE_NAME, bias_mistake=PROJECTION_BIAS),
    lambda w, k, x: _qkv_oracle(w, x), "nn.MultiheadAttention", simulators=lambda *_, **__: MODULE_MISTAKES,
    advice=Advice(otherwise="It differs from nn.MultiheadAttention (one head) with your weights. " + _FORWARD_HINT,
                  hint=_FORWARD_HINT))


# ---------------------------------------------------------------- the module

against_forward(probes.self_attention_qkv_vs_pytorch, MODULE, gradients=kinds.expect_forward_gradients,
                passed="A batch of two and its gradients against nn.MultiheadAttention (one head) with your weights.")
against_forward(probes.self_attention_qkv_oracle, MODULE, gradients=kinds.expect_forward_gradients,
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
