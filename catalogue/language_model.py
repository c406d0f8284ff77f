"""Variants of the answers of assignment 08_language_model.

The mistakes the judges name by running them are written once, in course/judges/language_model.py, and taken here
with written(). The others (named by a structure, an error, a device; other ways of writing a written mistake) change
a line or two of the solved cell and are written as that change (`edit`): the answer cell `language_model` holds two
classes, LanguageModel and the CausalBlock below it, and an edit may change either; the cell `cached_language_model`
holds CachedLanguageModel, the subclass that adds the KV cache. The correct alternatives, and the few mistakes that
are other code, are written out.
"""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, split_heads, merge_heads,
# scaled_dot_product_attention, sample_next_token), as a student's cell does

import torch
import torch.nn.functional as F

from catalogue import alternative, edits, mistake, written
from course.judges.language_model import ATTENTION, BLOCK_OUT, CACHED_MASK, GROW_KEYS, GROW_VALUES, MASK, WRITTEN
from course.judges.language_model import TOP_P_BLOCK as TOP_P  # the same text in the solved cell

ASSIGNMENT = "08_language_model"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

LM = "language_model"
CACHED = "cached_language_model"
LOSS = "next_token_loss"
SAMPLE = "sample_next_token"
GENERATE = "generate"
GENERATE_CACHED = "generate_cached"

# the mistakes course/judges/language_model.py writes as code and names by running them (the models' and
# sample_next_token's); a variant of CausalBlock replaces only that class in the cell language_model
written(WRITTEN, cells={"CausalBlock": LM})

POSITIONS = "positions = torch.arange(t, device=tokens.device)  # (t,)"
BLOCKS = "self.blocks = nn.ModuleList(CausalBlock(k, heads) for _ in range(depth))"
RETURNS = "return (logits, new_cache) if use_cache else logits"
ATTENDED = "x = x + attention.unify_heads(merge_heads(out))"
ATTEND = "        out, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, h, t, s)\n"
DIVIDE = "    logits = logits / temperature\n"
PROBS = "probs = F.softmax(logits, dim=-1)"
GREEDY = "return logits.argmax(dim=-1)  # (b,)"
SINUSOIDS = '''class Sinusoids(nn.Module):
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


class CausalBlock(nn.Module):'''


# ------------------------------------------------------------------ language_model: mistakes in the model

edit("lm-upper-triangle-mask", LM, (MASK, MASK.replace("tril", "triu")), mistake="lm-reads-future")
edit("lm-positions-sized-by-vocabulary", LM, ("nn.Embedding(max_len, k)", "nn.Embedding(vocab_size, k)"),
     mistake="wrong-size")
edit("lm-twelve-layers-as-gpt2", LM, (BLOCKS, BLOCKS.replace("range(depth)", "range(12)")), mistake="wrong-depth")
edit("lm-blocks-in-a-list", LM, (BLOCKS, "self.blocks = [CausalBlock(k, heads) for _ in range(depth)]"),
     mistake="blocks-not-registered")
edit("lm-one-block-reused", LM, (BLOCKS, "self.blocks = nn.ModuleList([CausalBlock(k, heads)] * depth)"),
     mistake="shared-block")
edit("lm-sinusoidal-positions", LM, ("self.position_embedding = nn.Embedding(max_len, k)",
                                     "self.position_embedding = Sinusoids(max_len, k)"),
     ("class CausalBlock(nn.Module):", SINUSOIDS), mistake="positions-not-learned")
edit("lm-positions-on-the-cpu", LM, (POSITIONS, "positions = torch.arange(t)  # (t,)"), mistake="positions-on-the-cpu")
edit("lm-mask-on-the-cpu", LM, (MASK, MASK.replace(", device=tokens.device", "")), mistake="mask-on-the-cpu")

# ------------------------------------------------------------------ language_model: mistakes in the block

edit("lm-one-norm-per-block", LM, ("self.norm2 = nn.LayerNorm(k)", "self.norm2 = self.norm1"), mistake="shared-norm")
edit("lm-block-drops-the-mask", LM, (ATTENTION, "x = x + self.attention(self.norm1(x))  # the mask is built above"),
     mistake="lm-no-causal-mask")


# ------------------------------------------------------------------ language_model: correct alternatives

edit("lm-attention-from-its-parts", LM,
     (ATTENTION, "a, h = self.attention, self.norm1(x)\n"
                 "        q, keys, values = (split_heads(f(h), a.heads)\n"
                 "                           for f in (a.to_queries, a.to_keys, a.to_values))\n"
                 "        x = x + a.unify_heads(merge_heads(F.scaled_dot_product_attention(q, keys, values, "
                 "attn_mask=mask)))"))
