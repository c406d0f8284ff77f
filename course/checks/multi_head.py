"""Probes for assignment 04: split_heads, merge_heads, MultiHeadAttention (narrow) and WideMultiHeadAttention,
judged in course/judges/multi_head.py from the cases declared here. A module is called forward(x, context=...,
mask=...), each case passing only the inputs it has."""

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from types import MappingProxyType

import torch

from course.checks import kinds, modules
from course.checks.check import Check, when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import randn
from course.checks.evidence import Recorder
from course.checks.kinds import Built, Case, Runs, builds_and_runs, calls, given, module_case, random_case, shapes

LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})
MODULE_OPTIONS = MappingProxyType({"gains": GAINS, "facts": modules.sharing(LAYERS)})

# ---------------------------------------------------------------- split_heads and merge_heads

SPLIT_CASES = ((2, 5, 12, 3), (3, 7, 8, 4), (1, 4, 6, 1), (2, 3, 6, 6))  # (b, t, k, heads)
MERGE_CASES = ((2, 3, 5, 4), (3, 4, 7, 2), (1, 1, 4, 6), (2, 6, 3, 1))  # (b, heads, t, s)


def hand_x() -> torch.Tensor:
    """The notebook's example: (b, t, k) = (1, 3, 4), entry 4·position + feature."""
    return torch.arange(12.0).view(1, 3, 4)


def hand_heads() -> torch.Tensor:
    """The notebook's heads of hand_x(): [[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 11]]. (1, 2, 3, 2)"""
    return torch.tensor([[[[0.0, 1.0], [4.0, 5.0], [8.0, 9.0]], [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]]])


def _split_inputs(make: Callable[[], torch.Tensor], heads: int) -> dict:
    return {"x": make(), "heads": heads}


def split_case(key: str, b: int, t: int, k: int, heads: int, seed: int, secret: bool = False) -> Case:
    """split_heads(x, heads) on a random x (b, t, k) drawn from seed."""
    return Case(key, partial(_split_inputs, partial(randn, b, t, k, seed=seed), heads),
                f"x of shape {(b, t, k)}, {heads} heads", secret)


split_heads_by_hand = calls("split_heads_by_hand", (
    Case("y", partial(_split_inputs, hand_x, 2), "x = arange(12) as (1, 3, 4), 2 heads"),
    split_case("y_secret", 2, 3, 8, 2, 170, secret=True)))
split_heads_oracle = calls("split_heads_oracle", tuple(
    split_case(f"y{i}", *case, 100 + i) for i, case in enumerate(SPLIT_CASES)))
merge_heads_by_hand = calls("merge_heads_by_hand", (given("y", hand_heads, "the two heads of arange(12) as (1, 3, 4)"),
                                                    random_case("y_secret", (2, 3, 4, 2), 171, secret=True)))
merge_heads_oracle = calls("merge_heads_oracle", shapes("y", MERGE_CASES, seed=150))

# ---------------------------------------------------------------- the modules: their inputs


def attention_case(key: str, heads: int, shape: tuple[int, int, int], seeds: tuple[int, int, int], *,
                   tk: int | None = None, mask: str | None = None, changed: int | None = None,
                   upstream: int | None = None) -> Case:
    """forward on x of shape (b, tq, k), a context (b, tk, k) unless tk is None, a mask unless mask is None
    ("padding": all but 3 keys of sequence 1 hidden), from seeds; changed: a position of x shifted by 3; upstream: the
    seed of an upstream gradient (b, tq, k). Named with k and its number of heads."""
    case = module_case(key, shape, seeds[0], context=None if tk is None else (tk, seeds[1]),
                       mask=None if mask is None else kinds.Mask(mask, lengths=(tk or shape[1], 3), seed=seeds[2]),
                       changed=None if changed is None else kinds.Shift(at=changed), upstream=upstream)
    return replace(case, label=f"k={shape[2]}, {heads} heads, {case.label}" + (", no context" if tk is None else ""))


# ---------------------------------------------------------------- structure and context

#: a module of 3 heads, called once: k = 12 (narrow), k = 6 (wide)
multi_head_structure = builds_and_runs("multi_head_structure", (Runs(Built(key="module", args=(12, 3), seed=200), (
    attention_case("y", heads=3, shape=(2, 4, 12), seeds=(201, 0, 0)),)),), **MODULE_OPTIONS)
wide_structure = builds_and_runs("wide_structure", (Runs(Built(key="module", args=(6, 3), seed=200), (
    attention_case("y", heads=3, shape=(2, 4, 6), seeds=(202, 0, 0)),)),), **MODULE_OPTIONS)


def _probe_indivisible(cls: type, rec: Recorder) -> None:
    rec.call("indivisible", cls, 10, 4)
    multi_head_structure.probe(cls, rec)


multi_head_indivisible = Check("multi_head_indivisible", _probe_indivisible)

