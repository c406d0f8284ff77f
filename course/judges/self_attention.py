"""Judges for assignment 01 (probes in course/checks/self_attention.py): PyTorch's fused attention as the oracle,
and the typical mistakes it can name. Read top to bottom: the mistakes, each written as a student writes it with the
message beside it (course/judges/variants.py), the oracles, then one declaration per check
(course/judges/kinds.py); only the properties (rows that are distributions, permutation equivariance) are written
out."""

import math

import torch
import torch.nn.functional as F

from course.checks import self_attention as probes
from course.checks.compare import expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.self_attention import PERMUTATION, hand_x
from course.judges import judge
from course.judges.kinds import Advice, Oracle, against, against_gradients
from course.judges.variants import Variants

# ------------------------------------------------------------------------------------------- mistakes
# Edits change the reference answers of course/self_attention.py:
#     attention_weights:    return F.softmax(x @ x.transpose(-2, -1), dim=-1)  # (b, t, t)
#     basic_self_attention: return attention_weights(x) @ x
# When an output matches two of them, the first declared is named. Mistakes every check names (a wrong shape, an
# error, a detached output) are in catalogue/self_attention.py.

WRITTEN = Variants(__name__, reference="course.self_attention")
edit, rewrite = WRITTEN.edit, WRITTEN.rewrite
RAW = "x @ x.transpose(-2, -1)"

edit("weights-softmax-dim1", "attention_weights", ("dim=-1", "dim=1"), mistake="softmax-over-columns",
     says="each column sums to 1 instead of each row. Take the softmax over the last dimension (dim=-1 or dim=2), "
          "not dim=1; or did you transpose the weights?")
edit("weights-no-softmax", "attention_weights", (f"F.softmax({RAW}, dim=-1)", RAW), mistake="no-softmax",
     says="these are the raw dot products x·xᵀ: the softmax is missing.")
edit("weights-scaled", "attention_weights", (RAW, f"{RAW} / math.sqrt(x.shape[-1])"), mistake="scaled",
     says="the scores are divided by √k. Scaling is assignment 03; here the weights are softmax(x·xᵀ) without it.")
edit("weights-softmax-batch", "attention_weights", ("dim=-1", "dim=0"), mistake="softmax-over-batch",
     says="the softmax runs over the batch dimension (dim=0); each row of each matrix should sum to 1, so use "
          "dim=-1.")

edit("weights-exp-overflows", "attention_weights",
     (f"F.softmax({RAW}, dim=-1)", f"torch.exp({RAW}) / torch.exp({RAW}).sum(-1, keepdim=True)"),
     mistake="softmax-overflow",
     says="exp of the raw dot products overflows once they pass about 88 (float32), and the rows turn to NaN. Use "
          "torch.softmax, which subtracts each row's maximum before exponentiating.")


@rewrite("attention_weights", "normalised-without-exp",
         says="rows are divided by their sum without exponentiating first: use torch.softmax, which takes exp before "
              "normalising.")
def weights_sum_normalised(x):
    raw = x @ x.transpose(1, 2)
    return raw / raw.sum(-1, keepdim=True)


edit("weights-exp-only", "attention_weights", (f"F.softmax({RAW}, dim=-1)", f"torch.exp({RAW})"),
     mistake="exp-not-normalised",
     says="the scores are exponentiated but never normalised: divide by the row sums (softmax does both).")
edit("weights-first-sequence-only", "attention_weights",
     (f"{RAW}, dim=-1)", "x[0] @ x[0].T, dim=-1).expand(x.shape[0], -1, -1)"), mistake="first-sequence-only",
     says="every sequence of the batch gets the weights of the first one: use batched matrix products (torch.bmm or "
          "@) on the whole (b, t, k) tensor.")

AVERAGE = "attention_weights(x) @ x"
edit("output-transposed-weights", "basic_self_attention", (AVERAGE, "attention_weights(x).transpose(1, 2) @ x"),
     mistake="weights-transposed",
     says="the weights are transposed (y = wᵀ·x), or the softmax runs over dim=1. Row i of w says how much output i "
          "takes from each input, so y = w·x.")
edit("output-raw-scores", "basic_self_attention", (AVERAGE, "torch.bmm(x, x.transpose(1, 2)) @ x"),
     mistake="output-from-raw-scores", says="the output is built from the raw scores x·xᵀ: apply the softmax before "
                                            "averaging.")
edit("output-fused-with-default-scale", "basic_self_attention", (AVERAGE, "F.scaled_dot_product_attention(x, x, x)"),
     mistake="output-scaled", says="the scores are divided by √k; this assignment uses no scaling.")


