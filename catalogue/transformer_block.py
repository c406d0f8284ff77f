"""Variants of the answers of assignment 05_transformer_block."""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, TransformerBlock), as a
# student's cell does

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "05_transformer_block"


# ------------------------------------------------------------------ FeedForward: mistakes

@mistake("relu-after-output", "feed_forward")
class ff_relu_after_second(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k), nn.ReLU())

    def forward(self, x):
        return self.net(x)


@mistake("relu-after-output", "feed_forward")
class ff_relu_around_the_net(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k))

    def forward(self, x):
        return F.relu(self.net(x))


@mistake("gelu", "feed_forward")
class ff_gelu(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.GELU(), nn.Linear(hidden, k))

    def forward(self, x):
        return self.net(x)


@mistake("gelu-tanh", "feed_forward")
class ff_gelu_tanh(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.first = nn.Linear(k, hidden)
        self.second = nn.Linear(hidden, k)

    def forward(self, x):
        return self.second(F.gelu(self.first(x), approximate="tanh"))


@mistake("no-relu", "feed_forward")
class ff_no_relu(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.Linear(hidden, k))

    def forward(self, x):
        return self.net(x)


@mistake("relu-on-input", "feed_forward")
class ff_relu_on_input(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.ReLU(), nn.Linear(k, hidden), nn.Linear(hidden, k))

    def forward(self, x):
        return self.net(x)


@mistake("residual-inside-ff", "feed_forward")
class ff_residual_inside(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k))

    def forward(self, x):
        return x + self.net(x)


@mistake("hidden-ignored", "feed_forward")
class ff_hidden_ignored(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, 4 * k), nn.ReLU(), nn.Linear(4 * k, k))

    def forward(self, x):
        return self.net(x)


@mistake("ff-no-bias", "feed_forward")
class ff_without_biases(nn.Module):
    def __init__(self, k, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(k, hidden, bias=False), nn.ReLU(), nn.Linear(hidden, k, bias=False))

    def forward(self, x):
        return self.net(x)


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