edit("lm-sequential-blocks-and-a-weight-slice", LM,
     (BLOCKS, "self.blocks = nn.Sequential(*[CausalBlock(k, heads) for _ in range(depth)])"),
     (POSITIONS, "positions = slice(0, t)"),
     ("self.position_embedding(positions)", "self.position_embedding.weight[positions]"),
     (MASK, "mask = torch.tril(torch.ones(t, t, device=tokens.device)).bool()"))


# ------------------------------------------------------------------ cached_language_model: mistakes

edit("lm-mask-ignores-cache", CACHED, (CACHED_MASK, CACHED_MASK.replace("past + t", "t").replace("diagonal=past", "")),
     mistake="cache-mask-shape")
edit("lm-cache-never-returned", CACHED, (RETURNS, "return logits"), mistake="cache-not-returned")
edit("lm-always-returns-cache", CACHED, (RETURNS, "return logits, new_cache"), mistake="lm-returns-tuple")
edit("lm-cache-grows-heads", CACHED, (GROW_KEYS, GROW_KEYS.replace("dim=2", "dim=1")),
     (GROW_VALUES, GROW_VALUES.replace("dim=2", "dim=1")), mistake="cache-wrong-axis")
edit("lm-cache-grows-features", CACHED, (GROW_KEYS, GROW_KEYS.replace("dim=2", "dim=-1")),
     (GROW_VALUES, GROW_VALUES.replace("dim=2", "dim=-1")), mistake="cache-wrong-axis")
edit("lm-cache-before-heads-split", CACHED, ("cache[0][0].shape[2]", "cache[0][0].shape[1]"),
     ("keys = split_heads(attention.to_keys(h), attention.heads)  # (b, h, t, s)", "keys = attention.to_keys(h)"),
     ("values = split_heads(attention.to_values(h), attention.heads)  # (b, h, t, s)",
      "values = attention.to_values(h)  # (b, t, k): the heads are split when attending"),
     (f"{GROW_KEYS}  # (b, h, t_past + t, s): time is dim 2", "keys = torch.cat([past[0], keys], dim=1)  # (b, t, k)"),
     (GROW_VALUES, GROW_VALUES.replace("dim=2", "dim=1")),
     ("scaled_dot_product_attention(queries, keys, values, mask)",
      "scaled_dot_product_attention(\n            queries, split_heads(keys, attention.heads), "
      "split_heads(values, attention.heads), mask)"), mistake="cache-shape")
edit("lm-cache-in-half-precision", CACHED, (GROW_KEYS, "keys = torch.cat([past[0].float(), keys], dim=2)"),
     (GROW_VALUES, "values = torch.cat([past[1].float(), values], dim=2)"),
     (BLOCK_OUT, "return x + block.ff(block.norm2(x)), (keys.half(), values.half())  # half the memory"),
     mistake="cache-differs")
edit("cached-no-final-norm", CACHED, ("self.to_logits(self.norm(x))", "self.to_logits(x)"), mistake="lm-no-final-norm")
edit("cached-block-without-residual", CACHED, (ATTENDED, "x = attention.unify_heads(merge_heads(out))"),
     (BLOCK_OUT, "return block.ff(block.norm2(x)), (keys, values)"), mistake="lm-no-residual")
edit("cached-positions-on-the-cpu", CACHED, ("torch.arange(past, past + t, device=tokens.device)",
                                           "torch.arange(past, past + t)"), mistake="positions-on-the-cpu")
edit("cached-mask-on-the-cpu", CACHED, (CACHED_MASK, CACHED_MASK.replace(", device=tokens.device", "")),
     mistake="mask-on-the-cpu")


# ------------------------------------------------------------------ cached_language_model: correct alternatives

edit("cached-pytorch-attention", CACHED,
     (ATTEND, "        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)  # (b, h, t, s)\n"))
edit("cached-comparison-mask-and-tuples", CACHED,
     (CACHED_MASK, "mask = torch.arange(past + t, device=tokens.device) <= positions[:, None]  # (t, past + t)"),
     ("past = 0 if cache is None else cache[0][0].shape[2]", "past = cache[0][0].size(-2) if cache else 0"),
     ("new_cache.append(keys_values)", "new_cache.append(tuple(keys_values))"),
     ("if past is not None:\n", "if past:\n"))


# ------------------------------------------------------------------ next_token_loss: mistakes

# the others are written in course/judges/language_model.py (written(WRITTEN) above); below, those every check names

@mistake("raised", LOSS)
def loss_classes_last(logits, tokens):
    return F.cross_entropy(logits[:, :-1], tokens[:, 1:])


@mistake("detached", LOSS)
def loss_detached(logits, tokens):
    with torch.no_grad():
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


# ------------------------------------------------------------------ next_token_loss: correct alternatives

@alternative(LOSS)
def loss_classes_in_dim_1(logits, tokens):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


@alternative(LOSS)
def loss_log_softmax_gather(logits, tokens):
    log_probs = F.log_softmax(logits[:, :-1], dim=-1)
    return -log_probs.gather(2, tokens[:, 1:, None]).mean()


