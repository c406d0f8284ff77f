"""Variants of the answers of assignment 09_modern_decoder: the mistakes its judges write as code (named by running
them, course/judges/modern_decoder.py), the mistakes named by what the probe records (structure, dtype, device,
length checks, the mistakes every check names), and correct answers written differently.

These are edits of the solved cell (`edit`): the answer cell `modern_language_model` holds ModernBlock and
ModernLanguageModel, and an edit may change either (a written mistake of ModernBlock replaces only that class there).
"""

from catalogue import edits, written
from course.judges.modern_decoder import WRITTEN

ASSIGNMENT = "09_modern_decoder"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

# the mistakes course/judges/modern_decoder.py writes as code and names by running them
written(WRITTEN, cells={"ModernBlock": "modern_language_model"})

NORM = "rms_norm"
TABLES = "rotary_tables"
ROTARY = "apply_rotary"
SWIGLU = "swiglu"
GQA = "grouped_query_attention"
MODEL = "modern_language_model"

RMS = "torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)"
RMS_RETURN = f"return x * {RMS} * self.gain"
THETA = "base ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)"
TABLES_RETURN = "return angles.cos().float().to(device), angles.sin().float().to(device)"
ROTATED = "first * cos - second * sin, first * sin + second * cos"
SWIGLU_RETURN = "return self.down(F.silu(self.gate(x)) * self.up(x))"
REPEATED_KEYS = "queries, keys.repeat_interleave(group, dim=1),"
REPEATED_VALUES = "values.repeat_interleave(group, dim=1), attn_mask=mask)"
SDPA = ("out = F.scaled_dot_product_attention(queries, keys.repeat_interleave(group, dim=1),\n"
        "                                             values.repeat_interleave(group, dim=1), attn_mask=mask)")
CHECK = ("        if k % heads or heads % kv_heads:\n"
         '            raise ValueError(f"k = {k} must divide into heads = {heads}, and heads into kv_heads = '
         '{kv_heads}")\n')
MASK = ".tril(diagonal=past)"
LENGTH = ("        if past + t > self.cos.shape[0]:\n"
          '            raise ValueError(f"{past + t} positions exceed the {self.cos.shape[0]} of the rotary tables")\n')
COS_BUFFER = 'self.register_buffer("cos", cos, persistent=False)'
SIN_BUFFER = 'self.register_buffer("sin", sin, persistent=False)'

# ------------------------------------------------------------------ RMSNorm

GAIN = "self.gain = nn.Parameter(torch.ones(k))"
edit("rms-gain-and-bias", NORM, (GAIN, GAIN + "\n        self.bias = nn.Parameter(torch.zeros(k))"),
     (" * self.gain", " * self.gain + self.bias"), mistake="parameter-count")
edit("rms-eps-under-another-name", NORM, ("self.eps = eps", "self.epsilon = eps"), ("+ self.eps)", "+ self.epsilon)"),
     mistake="rms-eps-not-stored")
edit("rms-gain-starts-at-zero", NORM, (GAIN, "self.gain = nn.Parameter(torch.zeros(k))"), mistake="rms-gain-not-ones")

edit("rms-divides-by-sqrt", NORM, (RMS_RETURN, "return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * "
                                               "self.gain"))
edit("rms-pytorch-functional", NORM, (RMS_RETURN, "return F.rms_norm(x, (x.shape[-1],), self.gain, self.eps)"))

# ------------------------------------------------------------------ rotary_tables

edit("tables-duplicated-as-in-hugging-face", TABLES,
     (TABLES_RETURN, "angles = torch.cat([angles, angles], dim=-1)  # (t, s)\n    " + TABLES_RETURN),
     mistake="rotary-tables-full-width")
edit("tables-left-in-float64", TABLES, (TABLES_RETURN, "return angles.cos().to(device), angles.sin().to(device)"),
     mistake="rotary-tables-float64")

