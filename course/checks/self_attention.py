"""Checks for assignment 01: attention_weights and basic_self_attention."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from course.checks.compare import expect_close, expect_tensor, fail, randn, run

# batch > 1, t != k, a single position, k = 1: shapes that expose swapped or missing dimensions
SHAPES = ((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))

WEIGHTS_NAME = "attention_weights(x)"
OUTPUT_NAME = "basic_self_attention(x)"


def _hand_case(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """x = three 2-d vectors; the weights follow from x·xᵀ = [[1,0,1],[0,1,1],[1,1,2]] by hand."""
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]], device=device)  # (1, 3, 2)
    e = math.e
    weights = torch.tensor(
        [
            [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)],
            [1 / (2 * e + 1), e / (2 * e + 1), e / (2 * e + 1)],
            [e / (2 * e + e * e), e / (2 * e + e * e), e * e / (2 * e + e * e)],
        ],
        device=device,
    ).unsqueeze(0)  # (1, 3, 3)
    return x, weights


def _weight_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    raw = x @ x.transpose(1, 2)  # (b, t, t)
    k = x.shape[-1]
    return {
        "each column sums to 1 instead of each row. Take the softmax over the last dimension "
        "(dim=-1 or dim=2), not dim=1; or did you transpose the weights?": F.softmax(raw, dim=1),
        "these are the raw dot products x·xᵀ: the softmax is missing.": raw,
        "the scores are divided by √k. Scaling is assignment 03; here the weights are softmax(x·xᵀ) "
        "without it.": F.softmax(raw / math.sqrt(k), dim=-1),
        "the softmax runs over the batch dimension (dim=0); each row of each matrix should sum to 1, "
        "so use dim=-1.": F.softmax(raw, dim=0),
        "rows are divided by their sum without exponentiating first: use torch.softmax, which takes "
        "exp before normalising.": raw / raw.sum(dim=-1, keepdim=True),
        "the scores are exponentiated but never normalised: divide by the row sums (softmax does both).": raw.exp(),
    }


def attention_weights_by_hand(attention_weights: Callable) -> None:
    """The 3-vector example from the notebook, whose weights can be worked out on paper."""
    __tracebackhide__ = True
    x, expected = _hand_case("cpu")
    w = run(attention_weights, x.clone(), what=WEIGHTS_NAME)
    expect_tensor(w, what=WEIGHTS_NAME, shape=(1, 3, 3), device="cpu", shape_hints={(1, 3, 2): "Return the weights, not the weighted inputs."})
    expect_close(w, expected, what=WEIGHTS_NAME, mistakes=_weight_mistakes(x), case="x = [[1,0],[0,1],[1,1]]",
                 otherwise="Compute x·xᵀ with a batched matrix product, then softmax over the last dimension.")


def attention_weights_rows_sum_to_one(attention_weights: Callable, device: torch.device | str = "cpu") -> None:
    """Every row of weights is a probability distribution: non-negative, summing to 1."""
    __tracebackhide__ = True
    x = randn(2, 5, 4, seed=11, device=device)
    w = run(attention_weights, x, what=WEIGHTS_NAME)
    expect_tensor(w, what=WEIGHTS_NAME, shape=(2, 5, 5), device=device)
    if bool((w < 0).any()):
        fail(f"{WEIGHTS_NAME} has negative weights; a softmax never gives negative numbers. Is the softmax missing?")
    sums = w.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        col = w.sum(dim=-2)
        hint = ("The columns sum to 1 instead: softmax over dim=1, not the last dimension?"
                if torch.allclose(col, torch.ones_like(col), atol=1e-4) else "Apply softmax over the last dimension.")
        fail(f"The rows of {WEIGHTS_NAME} do not sum to 1. {hint}", torch.ones_like(sums), sums, case="row sums")


def attention_weights_match_oracle(attention_weights: Callable, device: torch.device | str = "cpu") -> None:
    """Random inputs of several shapes against PyTorch's fused attention (unscaled, values = identity)."""
    __tracebackhide__ = True
    for i, (b, t, k) in enumerate(SHAPES):
        x = randn(b, t, k, seed=100 + i, device=device)
        eye = torch.eye(t, device=device).expand(b, t, t)  # attending over the identity returns the weights
        expected = F.scaled_dot_product_attention(x, x, eye, scale=1.0)
        w = run(attention_weights, x.clone(), what=WEIGHTS_NAME)
        expect_tensor(w, what=WEIGHTS_NAME, shape=(b, t, t), device=device,
                      shape_hints={(b, t, k): "That is the shape of the input: return the (t, t) weights."})
        expect_close(w, expected, what=WEIGHTS_NAME, mistakes=_weight_mistakes(x), case=f"x of shape {(b, t, k)}",
                     otherwise="Compute x·xᵀ with a batched matrix product, then softmax over the last dimension.")


