"""Figures shared by the notebooks, kept small so executed notebooks stay light."""

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch


def plot_attention(
    weights: torch.Tensor,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    title: str = "",
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Heatmap of one (t_q, t_k) weight matrix: rows are queries (outputs), columns keys (inputs)."""
    w = weights.detach().float().cpu()
    if w.dim() != 2:
        raise ValueError(f"plot_attention takes one (t_q, t_k) matrix, got shape {tuple(w.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * w.shape[1] + 2.2, 0.45 * w.shape[0] + 1.2), dpi=80)
    image = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=max(1e-9, float(w.max())))
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if queries is not None:
        ax.set_yticks(range(len(queries)), labels=list(queries))
    if keys is not None:
        ax.set_xticks(range(len(keys)), labels=list(keys), rotation=45, ha="right")
    ax.set_xlabel("attends to (input position j)")
    ax.set_ylabel("output position i")
    if title:
        ax.set_title(title)
    return ax