# device mistakes a CPU grader sees through the stand-in GPUs of course/checks/device.py
edit("tables-float64-on-the-device", TABLES,
     (THETA, "base ** (-torch.arange(0, s, 2, dtype=torch.float64, device=device) / s)"),
     ("torch.arange(t, dtype=torch.float64)", "torch.arange(t, dtype=torch.float64, device=device)"),
     (TABLES_RETURN, "return angles.cos().float(), angles.sin().float()"), mistake="rotary-tables-float64-on-mps")
edit("tables-device-ignored", TABLES, (TABLES_RETURN, "return angles.cos().float(), angles.sin().float()"),
     mistake="rotary-tables-device-ignored")

edit("tables-outer-product", TABLES,
     (THETA, "1.0 / base ** (torch.arange(0, s, 2).double() / s)"),
     ("torch.arange(t, dtype=torch.float64).unsqueeze(1) * theta",
      "torch.outer(torch.arange(t).double(), theta)"))

# ------------------------------------------------------------------ apply_rotary

edit("rotary-as-complex-numbers", ROTARY,
     ("return torch.cat([" + ROTATED + "], dim=-1)",
      "z = torch.complex(first, second) * torch.complex(cos, sin)  # (..., t, s/2)\n"
      "    return torch.cat([z.real, z.imag], dim=-1)"))
edit("rotary-rotate-half", ROTARY,
     ("return torch.cat([" + ROTATED + "], dim=-1)",
      "rotated = torch.cat([-second, first], dim=-1)  # (..., t, s)\n"
      "    return x * torch.cat([cos, cos], dim=-1) + rotated * torch.cat([sin, sin], dim=-1)"))

# ------------------------------------------------------------------ SwiGLU

edit("swiglu-with-biases", SWIGLU, ("self.gate = nn.Linear(k, hidden, bias=False)", "self.gate = nn.Linear(k, hidden)"),
     ("self.up = nn.Linear(k, hidden, bias=False)", "self.up = nn.Linear(k, hidden)"), mistake="swiglu-bias")

edit("swiglu-sigmoid-written-out", SWIGLU,
     (SWIGLU_RETURN, "gate = self.gate(x)\n        return self.down(gate * torch.sigmoid(gate) * self.up(x))"))

# ------------------------------------------------------------------ GroupedQueryAttention

edit("gqa-caches-repeated-heads", GQA, (REPEATED_KEYS, "queries, keys,"), (REPEATED_VALUES, "values, attn_mask=mask)"),
     ("        if past is not None:\n",
      "        keys = keys.repeat_interleave(self.heads // self.kv_heads, dim=1)  # (b, h, t, s)\n"
      "        values = values.repeat_interleave(self.heads // self.kv_heads, dim=1)\n"
      "        if past is not None:\n"), mistake="gqa-cache-repeated")
edit("gqa-biases", GQA, ("self.to_queries = nn.Linear(k, k, bias=False)", "self.to_queries = nn.Linear(k, k)"),
     mistake="gqa-bias")
edit("gqa-no-divisibility-check", GQA, (CHECK, ""), mistake="gqa-no-divisibility-check")
edit("gqa-head-counts-under-other-names", GQA,
     ("self.heads, self.kv_heads, s = heads, kv_heads, k // heads", "self.h, self.g, s = heads, kv_heads, k // heads"),
     ("self.heads)", "self.h)"),
     ("split_heads(self.to_keys(x), self.kv_heads)", "split_heads(self.to_keys(x), self.g)"),
     ("split_heads(self.to_values(x), self.kv_heads)", "split_heads(self.to_values(x), self.g)"),
     ("group = self.heads // self.kv_heads", "group = self.h // self.g"), mistake="gqa-heads-not-stored")
edit("gqa-full-size-keys", GQA, ("self.to_keys = nn.Linear(k, kv_heads * s, bias=False)",
                                 "self.to_keys = nn.Linear(k, k, bias=False)"),
     ("self.to_values = nn.Linear(k, kv_heads * s, bias=False)", "self.to_values = nn.Linear(k, k, bias=False)"),
     mistake="wrong-layer-size")

