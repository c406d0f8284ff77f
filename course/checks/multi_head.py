"""Probes for assignment 04: split_heads, merge_heads, MultiHeadAttention (narrow) and WideMultiHeadAttention.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/multi_head.py, hidden under grading) decides. Oracles: torch.stack/torch.cat for the head layout,
nn.MultiheadAttention for the narrow module, F.scaled_dot_product_attention on the projections for the wide one.
Under grading every random input and weight comes from the grader's secret seed, and the cases worked by hand add a
secret random case (see course/checks/seeds.py).
"""

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

import torch
from torch import nn

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading

LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")
#: the query projection gets twice the usual spread: sharper attention, so a wrong scale shows clearly
GAINS = MappingProxyType({"to_queries.weight": 2.0})


# ---------------------------------------------------------------- split_heads and merge_heads

SPLIT_CASES = ((2, 5, 12, 3), (3, 7, 8, 4), (1, 4, 6, 1), (2, 3, 6, 6))  # (b, t, k, heads)
MERGE_CASES = ((2, 3, 5, 4), (3, 4, 7, 2), (1, 1, 4, 6), (2, 6, 3, 1))  # (b, heads, t, s)
#: under grading, the secret case the by-hand checks add: split (b, t, k, heads) and merge (b, heads, t, s)
SECRET_SPLIT = (2, 3, 8, 2)
SECRET_MERGE = (2, 3, 4, 2)


def hand_x() -> torch.Tensor:
    """The notebook's example: (b, t, k) = (1, 3, 4), entry 4·position + feature."""
    return torch.arange(12.0).view(1, 3, 4)


def hand_heads() -> torch.Tensor:
    """The notebook's two heads of hand_x(), as it writes them out: head 0 = [[0, 1], [4, 5], [8, 9]], head 1 =
    [[2, 3], [6, 7], [10, 11]]. (1, 2, 3, 2)"""
    return torch.tensor([[[[0.0, 1.0], [4.0, 5.0], [8.0, 9.0]], [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]]])


def split_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=100 + i)


def merge_x(i: int, b: int, h: int, t: int, s: int) -> torch.Tensor:
    return randn(b, h, t, s, seed=150 + i)


def secret_split_x() -> torch.Tensor:
    """Under grading, the random input split_heads_by_hand adds (its seed is salted with the grader's secret)."""
    b, t, k, _ = SECRET_SPLIT
    return randn(b, t, k, seed=170)


def secret_merge_x() -> torch.Tensor:
    """Under grading, the random input merge_heads_by_hand adds."""
    return randn(*SECRET_MERGE, seed=171)


def _probe_split_by_hand(split_heads, rec: Recorder) -> None:
    rec.call("y", split_heads, hand_x().to(rec.device), 2)
    if grading():
        rec.call("y_secret", split_heads, secret_split_x().to(rec.device), SECRET_SPLIT[3])


split_heads_by_hand = Check("split_heads_by_hand", _probe_split_by_hand)


def _probe_split_oracle(split_heads, rec: Recorder) -> None:
    for i, (b, t, k, heads) in enumerate(SPLIT_CASES):
        rec.call(f"y{i}", split_heads, split_x(i, b, t, k).to(rec.device), heads)


split_heads_oracle = Check("split_heads_oracle", _probe_split_oracle)


def _probe_merge_by_hand(merge_heads, rec: Recorder) -> None:
    rec.call("y", merge_heads, hand_heads().to(rec.device))
    if grading():
        rec.call("y_secret", merge_heads, secret_merge_x().to(rec.device))


merge_heads_by_hand = Check("merge_heads_by_hand", _probe_merge_by_hand)


def _probe_merge_oracle(merge_heads, rec: Recorder) -> None:
    for i, (b, h, t, s) in enumerate(MERGE_CASES):
        rec.call(f"y{i}", merge_heads, merge_x(i, b, h, t, s).to(rec.device))


merge_heads_oracle = Check("merge_heads_oracle", _probe_merge_oracle)


# ---------------------------------------------------------------- the modules

def _make(cls: Callable, rec: Recorder, key: str, k: int, heads: int, seed: int) -> nn.Module | None:
    """Build the student's module, record its structure, and load the check's weights (seed) into it."""
    return modules.build(rec, key, cls, k, heads, seed=seed, gains=GAINS, layers=LAYERS)


