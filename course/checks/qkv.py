"""Probes for assignment 02: attention(queries, keys, values) and SelfAttentionQKV.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/qkv.py, hidden under grading) decides with F.scaled_dot_product_attention (scale 1) as the oracle for
attention, and nn.MultiheadAttention with one head for the module. See course/checks/check.py. Under grading every
random input and weight comes from the grader's secret seed, and the case worked by hand adds a secret random case
(see course/checks/seeds.py).
"""

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import randn
from course.checks.evidence import Recorder
from course.checks.kinds import Built, Case, ModuleCase, builds, calls, random_case

ROLES = ("to_queries", "to_keys", "to_values")

# (b, tq, tk, k, v): batch > 1, tq != tk, v != k, so swapped axes and roles change the shape
ATTENTION_SHAPES = ((3, 4, 6, 5, 2), (2, 7, 3, 4, 6), (1, 1, 5, 3, 3), (4, 5, 5, 2, 7))
MODULE_SHAPES = ((3, 5, 4), (2, 7, 6), (1, 1, 3))  # (b, t, k)
SMALL = (2, 3, 4, 4, 2)  # (b, tq, tk, k, v) of the small case against PyTorch
SECRET = (2, 3, 5, 4, 3)  # (b, tq, tk, k, v) of the secret case added to the case worked by hand under grading
STRUCTURE_K = 6
PERMUTATION = (5, 2, 0, 4, 1, 3)


# ---------------------------------------------------------------- attention: the cases

def hand_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The notebook's example: one query, two keys, the values 10 and 20."""
    q = torch.tensor([[[1.0, 0.0]]])  # (1, 1, 2)
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    v = torch.tensor([[[10.0], [20.0]]])  # (1, 2, 1)
    return q, k, v


def _named(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"queries": queries, "keys": keys, "values": values}


