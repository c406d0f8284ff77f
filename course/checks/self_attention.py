"""Checks for assignment 01: attention_weights and basic_self_attention.

Each check is a probe (runs the student's function on inputs chosen here) and a judge (decides from what the
probe recorded, with PyTorch's fused attention as the oracle). See course/checks/check.py. The visible checks
compare with the oracle on one small batch; the hidden ones add shapes.
"""

import math

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import Mistake, expect_close, fail, matches_any, output, randn
from course.checks.evidence import Evidence, Recorder

# batch > 1, t != k, a single position, k = 1: shapes that expose swapped or missing dimensions
SHAPES = ((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))

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


def _hand_x() -> torch.Tensor:
    return torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)


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


_WEIGHTS_HINT = "Compute x·xᵀ with a batched matrix product, then softmax over the last dimension."
_OUTPUT_HINT = "Compute the weights, then y = w·x with a batched matrix product (torch.bmm or @)."


# ------------------------------------------------------------------------------------------- attention_weights

def _probe_weights_by_hand(attention_weights, rec: Recorder) -> None:
    rec.call("w", attention_weights, _hand_x().to(rec.device))


def _judge_weights_by_hand(ev: Evidence) -> None:
    """The 3-vector example from the notebook, whose weights can be worked out on paper."""
    w = output(ev, "w", what=WEIGHTS_NAME, shape=(1, 3, 3),
               shape_hints={(1, 3, 2): "Return the weights, not the weighted inputs."})
    expect_close(w, _hand_weights(), what=WEIGHTS_NAME, device=ev.device, mistakes=_weight_mistakes(_hand_x()),
                 case=HAND_CASE, otherwise=_WEIGHTS_HINT)


attention_weights_by_hand = Check("attention_weights_by_hand", _probe_weights_by_hand, _judge_weights_by_hand)


def _small_x() -> torch.Tensor:
    """The visible checks' small batch: two sequences of four 3-vectors."""
    return randn(2, 4, 3, seed=50)


def _probe_weights_vs_pytorch(attention_weights, rec: Recorder) -> None:
    x = _small_x().to(rec.device).requires_grad_(True)
    w = rec.call("w", attention_weights, x)
    modules.backward(rec, w, randn(2, 4, 4, seed=51), {"x": x})


def _judge_weights_vs_pytorch(ev: Evidence) -> None:
    """A batch of two against PyTorch's fused attention (unscaled, values = identity); the gradient of a loss on
    the weights reaches x as autograd through the oracle gives it."""
    x, case = _small_x(), "x of shape (2, 4, 3)"
    w = output(ev, "w", what=WEIGHTS_NAME, shape=(2, 4, 4),
               shape_hints={(2, 4, 3): "That is the shape of the input: return the (t, t) weights."})
    expect_close(w, _oracle_weights(x), what=WEIGHTS_NAME, device=ev.device, mistakes=_weight_mistakes(x),
                 case=case, otherwise=_WEIGHTS_HINT)
    modules.expect_attached(ev, "w", WEIGHTS_NAME)
    grads = modules.autograd(lambda _, x: _oracle_weights(x), {}, {"x": x}, randn(2, 4, 4, seed=51))
    modules.expect_gradients(ev, grads, owner=WEIGHTS_NAME, case=case, oracle="F.scaled_dot_product_attention")


attention_weights_vs_pytorch = Check("attention_weights_vs_pytorch", _probe_weights_vs_pytorch,
                                     _judge_weights_vs_pytorch)


def _rows_x() -> torch.Tensor:
    return randn(2, 5, 4, seed=11)


def _probe_rows(attention_weights, rec: Recorder) -> None:
    rec.call("w", attention_weights, _rows_x().to(rec.device))


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
    x = _rows_x()
    if not matches_any(w, [_oracle_weights(x), *(m for _, m in _weight_mistakes(x))], ev.device):
        fail(f"The rows of {WEIGHTS_NAME} sum to 1, but they are not a softmax of the dot products x·xᵀ. "
             + _WEIGHTS_HINT, _oracle_weights(x), w, case="x of shape (2, 5, 4)")


attention_weights_rows = Check("attention_weights_rows", _probe_rows, _judge_rows)


def _shape_x(i: int, b: int, t: int, k: int, seed: int) -> torch.Tensor:
    return randn(b, t, k, seed=seed + i)


def _probe_weights_oracle(attention_weights, rec: Recorder) -> None:
    for i, (b, t, k) in enumerate(SHAPES):
        rec.call(f"w{i}", attention_weights, _shape_x(i, b, t, k, 100).to(rec.device))


def _judge_weights_oracle(ev: Evidence) -> None:
    """Random inputs of several shapes against PyTorch's fused attention (unscaled, values = identity)."""
    for i, (b, t, k) in enumerate(SHAPES):
        x = _shape_x(i, b, t, k, 100)
        w = output(ev, f"w{i}", what=WEIGHTS_NAME, shape=(b, t, t),
                   shape_hints={(b, t, k): "That is the shape of the input: return the (t, t) weights."})
        expect_close(w, _oracle_weights(x), what=WEIGHTS_NAME, device=ev.device, mistakes=_weight_mistakes(x),
                     case=f"x of shape {(b, t, k)}", otherwise=_WEIGHTS_HINT)


attention_weights_oracle = Check("attention_weights_oracle", _probe_weights_oracle, _judge_weights_oracle)


# ------------------------------------------------------------------------------------------- basic_self_attention

def _probe_output_by_hand(basic_self_attention, rec: Recorder) -> None:
    rec.call("y", basic_self_attention, _hand_x().to(rec.device))


