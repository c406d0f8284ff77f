"""Judges for assignment 08 (probes in course/checks/language_model.py): the model, with and without its KV cache,
against its blocks written from PyTorch's pieces (tests/ prove them nn.TransformerEncoderLayer's), their mistakes run as
edits of the reference answers (course/judges/variants.py); sampling against torch.multinomial with the probe's
generator; generation step by step on the stand-in models; then one declaration per check."""

import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache, partial

import torch
import torch.nn.functional as F

from course.checks import compare, modules, seeds
from course.checks import language_model as probes
from course.checks.compare import Mistake, OnGpus, expect_equal, expect_on_gpus, fail, generator, output
from course.checks.evidence import Evidence, fact_key, item_key
from course.checks.language_model import CACHED_NAME, GLOBAL_SEED, MODEL_NAME, Generation, ModelCase, SamplingCase
from course.checks.seeds import salted
from course.judges.kinds import each_case
from course.judges.models import (
    ModelMistakes,
    ModelOracle,
    expect_blocks,
    expect_model,
    expect_model_gradients,
    expect_model_steps,
    variant,
)
from course.judges.oracles import dense, layer_norm
from course.judges.token_loss import LossOracle, against_loss
from course.judges.variants import Variants, Written
from course.seeding import manual_seed

# ---------------------------------------------------------------- mistakes

WRITTEN = Variants(__name__, reference="course.language_model")  # as the code a student writes (variants.py)
edit = WRITTEN.edit


# ---------------------------------------------------------------- LanguageModel: structure
# Named by what the probe recorded of the model's parts: catalogue/language_model.py writes these mistakes.

WRONG_SIZE = WRITTEN.mistake("wrong-size", says="a part has the wrong size for the sizes the model was given.")
BLOCKS_NOT_REGISTERED = WRITTEN.mistake("blocks-not-registered", says="the blocks are kept in a Python list or "
                                        "tuple, which does not register them: use nn.ModuleList.")
POSITIONS_NOT_LEARNED = WRITTEN.mistake(
    "positions-not-learned", says="the positions are not learned: position_embedding is nn.Embedding(max_len, k).")
SHARED_BLOCK = WRITTEN.mistake("shared-block", says="one block is used for several layers: create a new block for "
                                                   "every layer.")
SHARED_NORM = WRITTEN.mistake(
    "shared-norm", says="a block's norm1 and norm2 are one module: each sublayer needs its own LayerNorm(k).")
WRONG_DEPTH = WRITTEN.mistake("wrong-depth", says="the model does not hold `depth` blocks.")


def _lm_weights(ev: Evidence, run: probes.ModelRun) -> dict[str, torch.Tensor]:
    """The weights loaded into the run's model, which must have the notebook's parts, their sizes, and no others."""
    __tracebackhide__ = True
    key, case = run.model, run.case
    vocab, k, depth = case.vocab, case.k, case.depth
    modules.built(ev, key, case.call)
    parts = compare.recorded(ev, fact_key(key, "parts"), f"the parts of {MODEL_NAME}")
    position = parts.get("position_embedding") if isinstance(parts, dict) else None
    if isinstance(position, dict) and position.get("kind") not in ("Embedding", "missing"):
        fail(f"{MODEL_NAME}.position_embedding is a {str(position.get('kind'))[:60]}: "
             f"{POSITIONS_NOT_LEARNED.explanation}", mistake=POSITIONS_NOT_LEARNED)
    for name, size in (("token_embedding", "vocab_size"), ("position_embedding", "max_len")):
        modules.expect_part(ev, key, MODEL_NAME, name, "Embedding", f"nn.Embedding({size}, k)")
    blocks = expect_blocks(ev, key, MODEL_NAME, depth, probes.BLOCK_PARTS,
                           (BLOCKS_NOT_REGISTERED, WRONG_DEPTH, SHARED_BLOCK))
    for i, block in enumerate(blocks):
        if block["norm2"].get("same_as") == "norm1":
            fail(f"{MODEL_NAME}.blocks[{i}].norm2 is its norm1: {SHARED_NORM.explanation}", mistake=SHARED_NORM)
        if block["attention"].get("heads") != case.heads:
            fail(f"{MODEL_NAME}.blocks[{i}].attention has {str(block['attention'].get('heads'))[:20]} heads: it "
                 f"should be MultiHeadAttention(k, heads), heads={case.heads}.", mistake=WRONG_SIZE)
    modules.expect_part(ev, key, MODEL_NAME, "norm", "LayerNorm", "nn.LayerNorm(k), the final norm")
    modules.expect_part(ev, key, MODEL_NAME, "to_logits", "Linear", "nn.Linear(k, vocab_size)")
    per_block = {n: s for i in range(depth) for n, s in modules.block_shapes(f"blocks.{i}.", k, 4 * k).items()}
    shapes = {"token_embedding.weight": (vocab, k), "position_embedding.weight": (case.max_len, k), **per_block,
              "norm.weight": (k,), "norm.bias": (k,), "to_logits.weight": (vocab, k), "to_logits.bias": (vocab,)}
    w = modules.expect_parameters(ev, key, case.call, shapes, run.seed, hint=modules.PARTS_HINT, resized=WRONG_SIZE)
    modules.expect_parameter_count(ev, key, case.call, sum(v.numel() for v in w.values()),
                                   f"the embeddings, {depth} blocks, the final norm and the output layer",
                                   "Is an extra layer registered?")
    return w


# ---------------------------------------------------------------- LanguageModel: oracle and mistakes
# Edits change the reference LanguageModel and CausalBlock of course/language_model.py (both in the cell
# language_model); a variant runs with the check's weights (_lm_variant), the reference LanguageModel calling a
# CausalBlock variant. A model that reads the future or returns a tuple is named by what the probe recorded.

MASK = "mask = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()"
LOGITS = "self.to_logits(self.norm(x))"
ATTENTION = "x = x + self.attention(self.norm1(x), mask=mask)  # (b, t, k)"
FEED_FORWARD = "return x + self.ff(self.norm2(x))"

edit("lm-no-mask", MODEL_NAME, (MASK, MASK.replace(".tril()", "")), mistake="lm-no-causal-mask",
     says="nothing is masked: every position reads the tokens after it, so in training the model sees the answer. "
          "Mask with the causal mask, True where key j <= query i.")
edit("lm-inverted-mask", MODEL_NAME, (MASK, MASK.replace("= torch.ones", "= ~torch.ones")),
     mistake="lm-inverted-causal-mask",
     says="the causal mask is inverted: it allows the future (j > i) and hides the past. True must mark the keys a "
          "query MAY read: j <= i.")
edit("lm-post-norm", "CausalBlock", (ATTENTION, "x = self.norm1(x + self.attention(x, mask=mask))"),
     (FEED_FORWARD, "return self.norm2(x + self.ff(x))"), mistake="lm-post-norm",
     says="the blocks are post-norm, x = norm(x + sublayer(x)), as in assignment 05; this model is pre-norm: x = x + "
          "sublayer(norm(x)), with the final norm after the last block.")
edit("lm-no-final-norm", MODEL_NAME, (LOGITS, "self.to_logits(x)"), mistake="lm-no-final-norm",
     says="the final LayerNorm is missing: in a pre-norm model nothing normalizes the last block's output, so apply "
          "self.norm before to_logits.")
