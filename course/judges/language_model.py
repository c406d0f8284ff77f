"""Judges for assignment 08 (probes in course/checks/language_model.py): the model against a stack of PyTorch's
nn.TransformerEncoderLayer, its mistakes and KV cache written out with switches; sampling against torch.multinomial
with the probe's generator; generation step by step on the stand-in models; then one declaration per check."""

import math
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import compare, modules
from course.checks import language_model as probes
from course.checks.compare import Mistake, OnGpus, expect_equal, fail, generator, output
from course.checks.evidence import Evidence, fact_key, item_key
from course.checks.language_model import CACHED_NAME, GLOBAL_SEED, MODEL_NAME, Generation, ModelCase, SamplingCase
from course.checks.seeds import salted
from course.judges import mistakes, oracles
from course.judges.kinds import (
    LossOracle,
    ModelOracle,
    against_loss,
    decoder,
    each_case,
    expect_blocks,
    expect_model,
    expect_model_steps,
    run_steps,
)
from course.judges.oracles import dense, layer_norm
from course.judges.variants import Variants, Written

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/language_model.txt; the rest are written below
WRITTEN = Variants(__name__, reference="course.language_model")  # as the code a student writes (variants.py)
edit = WRITTEN.edit


# ---------------------------------------------------------------- the model: structure

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
             f"{M['positions-not-learned'].explanation}", mistake=M["positions-not-learned"])
    for name, size in (("token_embedding", "vocab_size"), ("position_embedding", "max_len")):
        modules.expect_part(ev, key, MODEL_NAME, name, "Embedding", f"nn.Embedding({size}, k)")
    blocks = expect_blocks(ev, key, MODEL_NAME, depth, probes.BLOCK_PARTS,
                           (M["blocks-not-registered"], M["wrong-depth"], M["shared-block"]))
    for i, block in enumerate(blocks):
        if block["norm2"].get("same_as") == "norm1":
            fail(f"{MODEL_NAME}.blocks[{i}].norm2 is its norm1: {M['shared-norm'].explanation}",
                 mistake=M["shared-norm"])
        if block["attention"].get("heads") != case.heads:
            fail(f"{MODEL_NAME}.blocks[{i}].attention has {str(block['attention'].get('heads'))[:20]} heads: it "
                 f"should be MultiHeadAttention(k, heads), heads={case.heads}.", mistake=M["wrong-size"])
    modules.expect_part(ev, key, MODEL_NAME, "norm", "LayerNorm", "nn.LayerNorm(k), the final norm")
    modules.expect_part(ev, key, MODEL_NAME, "to_logits", "Linear", "nn.Linear(k, vocab_size)")
    per_block = {n: s for i in range(depth) for n, s in modules.block_shapes(f"blocks.{i}.", k, 4 * k).items()}
    shapes = {"token_embedding.weight": (vocab, k), "position_embedding.weight": (case.max_len, k), **per_block,
              "norm.weight": (k,), "norm.bias": (k,), "to_logits.weight": (vocab, k), "to_logits.bias": (vocab,)}
    return modules.expect_parameters(ev, key, case.call, shapes, run.seed, hint=modules.PARTS_HINT,
                                     resized=M["wrong-size"], count=(
                                         f"the embeddings, {depth} blocks, the final norm and the output layer",
                                         "Is an extra layer registered?"))


# ---------------------------------------------------------------- the model: oracle, and its mistakes written out

def _lm_oracle(w: Mapping[str, torch.Tensor], case: ModelCase, tokens: torch.Tensor) -> torch.Tensor:
    """PyTorch's nn.TransformerEncoderLayer (pre-norm, ReLU, causal mask) stacked, carrying the check's weights."""
    t = tokens.shape[1]
    x = F.embedding(tokens, w["token_embedding.weight"]) + w["position_embedding.weight"][:t]  # (b, t, k)
    for i in range(case.depth):
        x = oracles.course_layer(w, f"blocks.{i}.", case.heads, x, causal=True, norm_first=True)
    return dense(w, "to_logits", layer_norm(w, "norm", x))


