"""The judge of the worked example (docs/contributors.md): in the course, course/judges/<assignment>.py, hidden from
the student's code under grading. Its mistakes, each written as a student writes it with its message beside it; the
oracle; one line that judges the check."""

import torch
import torch.nn.functional as F
from example_check import checks

from course.judges.kinds import Advice, Oracle, against
from course.judges.variants import Variants

# ------------------------------------------------------------------------------------------- mistakes
# Edits change the reference (answer.py):
#     allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # (t, t): key j for query i

WRITTEN = Variants(__name__, reference="example_check.answer")

WRITTEN.edit("window-too-wide", "sliding_window_weights", ("> i[:, None] - window", ">= i[:, None] - window"),
             mistake="window-one-too-wide",
             says="each position attends to window + 1 positions: the window counts the position itself, so key j is "
                  "allowed for i - window < j <= i.")
WRITTEN.edit("window-both-sides", "sliding_window_weights", ("(i[None, :] <= i[:, None]) & ", ""),
             mistake="window-sees-the-future",
             says="a position attends to every later one: the window is causal, key j must also satisfy j <= i.")


@WRITTEN.rewrite("sliding_window_weights", "masked-after-softmax",
                 says="the weights outside the window are zeroed after the softmax, so the rows no longer sum to 1: "
                      "fill the scores outside the window with -inf before the softmax.")
def weights_masked_after_softmax(x, window):
    i = torch.arange(x.shape[1])
    allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    return F.softmax(x @ x.transpose(-2, -1), dim=-1) * allowed

# ------------------------------------------------------------------------------------------- the oracle and the check


def _oracle(x: torch.Tensor, window: int) -> torch.Tensor:
    """PyTorch's fused attention over the identity with a band mask: it returns the weights themselves."""
    b, t, _ = x.shape
    band = torch.ones(t, t, dtype=torch.bool).tril().triu(1 - window)  # (t, t): i - window < j <= i
    return F.scaled_dot_product_attention(x, x, torch.eye(t).expand(b, t, t), attn_mask=band, scale=1.0)


WEIGHTS = Oracle(
    "sliding_window_weights(x, window)", _oracle, "F.scaled_dot_product_attention with a band mask",
    shape=lambda x, window: (x.shape[0], x.shape[1], x.shape[1]),
    mistakes=lambda **inputs: WRITTEN.outputs("sliding_window_weights", **inputs),
    advice=Advice(otherwise="Mask the scores x·xᵀ outside i - window < j <= i with -inf, then softmax over the last "
                            "dimension."))

against(checks.sliding_window_oracle, WEIGHTS,
        passed="Random inputs with windows of 1, shorter than the sequence and longer, against PyTorch's fused "
               "attention with a band mask.")
