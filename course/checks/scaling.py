"""Probes for assignment 03: scaled_dot_product_attention(q, k, v, mask=None) and ScaledSelfAttention, judged in
course/judges/scaling.py (F.scaled_dot_product_attention, nn.MultiheadAttention with one head) from the cases
declared here. A mask is passed by name: fn(q, k, v, mask=m), forward(x, mask=m)."""

from collections.abc import Callable
from functools import partial
from types import MappingProxyType

import torch

from course.checks import kinds, modules
from course.checks.check import Check, when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder, gradient_key
from course.checks.kinds import Built, Case, Runs, builds_and_runs, calls, module_case, property_check, random_mask

ROLES = ("to_queries", "to_keys", "to_values")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})
Inputs = dict[str, torch.Tensor]


# ---------------------------------------------------------------- scaled_dot_product_attention: the inputs

def described(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None) -> str:
    """How a message names a case: the shapes of its inputs and of its mask."""
    shapes = ", ".join(f"{name} {'×'.join(map(str, t.shape))}" for name, t in
                       (("queries", queries), ("keys", keys), ("values", values), ("mask", mask)) if t is not None)
    return shapes if mask is not None else f"{shapes}, no mask"


def sdpa_case(key: str, inputs: Callable[[], Inputs], label: str = "", *, secret: bool = False) -> Case:
    """A call of scaled_dot_product_attention on inputs() (queries, keys, values and perhaps a mask), named label
    or else by its shapes (described)."""
    return Case(key, inputs, label or described(**inputs()), secret)


def _empty_rows(shape: tuple[int, int, int], seed: int) -> torch.Tensor:
    """A random mask (b, tq, tk) in which one query of each batch element, drawn from seed + 1, may attend to
    nothing."""
    rows = torch.randint(0, shape[1], (shape[0],), generator=generator(seed + 1))
    return random_mask(shape, seed, tuple((i, int(row)) for i, row in enumerate(rows)))


def _some_keys(tk: int, seed: int) -> torch.Tensor:
    """A mask (tk,) over the keys that allows a random number of them, at random, and forbids the others."""
    g = generator(seed)
    order = torch.randperm(tk, generator=g)
    mask = torch.zeros(tk, dtype=torch.bool)
    mask[order[: int(torch.randint(1, tk, (1,), generator=g))]] = True
    return mask


def _qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> Inputs:
    return {"queries": q, "keys": k, "values": v} | ({} if mask is None else {"mask": mask})


def _sdpa_inputs(lead: tuple[int, ...], tq: int, tk: int, d: int, dv: int, seeds: tuple[int, int, int],
            mask: Callable[[], torch.Tensor] | None = None) -> Inputs:
    """Queries (*lead, tq, d) spread ×2 (so every wrong scale shows), keys (*lead, tk, d) and values (*lead, tk, dv)
    drawn from seeds, and mask() if given."""
    q, k = randn(*lead, tq, d, seed=seeds[0]) * 2.0, randn(*lead, tk, d, seed=seeds[1])
    return _qkv(q, k, randn(*lead, tk, dv, seed=seeds[2]), None if mask is None else mask())


def _by_hand(mask: tuple | None = None) -> Inputs:
    """One query, d = 4: raw scores 4 and 0, scaled 2 and 0; and a mask (True = allowed) if given."""
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0]])  # (1, 4): one query, d = 4
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # (2, 4): scores 4 and 0, scaled 2 and 0
    v = torch.tensor([[10.0, 0.0], [20.0, 1.0]])  # (2, 2)
    return _qkv(q, k, v, None if mask is None else torch.tensor(mask))


def _empty_row() -> Inputs:
    """Two queries, the second of which may attend to nothing."""
    inputs = _by_hand(((True, True), (False, False)))
    inputs["queries"] = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # (2, 4)
    return inputs


#: under grading, the random inputs the checks worked by hand add (seeds salted with the grader's secret): a batch
#: of two, tq=3 queries, tk=4 keys, d=5, dv=3, so every wrong scale shows
_secret = partial(_sdpa_inputs, (2,), 3, 4, 5, 3, (370, 371, 372))
#: (leading dimensions, tq, tk, d, dv, the mask): tq != tk, dv != d, 0-2 leading dimensions
ORACLE_SPECS = (((3,), 4, 6, 5, 2, None), ((2, 3), 5, 7, 8, 3, partial(random_mask, (5, 7), 331)),
                ((2,), 6, 6, 4, 6, partial(torch.tril, torch.ones(6, 6, dtype=torch.bool))),  # causal
                ((), 3, 5, 6, 4, partial(torch.tensor, [True, False, True, True, False])),  # over the keys
                ((2, 3), 4, 5, 4, 3, partial(torch.lt, torch.arange(5), torch.tensor([5, 3])[:, None, None, None])),
                ((2,), 5, 4, 3, 2, partial(random_mask, (2, 5, 4), 335, ((0, 1), (1, 3)))))  # two empty rows
ORACLE_CASES = tuple(sdpa_case(f"r{i}", partial(_sdpa_inputs, *spec[:5], (300 + i, 310 + i, 320 + i), spec[5]))
                     for i, spec in enumerate(ORACLE_SPECS))
#: the case with queries that may attend to nothing
GRADIENT_CASE = Case("r", ORACLE_CASES[-1].inputs, ORACLE_CASES[-1].label)
SMALL_CASE = sdpa_case("r", partial(_sdpa_inputs, (2,), 3, 4, 4, 2, (360, 361, 362),
                                    partial(random_mask, (2, 3, 4), 363, ((1, 2),))),
                       "queries 2×3×4, keys 2×4×4, values 2×4×2, a mask (2, 3, 4) with an empty row")