edit("lm-no-positions", MODEL_NAME, (" + self.position_embedding(positions)", ""), mistake="lm-no-positions",
     says="no positions are added: the model cannot tell 'the cat sees a dog' from 'a dog sees the cat' by anything "
          "but the mask. Add position_embedding(positions).")
edit("lm-softmax", MODEL_NAME, (LOGITS, LOGITS + ".softmax(dim=-1)"), mistake="lm-softmax",
     says="forward returns probabilities (a softmax of the logits). Return the raw logits: the loss applies "
          "log-softmax itself, and sampling divides the logits by the temperature first.")
edit("lm-no-residual", "CausalBlock", (ATTENTION, "x = self.attention(self.norm1(x), mask=mask)"),
     (FEED_FORWARD, "return self.ff(self.norm2(x))"), mistake="lm-no-residual",
     says="the residual connections are missing: each sublayer's output is added to its input, x = x + "
          "attention(norm1(x)), then x = x + ff(norm2(x)).")
edit("lm-scaled-embeddings", MODEL_NAME,
     ("self.token_embedding(tokens) + ",
      "self.token_embedding(tokens) * math.sqrt(self.token_embedding.embedding_dim) + "),
     mistake="lm-scaled-embeddings",
     says="the token embeddings are multiplied by √k; here the learned positions are added to the plain embeddings.")
READS_FUTURE = WRITTEN.mistake("lm-reads-future", says="the model reads the future: changing a later token changes "
                                                      "the logits at earlier positions.")
RETURNS_TUPLE = WRITTEN.mistake("lm-returns-tuple",
                                says="without use_cache=True forward returns a tuple, not the logits alone.")
POSITIONS_ON_THE_CPU = WRITTEN.mistake(
    "positions-on-the-cpu",
    says="the positions are made on the CPU (torch.arange with no device=): make them where the tokens are, positions "
         "= torch.arange(t, device=tokens.device) (with a cache, torch.arange(past, past + t, device=tokens.device)). "
         "A CPU grader would pass it; on a GPU the position embedding refuses CPU indices.")
MASK_ON_THE_CPU = WRITTEN.mistake(
    "mask-on-the-cpu",
    says="the causal mask is made on the CPU (torch.ones with no device=): make it where the tokens are, torch.ones(t, "
         "t, dtype=torch.bool, device=tokens.device).tril() (with a cache, torch.ones(t, past + t, ..., "
         "device=tokens.device)). A CPU grader would pass it; on a GPU the attention refuses to mix it with the "
         "scores.")


def _lm_variant(mistake: str, *, model: str = "", block: str = "") -> tuple[Mistake, Callable]:
    """(the mistake, the compute of its model, as _lm's with the same weights, called without a cache): the
    LanguageModel the variant `model` writes calling the CausalBlock `block` writes ("": the reference's)."""
    return variant(WRITTEN, mistake, MODEL_NAME, model, (block, "CausalBlock") if block else None, cached=False)


#: model mistakes that change the logits of an uncached forward, in the order they are named: a post-norm block with
#: the final norm left out too, as the original post-norm transformer leaves it out, is named after the block
_LM_MISTAKES = (_lm_variant("lm-no-causal-mask", model="lm-no-mask"),
                _lm_variant("lm-inverted-causal-mask", model="lm-inverted-mask"),
                _lm_variant("lm-post-norm", model="lm-no-final-norm", block="lm-post-norm"),
                _lm_variant("lm-post-norm", block="lm-post-norm"),
                *(_lm_variant(m, model=m) for m in ("lm-no-final-norm", "lm-no-positions", "lm-softmax")),
                _lm_variant("lm-no-residual", block="lm-no-residual"),
                _lm_variant("lm-scaled-embeddings", model="lm-scaled-embeddings"))


