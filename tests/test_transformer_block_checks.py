"""The reference block of assignment 05 passes every check of course.checks.transformer_block, and the checks
name typical mistakes."""


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import transformer_block as reference
from course.checks import transformer_block as check
from course.checks.compare import CheckFailed
from course.multi_head import MultiHeadAttention

def test_the_oracle_layer_agrees_with_the_reference_block_closely():
    torch.manual_seed(0)
    block = reference.TransformerBlock(12, 3).eval()
    parts = check._block_parts(block, 12, 3, 4)
    check._randomize(block, seed=1)
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        difference = (block(x) - check._block_oracle(parts, x, 3, 4, None)).abs().max()
    assert difference < 1e-5


class _Block(nn.Module):
    """A block whose forward is given as a function of (self, x, mask)."""

    forward_fn = None

    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1, self.norm2 = nn.LayerNorm(k), nn.LayerNorm(k)
        self.ff = reference.FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        return type(self).forward_fn(self, x, mask)


def _block(forward_fn):
    return type("Block", (_Block,), {"forward_fn": staticmethod(forward_fn)})


def test_pre_norm_is_diagnosed():
    def pre_norm(self, x, mask):
        x = x + self.attention(self.norm1(x), mask=mask)
        return x + self.ff(self.norm2(x))

    with pytest.raises(CheckFailed, match="pre-norm"):
        check.block_matches_oracle(_block(pre_norm))


def test_a_mask_that_is_not_passed_on_is_diagnosed():
    def ignores_mask(self, x, mask):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ff(x))

    check.block_matches_oracle(_block(ignores_mask))  # right without a mask
    with pytest.raises(CheckFailed, match="mask is not passed on"):
        check.block_passes_mask_on(_block(ignores_mask))


def test_one_shared_layer_norm_is_diagnosed():
    class Shared(reference.TransformerBlock):
        def __init__(self, k, heads, ff_mult=4, dropout=0.0):
            super().__init__(k, heads, ff_mult, dropout)
            self.norm2 = self.norm1

    with pytest.raises(CheckFailed, match="are the same LayerNorm"):
        check.block_structure(Shared)


def test_hidden_size_four_times_four_is_diagnosed():
    class Small(reference.TransformerBlock):
        def __init__(self, k, heads, ff_mult=4, dropout=0.0):
            super().__init__(k, heads, ff_mult, dropout)
            self.ff = reference.FeedForward(k, 4 * 4)

    with pytest.raises(CheckFailed, match="4·4"):
        check.block_structure(Small)


def test_relu_after_the_second_layer_is_diagnosed_by_hand():
    class ReluAfter(reference.FeedForward):
        def forward(self, x):
            return F.relu(self.net(x))

    with pytest.raises(CheckFailed, match="after the second linear layer") as failure:
        check.feed_forward_by_hand(ReluAfter)
    assert "expected" in str(failure.value) and "actual" in str(failure.value)


def test_blocks_in_a_plain_list_are_diagnosed():
    class Unregistered(reference.TransformerClassifier):
        def __init__(self, vocab_size, k, heads, depth, num_classes):
            super().__init__(vocab_size, k, heads, depth, num_classes)
            blocks = list(self.blocks)
            del self.blocks
            self.blocks = blocks

    with pytest.raises(CheckFailed, match="plain Python list"):
        check.classifier_structure(Unregistered)


def test_a_softmax_on_the_logits_is_diagnosed():
    class Probabilities(reference.TransformerClassifier):
        def forward(self, tokens):
            return F.softmax(super().forward(tokens), dim=-1)

    with pytest.raises(CheckFailed, match="Return the raw logits"):
        check.classifier_matches_reference(Probabilities)


def test_a_wrong_feed_forward_inside_a_right_block_is_named():
    class GeluFeedForward(reference.FeedForward):
        def forward(self, x):
            return self.net[2](F.gelu(self.net[0](x)))

    class Block(reference.TransformerBlock):
        def __init__(self, k, heads, ff_mult=4, dropout=0.0):
            super().__init__(k, heads, ff_mult, dropout)
            self.ff = GeluFeedForward(k, ff_mult * k)

    with pytest.raises(CheckFailed, match="Make your FeedForward pass its tests"):
        check.block_matches_oracle(Block)
