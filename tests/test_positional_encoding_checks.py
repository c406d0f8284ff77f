"""The reference positional encodings of assignment 06 pass every check of course.checks.positional_encoding,
and the checks name typical mistakes."""

import math

import pytest
import torch
from torch import nn

from course import positional_encoding as reference
from course.checks import positional_encoding as check
from course.checks.compare import CheckFailed

def test_the_hand_case_is_sines_and_cosines_of_p_and_p_over_100():
    table = check.reference_table(3, 4)
    p = torch.arange(3.0)
    expected = torch.stack([p.sin(), p.cos(), (p / 100).sin(), (p / 100).cos()], dim=1)
    assert torch.allclose(table, expected)


def test_swapped_sin_and_cos_are_diagnosed():
    def swapped(max_len, k):
        return reference.sinusoidal_positional_encoding(max_len, k).view(max_len, k // 2, 2).flip(-1).reshape(max_len, k)

    with pytest.raises(CheckFailed, match="sin and cos are swapped"):
        check.table_by_hand(swapped)


def test_concatenated_sines_and_cosines_are_diagnosed():
    def concatenated(max_len, k):
        table = reference.sinusoidal_positional_encoding(max_len, k)
        return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)

    with pytest.raises(CheckFailed, match="concatenated"):
        check.table_matches_formula(concatenated)


def test_a_float64_table_is_diagnosed():
    def double(max_len, k):
        return reference.sinusoidal_positional_encoding(max_len, k).double()

    with pytest.raises(CheckFailed, match="float32"):
        check.table_by_hand(double)


def test_a_table_kept_as_a_plain_attribute_is_diagnosed():
    class Plain(nn.Module):
        def __init__(self, k, max_len=5000, dropout=0.0):
            super().__init__()
            self.table = reference.sinusoidal_positional_encoding(max_len, k)

        def forward(self, x):
            return x + self.table[: x.shape[1]]

    with pytest.raises(CheckFailed, match="plain tensor attribute"):
        check.module_structure(Plain)


def test_a_trainable_table_is_diagnosed():
    class Trainable(reference.PositionalEncoding):
        def __init__(self, k, max_len=5000, dropout=0.0):
            super().__init__(k, max_len, dropout)
            table = self.table
            del self.table
            self.table = nn.Parameter(table)

    with pytest.raises(CheckFailed, match="registers parameters"):
        check.module_structure(Trainable)


def test_the_batch_indexed_table_of_seq_first_tutorials_is_diagnosed():
    class SeqFirst(reference.PositionalEncoding):
        def __init__(self, k, max_len=5000, dropout=0.0):
            super().__init__(k, max_len, dropout)
            self.table = self.table.unsqueeze(1)  # (max_len, 1, k)

        def forward(self, x):
            return x + self.table[: x.shape[0]]

    with pytest.raises(CheckFailed, match="encoding of position 0"):
        check.module_adds_table(SeqFirst)
    with pytest.raises(CheckFailed, match="indexed by the batch dimension"):
        check.module_matches_oracle(SeqFirst)


def test_rescaled_embeddings_are_diagnosed():
    class Rescaled(reference.PositionalEncoding):
        def forward(self, x):
            return super().forward(x * math.sqrt(x.shape[-1]))

    with pytest.raises(CheckFailed, match="rescaled"):
        check.module_adds_table(Rescaled)


def test_a_learned_embedding_returned_instead_of_added_is_diagnosed():
    class Returned(reference.LearnedPositionalEmbedding):
        def forward(self, x):
            return self.embedding(torch.arange(x.shape[1], device=x.device)).expand_as(x)

    with pytest.raises(CheckFailed, match="returned instead of added"):
        check.learned_structure(Returned)
