"""Reference decoder-only language model from assignment 08: the answers of its notebook.

These match the solutions of source/08_language_model; the tests run the notebook's checks on them. The training
harness (settings, training loop, evaluation, timings) is in course/language_model_training.py, which does not
import this module: while 08 is graded, this module is hidden from the student's kernel.
"""

import torch
import torch.nn.functional as F
from torch import nn

from course.multi_head import MultiHeadAttention, merge_heads, split_heads
from course.scaling import scaled_dot_product_attention
from course.transformer_block import FeedForward


class LanguageModel(nn.Module):
    """Decoder-only transformer: token ids (b, t) -> next-token logits (b, t, vocab_size), causal."""

    def __init__(self, vocab_size: int, k: int, heads: int, depth: int, max_len: int):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.position_embedding = nn.Embedding(max_len, k)
        self.blocks = nn.ModuleList(CausalBlock(k, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(k)
        self.to_logits = nn.Linear(k, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)  # (t,)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (b, t, k)
        mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()  # (t, t): True where j <= i
        for block in self.blocks:
            x = block(x, mask)
        return self.to_logits(self.norm(x))  # (b, t, vocab_size)


class CausalBlock(nn.Module):
    """Pre-norm block: x + attention(norm1(x)) under the mask, then + ff(norm2(x)); (b, t, k) -> (b, t, k)."""

    def __init__(self, k: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(k)
        self.attention = MultiHeadAttention(k, heads)
        self.norm2 = nn.LayerNorm(k)
        self.ff = FeedForward(k, 4 * k)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), mask=mask)  # (b, t, k)
        return x + self.ff(self.norm2(x))


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting tokens[:, i + 1] from the logits at position i: (b, t, V), (b, t) -> ()."""
    vocab = logits.shape[-1]
    predictions = logits[:, :-1].reshape(-1, vocab)  # (b * (t - 1), V): positions 0 .. t - 2
    labels = tokens[:, 1:].reshape(-1)  # (b * (t - 1),): tokens 1 .. t - 1
    return F.cross_entropy(predictions, labels)


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of logits (b, V) -> (b,): the argmax if temperature == 0, else a draw from
    softmax(logits / temperature) restricted to the top_k most likely tokens and then to the nucleus of top_p, made
    with torch.multinomial and the given generator."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest logit of each row
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)  # (b, V)
    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)  # (b, V): most likely first
        before = ranked.cumsum(dim=-1) - ranked  # (b, V): the probability of the tokens ranked before
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)  # (b, V)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)  # (b,)


def generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """prompt (b, t0) -> (b, t0 + max_new_tokens): the prompt and the tokens sampled one after the other, every step
    running the model on the whole sequence so far (inside torch.no_grad(), as the notebook's solution)."""
    with torch.no_grad():
        tokens = prompt
        for _ in range(max_new_tokens):
            logits = model(tokens)  # (b, t, V)
            next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)  # (b,)
            tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)  # (b, t + 1)
    return tokens


class CachedLanguageModel(LanguageModel):
    """LanguageModel with a KV cache: forward(tokens, cache=None, use_cache=False).

    `cache` is what an earlier call returned, one (keys, values) pair per block, each (b, heads, t_past, k // heads);
    the new tokens sit at positions t_past .. t_past + t - 1. Returns the logits, or (logits, cache) with the keys
    and values of all t_past + t positions if use_cache.
    """

    def forward(self, tokens: torch.Tensor, cache: list | None = None, use_cache: bool = False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[2]  # positions already in the cache
        positions = torch.arange(past, past + t, device=tokens.device)  # (t,): they continue after the cache
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # (b, t, k)
        mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)  # (t, past + t)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, keys_values = self.run_block(block, x, mask, None if cache is None else cache[i])
            new_cache.append(keys_values)
        logits = self.to_logits(self.norm(x))  # (b, t, vocab_size)
        return (logits, new_cache) if use_cache else logits

    def run_block(self, block: CausalBlock, x: torch.Tensor, mask: torch.Tensor, past: tuple | None = None):
        """One CausalBlock whose attention also reads the cached keys and values.

        x (b, t, k), mask (t, t_past + t), past None or (keys, values) each (b, h, t_past, s)
        -> (x (b, t, k), (keys, values) each (b, h, t_past + t, s)).
        """
        attention, h = block.attention, block.norm1(x)
        queries = split_heads(attention.to_queries(h), attention.heads)  # (b, h, t, s)
        keys = split_heads(attention.to_keys(h), attention.heads)  # (b, h, t, s)
        values = split_heads(attention.to_values(h), attention.heads)  # (b, h, t, s)
        if past is not None:
            keys = torch.cat([past[0], keys], dim=2)  # (b, h, t_past + t, s): time is dim 2
            values = torch.cat([past[1], values], dim=2)
        out, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, h, t, s)
        x = x + attention.unify_heads(merge_heads(out))  # (b, t, k)
        return x + block.ff(block.norm2(x)), (keys, values)


def generate_cached(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """What generate writes, with the KV cache of a CachedLanguageModel: the first step runs the prompt with
    use_cache=True, each later step only the token sampled last, with the cache of the step before."""
    with torch.no_grad():
        tokens, cache = prompt, None
        for _ in range(max_new_tokens):
            step_input = tokens if cache is None else tokens[:, -1:]  # (b, t0), then (b, 1)
            logits, cache = model(step_input, cache=cache, use_cache=True)
            next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)  # (b,)
            tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)  # (b, t + 1)
    return tokens