#: the seeds of the upstream gradients of the output and of the weights in a gradient check
UPSTREAM_SEEDS = (390, 391)


# ---------------------------------------------------------------- scaled_dot_product_attention: the checks

sdpa_by_hand = calls("sdpa_by_hand", (
    sdpa_case("r", _by_hand, "q = [1,1,1,1], keys [1,1,1,1] and 0, values [10,0] and [20,1]"),
    sdpa_case("r_secret", _secret, secret=True)), keywords=("mask",))
sdpa_masks_by_hand = calls("sdpa_masks_by_hand", (
    sdpa_case("r", partial(_by_hand, ((False, True),)), "the same case, mask [[False, True]] (True = allowed)"),
    sdpa_case("r_keys", partial(_by_hand, (False, True)), "mask [False, True]"),
    sdpa_case("r_secret", partial(_secret, partial(random_mask, (3, 4), 373, ((0, 1),))), secret=True),
    sdpa_case("r_keys_secret", partial(_secret, partial(_some_keys, 4, 374)), secret=True)), keywords=("mask",))
sdpa_fully_masked_row = calls("sdpa_fully_masked_row", (
    sdpa_case("r", _empty_row, "query 2 may attend to nothing"),
    sdpa_case("r_secret", partial(_secret, partial(_empty_rows, (2, 3, 4), 375)), secret=True)), keywords=("mask",))


def _large_scores() -> Inputs:
    """Queries 50 times larger: scaled scores in the hundreds, where exp overflows float32 (past about 88)."""
    inputs = _sdpa_inputs((2,), 4, 5, 6, 3, (340, 341, 342), partial(torch.tril, torch.ones(4, 5, dtype=torch.bool)))
    return inputs | {"queries": 50.0 * inputs["queries"]}


LARGE_CASE = sdpa_case("r_large", _large_scores, "queries 2×4×6 times 50 (scores in the hundreds), a causal mask")
sdpa_oracle = calls("sdpa_oracle", (*ORACLE_CASES, LARGE_CASE), keywords=("mask",))


def _probe_gradients(cases: tuple[Case], fn: Callable, rec: Recorder) -> None:
    """Record fn(q, k, v, mask=mask) on the case and the gradients a loss on its output and weights leaves on q, k
    and v."""
    (case,) = cases
    inputs = {name: value.to(rec.device) for name, value in case.inputs().items()}
    q, k, v = (inputs[name].requires_grad_(True) for name in ("queries", "keys", "values"))
    result = rec.call(case.key, fn, q, k, v, mask=inputs["mask"])
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result)
            and result[0].requires_grad):
        return  # the judge says why from the recorded result (its shapes too)
    out, w = result
    loss = (out * randn(*out.shape, seed=UPSTREAM_SEEDS[0]).to(rec.device)).sum()
    if w.requires_grad:
        loss = loss + (w * randn(*w.shape, seed=UPSTREAM_SEEDS[1]).to(rec.device)).sum()
    loss.backward()
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        rec.tensor(gradient_key(name), t.grad)


sdpa_gradients = property_check("sdpa_gradients", _probe_gradients, (GRADIENT_CASE,))
sdpa_vs_pytorch = property_check("sdpa_vs_pytorch", _probe_gradients, (SMALL_CASE,))


# ---------------------------------------------------------------- ScaledSelfAttention

STRUCTURE_K = 6
CAUSAL_K, CHANGED = 4, 4
MODULE_SPECS = ((3, 5, 4, None), (2, 7, 6, "causal"), (2, 6, 8, kinds.Mask("padding", lengths=(6, 4))),
                (1, 1, 3, None))  # (b, t, k, mask)
MODULE_OPTIONS = MappingProxyType({"gains": GAINS, "facts": modules.sharing(ROLES)})

scaled_self_attention_structure = builds_and_runs("scaled_self_attention_structure", (
    Runs(Built(key="module", args=(STRUCTURE_K,), seed=400),
         (module_case("y", (2, 4, STRUCTURE_K), 401),)),), **MODULE_OPTIONS)
scaled_self_attention_vs_pytorch = kinds.builds_and_runs_backward("scaled_self_attention_vs_pytorch", (
    Runs(Built(key="module", args=(4,), seed=495),
         (module_case("y", (2, 5, 4), 490, mask=kinds.Mask("padding", lengths=(5, 3)), upstream=491),)),),
    **MODULE_OPTIONS)
#: x under a causal mask (y), x with position CHANGED changed (y_changed), and both without a mask (y_free...)
CAUSAL_CASES = tuple(module_case(f"y{free}{changed}", (2, 6, CAUSAL_K), 481, mask=mask, changed=position)
                     for free, mask in (("", "causal"), ("_free", None))
                     for changed, position in (("", None), ("_changed", kinds.Shift(at=CHANGED))))
scaled_self_attention_causal = builds_and_runs("scaled_self_attention_causal", (
    Runs(Built(key="module", args=(CAUSAL_K,), seed=480), CAUSAL_CASES),), **MODULE_OPTIONS)
scaled_self_attention_oracle = builds_and_runs("scaled_self_attention_oracle", tuple(
    Runs(Built(key=f"module{i}", args=(k,), seed=440 + 10 * i),
         (module_case(f"y{i}", (b, t, k), 420 + i, mask=mask),))
    for i, (b, t, k, mask) in enumerate(MODULE_SPECS)), **MODULE_OPTIONS)
