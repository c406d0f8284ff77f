"""Variants of the answers of assignment 06_positional_encoding."""
# ruff: noqa: F821 - variants use the notebook's names (sinusoidal_positional_encoding), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "06_positional_encoding"


# ------------------------------------------------------------------ sinusoidal_positional_encoding: mistakes

@mistake("sin-cos-swapped", "sinusoidal_positional_encoding")
def table_sin_cos_swapped(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.cos(angles)
    table[:, 1::2] = torch.sin(angles)
    return table


@mistake("exponent-i-over-k", "sinusoidal_positional_encoding")
def table_exponent_i(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(k // 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


@mistake("exponent-column-index", "sinusoidal_positional_encoding")
def table_exponent_column_index(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    columns = torch.arange(0, k, 2, dtype=torch.float32)  # j = 2i, the column of the sine
    frequencies = 1.0 / 10000 ** (2 * columns / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


@mistake("concatenated", "sinusoidal_positional_encoding")
def table_concatenated(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


@mistake("positions-from-1", "sinusoidal_positional_encoding")
def table_positions_from_1(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(1, max_len + 1, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


@mistake("every-row-position-0", "sinusoidal_positional_encoding")
def table_position_never_advances(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    table = torch.zeros(max_len, k)
    position = 0
    for row in table:
        row[0::2] = torch.sin(position * frequencies)
        row[1::2] = torch.cos(position * frequencies)
    return table


@mistake("float64", "sinusoidal_positional_encoding")
def table_float64_numpy(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    import numpy as np  # noqa: PLC0415 - the variant is a student's cell, its import included
    p = np.arange(max_len)[:, None]
    i = np.arange(k // 2)[None, :]
    angles = p / 10000 ** (2 * i / k)
    table = np.zeros((max_len, k))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return torch.from_numpy(table)


@mistake("odd-k-accepted", "sinusoidal_positional_encoding")
def table_odd_k_not_rejected(max_len, k):
    table = torch.zeros(max_len, k)
    for p in range(max_len):
        for j in range(k):
            angle = p / 10000 ** ((j - j % 2) / k)
            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


@mistake("odd-k-wrong-error", "sinusoidal_positional_encoding")
def table_odd_k_shape_error(max_len, k):
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table


@mistake("table-transposed", "sinusoidal_positional_encoding")
def table_transposed(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    angles = positions * frequencies
    table = torch.zeros(max_len, k)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.T


# ------------------------------------------------------------------ PositionalEncoding: mistakes

@mistake("table-not-a-buffer", "positional_encoding")
class pe_plain_attribute(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.table = sinusoidal_positional_encoding(max_len, k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x + self.table[:x.shape[1]])


@mistake("table-is-parameter", "positional_encoding")
class pe_parameter(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x + self.table[:x.shape[1]])


@mistake("table-is-parameter", "positional_encoding")
class pe_frozen_parameter(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k), requires_grad=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x + self.table[:x.shape[1]])


@mistake("buffer-transposed", "positional_encoding")
class pe_buffer_transposed(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k).T.contiguous())  # (k, max_len)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[1]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[1]}")
        return self.dropout(x + self.table[:, :x.shape[1]].T)


@mistake("first-row-everywhere", "positional_encoding")
class pe_seq_first_layout(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k).unsqueeze(1))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x + self.table[:x.size(0)])


@mistake("batch-indexed", "positional_encoding")
class pe_batch_indexed(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x + self.table[:x.shape[0]].unsqueeze(1))


@mistake("input-rescaled", "positional_encoding")
class pe_rescaled(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(x * math.sqrt(x.shape[-1]) + self.table[:x.shape[1]])


@mistake("table-returned", "positional_encoding")
class pe_returns_table(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return self.dropout(self.table[:x.shape[1]].expand_as(x))


@mistake("no-length-check", "positional_encoding")
class pe_no_length_check(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(x + self.table[:x.shape[1]])


@mistake("dropout-ignored", "positional_encoding")
class pe_dropout_ignored(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return x + self.table[:x.shape[1]]


@mistake("dropout-in-eval", "positional_encoding")
class pe_functional_dropout_always_on(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))
        self.p = dropout

    def forward(self, x):
        if x.shape[1] > self.table.shape[0]:
            raise ValueError(f"sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}")
        return F.dropout(x + self.table[:x.shape[1]], self.p)  # training=True by default, also in eval mode


# ------------------------------------------------------------------ LearnedPositionalEmbedding: mistakes

@mistake("embedding-returned", "learned_positional_embedding")
class learned_returned_not_added(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return self.embedding(torch.arange(x.shape[1], device=x.device)).expand_as(x)


@mistake("embedding-sizes-swapped", "learned_positional_embedding")
class learned_swapped_sizes(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(k, max_len)

    def forward(self, x):
        return x + self.embedding(torch.arange(x.shape[1], device=x.device))


@mistake("embedding-size", "learned_positional_embedding")
class learned_row_reserved_for_padding(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len + 1, k, padding_idx=0)

    def forward(self, x):
        return x + self.embedding(torch.arange(1, x.shape[1] + 1, device=x.device))


@mistake("raised", "learned_positional_embedding")
class learned_batch_positions(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding(torch.arange(x.shape[0], device=x.device))


@mistake("embedding-batch-indexed", "learned_positional_embedding")
class learned_batch_indexed(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding(torch.arange(x.shape[0], device=x.device)).unsqueeze(1)


@mistake("embedding-positions-from-1", "learned_positional_embedding")
class learned_positions_from_1(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding(torch.arange(1, x.shape[1] + 1, device=x.device))


@mistake("embedding-first-row-everywhere", "learned_positional_embedding")
class learned_first_row(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding.weight[0]


@mistake("embedding-input-rescaled", "learned_positional_embedding")
class learned_rescaled(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x * math.sqrt(x.shape[-1]) + self.embedding(torch.arange(x.shape[1], device=x.device))


@mistake("not-one-embedding", "learned_positional_embedding")
class learned_parameter_table(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.table = nn.Parameter(torch.randn(max_len, k))

    def forward(self, x):
        return x + self.table[:x.shape[1]]


@mistake("parameter-count", "learned_positional_embedding")
class learned_extra_norm(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)
        self.norm = nn.LayerNorm(k)

    def forward(self, x):
        return self.norm(x + self.embedding(torch.arange(x.shape[1], device=x.device)))


@mistake("embedding-cut-off", "learned_positional_embedding")
class learned_weight_data(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding.weight.data[:x.shape[1]]


@mistake("detached", "learned_positional_embedding")
class learned_under_no_grad(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        with torch.no_grad():
            return x + self.embedding(torch.arange(x.shape[1], device=x.device))


# ------------------------------------------------------------------ correct, written differently

@alternative("sinusoidal_positional_encoding")
def table_exp_log_stack(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    p = torch.arange(max_len).float()[:, None]
    w = torch.exp(-math.log(10000.0) * torch.arange(0, k, 2).float() / k)
    return torch.stack([torch.sin(p * w), torch.cos(p * w)], dim=-1).reshape(max_len, k)


@alternative("sinusoidal_positional_encoding")
def table_loops_float64(max_len, k):
    if k % 2 == 1:
        raise ValueError("odd k")
    rows = [[(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j // 2) * 2 / k)) for j in range(k)]
            for p in range(max_len)]
    return torch.tensor(rows, dtype=torch.float64).float()


@alternative("positional_encoding")
class pe_batched_buffer_functional_dropout(nn.Module):
    def __init__(self, k, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, k).unsqueeze(0), persistent=False)
        self.p = dropout

    def forward(self, x):
        t = x.shape[1]
        if t > self.pe.shape[1]:
            raise ValueError(f"{t} > max_len {self.pe.shape[1]}")
        return F.dropout(x + self.pe[:, :t], p=self.p, training=self.training)


@alternative("learned_positional_embedding")
class learned_weight_slice(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.embedding.weight[: x.shape[1]]


@alternative("learned_positional_embedding")
class learned_expanded_positions(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.embedding = nn.Embedding(max_len, k)

    def forward(self, x):
        b, t, _ = x.shape
        positions = torch.arange(t, device=x.device).unsqueeze(0).expand(b, t)
        return self.embedding(positions) + x


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("table-odd-k-not-rejected", "pe-plain-attribute", "learned-returned-not-added")