def _block_step(w: Mapping[str, torch.Tensor], heads: int, x: torch.Tensor, mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None, prefix: str = "blocks.0."
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The block of the model with weights w under prefix on x (b, t, k) after the cached (keys, values) past (None:
    nothing cached), written out from PyTorch's pieces: (x, keys, values), the keys and values of all t_past + t
    positions."""
    h = layer_norm(w, f"{prefix}norm1", x)
    q, k, v = (dense(w, f"{prefix}attention.to_{name}", h).unflatten(-1, (heads, -1)).transpose(1, 2)
               for name in ("queries", "keys", "values"))  # (b, h, t, s) each
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (b, h, t_past + t, s)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, t, s)
    x = x + dense(w, f"{prefix}attention.unify_heads", out.transpose(1, 2).flatten(2))  # (b, t, k)
    ff = dense(w, f"{prefix}ff.net.2", F.relu(dense(w, f"{prefix}ff.net.0", layer_norm(w, f"{prefix}norm2", x))))
    return x + ff, k, v


def _lm(w: Mapping[str, torch.Tensor], case: ModelCase, tokens: torch.Tensor, cache: list | None = None
        ) -> tuple[torch.Tensor, list]:
    """(logits (b, t, vocab), cache) of the notebook's CachedLanguageModel with the weights w on tokens after cache
    (None: nothing cached), written out from PyTorch's pieces: positions continuing after the cache, each block
    _block_step under the causal mask shifted by it."""
    t, past = tokens.shape[1], 0 if cache is None else cache[0][0].shape[2]
    x = F.embedding(tokens, w["token_embedding.weight"]) + w["position_embedding.weight"][past : past + t]  # (b, t, k)
    mask = torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past)  # (t, past + t)
    kept = []
    for i in range(case.depth):
        x, keys, values = _block_step(w, case.heads, x, mask, None if cache is None else cache[i], f"blocks.{i}.")
        kept.append((keys, values))
    return dense(w, "to_logits", layer_norm(w, "norm", x)), kept


_LM_HINT = ("x = token_embedding(tokens) + position_embedding(positions); each block: x = x + attention(norm1(x)) "
            "with the causal mask, then x = x + ff(norm2(x)); finally to_logits(norm(x)).")
LM = ModelOracle(MODEL_NAME, _lm_weights, _lm, "PyTorch's layer norm and attention with the same weights", _LM_HINT,
                 "In training the model could read the token it must predict: give every block the causal mask, True "
                 "where key j <= query i.", ModelMistakes(_LM_MISTAKES, reads_future=READS_FUTURE,
                                                          returns_tuple=RETURNS_TUPLE))


# ---------------------------------------------------------------- CachedLanguageModel: oracle and mistakes
# Edits change the reference CachedLanguageModel of course/language_model.py (the cell cached_language_model); a
# variant runs step by step with the check's weights and its own cache (_lm_variant). A cache of another shape, an
# error, a pair not returned and a missing run_block are named by what the probe recorded.

CACHED_MASK = "mask = torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past)"
GROW_KEYS = "keys = torch.cat([past[0], keys], dim=2)"
GROW_VALUES = "values = torch.cat([past[1], values], dim=2)"
BLOCK_OUT = "return x + block.ff(block.norm2(x)), (keys, values)"
ATTEND = "        out, _ = scaled_dot_product_attention(queries, keys, values, mask)  # (b, h, t, s)\n"

edit("lm-positions-restart", CACHED_NAME, ("torch.arange(past, past + t, device", "torch.arange(t, device"),
     mistake="cache-positions-restart",
     says="the positions restart at 0 on every call: with a cache of t_past positions, the new tokens sit at "
          "positions t_past .. t_past + t - 1, so add position_embedding(torch.arange(t_past, t_past + t)).")
edit("lm-cache-stores-queries", CACHED_NAME,
     (BLOCK_OUT, "cached = queries if past is None else torch.cat([past[0], queries], dim=2)\n"
                 "        return x + block.ff(block.norm2(x)), (cached, values)"), mistake="cache-stores-queries",
     says="the cache holds the queries where the keys belong. A new token's query is used once, by that token; the "
          "keys and values are what every later token reads, so those are cached: (keys, values).")
edit("lm-mask-not-offset", CACHED_NAME, (CACHED_MASK, CACHED_MASK.replace("diagonal=past", "")),
     mistake="cache-mask-not-offset",
     says="the causal mask is not shifted by the cache: query i of the new tokens is position t_past + i, so it may "
          "read keys j <= t_past + i. With tril() and no offset, a single new token reads only the first position: "
          "use torch.ones(t, t_past + t).tril(diagonal=t_past).")
edit("lm-cache-not-read", CACHED_NAME, (ATTEND, ""),
     ("        if past is not None:\n",
      "        out, _ = scaled_dot_product_attention(queries, keys, values, mask[:, mask.shape[1] - mask.shape[0]:])\n"
      "        if past is not None:\n"), mistake="cache-not-read",
     says="the cached keys and values are not used: the new tokens attend only to each other. Concatenate the cached "
          "keys and values in front of the new ones before attending.")
edit("lm-cache-prepended", CACHED_NAME, (GROW_KEYS, "keys = torch.cat([keys, past[0]], dim=2)"),
     (GROW_VALUES, "values = torch.cat([values, past[1]], dim=2)"), mistake="cache-prepended",
     says="the new keys and values are put in front of the cached ones: position order is time order, so append them, "
          "torch.cat([past_keys, keys], dim=2).")
CACHE_NOT_RETURNED = WRITTEN.mistake("cache-not-returned",
                                     says="with use_cache=True forward does not return the pair (logits, cache).")
CACHE_SHAPE = WRITTEN.mistake(
    "cache-shape", says="the cache is not a list of one (keys, values) pair per block, each (b, heads, t, s) for all "
                        "positions so far.")
CACHE_WRONG_AXIS = WRITTEN.mistake(
    "cache-wrong-axis", says="the cache grows along the wrong axis: append the new positions along the time axis, "
                             "torch.cat([past_keys, keys], dim=2).")
CACHE_MASK_SHAPE = WRITTEN.mistake("cache-mask-shape",
                                   says="with a cache the mask is (t, t); it must be (t, t_past + t).")
CACHE_DIFFERS = WRITTEN.mistake(
    "cache-differs", says="a cached call does not give what the full forward gives, or the cache does not hold the "
                          "keys and values the attention computes.")
RUN_BLOCK_MISSING = WRITTEN.mistake(
    "cached-run-block-missing",
    says="the exercise asks for two methods: forward runs every block with self.run_block(block, x, mask, past), which "
         "returns (x, (keys, values)). Write the block there rather than inside forward.")


#: cache mistakes: they change only calls that are given a cache (or what the cache holds); each the
#: CachedLanguageModel its edit writes, run with the check's weights and its own cache
_CACHE_MISTAKES = tuple(variant(WRITTEN, mistake, CACHED_NAME, edited) for mistake, edited in (
    ("cache-positions-restart", "lm-positions-restart"), ("cache-stores-queries", "lm-cache-stores-queries"),
    ("cache-mask-not-offset", "lm-mask-not-offset"), ("cache-not-read", "lm-cache-not-read"),
    ("cache-prepended", "lm-cache-prepended")))



#: PyTorch's errors in a cached call with a cache of at least `after` positions, by a phrase of their message
_CACHE_ERRORS = (("Sizes of tensors must match except in dimension", 0, CACHE_WRONG_AXIS),
                 ("must match the size of tensor", 1, CACHE_MASK_SHAPE))
#: the cached model: the model's oracle and mistakes, and the cache's
CACHED = replace(LM, owner=CACHED_NAME, mistakes=replace(
    LM.mistakes, cached=_CACHE_MISTAKES, cache_differs=CACHE_DIFFERS, bad_cache=CACHE_SHAPE,
    not_returned=CACHE_NOT_RETURNED, errors=_CACHE_ERRORS))


def _expect_cached(ev: Evidence, run: probes.ModelRun) -> dict[str, torch.Tensor]:
    """The chunks fed with the cache give the logits of one call without it, and each block's keys and values; returns
    the weights."""
    __tracebackhide__ = True
    w, full, _ = expect_model(ev, run, CACHED, exact=True)
    expect_model_steps(ev, run, CACHED, w, full, run.case.heads)
    return w


_RUN_BLOCK_HINT = ("run_block(block, x, mask, past) returns (x, (keys, values)): h = block.norm1(x); queries, keys and "
                   "values split into block.attention.heads heads; keys and values appended to past along dim 2; "
                   "attention under the mask; x + unify_heads(merge_heads(out)); then x + block.ff(block.norm2(x)).")


def _expect_run_block(ev: Evidence, run: probes.ModelRun) -> None:
    """_expect_cached, then run_block on the model's first block (probes.RUN_BLOCK), which the exercise asks for by
    name: the block's output and the keys and values of all t_past + t positions, as _block_step computes them."""
    __tracebackhide__ = True
    w, case = _expect_cached(ev, run), run.case
    inputs = probes.run_block_inputs(case)
    x, mask, past = inputs["x"], inputs["mask"], inputs["past"]
    what = (f"{CACHED_NAME}.run_block(model.blocks[0], x {tuple(x.shape)}, mask {tuple(mask.shape)}, past=(keys, "
            f"values) of {past[0].shape[2]} positions)")
    fact = ev.facts.get("run_block")
    if isinstance(fact, dict) and fact.get("not_implemented"):
        fail(f"{what} is not implemented: {RUN_BLOCK_MISSING.explanation}", mistake=RUN_BLOCK_MISSING)
    compare.expect_tuple(ev, "run_block", what, f"{what} should return (x, (keys, values)). {_RUN_BLOCK_HINT}", 2)
    compare.expect_tuple(ev, "run_block.1", what, f"Its second value should be (keys, values). {_RUN_BLOCK_HINT}", 2)
    with torch.no_grad():
        want = _block_step(w, case.heads, x, mask, past)  # x (b, t, k); keys and values (b, heads, t_past + t, s)
    found = [output(ev, key, what=said, shape=tuple(expected.shape), hint=_RUN_BLOCK_HINT) for key, said, expected in
             zip((item_key("run_block", 0), *(item_key(item_key("run_block", 1), i) for i in (0, 1))),
                 (what, f"The keys {what} returns", f"The values {what} returns"), want, strict=True)]
    for got, expected, part in zip(found, want, ("output", "keys", "values"), strict=True):
        compare.expect_close(got, expected, what=f"The {part} of {what}", device=ev.device, otherwise=_RUN_BLOCK_HINT)


# ---------------------------------------------------------------- next_token_loss
# Edits change the reference answer of course/language_model.py:
#     predictions = logits[:, :-1].reshape(-1, vocab); labels = tokens[:, 1:].reshape(-1)
#     return F.cross_entropy(predictions, labels)
# Each is run on the case's logits and tokens (LossOracle's written); the first whose loss is the student's is named.

LOSS = "next_token_loss"
SHIFTED = "logits[:, :-1].reshape(-1, vocab)  # (b * (t - 1), V): positions 0 .. t - 2"
LABELS = "tokens[:, 1:].reshape(-1)  # (b * (t - 1),): tokens 1 .. t - 1"
CROSS_ENTROPY = "F.cross_entropy(predictions, labels)"
edit("loss-not-shifted", LOSS, (SHIFTED, "logits.reshape(-1, vocab)  # (b * t, V)"),
     (LABELS, "tokens.reshape(-1)  # (b * t,)"), mistake="loss-not-shifted",
     says="the loss is not shifted: the logits at position i are scored against token i, which the model has just "
          "read, so it learns to copy its input. Score logits[:, :-1] against tokens[:, 1:].")
edit("loss-wrong-shift", LOSS, (SHIFTED, "logits[:, 1:].reshape(-1, vocab)  # positions 1 .. t - 1"),
     (LABELS, "tokens[:, :-1].reshape(-1)  # tokens 0 .. t - 2"), mistake="loss-wrong-shift",
     says="the shift goes the wrong way: the logits at position i predict token i + 1, so score logits[:, :-1] "
          "against tokens[:, 1:], not logits[:, 1:] against tokens[:, :-1].")
edit("loss-sum", LOSS, (CROSS_ENTROPY, 'F.cross_entropy(predictions, labels, reduction="sum")'), mistake="loss-sum",
     says="the loss is a sum over all predicted tokens; the task asks for their mean.")
edit("loss-softmax-first", LOSS, ("logits[:, :-1].reshape", "logits[:, :-1].softmax(dim=-1).reshape"),
     mistake="loss-softmax",
     says="a softmax is applied before F.cross_entropy, which applies log-softmax itself: pass the raw logits.")
edit("loss-nll-on-logits", LOSS, (CROSS_ENTROPY, "F.nll_loss(predictions, labels)"), mistake="loss-nll-on-logits",
     says="F.nll_loss is applied to raw logits: it expects log-probabilities. Use F.cross_entropy on the logits (or "
          "F.nll_loss on F.log_softmax(logits, -1)).")
edit("loss-in-bits", LOSS, (CROSS_ENTROPY, f"{CROSS_ENTROPY} / math.log(2)"), mistake="loss-bits",
     says="the loss is in bits (divided by ln 2); train with nats, the natural log that F.cross_entropy uses. Convert "
          "to bits only when you report it.")
edit("loss-last-position", LOSS, (SHIFTED, "logits[:, -2]  # (b, V): position t - 2"),
     (LABELS, "tokens[:, -1]  # (b,): the last token"), mistake="loss-last-position",
     says="only the last position is scored; every position i < t - 1 predicts token i + 1, and all of them count.")
# the right loss where the logits are small: named from a loss that is not finite (token_loss.expect_loss_case)
edit("loss-softmax-then-log", LOSS,
     (CROSS_ENTROPY, "-predictions.softmax(dim=-1).gather(-1, labels[:, None]).log().mean()"), mistake="loss-unstable",
     says="the loss takes the log of a softmax, which underflows for large logits: use F.cross_entropy (or "
          "F.log_softmax).")

NEXT_TOKEN_LOSS = LossOracle(
    "next_token_loss(logits, tokens)", lambda logits, tokens: logits[:, :-1], "tokens",
    unstable=WRITTEN["loss-unstable"], written=partial(WRITTEN.outputs, LOSS),
    hint="loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1)): the logits at position i "
         "against token i + 1, the mean over all of them. F.cross_entropy wants the classes last of two dimensions, "
         "or in dimension 1.")


# ---------------------------------------------------------------- sample_next_token: mistakes
# Edits change the reference answer of course/language_model.py:
#     if temperature == 0: return logits.argmax(dim=-1)
#     logits = logits / temperature; all but the top_k of each row at -inf (logits < kth); probs = F.softmax(logits)
#     with top_p: ranked, order = probs.sort(descending=True); keep while before = ranked.cumsum - ranked < top_p
#     return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
# Each draws with a generator seeded as the case's (_sample_mistakes). When two give the student's tokens, the first
# declared is named. A draw from PyTorch's global generator is named by the oracle's own ways drawn from it.

SAMPLE = "sample_next_token"
DIVIDE = "    logits = logits / temperature\n"
PROBS = "probs = F.softmax(logits, dim=-1)  # (b, V)"
TOP_K = "    if top_k is not None and top_k < logits.shape[-1]:\n"
KTH = "kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest logit of each row"
TOP_K_BLOCK = TOP_K + "        " + KTH + "\n" + '        logits = logits.masked_fill(logits < kth, float("-inf"))\n'
RANKED = "ranked, order = probs.sort(dim=-1, descending=True)  # (b, V): most likely first"
BEFORE = "before = ranked.cumsum(dim=-1) - ranked  # (b, V): the probability of the tokens ranked before"
TOP_P_BLOCK = """    if top_p is not None:
        ranked, order = probs.sort(dim=-1, descending=True)  # (b, V): most likely first
        before = ranked.cumsum(dim=-1) - ranked  # (b, V): the probability of the tokens ranked before
        keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < top_p)  # (b, V)
        probs = probs * keep
        probs = probs / probs.sum(dim=-1, keepdim=True)
"""

GLOBAL_RNG = WRITTEN.mistake(
    "sampling-global-rng", "the draw comes from PyTorch's global random generator, not from the `generator` argument: "
    "pass it on, torch.multinomial(probs, 1, generator=generator), so the same generator gives the same tokens.")
edit("sample-temperature-on-probabilities", SAMPLE, (DIVIDE, ""),
     ("torch.multinomial(probs, num_samples", "torch.multinomial(probs / temperature, num_samples"),
     mistake="softmax-before-temperature",
     says="the temperature is applied after the softmax. Dividing probabilities by T and renormalizing changes "
          "nothing (and a second softmax gives another distribution): divide the LOGITS by T, then take the softmax.")
edit("sample-softmax-twice", SAMPLE, (DIVIDE, ""),
     (PROBS, "probs = F.softmax(F.softmax(logits, dim=-1) / temperature, dim=-1)"),
     mistake="softmax-before-temperature")
edit("sample-times-temperature", SAMPLE, ("logits = logits / temperature", "logits = logits * temperature"),
     mistake="temperature-multiplies",
     says="the logits are multiplied by the temperature; divide them by it, so that T < 1 sharpens and T > 1 flattens.")
edit("sample-ignores-top-p", SAMPLE, (TOP_P_BLOCK, ""), mistake="top-p-ignored",
     says="top_p is ignored: only the nucleus may be drawn, the most likely tokens whose probabilities first reach "
          "top_p together.")
edit("sample-top-p-includes-itself", SAMPLE, (BEFORE, "before = ranked.cumsum(dim=-1)  # (b, V): up to each token"),
     mistake="top-p-includes-itself",
     says="top-p keeps a token only when the probability up to AND including it is below top_p: that drops the token "
          "that crosses top_p (and every token of a row whose most likely token alone reaches it). Keep a token when "
          "the probability of the tokens ranked BEFORE it is below top_p: cumsum - probs < top_p.")
edit("sample-top-p-ascending", SAMPLE, (RANKED, "ranked, order = probs.sort(dim=-1)  # (b, V)"),
     mistake="top-p-ascending",
     says="the probabilities are sorted in ascending order, so top-p keeps the LEAST likely tokens: sort each row in "
          "descending order, most likely first.")
edit("sample-top-p-before-temperature-after-top-k", SAMPLE, (DIVIDE, ""),
     (PROBS, "probs = F.softmax(logits / temperature, dim=-1)  # (b, V)"),
     (RANKED, "ranked, order = F.softmax(logits, dim=-1).sort(dim=-1, descending=True)  # untempered"),
     mistake="top-p-before-temperature",
     says="the nucleus is chosen from the probabilities before the temperature (a softmax of the raw logits). Choose "
          "it from the distribution the draw uses: divide the logits by the temperature and keep the top_k first, then "
          "take the softmax and the nucleus.")
edit("sample-top-p-before-temperature-and-top-k", SAMPLE, (DIVIDE, "    raw = logits  # for the nucleus\n" + DIVIDE),
     (RANKED, "ranked, order = F.softmax(raw, dim=-1).sort(dim=-1, descending=True)  # the model's own"),
     mistake="top-p-before-temperature")
edit("sample-ignores-top-k", SAMPLE, (TOP_K_BLOCK, ""), mistake="top-k-ignored",
     says="top_k is ignored: only the k most likely tokens of each row may be drawn; set the other logits to -inf "
          "before the softmax.")
edit("sample-top-k-smallest", SAMPLE, (KTH, "kth = logits.topk(top_k, dim=-1, largest=False).values[:, -1:]"),
     ("logits < kth", "logits > kth"), mistake="top-k-smallest",
     says="top-k keeps the k LEAST likely tokens (largest=False): keep the k largest logits of each row.")
edit("sample-top-k-over-batch", SAMPLE, (TOP_K, "    if top_k is not None:\n"),
     (KTH, "kth = logits.topk(top_k, dim=0).values[-1]  # (V,): the k-th largest logit of each column"),
     mistake="top-k-wrong-dim",
     says="top-k is taken over the batch (dim 0), not over the vocabulary: each ROW keeps its own k largest logits, "
          "logits.topk(top_k, dim=-1).")
# last, so that it changes no diagnosis above
edit("sample-top-k-minus-one", SAMPLE, ("logits < kth", "logits <= kth"), mistake="top-k-too-few",
     says="fewer than top_k tokens of a row can be drawn: the k-th largest logit is masked too. Keep all k largest, "
          "the k-th included: set to -inf only the logits below it (logits < kth, not logits <= kth).")

TOP_K_WRONG_DIM = WRITTEN["top-k-wrong-dim"]
TOP_K_IGNORED, TOP_K_TOO_FEW, TOP_P_ITSELF = (WRITTEN[i] for i in ("top-k-ignored", "top-k-too-few",
                                                                  "top-p-includes-itself"))


def _refused(message: str) -> bool:
    """Whether an error's message is torch.multinomial refusing probabilities that are no distribution."""
    return "probability tensor contains" in message or "invalid multinomial" in message


def _sample_mistakes(spec: SamplingCase) -> list[tuple[Mistake, torch.Tensor | None]]:
    """(mistake, the tokens it draws on the case), in the order they are named: each right way of sampling (_ways)
    drawn from PyTorch's global generator (seeded GLOBAL_SEED, as the probe seeds it), then each written mistake
    called as the probe calls the student's: with a generator seeded as the case's. None where torch.multinomial
    refused a variant's probabilities; a variant that fails otherwise is left out."""
    drawn: list[tuple[Mistake, torch.Tensor | None]] = [(GLOBAL_RNG, way) for way in _draws(spec, GLOBAL_SEED)]
    for written in WRITTEN.of(SAMPLE):
        try:
            with torch.no_grad():
                drawn.append((written.mistake, written.run(spec.logits(), **probes.settings(spec))))
        except RuntimeError as error:
            if _refused(str(error)):
                drawn.append((written.mistake, None))
        except Exception:  # noqa: BLE001, S112 - a variant that cannot run on these inputs matches nothing
            continue
    return drawn


# ---------------------------------------------------------------- sample_next_token: the oracle

def _top_k_mask(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """logits (b, V) with all but the top_k of each row set to -inf."""
    if top_k is None or top_k >= logits.shape[-1]:
        return logits
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, logits.topk(top_k).indices, True)
    return logits.masked_fill(~keep, float("-inf"))


def _nucleus(probs: torch.Tensor, top_p: float | None) -> torch.Tensor:
    """probs (b, V) renormalized over each row's nucleus: a token ranked (descending) is kept while the probability
    ranked before it is below top_p. A row keeping nothing comes out NaN."""
    if top_p is None:
        return probs
    ranked, order = probs.sort(dim=-1, descending=True, stable=True)  # (b, V)
    kept = ranked.cumsum(dim=-1) - ranked < top_p
    kept = probs * torch.zeros_like(kept).scatter(-1, order, kept)
    return kept / kept.sum(dim=-1, keepdim=True)


def _draw(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator,
          how: str = "full", top_p: float | None = None, renormalize: str = "divide") -> torch.Tensor:
    """The oracle: torch.multinomial with this generator over softmax(logits / T) outside the top_k at -inf (how:
    "ties" keeps ties with the k-th largest, "subset" draws over the top_k logits alone), then over the nucleus of
    top_p renormalized by a division or a softmax again; argmax at T = 0. The ways differ only where logits tie."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    indices = None
    if how == "ties" and top_k is not None and top_k < logits.shape[-1]:
        scaled = logits / temperature
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]  # (b, 1): the k-th largest of each row
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    elif how == "subset":
        values, indices = logits.topk(min(top_k or logits.shape[-1], logits.shape[-1]), dim=-1)
        scaled = values / temperature
    else:
        scaled = _top_k_mask(logits, top_k) / temperature
    probs = F.softmax(scaled, dim=-1)
    if top_p is not None:
        nucleus = _nucleus(probs, top_p)
        probs = nucleus if renormalize == "divide" else F.softmax(scaled.masked_fill(nucleus == 0, float("-inf")), -1)
    choice = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (b,)
    return choice if indices is None else indices.gather(-1, choice.unsqueeze(-1)).squeeze(-1)


def _ways(top_p: float | None) -> list[tuple[str, str]]:
    """Every (how, renormalize) of a right sampler (see _draw)."""
    ways = ("divide",) if top_p is None else ("divide", "softmax")
    return [(how, way) for how in ("full", "subset", "ties") for way in ways]


def _draws(spec: SamplingCase, seed: int | None = None) -> list[torch.Tensor]:
    """The tokens (b,) each right sampler (_ways) draws on the case with its generator (or one seeded seed)."""
    return [tokens.clone() for tokens in _drawn_once(spec, seed, seeds.current())]


@lru_cache(maxsize=256)
def _drawn_once(spec: SamplingCase, seed: int | None, grading_seed: int | None) -> tuple[torch.Tensor, ...]:
    """_draws' tokens, drawn once per case, seed and grading seed (which salts the seeds of the logits and of the
    generator: a key, not read here): the oracle reads nothing of the student's, and replays judge the same cases
    again for every variant. _draws hands out copies."""
    logits, gen_seed = spec.logits(), spec.seed + 1 if seed is None else seed
    s = spec.sampling
    return tuple(_draw(logits, s.temperature, s.top_k, generator(gen_seed), how, s.top_p, way)
                 for how, way in _ways(s.top_p))


_SAMPLE_HINT = ("probs = softmax(logits / temperature), all but the top_k logits of each row at -inf; with top_p only "
                "the nucleus (sorted descending, a token kept while the probability ranked before it is below top_p), "
                "renormalized; then torch.multinomial(probs, 1, generator=generator).squeeze(1); at T = 0, argmax.")
_NOT_DRAWN = "does not give the tokens torch.multinomial draws with the given generator"


# named by a structure: an error, a dtype, where a mask was made
NO_DISTRIBUTION = WRITTEN.mistake(
    "no-distribution", "Some row had no token left to draw: all its probabilities were 0, NaN or infinite. Is top-k "
    "taken over the vocabulary of each row (dim=-1), so that every row keeps k tokens?")
GREEDY_DIVIDES = WRITTEN.mistake("greedy-divides-by-zero",
                                 "temperature 0 divides the logits by zero: treat it first, as the argmax.")
NOT_IDS = WRITTEN.mistake("generate-not-ids", "the tokens are not torch.long ids.")
NUCLEUS_ON_THE_CPU = WRITTEN.mistake(
    "nucleus-on-the-cpu", "a mask of the vocabulary is made on the CPU (torch.zeros(probs.shape, ...) with no "
    "device=): make it where the probabilities are, keep = torch.zeros_like(probs, dtype=torch.bool). A CPU grader "
    "would pass it; a GPU refuses to scatter the sorted order into a CPU tensor.")


def _no_distribution(ev: Evidence, key: str) -> str:
    """The error of the call under key when torch.multinomial refused its probabilities, else ""."""
    message = str(ev.facts[key].get("message"))[:200] if compare.value_kind(ev, key) == "raised" else ""
    return message if _refused(message) else ""


def _token_ids(ev: Evidence, key: str, what: str, hint: str = _SAMPLE_HINT, rows: int | None = None,
               refused: Mistake = NO_DISTRIBUTION) -> torch.Tensor:
    """The token ids (int64, as argmax and multinomial give them) returned under key; rows: a sampler's, one per row
    of the logits (b,), probabilities multinomial refused named as `refused`."""
    __tracebackhide__ = True
    if rows is not None and (message := _no_distribution(ev, key)):
        fail(f"{what} raised {message}. The likely cause: {refused.explanation}", mistake=refused)
    out = output(ev, key, what=what, dtype="any", hint=hint, device=False)
    if out.dtype != torch.long:
        fail(f"{what} returned dtype {out.dtype}: {NOT_IDS.explanation}", mistake=NOT_IDS)
    if rows is not None and tuple(out.shape) != (rows,):
        column = " One id per COLUMN? Take the argmax or the top-k over the vocabulary." if out.dim() == 1 else ""
        fail(f"{what} returned shape {tuple(out.shape)}; expected ({rows},), one token id per row.{column}",
             mistake=compare.WRONG_SHAPE)
    return out


def _expect_draws(ev: Evidence, spec: SamplingCase, cases: Sequence[SamplingCase] = ()) -> None:
    """The case's tokens are torch.multinomial's with its generator (argmax at temperature 0), whatever the global
    generator's state, which they leave alone; else the typical mistake is named (cases: the check's). Copies of
    one row: every draw within its top k, also on the notebook's device."""
    __tracebackhide__ = True
    if spec.copies:
        top_k = spec.sampling.top_k
        allowed, what = set(spec.logits()[0].topk(top_k).indices.tolist()), spec.call.replace("logits", "one row")
        for key in [spec.key] + (["on_device"] if ev.device != "cpu" else []):
            drawn = set(_token_ids(ev, key, what, rows=spec.b).tolist())
            for mistake, wrong in ((TOP_K_IGNORED, not drawn <= allowed), (TOP_K_TOO_FEW, len(drawn) < top_k)):
                if wrong:
                    fail(f"{what} drew the tokens {sorted(drawn)[:12]} from {spec.b} copies of a row whose top "
                         f"{top_k} are {sorted(allowed)}: {mistake.explanation}", mistake=mistake)
        expect_equal(_token_ids(ev, spec.key, what, rows=spec.b), _draws(spec), what=what, otherwise=_SAMPLE_HINT,
                     case=f"top_k={top_k}", differs=_NOT_DRAWN)
        return
    greedy, rng = spec.sampling.temperature == 0, GLOBAL_RNG
    drawn = [] if greedy else _sample_mistakes(spec)
    # where the call raised, a mistake that leaves a row with no token to draw is named (top-k over the batch first)
    emptied = [m for m in (TOP_K_WRONG_DIM, TOP_P_ITSELF)
               if not spec.global_seeds and any(mistake is m and tokens is None for mistake, tokens in drawn)]
    refused = [*emptied, GREEDY_DIVIDES if greedy else NO_DISTRIBUTION][0]
    keys = [f"{spec.key}{i}" for i in range(len(spec.global_seeds))] or [spec.key]
    outs = [_token_ids(ev, key, spec.call, rows=spec.b, refused=refused) for key in keys]
    if not torch.equal(outs[0], outs[-1]):
        fail(f"{spec.call} gave other tokens for the same generator after PyTorch's global generator was reseeded: "
             f"{rng.explanation}", compare.Rows(outs[0]), compare.Rows(outs[-1]), "two global seeds", rng)
    mistakes = [(mistake, tokens) for mistake, tokens in drawn if tokens is not None]
    # top-k over the batch keeps most of a few rows, so on such a case its draw may equal one that ignores top_k;
    # another case leaving a row empty tells the two apart
    if any(case.sampling.top_k is not None and _no_distribution(ev, case.key) for case in cases):
        mistakes.sort(key=lambda pair: pair[0] is not TOP_K_WRONG_DIM)  # stable: only it moves ahead
    expect_equal(outs[0], _draws(spec), what=spec.call, mistakes=mistakes, case=f"logits ({spec.b}, {spec.vocab})",
                 otherwise=_SAMPLE_HINT, differs=_NOT_DRAWN)
    if spec.global_seeds and ev.facts.get("global_state_changed") != [False] * len(keys):
        fail(f"{spec.call} changed the state of PyTorch's global generator: {rng.explanation}", mistake=rng)


