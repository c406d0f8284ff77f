"""Judges for assignment 01 (probes in course/checks/self_attention.py): PyTorch's fused attention as the oracle,
and the typical mistakes it can name."""

import math

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks.compare import Mistake, expect_close, fail, matches_any, output, randn
from course.checks.evidence import Evidence
from course.checks.seeds import grading
from course.checks.self_attention import (
    PERMUTATION,
    SHAPES,
    hand_x,
    permutation_x,
    rows_x,
    secret_x,
    shape_x,
    small_x,
)
from course.judges import judge

WEIGHTS_NAME = "attention_weights(x)"
OUTPUT_NAME = "basic_self_attention(x)"
HAND_CASE = "x = [[1,0],[0,1],[1,1]]"

SOFTMAX_COLUMNS = Mistake("softmax-over-columns", "each column sums to 1 instead of each row. Take the softmax over "
                          "the last dimension (dim=-1 or dim=2), not dim=1; or did you transpose the weights?")
NO_SOFTMAX = Mistake("no-softmax", "these are the raw dot products x·xᵀ: the softmax is missing.")
SCALED = Mistake("scaled", "the scores are divided by √k. Scaling is assignment 03; here the weights are "
                 "softmax(x·xᵀ) without it.")
SOFTMAX_BATCH = Mistake("softmax-over-batch", "the softmax runs over the batch dimension (dim=0); each row of each "
                        "matrix should sum to 1, so use dim=-1.")
SUM_NORMALISED = Mistake("normalised-without-exp", "rows are divided by their sum without exponentiating first: use "
                         "torch.softmax, which takes exp before normalising.")
NOT_NORMALISED = Mistake("exp-not-normalised", "the scores are exponentiated but never normalised: divide by the "
                         "row sums (softmax does both).")
FIRST_SEQUENCE = Mistake("first-sequence-only", "every sequence of the batch gets the weights of the first one: "
                         "use batched matrix products (torch.bmm or @) on the whole (b, t, k) tensor.")
TRANSPOSED = Mistake("weights-transposed", "the weights are transposed (y = wᵀ·x), or the softmax runs over dim=1. "
                     "Row i of w says how much output i takes from each input, so y = w·x.")
RAW_OUTPUT = Mistake("output-from-raw-scores", "the output is built from the raw scores x·xᵀ: apply the softmax "
                     "before averaging.")
SCALED_OUTPUT = Mistake("output-scaled", "the scores are divided by √k; this assignment uses no scaling.")
IDENTITY = Mistake("output-is-input", "the output equals the input: the weighted average w·x is never taken.")

_WEIGHTS_HINT = "Compute x·xᵀ with a batched matrix product, then softmax over the last dimension."
_OUTPUT_HINT = "Compute the weights, then y = w·x with a batched matrix product (torch.bmm or @)."
_WEIGHTS_SHAPE_HINT = "That is the shape of the input: return the (t, t) weights."
_OUTPUT_SHAPE_HINT = "That is the shape of the weights: return the weighted sum w·x."


def _hand_weights() -> torch.Tensor:
    """The weights of the hand example, from x·xᵀ = [[1,0,1],[0,1,1],[1,1,2]] worked out on paper."""
    e = math.e
    return torch.tensor([
        [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)],
        [1 / (2 * e + 1), e / (2 * e + 1), e / (2 * e + 1)],
        [e / (2 * e + e * e), e / (2 * e + e * e), e * e / (2 * e + e * e)],
    ]).unsqueeze(0)  # (1, 3, 3)


def _oracle_weights(x: torch.Tensor) -> torch.Tensor:
    """PyTorch's fused attention, unscaled, over the identity: it returns the weights themselves."""
    b, t, _ = x.shape
    eye = torch.eye(t).expand(b, t, t)  # (b, t, t)
    return F.scaled_dot_product_attention(x, x, eye, scale=1.0)


def _oracle_output(x: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)


def _weight_mistakes(x: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    raw = x @ x.transpose(1, 2)  # (b, t, t)
    return [
        (SOFTMAX_COLUMNS, F.softmax(raw, dim=1)),
        (NO_SOFTMAX, raw),
        (SCALED, F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1)),
        (SOFTMAX_BATCH, F.softmax(raw, dim=0)),
        (SUM_NORMALISED, raw / raw.sum(dim=-1, keepdim=True)),
        (NOT_NORMALISED, raw.exp()),
        (FIRST_SEQUENCE, F.softmax(raw[:1], dim=-1).expand_as(raw)),
    ]


