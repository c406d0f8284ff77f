"""Variants of the answers of assignment 06_positional_encoding."""
# ruff: noqa: F821 - variants use the notebook's names (sinusoidal_positional_encoding), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, edits, mistake, written
from course.judges.positional_encoding import WRITTEN

ASSIGNMENT = "06_positional_encoding"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

# the mistakes course/judges/positional_encoding.py writes as code and names by running them; below, those it names
# by a structure (a dtype, a buffer, an error: their messages beside the judge that names them) and those every
# check names
written(WRITTEN, cells={"PositionalEncoding": "positional_encoding",
                        "LearnedPositionalEmbedding": "learned_positional_embedding"})

TABLE = "sinusoidal_positional_encoding"
MODULE = "positional_encoding"
LEARNED = "learned_positional_embedding"
ODD_CHECK = ('    if k % 2 != 0:\n        raise ValueError(f"k must be even (sines and cosines come in pairs), '
             'got k={k}")\n')
BUFFER = 'self.register_buffer("table", sinusoidal_positional_encoding(max_len, k))'
LENGTH_CHECK = ('        if t > self.table.shape[0]:\n'
                '            raise ValueError(f"sequence length {t} is longer than max_len={self.table.shape[0]}")\n')
ADDED = "self.dropout(x + self.table[:t])"
EMBEDDING = "nn.Embedding(max_len, k)"
POSITIONS = "torch.arange(x.shape[1], device=x.device)"
LOOKED_UP = "x + self.embedding(positions)"


# ------------------------------------------------------------------ sinusoidal_positional_encoding: mistakes

@mistake("float64", TABLE)
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


@mistake("odd-k-accepted", TABLE)
def table_odd_k_not_rejected(max_len, k):
    table = torch.zeros(max_len, k)
    for p in range(max_len):
        for j in range(k):
            angle = p / 10000 ** ((j - j % 2) / k)
            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


edit("table-odd-k-shape-error", TABLE, (ODD_CHECK, ""), mistake="odd-k-wrong-error")
edit("table-transposed", TABLE, ("return table", "return table.T"), mistake="table-transposed")

# ------------------------------------------------------------------ PositionalEncoding: mistakes

edit("pe-plain-attribute", MODULE, (BUFFER, "self.table = sinusoidal_positional_encoding(max_len, k)"),
     mistake="table-not-a-buffer")
edit("pe-parameter", MODULE, (BUFFER, "self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k))"),
     mistake="table-is-parameter")
edit("pe-frozen-parameter", MODULE,
     (BUFFER, "self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k), requires_grad=False)"),
     mistake="table-is-parameter")
edit("pe-buffer-transposed", MODULE,
     (f"{BUFFER}  # (max_len, k)",
      'self.register_buffer("table", sinusoidal_positional_encoding(max_len, k).T.contiguous())  # (k, max_len)'),
     ("if t > self.table.shape[0]:", "if t > self.table.shape[1]:"), ("self.table[:t]", "self.table[:, :t].T"),
     mistake="buffer-transposed")
# named first-row-everywhere on a batch of one, batch-indexed on a larger one (the judge's pe-first-row and
# pe-batch-indexed)
edit("pe-seq-first-layout", MODULE,
     (BUFFER, 'self.register_buffer("table", sinusoidal_positional_encoding(max_len, k).unsqueeze(1))'),
     ("self.table[:t]", "self.table[:x.size(0)]"), mistake="first-row-everywhere")
edit("pe-no-length-check", MODULE, (LENGTH_CHECK, ""), mistake="no-length-check")
edit("pe-length-error-without-lengths", MODULE,
     ('raise ValueError(f"sequence length {t} is longer than max_len={self.table.shape[0]}")',
      'raise ValueError("the sequence is too long")'), mistake="length-error-unnamed")
edit("pe-default-max-len-512", MODULE, ("max_len=5000", "max_len=512"), mistake="default-max-len")
edit("pe-dropout-ignored", MODULE, ("        self.dropout = nn.Dropout(dropout)\n", ""),
     (ADDED, "x + self.table[:t]"), mistake="dropout-ignored")
edit("pe-functional-dropout-always-on", MODULE, ("self.dropout = nn.Dropout(dropout)", "self.p = dropout"),
     (ADDED, "F.dropout(x + self.table[:t], self.p)"), mistake="dropout-in-eval")  # training=True, even in eval
edit("pe-dropout-on-x", MODULE, (ADDED, "self.dropout(x) + self.table[:t]"), mistake="dropout-before-sum")
edit("pe-dropout-on-the-table", MODULE, (ADDED, "x + self.dropout(self.table[:t])"), mistake="dropout-before-sum")

# ------------------------------------------------------------------ LearnedPositionalEmbedding: mistakes

edit("learned-swapped-sizes", LEARNED, (EMBEDDING, "nn.Embedding(k, max_len)"), mistake="embedding-sizes-swapped")
edit("learned-row-reserved-for-padding", LEARNED, (EMBEDDING, "nn.Embedding(max_len + 1, k, padding_idx=0)"),
     (POSITIONS, "torch.arange(1, x.shape[1] + 1, device=x.device)"), mistake="embedding-size")
edit("learned-batch-positions", LEARNED, (POSITIONS, "torch.arange(x.shape[0], device=x.device)"), mistake="raised")
edit("learned-positions-on-the-cpu", LEARNED, (POSITIONS, "torch.arange(x.shape[1])"), mistake="positions-on-the-cpu")
edit("learned-parameter-table", LEARNED,
     (f"self.embedding = {EMBEDDING}", "self.table = nn.Parameter(torch.randn(max_len, k))"),
     ("self.embedding(positions)", "self.table[:x.shape[1]]"), mistake="not-one-embedding")
edit("learned-extra-norm", LEARNED, (EMBEDDING, f"{EMBEDDING}\n        self.norm = nn.LayerNorm(k)"),
     (LOOKED_UP, f"self.norm({LOOKED_UP})"), mistake="parameter-count")
edit("learned-weight-data", LEARNED, ("self.embedding(positions)", "self.embedding.weight.data[:x.shape[1]]"),
     mistake="embedding-cut-off")
edit("learned-under-no-grad", LEARNED,
     (f"        return {LOOKED_UP}", f"        with torch.no_grad():\n            return {LOOKED_UP}"),
     mistake="detached")

# ------------------------------------------------------------------ correct, written differently

@alternative(TABLE)
def table_exp_log_stack(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    p = torch.arange(max_len).float()[:, None]
    w = torch.exp(-math.log(10000.0) * torch.arange(0, k, 2).float() / k)
    return torch.stack([torch.sin(p * w), torch.cos(p * w)], dim=-1).reshape(max_len, k)


@alternative(TABLE)
def table_loops_float64(max_len, k):
    if k % 2 == 1:
        raise ValueError("odd k")
    rows = [[(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j // 2) * 2 / k)) for j in range(k)]
            for p in range(max_len)]
    return torch.tensor(rows, dtype=torch.float64).float()


@alternative(MODULE)
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


edit("learned-weight-slice", LEARNED, ("self.embedding(positions)", "self.embedding.weight[: x.shape[1]]"))
edit("learned-expanded-positions", LEARNED,
     (f"{POSITIONS}  # (t,)", f"{POSITIONS}.unsqueeze(0).expand(x.shape[0], -1)  # (b, t)"),
     (LOOKED_UP, "self.embedding(positions) + x"))


SAMPLE_MISTAKES = ("table-odd-k-not-rejected", "pe-plain-attribute", "learned-returned-not-added")