def _forward_kwargs(context: torch.Tensor | None, mask: torch.Tensor | None, device: torch.device) -> dict:
    kwargs = {}
    if context is not None:
        kwargs["context"] = context.to(device)
    if mask is not None:
        kwargs["mask"] = mask.to(device)
    return kwargs


def _run(rec: Recorder, key: str, module: nn.Module, x: torch.Tensor, context: torch.Tensor | None = None,
         mask: torch.Tensor | None = None) -> None:
    """Record module(x, context=..., mask=...) without gradients, on fresh copies of the check's inputs."""
    with torch.no_grad():
        rec.call(key, module, x.to(rec.device), **_forward_kwargs(context, mask, rec.device))


# ---------------------------------------------------------------- structure

STRUCTURE = MappingProxyType({False: (12, 3), True: (6, 3)})  # wide -> (k, heads)


def structure_x(k: int) -> torch.Tensor:
    return randn(2, 4, k, seed=201)


def _probe_structure(cls: Callable, rec: Recorder, wide: bool) -> None:
    k, heads = STRUCTURE[wide]
    module = _make(cls, rec, "module", k, heads, 200)
    if module is not None:
        _run(rec, "y", module, structure_x(k))


multi_head_structure = Check("multi_head_structure", lambda cls, rec: _probe_structure(cls, rec, False))
wide_structure = Check("wide_structure", lambda cls, rec: _probe_structure(cls, rec, True))


def _probe_indivisible(cls: Callable, rec: Recorder) -> None:
    rec.call("indivisible", cls, 10, 4)
    _probe_structure(cls, rec, False)


multi_head_indivisible = Check("multi_head_indivisible", _probe_indivisible)


# ---------------------------------------------------------------- shapes and context

def context_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return randn(2, 3, 8, seed=401), randn(2, 5, 8, seed=402)


def _probe_context(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 8, 2, 400)
    if module is None:
        return
    x, context = context_inputs()
    _run(rec, "y_self", module, x)
    _run(rec, "y_explicit", module, x, x)
    _run(rec, "y_cross", module, x, context)


multi_head_context = Check("multi_head_context", _probe_context)
wide_context = Check("wide_context", _probe_context)


# ---------------------------------------------------------------- a causal mask

CAUSAL_T = 6


def causal_inputs() -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    x = randn(2, CAUSAL_T, 8, seed=421)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0
    causal = torch.ones(CAUSAL_T, CAUSAL_T, dtype=torch.bool).tril()  # (t, t)
    return x, x_changed, (causal, causal.expand(2, CAUSAL_T, CAUSAL_T).clone())


def _probe_causal(cls: Callable, rec: Recorder) -> None:
    module = _make(cls, rec, "module", 8, 4, 420)
    if module is None:
        return
    x, x_changed, masks = causal_inputs()
    for i, mask in enumerate(masks):
        _run(rec, f"y{i}", module, x, None, mask)
        _run(rec, f"y_changed{i}", module, x_changed, None, mask)


multi_head_causal = Check("multi_head_causal", _probe_causal)


# ---------------------------------------------------------------- against the oracle

@dataclass(frozen=True)
class Case:
    """One oracle case: model size k, heads, batch b, tq queries, tk keys (None: self-attention) and a mask kind
    (None, "causal", "random" or "padding")."""

    k: int
    heads: int
    b: int
    tq: int
    tk: int | None = None
    mask: str | None = None


# head size != k, tq != tk, batch > 1, three mask shapes
NARROW_CASES = (Case(12, 3, 3, 5), Case(8, 2, 2, 4, 7), Case(8, 4, 2, 6, mask="causal"),
                Case(12, 4, 2, 5, 6, "random"), Case(6, 3, 2, 5, 5, "padding"), Case(6, 1, 2, 3))
WIDE_CASES = (Case(6, 3, 3, 5), Case(4, 2, 2, 4, 7), Case(4, 4, 2, 6, mask="causal"),
              Case(6, 2, 2, 5, 6, "random"), Case(4, 3, 2, 5, 5, "padding"))


