"""Assignment 09's checks in this process, without the notebook: the reference parts (course/modern_decoder.py) pass
every check, with the fixed seeds and under a grading seed, and parts written wrong here are failed with the mistake
a student would be told, on the checks a student sees while working."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import modern_decoder as ref
from course.checks import modern_decoder as check
from course.checks import seeds
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.multi_head import merge_heads, split_heads

PARTS = {"rms_norm": ref.RMSNorm, "rotary_tables": ref.rotary_tables, "apply_rotary": ref.apply_rotary,
         "swiglu": ref.SwiGLU, "gqa": ref.GroupedQueryAttention, "modern_lm": ref.ModernLanguageModel}


def _part(name: str):
    return next(part for prefix, part in PARTS.items() if name.startswith(prefix))


@pytest.mark.parametrize("seed", (None, 7))
def test_the_reference_parts_pass_every_check(seed):
    with seeds.grading_seed(seed):
        for name, found in checks_of(check).items():
            found(_part(name))


def _named(found, part) -> str | None:
    with pytest.raises(CheckFailed) as failure:
        found(part)
    return failure.value.mistake


# ---------------------------------------------------------------- wrong parts

class EpsOutside(ref.RMSNorm):
    def forward(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.gain


class LayerNormLike(ref.RMSNorm):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gain, None, self.eps)


class NoGain(ref.RMSNorm):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LayerNormEps(ref.RMSNorm):
    def __init__(self, k, eps=1e-5):
        super().__init__(k, eps)


def tables_exponent_i(t, s, base=10000.0, device=None):
    theta = base ** (-torch.arange(s // 2, dtype=torch.float64, device=device) / s)
    angles = torch.arange(t, dtype=torch.float64, device=device)[:, None] * theta
    return angles.cos().float(), angles.sin().float()


def tables_float64(t, s, base=10000.0, device=None):
    cos, sin = ref.rotary_tables(t, s, base, device)
    return cos.double(), sin.double()


def tables_full_width(t, s, base=10000.0, device=None):
    cos, sin = ref.rotary_tables(t, s, base, device)
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


def rotary_interleaved(x, cos, sin, offset=0):
    t = x.shape[-2]
    cos, sin = cos[offset:offset + t], sin[offset:offset + t]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rotary_backwards(x, cos, sin, offset=0):
    return ref.apply_rotary(x, cos, -sin, offset)


def rotary_offset_ignored(x, cos, sin, offset=0):
    return ref.apply_rotary(x, cos, sin)


class GateSwapped(ref.SwiGLU):
    def forward(self, x):
        return self.down(F.silu(self.up(x)) * self.gate(x))


class ReluGLU(ref.SwiGLU):
    def forward(self, x):
        return self.down(F.relu(self.gate(x)) * self.up(x))


class BiasedSwiGLU(ref.SwiGLU):
    def __init__(self, k, hidden):
        super().__init__(k, hidden)
        self.gate = nn.Linear(k, hidden)


class GQA(ref.GroupedQueryAttention):
    """The reference with one typical mistake switched on."""

    mistake = ""

    def forward(self, x, cos, sin, mask, past=None):
        m = self.mistake
        offset = 0 if past is None or m == "offset" else past[0].shape[2]
        queries = ref.apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)
        raw = split_heads(self.to_keys(x), self.kv_heads)
        keys = raw if m == "keys-not-rotated" else ref.apply_rotary(raw, cos, sin, offset)
        values = split_heads(self.to_values(x), self.kv_heads)
        if m == "values-rotated":
            values = ref.apply_rotary(values, cos, sin, offset)
        group = self.heads // self.kv_heads
        if m == "cache-repeated":
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
            group = 1
        if past is not None:
            keys, values = torch.cat([past[0], keys], 2), torch.cat([past[1], values], 2)
        if m == "repeat":
            big_k, big_v = keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
        else:
            big_k, big_v = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        scale = 1 / math.sqrt(x.shape[-1]) if m == "scale" else None
        out = F.scaled_dot_product_attention(queries, big_k, big_v, attn_mask=None if m == "mask" else mask,
                                             scale=scale)
        return self.unify_heads(merge_heads(out)), (keys, values)


def gqa(mistake: str) -> type:
    return type(f"GQA_{mistake}", (GQA,), {"mistake": mistake})


class CacheUnrotated(ref.GroupedQueryAttention):
    """Caches the keys before rotation and rotates all of them at every call: right outputs, a wrong cache."""

    def forward(self, x, cos, sin, mask, past=None):
        offset = 0 if past is None else past[0].shape[2]
        queries = ref.apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)
        keys, values = split_heads(self.to_keys(x), self.kv_heads), split_heads(self.to_values(x), self.kv_heads)
        if past is not None:
            keys, values = torch.cat([past[0], keys], 2), torch.cat([past[1], values], 2)
        group = self.heads // self.kv_heads
        rotated = ref.apply_rotary(keys, cos, sin)
        out = F.scaled_dot_product_attention(queries, rotated.repeat_interleave(group, 1),
                                             values.repeat_interleave(group, 1), attn_mask=mask)
        return self.unify_heads(merge_heads(out)), (keys, values)


class NoDivisibilityCheck(ref.GroupedQueryAttention):
    def __init__(self, k, heads, kv_heads):
        nn.Module.__init__(self)
        self.heads, self.kv_heads, s = heads, kv_heads, k // heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, kv_heads * s, bias=False)
        self.to_values = nn.Linear(k, kv_heads * s, bias=False)
        self.unify_heads = nn.Linear(k, k, bias=False)


class PostNormBlock(ref.ModernBlock):
    def forward(self, x, cos, sin, mask, past=None):
        attended, keys_values = self.attention(x, cos, sin, mask, past)
        x = self.norm1(x + attended)
        return self.norm2(x + self.ff(x)), keys_values


class PostNormLM(ref.ModernLanguageModel):
    def __init__(self, vocab_size, k, heads, kv_heads, depth, max_len, base=10000.0):
        super().__init__(vocab_size, k, heads, kv_heads, depth, max_len, base)
        self.blocks = nn.ModuleList(PostNormBlock(k, heads, kv_heads) for _ in range(depth))


class TablesOfModelSize(ref.ModernLanguageModel):
    def __init__(self, vocab_size, k, heads, kv_heads, depth, max_len, base=10000.0):
        super().__init__(vocab_size, k, heads, kv_heads, depth, max_len, base)
        cos, sin = ref.rotary_tables(max_len, k, base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)


class PersistentTables(ref.ModernLanguageModel):
    def __init__(self, vocab_size, k, heads, kv_heads, depth, max_len, base=10000.0):
        super().__init__(vocab_size, k, heads, kv_heads, depth, max_len, base)
        self.register_buffer("cos", self.cos.clone())
        self.register_buffer("sin", self.sin.clone())


class NoLengthCheck(ref.ModernLanguageModel):
    """The reference's forward without the check of max_len (and, final_norm False, without the final norm)."""

    final_norm = True

    def forward(self, tokens, cache=None, use_cache=False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[2]
        x = self.token_embedding(tokens)
        mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, keys_values = block(x, self.cos, self.sin, mask, None if cache is None else cache[i])
            new_cache.append(keys_values)
        logits = self.to_logits(self.norm(x) if self.final_norm else x)
        return (logits, new_cache) if use_cache else logits


class NoFinalNormLM(NoLengthCheck):
    final_norm = False


WRONG = [
    ("rms_norm_oracle", EpsOutside, "rms-eps-outside-root"),
    ("rms_norm_oracle", LayerNormLike, "rms-mean-subtracted"),
    ("rms_norm_oracle", NoGain, "rms-no-gain"),
    ("rms_norm_oracle", LayerNormEps, "rms-default-eps"),
    ("rms_norm_hidden", LayerNormEps, "rms-default-eps"),
    ("rotary_tables", tables_exponent_i, "rotary-exponent-i"),
    ("rotary_tables", tables_float64, "rotary-tables-float64"),
    ("rotary_tables", tables_full_width, "rotary-tables-full-width"),
    ("apply_rotary_oracle", rotary_interleaved, "rotary-interleaved"),
    ("apply_rotary_oracle", rotary_backwards, "rotary-backwards"),
    ("apply_rotary_oracle", rotary_offset_ignored, "rotary-offset-ignored"),
    ("apply_rotary_offset", rotary_offset_ignored, "rotary-offset-ignored"),
    ("swiglu_oracle", GateSwapped, "swiglu-gate-swapped"),
    ("swiglu_oracle", ReluGLU, "swiglu-relu"),
    ("swiglu_oracle", BiasedSwiGLU, "swiglu-bias"),
    ("gqa_oracle", gqa("repeat"), "gqa-repeat-order"),
    ("gqa_oracle", gqa("values-rotated"), "gqa-values-rotated"),
    ("gqa_oracle", gqa("keys-not-rotated"), "gqa-not-rotated"),
    ("gqa_oracle", gqa("scale"), "gqa-scaled-by-model-size"),
    ("gqa_oracle", gqa("mask"), "gqa-mask-ignored"),
    ("gqa_structure", gqa("cache-repeated"), "gqa-cache-repeated"),
    ("gqa_structure", NoDivisibilityCheck, "gqa-no-divisibility-check"),
    ("gqa_cache", gqa("offset"), "gqa-cache-offset-ignored"),
    ("gqa_cache", CacheUnrotated, "gqa-cache-unrotated"),
    ("modern_lm_oracle", PostNormLM, "modern-post-norm"),
    ("modern_lm_oracle", NoFinalNormLM, "modern-no-final-norm"),
    ("modern_lm_structure", TablesOfModelSize, "modern-tables-head-size"),
    ("modern_lm_structure", PersistentTables, "modern-tables-persistent"),
]


@pytest.mark.parametrize("name,part,mistake", WRONG, ids=[f"{n}-{m}" for n, _, m in WRONG])
def test_a_wrong_part_is_failed_with_its_mistake(name, part, mistake):
    assert _named(getattr(check, name), part) == mistake


def test_a_model_without_the_length_check_is_named():
    assert _named(check.modern_lm_hidden, NoLengthCheck) == "modern-no-length-check"


def test_random_outputs_earn_nothing():
    """A module that returns noise of the right shapes fails every check that runs it."""

    class Noise(ref.GroupedQueryAttention):
        def forward(self, x, cos, sin, mask, past=None):
            b, t, k = x.shape
            cache = torch.randn(b, self.kv_heads, t + (0 if past is None else past[0].shape[2]), k // self.heads)
            return torch.randn_like(x), (cache, cache)

    for found in (check.gqa_structure, check.gqa_oracle, check.gqa_cache):
        with pytest.raises(CheckFailed):
            found(Noise)
