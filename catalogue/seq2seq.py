"""Variants of the answers of assignment 07_seq2seq."""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, TransformerBlock,
# PositionalEncoding, DecoderBlock, causal_mask), as a student's cell does

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake
from course.dates import PAD

ASSIGNMENT = "07_seq2seq"


# ------------------------------------------------------------------ causal_mask: mistakes

@mistake("causal-inverted", "causal_mask")
def causal_inverted(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device).triu(1)


@mistake("causal-no-diagonal", "causal_mask")
def causal_no_diagonal(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device).tril(-1)


@mistake("causal-transposed", "causal_mask")
def causal_transposed(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device).triu()


@mistake("causal-all-true", "causal_mask")
def causal_all_true(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device)


@mistake("float-mask", "causal_mask")
def causal_float(t, device=None):
    return torch.tril(torch.ones(t, t, device=device))


@mistake("additive-mask", "causal_mask")
def causal_additive(t, device=None):
    return torch.full((t, t), float('-inf'), device=device).triu(1)


# ------------------------------------------------------------------ causal_mask: correct alternatives

@alternative("causal_mask")
def causal_compare_positions(t, device=None):
    i = torch.arange(t, device=device)
    return i[:, None] >= i[None, :]


@alternative("causal_mask")
def causal_not_future(t, device=None):
    return ~torch.ones(t, t, device=device).triu(diagonal=1).bool()


# ------------------------------------------------------------------ padding_mask: mistakes

@mistake("padding-inverted", "padding_mask")
def padding_inverted(lengths, t):
    return torch.arange(t, device=lengths.device) >= lengths[:, None]


@mistake("padding-one-too-many", "padding_mask")
def padding_off_by_one(lengths, t):
    return torch.arange(t, device=lengths.device) <= lengths[:, None]


@mistake("padding-one-too-few", "padding_mask")
def padding_one_too_few(lengths, t):
    return torch.arange(t, device=lengths.device) < lengths[:, None] - 1


@mistake("float-mask", "padding_mask")
def padding_float(lengths, t):
    return (torch.arange(t, device=lengths.device) < lengths[:, None]).float()


@mistake("padding-transposed", "padding_mask")
def padding_transposed(lengths, t):
    return torch.arange(t, device=lengths.device)[:, None] < lengths[None, :]


# ------------------------------------------------------------------ padding_mask: correct alternatives

@alternative("padding_mask")
def padding_loop(lengths, t):
    mask = torch.zeros(len(lengths), t, dtype=torch.bool, device=lengths.device)
    for i, n in enumerate(lengths.tolist()):
        mask[i, :n] = True
    return mask


@alternative("padding_mask")
def padding_expand(lengths, t):
    b = lengths.shape[0]
    return torch.arange(t, device=lengths.device).expand(b, t) < lengths.unsqueeze(-1).expand(b, t)


# ------------------------------------------------------------------ DecoderBlock: mistakes

