"""Probes for assignment 03: scaled_dot_product_attention(q, k, v, mask=None) and ScaledSelfAttention, judged in
course/judges/scaling.py (F.scaled_dot_product_attention, nn.MultiheadAttention with one head) from the cases
declared here. A mask is passed by name: fn(q, k, v, mask=m), forward(x, mask=m)."""

from collections.abc import Callable
from functools import partial
from types import MappingProxyType

import torch

from course.checks.check import Check, when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.kinds import Built, Case, Runs, builds_and_runs, calls, property_check

ROLES = ("to_queries", "to_keys", "to_values")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})
Inputs = dict[str, torch.Tensor]


# ---------------------------------------------------------------- scaled_dot_product_attention: the inputs

def described(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None,
              kind: str = "") -> str:
    """How a message names a case: the shapes of its inputs and of its mask."""
    what = "no mask" if mask is None else f"mask of shape {tuple(mask.shape)}" + (f" ({kind})" if kind else "")
    return (f"queries {'×'.join(map(str, queries.shape))}, keys {'×'.join(map(str, keys.shape))}, values "
            f"{'×'.join(map(str, values.shape))}, {what}")


def sdpa_case(key: str, inputs: Callable[[], Inputs], label: str = "", *, kind: str = "",
              secret: bool = False) -> Case:
    """A call of scaled_dot_product_attention on inputs() (queries, keys, values and perhaps a mask), named label
    or else by its shapes (described)."""
    return Case(key, inputs, label or described(**inputs(), kind=kind), secret)


def random_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    mask = torch.rand(*shape, generator=generator(seed)) < 0.6
    tq, tk = shape[-2], shape[-1]
    mask[..., torch.arange(tq), torch.arange(tq) % tk] = True  # every query may attend to at least one key
    return mask


def _qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> Inputs:
    return {"queries": q, "keys": k, "values": v} | ({} if mask is None else {"mask": mask})


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


def _secret(mask: str | None = None) -> Inputs:
    """Under grading, the random inputs the checks worked by hand add (seeds salted with the grader's secret): a
    batch of two, tq=3 queries, tk=4 keys, d=5, dv=3, so every wrong scale shows; mask: "queries" a (tq, tk) mask,
    every query allowed some key and some key forbidden; "keys" a (tk,) mask over the keys that allows some and
    forbids others; "empty rows" a (2, 3, 4) mask in which one query of each batch element may attend to nothing."""
    q, k, v = randn(2, 3, 5, seed=370) * 2.0, randn(2, 4, 5, seed=371), randn(2, 4, 3, seed=372)
    found = None
    if mask == "queries":
        found = random_mask((3, 4), 373)
        found[0, 1] = False  # query 0 may always see key 0 (random_mask), never key 1
    elif mask == "keys":
        g = generator(374)
        order = torch.randperm(4, generator=g)
        allowed = int(torch.randint(1, 4, (1,), generator=g))
        found = torch.zeros(4, dtype=torch.bool)
        found[order[:allowed]] = True
    elif mask == "empty rows":
        found = random_mask((2, 3, 4), 375)
        row = torch.randint(0, 3, (2,), generator=generator(376))
        found[0, int(row[0])] = False
        found[1, int(row[1])] = False
    return _qkv(q, k, v, found)


# (leading dimensions, tq, tk, d, dv, kind of mask): tq != tk, dv != d, 0-2 leading dimensions
ORACLE_SPECS = (((3,), 4, 6, 5, 2, None), ((2, 3), 5, 7, 8, 3, "random"), ((2,), 6, 6, 4, 6, "causal"),
                ((), 3, 5, 6, 4, "keys"), ((2, 3), 4, 5, 4, 3, "padding"), ((2,), 5, 4, 3, 2, "empty rows"))