def _cat(old: torch.Tensor, new: torch.Tensor, order: str) -> torch.Tensor:
    """Cached and new keys or values (b, h, t, s) joined in time: new after old ("append") or before it."""
    return torch.cat([old, new] if order == "append" else [new, old], dim=2)  # (b, h, t_old + t_new, s)


def _lm_step(w: Mapping[str, torch.Tensor], case: ModelCase, tokens: torch.Tensor, cache: list | None = None, *,
             mask: str = "causal", positions: str = "continue", layout: str = "pre", final_norm: bool = True,
             softmax: bool = False, scaled: bool = False, stored: str = "keys", order: str = "append",
             offset: bool = True, read_cache: bool = True) -> tuple[torch.Tensor, list]:
    """One call of the notebook's language model written out: (logits, cache); the keywords: typical mistakes."""
    t, heads = tokens.shape[1], case.heads
    past = 0 if cache is None else cache[0][0].shape[2]
    start = past if positions == "continue" else 0
    x = F.embedding(tokens, w["token_embedding.weight"]) * (math.sqrt(case.k) if scaled else 1.0)
    if positions != "none":
        x = x + w["position_embedding.weight"][start : start + t]
    allowed = torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past if offset else 0)
    allowed = {"none": torch.ones_like(allowed), "inverted": ~allowed}.get(mask, allowed)

    def ff(name: str, h: torch.Tensor) -> torch.Tensor:
        return dense(w, f"{name}.net.2", F.relu(dense(w, f"{name}.net.0", h)))

    def attend(h: torch.Tensor, i: int, old: tuple | None) -> tuple[torch.Tensor, tuple]:
        """Block i's attention on h (b, t, k) with its cache old: (its output, what it caches)."""
        p = f"blocks.{i}.attention."
        q, keys, values = (dense(w, f"{p}to_{name}", h) for name in ("queries", "keys", "values"))
        q, keys, values = (y.unflatten(-1, (heads, -1)).transpose(1, 2) for y in (q, keys, values))  # (b, h, t, s)
        kept, new_values, read_mask = (q if stored == "queries" else keys), values, allowed
        if old is not None:
            kept, new_values = _cat(old[0], kept, order), _cat(old[1], values, order)
            if read_cache:
                keys, values = _cat(old[0], keys, order), new_values
            else:
                read_mask = allowed[:, past:]
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (b, h, t, T)
        # a query allowed nothing gets zeros, as in the course
        weights = torch.softmax(scores.masked_fill(~read_mask, float("-inf")), dim=-1).nan_to_num(0.0)
        out = (weights @ values).transpose(1, 2).reshape(h.shape)  # (b, t, k)
        return dense(w, f"{p}unify_heads", out), (kept, new_values)

    logits, new_cache = decoder(w, x, case.depth, cache, attend, ff, partial(layer_norm, w), layout=layout,
                                final_norm=final_norm)
    return (F.softmax(logits, dim=-1) if softmax else logits), new_cache


#: model mistakes that change the logits of an uncached forward
_LM_MISTAKES = ((M["lm-no-causal-mask"], {"mask": "none"}), (M["lm-inverted-causal-mask"], {"mask": "inverted"}),
                (M["lm-post-norm"], {"layout": "post", "final_norm": False}), (M["lm-post-norm"], {"layout": "post"}),
                (M["lm-no-final-norm"], {"final_norm": False}), (M["lm-no-positions"], {"positions": "none"}),
                (M["lm-softmax"], {"softmax": True}), (M["lm-no-residual"], {"layout": "no-residual"}),
                (M["lm-scaled-embeddings"], {"scaled": True}))
#: cache mistakes: they change only calls that are given a cache (or what the cache holds)
_CACHE_MISTAKES = ((M["cache-positions-restart"], {"positions": "restart"}), (M["cache-stores-queries"],
                   {"stored": "queries"}), (M["cache-mask-not-offset"], {"offset": False}),
                   (M["cache-not-read"], {"read_cache": False}), (M["cache-prepended"], {"order": "prepend"}))
