"""Probes for assignment 01: attention_weights and basic_self_attention.

Each check runs the student's function on inputs chosen here and records what it returns; its judge (in
course/judges/self_attention.py, hidden under grading) decides with PyTorch's fused attention as the oracle. The
visible checks use one small batch; the hidden ones add shapes. Under grading every random input comes from the
grader's secret seed, and the cases worked by hand add a secret random case (see course/checks/seeds.py).
"""

import torch

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading

# batch > 1, t != k, a single position, k = 1: shapes that expose swapped or missing dimensions
SHAPES = ((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))
PERMUTATION = (3, 0, 5, 1, 4, 2)


def hand_x() -> torch.Tensor:
    """The notebook's example: three 2-vectors whose weights can be worked out on paper."""
    return torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)


def secret_x() -> torch.Tensor:
    """Under grading, the random case a check worked by hand adds (its seed is salted with the grader's secret)."""
    return randn(2, 5, 3, seed=60)


def small_x() -> torch.Tensor:
    """The visible checks' small batch: two sequences of four 3-vectors."""
    return randn(2, 4, 3, seed=50)


def rows_x() -> torch.Tensor:
    return randn(2, 5, 4, seed=11)


def shape_x(i: int, b: int, t: int, k: int, seed: int) -> torch.Tensor:
    return randn(b, t, k, seed=seed + i)


def permutation_x() -> torch.Tensor:
    return randn(2, 6, 4, seed=300)


# ------------------------------------------------------------------------------------------- attention_weights

def _probe_weights_by_hand(attention_weights, rec: Recorder) -> None:
    rec.call("w", attention_weights, hand_x().to(rec.device))
    if grading():
        rec.call("w_secret", attention_weights, secret_x().to(rec.device))


attention_weights_by_hand = Check("attention_weights_by_hand", _probe_weights_by_hand)


def _probe_weights_vs_pytorch(attention_weights, rec: Recorder) -> None:
    x = small_x().to(rec.device).requires_grad_(True)
    w = rec.call("w", attention_weights, x)
    modules.backward(rec, w, randn(2, 4, 4, seed=51), {"x": x})


attention_weights_vs_pytorch = Check("attention_weights_vs_pytorch", _probe_weights_vs_pytorch)


def _probe_rows(attention_weights, rec: Recorder) -> None:
    rec.call("w", attention_weights, rows_x().to(rec.device))


attention_weights_rows = Check("attention_weights_rows", _probe_rows)


def _probe_weights_oracle(attention_weights, rec: Recorder) -> None:
    for i, (b, t, k) in enumerate(SHAPES):
        rec.call(f"w{i}", attention_weights, shape_x(i, b, t, k, 100).to(rec.device))


attention_weights_oracle = Check("attention_weights_oracle", _probe_weights_oracle)


# ------------------------------------------------------------------------------------------- basic_self_attention

def _probe_output_by_hand(basic_self_attention, rec: Recorder) -> None:
    rec.call("y", basic_self_attention, hand_x().to(rec.device))
    if grading():
        rec.call("y_secret", basic_self_attention, secret_x().to(rec.device))


basic_self_attention_by_hand = Check("basic_self_attention_by_hand", _probe_output_by_hand)


def probe_output_and_gradient(basic_self_attention, rec: Recorder, x: torch.Tensor, upstream: torch.Tensor) -> None:
    """Record y = basic_self_attention(x) under y_grad, and the gradient of sum(y · upstream) with respect to x."""
    x = x.to(rec.device).requires_grad_(True)
    modules.backward(rec, rec.call("y_grad", basic_self_attention, x), upstream, {"x": x})


def _probe_output_vs_pytorch(basic_self_attention, rec: Recorder) -> None:
    probe_output_and_gradient(basic_self_attention, rec, small_x(), randn(2, 4, 3, seed=52))


basic_self_attention_vs_pytorch = Check("basic_self_attention_vs_pytorch", _probe_output_vs_pytorch)


def _probe_output_oracle(basic_self_attention, rec: Recorder) -> None:
    for i, (b, t, k) in enumerate(SHAPES):
        rec.call(f"y{i}", basic_self_attention, shape_x(i, b, t, k, 200).to(rec.device))
    probe_output_and_gradient(basic_self_attention, rec, randn(2, 5, 3, seed=400), randn(2, 5, 3, seed=401))


basic_self_attention_oracle = Check("basic_self_attention_oracle", _probe_output_oracle)


def _probe_permutation(basic_self_attention, rec: Recorder) -> None:
    x = permutation_x().to(rec.device)
    perm = torch.tensor(PERMUTATION, device=rec.device)
    rec.call("y", basic_self_attention, x.clone())
    rec.call("y_perm", basic_self_attention, x[:, perm].clone())


permutation_equivariance = Check("permutation_equivariance", _probe_permutation)
