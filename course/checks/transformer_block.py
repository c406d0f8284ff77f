"""Probes for assignment 05: FeedForward, TransformerBlock and TransformerClassifier.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/transformer_block.py, hidden under grading) decides. The probe records the module's structure
(weights.describe, and which submodules look like blocks) and loads the check's weights into every parameter; the
judge maps the roles from those structure facts, recreates the values by parameter name and computes its oracle
(nn.TransformerEncoderLayer for the block). Under grading every random input and weight comes from the grader's
secret seed, and the case worked by hand adds a secret random case (see course/checks/seeds.py).
"""

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading

# (b, t, k, heads, ff_mult): batch > 1, odd lengths, head size != k, a non-default ff_mult
BLOCK_SHAPES = ((2, 5, 12, 3, 4), (3, 7, 8, 2, 2), (1, 4, 6, 1, 4), (2, 1, 8, 4, 3))
# (b, t, vocab, k, heads, depth, classes)
CLASSIFIER_SHAPES = ((4, 6, 11, 8, 2, 2, 3), (3, 5, 7, 12, 3, 1, 2), (2, 9, 5, 6, 2, 3, 4))
# (b, t, k, hidden)
FF_SHAPES = ((2, 5, 6, 10), (3, 1, 4, 16), (1, 7, 8, 32))

BLOCK_PARTS = ("attention", "norm1", "norm2", "ff")
#: at most this many block-like submodules are recorded
MAX_BLOCKS = 16


def _block_facts(module: nn.Module) -> list[dict]:
    """The module itself, and every submodule that has the four parts of a block: which parts it has (their
    types), whether norm1 and norm2 are one module, and its attention's number of heads."""
    found = []
    for name, sub in module.named_modules():
        parts = {part: getattr(sub, part, None) for part in BLOCK_PARTS}
        if name and not all(isinstance(p, nn.Module) for p in parts.values()):
            continue
        attention = parts["attention"]
        heads = getattr(attention, "heads", getattr(attention, "num_heads", None))
        found.append({
            "name": name,
            "parts": {part: type(p).__name__ if isinstance(p, nn.Module) else None for part, p in parts.items()},
            "shared_norms": isinstance(parts["norm1"], nn.Module) and parts["norm1"] is parts["norm2"],
            "heads": heads if isinstance(heads, int) and not isinstance(heads, bool) else None,
        })
        if len(found) > MAX_BLOCKS:
            break
    return found


def _build(rec: Recorder, key: str, cls: Callable, args: tuple, seed: int) -> nn.Module | None:
    """modules.build with the blocks' facts, in evaluation mode, the check's weights (seed) loaded."""
    return modules.build(rec, key, cls, *args, seed=seed, facts=lambda m: {"blocks": _block_facts(m)}, train=False)


def _run(rec: Recorder, key: str, module: Any, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Record module(x) (or module(x, mask=mask)) without gradients, on a fresh copy of the check's input."""
    kwargs = {} if mask is None else {"mask": mask.to(rec.device)}
    with torch.no_grad():
        rec.call(key, module, x.to(rec.device), **kwargs)


# ================================================================ FeedForward

#: the notebook's example, loaded into FeedForward(1, 2) by role
HAND_WEIGHTS = MappingProxyType({"f1w": ((1.0,), (-1.0,)), "f1b": (0.0, 0.0), "f2w": ((1.0, 1.0),), "f2b": (-1.0,)})


def hand_values() -> dict[str, torch.Tensor]:
    """HAND_WEIGHTS as tensors, by role."""
    return {role: torch.tensor(value) for role, value in HAND_WEIGHTS.items()}


def hand_x() -> torch.Tensor:
    return torch.tensor([[[-2.0], [0.5], [3.0]]])  # (1, 3, 1)


def hand_secret_x() -> torch.Tensor:
    """Under grading, the random input the hand example's weights also get (its seed is salted with the grader's
    secret)."""
    return randn(2, 5, 1, seed=951)


def _set_by_hand(ff: nn.Module) -> None:
    """Load the notebook's example into FeedForward(1, 2): first = [[1], [-1]] (bias 0), second = [[1, 1]] (bias
    -1). The layers are told apart by their sizes."""
    hand = hand_values()
    with torch.no_grad():
        for layer in (m for m in ff.modules() if isinstance(m, nn.Linear)):
            role = "f1" if (layer.in_features, layer.out_features) == (1, 2) else "f2"
            if tuple(layer.weight.shape) == tuple(hand[f"{role}w"].shape):
                layer.weight.copy_(hand[f"{role}w"])
            if layer.bias is not None and tuple(layer.bias.shape) == tuple(hand[f"{role}b"].shape):
                layer.bias.copy_(hand[f"{role}b"])


def ff_structure_x() -> torch.Tensor:
    return randn(2, 4, 6, seed=901)


def _probe_ff_structure(FeedForward: Callable, rec: Recorder) -> None:
    ff = _build(rec, "module", FeedForward, (6, 10), 900)
    if ff is not None:
        _run(rec, "y", ff, ff_structure_x())
    hand = _build(rec, "hand", FeedForward, (1, 2), 950)
    if hand is not None:
        _set_by_hand(hand)
        _run(rec, "y_hand", hand, hand_x())
        if grading():
            _run(rec, "y_hand_secret", hand, hand_secret_x())


feed_forward_structure = Check("feed_forward_structure", _probe_ff_structure)


def ff_case_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=1100 + i)


