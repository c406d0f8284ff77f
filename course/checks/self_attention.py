"""Probes for assignment 01: attention_weights and basic_self_attention.

Each check calls the student's function on the cases declared here and records what it returns; its judge (in
course/judges/self_attention.py, hidden under grading) decides from the same cases with PyTorch's fused attention
as the oracle. The visible checks use one small batch; the hidden ones add shapes. Under grading every random input
comes from the grader's secret seed, and the cases worked by hand add a secret random case (course/checks/seeds.py).
"""

import torch

from course.checks.check import Check, when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import randn
from course.checks.evidence import Recorder
from course.checks.kinds import Case, calls, calls_backward, given, random_case, shapes

# batch > 1, t != k, a single position, k = 1: shapes that expose swapped or missing dimensions
SHAPES = ((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))
PERMUTATION = (3, 0, 5, 1, 4, 2)
HAND_LABEL = "x = [[1,0],[0,1],[1,1]]"


def hand_x() -> torch.Tensor:
    """The notebook's example: three 2-vectors whose weights can be worked out on paper."""
    return torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)


def by_hand(key: str) -> tuple:
    """The notebook's example, and under grading a secret random case (its seed salted with the grader's secret)."""
    return given(key, hand_x, HAND_LABEL), random_case(f"{key}_secret", (2, 5, 3), 60, secret=True)


# ------------------------------------------------------------------------------------------- attention_weights

attention_weights_by_hand = calls("attention_weights_by_hand", by_hand("w"))
attention_weights_vs_pytorch = calls_backward("attention_weights_vs_pytorch",
                                     (random_case("w", (2, 4, 3), 50, upstream=((2, 4, 4), 51)),))
attention_weights_rows = calls("attention_weights_rows", (random_case("w", (2, 5, 4), 11),))


def _large() -> dict[str, torch.Tensor]:
    """Inputs 10 times larger: dot products in the hundreds, where float32's exp overflows (past about 88)."""
    return {"x": 10.0 * randn(2, 5, 4, seed=150)}  # (2, 5, 4)


#: the shapes, and dot products in the hundreds, which a softmax (it subtracts each row's maximum first) survives
attention_weights_oracle = calls("attention_weights_oracle", (
    *shapes("w", SHAPES, seed=100), Case("w_large", _large, "x of shape (2, 5, 4) times 10")))

# ------------------------------------------------------------------------------------------- basic_self_attention

basic_self_attention_by_hand = calls("basic_self_attention_by_hand", by_hand("y"))
basic_self_attention_vs_pytorch = calls_backward("basic_self_attention_vs_pytorch",
                                        (random_case("y_grad", (2, 4, 3), 50, upstream=((2, 4, 3), 52)),))
basic_self_attention_oracle = calls_backward("basic_self_attention_oracle", (
    *shapes("y", SHAPES, seed=200), random_case("y_grad", (2, 5, 3), 400, upstream=((2, 5, 3), 401))))

PERMUTATION_CASE = random_case("y", (2, 6, 4), 300)


def _probe_permutation(basic_self_attention, rec: Recorder) -> None:
    x = PERMUTATION_CASE.inputs()["x"].to(rec.device)
    rec.call("y", basic_self_attention, x.clone())
    rec.call("y_perm", basic_self_attention, x[:, torch.tensor(PERMUTATION, device=rec.device)].clone())


permutation_equivariance = Check("permutation_equivariance", _probe_permutation)