def _output_mistakes(x: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    raw = x @ x.transpose(1, 2)  # (b, t, t)
    w = F.softmax(raw, dim=-1)
    return [
        (TRANSPOSED, w.transpose(1, 2) @ x),
        (RAW_OUTPUT, raw @ x),
        (SCALED_OUTPUT, F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1) @ x),
        (IDENTITY, x),
        (FIRST_SEQUENCE, w[:1] @ x[:1].expand_as(x) if x.shape[0] > 1 else w @ x),
    ]


def _expect_weights(ev: Evidence, key: str, x: torch.Tensor) -> None:
    """The weights recorded under key against the oracle on x, naming a typical mistake if one matches."""
    b, t, k = x.shape
    w = output(ev, key, what=WEIGHTS_NAME, shape=(b, t, t), shape_hints={(b, t, k): _WEIGHTS_SHAPE_HINT})
    expect_close(w, _oracle_weights(x), what=WEIGHTS_NAME, device=ev.device, mistakes=_weight_mistakes(x),
                 case=f"x of shape {(b, t, k)}", otherwise=_WEIGHTS_HINT)


def _expect_output(ev: Evidence, key: str, x: torch.Tensor) -> None:
    """The output recorded under key against the oracle on x, naming a typical mistake if one matches."""
    b, t, k = x.shape
    y = output(ev, key, what=OUTPUT_NAME, shape=(b, t, k), shape_hints={(b, t, t): _OUTPUT_SHAPE_HINT})
    expect_close(y, _oracle_output(x), what=OUTPUT_NAME, device=ev.device, mistakes=_output_mistakes(x),
                 case=f"x of shape {(b, t, k)}", otherwise=_OUTPUT_HINT)


# ------------------------------------------------------------------------------------------- attention_weights

@judge("attention_weights_by_hand")
def _judge_weights_by_hand(ev: Evidence) -> None:
    """The 3-vector example from the notebook, whose weights can be worked out on paper."""
    w = output(ev, "w", what=WEIGHTS_NAME, shape=(1, 3, 3),
               shape_hints={(1, 3, 2): "Return the weights, not the weighted inputs."})
    expect_close(w, _hand_weights(), what=WEIGHTS_NAME, device=ev.device, mistakes=_weight_mistakes(hand_x()),
                 case=HAND_CASE, otherwise=_WEIGHTS_HINT)
    if grading():
        _expect_weights(ev, "w_secret", secret_x())


@judge("attention_weights_vs_pytorch")
def _judge_weights_vs_pytorch(ev: Evidence) -> None:
    """A batch of two against PyTorch's fused attention (unscaled, values = identity); the gradient of a loss on
    the weights reaches x as autograd through the oracle gives it."""
    x = small_x()
    _expect_weights(ev, "w", x)
    modules.expect_attached(ev, "w", WEIGHTS_NAME)
    grads = modules.autograd(lambda _, x: _oracle_weights(x), {}, {"x": x}, randn(2, 4, 4, seed=51))
    modules.expect_gradients(ev, grads, owner=WEIGHTS_NAME, case="x of shape (2, 4, 3)",
                             oracle="F.scaled_dot_product_attention")


@judge("attention_weights_rows")
def _judge_rows(ev: Evidence) -> None:
    """Every row of weights is a probability distribution: non-negative, summing to 1."""
    w = output(ev, "w", what=WEIGHTS_NAME, shape=(2, 5, 5))
    if bool((w < 0).any()):
        fail(f"{WEIGHTS_NAME} has negative weights; a softmax never gives negative numbers. Is the softmax missing?")
    sums = w.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        col = w.sum(dim=-2)
        hint = ("The columns sum to 1 instead: softmax over dim=1, not the last dimension?"
                if torch.allclose(col, torch.ones_like(col), atol=1e-4) else "Apply softmax over the last dimension.")
        fail(f"The rows of {WEIGHTS_NAME} do not sum to 1. {hint}", torch.ones_like(sums), sums, case="row sums",
             mistake=SOFTMAX_COLUMNS.id if "columns" in hint else None)
    x = rows_x()
    if not matches_any(w, [_oracle_weights(x), *(m for _, m in _weight_mistakes(x))], ev.device):
        fail(f"The rows of {WEIGHTS_NAME} sum to 1, but they are not a softmax of the dot products x·xᵀ. "
             + _WEIGHTS_HINT, _oracle_weights(x), w, case="x of shape (2, 5, 4)")