def _output_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    raw = x @ x.transpose(1, 2)  # (b, t, t)
    w = F.softmax(raw, dim=-1)
    return {
        "the weights are transposed (y = wᵀ·x), or the softmax runs over dim=1. Row i of w says how much "
        "output i takes from each input, so y = w·x.": w.transpose(1, 2) @ x,
        "the output is built from the raw scores x·xᵀ: apply the softmax before averaging.": raw @ x,
        "the scores are divided by √k; this assignment uses no scaling.": F.softmax(raw / math.sqrt(x.shape[-1]), dim=-1) @ x,
        "the output equals the input: the weighted average w·x is never taken.": x,
    }


_OUTPUT_HINT = "Compute the weights, then y = w·x with a batched matrix product (torch.bmm or @)."


def basic_self_attention_by_hand(basic_self_attention: Callable) -> None:
    """The notebook's 3-vector example: y = w·x with the weights worked out on paper."""
    __tracebackhide__ = True
    x, w = _hand_case("cpu")
    expected = w @ x
    y = run(basic_self_attention, x.clone(), what=OUTPUT_NAME)
    expect_tensor(y, what=OUTPUT_NAME, shape=(1, 3, 2), device="cpu",
                  shape_hints={(1, 3, 3): "That is the shape of the weights: return the weighted sum w·x."})
    expect_close(y, expected, what=OUTPUT_NAME, mistakes=_output_mistakes(x), case="x = [[1,0],[0,1],[1,1]]",
                 otherwise=_OUTPUT_HINT)


def basic_self_attention_matches_oracle(basic_self_attention: Callable, device: torch.device | str = "cpu") -> None:
    """Random inputs of several shapes against PyTorch's fused attention with queries = keys = values = x."""
    __tracebackhide__ = True
    for i, (b, t, k) in enumerate(SHAPES):
        x = randn(b, t, k, seed=200 + i, device=device)
        expected = F.scaled_dot_product_attention(x, x, x, scale=1.0)
        y = run(basic_self_attention, x.clone(), what=OUTPUT_NAME)
        expect_tensor(y, what=OUTPUT_NAME, shape=(b, t, k), device=device,
                      shape_hints={(b, t, t): "That is the shape of the weights: return the weighted sum w·x."})
        expect_close(y, expected, what=OUTPUT_NAME, mistakes=_output_mistakes(x), case=f"x of shape {(b, t, k)}",
                     otherwise=_OUTPUT_HINT)


def basic_self_attention_is_permutation_equivariant(basic_self_attention: Callable, device: torch.device | str = "cpu") -> None:
    """Permuting the input positions permutes the outputs the same way, and nothing else changes."""
    __tracebackhide__ = True
    x = randn(2, 6, 4, seed=300, device=device)
    perm = torch.tensor([3, 0, 5, 1, 4, 2], device=device)
    y = run(basic_self_attention, x.clone(), what=OUTPUT_NAME)
    y_perm = run(basic_self_attention, x[:, perm].clone(), what=OUTPUT_NAME)
    expect_tensor(y, what=OUTPUT_NAME, shape=(2, 6, 4), device=device)
    expect_tensor(y_perm, what=OUTPUT_NAME, shape=(2, 6, 4), device=device)
    expect_close(y_perm, y[:, perm], what=f"{OUTPUT_NAME} on permuted positions",
                 otherwise="Self-attention should not care where a vector sits: output i may depend only on x_i "
                           "and the set of all inputs. Does your code use positions or mix the batch?",
                 case="permutation [3, 0, 5, 1, 4, 2]")


def basic_self_attention_passes_gradients(basic_self_attention: Callable, device: torch.device | str = "cpu") -> None:
    """A loss on the output sends a finite, non-zero gradient to every input vector."""
    __tracebackhide__ = True
    x = randn(2, 5, 3, seed=400, device=device).requires_grad_(True)
    y = run(basic_self_attention, x, what=OUTPUT_NAME)
    expect_tensor(y, what=OUTPUT_NAME, shape=(2, 5, 3), device=device)
    if not y.requires_grad:
        fail(f"{OUTPUT_NAME} is cut off from autograd: avoid .detach(), .numpy() or torch.no_grad() inside it.")
    (y * randn(2, 5, 3, seed=401, device=device)).sum().backward()
    grad = x.grad
    if grad is None or not bool(torch.isfinite(grad).all()) or bool((grad.abs().sum(dim=-1) == 0).any()):
        fail(f"Some input vectors of {OUTPUT_NAME} receive no (or a non-finite) gradient; every output depends on every input.")
