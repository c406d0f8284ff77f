"""Probes for assignment 05 (judges in course/judges/transformer_block.py): FeedForward, TransformerBlock and
TransformerClassifier, all declared (:func:`builds_and_runs`). Every module's structure is recorded with which of
its submodules look like blocks (block_facts), so that the judge can map the roles whatever they are called."""

from functools import partial
from types import MappingProxyType

import torch
from torch import nn

from course.checks import kinds, modules
from course.checks.check import when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.kinds import Built, Case, Mask, Runs, Shift, builds_and_runs, given, module_case

BLOCK_PARTS = ("attention", "norm1", "norm2", "ff")
#: at most this many block-like submodules are recorded
MAX_BLOCKS = 16


def block_facts(module: nn.Module) -> dict[str, list[dict]]:
    """{"blocks": [...]}: the module itself, and every submodule that has the four parts of a block: which parts it
    has (their types), whether norm1 and norm2 are one module, and its attention's number of heads."""
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
    return {"blocks": found}


#: how every module of these checks is built: its blocks' facts recorded, in evaluation mode
OPTIONS = MappingProxyType({"facts": block_facts, "train": False})


# ================================================================ FeedForward

FF_MODULE = Built(key="module", args=(6, 10), seed=900)
FF_HAND = Built(key="hand", args=(1, 2), seed=950)
FF_CASE = module_case("y", (2, 4, 6), 901, "x of shape (2, 4, 6), hidden=10")


def hand_values() -> dict[str, torch.Tensor]:
    """The notebook's example, loaded into FeedForward(1, 2), by role: FF(x) = |x| - 1."""
    return {"f1w": torch.tensor([[1.0], [-1.0]]), "f1b": torch.zeros(2), "f2w": torch.ones(1, 2), "f2b": -torch.ones(1)}


HAND_CASE = given("y_hand", partial(torch.tensor, [[[-2.0], [0.5], [3.0]]]),  # (1, 3, 1)
                  "first = [[1], [-1]], second = [[1, 1]], bias -1, so FF(x) = |x| - 1; x = -2, 0.5, 3")
#: under grading, a random input the hand example's weights also get (its seed is salted with the grader's secret)
HAND_SECRET_CASE = module_case("y_hand_secret", (2, 5, 1), 951, "the hand example's weights (FF(x) = |x| - 1) on a "
                               "random x of shape (2, 5, 1)", secret=True)


def _set_by_hand(ff: nn.Module) -> None:
    """Load the notebook's example into FeedForward(1, 2), its layers told apart by their sizes."""
    hand = hand_values()
    for layer in (m for m in ff.modules() if isinstance(m, nn.Linear)):
        role = "f1" if (layer.in_features, layer.out_features) == (1, 2) else "f2"
        for p, value in ((layer.weight, hand[f"{role}w"]), (layer.bias, hand[f"{role}b"])):
            if p is not None and p.shape == value.shape:
                p.copy_(value)


feed_forward_structure = builds_and_runs("feed_forward_structure", (
    Runs(FF_HAND, (HAND_CASE, HAND_SECRET_CASE), _set_by_hand), Runs(FF_MODULE, (FF_CASE,))), **OPTIONS)


# (b, t, k, hidden)
FF_SHAPES = ((2, 5, 6, 10), (3, 1, 4, 16), (1, 7, 8, 32))
feed_forward_oracle = builds_and_runs("feed_forward_oracle", (
    *(Runs(Built(key=f"module{i}", args=(k, hidden), seed=1000 + 20 * i),
           (module_case(f"y{i}", (b, t, k), 1100 + i, f"x of shape {(b, t, k)}, hidden={hidden}"),))
      for i, (b, t, k, hidden) in enumerate(FF_SHAPES)),
    Runs(Built(key="local", args=(4, 8), seed=1200),
         (module_case("y_local", (2, 5, 4), 1201, "x of shape (2, 5, 4), hidden=8"),
          module_case("y_local_changed", (2, 5, 4), 1201, "position 3 of x changed",
                      changed=Shift(at=3, by=1.0))))), **OPTIONS)


# ================================================================ TransformerBlock

transformer_block_structure = builds_and_runs("transformer_block_structure", (
    Runs(Built(key="module0", args=(12, 3), seed=1250),
         (module_case("y0", (2, 4, 12), 1263, "x of shape (2, 4, 12), heads=3"),)),
    Runs(Built(key="module1", args=(8, 2, 2), seed=1260),
         (module_case("y1", (2, 4, 8), 1259, "x of shape (2, 4, 8), heads=2"),))),
    **OPTIONS)

NORMALISED = Built(key="module", args=(8, 2), seed=1300)
NORMALISED_CASE = module_case("y", (2, 5, 8), 1301, "x of shape (2, 5, 8), heads=2, norms with gain 1 and bias 0",
                              scale=3.0, shift=1.0)


def _reset_norms(block: nn.Module) -> None:
    """A new block's norms: gain 1, bias 0 (the check's values everywhere else)."""
    for norm in (m for m in block.modules() if isinstance(m, nn.LayerNorm)):
        norm.reset_parameters()


transformer_block_normalised = builds_and_runs("transformer_block_normalised", (
    Runs(NORMALISED, (NORMALISED_CASE,), _reset_norms),), **OPTIONS)

