"""Variants of the answers of assignment 05_transformer_block."""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, TransformerBlock), as a
# student's cell does

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, edits, mistake, written
from course.judges.transformer_block import ATTENTION_SUBLAYER, FF_SUBLAYER, WRITTEN  # the solution's two sub-layers

ASSIGNMENT = "05_transformer_block"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT


# the mistakes course/judges/transformer_block.py writes as code and names by running them
written(WRITTEN)


# ------------------------------------------------------------------ FeedForward: mistakes

edit("ff-relu-around-the-net", "feed_forward", ("return self.net(x)", "return F.relu(self.net(x))"),
     mistake="relu-after-output")
edit("ff-hidden-ignored", "feed_forward", ("nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k)",
                                           "nn.Linear(k, 4 * k), nn.ReLU(), nn.Linear(4 * k, k)"),
     mistake="hidden-ignored")
edit("ff-without-biases", "feed_forward", ("nn.Linear(k, hidden)", "nn.Linear(k, hidden, bias=False)"),
     ("nn.Linear(hidden, k)", "nn.Linear(hidden, k, bias=False)"), mistake="ff-no-bias")


@mistake("linear-count", "feed_forward")
class ff_layers_in_a_list(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.layers = [nn.Linear(k, hidden), nn.Linear(hidden, k)]

    def forward(self, x):
        return self.layers[1](F.relu(self.layers[0](x)))


# ------------------------------------------------------------------ FeedForward: correct alternatives

@alternative("feed_forward")
class ff_attributes_functional(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.first = nn.Linear(k, hidden)
        self.second = nn.Linear(hidden, k)

    def forward(self, x):
        return self.second(F.relu(self.first(x)))


@alternative("feed_forward")
class ff_sequential_with_dropout(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, k))

    def forward(self, x):
        return self.net(x)


@alternative("feed_forward")
class ff_output_layer_declared_first(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.down = nn.Linear(hidden, k)
        self.up = nn.Linear(k, hidden)

    def forward(self, x):
        return self.down(torch.clamp(self.up(x), min=0))


# ------------------------------------------------------------------ TransformerBlock: mistakes

NORMS = "self.norm1 = nn.LayerNorm(k)\n        self.norm2 = nn.LayerNorm(k)"

edit("block-hidden-4x4", "transformer_block", ("FeedForward(k, ff_mult * k)", "FeedForward(k, 4 * 4)"),
     mistake="hidden-4x4")
edit("block-hidden-equals-k", "transformer_block", ("FeedForward(k, ff_mult * k)", "FeedForward(k, k)"),
     mistake="hidden-equals-k")
edit("block-hidden-ignores-ff-mult", "transformer_block", ("FeedForward(k, ff_mult * k)", "FeedForward(k, 4 * k)"),
     mistake="hidden-ignores-ff-mult")
edit("block-one-norm-module", "transformer_block", (NORMS, "self.norm1 = self.norm2 = nn.LayerNorm(k)"),
     mistake="shared-norm")
edit("block-batch-norm", "transformer_block",
     (NORMS, "self.norm1 = nn.BatchNorm1d(k)\n        self.norm2 = nn.BatchNorm1d(k)"),
     (ATTENTION_SUBLAYER,
      "self.norm1((x + self.dropout(self.attention(x, mask=mask))).transpose(1, 2)).transpose(1, 2)"),
     (FF_SUBLAYER, "self.norm2((x + self.dropout(self.ff(x))).transpose(1, 2)).transpose(1, 2)"), mistake="wrong-norm")
edit("block-norms-without-bias", "transformer_block",
     (NORMS, "self.norm1 = nn.LayerNorm(k, bias=False)\n        self.norm2 = nn.LayerNorm(k, bias=False)"),
     mistake="missing-parameter")
edit("block-torch-attention", "transformer_block",
     ("MultiHeadAttention(k, heads)", "nn.MultiheadAttention(k, heads, batch_first=True)"),
     ("self.attention(x, mask=mask)", "self.attention(x, x, x, need_weights=False)[0]"),
     mistake="not-course-attention")
edit("block-one-head", "transformer_block", ("MultiHeadAttention(k, heads)", "MultiHeadAttention(k, 1)"),
     mistake="heads-not-passed")
edit("block-ff-named-mlp", "transformer_block", ("self.ff = ", "self.mlp = "), ("self.ff(x)", "self.mlp(x)"),
     mistake="missing-part")
edit("block-under-no-grad", "transformer_block",
     (f"        x = {ATTENTION_SUBLAYER}  # (b, t, k)\n        return {FF_SUBLAYER}  # (b, t, k)",
      f"        with torch.no_grad():\n            x = {ATTENTION_SUBLAYER}\n            return {FF_SUBLAYER}"),
     mistake="detached")


class GeluFeedForward(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k))

    def forward(self, x):
        return self.net[2](F.gelu(self.net[0](x)))


@mistake("gelu", "transformer_block", helpers=(GeluFeedForward,))
class block_with_a_gelu_feed_forward(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = GeluFeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


# ------------------------------------------------------------------ TransformerBlock: correct alternatives

@alternative("transformer_block")
class block_named_steps(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attended = self.drop(self.attention(x, mask=mask))
        x = self.norm1(attended + x)
        fed = self.drop(self.ff(x))
        x = self.norm2(fed + x)
        return x


edit("block-attention-positional-args", "transformer_block",
     ("self.attention(x, mask=mask)", "self.attention(x, None, mask)"))


@alternative("transformer_block")
class block_parts_declared_in_another_order(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ff = FeedForward(k, ff_mult * k)
        self.norm2 = nn.LayerNorm(k)
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.attention(x, mask=mask)))
        return self.norm2(x + self.dropout(self.ff(x)))


# ------------------------------------------------------------------ TransformerClassifier: mistakes

edit("classifier-blocks-with-ff-mult-2", "transformer_classifier",
     ("TransformerBlock(k, heads)", "TransformerBlock(k, heads, ff_mult=2)"), mistake="classifier-ff-mult")

#: the solution's head
HEAD = "self.to_classes(x.mean(dim=1))"

edit("clf-python-list", "transformer_classifier",
     ("nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))",
      "[TransformerBlock(k, heads) for _ in range(depth)]"), mistake="blocks-not-registered")
edit("clf-repeated-block", "transformer_classifier",
     ("nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))",
      "nn.ModuleList([TransformerBlock(k, heads)] * depth)"), mistake="repeated-block")
edit("clf-one-block-too-few", "transformer_classifier", ("range(depth)", "range(1, depth)"), mistake="block-count")
edit("clf-embedding-sizes-swapped", "transformer_classifier",
     ("nn.Embedding(vocab_size, k)", "nn.Embedding(k, vocab_size)"), mistake="wrong-embedding")
edit("clf-output-layer-sizes-swapped", "transformer_classifier",
     ("nn.Linear(k, num_classes)", "nn.Linear(num_classes, k)"), mistake="no-output-layer")
edit("clf-mean-over-batch", "transformer_classifier", ("x.mean(dim=1)", "x.mean(dim=0)"), mistake="wrong-shape")
edit("clf-detached-embeddings", "transformer_classifier", (HEAD, f"{HEAD}.detach()"), mistake="detached")


# ------------------------------------------------------------------ TransformerClassifier: correct alternatives

@alternative("transformer_classifier")
class clf_sequential_other_names(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, k)
        self.layers = nn.Sequential(*[TransformerBlock(k, heads) for _ in range(depth)])
        self.head = nn.Linear(k, num_classes)

    def forward(self, tokens):
        return self.head(torch.mean(self.layers(self.emb(tokens)), 1))


@alternative("transformer_classifier")
class clf_head_declared_first(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.to_classes = nn.Linear(k, num_classes)
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList([TransformerBlock(k, heads) for _ in range(depth)])

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.sum(dim=1) / x.shape[1])
