"""Reference transformer parts from assignment 05, imported by later notebooks."""

import torch
from torch import nn

from course.multi_head import MultiHeadAttention


class FeedForward(nn.Module):
    """Position-wise MLP: Linear(k, hidden) -> ReLU -> Linear(hidden, k), applied to every position alone."""

    def __init__(self, k: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerBlock(nn.Module):
    """Post-norm encoder block: x = norm1(x + attention(x)); x = norm2(x + ff(x)). (b, t, k) -> (b, t, k)."""

    def __init__(self, k: int, heads: int, ff_mult: int = 4, dropout: float = 0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask=mask)))
        return self.norm2(x + self.dropout(self.ff(x)))


class TransformerClassifier(nn.Module):
    """Tokens (b, t) -> class logits (b, num_classes): embedding, [positions], blocks, mean over positions, linear.

    positions: an optional module adding position information to the (b, t, k) embeddings (assignment 06).
    """

    def __init__(self, vocab_size: int, k: int, heads: int, depth: int, num_classes: int,
                 positions: nn.Module | None = None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.positions = positions
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embedding(tokens)  # (b, t, k)
        if self.positions is not None:
            x = self.positions(x)
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.to_classes(x.mean(dim=1))  # (b, num_classes)