# ---------------------------------------------------------------- generate: mistakes
# Edits change the reference answers of course/language_model.py:
#     generate: with torch.no_grad(): tokens = prompt; each step logits = model(tokens),
#               next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator), appended
#     generate_cached: the same, the prompt fed once with use_cache=True, then tokens[:, -1:] with the cache returned
# Each is called as the probe calls the student's (_generated), once per right way of sampling (_ways).

GENERATE, GENERATE_CACHED = "generate", "generate_cached"
SAMPLED = "sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)"
DROPPED = ("    return tokens", "    return tokens[:, prompt.shape[1]:]")
STEP = "logits, cache = model(step_input, cache=cache, use_cache=True)"
STEP_INPUT = "step_input = tokens if cache is None else tokens[:, -1:]  # (b, t0), then (b, 1)\n"
edit("generate-drops-prompt", GENERATE, DROPPED, mistake="generate-drops-prompt",
     says="the prompt is missing from the output: return the prompt followed by the new tokens, (b, t0 + "
          "max_new_tokens).")
edit("generate-first-position", GENERATE, (SAMPLED, SAMPLED.replace("logits[:, -1]", "logits[:, 0]")),
     mistake="generate-first-position",
     says="the next token is drawn from the logits of the FIRST position; the prediction for the next token is at the "
          "LAST: logits[:, -1].")