@alternative(LOSS)
def loss_nll_of_log_softmax(logits, tokens):
    b, t, v = logits.shape
    return F.nll_loss(logits.log_softmax(-1)[:, : t - 1].flatten(0, 1), tokens[:, 1:].flatten())


# ------------------------------------------------------------------ sample_next_token: mistakes

# the others are written in course/judges/language_model.py (written(WRITTEN) above); below, other ways of writing
# its mistakes, and those it names by a structure (an error, a dtype, a device) and those every check names
edit("sample-global-generator", SAMPLE, (", generator=generator)", ")"), mistake="sampling-global-rng")
edit("sample-softmax-then-divide", SAMPLE, (DIVIDE, ""), (PROBS, f"{PROBS} / temperature"),
     mistake="softmax-before-temperature")
edit("sample-no-greedy-case", SAMPLE, ("    if temperature == 0:\n        " + GREEDY + "\n", ""),
     mistake="greedy-divides-by-zero")
edit("sample-top-k-on-probabilities", SAMPLE, ("    " + PROBS + "  # (b, V)\n", ""),
     (DIVIDE, DIVIDE + "    " + PROBS + "  # (b, V)\n"), ("kth = logits.topk", "kth = probs.topk"),
     ("logits = logits.masked_fill(logits < kth", "probs = probs.masked_fill(probs < kth"), mistake="no-distribution")
edit("sample-greedy-max-values", SAMPLE, (GREEDY, "return logits.max(dim=-1)[0]"), mistake="generate-not-ids")
edit("sample-keeps-last-dim", SAMPLE, (GREEDY, "return logits.argmax(dim=-1, keepdim=True)"),
     (".squeeze(1)  # (b,)", "  # (b, 1)"), mistake="wrong-shape")
edit("sample-top-p-before-temperature", SAMPLE, (TOP_P, ""),
     (DIVIDE, """    if top_p is not None:  # the nucleus first, from the model's own probabilities
        ranked, order = F.softmax(logits, dim=-1).sort(dim=-1, descending=True)
        before = ranked.cumsum(dim=-1) - ranked
        keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, before < top_p)
        logits = logits.masked_fill(~keep, float("-inf"))
""" + DIVIDE), mistake="top-p-before-temperature")
edit("sample-nucleus-on-the-cpu", SAMPLE, ("torch.zeros_like(probs, dtype=torch.bool)",
                                         "torch.zeros(probs.shape, dtype=torch.bool)"), mistake="nucleus-on-the-cpu")


# ------------------------------------------------------------------ sample_next_token: correct alternatives

@alternative(SAMPLE)
def sample_among_top_k(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    if top_k is None:
        top_k = logits.shape[-1]
    values, indices = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1)  # sorted: most likely first
    probs = torch.softmax(values / temperature, dim=-1)
    if top_p is not None:
        outside = torch.cumsum(probs, dim=-1) - probs >= top_p
        probs = probs.masked_fill(outside, 0.0)
    choice = torch.multinomial(probs, 1, generator=generator)  # multinomial normalizes the weights itself
    return indices.gather(-1, choice).squeeze(-1)