def _oracle_inputs(i: int) -> Inputs:
    lead, tq, tk, d, dv, kind = ORACLE_SPECS[i]
    q = randn(*lead, tq, d, seed=300 + i) * 2.0  # spread scores so every mistake shows
    k = randn(*lead, tk, d, seed=310 + i)
    v = randn(*lead, tk, dv, seed=320 + i)
    if kind is None:
        mask = None
    elif kind == "random":
        mask = random_mask((tq, tk), 330 + i)
    elif kind == "causal":
        mask = torch.ones(tq, tk, dtype=torch.bool).tril()
    elif kind == "keys":
        mask = torch.tensor([True, False, True, True, False])
    elif kind == "padding":
        lengths = torch.tensor([5, 3])  # the second sequence has two padding keys
        mask = (torch.arange(tk) < lengths[:, None])[:, None, None, :]  # (2, 1, 1, tk)
    else:
        mask = random_mask((*lead, tq, tk), 330 + i)
        mask[0, 1] = False  # query 1 of the first batch element may attend to nothing
        mask[1, 3] = False
    return _qkv(q, k, v, mask)


def _small() -> Inputs:
    """A batch of two: tq=3 queries, tk=4 keys, d=4, dv=2, a mask (2, 3, 4) in which query 2 of the second
    element may attend to nothing."""
    mask = random_mask((2, 3, 4), 363)
    mask[1, 2] = False
    return _qkv(randn(2, 3, 4, seed=360) * 2.0, randn(2, 4, 4, seed=361), randn(2, 4, 2, seed=362), mask)


ORACLE_CASES = tuple(sdpa_case(f"r{i}", partial(_oracle_inputs, i), kind=spec[-1] or "")
                     for i, spec in enumerate(ORACLE_SPECS))
#: the case with queries that may attend to nothing
GRADIENT_CASE = Case("r", ORACLE_CASES[-1].inputs, ORACLE_CASES[-1].label)
SMALL_CASE = sdpa_case("r", _small, "queries 2×3×4, keys 2×4×4, values 2×4×2, a mask (2, 3, 4) with an empty row")
#: the seeds of the upstream gradients of the output and of the weights in a gradient check
UPSTREAM_SEEDS = (390, 391)


# ---------------------------------------------------------------- scaled_dot_product_attention: the checks

sdpa_by_hand = calls("sdpa_by_hand", (
    sdpa_case("r", _by_hand, "q = [1,1,1,1], keys [1,1,1,1] and 0, values [10,0] and [20,1]"),
    sdpa_case("r_secret", _secret, secret=True)), keywords=("mask",))
sdpa_masks_by_hand = calls("sdpa_masks_by_hand", (
    sdpa_case("r", partial(_by_hand, ((False, True),)), "the same case, mask [[False, True]] (True = allowed)"),
    sdpa_case("r_keys", partial(_by_hand, (False, True)), "mask [False, True]"),
    sdpa_case("r_secret", partial(_secret, "queries"), secret=True),
    sdpa_case("r_keys_secret", partial(_secret, "keys"), secret=True)), keywords=("mask",))
sdpa_fully_masked_row = calls("sdpa_fully_masked_row", (
    sdpa_case("r", _empty_row, "query 2 may attend to nothing"),
    sdpa_case("r_secret", partial(_secret, "empty rows"), kind="empty rows", secret=True)), keywords=("mask",))
sdpa_oracle = calls("sdpa_oracle", ORACLE_CASES, keywords=("mask",))


def _probe_gradients(cases: tuple[Case], fn: Callable, rec: Recorder) -> None:
    """Record fn(q, k, v, mask=mask) on the case and the gradients a loss on its output and weights leaves on q, k
    and v."""
    (case,) = cases
    inputs = {name: value.to(rec.device) for name, value in case.inputs().items()}
    q, k, v = (inputs[name].requires_grad_(True) for name in ("queries", "keys", "values"))
    result = rec.call(case.key, fn, q, k, v, mask=inputs["mask"])
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result)):
        return
    out, w = result
    if not out.requires_grad or out.shape != q.shape[:-1] + v.shape[-1:] or w.shape != q.shape[:-1] + k.shape[-2:-1]:
        return
    loss = (out * randn(*out.shape, seed=UPSTREAM_SEEDS[0]).to(rec.device)).sum()
    if w.requires_grad:
        loss = loss + (w * randn(*w.shape, seed=UPSTREAM_SEEDS[1]).to(rec.device)).sum()
    loss.backward()
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        rec.tensor(f"grad.{name}", t.grad)