edit("generate-forgets-generator", GENERATE, (SAMPLED, SAMPLED.replace(", generator)", ")")),
     mistake="generate-forgets-generator",
     says="the generator is not passed on to sample_next_token, which then draws from the global generator: pass "
          "generator=generator.")
edit("generate-ignores-settings", GENERATE, (SAMPLED, "sample_next_token(logits[:, -1], generator=generator)"),
     mistake="generate-ignores-settings",
     says="temperature, top_k and top_p are not passed on to sample_next_token: every step must draw with the "
          "settings it was given.")
edit("generate-cached-drops-prompt", GENERATE_CACHED, DROPPED, mistake="generate-drops-prompt")
# the prompt's first position, then the one token fed: not what generate's mistake draws
edit("generate-cached-first-position", GENERATE_CACHED, (SAMPLED, SAMPLED.replace("logits[:, -1]", "logits[:, 0]")),
     mistake="generate-first-position")
edit("generate-cached-forgets-generator", GENERATE_CACHED, (SAMPLED, SAMPLED.replace(", generator)", ")")),
     mistake="generate-forgets-generator")
edit("generate-cached-ignores-settings", GENERATE_CACHED,
     (SAMPLED, "sample_next_token(logits[:, -1], generator=generator)"), mistake="generate-ignores-settings")
