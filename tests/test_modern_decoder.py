"""The reference parts of the modern decoder (course/modern_decoder.py) against PyTorch's own pieces and the properties
assignment 09 will assert: RMSNorm = nn.RMSNorm, rotary = a complex rotation that makes q·k depend on the offset
only, SwiGLU's size, grouped-query attention = F.scaled_dot_product_attention(enable_gqa=True), and the model's
cache = its full forward."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course.language_model import generate, generate_cached
from course.modern_decoder import (
    GroupedQueryAttention,
    ModernLanguageModel,
    RMSNorm,
    SwiGLU,
    apply_rotary,
    rotary_tables,
    swiglu_hidden,
)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_rms_norm_is_pytorchs_and_ignores_the_scale_of_its_input():
    norm = RMSNorm(12, eps=1e-5)
    with torch.no_grad():
        norm.gain.copy_(torch.randn(12, generator=_g(1)))
    x = 3 * torch.randn(4, 5, 12, generator=_g(2)) + 1.5  # a mean far from 0: LayerNorm would remove it
    oracle = nn.RMSNorm(12, eps=1e-5)
    with torch.no_grad():
        oracle.weight.copy_(norm.gain)
    torch.testing.assert_close(norm(x), oracle(x))
    torch.testing.assert_close(norm(7.0 * x), norm(x), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(norm(x), norm(x - x.mean(-1, keepdim=True)), atol=1e-3), "RMSNorm keeps the mean"


def _complex_rotary(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The rotation as complex multiplication: (x_i + i·x_{i+s/2}) · e^{i·position·θ_i}, θ_i = base^(−2i/s)."""
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    theta = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    z = z * torch.exp(1j * positions.double()[:, None] * theta)  # (..., t, s/2)
    return torch.cat([z.real, z.imag], dim=-1).float()


def test_rotary_is_a_rotation_of_pairs_of_halves():
    x = torch.randn(2, 3, 7, 8, generator=_g(3))  # (b, h, t, s)
    cos, sin = rotary_tables(20, 8, base=100.0)
    assert cos.shape == sin.shape == (20, 4)
    out = apply_rotary(x, cos, sin, offset=5)
    torch.testing.assert_close(out, _complex_rotary(x, torch.arange(5, 12), 100.0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
    torch.testing.assert_close(apply_rotary(x, cos, sin)[..., 0, :], x[..., 0, :])  # position 0: no rotation


def test_rotary_scores_depend_on_the_offset_between_positions_only():
    cos, sin = rotary_tables(64, 16)
    q, k = torch.randn(2, 1, 1, 16, generator=_g(4)).unbind(0)  # (1, 1, 16) each

    def score(m: int, n: int) -> torch.Tensor:
        return (apply_rotary(q, cos, sin, m) * apply_rotary(k, cos, sin, n)).sum()

    for m, n, shift in ((3, 1, 20), (0, 9, 40), (10, 10, 13)):
        torch.testing.assert_close(score(m, n), score(m + shift, n + shift), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(score(3, 1), score(3, 2), atol=1e-3), "the score must change with the offset"


def test_swiglu_is_the_gated_formula_with_the_weights_of_a_4k_mlp():
    k = 24
    ff = SwiGLU(k, swiglu_hidden(k))
    x = torch.randn(3, 5, k, generator=_g(5))
    expected = (F.silu(x @ ff.gate.weight.T) * (x @ ff.up.weight.T)) @ ff.down.weight.T
    torch.testing.assert_close(ff(x), expected)
    weights = sum(p.numel() for p in ff.parameters())
    assert abs(weights - 8 * k * k) <= 3 * k, (weights, 8 * k * k)  # rounding the hidden size costs < one column


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_grouped_query_attention_is_pytorchs_with_enable_gqa(heads, kv_heads):
    k, s, t = 24, 24 // heads, 7
    attention = GroupedQueryAttention(k, heads, kv_heads)
    x = torch.randn(2, t, k, generator=_g(6))
    cos, sin = rotary_tables(t, s)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    out, (keys, values) = attention(x, cos, sin, mask)
    assert keys.shape == values.shape == (2, kv_heads, t, s)
    q = _complex_rotary((x @ attention.to_queries.weight.T).view(2, t, heads, s).transpose(1, 2), torch.arange(t),
                        10000.0)
    kk = _complex_rotary((x @ attention.to_keys.weight.T).view(2, t, kv_heads, s).transpose(1, 2), torch.arange(t),
                         10000.0)
    v = (x @ attention.to_values.weight.T).view(2, t, kv_heads, s).transpose(1, 2)
    expected = F.scaled_dot_product_attention(q, kk, v, attn_mask=mask, enable_gqa=True)  # (b, h, t, s)
    expected = expected.transpose(1, 2).reshape(2, t, k) @ attention.unify_heads.weight.T
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_indivisible_heads_are_refused():
    with pytest.raises(ValueError):
        GroupedQueryAttention(24, 4, 3)


def _model(kv_heads: int = 2) -> ModernLanguageModel:
    torch.manual_seed(7)
    return ModernLanguageModel(11, k=16, heads=4, kv_heads=kv_heads, depth=2, max_len=24).eval()


def test_the_model_is_causal_and_its_cache_gives_the_full_forward():
    model = _model()
    tokens = torch.randint(11, (3, 10), generator=_g(8))
    with torch.no_grad():
        full = model(tokens)
        changed = tokens.clone()
        changed[:, 6:] = (changed[:, 6:] + 1) % 11
        torch.testing.assert_close(model(changed)[:, :6], full[:, :6])
        cache, pieces = None, []
        for start, end in ((0, 4), (4, 5), (5, 8), (8, 10)):
            logits, cache = model(tokens[:, start:end], cache=cache, use_cache=True)
            pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-4, atol=1e-5)
    assert cache[0][0].shape == (3, 2, 10, 4), "the cache holds kv_heads heads"
    assert not any("cos" in name or "sin" in name for name, _ in model.named_parameters())
    assert "cos" not in model.state_dict(), "the rotary tables are computed, not saved"


def test_the_cache_is_heads_over_kv_heads_times_smaller():
    tokens = torch.zeros(1, 12, dtype=torch.long)
    sizes = {}
    for kv_heads in (4, 1):
        with torch.no_grad():
            _, cache = _model(kv_heads)(tokens, use_cache=True)
        sizes[kv_heads] = sum(t.numel() for pair in cache for t in pair)
    assert sizes[4] == 4 * sizes[1] == 2 * 2 * 12 * 16


def test_cached_and_uncached_generation_write_the_same_tokens():
    model = _model()
    prompt = torch.zeros(4, 1, dtype=torch.long)
    cached = generate_cached(model, prompt, 15, generator=torch.Generator().manual_seed(3))
    plain = generate(model, prompt, 15, generator=torch.Generator().manual_seed(3))
    assert torch.equal(cached, plain)
    assert cached.shape == (4, 16) and math.isfinite(float(cached.float().mean()))