_LM_HINT = ("x = token_embedding(tokens) + position_embedding(positions); each block: x = x + attention(norm1(x)) "
            "with the causal mask, then x = x + ff(norm2(x)); finally to_logits(norm(x)).")


LM = ModelOracle(MODEL_NAME, _lm_weights, _lm_step, "PyTorch's nn.TransformerEncoderLayer with the same weights",
                 _LM_HINT, "In training the model could read the token it must predict: give every block the causal "
                 "mask, True where key j <= query i.", M["lm-reads-future"], _LM_MISTAKES, _CACHE_MISTAKES, _lm_oracle,
                 M["lm-returns-tuple"])
_lm_run_cached = partial(run_steps, _lm_step)

#: PyTorch's errors in a cached call with a cache of at least `after` positions, by a phrase of their message
_CACHE_ERRORS = (("Sizes of tensors must match except in dimension", 0, M["cache-wrong-axis"]),
                 ("must match the size of tensor", 1, M["cache-mask-shape"]))


def _expect_cached(ev: Evidence, run: probes.ModelRun, run_block: bool = False) -> None:
    """The chunks fed with the cache give the logits of one call without it, and each block's keys and values;
    run_block: then the method run_block, called directly (:func:`_expect_run_block`)."""
    __tracebackhide__ = True
    w, full = expect_model(ev, run, LM, exact=True, owner=CACHED_NAME)
    expect_model_steps(ev, run, LM, w, full, run.case.heads, M["cache-differs"], owner=CACHED_NAME,
                       errors=_CACHE_ERRORS, not_returned=M["cache-not-returned"], bad_cache=M["cache-shape"])
    if run_block:
        _expect_run_block(ev, run.case, w)