def _judge_output_by_hand(ev: Evidence) -> None:
    """The notebook's 3-vector example: y = w·x with the weights worked out on paper."""
    y = output(ev, "y", what=OUTPUT_NAME, shape=(1, 3, 2),
               shape_hints={(1, 3, 3): "That is the shape of the weights: return the weighted sum w·x."})
    expect_close(y, _hand_weights() @ _hand_x(), what=OUTPUT_NAME, device=ev.device,
                 mistakes=_output_mistakes(_hand_x()), case=HAND_CASE, otherwise=_OUTPUT_HINT)


basic_self_attention_by_hand = Check("basic_self_attention_by_hand", _probe_output_by_hand, _judge_output_by_hand)


def _probe_output_and_gradient(basic_self_attention, rec: Recorder, x: torch.Tensor, upstream: torch.Tensor) -> None:
    x = x.to(rec.device).requires_grad_(True)
    modules.backward(rec, rec.call("y_grad", basic_self_attention, x), upstream, {"x": x})


def _judge_output_and_gradient(ev: Evidence, x: torch.Tensor, upstream: torch.Tensor) -> None:
    """The output against PyTorch's fused attention, and the gradient of a loss on it with respect to x against
    autograd through it."""
    case = f"x of shape {tuple(x.shape)}"
    y = output(ev, "y_grad", what=OUTPUT_NAME, shape=tuple(x.shape),
               shape_hints={(x.shape[0], x.shape[1], x.shape[1]): "That is the shape of the weights: return the "
                                                                  "weighted sum w·x."})
    expect_close(y, _oracle_output(x), what=OUTPUT_NAME, device=ev.device, mistakes=_output_mistakes(x), case=case,
                 otherwise=_OUTPUT_HINT)
    modules.expect_attached(ev, "y_grad", OUTPUT_NAME)
    grads = modules.autograd(lambda _, x: _oracle_output(x), {}, {"x": x}, upstream)
    modules.expect_gradients(ev, grads, owner=OUTPUT_NAME, case=case, oracle="F.scaled_dot_product_attention",
                             hints={"x": "Every output depends on every input."})


def _probe_output_vs_pytorch(basic_self_attention, rec: Recorder) -> None:
    _probe_output_and_gradient(basic_self_attention, rec, _small_x(), randn(2, 4, 3, seed=52))


def _judge_output_vs_pytorch(ev: Evidence) -> None:
    """A batch of two against PyTorch's fused attention with queries = keys = values = x; the gradient reaches x."""
    _judge_output_and_gradient(ev, _small_x(), randn(2, 4, 3, seed=52))


basic_self_attention_vs_pytorch = Check("basic_self_attention_vs_pytorch", _probe_output_vs_pytorch,
                                        _judge_output_vs_pytorch)


def _probe_output_oracle(basic_self_attention, rec: Recorder) -> None:
    for i, (b, t, k) in enumerate(SHAPES):
        rec.call(f"y{i}", basic_self_attention, _shape_x(i, b, t, k, 200).to(rec.device))
    _probe_output_and_gradient(basic_self_attention, rec, randn(2, 5, 3, seed=400), randn(2, 5, 3, seed=401))


def _judge_output_oracle(ev: Evidence) -> None:
    """Random inputs of several shapes against PyTorch's fused attention with queries = keys = values = x, and
    the gradient of a loss on the output with respect to the input, against autograd through the oracle."""
    for i, (b, t, k) in enumerate(SHAPES):
        x = _shape_x(i, b, t, k, 200)
        y = output(ev, f"y{i}", what=OUTPUT_NAME, shape=(b, t, k),
                   shape_hints={(b, t, t): "That is the shape of the weights: return the weighted sum w·x."})
        expect_close(y, _oracle_output(x), what=OUTPUT_NAME, device=ev.device, mistakes=_output_mistakes(x),
                     case=f"x of shape {(b, t, k)}", otherwise=_OUTPUT_HINT)
    _judge_output_and_gradient(ev, randn(2, 5, 3, seed=400), randn(2, 5, 3, seed=401))


basic_self_attention_oracle = Check("basic_self_attention_oracle", _probe_output_oracle, _judge_output_oracle)


_PERMUTATION = (3, 0, 5, 1, 4, 2)


def _probe_permutation(basic_self_attention, rec: Recorder) -> None:
    x = randn(2, 6, 4, seed=300).to(rec.device)
    perm = torch.tensor(_PERMUTATION, device=rec.device)
    rec.call("y", basic_self_attention, x.clone())
    rec.call("y_perm", basic_self_attention, x[:, perm].clone())


def _judge_permutation(ev: Evidence) -> None:
    """Permuting the input positions permutes the outputs the same way, and nothing else changes."""
    y = output(ev, "y", what=OUTPUT_NAME, shape=(2, 6, 4))
    y_perm = output(ev, "y_perm", what=OUTPUT_NAME, shape=(2, 6, 4))
    perm = torch.tensor(_PERMUTATION)
    expect_close(y_perm, y[:, perm], what=f"{OUTPUT_NAME} on permuted positions", device=ev.device,
                 otherwise="Self-attention should not care where a vector sits: output i may depend only on x_i "
                           "and the set of all inputs. Does your code use positions or mix the batch?",
                 case="permutation [3, 0, 5, 1, 4, 2]")
    x = randn(2, 6, 4, seed=300)
    if not matches_any(y, [_oracle_output(x), *(m for _, m in _output_mistakes(x))], ev.device):
        fail(f"{OUTPUT_NAME} is permutation equivariant, but it is not attention over x: "
             + _OUTPUT_HINT, _oracle_output(x), y, case="x of shape (2, 6, 4)")


permutation_equivariance = Check("permutation_equivariance", _probe_permutation, _judge_permutation)