transformer_block_small_case = kinds.builds_and_runs_backward("transformer_block_small_case",
                                               (Runs(Built(key="module", args=(4, 2), seed=1650), (
    module_case("y", (2, 3, 4), 1651, "x of shape (2, 3, 4), heads=2, no mask"),
    module_case("y_masked", (2, 3, 4), 1651, "x of shape (2, 3, 4), heads=2, causal mask", mask="causal"),
    module_case("y_grad", (2, 3, 4), 1651, "x of shape (2, 3, 4), heads=2, causal mask", mask="causal",
                upstream=1652))),), **OPTIONS)

# (b, t, k, heads, ff_mult): batch > 1, odd lengths, head size != k, a non-default ff_mult
BLOCK_SHAPES = ((2, 5, 12, 3, 4), (3, 7, 8, 2, 2), (1, 4, 6, 1, 4), (2, 1, 8, 4, 3))


#: dropout=1.0 in training mode: each sub-layer's output dropped before it is added, the block gives norm2(norm1(x))
DROPOUT_RUNS = Runs(Built(key="dropout", args=(8, 2, 4, 1.0), seed=1560), (
    module_case("y_dropout", (2, 5, 8), 1561, "x of shape (2, 5, 8), heads=2, dropout=1.0 in training mode"),),
    modules.training_mode)
transformer_block_oracle = builds_and_runs("transformer_block_oracle", (*(
    Runs(Built(key=f"module{i}", args=(k, heads, ff_mult), seed=1400 + 50 * i),
         (module_case(f"y{i}", (b, t, k), 1390 + i, f"x of shape {(b, t, k)}, heads={heads}"),))
    for i, (b, t, k, heads, ff_mult) in enumerate(BLOCK_SHAPES)), DROPOUT_RUNS), **OPTIONS)

transformer_block_mask = builds_and_runs("transformer_block_mask",
                                         (Runs(Built(key="module", args=(8, 2, 4), seed=1600), (
    module_case("y_causal", (3, 6, 8), 1601, "causal mask (6, 6)", mask="causal"),
    module_case("y_padding", (3, 6, 8), 1601, "padding mask (3, 1, 6), lengths 6, 4, 2",
                mask=Mask("padding", lengths=(6, 4, 2))))),), **OPTIONS)

PERMUTATION = (5, 2, 0, 4, 1, 3)
transformer_block_gradients = kinds.builds_and_runs_backward("transformer_block_gradients", (
    Runs(Built(key="module", args=(8, 2), seed=1700),
         (module_case("y", (2, 5, 8), 1701, "k=8, 2 heads, x (2, 5, 8)", upstream=1702),)),
    Runs(Built(key="perm", args=(8, 2), seed=1800), (
        module_case("y_plain", (2, 6, 8), 1801, "x of shape (2, 6, 8), heads=2"),
        module_case("y_perm", (2, 6, 8), 1801, "permutation [5, 2, 0, 4, 1, 3]", order=PERMUTATION)))), **OPTIONS)


# ================================================================ TransformerClassifier

def _tokens(vocab: int, shape: tuple[int, ...], seed: int, order: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """Random token ids (b, t) below vocab, their positions in order if given."""
    tokens = torch.randint(0, vocab, shape, generator=generator(seed))
    return {"tokens": tokens[:, list(order)] if order else tokens}


def token_case(key: str, vocab: int, shape: tuple[int, ...], seed: int, label: str,
               order: tuple[int, ...] = ()) -> Case:
    return Case(key, partial(_tokens, vocab, shape, seed, order), label)


CLASSIFIER_STRUCTURE = (11, 8, 2, 3, 4)  # (vocab, k, heads, depth, classes)
transformer_classifier_structure = builds_and_runs("transformer_classifier_structure", (
    Runs(Built(key="module", args=CLASSIFIER_STRUCTURE, seed=1900),
         (token_case("y", 11, (5, 7), 1901, "tokens of shape (5, 7), depth=3"),)),), **OPTIONS)

# (b, t, vocab, k, heads, depth, classes)
CLASSIFIER_SHAPES = ((4, 6, 11, 8, 2, 2, 3), (3, 5, 7, 12, 3, 1, 2), (2, 9, 5, 6, 2, 3, 4))
transformer_classifier_oracle = builds_and_runs("transformer_classifier_oracle", tuple(
    Runs(Built(key=f"module{i}", args=(vocab, k, heads, depth, classes), seed=2100 + 100 * i),
         (token_case(f"y{i}", vocab, (b, t), 2050 + i, f"tokens of shape {(b, t)}, depth={depth}"),))
    for i, (b, t, vocab, k, heads, depth, classes) in enumerate(CLASSIFIER_SHAPES)), **OPTIONS)

ORDER_SHAPE = (9, 8, 2, 2, 3)
TOKEN_PERMUTATION = (6, 2, 0, 4, 1, 5, 3)
transformer_classifier_order_blind = builds_and_runs("transformer_classifier_order_blind", (
    Runs(Built(key="order", args=ORDER_SHAPE, seed=2200), (
        token_case("y", 9, (4, 7), 2201, "tokens of shape (4, 7), depth=2"),
        token_case("y_perm", 9, (4, 7), 2201, "positions permuted", TOKEN_PERMUTATION))),), **OPTIONS)

transformer_classifier_gradients = kinds.builds_and_runs_backward("transformer_classifier_gradients", (
    Runs(Built(key="module", args=ORDER_SHAPE, seed=2300),
         (Case("y_grad", lambda: {"tokens": torch.arange(9).view(3, 3)},
               "tokens arange(9) as (3, 3), a random upstream gradient",
               upstream=partial(randn, 3, 3, seed=2301)),)),), **OPTIONS)