@alternative(SAMPLE)
def sample_scatter_mask(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature <= 0:
        return torch.argmax(logits, dim=1)
    scaled = logits / temperature
    if top_k:
        keep = torch.zeros_like(scaled, dtype=torch.bool)
        keep.scatter_(1, scaled.topk(top_k, dim=1).indices, True)
        scaled = torch.where(keep, scaled, torch.tensor(float("-inf"), device=scaled.device))
    if top_p is not None:  # as Hugging Face's TopPLogitsWarper: least likely first, drop the tail below 1 - top_p
        ascending, order = torch.sort(scaled, descending=False)
        tail = ascending.softmax(dim=-1).cumsum(dim=-1) <= 1 - top_p
        tail[..., -1:] = False
        scaled = scaled.masked_fill(tail.scatter(1, order, tail), float("-inf"))
    probs = scaled.softmax(dim=1)
    return probs.multinomial(num_samples=1, generator=generator).view(-1)


@alternative(SAMPLE)
def sample_zero_and_renormalize(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < probs.shape[-1]:
        smallest_kept = probs.topk(top_k, dim=-1).values[:, [-1]]
        probs = torch.where(probs >= smallest_kept, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if top_p:
        sorted_probs, sorted_index = torch.sort(probs, dim=-1, descending=True)
        drop = torch.cumsum(sorted_probs, dim=-1) > top_p
        drop[:, 1:] = drop[:, :-1].clone()  # shifted: the token that crosses top_p stays
        drop[:, 0] = False
        probs = probs.scatter(1, sorted_index, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


# ------------------------------------------------------------------ generate: mistakes

RUN_BLOCK_CALL = ("            x, keys_values = self.run_block(block, x, mask, None if cache is None else cache[i])\n"
                  "            new_cache.append(keys_values)\n")
RUN_BLOCK_BODY = ("        attention, h = block.attention, block.norm1(x)\n"
                  "        queries = split_heads(attention.to_queries(h), attention.heads)  # (b, h, t, s)\n"
                  "        keys = split_heads(attention.to_keys(h), attention.heads)  # (b, h, t, s)\n"
                  "        values = split_heads(attention.to_values(h), attention.heads)  # (b, h, t, s)\n"
                  "        if past is not None:\n"
                  "            keys = torch.cat([past[0], keys], dim=2)  # (b, h, t_past + t, s): time is dim 2\n"
                  "            values = torch.cat([past[1], values], dim=2)\n"
                  "        out, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, h, t, s)\n"
                  "        x = x + attention.unify_heads(merge_heads(out))  # (b, t, k)\n"
                  "        return x + block.ff(block.norm2(x)), (keys, values)\n")
edit("cached-blocks-written-in-forward", CACHED,
     (RUN_BLOCK_CALL, "".join("    " + line + "\n" for line in RUN_BLOCK_BODY.replace(
         "past[", "cache[i][").replace("past is not None", "cache is not None").splitlines()[:-1])
      + "            x = x + block.ff(block.norm2(x))\n            new_cache.append((keys, values))\n"),
     (RUN_BLOCK_BODY, "        raise NotImplementedError()\n"), mistake="cached-run-block-missing")

# the others are written in course/judges/language_model.py (written(WRITTEN) above); below, those it names from
# the model's calls and from autograd
edit("generate-with-autograd-on", GENERATE, ("    with torch.no_grad():\n        tokens = prompt\n",
                                           "    if True:  # no torch.no_grad(): the tokens are the same\n"
                                           "        tokens = prompt\n"), mistake="generate-autograd-on")


@mistake("generate-cache-when-not-asked", GENERATE)
def generate_always_caches(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    tokens = prompt
    step_input, cache = prompt, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, cache = model(step_input, cache=cache, use_cache=True)  # a cache is faster: always use it
            step_input = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)[:, None]
            tokens = torch.cat([tokens, step_input], dim=1)
    return tokens


# ------------------------------------------------------------------ generate: correct alternatives

@alternative(GENERATE)
def generate_preallocated(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    b, t0 = prompt.shape
    out = torch.empty(b, t0 + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :t0] = prompt
    with torch.no_grad():
        for n in range(t0, t0 + max_new_tokens):
            last = model(out[:, :n])[:, -1]
            out[:, n] = sample_next_token(last, temperature=temperature, top_k=top_k, top_p=top_p,
                                          generator=generator)
    return out


@alternative(GENERATE)
def generate_in_inference_mode(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                               generator=None):
    tokens = prompt
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            drawn = sample_next_token(model(tokens)[:, -1, :], temperature, top_k, top_p, generator)
            tokens = torch.cat((tokens, drawn.unsqueeze(-1)), dim=-1)
    return tokens


# ------------------------------------------------------------------ generate_cached: mistakes

edit("generate-cached-with-autograd-on", GENERATE_CACHED,
     ("    with torch.no_grad():\n        tokens, cache = prompt, None\n",
      "    if True:  # no torch.no_grad(): the tokens are the same\n        tokens, cache = prompt, None\n"),
     mistake="generate-autograd-on")


@mistake("generate-cache-unused", GENERATE_CACHED)
def generate_never_caches(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None, generator=None):
    with torch.no_grad():
        tokens = prompt
        for _ in range(max_new_tokens):
            logits = model(tokens)
            nxt = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return tokens


# ------------------------------------------------------------------ generate_cached: correct alternatives

@alternative(GENERATE_CACHED)
def generate_cached_preallocated(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                                 generator=None):
    b, t0 = prompt.shape
    out = torch.empty(b, t0 + max_new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :t0] = prompt
    cache = None
    with torch.no_grad():
        for n in range(t0, t0 + max_new_tokens):
            if cache is None:
                logits, cache = model(out[:, :n], use_cache=True)
            else:
                logits, cache = model(out[:, n - 1:n], cache, True)
            out[:, n] = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
    return out


@alternative(GENERATE_CACHED)
def generate_cached_feeds_what_it_drew(model, prompt, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                                       generator=None):
    tokens = prompt
    step_input, cache = prompt, None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, cache = model(step_input, cache=cache, use_cache=True)
            step_input = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator).unsqueeze(-1)
            tokens = torch.cat((tokens, step_input), dim=-1)
    return tokens


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("lm-no-final-norm", "lm-positions-restart", "loss-not-shifted", "sample-top-k-over-batch",
                   "generate-drops-prompt", "generate-stale-cache")
