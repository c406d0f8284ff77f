"""Reference parts of the modern decoder (assignment 09, in preparation): RMSNorm, rotary positions, SwiGLU and
grouped-query attention, and the decoder built from them.

No notebook uses this module yet; tests/test_modern_decoder.py checks it against PyTorch's own pieces (nn.RMSNorm,
F.scaled_dot_product_attention with enable_gqa, F.silu) and against the properties the assignment will assert.
Conventions, as in the Llama family's code in Hugging Face transformers:
- rotary pairs are halves: feature i of a head is rotated with feature i + s/2, at the angle position · θ_i,
  θ_i = base^(−2i/s), i = 0 .. s/2 − 1;
- query head j reads key/value head j // (heads / kv_heads): each key/value head serves a run of consecutive
  query heads (torch.repeat_interleave along the heads);
- no biases anywhere; the output projection is not tied to the token embedding.
"""

import torch
import torch.nn.functional as F
from torch import nn

from course.multi_head import merge_heads, split_heads


class RMSNorm(nn.Module):
    """x / sqrt(mean(x², last dim) + eps) · gain: LayerNorm without the mean and the bias. (..., k) -> (..., k)."""

    def __init__(self, k: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(k))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.gain


def rotary_tables(t: int, s: int, base: float = 10000.0,
                  device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position · θ_i for positions 0..t-1 and θ_i = base^(−2i/s): two (t, s // 2) tables."""
    # float64 on the CPU, whatever the device: Apple's MPS has no float64, and float32 angles drift at long positions.
    theta = base ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)  # (s/2,)
    angles = torch.arange(t, dtype=torch.float64).unsqueeze(1) * theta  # (t, s/2)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i + s/2}) of x (..., t, s) by the angle of its position offset + 0..t-1."""
    t, half = x.shape[-2], x.shape[-1] // 2
    cos, sin = cos[offset : offset + t], sin[offset : offset + t]  # (t, s/2)
    first, second = x[..., :half], x[..., half:]  # (..., t, s/2) each
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)  # (..., t, s)


def swiglu_hidden(k: int) -> int:
    """The hidden size that gives SwiGLU's three k×hidden matrices the 8k² weights of a k -> 4k -> k MLP."""
    return round(8 * k / 3)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases: (..., k) -> (..., k)."""

    def __init__(self, k: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(k, hidden, bias=False)
        self.up = nn.Linear(k, hidden, bias=False)
        self.down = nn.Linear(hidden, k, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class GroupedQueryAttention(nn.Module):
    """`heads` query heads of size s = k // heads sharing `kv_heads` key/value heads, rotary on queries and keys.

    forward(x (b, t, k), cos, sin, mask (t, t_past + t) bool, past None or (keys, values) each
    (b, kv_heads, t_past, s)) -> ((b, t, k), (keys, values) each (b, kv_heads, t_past + t, s)): the cache holds
    the rotated keys, kv_heads of them, so it is heads / kv_heads times smaller than multi-head attention's.
    """

    def __init__(self, k: int, heads: int, kv_heads: int):
        super().__init__()
        if k % heads or heads % kv_heads:
            raise ValueError(f"k = {k} must divide into heads = {heads}, and heads into kv_heads = {kv_heads}")
        self.heads, self.kv_heads, s = heads, kv_heads, k // heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, kv_heads * s, bias=False)
        self.to_values = nn.Linear(k, kv_heads * s, bias=False)
        self.unify_heads = nn.Linear(k, k, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None):
        offset = 0 if past is None else past[0].shape[2]
        queries = apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)  # (b, h, t, s)
        keys = apply_rotary(split_heads(self.to_keys(x), self.kv_heads), cos, sin, offset)  # (b, g, t, s)
        values = split_heads(self.to_values(x), self.kv_heads)  # (b, g, t, s): values are not rotated
        if past is not None:
            keys = torch.cat([past[0], keys], dim=2)  # (b, g, t_past + t, s)
            values = torch.cat([past[1], values], dim=2)
        group = self.heads // self.kv_heads
        out = F.scaled_dot_product_attention(queries, keys.repeat_interleave(group, dim=1),
                                             values.repeat_interleave(group, dim=1), attn_mask=mask)  # (b, h, t, s)
        return self.unify_heads(merge_heads(out)), (keys, values)


class ModernBlock(nn.Module):
    """Pre-norm block of RMSNorm, grouped-query attention with rotary positions, RMSNorm and SwiGLU."""

    def __init__(self, k: int, heads: int, kv_heads: int):
        super().__init__()
        self.norm1 = RMSNorm(k)
        self.attention = GroupedQueryAttention(k, heads, kv_heads)
        self.norm2 = RMSNorm(k)
        self.ff = SwiGLU(k, swiglu_hidden(k))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                past: tuple | None = None):
        attended, keys_values = self.attention(self.norm1(x), cos, sin, mask, past)
        x = x + attended  # (b, t, k)
        return x + self.ff(self.norm2(x)), keys_values


class ModernLanguageModel(nn.Module):
    """A decoder-only model of modern parts: token ids (b, t) -> logits (b, t, vocab_size), with a KV cache.

    No position embedding: positions enter as rotations of queries and keys (tables of max_len positions, kept as
    buffers, not parameters). forward(tokens, cache=None, use_cache=False) as 08's LanguageModel; the cache holds
    kv_heads keys and values per block.
    """

    def __init__(self, vocab_size: int, k: int, heads: int, kv_heads: int, depth: int, max_len: int,
                 base: float = 10000.0):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, k)
        self.blocks = nn.ModuleList(ModernBlock(k, heads, kv_heads) for _ in range(depth))
        self.norm = RMSNorm(k)
        self.to_logits = nn.Linear(k, vocab_size, bias=False)
        cos, sin = rotary_tables(max_len, k // heads, base)
        self.register_buffer("cos", cos, persistent=False)  # (max_len, s/2)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, cache: list | None = None, use_cache: bool = False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[2]
        if past + t > self.cos.shape[0]:
            raise ValueError(f"{past + t} positions exceed the {self.cos.shape[0]} of the rotary tables")
        x = self.token_embedding(tokens)  # (b, t, k)
        mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)  # (t, past + t)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, keys_values = block(x, self.cos, self.sin, mask, None if cache is None else cache[i])
            new_cache.append(keys_values)
        logits = self.to_logits(self.norm(x))  # (b, t, vocab_size)
        return (logits, new_cache) if use_cache else logits