@mistake("hidden-4x4", "transformer_block")
class block_hidden_4x4(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * 4)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("hidden-equals-k", "transformer_block")
class block_hidden_equals_k(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("hidden-ignores-ff-mult", "transformer_block")
class block_hidden_ignores_ff_mult(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("residual-after-norm", "transformer_block")
class block_residual_after_norm(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = x + self.norm1(self.attention(x, mask=mask))
        return x + self.norm2(self.ff(x))


@mistake("no-residual", "transformer_block")
class block_without_residuals(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(self.attention(x, mask=mask))
        return self.norm2(self.ff(x))


@mistake("no-attention-residual", "transformer_block")
class block_without_attention_residual(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("norm-plus-sublayer", "transformer_block")
class block_norm_plus_sublayer(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x) + self.attention(x, mask=mask)
        return self.norm2(x) + self.ff(x)


@mistake("no-ff-residual", "transformer_block")
class block_without_ff_residual(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(self.ff(x))


@mistake("shared-norm", "transformer_block")
class block_one_norm_module(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("wrong-norm", "transformer_block")
class block_batch_norm(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.BatchNorm1d(k)
        self.norm2 = nn.BatchNorm1d(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1((x + self.attention(x, mask=mask)).transpose(1, 2)).transpose(1, 2)
        return self.norm2((x + self.ff(x)).transpose(1, 2)).transpose(1, 2)


@mistake("missing-parameter", "transformer_block")
class block_norms_without_bias(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k, bias=False)
        self.norm2 = nn.LayerNorm(k, bias=False)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("norm1-twice", "transformer_block")
class block_norm1_twice(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm1(x + self.ff(x))


@mistake("norms-swapped", "transformer_block")
class block_norms_swapped(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm2(x + self.attention(x, mask=mask))
        return self.norm1(x + self.ff(x))


@mistake("pre-norm", "transformer_block")
class block_prenorm_wiring(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = x + self.attention(self.norm1(x), mask=mask)
        return x + self.ff(self.norm2(x))


@mistake("no-final-norm", "transformer_block")
class block_without_final_norm(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return x + self.ff(x)


@mistake("sublayers-swapped", "transformer_block")
class block_sublayers_swapped(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.ff(x))
        return self.norm2(x + self.attention(x, mask=mask))


@mistake("mask-not-passed", "transformer_block")
class block_mask_not_passed(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ff(x))


@mistake("ff-on-input", "transformer_block")
class block_ff_on_input(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        h = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(h + self.ff(x))


@mistake("second-residual-from-input", "transformer_block")
class block_second_residual_from_input(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        h = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(h))


@mistake("not-course-attention", "transformer_block")
class block_torch_attention(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = nn.MultiheadAttention(k, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, x, x, need_weights=False)[0])
        return self.norm2(x + self.ff(x))


@mistake("heads-not-passed", "transformer_block")
class block_one_head(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, 1)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


@mistake("missing-part", "transformer_block")
class block_ff_named_mlp(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.mlp = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.mlp(x))


@mistake("detached", "transformer_block")
class block_under_no_grad(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        with torch.no_grad():
            x = self.norm1(x + self.attention(x, mask=mask))
            return self.norm2(x + self.ff(x))


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
class block_no_dropout_named_steps(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, mask=None):
        attended = self.attention(x, mask=mask)
        x = self.norm1(attended + x)
        fed = self.ff(x)
        x = self.norm2(fed + x)
        return x


@alternative("transformer_block")
class block_attention_positional_args(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.drop(self.attention(x, None, mask)))
        return self.norm2(x + self.drop(self.ff(x)))


@alternative("transformer_block")
class block_parts_declared_in_another_order(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.ff = FeedForward(k, ff_mult * k)
        self.norm2 = nn.LayerNorm(k)
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.attention(x, mask=mask))
        return self.norm2(x + self.ff(x))


# ------------------------------------------------------------------ TransformerClassifier: mistakes

@mistake("blocks-not-registered", "transformer_classifier")
class clf_python_list(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = [TransformerBlock(k, heads) for _ in range(depth)]
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1))


@mistake("repeated-block", "transformer_classifier")
class clf_repeated_block(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList([TransformerBlock(k, heads)] * depth)
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1))


@mistake("block-count", "transformer_classifier")
class clf_one_block_too_few(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(1, depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1))


@mistake("wrong-embedding", "transformer_classifier")
class clf_embedding_sizes_swapped(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(k, vocab_size)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1))


@mistake("no-output-layer", "transformer_classifier")
class clf_output_layer_sizes_swapped(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(num_classes, k)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1))


@mistake("sum-pooling", "transformer_classifier")
class clf_sum_pooling(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.sum(dim=1))


@mistake("first-token", "transformer_classifier")
class clf_first_token(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x[:, 0])


@mistake("last-token", "transformer_classifier")
class clf_last_token(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x[:, -1])


@mistake("max-pooling", "transformer_classifier")
class clf_max_pooling(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.max(dim=1).values)


@mistake("softmax-on-logits", "transformer_classifier")
class clf_softmax(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return F.softmax(self.to_classes(x.mean(dim=1)), dim=-1)


@mistake("log-softmax-on-logits", "transformer_classifier")
class clf_log_softmax(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return F.log_softmax(self.to_classes(x.mean(dim=1)), dim=-1)


@mistake("wrong-shape", "transformer_classifier")
class clf_mean_over_batch(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=0))


@mistake("blocks-not-chained", "transformer_classifier")
class clf_blocks_not_chained(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            h = block(x)
        return self.to_classes(h.mean(dim=1))


@mistake("blocks-skipped", "transformer_classifier")
class clf_blocks_skipped(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        return self.to_classes(x.mean(dim=1))


@mistake("first-block-only", "transformer_classifier")
class clf_first_block_only(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.blocks[0](self.embedding(tokens))
        return self.to_classes(x.mean(dim=1))


@mistake("detached", "transformer_classifier")
class clf_detached_embeddings(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))
        self.to_classes = nn.Linear(k, num_classes)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.to_classes(x.mean(dim=1)).detach()


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


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["ff-relu-after-second", "block-one-norm-module", "clf-sum-pooling"]
