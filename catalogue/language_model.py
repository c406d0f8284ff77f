"""Variants of the answers of assignment 08_language_model.

The answer cell `language_model` holds two classes, LanguageModel and the CausalBlock below it. Its variants are
written as a student might split the same cell: a model class (GPT, a helper) that builds its blocks from a class
attribute `block`, blocks with the mistake in them, and a LanguageModel that names its block class or overrides
forward where the mistake is.
"""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, split_heads, merge_heads,
# scaled_dot_product_attention, sample_next_token), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, mistake

ASSIGNMENT = "08_language_model"


# ------------------------------------------------------------------ language_model: the parts variants share

class Block(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * k)

    def project(self, h):
        a = self.attention
        return [split_heads(linear(h), a.heads) for linear in (a.to_queries, a.to_keys, a.to_values)]

    def grow(self, past, new):
        return torch.cat([past, new], dim=2)

    def attend(self, h, mask, past):
        q, keys, values = self.project(h)
        if past is not None:
            keys, values = self.grow(past[0], keys), self.grow(past[1], values)
        out, _ = scaled_dot_product_attention(q, keys, values, mask)
        return self.attention.unify_heads(merge_heads(out)), (keys, values)

    def forward(self, x, mask, past=None):
        a, cache = self.attend(self.norm1(x), mask, past)
        x = x + a
        return x + self.ff(self.norm2(x)), cache


