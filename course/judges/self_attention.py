"""Judges for assignment 01 (probes in course/checks/self_attention.py): PyTorch's fused attention as the oracle,
and the typical mistakes it can name. Read top to bottom: the mistakes, the oracles with the simulators of those
mistakes, then one declaration per check (course/judges/kinds.py); only the properties (rows that are
distributions, permutation equivariance) are written out."""

import math

import torch
import torch.nn.functional as F

from course.checks import self_attention as probes
from course.checks.compare import Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.self_attention import PERMUTATION, hand_x
from course.judges import judge, mistakes
from course.judges.kinds import Oracle, against

# ------------------------------------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/self_attention.txt

# ------------------------------------------------------------------------------------------- oracles and mistakes


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
        (M["softmax-over-columns"], F.softmax(raw, dim=1)),
        (M["no-softmax"], raw),
        (M["scaled"], F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1)),
        (M["softmax-over-batch"], F.softmax(raw, dim=0)),
        (M["normalised-without-exp"], raw / raw.sum(dim=-1, keepdim=True)),
        (M["exp-not-normalised"], raw.exp()),
        (M["first-sequence-only"], F.softmax(raw[:1], dim=-1).expand_as(raw)),
    ]


def _output_mistakes(x: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    raw = x @ x.transpose(1, 2)  # (b, t, t)
    w = F.softmax(raw, dim=-1)
    return [
        (M["weights-transposed"], w.transpose(1, 2) @ x),
        (M["output-from-raw-scores"], raw @ x),
        (M["output-scaled"], F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1) @ x),
        (M["output-is-input"], x),
        (M["first-sequence-only"], w[:1] @ x[:1].expand_as(x) if x.shape[0] > 1 else w @ x),
    ]


def _hand_weights() -> torch.Tensor:
    """The weights of the hand example, from x·xᵀ = [[1,0,1],[0,1,1],[1,1,2]] worked out on paper."""
    e = math.e
    return torch.tensor([
        [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)],
        [1 / (2 * e + 1), e / (2 * e + 1), e / (2 * e + 1)],
        [e / (2 * e + e * e), e / (2 * e + e * e), e * e / (2 * e + e * e)],
    ]).unsqueeze(0)  # (1, 3, 3)


WEIGHTS = Oracle(
    "attention_weights(x)", _oracle_weights, "F.scaled_dot_product_attention",
    shape=lambda x: (x.shape[0], x.shape[1], x.shape[1]), mistakes=_weight_mistakes,
    shape_hints=lambda x: {tuple(x.shape): "That is the shape of the input: return the (t, t) weights."},
    otherwise="Compute x·xᵀ with a batched matrix product, then softmax over the last dimension.")
OUTPUT = Oracle(
    "basic_self_attention(x)", _oracle_output, "F.scaled_dot_product_attention",
    shape=lambda x: tuple(x.shape), mistakes=_output_mistakes,
    shape_hints=lambda x: {(x.shape[0], x.shape[2], x.shape[1]): M["output-xT-w"],
                           (x.shape[0], x.shape[1], x.shape[1]): "That is the shape of the weights: return the "
                                                                 "weighted sum w·x."},
    otherwise="Compute the weights, then y = w·x with a batched matrix product (torch.bmm or @).",
    gradient_hints={"x": "Every output depends on every input."})

# ------------------------------------------------------------------------------------------- the checks

against(probes.attention_weights_by_hand, WEIGHTS, answers={"w": _hand_weights},
        passed="The 3-vector example from the notebook, whose weights can be worked out on paper.")
against(probes.attention_weights_vs_pytorch, WEIGHTS,
        passed="A batch of two against PyTorch's fused attention (unscaled, values = identity); the gradient of a "
               "loss on the weights reaches x as autograd through the oracle gives it.")
against(probes.attention_weights_oracle, WEIGHTS,
        passed="Random inputs of several shapes against PyTorch's fused attention (unscaled, values = identity).")
against(probes.basic_self_attention_by_hand, OUTPUT, answers={"y": lambda: _hand_weights() @ hand_x()},
        passed="The notebook's 3-vector example: y = w·x with the weights worked out on paper.")
against(probes.basic_self_attention_vs_pytorch, OUTPUT,
        passed="A batch of two against PyTorch's fused attention with queries = keys = values = x; the gradient "
               "reaches x.")
against(probes.basic_self_attention_oracle, OUTPUT,
        passed="Random inputs of several shapes against PyTorch's fused attention with queries = keys = values = "
               "x, and the gradient of a loss on the output with respect to the input, against autograd through "
               "the oracle.")


@judge("attention_weights_rows")
def _judge_rows(ev: Evidence) -> None:
    """Every row of weights is a probability distribution: non-negative, summing to 1."""
    w = output(ev, "w", what=WEIGHTS.what, shape=(2, 5, 5))
    if bool((w < 0).any()):
        fail(f"{WEIGHTS.what} has negative weights; a softmax never gives negative numbers. Is the softmax missing?")
    sums = w.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        col = w.sum(dim=-2)
        columns = torch.allclose(col, torch.ones_like(col), atol=1e-4)
        hint = ("The columns sum to 1 instead: softmax over dim=1, not the last dimension?" if columns
                else "Apply softmax over the last dimension.")
        fail(f"The rows of {WEIGHTS.what} do not sum to 1. {hint}", torch.ones_like(sums), sums, case="row sums",
             mistake=M["softmax-over-columns"] if columns else None)
    (case,) = probes.attention_weights_rows.cases
    x = case.inputs()["x"]
    if not matches_any(w, [_oracle_weights(x), *(m for _, m in _weight_mistakes(x))], ev.device):
        fail(f"The rows of {WEIGHTS.what} sum to 1, but they are not a softmax of the dot products x·xᵀ. "
             + WEIGHTS.otherwise, _oracle_weights(x), w, case=case.label)


@judge("permutation_equivariance")
def _judge_permutation(ev: Evidence) -> None:
    """Permuting the input positions permutes the outputs the same way, and nothing else changes."""
    y = output(ev, "y", what=OUTPUT.what, shape=(2, 6, 4))
    y_perm = output(ev, "y_perm", what=OUTPUT.what, shape=(2, 6, 4))
    expect_close(y_perm, y[:, torch.tensor(PERMUTATION)], what=f"{OUTPUT.what} on permuted positions",
                 device=ev.device, case="permutation [3, 0, 5, 1, 4, 2]",
                 otherwise="Self-attention should not care where a vector sits: output i may depend only on x_i "
                           "and the set of all inputs. Does your code use positions or mix the batch?")
    x = probes.PERMUTATION_CASE.inputs()["x"]
    if not matches_any(y, [_oracle_output(x), *(m for _, m in _output_mistakes(x))], ev.device):
        fail(f"{OUTPUT.what} is permutation equivariant, but it is not attention over x: " + OUTPUT.otherwise,
             _oracle_output(x), y, case="x of shape (2, 6, 4)")
