"""Assignment 09's checks in this process, without the notebook: the reference parts (course/modern_decoder.py) pass
every check, with the fixed seeds and under a grading seed; wrong parts, the judges' own written mistakes (WRITTEN in
course/judges/modern_decoder.py) or, for mistakes named by what the probe records, parts written wrong here, are
failed with the mistake a student would be told, on the checks a student sees while working."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import modern_decoder as ref
from course.checks import modern_decoder as check
from course.checks import seeds
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.judges.modern_decoder import WRITTEN
from course.judges.variants import defined, reference_source
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

def _written(mistake_id: str, part: object):
    """The first variant course/judges/modern_decoder.py writes of mistake_id, as the part a check takes: where it
    changes an earlier answer (ModernBlock), the reference part (ModernLanguageModel) calling it."""
    variant = next(w for w in WRITTEN.written if w.mistake.id == mistake_id)
    if variant.answer == part.__name__:
        return variant.run
    return defined(reference_source(WRITTEN.reference, part.__name__), part.__name__, WRITTEN.reference,
                   ((variant.code, variant.answer),))


WRITTEN_MISTAKES = [
    ("rms_norm_oracle", "rms-eps-outside-root"),
    ("rms_norm_oracle", "rms-mean-subtracted"),
    ("rms_norm_oracle", "rms-no-gain"),
    ("rms_norm_oracle", "rms-default-eps"),
    ("rms_norm_hidden", "rms-default-eps"),
    ("rotary_tables", "rotary-exponent-i"),
    ("apply_rotary_oracle", "rotary-interleaved"),
    ("apply_rotary_oracle", "rotary-backwards"),
    ("apply_rotary_oracle", "rotary-offset-ignored"),
    ("apply_rotary_offset", "rotary-offset-ignored"),
    ("swiglu_oracle", "swiglu-gate-swapped"),
    ("swiglu_oracle", "swiglu-relu"),
    ("gqa_oracle", "gqa-repeat-order"),
    ("gqa_oracle", "gqa-values-rotated"),
    ("gqa_oracle", "gqa-not-rotated"),
    ("gqa_oracle", "gqa-scaled-by-model-size"),
    ("gqa_oracle", "gqa-mask-ignored"),
    ("gqa_cache", "gqa-cache-offset-ignored"),
    ("gqa_cache", "gqa-cache-unrotated"),
    ("modern_lm_oracle", "modern-post-norm"),
    ("modern_lm_oracle", "modern-no-final-norm"),
]


@pytest.mark.parametrize("name,mistake", WRITTEN_MISTAKES, ids=[f"{n}-{m}" for n, m in WRITTEN_MISTAKES])
def test_a_written_mistake_is_failed_with_its_id(name, mistake):
    """The judge's variants are the mistakes: one of them, graded by the check a student sees, is named by its id."""
    assert _named(getattr(check, name), _written(mistake, _part(name))) == mistake


# Mistakes the judge names by what the probe recorded (a dtype, a shape, a stored attribute, a refusal): the judges
# module declares their ids without code, so they are written here.

def tables_float64(t, s, base=10000.0, device=None):
    cos, sin = ref.rotary_tables(t, s, base, device)
    return cos.double(), sin.double()


def tables_full_width(t, s, base=10000.0, device=None):
    cos, sin = ref.rotary_tables(t, s, base, device)
    return torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)


class BiasedSwiGLU(ref.SwiGLU):
    def __init__(self, k, hidden):
        super().__init__(k, hidden)
        self.gate = nn.Linear(k, hidden)


class CacheRepeated(ref.GroupedQueryAttention):
    """Caches the keys and values after repeating them for every query head."""

    def forward(self, x, cos, sin, mask, past=None):
        offset = 0 if past is None else past[0].shape[2]
        queries = ref.apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)
        keys = ref.apply_rotary(split_heads(self.to_keys(x), self.kv_heads), cos, sin, offset)
        values = split_heads(self.to_values(x), self.kv_heads)
        group = self.heads // self.kv_heads
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        if past is not None:
            keys, values = torch.cat([past[0], keys], 2), torch.cat([past[1], values], 2)
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
        return self.unify_heads(merge_heads(out)), (keys, values)


class NoDivisibilityCheck(ref.GroupedQueryAttention):
    def __init__(self, k, heads, kv_heads):
        nn.Module.__init__(self)
        self.heads, self.kv_heads, s = heads, kv_heads, k // heads
        self.to_queries = nn.Linear(k, k, bias=False)
        self.to_keys = nn.Linear(k, kv_heads * s, bias=False)
        self.to_values = nn.Linear(k, kv_heads * s, bias=False)
        self.unify_heads = nn.Linear(k, k, bias=False)


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
    """The reference's forward without the check of max_len."""

    def forward(self, tokens, cache=None, use_cache=False):
        t = tokens.shape[1]
        past = 0 if cache is None else cache[0][0].shape[2]
        x = self.token_embedding(tokens)
        mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, keys_values = block(x, self.cos, self.sin, mask, None if cache is None else cache[i])
            new_cache.append(keys_values)
        logits = self.to_logits(self.norm(x))
        return (logits, new_cache) if use_cache else logits


RECORDED_MISTAKES = [
    ("rotary_tables", tables_float64, "rotary-tables-float64"),
    ("rotary_tables", tables_full_width, "rotary-tables-full-width"),
    ("swiglu_oracle", BiasedSwiGLU, "swiglu-bias"),
    ("gqa_structure", CacheRepeated, "gqa-cache-repeated"),
    ("gqa_structure", NoDivisibilityCheck, "gqa-no-divisibility-check"),
    ("modern_lm_structure", TablesOfModelSize, "modern-tables-head-size"),
    ("modern_lm_structure", PersistentTables, "modern-tables-persistent"),
    ("modern_lm_hidden", NoLengthCheck, "modern-no-length-check"),
]


@pytest.mark.parametrize("name,part,mistake", RECORDED_MISTAKES, ids=[f"{n}-{m}" for n, _, m in RECORDED_MISTAKES])
def test_a_recorded_mistake_is_failed_with_its_id(name, part, mistake):
    assert _named(getattr(check, name), part) == mistake


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