@rewrite("basic_self_attention", "output-is-input",
         says="the output equals the input: the weighted average w·x is never taken.")
def output_returns_the_input(x):
    w = attention_weights(x)  # noqa: F821 - the notebook's earlier answer
    y = torch.bmm(w, x)  # noqa: F841 - the student's slip: y is computed, x returned
    return x


edit("output-first-sequence-only", "basic_self_attention", (AVERAGE, "(attention_weights(x[:1]) @ x[:1]).expand_as(x)"),
     mistake="first-sequence-only")
edit("output-xt-w", "basic_self_attention", (AVERAGE, "x.transpose(1, 2) @ attention_weights(x)"),
     mistake="output-xT-w",
     says="this is xᵀ·w, of shape (b, k, t): the weights come first, y = w·x, so that row i of the output is the "
          "average of the inputs weighted by row i of w.")

# ------------------------------------------------------------------------------------------- oracles


def _oracle_weights(x: torch.Tensor) -> torch.Tensor:
    """PyTorch's fused attention, unscaled, over the identity: it returns the weights themselves."""
    b, t, _ = x.shape
    eye = torch.eye(t).expand(b, t, t)  # (b, t, t)
    return F.scaled_dot_product_attention(x, x, eye, scale=1.0)


def _oracle_output(x: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)


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
    shape=lambda x: (x.shape[0], x.shape[1], x.shape[1]), mistakes=lambda x: WRITTEN.outputs("attention_weights", x=x),
    advice=Advice(otherwise="Compute x·xᵀ with a batched matrix product, then softmax over the last dimension.",
                  shape_hints=lambda x: {tuple(x.shape): "That is the shape of the input: return the (t, t) weights."}))
OUTPUT = Oracle(
    "basic_self_attention(x)", _oracle_output, "F.scaled_dot_product_attention",
    shape=lambda x: tuple(x.shape), mistakes=lambda x: WRITTEN.outputs("basic_self_attention", x=x),
    advice=Advice(
        otherwise="Compute the weights, then y = w·x with a batched matrix product (torch.bmm or @).",
        shape_hints=lambda x: {(x.shape[0], x.shape[2], x.shape[1]): WRITTEN["output-xT-w"],
                               (x.shape[0], x.shape[1], x.shape[1]): "That is the shape of the weights: return the "
                                                                     "weighted sum w·x."},
        gradient_hints={"x": "Every output depends on every input."}))

# ------------------------------------------------------------------------------------------- the checks

against(probes.attention_weights_by_hand, WEIGHTS, answers={"w": _hand_weights},
        passed="The 3-vector example from the notebook, whose weights can be worked out on paper.")
against_gradients(probes.attention_weights_vs_pytorch, WEIGHTS,
        passed="A batch of two against PyTorch's fused attention (unscaled, values = identity); the gradient of a "
               "loss on the weights reaches x as autograd through the oracle gives it.")
against(probes.attention_weights_oracle, WEIGHTS,
        passed="Random inputs of several shapes, and dot products in the hundreds, against PyTorch's fused attention "
               "(unscaled, values = identity).")
against(probes.basic_self_attention_by_hand, OUTPUT, answers={"y": lambda: _hand_weights() @ hand_x()},
        passed="The notebook's 3-vector example: y = w·x with the weights worked out on paper.")
against_gradients(probes.basic_self_attention_vs_pytorch, OUTPUT,
        passed="A batch of two against PyTorch's fused attention with queries = keys = values = x; the gradient "
               "reaches x.")
against_gradients(probes.basic_self_attention_oracle, OUTPUT,
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
             mistake=WRITTEN["softmax-over-columns"] if columns else None)
    (case,) = probes.attention_weights_rows.cases
    x = case.inputs()["x"]
    if not matches_any(w, [_oracle_weights(x), *(m for _, m in WRITTEN.outputs("attention_weights", x=x))], ev.device):
        fail(f"The rows of {WEIGHTS.what} sum to 1, but they are not a softmax of the dot products x·xᵀ. "
             + WEIGHTS.advice.otherwise, _oracle_weights(x), w, case=case.label)


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
    written = (m for _, m in WRITTEN.outputs("basic_self_attention", x=x))
    if not matches_any(y, [_oracle_output(x), *written], ev.device):
        fail(f"{OUTPUT.what} is permutation equivariant, but it is not attention over x: " + OUTPUT.advice.otherwise,
             _oracle_output(x), y, case="x of shape (2, 6, 4)")