#: forward(x), forward(x, context=x) and forward(x, context=c)
CONTEXT_RUNS = (Runs(Built(key="module", args=(8, 2), seed=400), (
    attention_case("y_self", heads=2, shape=(2, 3, 8), seeds=(401, 0, 0)),
    attention_case("y_explicit", heads=2, shape=(2, 3, 8), seeds=(401, 401, 0), tk=3),
    attention_case("y_cross", heads=2, shape=(2, 3, 8), seeds=(401, 402, 0), tk=5))),)
multi_head_context = builds_and_runs("multi_head_context", CONTEXT_RUNS, **MODULE_OPTIONS)
wide_context = builds_and_runs("wide_context", CONTEXT_RUNS, **MODULE_OPTIONS)

# ---------------------------------------------------------------- a causal mask

CHANGED = 4
#: x (y<i>), then x with position CHANGED changed (y_changed<i>), under a causal mask (t, t), then (b, t, t)
CAUSAL_CASES = tuple(attention_case(f"{name}{i}", heads=4, shape=(2, 6, 8), seeds=(421, 0, 0), mask=mask,
                                    changed=changed)
                     for i, mask in enumerate(("causal", "batched causal"))
                     for name, changed in (("y", None), ("y_changed", CHANGED)))
multi_head_causal = builds_and_runs("multi_head_causal",
                                    (Runs(Built(key="module", args=(8, 4), seed=420), CAUSAL_CASES),),
                                    **MODULE_OPTIONS)

# ---------------------------------------------------------------- against the oracle

# (k, heads, b, tq, tk, mask): head size != k, tq != tk, batch > 1, three mask shapes
NARROW_CASES = ((12, 3, 3, 5, None, None), (8, 2, 2, 4, 7, None), (8, 4, 2, 6, None, "causal"),
                (12, 4, 2, 5, 6, "random"), (6, 3, 2, 5, 5, "padding"), (6, 1, 2, 3, None, None))
WIDE_CASES = ((6, 3, 3, 5, None, None), (4, 2, 2, 4, 7, None), (4, 4, 2, 6, None, "causal"),
              (6, 2, 2, 5, 6, "random"), (4, 3, 2, 5, 5, "padding"))


def oracle_runs(table: tuple, seed: int) -> tuple[Runs, ...]:
    """One module per case of table, (k, heads, b, tq, tk, mask), with its own weights; inputs from seed + i, ..."""
    return tuple(Runs(Built(key=f"module{i}", args=(k, heads), seed=300 + 20 * i), (
        attention_case(f"y{i}", heads, (b, tq, k), (seed + i, seed + 10 + i, seed + 20 + i), tk=tk, mask=mask),))
        for i, (k, heads, b, tq, tk, mask) in enumerate(table))


multi_head_oracle = builds_and_runs("multi_head_oracle", oracle_runs(NARROW_CASES, seed=250), **MODULE_OPTIONS)
wide_oracle = builds_and_runs("wide_oracle", oracle_runs(WIDE_CASES, seed=280), **MODULE_OPTIONS)

# ---------------------------------------------------------------- gradients, and no loop over the heads


def count_matmuls(y: torch.Tensor) -> int:
    """Matrix products in the autograd graph of y: a loop over heads repeats them once per head."""
    seen, stack = set(), [y.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    words = ("mm", "matmul", "scaleddotproduct", "attention")
    return sum(any(word in type(node).__name__.lower() for word in words) for node in seen)


def record_matmuls(rec: Recorder, y: object) -> None:
    """The number of matrix products in the graph of the output, as the fact matmuls."""
    if isinstance(y, torch.Tensor) and y.requires_grad:
        rec.fact("matmuls", count_matmuls(y))


GRAD_K, GRAD_HEADS = 16, 8


def gradient_runs(k: int, heads: int, seed: int, tq: int, tk: int, mask: str | None,
                  seeds: tuple[int, int, int, int]) -> tuple[Runs, ...]:
    """One module (seed) on x (2, tq, k), context (2, tk, k), a mask or none, an upstream: from seeds."""
    return (Runs(Built(key="module", args=(k, heads), seed=seed), (attention_case(
        "y", heads, (2, tq, k), seeds[:3], tk=tk, mask=mask, upstream=seeds[3]),)),)


multi_head_gradients = kinds.builds_and_runs_backward(
    "multi_head_gradients", gradient_runs(GRAD_K, GRAD_HEADS, 440, 5, 7, None, (441, 442, 0, 443)),
    observe=record_matmuls, **MODULE_OPTIONS)
# a small case against PyTorch, visible: 8 heads of size 2 (narrow) or 2 heads of size 4 (wide), a mask (b, tq, tk)
multi_head_vs_pytorch = kinds.builds_and_runs_backward(
    "multi_head_vs_pytorch", gradient_runs(GRAD_K, GRAD_HEADS, 465, 3, 4, "random", (466, 468, 467, 469)),
    observe=record_matmuls, **MODULE_OPTIONS)
wide_vs_pytorch = kinds.builds_and_runs_backward(
    "wide_vs_pytorch", gradient_runs(4, 2, 475, 3, 4, "random", (476, 478, 477, 479)), **MODULE_OPTIONS)
