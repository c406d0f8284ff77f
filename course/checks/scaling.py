"""Probes for assignment 03: scaled_dot_product_attention(q, k, v, mask=None) and ScaledSelfAttention.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/scaling.py, hidden under grading) decides with F.scaled_dot_product_attention as the oracle for the
function (its weights are its output when the values are the identity), and nn.MultiheadAttention with one head
for the module. See course/checks/check.py. Under grading every random input and weight comes from the grader's
secret seed, and the cases worked by hand add a secret random case (see course/checks/seeds.py).
"""

from collections.abc import Callable
from types import MappingProxyType

import torch
from torch import nn

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading

ROLES = ("to_queries", "to_keys", "to_values")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})

#: q, k, v, mask (or None) and a description of a case
Case = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, str]


# ---------------------------------------------------------------- scaled_dot_product_attention: the cases

def _call(rec: Recorder, key: str, fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          mask: torch.Tensor | None) -> object:
    """Record fn(q, k, v) or fn(q, k, v, mask=mask) on fresh copies of the check's inputs, moved to the device."""
    args = [t.to(rec.device) for t in (q, k, v)]
    if mask is None:
        return rec.call(key, fn, *args)
    return rec.call(key, fn, *args, mask=mask.to(rec.device))


def described(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, kind: str = "") -> str:
    """How a message names a case: the shapes of its inputs and of its mask."""
    what = "no mask" if mask is None else f"mask of shape {tuple(mask.shape)}" + (f" ({kind})" if kind else "")
    return (f"queries {'×'.join(map(str, q.shape))}, keys {'×'.join(map(str, k.shape))}, values "
            f"{'×'.join(map(str, v.shape))}, {what}")


def random_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    mask = torch.rand(*shape, generator=generator(seed)) < 0.6
    tq, tk = shape[-2], shape[-1]
    mask[..., torch.arange(tq), torch.arange(tq) % tk] = True  # every query may attend to at least one key
    return mask


def by_hand_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0]])  # (1, 4): one query, d = 4
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # (2, 4): scores 4 and 0, scaled 2 and 0
    v = torch.tensor([[10.0, 0.0], [20.0, 1.0]])  # (2, 2)
    return q, k, v


HAND_MASK = ((False, True),)  # (tq, tk): the query may look at key 1 only


def empty_row_case() -> tuple[torch.Tensor, ...]:
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # (2, 4)
    _, k, v = by_hand_case()
    mask = torch.tensor([[True, True], [False, False]])  # the second query may attend to nothing
    return q, k, v, mask