edit("generate-refeeds-everything", GENERATE_CACHED, (STEP_INPUT, "step_input = tokens\n"),
     mistake="generate-cache-refeeds",
     says="with the cache, the whole sequence is fed again at every step: the cache already holds the keys and values "
          "of everything but the last token, so feed only tokens[:, -1:] with it.")
edit("generate-cache-not-passed", GENERATE_CACHED, ("for _ in range", "for step in range"),
     (STEP_INPUT + "            " + STEP, "logits = model(tokens if step == 0 else tokens[:, -1:])  # no cache"),
     mistake="generate-cache-not-passed",
     says="only the last token is fed, but without the cache: the model then sees one token at position 0. Pass the "
          "cache from the step before, and keep the one it returns.")
edit("generate-stale-cache", GENERATE_CACHED,
     (STEP, "logits, new_cache = model(step_input, cache=cache, use_cache=True)\n"
            "            if cache is None:\n"
            "                cache = new_cache  # the prompt's, kept for every step"),
     mistake="generate-stale-cache",
     says="the cache is never updated: every step passes the cache of the prompt, so the tokens sampled since are "
          "forgotten. Keep the cache the model returns at each step.")
# named from the model's calls and from autograd (catalogue/language_model.py makes each)
CACHE_WHEN_NOT_ASKED = WRITTEN.mistake(
    "generate-cache-when-not-asked", "generate passes a cache to the model: it works with the LanguageModel of "
    "exercise 1, which takes none, so every step runs the whole sequence so far (the cache is generate_cached's).")