@judge("attention_weights_oracle")
def _judge_weights_oracle(ev: Evidence) -> None:
    """Random inputs of several shapes against PyTorch's fused attention (unscaled, values = identity)."""
    for i, (b, t, k) in enumerate(SHAPES):
        _expect_weights(ev, f"w{i}", shape_x(i, b, t, k, 100))


# ------------------------------------------------------------------------------------------- basic_self_attention

@judge("basic_self_attention_by_hand")
def _judge_output_by_hand(ev: Evidence) -> None:
    """The notebook's 3-vector example: y = w·x with the weights worked out on paper."""
    y = output(ev, "y", what=OUTPUT_NAME, shape=(1, 3, 2), shape_hints={(1, 3, 3): _OUTPUT_SHAPE_HINT})
    expect_close(y, _hand_weights() @ hand_x(), what=OUTPUT_NAME, device=ev.device,
                 mistakes=_output_mistakes(hand_x()), case=HAND_CASE, otherwise=_OUTPUT_HINT)
    if grading():
        _expect_output(ev, "y_secret", secret_x())


def _judge_output_and_gradient(ev: Evidence, x: torch.Tensor, upstream: torch.Tensor) -> None:
    """The output against PyTorch's fused attention, and the gradient of a loss on it with respect to x against
    autograd through it."""
    _expect_output(ev, "y_grad", x)
    modules.expect_attached(ev, "y_grad", OUTPUT_NAME)
    grads = modules.autograd(lambda _, x: _oracle_output(x), {}, {"x": x}, upstream)
    modules.expect_gradients(ev, grads, owner=OUTPUT_NAME, case=f"x of shape {tuple(x.shape)}",
                             oracle="F.scaled_dot_product_attention",
                             hints={"x": "Every output depends on every input."})


@judge("basic_self_attention_vs_pytorch")
def _judge_output_vs_pytorch(ev: Evidence) -> None:
    """A batch of two against PyTorch's fused attention with queries = keys = values = x; the gradient reaches x."""
    _judge_output_and_gradient(ev, small_x(), randn(2, 4, 3, seed=52))


@judge("basic_self_attention_oracle")
def _judge_output_oracle(ev: Evidence) -> None:
    """Random inputs of several shapes against PyTorch's fused attention with queries = keys = values = x, and
    the gradient of a loss on the output with respect to the input, against autograd through the oracle."""
    for i, (b, t, k) in enumerate(SHAPES):
        _expect_output(ev, f"y{i}", shape_x(i, b, t, k, 200))
    _judge_output_and_gradient(ev, randn(2, 5, 3, seed=400), randn(2, 5, 3, seed=401))


@judge("permutation_equivariance")
def _judge_permutation(ev: Evidence) -> None:
    """Permuting the input positions permutes the outputs the same way, and nothing else changes."""
    y = output(ev, "y", what=OUTPUT_NAME, shape=(2, 6, 4))
    y_perm = output(ev, "y_perm", what=OUTPUT_NAME, shape=(2, 6, 4))
    perm = torch.tensor(PERMUTATION)
    expect_close(y_perm, y[:, perm], what=f"{OUTPUT_NAME} on permuted positions", device=ev.device,
                 otherwise="Self-attention should not care where a vector sits: output i may depend only on x_i "
                           "and the set of all inputs. Does your code use positions or mix the batch?",
                 case="permutation [3, 0, 5, 1, 4, 2]")
    x = permutation_x()
    if not matches_any(y, [_oracle_output(x), *(m for _, m in _output_mistakes(x))], ev.device):
        fail(f"{OUTPUT_NAME} is permutation equivariant, but it is not attention over x: "
             + _OUTPUT_HINT, _oracle_output(x), y, case="x of shape (2, 6, 4)")