edit("gqa-pytorch-enable-gqa", GQA, (SDPA, "out = F.scaled_dot_product_attention(queries, keys, values, "
                                           "attn_mask=mask, enable_gqa=True)"))
edit("gqa-expand-and-reshape", GQA,
     (SDPA, "b, g, n, s = keys.shape\n"
            "        shared_keys = keys[:, :, None].expand(b, g, group, n, s).reshape(b, g * group, n, s)\n"
            "        shared_values = values[:, :, None].expand(b, g, group, n, s).reshape(b, g * group, n, s)\n"
            "        out = F.scaled_dot_product_attention(queries, shared_keys, shared_values, attn_mask=mask)"))
edit("gqa-softmax-written-out", GQA,
     (SDPA, "shared_keys = keys.repeat_interleave(group, dim=1)  # (b, h, T, s)\n"
            "        scores = queries @ shared_keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (b, h, t, T)\n"
            '        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)\n'
            "        out = weights @ values.repeat_interleave(group, dim=1)  # (b, h, t, s)"))

# ------------------------------------------------------------------ ModernBlock and ModernLanguageModel

# two mistakes the judge names as one, as the original transformer was written: post-norm blocks, no final norm
edit("modern-post-norm-as-in-2017", MODEL,
     ("attended, keys_values = self.attention(self.norm1(x), cos, sin, mask, past)",
      "attended, keys_values = self.attention(x, cos, sin, mask, past)"),
     ("x = x + attended  # (b, t, k)", "x = self.norm1(x + attended)"),
     ("return x + self.ff(self.norm2(x)), keys_values", "return self.norm2(x + self.ff(x)), keys_values"),
     ("self.to_logits(self.norm(x))", "self.to_logits(x)"), mistake="modern-post-norm")
edit("modern-upper-triangle-mask", MODEL, (MASK, ".triu(diagonal=past)"), mistake="modern-reads-future")
edit("modern-cache-in-half-precision", MODEL,
     ("new_cache.append(keys_values)", "new_cache.append(tuple(t.half() for t in keys_values))  # half the memory"),
     mistake="modern-cache-differs")
edit("modern-length-check-without-the-cache", MODEL, ("if past + t > self.cos.shape[0]:", "if t > self.cos.shape[0]:"),
     mistake="modern-cache-length-unchecked")
edit("modern-tables-of-model-size", MODEL,
     ("rotary_tables(max_len, k // heads, base)", "rotary_tables(max_len, k, base)"),
     mistake="modern-tables-head-size")
edit("modern-tables-saved", MODEL, (COS_BUFFER, 'self.register_buffer("cos", cos)'),
     (SIN_BUFFER, 'self.register_buffer("sin", sin)'), mistake="modern-tables-persistent")
edit("modern-tables-as-parameters", MODEL, (COS_BUFFER, "self.cos = nn.Parameter(cos, requires_grad=False)"),
     (SIN_BUFFER, "self.sin = nn.Parameter(sin, requires_grad=False)"), mistake="modern-tables-not-buffers")
edit("modern-no-length-check", MODEL, (LENGTH, ""), mistake="modern-no-length-check")
edit("modern-mask-on-the-cpu", MODEL, (", device=tokens.device).tril(diagonal=past)", ").tril(diagonal=past)"),
     mistake="mask-on-the-cpu")

edit("modern-comparison-mask-and-sequential", MODEL,
     ("mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)",
      "mask = torch.arange(past + t, device=tokens.device) <= torch.arange(past, past + t, device=tokens.device)"
      "[:, None]"))

#: one mistake per answer cell for the sample batch, none cancelling another
SAMPLE_MISTAKES = ("rms-eps-outside-the-root", "tables-positions-from-one", "rotary-turns-backwards", "swiglu-relu",
                   "gqa-repeat-tiles-heads", "modern-no-final-norm")