def _block_step(w: Mapping[str, torch.Tensor], heads: int, x: torch.Tensor, mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first block of the model with weights w on x (b, t, k) after the cached (keys, values) past, written out
    from PyTorch's pieces: (x, keys, values), the keys and values of all t_past + t positions."""
    p = "blocks.0."
    h = layer_norm(w, f"{p}norm1", x)
    q, k, v = (dense(w, f"{p}attention.to_{name}", h).unflatten(-1, (heads, -1)).transpose(1, 2)
               for name in ("queries", "keys", "values"))  # (b, h, t, s) each
    k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (b, h, t_past + t, s)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (b, h, t, s)
    x = x + dense(w, f"{p}attention.unify_heads", out.transpose(1, 2).flatten(2))  # (b, t, k)
    return x + dense(w, f"{p}ff.net.2", F.relu(dense(w, f"{p}ff.net.0", layer_norm(w, f"{p}norm2", x)))), k, v


_RUN_BLOCK_HINT = ("run_block(block, x, mask, past) returns (x, (keys, values)): h = block.norm1(x); queries, keys and "
                   "values split into block.attention.heads heads; keys and values appended to past along dim 2; "
                   "attention under the mask; x + unify_heads(merge_heads(out)); then x + block.ff(block.norm2(x)).")


def _expect_run_block(ev: Evidence, case: ModelCase, w: Mapping[str, torch.Tensor]) -> None:
    """run_block on the model's first block (probes.RUN_BLOCK), which the exercise asks for by name: the block's
    output and the keys and values of all t_past + t positions, as _block_step computes them."""
    __tracebackhide__ = True
    inputs = probes.run_block_inputs(case)
    x, mask, past = inputs["x"], inputs["mask"], inputs["past"]
    what = (f"{CACHED_NAME}.run_block(model.blocks[0], x {tuple(x.shape)}, mask {tuple(mask.shape)}, past=(keys, "
            f"values) of {past[0].shape[2]} positions)")
    fact = ev.facts.get("run_block")
    if isinstance(fact, dict) and fact.get("not_implemented"):
        fail(f"{what} is not implemented: {M['cached-run-block-missing'].explanation}",
             mistake=M["cached-run-block-missing"])
    compare.expect_tuple(ev, "run_block", what, f"{what} should return (x, (keys, values)). {_RUN_BLOCK_HINT}", 2)
    compare.expect_tuple(ev, "run_block.1", what, f"Its second value should be (keys, values). {_RUN_BLOCK_HINT}", 2)
    with torch.no_grad():
        want = _block_step(w, case.heads, x, mask, past)
    b, t, k = x.shape
    cached = (b, case.heads, past[0].shape[2] + t, k // case.heads)
    found = [output(ev, item_key("run_block", 0), what=what, shape=tuple(x.shape), hint=_RUN_BLOCK_HINT),
             *(output(ev, item_key(item_key("run_block", 1), i), what=f"The {part} {what} returns", shape=cached,
                      hint=_RUN_BLOCK_HINT) for i, part in enumerate(("keys", "values")))]
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
# the right loss where the logits are small: named from a loss that is not finite (kinds.expect_loss_case)
edit("loss-softmax-then-log", LOSS,
     (CROSS_ENTROPY, "-predictions.softmax(dim=-1).gather(-1, labels[:, None]).log().mean()"), mistake="loss-unstable",
     says="the loss takes the log of a softmax, which underflows for large logits: use F.cross_entropy (or "
          "F.log_softmax).")

NEXT_TOKEN_LOSS = LossOracle(
    "next_token_loss(logits, tokens)", lambda feed, logits, tokens: logits[:, :-1], "tokens",  # the oracle's feed
    mistakes=(WRITTEN["loss-unstable"],), written=partial(WRITTEN.outputs, LOSS),
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
    logits, gen_seed = spec.logits(), spec.seed + 1 if seed is None else seed
    return [_draw(logits, spec.temperature, spec.top_k, generator(gen_seed), how, spec.top_p, way)
            for how, way in _ways(spec.top_p)]


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
    out = output(ev, key, what=what, floating=False, hint=hint, device=False)
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
        allowed, what = set(spec.logits()[0].topk(spec.top_k).indices.tolist()), spec.call.replace("logits", "one row")
        for key in [spec.key] + (["on_device"] if ev.device != "cpu" else []):
            drawn = set(_token_ids(ev, key, what, rows=spec.b).tolist())
            for mistake, wrong in ((TOP_K_IGNORED, not drawn <= allowed), (TOP_K_TOO_FEW, len(drawn) < spec.top_k)):
                if wrong:
                    fail(f"{what} drew the tokens {sorted(drawn)[:12]} from {spec.b} copies of a row whose top "
                         f"{spec.top_k} are {sorted(allowed)}: {mistake.explanation}", mistake=mistake)
        expect_equal(_token_ids(ev, spec.key, what, rows=spec.b), _draws(spec), what=what, otherwise=_SAMPLE_HINT,
                     case=f"top_k={spec.top_k}", differs=_NOT_DRAWN)
        return
    greedy, rng = spec.temperature == 0, GLOBAL_RNG
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
    if any(case.top_k is not None and _no_distribution(ev, case.key) for case in cases):
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
            torch.manual_seed(salted(GLOBAL_SEED))
            return run(model, prompt, spec.new_tokens, **probes.settings(spec))
    except Exception:  # noqa: BLE001 - a variant that cannot run on the case (too long for the stand-in) is no match
        return None


def _generate_mistakes(spec: Generation) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """(mistake, its tokens) of each variant of generate (with the cache, generate_cached) on the case, drawn each
    right way, lazily, in declaration order."""
    for written in WRITTEN.of(GENERATE_CACHED if spec.use_cache else GENERATE):
        for how, renormalize in _ways(spec.top_p):
            tokens = _generated(spec, written, how, renormalize)
            if isinstance(tokens, torch.Tensor):
                yield written.mistake, tokens


# ---------------------------------------------------------------- generate: the oracle

def _oracle_generate(spec: Generation) -> list[torch.Tensor]:
    """generate's tokens (b, t0 + n) on the case's stand-in with each right sampler (_ways): the whole sequence fed at
    each step, the next token drawn from the logits of the last position with a generator seeded as the case's."""
    out = []
    for how, renormalize in _ways(spec.top_p):
        model, tokens = probes.stand_in(spec)
        gen = generator(spec.seed + 1)
        with torch.no_grad():
            for _ in range(spec.new_tokens):
                nxt = _draw(model(tokens)[:, -1], spec.temperature, spec.top_k, gen, how, spec.top_p, renormalize)
                tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)  # (b, t + 1)
        out.append(tokens)
    return out


def _expect_generation(ev: Evidence, spec: Generation, no_grad: bool = False) -> None:
    """The oracle's tokens on the case's stand-in, the model called as the cache (or its absence) asks (no_grad: and
    never with autograd on)."""
    __tracebackhide__ = True
    key, use_cache, b, t0, n = spec.key, spec.use_cache, spec.b, spec.t0, spec.new_tokens
    nucleus = "" if spec.top_p is None else f", top_p={spec.top_p:g}"
    what = (f"{'generate_cached' if use_cache else 'generate'}(model, prompt {(b, t0)}, max_new_tokens={n}, "
            f"temperature={spec.temperature:g}, top_k={spec.top_k}{nucleus}, generator=generator)")
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

_ON_GPU = dict(left=M["mask-on-the-cpu"], named=(("aten.embedding", M["positions-on-the-cpu"]),))
each_case(probes.lm_structure, partial(expect_model, oracle=LM), on_gpus=OnGpus("model", probes.LM_ON_GPU, **_ON_GPU),
          passed="The embeddings (positions learned), depth registered blocks, norm and to_logits: (b, t, V) logits; "
                 "on a stand-in CUDA and MPS, positions and mask made on the tokens' device.")
each_case(probes.lm_causality, partial(expect_model, oracle=LM),
          passed="Changing the tokens from position j on never changes the logits at positions before j.")
each_case(probes.lm_oracle, partial(expect_model, oracle=LM, exact=True),
          passed="With the test's weights: the logits of PyTorch's nn.TransformerEncoderLayer, pre-norm, causal.")
each_case(probes.lm_hidden, partial(expect_model, oracle=LM, exact=True),
          passed="More shapes (a batch of one, one head, three blocks, a wider model) against PyTorch's layers.")
each_case(probes.lm_gradients, partial(expect_model, oracle=LM),
          passed="A loss on the logits sends every parameter the gradient autograd gives through PyTorch's layers.")
each_case(probes.lm_cache, _expect_cached, on_gpus=OnGpus("model", probes.CACHE_ON_GPU, **_ON_GPU),
          passed="A prompt, then 2 tokens, then one at a time with the cache: the logits of one call without it, "
                 "and a cache of (keys, values) per block, (b, heads, t, s), t growing; on a stand-in CUDA and MPS, "
                 "positions and mask made on the tokens' device.")
each_case(probes.lm_cache_hidden, partial(_expect_cached, run_block=True),
          passed="Another shape (three blocks, three heads), the cache fed chunks of several tokens; run_block "
                 "called on its own.")
each_case(probes.sampling_greedy, _expect_draws,
          passed="Temperature 0 is greedy: the argmax of each row, (b,) token ids, with or without top_k.")
each_case(probes.sampling_generator, _expect_draws,
          passed="The same generator gives the same tokens whatever the global generator's state, left alone.")
each_case(probes.sampling_distribution, partial(_expect_draws, cases=probes.SAMPLING_CASES),
          passed="Temperatures below and above 1, with and without top_k: torch.multinomial's tokens.")
each_case(probes.sampling_top_p, partial(_expect_draws, cases=probes.TOP_P_CASES),
          on_gpus=OnGpus("sample", probes.SAMPLE_ON_GPU, NUCLEUS_ON_THE_CPU),
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
