"""Assignment 04's checks: the course's reference passes all of them, and typical mistakes are named."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import multi_head as reference
from course.scaling import scaled_dot_product_attention
from course.checks import multi_head
from course.checks.compare import CheckFailed

def test_reshape_without_transpose_is_diagnosed():
    def split_heads(x, heads):
        b, t, k = x.shape
        return x.reshape(b, heads, t, k // heads)

    with pytest.raises(CheckFailed, match="without a transpose"):
        multi_head.split_by_hand(split_heads)


def test_interleaved_heads_are_diagnosed():
    def split_heads(x, heads):
        b, t, k = x.shape
        return x.view(b, t, k // heads, heads).permute(0, 3, 1, 2)

    with pytest.raises(CheckFailed, match="split interleaved"):
        multi_head.split_by_hand(split_heads)


class _ScaledByModelSize(reference.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = reference.split_heads(self.to_queries(x), self.heads)
        k = reference.split_heads(self.to_keys(context), self.heads)
        v = reference.split_heads(self.to_values(context), self.heads)
        w = F.softmax(q @ k.mT / math.sqrt(self.k), dim=-1)
        return self.unify_heads(reference.merge_heads(w @ v))


def test_scaling_by_the_model_size_is_diagnosed():
    with pytest.raises(CheckFailed, match="divided by √k, the model size"):
        multi_head.narrow_matches_oracle(_ScaledByModelSize)


def test_ignored_context_is_diagnosed():
    class IgnoresContext(reference.MultiHeadAttention):
        def forward(self, x, context=None, mask=None):
            return super().forward(x, mask=mask)

    with pytest.raises(CheckFailed, match="context is ignored"):
        multi_head.narrow_shapes_and_context(IgnoresContext)


def test_unify_heads_without_bias_is_diagnosed():
    class NoBias(reference.MultiHeadAttention):
        def __init__(self, k, heads):
            super().__init__(k, heads)
            self.unify_heads = nn.Linear(k, k, bias=False)

    with pytest.raises(CheckFailed, match="unify_heads has no bias"):
        multi_head.narrow_structure(NoBias)


def test_a_loop_over_heads_is_diagnosed():
    class Loop(reference.MultiHeadAttention):
        def forward(self, x, context=None, mask=None):
            context = x if context is None else context
            s = self.k // self.heads
            q, k, v = self.to_queries(x), self.to_keys(context), self.to_values(context)
            outs = [scaled_dot_product_attention(q[..., i * s:(i + 1) * s], k[..., i * s:(i + 1) * s],
                                                 v[..., i * s:(i + 1) * s], mask)[0]
                    for i in range(self.heads)]
            return self.unify_heads(torch.cat(outs, dim=-1))

    multi_head.narrow_matches_oracle(Loop)  # right numbers ...
    with pytest.raises(CheckFailed, match="Python loop over the heads"):  # ... the wrong way
        multi_head.narrow_passes_gradients_without_a_loop(Loop)


def test_heads_in_a_plain_list_are_diagnosed():
    class PlainList(reference.MultiHeadAttention):
        def __init__(self, k, heads):
            super().__init__(k, heads)
            self.extra = [nn.Linear(k, k)]  # invisible to parameters()

    multi_head.narrow_structure(PlainList)  # a plain list adds nothing the count can see
    with pytest.raises(CheckFailed, match="4k² \\+ k"):
        class Registered(PlainList):
            def __init__(self, k, heads):
                super().__init__(k, heads)
                self.extra = nn.ModuleList(self.extra)

        multi_head.narrow_structure(Registered)


def test_matmul_count_of_the_reference_is_small():
    module = reference.MultiHeadAttention(16, 8)
    y = module(torch.randn(2, 5, 16, requires_grad=True))
    assert multi_head._count_matmuls(y) <= 7
