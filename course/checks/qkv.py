"""Probes for assignment 02: attention(queries, keys, values) and SelfAttentionQKV.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/qkv.py, hidden under grading) decides with F.scaled_dot_product_attention (scale 1) as the oracle for
attention, and nn.MultiheadAttention with one head for the module. See course/checks/check.py. Under grading every
random input and weight comes from the grader's secret seed, and the case worked by hand adds a secret random case
(see course/checks/seeds.py).
"""

from collections.abc import Callable

import torch
from torch import nn

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading

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


def secret_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Under grading, the random case the check worked by hand adds (its seeds are salted with the grader's
    secret)."""
    b, tq, tk, k, v = SECRET
    return randn(b, tq, k, seed=570), randn(b, tk, k, seed=571), randn(b, tk, v, seed=572)


def average_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """queries (2, 3, 4), keys (2, 6, 4), six identical values (2, 6, 5), and six different ones (2, 6, 5)."""
    queries = randn(2, 3, 4, seed=530)
    keys = randn(2, 6, 4, seed=531)
    same = randn(2, 1, 5, seed=532).expand(2, 6, 5).contiguous()
    return queries, keys, same, randn(2, 6, 5, seed=533)


def small_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """queries, keys, values of the small case, and the upstream gradient of the output."""
    b, tq, tk, k, v = SMALL
    return randn(b, tq, k, seed=560), randn(b, tk, k, seed=561), randn(b, tk, v, seed=562), randn(b, tq, v, seed=563)


def oracle_inputs(i: int, b: int, tq: int, tk: int, k: int, v: int) -> tuple[torch.Tensor, ...]:
    return randn(b, tq, k, seed=500 + i), randn(b, tk, k, seed=510 + i), randn(b, tk, v, seed=520 + i)


def lookup_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    keys = torch.eye(4).unsqueeze(0)  # (1, 4, 4): orthonormal keys
    values = randn(1, 4, 3, seed=540)
    queries = 30.0 * keys[:, [2, 0]]  # (1, 2, 4): look up keys 2 and 0
    return queries, keys, values


# ---------------------------------------------------------------- attention: the probes

def _probe_by_hand(attention: Callable, rec: Recorder) -> None:
    rec.call("y", attention, *(t.to(rec.device) for t in hand_inputs()))
    if grading():
        rec.call("y_secret", attention, *(t.to(rec.device) for t in secret_inputs()))


attention_by_hand = Check("attention_by_hand", _probe_by_hand)


def _probe_average(attention: Callable, rec: Recorder) -> None:
    queries, keys, same, different = (t.to(rec.device) for t in average_inputs())
    rec.call("y", attention, queries.clone(), keys.clone(), same)
    rec.call("y_anchor", attention, queries.clone(), keys.clone(), different)


attention_weighted_average = Check("attention_weighted_average", _probe_average)


def _probe_attention_vs_pytorch(attention: Callable, rec: Recorder) -> None:
    *inputs, upstream = small_inputs()
    queries, keys, values = (t.to(rec.device).requires_grad_(True) for t in inputs)
    y = rec.call("y", attention, queries, keys, values)
    modules.backward(rec, y, upstream, {"queries": queries, "keys": keys, "values": values})


attention_vs_pytorch = Check("attention_vs_pytorch", _probe_attention_vs_pytorch)


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

def _probe_gradient_case(cls: Callable, rec: Recorder, k: int, seed: int, x: torch.Tensor,
                         upstream: torch.Tensor) -> None:
    module = _make(cls, rec, "grad_module", k, seed)
    if module is not None:
        x = x.to(rec.device).requires_grad_(True)
        modules.backward(rec, rec.call("y_grad", module, x), upstream, {"x": x}, module)


def small_module_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """x (2, 3, 4) and the upstream gradient of the output."""
    return randn(2, 3, 4, seed=751), randn(2, 3, 4, seed=752)


def _probe_module_vs_pytorch(cls: Callable, rec: Recorder) -> None:
    _probe_gradient_case(cls, rec, 4, 750, *small_module_inputs())


self_attention_qkv_vs_pytorch = Check("self_attention_qkv_vs_pytorch", _probe_module_vs_pytorch)


def module_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=650 + i)


def gradient_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """x (2, 5, 4) of the oracle check's gradient case, and the upstream gradient of the output."""
    return randn(2, 5, 4, seed=701), randn(2, 5, 4, seed=702)


def _probe_module_oracle(cls: Callable, rec: Recorder) -> None:
    for i, (b, t, k) in enumerate(MODULE_SHAPES):
        module = _make(cls, rec, f"module{i}", k, 600 + i)
        if module is None:
            return
        _run(rec, f"y{i}", module, module_x(i, b, t, k))
    _probe_gradient_case(cls, rec, 4, 700, *gradient_inputs())


self_attention_qkv_oracle = Check("self_attention_qkv_oracle", _probe_module_oracle)


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