def _random_qkv(shape: tuple[int, ...], seeds: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    b, tq, tk, k, v = shape
    return _named(randn(b, tq, k, seed=seeds[0]), randn(b, tk, k, seed=seeds[1]), randn(b, tk, v, seed=seeds[2]))


def qkv_case(key: str, shape: tuple[int, ...], seeds: tuple[int, int, int], *, secret: bool = False,
             upstream_seed: int | None = None) -> Case:
    """Random queries (b, tq, k), keys (b, tk, k), values (b, tk, v) from three seeds; with upstream_seed, an
    upstream gradient of the output (b, tq, v) too."""
    b, tq, tk, k, v = shape
    upstream = partial(randn, b, tq, v, seed=upstream_seed) if upstream_seed is not None else None
    return Case(key, partial(_random_qkv, shape, seeds), f"b={b}, tq={tq}, tk={tk}, k={k}, v={v}", secret, upstream)


def average_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """queries (2, 3, 4), keys (2, 6, 4), six identical values (2, 6, 5), and six different ones (2, 6, 5)."""
    queries = randn(2, 3, 4, seed=530)
    keys = randn(2, 6, 4, seed=531)
    same = randn(2, 1, 5, seed=532).expand(2, 6, 5).contiguous()
    return queries, keys, same, randn(2, 6, 5, seed=533)


def oracle_inputs(i: int, b: int, tq: int, tk: int, k: int, v: int) -> tuple[torch.Tensor, ...]:
    return randn(b, tq, k, seed=500 + i), randn(b, tk, k, seed=510 + i), randn(b, tk, v, seed=520 + i)


def lookup_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    keys = torch.eye(4).unsqueeze(0)  # (1, 4, 4): orthonormal keys
    values = randn(1, 4, 3, seed=540)
    queries = 30.0 * keys[:, [2, 0]]  # (1, 2, 4): look up keys 2 and 0
    return queries, keys, values


# ---------------------------------------------------------------- attention: the probes

attention_by_hand = calls("attention_by_hand", (
    Case("y", lambda: _named(*hand_inputs()), "q=[1,0], keys=[1,0],[0,1], values=10,20"),
    qkv_case("y_secret", SECRET, (570, 571, 572), secret=True)))


def _probe_average(attention: Callable, rec: Recorder) -> None:
    queries, keys, same, different = (t.to(rec.device) for t in average_inputs())
    rec.call("y", attention, queries.clone(), keys.clone(), same)
    rec.call("y_anchor", attention, queries.clone(), keys.clone(), different)


attention_weighted_average = Check("attention_weighted_average", _probe_average)


attention_vs_pytorch = calls("attention_vs_pytorch", (qkv_case("y", SMALL, (560, 561, 562), upstream_seed=563),))


def _probe_attention_oracle(attention: Callable, rec: Recorder) -> None:
    for i, shape in enumerate(ATTENTION_SHAPES):
        rec.call(f"y{i}", attention, *(t.to(rec.device) for t in oracle_inputs(i, *shape)))
    rec.call("lookup", attention, *(t.to(rec.device) for t in lookup_inputs()))


attention_oracle = Check("attention_oracle", _probe_attention_oracle)


# ---------------------------------------------------------------- the module: building and running it

def _make(cls: Callable, rec: Recorder, key: str, k: int, seed: int) -> nn.Module | None:
    """Build the student's module, record its structure, and load the check's weights (seed) into it."""
    return modules.build(rec, key, cls, k, seed=seed, layers=ROLES)


def _run(rec: Recorder, key: str, module: nn.Module, x: torch.Tensor) -> None:
    """Record module(x) without gradients, on a fresh copy of the check's input."""
    with torch.no_grad():
        rec.call(key, module, x.to(rec.device))


# ---------------------------------------------------------------- the module: structure

def structure_x() -> torch.Tensor:
    return randn(2, 4, STRUCTURE_K, seed=201)


def _probe_structure(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", STRUCTURE_K, 200)
    if module is not None:
        _run(rec, "y", module, structure_x())


self_attention_qkv_structure = Check("self_attention_qkv_structure", _probe_structure)


# ---------------------------------------------------------------- the module: PyTorch's attention and gradients

def _module_case(built: Built, key: str, shape: tuple[int, int, int], seed: int, *, grad_seed: int | None = None,
                 label: str = "") -> ModuleCase:
    """The module built as `built`, run on a random x of shape (seed); with grad_seed, also backpropagated."""
    case = random_case(key, shape, seed, upstream=(shape, grad_seed) if grad_seed is not None else None)
    return ModuleCase(built, Case(case.key, case.inputs, label or case.label, upstream=case.upstream))


def _gradient_case(seed: int, shape: tuple[int, int, int]) -> ModuleCase:
    """A k = 4 module (weights from seed) on x of shape (seed + 1), with an upstream gradient (seed + 2)."""
    return _module_case(Built("grad_module", (4,), seed), "y_grad", shape, seed + 1, grad_seed=seed + 2,
                        label=f"k=4, x of shape {shape}")


self_attention_qkv_vs_pytorch = builds("self_attention_qkv_vs_pytorch", (_gradient_case(750, (2, 3, 4)),),
                                       layers=ROLES)
self_attention_qkv_oracle = builds("self_attention_qkv_oracle", (
    *(_module_case(Built(f"module{i}", (k,), 600 + i), f"y{i}", (b, t, k), 650 + i)
      for i, (b, t, k) in enumerate(MODULE_SHAPES)),
    _gradient_case(700, (2, 5, 4))), layers=ROLES)


# ---------------------------------------------------------------- the module: permutation equivariance

def equivariance_x() -> torch.Tensor:
    return randn(2, 6, 4, seed=801)


def _probe_equivariance(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 4, 800)
    if module is None:
        return
    x = equivariance_x()
    _run(rec, "y", module, x)
    _run(rec, "y_perm", module, x[:, list(PERMUTATION)])


self_attention_qkv_equivariance = Check("self_attention_qkv_equivariance", _probe_equivariance)