sdpa_gradients = property_check("sdpa_gradients", _probe_gradients, (GRADIENT_CASE,))
sdpa_vs_pytorch = property_check("sdpa_vs_pytorch", _probe_gradients, (SMALL_CASE,))


# ---------------------------------------------------------------- ScaledSelfAttention

def _module_inputs(shape: tuple[int, int, int], seed: int, mask: str | None = None, changed: int | None = None,
                   lengths: tuple[int, ...] = ()) -> Inputs:
    """x of shape (b, t, k) drawn from seed (position `changed` shifted by 3), and a mask: "causal" (t, t) or
    "padding" (b, 1, t) hiding the keys of each sequence past its length."""
    b, t, _ = shape
    x = randn(*shape, seed=seed)
    if changed is not None:
        x[:, changed] += 3.0  # change that position only
    if mask == "causal":
        return {"x": x, "mask": torch.ones(t, t, dtype=torch.bool).tril()}  # (t, t): query i sees keys 0..i
    if mask == "padding":
        return {"x": x, "mask": (torch.arange(t) < torch.tensor(lengths)[:, None])[:, None, :]}  # (b, 1, t)
    return {"x": x}


def module_case(key: str, shape: tuple[int, int, int], seed: int, mask: str | None = None, *,
                changed: int | None = None, lengths: tuple[int, ...] = (), upstream: int | None = None) -> Case:
    """forward(x) or forward(x, mask=...) on _module_inputs; upstream: the seed of an upstream gradient."""
    inputs = partial(_module_inputs, shape, seed, mask, changed, lengths)
    found = inputs().get("mask")
    label = f"x of shape {shape}, " + ("no mask" if found is None else f"{mask} mask of shape {tuple(found.shape)}")
    return Case(key, inputs, label, upstream=None if upstream is None else partial(randn, *shape, seed=upstream))


STRUCTURE_K = 6
CAUSAL_K, CHANGED = 4, 4
MODULE_SPECS = ((3, 5, 4, None), (2, 7, 6, "causal"), (2, 6, 8, "padding"), (1, 1, 3, None))  # (b, t, k, mask)
MODULE_OPTIONS = MappingProxyType({"gains": GAINS, "layers": ROLES})

scaled_self_attention_structure = builds_and_runs("scaled_self_attention_structure", (
    Runs(Built("module", (STRUCTURE_K,), 400), (module_case("y", (2, 4, STRUCTURE_K), 401),)),), **MODULE_OPTIONS)
scaled_self_attention_vs_pytorch = builds_and_runs("scaled_self_attention_vs_pytorch", (
    Runs(Built("module", (4,), 495), (module_case("y", (2, 5, 4), 490, "padding", lengths=(5, 3), upstream=491),)),),
    **MODULE_OPTIONS)
#: x under a causal mask (y), x with position CHANGED changed (y_changed), and both without a mask (y_free...)
CAUSAL_CASES = tuple(module_case(f"y{free}{changed}", (2, 6, CAUSAL_K), 481, mask, changed=position)
                     for free, mask in (("", "causal"), ("_free", None))
                     for changed, position in (("", None), ("_changed", CHANGED)))
scaled_self_attention_causal = builds_and_runs("scaled_self_attention_causal", (
    Runs(Built("module", (CAUSAL_K,), 480), CAUSAL_CASES),), **MODULE_OPTIONS)
scaled_self_attention_oracle = builds_and_runs("scaled_self_attention_oracle", tuple(
    Runs(Built(f"module{i}", (k,), 440 + 10 * i), (module_case(f"y{i}", (b, t, k), 420 + i, mask, lengths=(6, 4)),))
    for i, (b, t, k, mask) in enumerate(MODULE_SPECS)), **MODULE_OPTIONS)