def ff_local_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    x = randn(2, 5, 4, seed=1201)
    x_changed = x.clone()
    x_changed[:, 3] += 1.0
    return x, x_changed


def _probe_ff_oracle(FeedForward: Callable, rec: Recorder) -> None:
    for i, (b, t, k, hidden) in enumerate(FF_SHAPES):
        ff = _build(rec, f"module{i}", FeedForward, (k, hidden), 1000 + 20 * i)
        if ff is not None:
            _run(rec, f"y{i}", ff, ff_case_x(i, b, t, k))
    ff = _build(rec, "local", FeedForward, (4, 8), 1200)
    if ff is not None:
        x, x_changed = ff_local_inputs()
        _run(rec, "y_local", ff, x)
        _run(rec, "y_local_changed", ff, x_changed)


feed_forward_oracle = Check("feed_forward_oracle", _probe_ff_oracle)


# ================================================================ TransformerBlock

def structure_x(k: int) -> torch.Tensor:
    return randn(2, 4, k, seed=1251 + k)


STRUCTURE_CASES = ((12, 3, None, 1250), (8, 2, 2, 1260))  # (k, heads, ff_mult or None for the default, seed)


def _probe_block_structure(TransformerBlock: Callable, rec: Recorder) -> None:
    for i, (k, heads, ff_mult, seed) in enumerate(STRUCTURE_CASES):
        args = (k, heads) if ff_mult is None else (k, heads, ff_mult)
        block = _build(rec, f"module{i}", TransformerBlock, args, seed)
        if block is None:
            return
        _run(rec, f"y{i}", block, structure_x(k))


transformer_block_structure = Check("transformer_block_structure", _probe_block_structure)


def normalised_x() -> torch.Tensor:
    return 3.0 * randn(2, 5, 8, seed=1301) + 1.0


def _probe_normalised(TransformerBlock: Callable, rec: Recorder) -> None:
    block = _build(rec, "module", TransformerBlock, (8, 2), 1300)
    if block is None:
        return
    with torch.no_grad():  # a new block's norms: gain 1, bias 0 (the check's values everywhere else)
        for norm in (m for m in block.modules() if isinstance(m, nn.LayerNorm)):
            norm.reset_parameters()
    _run(rec, "y", block, normalised_x())


transformer_block_normalised = Check("transformer_block_normalised", _probe_normalised)