def case_inputs(i: int, case: Case) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """x, context and mask of one case, on the CPU."""
    k, b, tq, tk, kind = case.k, case.b, case.tq, case.tk, case.mask
    x = randn(b, tq, k, seed=250 + i)
    context = None if tk is None else randn(b, tk, k, seed=260 + i)
    n = tq if tk is None else tk
    if kind == "causal":
        mask = torch.ones(tq, n, dtype=torch.bool).tril()  # (tq, tk)
    elif kind == "random":
        mask = torch.rand(b, tq, n, generator=generator(270 + i)) < 0.5
        mask[:, torch.arange(tq), torch.arange(tq) % n] = True  # nobody is left with nothing to attend to; (b, tq, tk)
    elif kind == "padding":
        mask = (torch.arange(n) < torch.tensor([n, 3])[:, None])[:, None, :]  # (b, 1, tk)
    else:
        mask = None
    return x, context, mask


def _probe_oracle(cls: Callable, rec: Recorder, wide: bool) -> None:
    for i, case in enumerate(WIDE_CASES if wide else NARROW_CASES):
        module = _make(cls, rec, f"module{i}", case.k, case.heads, 300 + 20 * i)
        if module is None:
            return
        x, context, mask = case_inputs(i, case)
        _run(rec, f"y{i}", module, x, context, mask)


multi_head_oracle = Check("multi_head_oracle", lambda cls, rec: _probe_oracle(cls, rec, False))
wide_oracle = Check("wide_oracle", lambda cls, rec: _probe_oracle(cls, rec, True))


# ---------------------------------------------------------------- gradients, and no loop over the heads

def count_matmuls(y: torch.Tensor) -> int:
    """Matrix products in the autograd graph of y: a loop over heads repeats them once per head."""
    seen, stack, count = set(), [y.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__.lower()
        if "mm" in name or "matmul" in name or "scaleddotproduct" in name or "attention" in name:
            count += 1
        stack.extend(next_node for next_node, _ in node.next_functions)
    return count


#: a case with gradients: k, heads, the module's seed, x (b, tq, k), context (b, tk, k), mask or None, upstream
GradientCase = tuple[int, int, int, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]


def _probe_gradient_case(cls: Callable, rec: Recorder, case: GradientCase) -> None:
    """Record forward(x, context=..., mask=...), its matrix products and the gradients a loss on it leaves on x,
    the context and every parameter."""
    k, heads, seed, x, context, mask, upstream = case
    module = _make(cls, rec, "module", k, heads, seed)
    if module is None:
        return
    x, context = (t.to(rec.device).requires_grad_(True) for t in (x, context))
    y = rec.call("y", module, x, **_forward_kwargs(context, mask, rec.device))
    if isinstance(y, torch.Tensor) and y.requires_grad:
        rec.fact("matmuls", count_matmuls(y))
    modules.backward(rec, y, upstream, {"x": x, "context": context}, module)


GRAD_K, GRAD_HEADS = 16, 8


def hidden_gradient_case() -> GradientCase:
    """x (2, 5, 16), context (2, 7, 16), no mask."""
    return GRAD_K, GRAD_HEADS, 440, randn(2, 5, 16, seed=441), randn(2, 7, 16, seed=442), None, \
        randn(2, 5, 16, seed=443)


multi_head_gradients = Check("multi_head_gradients",
                             lambda cls, rec: _probe_gradient_case(cls, rec, hidden_gradient_case()))


# ---------------------------------------------------------------- a small case against PyTorch, visible

def small_case(wide: bool) -> GradientCase:
    """Cross-attention on a batch of two, 3 queries and 4 keys, a mask (b, tq, tk): 8 heads of size 2 (narrow) or 2
    heads of size 4 (wide)."""
    k, heads, seed = (4, 2, 475) if wide else (GRAD_K, GRAD_HEADS, 465)
    mask = torch.rand(2, 3, 4, generator=generator(seed + 2)) < 0.5
    mask[:, torch.arange(3), torch.arange(3)] = True  # every query may attend to something
    return k, heads, seed, randn(2, 3, k, seed=seed + 1), randn(2, 4, k, seed=seed + 3), mask, \
        randn(2, 3, k, seed=seed + 4)


multi_head_vs_pytorch = Check("multi_head_vs_pytorch",
                              lambda cls, rec: _probe_gradient_case(cls, rec, small_case(False)))
wide_vs_pytorch = Check("wide_vs_pytorch", lambda cls, rec: _probe_gradient_case(cls, rec, small_case(True)))
