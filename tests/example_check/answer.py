"""The reference answer of the worked example (docs/contributors.md, "A new check, worked through"): in the course it
would be a function of course/<assignment>.py, the solution of the notebook's answer cell."""

import torch
import torch.nn.functional as F


def sliding_window_weights(x, window):
    """Causal attention weights within a window: query i attends to itself and the window - 1 positions before it.

    x: (b, t, k). Returns (b, t, t): softmax over j of x[n, i] · x[n, j] where i - window < j <= i, 0 elsewhere.
    """
    i = torch.arange(x.shape[1], device=x.device)
    allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # (t, t): key j for query i
    raw = (x @ x.transpose(-2, -1)).masked_fill(~allowed, float("-inf"))  # (b, t, t)
    return F.softmax(raw, dim=-1)