@mistake("block-cross-reads-itself", "decoder_block")
class block_cross_reads_itself(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, mask=self_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-cross-reads-itself", "decoder_block")
class block_cross_reads_itself_unmasked(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attention(x, mask=self_mask))
        x = self.norm2(x + self.cross_attention(x))
        return self.norm3(x + self.ff(x))


@mistake("block-memory-not-masked", "decoder_block")
class block_memory_not_masked(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-self-mask-ignored", "decoder_block")
class block_self_mask_ignored(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-pre-norm", "decoder_block")
class block_pre_norm(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = x + self.self_attention(self.norm1(x), mask=self_mask)
        x = x + self.cross_attention(self.norm2(x), context=memory, mask=memory_mask)
        return x + self.ff(self.norm3(x))


@mistake("block-no-residual", "decoder_block")
class block_no_residual(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(self.self_attention(x, mask=self_mask))
        x = self.norm2(self.cross_attention(x, context=memory, mask=memory_mask))
        return self.norm3(self.ff(x))


@mistake("block-cross-first", "decoder_block")
class block_cross_first(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.cross_attention(x, context=memory, mask=memory_mask))
        x = self.norm2(x + self.self_attention(x, mask=self_mask))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-cross-on-input", "decoder_block")
class block_cross_on_input(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        h = self.norm1(x + self.self_attention(x, mask=self_mask))
        h = self.norm2(h + self.cross_attention(x, context=memory, mask=memory_mask))
        return self.norm3(h + self.ff(h))


@mistake("block-not-causal", "decoder_block")
class block_masks_in_pytorch_convention(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        # PyTorch's attention masks are True where attention is NOT allowed
        self_mask = None if self_mask is None else ~self_mask
        memory_mask = None if memory_mask is None else ~memory_mask
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-reads-padding", "decoder_block")
class block_memory_mask_as_key_padding(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if memory_mask is not None:
            memory_mask = memory_mask == 0  # key padding mask: True at the padded keys
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("block-shared-attention", "decoder_block")
class block_shared_attention(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = self.self_attention
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


@mistake("shared-norm", "decoder_block")
class block_shared_norm(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = self.norm1
        self.norm3 = self.norm1
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


# ------------------------------------------------------------------ DecoderBlock: correct alternatives

@alternative("decoder_block")
class block_positional_arguments(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        def sublayer(norm, y):
            return norm(x + self.dropout(y))
        x = sublayer(self.norm1, self.self_attention(x, None, self_mask))
        x = sublayer(self.norm2, self.cross_attention(x, memory, memory_mask))
        return sublayer(self.norm3, self.ff(x))


@alternative("decoder_block")
class block_sublayer_list(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [(self.norm1, lambda h: self.self_attention(h, mask=self_mask)),
                 (self.norm2, lambda h: self.cross_attention(h, context=memory, mask=memory_mask)),
                 (self.norm3, self.ff)]
        for norm, sublayer in steps:
            x = norm(x + self.dropout(sublayer(x)))
        return x


# ------------------------------------------------------------------ Seq2SeqTransformer: mistakes

@mistake("model-memory-not-masked", "seq2seq_model")
class model_memory_not_masked(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-memory-not-masked", "seq2seq_model")
class model_decode_ignores_src_mask(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        everything = torch.ones_like(src_mask)
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, causal_mask(tgt.shape[1], tgt.device), everything.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-not-causal", "seq2seq_model")
class model_not_causal(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-encoder-not-masked", "seq2seq_model")
class model_encoder_not_masked(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x)
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("raised", "seq2seq_model")
class model_mask_not_unsqueezed(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask)
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-no-target-positions", "seq2seq_model")
class model_no_target_positions(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.tgt_embedding(tgt)
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-softmax", "seq2seq_model")
class model_softmax_output(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x).softmax(dim=-1)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-memory-is-embeddings", "seq2seq_model")
class model_memory_is_embeddings(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        return self.positions(self.src_embedding(src))

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-no-source-positions", "seq2seq_model")
class model_no_source_positions(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.src_embedding(src)
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-padding-not-masked", "seq2seq_model")
class model_padding_not_masked(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x)
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, causal_mask(tgt.shape[1], tgt.device))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-scaled-embeddings", "seq2seq_model")
class model_scaled_embeddings(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)
        self.k = k

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src) * self.k ** 0.5)
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt) * self.k ** 0.5)
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-target-source-embedding", "seq2seq_model")
class model_target_source_embedding(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.src_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-reads-future", "seq2seq_model")
class model_causal_mask_in_pytorch_convention(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=~causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("model-reads-padding", "seq2seq_model")
class model_mask_from_pad_tokens(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        src_mask = src != PAD
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("decode-inconsistent", "seq2seq_model")
class model_decode_without_positions(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.tgt_embedding(tgt)
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        memory = self.encode(src, src_mask)
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)


@mistake("shared-embedding", "seq2seq_model")
class model_one_embedding_for_both(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(max(src_vocab_size, tgt_vocab_size), k)
        self.tgt_embedding = self.src_embedding
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("wrong-depth", "seq2seq_model")
class model_six_layers_as_in_the_paper(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(6))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(6))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("wrong-size", "seq2seq_model")
class model_vocabulary_sizes_swapped(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(tgt_vocab_size, k)
        self.tgt_embedding = nn.Embedding(src_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("wrong-part-type", "seq2seq_model")
class model_pytorch_encoder_layers(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(nn.TransformerEncoderLayer(k, heads, 4 * k, dropout, batch_first=True)
                                     for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for layer in self.encoder:
            x = layer(x, src_key_padding_mask=~src_mask)
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@mistake("shared-block", "seq2seq_model")
class model_one_block_reused(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        encoder_block = TransformerBlock(k, heads, dropout=dropout)
        decoder_block = DecoderBlock(k, heads, dropout=dropout)
        self.encoder = nn.ModuleList([encoder_block] * depth)
        self.decoder = nn.ModuleList([decoder_block] * depth)
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


# ------------------------------------------------------------------ Seq2SeqTransformer: correct alternatives

@alternative("seq2seq_model")
class model_inline_masks(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        mask = src_mask[:, None, :]
        x = self.src_embedding(src)
        x = self.positions(x)
        for block in self.encoder:
            x = block(x, mask)
        return x

    def decode(self, tgt, memory, src_mask):
        t = tgt.size(1)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), diagonal=1)
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, ~future, src_mask[:, None, :])
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


@alternative("seq2seq_model")
class model_forward_by_hand(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src, src_mask):
        x = self.positions(self.src_embedding(src))
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))
        return x

    def decode(self, tgt, memory, src_mask):
        x = self.positions(self.tgt_embedding(tgt))
        for block in self.decoder:
            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))
        return self.to_logits(x)

    def forward(self, src, tgt, src_mask):
        memory = self.encode(src, src_mask)
        logits = self.decode(tgt, memory, src_mask)
        return logits


# ------------------------------------------------------------------ teacher_forcing_loss: mistakes

@mistake("loss-not-shifted", "teacher_forcing_loss")
def loss_not_shifted(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt, src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=pad)


@mistake("loss-counts-padding", "teacher_forcing_loss")
def loss_counts_padding(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:])


@mistake("loss-wrong-shift", "teacher_forcing_loss")
def loss_wrong_shift(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, 1:], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, :-1], ignore_index=pad)


@mistake("loss-sum", "teacher_forcing_loss")
def loss_sum(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad, reduction='sum')


@mistake("loss-per-sequence", "teacher_forcing_loss")
def loss_per_sequence(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    labels = tgt[:, 1:]
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad, reduction='none')
    real = (labels != pad).float()
    return ((per_token * real).sum(1) / real.sum(1)).mean()


@mistake("loss-softmax", "teacher_forcing_loss")
def loss_softmax_twice(model, src, src_mask, tgt, pad=PAD):
    probs = model(src, tgt[:, :-1], src_mask).softmax(dim=-1)
    return F.cross_entropy(probs.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


@mistake("loss-pad-hard-coded", "teacher_forcing_loss")
def loss_pad_hard_coded(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=0)


@mistake("raised", "teacher_forcing_loss")
def loss_classes_last(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits, tgt[:, 1:], ignore_index=pad)


@mistake("detached", "teacher_forcing_loss")
def loss_detached(model, src, src_mask, tgt, pad=PAD):
    with torch.no_grad():
        logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


# ------------------------------------------------------------------ teacher_forcing_loss: correct alternatives

@alternative("teacher_forcing_loss")
def loss_flattened(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)


@alternative("teacher_forcing_loss")
def loss_masked_mean(model, src, src_mask, tgt, pad=PAD):
    labels = tgt[:, 1:]
    log_probs = model(src, tgt[:, :-1], src_mask).log_softmax(dim=-1)
    picked = -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    real = (labels != pad).float()
    return (picked * real).sum() / real.sum()


@alternative("teacher_forcing_loss")
def loss_through_encode_decode(model, src, src_mask, tgt, pad=PAD):
    memory = model.encode(src, src_mask)
    logits = model.decode(tgt[:, :-1], memory, src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


# ------------------------------------------------------------------ greedy_decode: mistakes

@mistake("greedy-never-stops", "greedy_decode")
def greedy_never_stops(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
    return tokens[:, 1:]


@mistake("greedy-returns-bos", "greedy_decode")
def greedy_returns_bos(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, 0)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if finished.all():
                break
    return tokens


@mistake("greedy-forgets-bos", "greedy_decode")
def greedy_forgets_bos(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.zeros((src.shape[0], 1), dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, 0)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if finished.all():
                break
    return tokens[:, 1:]


@mistake("greedy-stops-early", "greedy_decode")
def greedy_stops_at_first_eos(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            if (nxt == eos).any():
                break
    return tokens[:, 1:]


@mistake("greedy-first-position", "greedy_decode")
def greedy_first_position(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = model.decode(tokens, memory, src_mask)[:, 0].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, 0)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if finished.all():
                break
    return tokens[:, 1:]


@mistake("greedy-eos-padded", "greedy_decode")
def greedy_fills_with_eos(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, eos)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if finished.all():
                break
    return tokens[:, 1:]


@mistake("greedy-not-ids", "greedy_decode")
def greedy_into_zeros(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        b = src.shape[0]
        out = torch.zeros(b, max_len, device=src.device)
        tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)
        alive = torch.ones(b, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1)
            out[:, step] = torch.where(alive, nxt, torch.zeros_like(nxt))
            alive = alive & (nxt != eos)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return out


@mistake("greedy-too-long", "greedy_decode")
def greedy_one_step_too_many(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len + 1):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1)
            nxt = nxt.masked_fill(finished, PAD)
            finished = finished | (nxt == eos)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens[:, 1:]


# ------------------------------------------------------------------ greedy_decode: correct alternatives

@alternative("greedy_decode")
def greedy_full_length(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        b = src.shape[0]
        out = torch.zeros(b, max_len, dtype=torch.long, device=src.device)
        tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)
        alive = torch.ones(b, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1)
            out[:, step] = torch.where(alive, nxt, torch.zeros_like(nxt))
            alive = alive & (nxt != eos)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return out


@alternative("greedy_decode")
def greedy_per_sequence(model, src, src_mask, max_len, bos, eos):
    rows = []
    with torch.no_grad():
        for i in range(src.shape[0]):
            memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
            seq = [bos]
            while len(seq) <= max_len and seq[-1] != eos:
                tgt = torch.tensor([seq], device=src.device)
                seq.append(int(model.decode(tgt, memory, src_mask[i:i + 1])[0, -1].argmax()))
            rows.append(seq[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=src.device)


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("causal-no-diagonal", "padding-off-by-one", "block-memory-not-masked", "model-no-target-positions",
                   "loss-not-shifted", "greedy-never-stops")