def small_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (2, 3, 4), a causal mask (3, 3) and the upstream gradient (2, 3, 4)."""
    return randn(2, 3, 4, seed=1651), torch.ones(3, 3, dtype=torch.bool).tril(), randn(2, 3, 4, seed=1652)


def _probe_block_backward(rec: Recorder, key: str, block: nn.Module, x: torch.Tensor, upstream: torch.Tensor,
                          mask: torch.Tensor | None = None) -> None:
    """Record block(x[, mask]) and the gradients of sum(output · upstream) for x and every parameter."""
    x = x.to(rec.device).requires_grad_(True)
    kwargs = {} if mask is None else {"mask": mask.to(rec.device)}
    modules.record_backward(rec, key, block, x, **kwargs, loss=lambda y: (y * upstream.to(rec.device)).sum(),
                            inputs={"x": x})


def _probe_block_small_case(TransformerBlock: Callable, rec: Recorder) -> None:
    block = _build(rec, "module", TransformerBlock, (4, 2), 1650)
    if block is None:
        return
    x, causal, upstream = small_case()
    if isinstance(getattr(block, "ff", None), nn.Module):
        _run(rec, "ff", block.ff, x)
    _run(rec, "y", block, x)
    _run(rec, "y_masked", block, x, causal)
    _probe_block_backward(rec, "y_grad", block, x, upstream, causal)


transformer_block_small_case = Check("transformer_block_small_case", _probe_block_small_case)


def block_case_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=1390 + i)


def _probe_block_oracle(TransformerBlock: Callable, rec: Recorder) -> None:
    for i, (b, t, k, heads, ff_mult) in enumerate(BLOCK_SHAPES):
        block = _build(rec, f"module{i}", TransformerBlock, (k, heads, ff_mult), 1400 + 50 * i)
        if block is None:
            return
        x = block_case_x(i, b, t, k)
        if isinstance(getattr(block, "ff", None), nn.Module):
            _run(rec, f"ff{i}", block.ff, x)
        _run(rec, f"y{i}", block, x)


transformer_block_oracle = Check("transformer_block_oracle", _probe_block_oracle)


def mask_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, t = 3, 6
    causal = torch.ones(t, t, dtype=torch.bool).tril()  # (t, t)
    padding = (torch.arange(t) < torch.tensor([6, 4, 2])[:, None]).unsqueeze(1)  # (b, 1, t)
    return randn(b, t, 8, seed=1601), causal, padding


def _probe_block_mask(TransformerBlock: Callable, rec: Recorder) -> None:
    block = _build(rec, "module", TransformerBlock, (8, 2, 4), 1600)
    if block is None:
        return
    x, causal, padding = mask_inputs()
    if isinstance(getattr(block, "ff", None), nn.Module):
        _run(rec, "ff", block.ff, x)
    _run(rec, "y_causal", block, x, causal)
    _run(rec, "y_padding", block, x, padding)


transformer_block_mask = Check("transformer_block_mask", _probe_block_mask)


def gradient_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return randn(2, 5, 8, seed=1701), randn(2, 5, 8, seed=1702)


def permutation_x() -> torch.Tensor:
    return randn(2, 6, 8, seed=1801)


PERMUTATION = (5, 2, 0, 4, 1, 3)


def _probe_block_gradients(TransformerBlock: Callable, rec: Recorder) -> None:
    block = _build(rec, "module", TransformerBlock, (8, 2), 1700)
    if block is not None:
        _probe_block_backward(rec, "y", block, *gradient_inputs())
    block = _build(rec, "perm", TransformerBlock, (8, 2), 1800)
    if block is not None:
        x = permutation_x()
        _run(rec, "y_plain", block, x)
        _run(rec, "y_perm", block, x[:, list(PERMUTATION)])


transformer_block_gradients = Check("transformer_block_gradients", _probe_block_gradients)


# ================================================================ TransformerClassifier

CLASSIFIER_STRUCTURE = (11, 8, 2, 3, 4)  # (vocab, k, heads, depth, classes)


def structure_tokens() -> torch.Tensor:
    return torch.randint(0, 11, (5, 7), generator=generator(1901))


def _probe_classifier_structure(TransformerClassifier: Callable, rec: Recorder) -> None:
    model = _build(rec, "module", TransformerClassifier, CLASSIFIER_STRUCTURE, 1900)
    if model is not None:
        _run(rec, "y", model, structure_tokens())


transformer_classifier_structure = Check("transformer_classifier_structure", _probe_classifier_structure)


def case_tokens(i: int, b: int, t: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=generator(2050 + i))


def _probe_classifier_oracle(TransformerClassifier: Callable, rec: Recorder) -> None:
    for i, (b, t, vocab, k, heads, depth, classes) in enumerate(CLASSIFIER_SHAPES):
        model = _build(rec, f"module{i}", TransformerClassifier, (vocab, k, heads, depth, classes), 2100 + 100 * i)
        if model is None:
            return
        _run(rec, f"y{i}", model, case_tokens(i, b, t, vocab))


transformer_classifier_oracle = Check("transformer_classifier_oracle", _probe_classifier_oracle)


ORDER_SHAPE = (9, 8, 2, 2, 3)
TOKEN_PERMUTATION = (6, 2, 0, 4, 1, 5, 3)


def order_tokens() -> torch.Tensor:
    return torch.randint(0, 9, (4, 7), generator=generator(2201))


def gradient_tokens() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(9).view(3, 3), torch.tensor([0, 1, 2])  # every token used once; the labels


def _probe_classifier_order(TransformerClassifier: Callable, rec: Recorder) -> None:
    model = _build(rec, "order", TransformerClassifier, ORDER_SHAPE, 2200)
    if model is not None:
        tokens = order_tokens()
        _run(rec, "y", model, tokens)
        _run(rec, "y_perm", model, tokens[:, list(TOKEN_PERMUTATION)])


transformer_classifier_order_blind = Check("transformer_classifier_order_blind", _probe_classifier_order)


def _probe_classifier_gradients(TransformerClassifier: Callable, rec: Recorder) -> None:
    model = _build(rec, "module", TransformerClassifier, ORDER_SHAPE, 2300)
    if model is not None:
        tokens, labels = (t.to(rec.device) for t in gradient_tokens())
        modules.record_backward(rec, "y_grad", model, tokens, loss=lambda y: F.cross_entropy(y, labels))


transformer_classifier_gradients = Check("transformer_classifier_gradients", _probe_classifier_gradients)