class GPT(nn.Module):
    block = Block

    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.position_embedding = nn.Embedding(max_len, k)
        self.blocks = nn.ModuleList(self.block(k, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(k)
        self.to_logits = nn.Linear(k, vocab_size)

    def positions(self, past, t, device):
        return torch.arange(past, past + t, device=device)

    def mask(self, past, t, device):
        return torch.ones(t, past + t, dtype=torch.bool, device=device).tril(diagonal=past)

    def embed(self, tokens, past):
        return self.token_embedding(tokens) + self.position_embedding(self.positions(past, tokens.shape[1],
                                                                                     tokens.device))

    def head(self, x):
        return self.to_logits(self.norm(x))

    def forward(self, tokens, cache=None, use_cache=False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[2]
        x = self.embed(tokens, past)
        mask = self.mask(past, t, tokens.device)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, None if cache is None else cache[i])
            new_cache.append(kv)
        logits = self.head(x)
        return (logits, new_cache) if use_cache else logits


# ------------------------------------------------------------------ language_model: mistakes in the model

@mistake("lm-no-causal-mask", "language_model", helpers=(Block, GPT))
class lm_no_mask(GPT):
    def mask(self, past, t, device):
        return torch.ones(t, past + t, dtype=torch.bool, device=device)


@mistake("lm-inverted-causal-mask", "language_model", helpers=(Block, GPT))
class lm_inverted_mask(GPT):
    def mask(self, past, t, device):
        return ~torch.ones(t, past + t, dtype=torch.bool, device=device).tril(diagonal=past)


@mistake("cache-positions-restart", "language_model", helpers=(Block, GPT))
class lm_positions_restart(GPT):
    def positions(self, past, t, device):
        return torch.arange(t, device=device)


@mistake("cache-mask-not-offset", "language_model", helpers=(Block, GPT))
class lm_mask_not_offset(GPT):
    def mask(self, past, t, device):
        return torch.ones(t, past + t, dtype=torch.bool, device=device).tril()


@mistake("cache-mask-shape", "language_model", helpers=(Block, GPT))
class lm_mask_ignores_cache(GPT):
    def mask(self, past, t, device):
        return torch.ones(t, t, dtype=torch.bool, device=device).tril()


@mistake("lm-no-positions", "language_model", helpers=(Block, GPT))
class lm_no_positions(GPT):
    def embed(self, tokens, past):
        return self.token_embedding(tokens)


@mistake("lm-no-final-norm", "language_model", helpers=(Block, GPT))
class lm_no_final_norm(GPT):
    def head(self, x):
        return self.to_logits(x)


@mistake("lm-softmax", "language_model", helpers=(Block, GPT))
class lm_softmax(GPT):
    def head(self, x):
        return self.to_logits(self.norm(x)).softmax(dim=-1)


@mistake("lm-scaled-embeddings", "language_model", helpers=(Block, GPT))
class lm_scaled_embeddings(GPT):
    def embed(self, tokens, past):
        k = self.token_embedding.embedding_dim
        return self.token_embedding(tokens) * math.sqrt(k) + self.position_embedding(
            self.positions(past, tokens.shape[1], tokens.device))


@mistake("lm-reads-future", "language_model", helpers=(Block, GPT))
class lm_upper_triangle_mask(GPT):
    def mask(self, past, t, device):
        return torch.ones(t, past + t, dtype=torch.bool, device=device).triu(diagonal=past)


@mistake("wrong-size", "language_model", helpers=(Block, GPT))
class lm_positions_sized_by_vocabulary(GPT):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__(vocab_size, k, heads, depth, max_len)
        self.position_embedding = nn.Embedding(vocab_size, k)


@mistake("wrong-depth", "language_model", helpers=(Block, GPT))
class lm_twelve_layers_as_gpt2(GPT):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__(vocab_size, k, heads, depth, max_len)
        self.blocks = nn.ModuleList(Block(k, heads) for _ in range(12))


@mistake("cache-not-returned", "language_model", helpers=(Block, GPT))
class lm_cache_never_returned(GPT):
    def forward(self, tokens, cache=None, use_cache=False):
        return super().forward(tokens, cache)


@mistake("blocks-not-registered", "language_model", helpers=(Block, GPT))
class lm_blocks_in_a_list(GPT):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        nn.Module.__init__(self)
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.position_embedding = nn.Embedding(max_len, k)
        self.blocks = [Block(k, heads) for _ in range(depth)]
        self.norm = nn.LayerNorm(k)
        self.to_logits = nn.Linear(k, vocab_size)


@mistake("shared-block", "language_model", helpers=(Block, GPT))
class lm_one_block_reused(GPT):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__(vocab_size, k, heads, depth, max_len)
        block = Block(k, heads)
        self.blocks = nn.ModuleList([block] * depth)


class Sinusoids(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        rate = torch.exp(torch.arange(0, k, 2) * (-math.log(10000.0) / k))
        table = torch.zeros(max_len, k)
        table[:, 0::2] = torch.sin(position * rate)
        table[:, 1::2] = torch.cos(position * rate)
        self.register_buffer("table", table)

    def forward(self, positions):
        return self.table[positions]


@mistake("positions-not-learned", "language_model", helpers=(Block, GPT, Sinusoids))
class lm_sinusoidal_positions(GPT):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__(vocab_size, k, heads, depth, max_len)
        self.position_embedding = Sinusoids(max_len, k)


@mistake("lm-returns-tuple", "language_model", helpers=(Block, GPT))
class lm_always_returns_cache(GPT):
    def forward(self, tokens, cache=None, use_cache=False):
        return super().forward(tokens, cache, use_cache=True)


# ------------------------------------------------------------------ language_model: mistakes in the block

class PostNormBlock(Block):
    def forward(self, x, mask, past=None):
        a, cache = self.attend(x, mask, past)
        x = self.norm1(x + a)
        return self.norm2(x + self.ff(x)), cache


@mistake("lm-post-norm", "language_model", helpers=(Block, GPT, PostNormBlock))
class lm_post_norm(GPT):
    block = PostNormBlock


class QueriesCachedBlock(Block):
    def attend(self, h, mask, past):
        q, keys, values = self.project(h)
        cached = q
        if past is not None:
            keys, values, cached = self.grow(past[0], keys), self.grow(past[1], values), self.grow(past[0], q)
        out, _ = scaled_dot_product_attention(q, keys, values, mask)
        return self.attention.unify_heads(merge_heads(out)), (cached, values)


@mistake("cache-stores-queries", "language_model", helpers=(Block, GPT, QueriesCachedBlock))
class lm_cache_stores_queries(GPT):
    block = QueriesCachedBlock


class HeadsAxisBlock(Block):
    def grow(self, past, new):
        return torch.cat([past, new], dim=1)


@mistake("cache-wrong-axis", "language_model", helpers=(Block, GPT, HeadsAxisBlock))
class lm_cache_grows_heads(GPT):
    block = HeadsAxisBlock


class FeatureAxisBlock(Block):
    def grow(self, past, new):
        return torch.cat([past, new], dim=-1)


@mistake("cache-wrong-axis", "language_model", helpers=(Block, GPT, FeatureAxisBlock))
class lm_cache_grows_features(GPT):
    block = FeatureAxisBlock


class PrependingBlock(Block):
    def grow(self, past, new):
        return torch.cat([new, past], dim=2)


@mistake("cache-prepended", "language_model", helpers=(Block, GPT, PrependingBlock))
class lm_cache_prepended(GPT):
    block = PrependingBlock


class ForgetfulBlock(Block):
    def attend(self, h, mask, past):
        q, keys, values = self.project(h)
        out, _ = scaled_dot_product_attention(q, keys, values, mask[:, mask.shape[1] - mask.shape[0]:])
        if past is not None:
            keys, values = self.grow(past[0], keys), self.grow(past[1], values)
        return self.attention.unify_heads(merge_heads(out)), (keys, values)


@mistake("cache-not-read", "language_model", helpers=(Block, GPT, ForgetfulBlock))
class lm_cache_not_read(GPT):
    block = ForgetfulBlock


class NoResidualBlock(Block):
    def forward(self, x, mask, past=None):
        a, cache = self.attend(self.norm1(x), mask, past)
        return self.ff(self.norm2(a)), cache


@mistake("lm-no-residual", "language_model", helpers=(Block, GPT, NoResidualBlock))
class lm_no_residual(GPT):
    block = NoResidualBlock


class SharedNormBlock(Block):
    def __init__(self, k, heads):
        super().__init__(k, heads)
        self.norm2 = self.norm1


@mistake("shared-norm", "language_model", helpers=(Block, GPT, SharedNormBlock))
class lm_one_norm_per_block(GPT):
    block = SharedNormBlock


class MergedCacheBlock(Block):
    def attend(self, h, mask, past):
        a = self.attention
        q = split_heads(a.to_queries(h), a.heads)
        keys, values = a.to_keys(h), a.to_values(h)  # (b, t, k)
        if past is not None:
            keys, values = torch.cat([past[0], keys], dim=1), torch.cat([past[1], values], dim=1)
        out, _ = scaled_dot_product_attention(q, split_heads(keys, a.heads), split_heads(values, a.heads), mask)
        return a.unify_heads(merge_heads(out)), (keys, values)


@mistake("cache-shape", "language_model", helpers=(Block, GPT, MergedCacheBlock))
class lm_cache_before_heads_split(GPT):
    block = MergedCacheBlock

    def forward(self, tokens, cache=None, use_cache=False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[1]
        x = self.embed(tokens, past)
        mask = self.mask(past, t, tokens.device)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, None if cache is None else cache[i])
            new_cache.append(kv)
        logits = self.head(x)
        return (logits, new_cache) if use_cache else logits


class HalfPrecisionCacheBlock(Block):
    def attend(self, h, mask, past):
        if past is not None:
            past = (past[0].float(), past[1].float())
        out, (keys, values) = super().attend(h, mask, past)
        return out, (keys.half(), values.half())  # half the memory


@mistake("cache-differs", "language_model", helpers=(Block, GPT, HalfPrecisionCacheBlock))
class lm_cache_in_half_precision(GPT):
    block = HalfPrecisionCacheBlock


# ------------------------------------------------------------------ language_model: correct alternatives

class FusedBlock(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * k)

    def forward(self, x, mask, past=None):
        b, t, k = x.shape
        a, h = self.attention, self.norm1(x)
        s = k // a.heads
        q = a.to_queries(h).view(b, t, a.heads, s).transpose(1, 2)
        keys = a.to_keys(h).view(b, t, a.heads, s).transpose(1, 2)
        values = a.to_values(h).view(b, t, a.heads, s).transpose(1, 2)
        if past is not None:
            keys = torch.cat((past[0], keys), dim=-2)
            values = torch.cat((past[1], values), dim=-2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + a.unify_heads(out.transpose(1, 2).reshape(b, t, k))
        return x + self.ff(self.norm2(x)), (keys, values)


@alternative("language_model", helpers=(FusedBlock,))
class lm_pytorch_attention(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.position_embedding = nn.Embedding(max_len, k)
        self.blocks = nn.ModuleList([FusedBlock(k, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(k)
        self.to_logits = nn.Linear(k, vocab_size)

    def forward(self, tokens, cache=None, use_cache=False):
        b, t = tokens.shape
        past = cache[0][0].size(2) if cache else 0
        i = torch.arange(past, past + t, device=tokens.device)
        j = torch.arange(past + t, device=tokens.device)
        mask = j[None, :] <= i[:, None]
        x = self.token_embedding(tokens) + self.position_embedding(i)[None]
        cache = cache or [None] * len(self.blocks)
        new = []
        for block, past_kv in zip(self.blocks, cache, strict=True):
            x, kv = block(x, mask, past_kv)
            new.append(kv)
        logits = self.to_logits(self.norm(x))
        if use_cache:
            return logits, new
        return logits


class TupleBlock(nn.Module):
    def __init__(self, k, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * k)

    def forward(self, x, mask, past=None):
        h = self.norm1(x)
        a = self.attention
        new_kv = [split_heads(proj(h), a.heads) for proj in (a.to_keys, a.to_values)]
        if past:
            new_kv = [torch.cat(pair, dim=2) for pair in zip(past, new_kv, strict=True)]
        keys, values = new_kv
        out, _ = scaled_dot_product_attention(split_heads(a.to_queries(h), a.heads), keys, values, mask)
        x = x + a.unify_heads(merge_heads(out))
        x = x + self.ff(self.norm2(x))
        return x, tuple(new_kv)


@alternative("language_model", helpers=(TupleBlock,))
class lm_sequential_blocks(nn.Module):
    def __init__(self, vocab_size, k, heads, depth, max_len):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.position_embedding = nn.Embedding(max_len, k)
        self.blocks = nn.Sequential(*[TupleBlock(k, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(k)
        self.to_logits = nn.Linear(k, vocab_size)

    def forward(self, tokens, cache=None, use_cache=False):
        start = 0 if cache is None else cache[0][0].shape[-2]
        t = tokens.size(-1)
        x = self.token_embedding(tokens) + self.position_embedding.weight[start:start + t]
        mask = torch.tril(torch.ones(t, start + t, device=tokens.device), diagonal=start).bool()
        cache_out = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, mask, cache[i] if cache is not None else None)
            cache_out.append(kv)
        out = self.to_logits(self.norm(x))
        return (out, cache_out) if use_cache else out


# ------------------------------------------------------------------ next_token_loss: mistakes

@mistake("loss-not-shifted", "next_token_loss")
def loss_not_shifted(logits, tokens):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


@mistake("loss-wrong-shift", "next_token_loss")
def loss_wrong_shift(logits, tokens):
    return F.cross_entropy(logits[:, 1:].reshape(-1, logits.shape[-1]), tokens[:, :-1].reshape(-1))


@mistake("loss-sum", "next_token_loss")
def loss_sum(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="sum")


@mistake("loss-softmax", "next_token_loss")
def loss_softmax_first(logits, tokens):
    probs = logits.softmax(dim=-1)
    return F.cross_entropy(probs[:, :-1].reshape(-1, probs.shape[-1]), tokens[:, 1:].reshape(-1))


@mistake("loss-nll-on-logits", "next_token_loss")
def loss_nll_on_logits(logits, tokens):
    return F.nll_loss(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


@mistake("loss-bits", "next_token_loss")
def loss_in_bits(logits, tokens):
    nats = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    return nats / math.log(2)


@mistake("loss-last-position", "next_token_loss")
def loss_last_position(logits, tokens):
    return F.cross_entropy(logits[:, -2], tokens[:, -1])


@mistake("loss-unstable", "next_token_loss")
def loss_softmax_then_log(logits, tokens):
    probs = logits[:, :-1].softmax(dim=-1)
    picked = probs.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    return -picked.log().mean()


@mistake("raised", "next_token_loss")
def loss_classes_last(logits, tokens):
    return F.cross_entropy(logits[:, :-1], tokens[:, 1:])


@mistake("detached", "next_token_loss")
def loss_detached(logits, tokens):
    with torch.no_grad():
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


# ------------------------------------------------------------------ next_token_loss: correct alternatives

@alternative("next_token_loss")
def loss_classes_in_dim_1(logits, tokens):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


@alternative("next_token_loss")
def loss_log_softmax_gather(logits, tokens):
    log_probs = F.log_softmax(logits[:, :-1], dim=-1)
    return -log_probs.gather(2, tokens[:, 1:, None]).mean()


@alternative("next_token_loss")
def loss_nll_of_log_softmax(logits, tokens):
    b, t, v = logits.shape
    return F.nll_loss(logits.log_softmax(-1)[:, : t - 1].flatten(0, 1), tokens[:, 1:].flatten())


# ------------------------------------------------------------------ sample_next_token: mistakes

@mistake("softmax-before-temperature", "sample_next_token")
def sample_softmax_then_divide(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1) / temperature
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@mistake("softmax-before-temperature", "sample_next_token")
def sample_softmax_twice(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(F.softmax(logits, dim=-1) / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@mistake("top-k-wrong-dim", "sample_next_token")
def sample_top_k_over_batch(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=0).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@mistake("sampling-global-rng", "sample_next_token")
def sample_global_generator(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(1)


@mistake("temperature-multiplies", "sample_next_token")
def sample_times_temperature(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits * temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@mistake("top-k-smallest", "sample_next_token")
def sample_top_k_smallest(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        keep = logits.topk(top_k, dim=-1, largest=False).indices
        logits = torch.full_like(logits, float("-inf")).scatter(-1, keep, logits.gather(-1, keep))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@mistake("top-k-ignored", "sample_next_token")
def sample_ignores_top_k(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    return torch.multinomial(F.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(1)


@mistake("greedy-divides-by-zero", "sample_next_token")
def sample_no_greedy_case(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@mistake("no-distribution", "sample_next_token")
def sample_top_k_on_probabilities(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = F.softmax(logits / temperature, dim=-1)
    if top_k is not None:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, float("-inf"))
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@mistake("top-k-too-few", "sample_next_token")
def sample_top_k_minus_one(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits <= kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@mistake("generate-not-ids", "sample_next_token")
def sample_greedy_max_values(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.max(dim=-1)[0]
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


@mistake("wrong-shape", "sample_next_token")
def sample_keeps_last_dim(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


# ------------------------------------------------------------------ sample_next_token: correct alternatives

@alternative("sample_next_token")
def sample_among_top_k(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is None:
        top_k = logits.shape[-1]
    values, indices = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)
    choice = torch.multinomial(torch.softmax(values / temperature, dim=-1), 1, generator=generator)
    return indices.gather(-1, choice).squeeze(-1)


@alternative("sample_next_token")
def sample_scatter_mask(logits, temperature=1.0, top_k=None, generator=None):
    if temperature <= 0:
        return torch.argmax(logits, dim=1)
    scaled = logits / temperature
    if top_k:
        keep = torch.zeros_like(scaled, dtype=torch.bool)
        keep.scatter_(1, scaled.topk(top_k, dim=1).indices, True)
        scaled = torch.where(keep, scaled, torch.tensor(float("-inf"), device=scaled.device))
    probs = scaled.softmax(dim=1)
    return probs.multinomial(num_samples=1, generator=generator).view(-1)


@alternative("sample_next_token")
def sample_zero_and_renormalize(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        smallest_kept = probs.topk(top_k, dim=-1).values[:, [-1]]
        probs = torch.where(probs >= smallest_kept, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


# ------------------------------------------------------------------ generate: mistakes

@mistake("generate-drops-prompt", "generate")
def generate_drops_prompt(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None, use_cache=True):
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            if use_cache:
                logits, cache = model(tokens if cache is None else tokens[:, -1:], cache=cache, use_cache=True)
            else:
                logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens[:, prompt.shape[1]:]


@mistake("generate-first-position", "generate")
def generate_first_position(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                            use_cache=True):
    with torch.no_grad():
        tokens = prompt
        for _ in range(max_new_tokens):
            logits = model(tokens)
            nxt = sample_next_token(logits[:, 0], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-forgets-generator", "generate")
def generate_forgets_generator(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                               use_cache=True):
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            if use_cache:
                logits, cache = model(tokens if cache is None else tokens[:, -1:], cache=cache, use_cache=True)
            else:
                logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-ignores-settings", "generate")
def generate_ignores_settings(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                              use_cache=True):
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            if use_cache:
                logits, cache = model(tokens if cache is None else tokens[:, -1:], cache=cache, use_cache=True)
            else:
                logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], generator=generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-cache-refeeds", "generate")
def generate_refeeds_everything(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                                use_cache=True):
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            if use_cache:
                logits, cache = model(tokens, cache=cache, use_cache=True)
            else:
                logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-cache-not-passed", "generate")
def generate_cache_not_passed(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                              use_cache=True):
    with torch.no_grad():
        tokens = prompt
        for step in range(max_new_tokens):
            if use_cache and step > 0:
                logits = model(tokens[:, -1:])
            else:
                logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-stale-cache", "generate")
def generate_stale_cache(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None, use_cache=True):
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits = model(tokens)
            elif cache is None:
                logits, cache = model(tokens, use_cache=True)
            else:
                logits, _ = model(tokens[:, -1:], cache=cache, use_cache=True)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-cache-unused", "generate")
def generate_never_caches(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None, use_cache=True):
    with torch.no_grad():
        tokens = prompt
        for _ in range(max_new_tokens):
            logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


@mistake("generate-cache-when-not-asked", "generate")
def generate_always_caches(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                           use_cache=True):
    tokens = prompt
    step_input, cache = prompt, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, cache = model(step_input, cache=cache, use_cache=True)  # the cache is faster: always use it
            step_input = sample_next_token(logits[:, -1], temperature, top_k, generator)[:, None]
            tokens = torch.cat([tokens, step_input], dim=1)
    return tokens


# ------------------------------------------------------------------ generate: correct alternatives

@alternative("generate")
def generate_preallocated(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                          use_cache=True):
    b, t0 = prompt.shape
    out = torch.empty(b, t0 + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :t0] = prompt
    cache = None
    with torch.no_grad():
        for n in range(t0, t0 + max_new_tokens):
            if not use_cache:
                last = model(out[:, :n])[:, -1]
            elif cache is None:
                logits, cache = model(out[:, :n], use_cache=True)
                last = logits[:, -1]
            else:
                logits, cache = model(out[:, n - 1:n], cache, True)
                last = logits[:, -1]
            out[:, n] = sample_next_token(last, temperature, top_k, generator)
    return out


@alternative("generate")
def generate_feeds_what_it_drew(model, prompt, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                                use_cache=True):
    tokens = prompt
    step_input, cache = prompt, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            if use_cache:
                logits, cache = model(step_input, cache=cache, use_cache=True)
            else:
                logits = model(tokens)
            step_input = sample_next_token(logits[:, -1, :], temperature, top_k, generator).unsqueeze(-1)
            tokens = torch.cat((tokens, step_input), dim=-1)
    return tokens


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("lm-positions-restart", "loss-not-shifted", "sample-top-k-over-batch", "generate-drops-prompt")