def secret_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Under grading, the random inputs the checks worked by hand add (seeds salted with the grader's secret):
    a batch of two, tq=3 queries, tk=4 keys, d=5, dv=3, so every wrong scale shows."""
    return randn(2, 3, 5, seed=370) * 2.0, randn(2, 4, 5, seed=371), randn(2, 4, 3, seed=372)


def secret_case() -> Case:
    """The secret case of sdpa_by_hand: the secret inputs, no mask."""
    q, k, v = secret_inputs()
    return q, k, v, None, described(q, k, v, None)


def secret_masks() -> tuple[torch.Tensor, torch.Tensor]:
    """The secret masks of sdpa_masks_by_hand: a (tq, tk) mask, every query allowed some key and some key
    forbidden, and a (tk,) mask over the keys that allows some keys and forbids others."""
    _, k, _ = secret_inputs()
    tk = k.shape[-2]
    mask = random_mask((3, tk), 373)
    mask[0, 1] = False  # query 0 may always see key 0 (random_mask), never key 1
    g = generator(374)
    order = torch.randperm(tk, generator=g)
    allowed = int(torch.randint(1, tk, (1,), generator=g))
    keys = torch.zeros(tk, dtype=torch.bool)
    keys[order[:allowed]] = True
    return mask, keys


def secret_empty_row_case() -> Case:
    """The secret case of sdpa_fully_masked_row: the secret inputs with a random (2, 3, 4) mask in which one query
    of each batch element may attend to nothing."""
    q, k, v = secret_inputs()
    mask = random_mask((2, 3, 4), 375)
    row = torch.randint(0, 3, (2,), generator=generator(376))
    mask[0, int(row[0])] = False
    mask[1, int(row[1])] = False
    return q, k, v, mask, described(q, k, v, mask, "empty rows")


# (leading dimensions, tq, tk, d, dv, kind of mask): tq != tk, dv != d, 0-2 leading dimensions
ORACLE_SPECS = (((3,), 4, 6, 5, 2, None), ((2, 3), 5, 7, 8, 3, "random"), ((2,), 6, 6, 4, 6, "causal"),
                ((), 3, 5, 6, 4, "keys"), ((2, 3), 4, 5, 4, 3, "padding"), ((2,), 5, 4, 3, 2, "empty rows"))


def oracle_case(i: int) -> Case:
    """q, k, v, mask and a description of case i, on the CPU."""
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
    return q, k, v, mask, described(q, k, v, mask, kind or "")


GRAD_CASE = len(ORACLE_SPECS) - 1  # the case with queries that may attend to nothing


def upstream(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return randn(*shape, seed=seed)


def small_case() -> Case:
    """A batch of two: tq=3 queries, tk=4 keys, d=4, dv=2, a mask (2, 3, 4) in which query 2 of the second
    element may attend to nothing."""
    mask = random_mask((2, 3, 4), 363)
    mask[1, 2] = False
    q, k, v = randn(2, 3, 4, seed=360) * 2.0, randn(2, 4, 4, seed=361), randn(2, 4, 2, seed=362)
    return q, k, v, mask, "queries 2×3×4, keys 2×4×4, values 2×4×2, a mask (2, 3, 4) with an empty row"


# ---------------------------------------------------------------- scaled_dot_product_attention: the probes

def _probe_by_hand(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *by_hand_case(), None)
    if grading():
        _call(rec, "r_secret", fn, *secret_case()[:4])


sdpa_by_hand = Check("sdpa_by_hand", _probe_by_hand)


def _probe_masks_by_hand(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *by_hand_case(), torch.tensor(HAND_MASK))
    _call(rec, "r_keys", fn, *by_hand_case(), torch.tensor(HAND_MASK[0]))
    if grading():
        mask, keys = secret_masks()
        _call(rec, "r_secret", fn, *secret_inputs(), mask)
        _call(rec, "r_keys_secret", fn, *secret_inputs(), keys)


sdpa_masks_by_hand = Check("sdpa_masks_by_hand", _probe_masks_by_hand)


def _probe_empty_row(fn: Callable, rec: Recorder) -> None:
    _call(rec, "r", fn, *empty_row_case())
    if grading():
        _call(rec, "r_secret", fn, *secret_empty_row_case()[:4])


sdpa_fully_masked_row = Check("sdpa_fully_masked_row", _probe_empty_row)


def _probe_oracle(fn: Callable, rec: Recorder) -> None:
    for i in range(len(ORACLE_SPECS)):
        q, k, v, mask, _ = oracle_case(i)
        _call(rec, f"r{i}", fn, q, k, v, mask)


sdpa_oracle = Check("sdpa_oracle", _probe_oracle)


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
    loss = (out * upstream(tuple(out.shape), 390).to(rec.device)).sum()
    if w.requires_grad:
        loss = loss + (w * upstream(tuple(w.shape), 391).to(rec.device)).sum()
    loss.backward()
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        rec.tensor(f"grad.{name}", t.grad)


def _probe_gradients(fn: Callable, rec: Recorder) -> None:
    _probe_gradients_of(fn, rec, *oracle_case(GRAD_CASE)[:4])


sdpa_gradients = Check("sdpa_gradients", _probe_gradients)


def _probe_vs_pytorch(fn: Callable, rec: Recorder) -> None:
    _probe_gradients_of(fn, rec, *small_case()[:4])


sdpa_vs_pytorch = Check("sdpa_vs_pytorch", _probe_vs_pytorch)


# ---------------------------------------------------------------- ScaledSelfAttention: building and running it

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


# ---------------------------------------------------------------- ScaledSelfAttention: structure

STRUCTURE_K = 6


def structure_x() -> torch.Tensor:
    return randn(2, 4, STRUCTURE_K, seed=401)


def _probe_structure(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", STRUCTURE_K, 400)
    if module is not None:
        _run(rec, "y", module, structure_x())


scaled_self_attention_structure = Check("scaled_self_attention_structure", _probe_structure)


# ---------------------------------------------------------------- ScaledSelfAttention: a small case against PyTorch

def small_module_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (2, 5, 4), a padding mask (2, 1, 5) that hides the last two keys of the second sequence, and the upstream
    gradient of the output."""
    mask = (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, :]  # (b, 1, t)
    return randn(2, 5, 4, seed=490), mask, randn(2, 5, 4, seed=491)


def _probe_module_vs_pytorch(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 4, 495)
    if module is None:
        return
    x, mask, grad = small_module_case()
    x = x.to(rec.device).requires_grad_(True)
    modules.backward(rec, rec.call("y", module, x, mask=mask.to(rec.device)), grad, {"x": x}, module)


scaled_self_attention_vs_pytorch = Check("scaled_self_attention_vs_pytorch", _probe_module_vs_pytorch)


# ---------------------------------------------------------------- ScaledSelfAttention: a causal mask

CAUSAL_T, CAUSAL_K = 6, 4


def causal_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = randn(2, CAUSAL_T, CAUSAL_K, seed=481)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0  # change position 4 only
    causal = torch.ones(CAUSAL_T, CAUSAL_T, dtype=torch.bool).tril()  # (t, t): query i sees keys 0..i
    return x, x_changed, causal


def _probe_causal(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", CAUSAL_K, 480)
    if module is None:
        return
    x, x_changed, causal = causal_inputs()
    _run(rec, "y", module, x, causal)
    _run(rec, "y_changed", module, x_changed, causal)
    _run(rec, "y_free", module, x)
    _run(rec, "y_free_changed", module, x_changed)


scaled_self_attention_causal = Check("scaled_self_attention_causal", _probe_causal)


# ---------------------------------------------------------------- ScaledSelfAttention: against the oracle

MODULE_SPECS = ((3, 5, 4, None), (2, 7, 6, "causal"), (2, 6, 8, "padding"), (1, 1, 3, None))  # (b, t, k, mask)


def module_case(i: int) -> tuple[torch.Tensor, torch.Tensor | None, str]:
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
        x, mask, _ = module_case(i)
        _run(rec, f"y{i}", module, x, mask)


scaled_self_attention_oracle = Check("scaled_self_attention_oracle", _probe_module_oracle)