CACHE_UNUSED = WRITTEN.mistake(
    "generate-cache-unused", "generate_cached does not call the model as a cache asks: the prompt once with "
    "use_cache=True, then only the last token with the cache.")
WITH_AUTOGRAD = WRITTEN.mistake(
    "generate-autograd-on", "work inside torch.no_grad(), as the exercise asks: with autograd on, every call of a "
    "model with trainable weights builds a graph that nothing will ever backpropagate through, at the cost of memory "
    "and time.")


def _sampler(how: str, renormalize: str) -> Callable[..., torch.Tensor]:
    """A right sample_next_token that draws as _draw's way (how, renormalize) does."""

    def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        return _draw(logits, temperature, top_k, generator, how, top_p, renormalize)

    return sample_next_token


def _generated(spec: Generation, written: Written, how: str, renormalize: str) -> torch.Tensor | None:
    """The tokens the variant gives, called as the probe calls the student's generate: on a fresh stand-in and prompt,
    with the case's settings and a generator seeded as its own, PyTorch's global generator seeded GLOBAL_SEED; the
    sample_next_token it calls drawing the way (how, renormalize). None where it raises (it matches nothing)."""
    run = written.run
    run = types.FunctionType(run.__code__, {**run.__globals__, "sample_next_token": _sampler(how, renormalize)},
                             run.__name__, run.__defaults__)  # the variant, calling that sampler
    model, prompt = probes.stand_in(spec)
    try:
        with torch.random.fork_rng(devices=[]):
            manual_seed(salted(GLOBAL_SEED))
            return run(model, prompt, spec.new_tokens, **probes.settings(spec))
    except Exception:  # noqa: BLE001 - a variant that cannot run on the case (too long for the stand-in) is no match
        return None


def _generate_mistakes(spec: Generation) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """(mistake, its tokens) of each variant of generate (with the cache, generate_cached) on the case, drawn each
    right way, lazily, in declaration order."""
    for written in WRITTEN.of(GENERATE_CACHED if spec.use_cache else GENERATE):
        for how, renormalize in _ways(spec.sampling.top_p):
            tokens = _generated(spec, written, how, renormalize)
            if isinstance(tokens, torch.Tensor):
                yield written.mistake, tokens


# ---------------------------------------------------------------- generate: the oracle

def _oracle_generate(spec: Generation) -> list[torch.Tensor]:
    """generate's tokens (b, t0 + n) on the case's stand-in with each right sampler (_ways): the whole sequence fed at
    each step, the next token drawn from the logits of the last position with a generator seeded as the case's."""
    return [tokens.clone() for tokens in _generated_once(spec, seeds.current())]


@lru_cache(maxsize=64)
def _generated_once(spec: Generation, grading_seed: int | None) -> tuple[torch.Tensor, ...]:
    """_oracle_generate's tokens, generated once per case and grading seed (which salts the seeds of the stand-in, the
    prompt and the generator: a key, not read here): the oracle reads nothing of the student's, and replays judge the
    same cases again for every variant. _oracle_generate hands out copies."""
    out = []
    s = spec.sampling
    for how, renormalize in _ways(s.top_p):
        model, tokens = probes.stand_in(spec)
        gen = generator(spec.seed + 1)
        with torch.no_grad():
            for _ in range(spec.new_tokens):
                nxt = _draw(model(tokens)[:, -1], s.temperature, s.top_k, gen, how, s.top_p, renormalize)
                tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)  # (b, t + 1)
        out.append(tokens)
    return tuple(out)


