"""Reference positional encodings from assignment 06, imported by later notebooks."""

import math

import torch
from torch import nn


def sinusoidal_positional_encoding(max_len: int, k: int) -> torch.Tensor:
    """(max_len, k) float32 table: PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(same).

    Positions run down the rows."""
    if k % 2 != 0:
        raise ValueError(f"the sinusoidal encoding needs an even size k, got k={k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    frequencies = torch.exp(torch.arange(0, k, 2, dtype=torch.float32) * (-math.log(10000.0) / k))  # (k/2,)
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(positions * frequencies)  # (max_len, k/2)
    table[:, 1::2] = torch.cos(positions * frequencies)
    return table


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table (a registered buffer, not a parameter) to x: (b, t, k) -> (b, t, k)."""

    def __init__(self, k: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        if t > self.table.shape[0]:
            raise ValueError(f"sequence length {t} exceeds max_len={self.table.shape[0]} of the positional table")
        return self.dropout(x + self.table[:t])


class LearnedPositionalEmbedding(nn.Module):
    """Adds a learned embedding of each position to x: (b, t, k) -> (b, t, k)."""

    def __init__(self, max_len: int, k: int):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        if t > self.embedding.num_embeddings:
            raise ValueError(f"sequence length {t} exceeds max_len={self.embedding.num_embeddings}")
        return x + self.embedding(torch.arange(t, device=x.device))  # (t, k) broadcast over the batch