def _expect_generation(ev: Evidence, spec: Generation, no_grad: bool = False) -> None:
    """The oracle's tokens on the case's stand-in, the model called as the cache (or its absence) asks (no_grad: and
    never with autograd on)."""
    __tracebackhide__ = True
    key, use_cache, b, t0, n = spec.key, spec.use_cache, spec.b, spec.t0, spec.new_tokens
    what = (f"{'generate_cached' if use_cache else 'generate'}(model, prompt {(b, t0)}, max_new_tokens={n}, "
            f"{spec.sampling.words}, generator=generator)")
    feed = ("the first call feeds the prompt with use_cache=True, each later one only tokens[:, -1:] with the cache "
            "the call before returned" if use_cache else "at each step run the model on the whole sequence so far")
    hint = (f"Start from the prompt; {feed}; draw the next token from the logits of the LAST position with "
            "sample_next_token(logits[:, -1], temperature, top_k, top_p, generator), and append it.")
    out = _token_ids(ev, key, what, hint)
    good = _oracle_generate(spec)
    mistakes: Iterable[tuple[Mistake, torch.Tensor]] = _generate_mistakes(spec)  # run only if out is not good
    case = f"a stand-in model, prompt ({b}, {t0}), {n} new tokens"
    if tuple(out.shape) != (b, t0 + n):  # wrong-shape, unless a typical mistake has this shape (the prompt dropped)
        mistakes = list(mistakes)
        if not any(torch.equal(out, candidate) for _, candidate in mistakes):
            fail(f"{what} returned shape {tuple(out.shape)}; expected (b, t0 + max_new_tokens) = {(b, t0 + n)}: the "
                 "prompt, then the new tokens.", compare.Rows(good[0]), compare.Rows(out), case, compare.WRONG_SHAPE)
    expect_equal(out, good, what=what, mistakes=mistakes, otherwise=hint, case=case,
                 differs="does not give the tokens of the step-by-step oracle")
    calls = ev.facts.get(fact_key(key, "calls"))
    if not isinstance(calls, list) or len(calls) < n:
        fail(f"{what} made {len(calls) if isinstance(calls, list) else 'no'} calls of the model for {n} new tokens.")
    expected = [[t0, 0, True], *([1, t0 + i, True] for i in range(n - 1))]
    mistake = CACHE_UNUSED if use_cache else CACHE_WHEN_NOT_ASKED
    if (calls[:n] != expected if use_cache else any(not isinstance(c, list) or len(c) != 3 or c[1] != 0 or c[2]
                                                    for c in calls)):
        fail(f"{what} gives the right tokens, but its calls of the model, [tokens fed, positions cached, use_cache], "
             f"were {calls[:6]}...: {mistake.explanation}", mistake=mistake)
    if no_grad and ev.facts.get(fact_key(key, "autograd_on")) is not False:
        fail(f"{what} gives the right tokens, but it calls the model with autograd on: {WITH_AUTOGRAD.explanation}",
             mistake=WITH_AUTOGRAD)


# ---------------------------------------------------------------- the checks

_ON_GPU = dict(left=MASK_ON_THE_CPU, named=(("aten.embedding", POSITIONS_ON_THE_CPU),))
each_case(probes.lm_structure, partial(expect_model, oracle=LM),
          then=partial(expect_on_gpus, seen_on=OnGpus("model", probes.LM_ON_GPU, **_ON_GPU)),
          passed="The embeddings (positions learned), depth registered blocks, norm and to_logits: (b, t, V) logits; "
                 "on a stand-in CUDA and MPS, positions and mask made on the tokens' device.")
each_case(probes.lm_causality, partial(expect_model, oracle=LM),
          passed="Changing the tokens from position j on never changes the logits at positions before j.")
each_case(probes.lm_oracle, partial(expect_model, oracle=LM, exact=True),
          passed="With the test's weights: the logits of PyTorch's layers (nn.TransformerEncoderLayer's), pre-norm, "
                 "causal.")
each_case(probes.lm_hidden, partial(expect_model, oracle=LM, exact=True),
          passed="More shapes (a batch of one, one head, three blocks, a wider model) against PyTorch's layers.")
each_case(probes.lm_gradients, partial(expect_model_gradients, oracle=LM),
          passed="A loss on the logits sends every parameter the gradient autograd gives through PyTorch's layers.")
each_case(probes.lm_cache, _expect_cached,
          then=partial(expect_on_gpus, seen_on=OnGpus("model", probes.CACHE_ON_GPU, **_ON_GPU)),
          passed="A prompt, then 2 tokens, then one at a time with the cache: the logits of one call without it, "
                 "and a cache of (keys, values) per block, (b, heads, t, s), t growing; on a stand-in CUDA and MPS, "
                 "positions and mask made on the tokens' device.")
each_case(probes.lm_cache_hidden, _expect_run_block,
          passed="Another shape (three blocks, three heads), the cache fed chunks of several tokens; run_block "
                 "called on its own.")
each_case(probes.sampling_greedy, _expect_draws,
          passed="Temperature 0 is greedy: the argmax of each row, (b,) token ids, with or without top_k.")
each_case(probes.sampling_generator, _expect_draws,
          passed="The same generator gives the same tokens whatever the global generator's state, left alone.")
each_case(probes.sampling_distribution, partial(_expect_draws, cases=probes.SAMPLING_CASES),
          passed="Temperatures below and above 1, with and without top_k: torch.multinomial's tokens.")
each_case(probes.sampling_top_p, partial(_expect_draws, cases=probes.TOP_P_CASES),
          then=partial(expect_on_gpus, seen_on=OnGpus("sample", probes.SAMPLE_ON_GPU, NUCLEUS_ON_THE_CPU)),
          passed="top_p at three temperatures, after top_k, and a small p: torch.multinomial's tokens; on a stand-in "
                 "CUDA and MPS, every mask made where the logits are.")
each_case(probes.sampling_hidden, partial(_expect_draws, cases=probes.SAMPLING_HIDDEN_CASES),
          passed="Edge cases of top_k, top_p and temperature; 1,500 draws from one row never leave its top k.")
each_case(probes.generate_greedy, _expect_generation,
          passed="Temperature 0: the prompt, then the argmax of the last position, the whole sequence fed each step.")
each_case(probes.generate_sampling, _expect_generation,
          passed="Temperature 0.8 with top_k 4, and 1.2 with top_p 0.8: each step draws with the given generator.")
each_case(probes.generate_hidden, partial(_expect_generation, no_grad=True),
          passed="A one-token prompt, a batch of one, one new token, top_k = 1, top_p: the step-by-step tokens; "
                 "the model called inside torch.no_grad().")
each_case(probes.generate_cached, _expect_generation,
          passed="Greedy, sampled, top_k and top_p: generate's tokens, the prompt once, then one token with the cache.")
each_case(probes.generate_cached_hidden, partial(_expect_generation, no_grad=True),
          passed="A one-token prompt, a batch of one, one new token, top_k = 1, top_p: generate's tokens, cached; "
                 "the model called inside torch.no_grad().")

against_loss(probes.loss_oracle, NEXT_TOKEN_LOSS,
             passed="Random logits, then large ones: the mean cross-entropy against the next token, and its gradient.")
against_loss(probes.loss_hidden, NEXT_TOKEN_LOSS,
             passed="A single sequence of two tokens, and a larger batch and vocabulary, on the notebook's device.")
