"""Judges for assignment 07 (probes in course/checks/seq2seq.py), read top to bottom: the mistakes; then per exercise
its oracle with the simulators of its typical mistakes and one declaration per check, judged from the very cases
its probe drew (the masks against their definitions; DecoderBlock and Seq2SeqTransformer against PyTorch's own
nn.TransformerDecoderLayer and nn.TransformerEncoderLayer carrying the check's weights, whose boolean masks mean
True = NOT allowed, so ours are inverted; the loss against F.cross_entropy, a course/judges/kinds.py LossOracle;
greedy decoding against a step-by-step argmax over the probe's stand-in models). The properties (causality, padding
invariance, gradients through a typical mistake) are written out, anchored to outputs recomputed here.
"""

import math
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from course.checks import modules
from course.checks import seq2seq as probes
from course.checks.compare import (
    NOT_A_TENSOR,
    WRONG_SHAPE,
    Mistake,
    Rows,
    expect_close_batch,
    expect_equal,
    fail,
    matches_any,
    output,
    raised,
    randn,
    value_kind,
)
from course.checks.evidence import Evidence
from course.checks.kinds import Built, Case
from course.checks.modules import PARAMETER_COUNT, WRONG_PART_TYPE
from course.checks.seeds import grading
from course.checks.seq2seq import (
    _CAUSAL_POSITIONS,
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DecodeCase,
    DecodeCheck,
    DecoderCheck,
    MaskCase,
    MaskCheck,
    ModelCase,
    ModelRun,
)
from course.judges import judge, oracles
from course.judges.kinds import LossOracle, against_loss, expect_causal

CAUSAL_NAME = "causal_mask(t)"
PADDING_NAME = "padding_mask(lengths, t)"
BLOCK_NAME = "DecoderBlock"
MODEL_NAME = "Seq2SeqTransformer"
LOSS_NAME = "teacher_forcing_loss(model, src, src_mask, tgt, pad)"
DECODE_NAME = "greedy_decode(model, src, src_mask, max_len, bos, eos)"


# ---------------------------------------------------------------- mistakes

CAUSAL_INVERTED = Mistake("causal-inverted", "the mask is inverted: True marks the future (j > i). In this course "
                          "True means 'may attend', so row i must be True for j <= i.")
CAUSAL_NO_DIAGONAL = Mistake("causal-no-diagonal", "the mask excludes the diagonal: position i must be allowed to "
                             "attend to itself (j <= i, not j < i); without it the first position has nothing to "
                             "attend to.")
CAUSAL_TRANSPOSED = Mistake("causal-transposed", "the mask is transposed: True where j >= i lets every position read "
                            "the future. Use the lower triangle (torch.tril), row i = query, column j = key.")
CAUSAL_ALL_TRUE = Mistake("causal-all-true", "nothing is masked: every entry is True, so the decoder can read the "
                          "future.")
PADDING_INVERTED = Mistake("padding-inverted", "the mask is inverted: True marks the padding. True must mark the real "
                           "tokens (position < length).")
PADDING_ONE_TOO_MANY = Mistake("padding-one-too-many", "the mask is off by one: it marks one position too many "
                               "(position <= length). Row i has lengths[i] real tokens at positions 0 .. lengths[i] "
                               "- 1.")
PADDING_ONE_TOO_FEW = Mistake("padding-one-too-few", "the mask is off by one: it marks one real token too few "
                              "(position < length - 1). Row i has lengths[i] real tokens at positions 0 .. "
                              "lengths[i] - 1.")

BLOCK_CROSS_READS_ITSELF = Mistake(
    "block-cross-reads-itself",
    "cross-attention reads the decoder's own states: its keys and values must come from `memory` "
    "(cross_attention(x, context=memory, mask=memory_mask)).")
BLOCK_MEMORY_NOT_MASKED = Mistake(
    "block-memory-not-masked",
    "source padding is not masked in cross-attention: pass memory_mask to cross_attention, so no target position "
    "reads a padded source position.")
BLOCK_SELF_MASK_IGNORED = Mistake(
    "block-self-mask-ignored",
    "self_mask is not used in self-attention, so every target position reads the future: "
    "self_attention(x, mask=self_mask).")
BLOCK_NO_RESIDUAL = Mistake(
    "block-no-residual",
    "the residual connections are missing: each sublayer's output is added to its input before the norm, "
    "x = norm(x + sublayer(x)).")
BLOCK_PRE_NORM = Mistake(
    "block-pre-norm",
    "the block is pre-norm (x + sublayer(norm(x))); this course's blocks are post-norm: x = norm(x + sublayer(x)).")
BLOCK_CROSS_FIRST = Mistake(
    "block-cross-first",
    "cross-attention comes before self-attention: the decoder first reads its own past (self-attention, norm1), "
    "then the source (cross-attention, norm2), then the feed-forward (norm3).")
BLOCK_CROSS_ON_INPUT = Mistake(
    "block-cross-on-input",
    "cross-attention is applied to the block's input x instead of to the output of the self-attention sublayer, "
    "so the self-attention result is lost in the second sublayer.")

MODEL_SOFTMAX = Mistake("model-softmax", "forward returns probabilities (a softmax of the logits). Return the raw "
                        "logits: F.cross_entropy applies log-softmax itself.")
MODEL_NOT_CAUSAL = Mistake("model-not-causal", "the decoder is not causal: pass causal_mask(t) to every DecoderBlock "
                           "as self_mask.")
MODEL_MEMORY_NOT_MASKED = Mistake("model-memory-not-masked", "source padding is not masked in cross-attention: pass "
                                  "src_mask as memory_mask, shaped (b, 1, s), to every DecoderBlock.")
MODEL_ENCODER_NOT_MASKED = Mistake("model-encoder-not-masked", "source padding is not masked in the encoder: pass "
                                   "src_mask, shaped (b, 1, s), to every encoder block.")
MODEL_PADDING_NOT_MASKED = Mistake("model-padding-not-masked", "source padding is masked neither in the encoder nor "
                                   "in cross-attention: pass src_mask shaped (b, 1, s) to both.")
MODEL_NO_TARGET_POSITIONS = Mistake("model-no-target-positions", "no positions are added to the target embeddings: "
                                    "apply self.positions in decode too.")
MODEL_NO_SOURCE_POSITIONS = Mistake("model-no-source-positions", "no positions are added to the source embeddings: "
                                    "apply self.positions in encode too.")
MODEL_MEMORY_IS_EMBEDDINGS = Mistake("model-memory-is-embeddings", "the memory is the source embeddings: encode must "
                                     "run them through the encoder blocks.")
MODEL_SCALED_EMBEDDINGS = Mistake("model-scaled-embeddings", "the embeddings are multiplied by √k; in this course the "
                                  "positions are added to the plain embeddings.")
MODEL_TARGET_SOURCE_EMBEDDING = Mistake("model-target-source-embedding", "the target tokens are embedded with "
                                        "src_embedding; use tgt_embedding for them.")

LOSS_PAD_HARD_CODED = Mistake("loss-pad-hard-coded", "the padding id is hard-coded as 0 (or the padding is not ignored "
                              "at all): ignore the labels equal to the `pad` argument (ignore_index=pad).")
LOSS_NOT_SHIFTED = Mistake(
    "loss-not-shifted",
    "the targets are not shifted: the decoder reads tgt and is scored on tgt itself, so at every position the "
    "answer is already in its input and the model learns to copy its input. Feed tgt[:, :-1], score against "
    "tgt[:, 1:].")
LOSS_COUNTS_PADDING = Mistake("loss-counts-padding", "the loss counts the padding: pass ignore_index=pad to "
                              "F.cross_entropy (or average over real tokens only).")
LOSS_WRONG_SHIFT = Mistake("loss-wrong-shift", "the shift goes the wrong way: the decoder reads tgt[:, :-1] (starting "
                           "with <bos>) and predicts tgt[:, 1:].")
LOSS_SUM = Mistake("loss-sum", "the loss is a sum, not a mean over the real target tokens.")
LOSS_PER_SEQUENCE = Mistake("loss-per-sequence", "the loss is averaged per sequence first; the task asks for the mean "
                            "over all real target tokens of the batch (what F.cross_entropy(..., ignore_index=pad) "
                            "gives).")
LOSS_SOFTMAX = Mistake("loss-softmax", "a softmax is applied before F.cross_entropy, which applies log-softmax "
                       "itself: pass the raw logits.")

DECODE_NEVER_STOPS = Mistake("greedy-never-stops", "decoding never stops at <eos>: the tokens after a sequence's "
                             "<eos> must be <pad> (0) — keep a `finished` flag per sequence and write <pad> once it is "
                             "set.")
DECODE_RETURNS_BOS = Mistake("greedy-returns-bos", "the output starts with <bos>: return only the generated tokens "
                             "(drop column 0).")
DECODE_EOS_PADDED = Mistake("greedy-eos-padded", "after <eos> the sequence is filled with <eos>; fill it with <pad> "
                            "(0) instead.")
DECODE_EOS_OVERWRITTEN = Mistake("greedy-eos-overwritten", "the <eos> itself is replaced by <pad>: a sequence is "
                                 "marked finished before its <eos> is appended. Append the token first, then set "
                                 "`finished` where it is <eos>, so only the tokens after it become <pad>.")
DECODE_FORGETS_BOS = Mistake("greedy-forgets-bos", "the decoder does not start from <bos>: the first input of every "
                             "sequence is the <bos> token.")
DECODE_FIRST_POSITION = Mistake("greedy-first-position", "the next token is the argmax at the FIRST position of the "
                                "decoder's output; the prediction for the next token is at the LAST position: "
                                "logits[:, -1].argmax(-1).")

# structure, property and format failures, whose messages say them in their own words (the shared ones are in
# course/checks/modules.py)
FLOAT_MASK = Mistake("float-mask", "the mask is a tensor of numbers; a boolean mask is asked, True where attention "
                     "is allowed.")
ADDITIVE_MASK = Mistake("additive-mask", "the mask is an additive float mask of 0 and -inf (nn.Transformer's "
                        "convention); a boolean mask is asked, True where attention is allowed.")
PADDING_TRANSPOSED = Mistake("padding-transposed", "the padding mask is transposed: one row per sequence, one column "
                             "per position, (b, t).")
MASK_DEVICE = Mistake("mask-wrong-device", "the mask is not on the device asked: create it with device=... .")
WRONG_SIZE = Mistake("wrong-size", "a part has the wrong size for the sizes the model was given.")
SHARED_ATTENTION = Mistake("block-shared-attention", "self_attention and cross_attention are one module: create two "
                           "MultiHeadAttention modules.")
SHARED_NORM = Mistake("shared-norm", "two of the block's norms are one module: each sublayer needs its own "
                      "LayerNorm(k).")
SHARED_EMBEDDING = Mistake("shared-embedding", "src_embedding and tgt_embedding are one module: source and target "
                           "have their own vocabularies.")
SHARED_BLOCK = Mistake("shared-block", "one block is used for several layers: create a new block for every layer.")
WRONG_DEPTH = Mistake("wrong-depth", "the encoder or the decoder does not hold `depth` blocks.")
BLOCK_NOT_CAUSAL = Mistake("block-not-causal", "the block reads the future: changing later target positions changes "
                           "earlier outputs.")
BLOCK_READS_PADDING = Mistake("block-reads-padding", "the block reads padded memory positions, which memory_mask "
                              "masks out.")
MODEL_READS_FUTURE = Mistake("model-reads-future", "the model reads the future: changing a later target token "
                             "changes the logits at earlier positions.")
MODEL_READS_PADDING = Mistake("model-reads-padding", "the model reads the source padding, which src_mask masks out.")
DECODE_INCONSISTENT = Mistake("decode-inconsistent", "decode(tgt, encode(src, src_mask), src_mask) differs from "
                              "forward(src, tgt, src_mask).")
DECODE_TOO_LONG = Mistake("greedy-too-long", "more than max_len tokens are returned per sequence.")
DECODE_STOPS_EARLY = Mistake("greedy-stops-early", "decoding stops before every sequence has written <eos>.")
DECODE_NOT_IDS = Mistake("greedy-not-ids", "the tokens are not torch.long ids.")


# ---------------------------------------------------------------- masks

def _mask(ev: Evidence, key: str, *, what: str, shape: tuple[int, ...], device: str,
          hints: dict[tuple[int, ...], tuple[str, Mistake | str | None]] | None = None) -> torch.Tensor:
    """The bool tensor the student's mask function returned, of this shape, on this device."""
    __tracebackhide__ = True
    raised(ev, key, what)
    kind = value_kind(ev, key)
    fact = ev.facts.get(key)
    if kind == "missing":
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    if kind != "tensor" or fact.get("type") != "Tensor" or key not in ev.tensors:
        shown = {"none": "None", "tuple": "a tuple"}.get(kind, str(fact.get("type"))[:60])
        fail(f"{what} should return a torch.Tensor, but returned {shown}.", mistake=NOT_A_TENSOR)
    value = ev.tensors[key]
    if list(value.shape) != list(fact.get("shape", [])):
        fail(f"The test's record of {what} is inconsistent (its shape).")
    if value.dtype != torch.bool:
        v = value.to(torch.float64) if value.is_floating_point() else value
        if value.is_floating_point() and bool(torch.isinf(v).any()):
            kind_text, mistake = ("an additive float mask of 0 and -inf (the convention of nn.Transformer's float "
                                  "masks)"), ADDITIVE_MASK
        else:
            kind_text, mistake = f"a tensor of dtype {value.dtype}", FLOAT_MASK
        fail(f"{what} returned {kind_text}, but a boolean mask is asked, True where attention is allowed: the mask "
             "was returned as floats (or integers) where a boolean is asked. MultiHeadAttention inverts it with "
             "~mask, which is wrong for numbers. Build it with a comparison or torch.ones(..., dtype=torch.bool).",
             mistake=mistake)
    if tuple(value.shape) != tuple(shape):
        hint, mistake = (hints or {}).get(tuple(value.shape), ("", WRONG_SHAPE))
        fail(f"{what} returned shape {tuple(value.shape)}, expected {tuple(shape)}. {hint}".strip(), mistake=mistake)
    if fact.get("device") != device:
        fail(f"{what} returned a mask on {fact.get('device')}, but {device} was asked. Create it with device=... "
             "(or on the device of its input) so the model runs on any device.", mistake=MASK_DEVICE)
    return value


def _causal_mistakes(t: int) -> list[tuple[Mistake, torch.Tensor]]:
    good = oracles.causal_mask(t)
    return [(CAUSAL_INVERTED, ~good), (CAUSAL_NO_DIAGONAL, good & ~torch.eye(t, dtype=torch.bool)),
            (CAUSAL_TRANSPOSED, good.T.contiguous()), (CAUSAL_ALL_TRUE, torch.ones(t, t, dtype=torch.bool))]


_CAUSAL_HINT = "Entry (i, j) is True exactly when j <= i: the lower triangle including the diagonal (torch.tril)."


def _padding(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: (b, t), True at positions p < lengths[i]."""
    return torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)


def _padding_mistakes(lengths: torch.Tensor, t: int) -> list[tuple[Mistake, torch.Tensor]]:
    good = _padding(lengths, t)
    return [(PADDING_INVERTED, ~good), (PADDING_ONE_TOO_MANY, _padding(lengths + 1, t)),
            (PADDING_ONE_TOO_FEW, _padding(lengths - 1, t))]


_PADDING_HINT = "Entry (i, p) is True exactly when p < lengths[i]: compare torch.arange(t) with lengths[:, None]."


def _padding_hints(b: int, t: int) -> dict[tuple[int, ...], tuple[str, Mistake | str | None]]:
    return {(t, b): ("That is the transposed shape: one row per sequence, one column per position.",
                     PADDING_TRANSPOSED),
            (b, t, 1): ("Drop the trailing dimension; MultiHeadAttention gets it as mask.unsqueeze(1) later.",
                        WRONG_SHAPE),
            (b, 1, t): ("Return the plain (b, t) mask; the model adds the middle dimension when it attends.",
                        WRONG_SHAPE)}


def _expect_mask(ev: Evidence, case: MaskCase) -> None:
    """The mask recorded for case: bool, of its shape, on the device asked, and equal to its definition."""
    __tracebackhide__ = True
    *lengths, t = case.sizes()
    device = ev.device if case.on_device else "cpu"
    if lengths:
        lengths = torch.tensor(lengths[0])
        b = len(lengths)
        mask = _mask(ev, case.key, what=PADDING_NAME, shape=(b, t), device=device, hints=_padding_hints(b, t))
        expect_equal(mask, _padding(lengths, t), what=PADDING_NAME, mistakes=_padding_mistakes(lengths, t),
                     otherwise=_PADDING_HINT, case=case.label or f"lengths={lengths.tolist()}, t={t}")
        return
    what = f"causal_mask({t}, device={ev.device!r})" if case.on_device else f"causal_mask({t})"
    mask = _mask(ev, case.key, what=what, shape=(t, t), device=device)
    expect_equal(mask, oracles.causal_mask(t), what=what, mistakes=_causal_mistakes(t), otherwise=_CAUSAL_HINT,
                 case=case.label or f"t={t}")


def _against_cases(check: MaskCheck | DecodeCheck, expect: Callable[[Evidence, Any], None], *, passed: str) -> None:
    """Register the judge of check: expect(ev, case) for every case drawn (the secret ones only under grading)."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in check.cases:
            if not case.secret or grading():
                expect(ev, case)

    judged.__doc__ = judged.passed = passed
    judge(check.name)(judged)


_against_cases(probes.causal_mask_by_hand, _expect_mask,
               passed="t = 4: the lower triangle, diagonal included, as bools.")
_against_cases(probes.causal_mask_oracle, _expect_mask,
               passed="Several lengths, on the device asked and on the CPU by default; True where j <= i.")
_against_cases(probes.padding_mask_by_hand, _expect_mask, passed="lengths [3, 1, 4], t = 5.")
_against_cases(probes.padding_mask_oracle, _expect_mask,
               passed="Several batches on the device: lengths from 1 to t, t larger than every length, a batch of one.")


# ---------------------------------------------------------------- modules: the judge's side

def _block_shapes(p: str, k: int, ff_mult: int) -> dict[str, tuple[int, ...]]:
    return {**modules.attention_shapes(f"{p}self_attention.", k), **modules.attention_shapes(f"{p}cross_attention.", k),
            **modules.norm_shapes(p, k, ("norm1", "norm2", "norm3")), **modules.feed_forward_shapes(p, k, ff_mult * k)}


def _model_shapes(src_vocab: int, tgt_vocab: int, k: int, depth: int) -> dict[str, tuple[int, ...]]:
    shapes = {"src_embedding.weight": (src_vocab, k), "tgt_embedding.weight": (tgt_vocab, k)}
    for i in range(depth):
        shapes.update(modules.block_shapes(f"encoder.{i}.", k, 4 * k))
    for i in range(depth):
        shapes.update(_block_shapes(f"decoder.{i}.", k, 4))
    shapes.update({"to_logits.weight": (tgt_vocab, k), "to_logits.bias": (tgt_vocab,)})
    return shapes


# ---------------------------------------------------------------- PyTorch's layers with the check's weights

def _torch_decoder(w: dict[str, torch.Tensor], p: str, heads: int, x: torch.Tensor, memory: torch.Tensor,
                   causal: bool = True, pad: torch.Tensor | None = None) -> torch.Tensor:
    """nn.TransformerDecoderLayer (post-norm, ReLU) carrying the block's weights; pad (b, s): True at real tokens."""
    layer = oracles.decoder_layer(x.shape[-1], heads, w[f"{p}ff.net.0.weight"].shape[0])
    params = oracles.course_layer_parameters(w, p, {"self_attention": "self_attn",
                                                    "cross_attention": "multihead_attn"}, 3)
    kwargs = {"tgt_mask": ~oracles.causal_mask(x.shape[1]) if causal else None,
              "memory_key_padding_mask": None if pad is None else ~pad}
    return functional_call(layer, params, (x, memory), kwargs)


def _torch_encoder(w: dict[str, torch.Tensor], p: str, heads: int, x: torch.Tensor,
                   pad: torch.Tensor | None) -> torch.Tensor:
    layer = oracles.encoder_layer(x.shape[-1], heads, w[f"{p}ff.net.0.weight"].shape[0])
    return functional_call(layer, oracles.course_layer_parameters(w, p, {"attention": "self_attn"}, 2), (x,),
                           {"src_key_padding_mask": None if pad is None else ~pad})


def _block_variant(w: dict[str, torch.Tensor], heads: int, x: torch.Tensor, memory: torch.Tensor,
                   self_mask: torch.Tensor | None, memory_mask: torch.Tensor | None, *, context: str = "memory",
                   cross_mask: str = "memory", use_self_mask: bool = True, layout: str = "post") -> torch.Tensor:
    """A decoder block written out from PyTorch's attention, with switches for the typical mistakes."""
    k = x.shape[-1]

    def norm(i: int, h: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(h, (k,), w[f"norm{i}.weight"], w[f"norm{i}.bias"])

    def ff(h: torch.Tensor) -> torch.Tensor:
        return F.linear(F.relu(F.linear(h, w["ff.net.0.weight"], w["ff.net.0.bias"])), w["ff.net.2.weight"],
                        w["ff.net.2.bias"])

    def sa(h: torch.Tensor) -> torch.Tensor:
        return oracles.attention(h, None, self_mask if use_self_mask else None, heads,
                                 **oracles.course_attention(w, "self_attention."))

    def ca(h: torch.Tensor) -> torch.Tensor:
        mask = {"memory": memory_mask, "self": self_mask, "none": None}[cross_mask]
        return oracles.attention(h, memory if context == "memory" else None, mask, heads,
                                 **oracles.course_attention(w, "cross_attention."))

    if layout == "pre":
        h = x + sa(norm(1, x))
        h = h + ca(norm(2, h))
        return h + ff(norm(3, h))
    if layout == "no-residual":
        return norm(3, ff(norm(2, ca(norm(1, sa(x))))))
    if layout == "cross-first":
        h = norm(1, x + ca(x))
        h = norm(2, h + sa(h))
        return norm(3, h + ff(h))
    h = norm(1, x + sa(x))
    h = norm(2, h + ca(x if layout == "cross-on-input" else h))
    return norm(3, h + ff(h))


_BLOCK_MISTAKES = ((BLOCK_CROSS_READS_ITSELF, MappingProxyType({"context": "self", "cross_mask": "self"})),
                   (BLOCK_CROSS_READS_ITSELF, MappingProxyType({"context": "self", "cross_mask": "none"})),
                   (BLOCK_MEMORY_NOT_MASKED, MappingProxyType({"cross_mask": "none"})),
                   (BLOCK_SELF_MASK_IGNORED, MappingProxyType({"use_self_mask": False})),
                   (BLOCK_NO_RESIDUAL, MappingProxyType({"layout": "no-residual"})),
                   (BLOCK_PRE_NORM, MappingProxyType({"layout": "pre"})),
                   (BLOCK_CROSS_FIRST, MappingProxyType({"layout": "cross-first"})),
                   (BLOCK_CROSS_ON_INPUT, MappingProxyType({"layout": "cross-on-input"})))


def _block_oracle(w: dict[str, torch.Tensor], heads: int, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """nn.TransformerDecoderLayer with the block's weights on a case's inputs (causal when it has a self_mask)."""
    memory_mask = inputs.get("memory_mask")
    return _torch_decoder(w, "", heads, inputs["x"], inputs["memory"], "self_mask" in inputs,
                          None if memory_mask is None else memory_mask[:, 0])


def _block_mistakes(w: dict[str, torch.Tensor], heads: int,
                    inputs: dict[str, torch.Tensor]) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        return [(m, _block_variant(w, heads, inputs["x"], inputs["memory"], inputs.get("self_mask"),
                                   inputs.get("memory_mask"), **switches)) for m, switches in _BLOCK_MISTAKES]


# ---------------------------------------------------------------- DecoderBlock

_DECODER_HINT = ("x = norm1(x + self_attention(x, mask=self_mask)); x = norm2(x + cross_attention(x, context=memory, "
               "mask=memory_mask)); return norm3(x + ff(x)).")
_MASK_SHAPE_HINT = ("Masks are bool and broadcast to (b, t, t) for self-attention and to (b, t, s) for "
                    "cross-attention; pass them on to MultiHeadAttention unchanged (mask=...).")
_MEMORY_GRADIENT_HINT = ("Cross-attention must read memory (cross_attention(x, context=memory, ...)), or the "
                         "encoder would never learn.")


def _block_structure(ev: Evidence, key: str, k: int, heads: int, ff_mult: int) -> None:
    """The attributes the notebook names, of the right kinds and sizes, and no others with parameters."""
    __tracebackhide__ = True
    modules.built(ev, key, f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}, dropout=0.0)")
    attention = [modules.expect_part(ev, key, BLOCK_NAME, n, "MultiHeadAttention", "MultiHeadAttention(k, heads)")
                 for n in ("self_attention", "cross_attention")]
    if attention[1].get("same_as") == "self_attention":
        fail(f"{BLOCK_NAME}.self_attention and .cross_attention are the same module. Reading the target and reading "
             "the source are different jobs: create two MultiHeadAttention modules.", mistake=SHARED_ATTENTION)
    described = modules.described(ev, key)
    for name, fact in zip(("self_attention", "cross_attention"), attention, strict=False):
        size, count = described.get(f"{name}.to_queries", {}).get("in_features"), fact.get("heads", heads)
        if (size, count) != (k, heads):
            fail(f"{BLOCK_NAME}'s attention has k={size}, heads={count}; with DecoderBlock({k}, {heads}) it should be "
                 f"MultiHeadAttention({k}, {heads}).", mistake=WRONG_SIZE)
    norms = [modules.expect_part(ev, key, BLOCK_NAME, n, "LayerNorm", "nn.LayerNorm(k)")
             for n in ("norm1", "norm2", "norm3")]
    if any(n.get("same_as") for n in norms):
        fail(f"Two of {BLOCK_NAME}.norm1, norm2, norm3 are the same module: each sublayer needs its own LayerNorm(k).",
             mistake=SHARED_NORM)
    for name in ("norm1", "norm2", "norm3"):
        shape = described.get(name, {}).get("shape")
        if shape != [k]:
            fail(f"{BLOCK_NAME}.{name} normalizes shape {shape}; it should be nn.LayerNorm({k}).", mistake=WRONG_SIZE)
    modules.expect_part(ev, key, BLOCK_NAME, "ff", "FeedForward", "FeedForward(k, ff_mult * k)")
    first = described.get("ff.net.0", {})
    if (first.get("in_features"), first.get("out_features")) != (k, ff_mult * k):
        fail(f"{BLOCK_NAME}.ff maps {first.get('in_features')} -> {first.get('out_features')} features first; with "
             f"k={k} and ff_mult={ff_mult} it should be FeedForward(k, ff_mult * k) = FeedForward({k}, "
             f"{ff_mult * k}).", mistake=WRONG_SIZE)
    expected = 2 * (4 * k * k + k) + 3 * 2 * k + 2 * ff_mult * k * k + ff_mult * k + k
    count = modules.parameter_count(ev, key)
    if count != expected:
        fail(f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}) has {count} parameters; two attentions, three norms and "
             f"the feed-forward make {expected}. Is an extra layer registered?", mistake=PARAMETER_COUNT)


def _block_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The structure of the block built (args (k, heads, ff_mult)), then the weights the probe loaded."""
    __tracebackhide__ = True
    k, heads, ff_mult = built.args
    _block_structure(ev, built.key, k, heads, ff_mult)
    return modules.expect_parameters(ev, built.key, f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})",
                                     _block_shapes("", k, ff_mult), built.seed, hint=modules.PARTS_HINT)


def _block_output(ev: Evidence, case: Case, hints: dict | None = None) -> torch.Tensor:
    __tracebackhide__ = True
    inputs = case.inputs()
    return output(ev, case.key, what=f"{BLOCK_NAME}.forward({', '.join(inputs)})", shape=tuple(inputs["x"].shape),
                  shape_hints=hints, hint=_MASK_SHAPE_HINT)


def _anchor_block(ev: Evidence, y: torch.Tensor, w, heads: int, case: Case, claim: str) -> None:
    """Rule 2: the output is what the block, right or typically wrong, computes with the check's weights."""
    __tracebackhide__ = True
    inputs = dict(case.inputs())
    with torch.no_grad():
        expected = _block_oracle(w, heads, inputs)
    if not matches_any(y, [expected, *(m for _, m in _block_mistakes(w, heads, inputs))], ev.device):
        fail(f"{claim}, but it is not a decoder block with the check's weights: " + _DECODER_HINT, expected, y,
             case=case.label)


def _expect_block_gradients(ev: Evidence, w: dict[str, torch.Tensor], heads: int, case: Case) -> None:
    """The output of case is in autograd's graph, and x, memory and every parameter got autograd's gradient
    through nn.TransformerDecoderLayer (or through the typical mistake the output is)."""
    __tracebackhide__ = True
    y = _block_output(ev, case)
    modules.expect_differentiable(ev, case.key, f"{BLOCK_NAME}.forward")
    inputs = dict(case.inputs())
    masks = {name: inputs.pop(name) for name in ("self_mask", "memory_mask")}

    def forward(leaves, x, memory, **switches):
        if not switches:
            return _block_oracle(leaves, heads, {"x": x, "memory": memory, **masks})
        return _block_variant(leaves, heads, x, memory, masks["self_mask"], masks["memory_mask"], **switches)

    because, chosen = None, {}
    with torch.no_grad():
        if not matches_any(y, [forward(w, **inputs)], ev.device):
            because, chosen = next(((m, dict(sw)) for m, sw in _BLOCK_MISTAKES
                                    if matches_any(y, [forward(w, **inputs, **sw)], ev.device)), (None, {}))
    expected = modules.autograd(lambda leaves, x, memory: forward(leaves, x, memory, **chosen), w, inputs,
                                case.upstream())
    modules.expect_gradients(ev, expected, owner=f"{BLOCK_NAME}.forward", case=case.label, because=because,
                             oracle="nn.TransformerDecoderLayer with the same weights",
                             hints={"memory": _MEMORY_GRADIENT_HINT})


def _against_block(check: DecoderCheck, *, passed: str, claim: str = "") -> None:
    """Register the judge of a DecoderBlock check: for each block built, its structure and weights, then every
    case against nn.TransformerDecoderLayer with those weights (naming the typical mistake it matches), or only
    anchored to a decoder block's output (claim: what the check shows); a case with an upstream gradient has its
    gradients compared with autograd."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for run in check.runs:
            w = _block_weights(ev, run.module)
            heads = run.module.args[1]
            for case in run.cases:
                if case.upstream is not None:
                    _expect_block_gradients(ev, w, heads, case)
                    continue
                y = _block_output(ev, case)
                if claim:
                    _anchor_block(ev, y, w, heads, case, claim)
                    continue
                inputs = dict(case.inputs())
                with torch.no_grad():
                    expected = _block_oracle(w, heads, inputs)
                expect_close_batch(y, expected, what=f"{BLOCK_NAME}.forward", device=ev.device, case=case.label,
                                   mistakes=_block_mistakes(w, heads, inputs), otherwise=_DECODER_HINT)

    judged.__doc__ = judged.passed = passed
    judge(check.name)(judged)


_against_block(probes.decoder_block_structure, claim=f"{BLOCK_NAME} has the right parts",
               passed="self_attention and cross_attention (two MultiHeadAttention), norm1-3 (LayerNorm(k)), ff "
                      "(FeedForward).")
_against_block(probes.decoder_block_oracle, passed="Random weights and inputs against nn.TransformerDecoderLayer "
                                                   "(post-norm, ReLU) with the same weights.")
_against_block(probes.decoder_block_small_case,
               passed="k=4, 2 heads, a target of 3 and a source of 5 positions (the second with 2 padded): the block "
                      "against nn.TransformerDecoderLayer with the same weights, with the causal and the padding "
                      "mask; a loss on the output sends autograd's gradient to x, memory and every parameter.")


@judge("decoder_block_causality")
def _judge_block_causality(ev: Evidence) -> None:
    """(b, t, k) out for (b, t, k) in; with a causal self_mask, changing a later position never changes earlier
    ones."""
    (run,) = probes.decoder_block_causality.runs
    w, heads = _block_weights(ev, run.module), run.module.args[1]
    case, changed = run.cases
    b, s, k = case.inputs()["memory"].shape
    hints = {(b, s, k): "One output per memory position: are x and memory swapped in cross-attention? The queries "
                        "come from x."}
    y = _block_output(ev, case, hints)
    y_changed = _block_output(ev, changed, hints)
    expect_causal(ev, y, y_changed, 3, f"{BLOCK_NAME}.forward with a causal self_mask",
                  _block_mistakes(w, heads, dict(case.inputs())), "The block reads the future: pass self_mask to "
                  "self-attention (self_attention(x, mask=self_mask)).", BLOCK_NOT_CAUSAL)
    _anchor_block(ev, y, w, heads, case, f"{BLOCK_NAME} is causal")


@judge("decoder_block_padding_gradients")
def _judge_block_padding(ev: Evidence) -> None:
    """Extra masked memory positions change nothing; a loss reaches every parameter, x and memory, as autograd
    through nn.TransformerDecoderLayer gives it."""
    (run,) = probes.decoder_block_padding_gradients.runs
    w, heads = _block_weights(ev, run.module), run.module.args[1]
    case, longer, with_gradient = run.cases
    y = _block_output(ev, case)
    y_longer = _block_output(ev, longer)
    if not matches_any(y_longer, [y], ev.device):
        inputs = dict(case.inputs())
        memory_not_masked = _block_variant(w, heads, inputs["x"], inputs["memory"], inputs["self_mask"], None,
                                           cross_mask="none")
        fail(f"{BLOCK_NAME} reads padded memory positions: three more padded source positions (masked out by "
             "memory_mask) changed its output. Pass memory_mask to cross-attention.", y[:, :, 0], y_longer[:, :, 0],
             case="first feature, before and after adding padding",
             mistake=BLOCK_MEMORY_NOT_MASKED.id if matches_any(y, [memory_not_masked.detach()], ev.device)
             else BLOCK_READS_PADDING)
    _anchor_block(ev, y, w, heads, case, f"{BLOCK_NAME} ignores padded memory")
    _expect_block_gradients(ev, w, heads, with_gradient)


def _sinusoids(t: int, k: int) -> torch.Tensor:
    """The sinusoidal table of assignment 06, computed here independently: (t, k)."""
    position = torch.arange(t, dtype=torch.float64).unsqueeze(1)  # (t, 1)
    rate = 10000.0 ** (-torch.arange(0, k, 2, dtype=torch.float64) / k)  # (k/2,)
    table = torch.zeros(t, k, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table.to(torch.float32)


def _model_oracle(w: dict[str, torch.Tensor], case: ModelCase, src, tgt, lengths, *, src_positions=True,
                  tgt_positions=True, encoder_mask=True, memory_mask=True, causal=True, use_encoder=True,
                  tgt_embedding="tgt", scaled=False, softmax=False) -> torch.Tensor:
    """PyTorch's encoder and decoder layers with the check's weights; the keywords switch typical mistakes on."""
    s, t, k, heads, depth = src.shape[1], tgt.shape[1], case.k, case.heads, case.depth
    scale = math.sqrt(k) if scaled else 1.0
    pad = _padding(lengths, s)
    x = F.embedding(src, w["src_embedding.weight"]) * scale
    if src_positions:
        x = x + _sinusoids(s, k)
    if use_encoder:
        for i in range(depth):
            x = _torch_encoder(w, f"encoder.{i}.", heads, x, pad if encoder_mask else None)
    memory = x
    table = w["tgt_embedding.weight"] if tgt_embedding == "tgt" else w["src_embedding.weight"]
    y = F.embedding(tgt, table) * scale
    if tgt_positions:
        y = y + _sinusoids(t, k)
    for i in range(depth):
        y = _torch_decoder(w, f"decoder.{i}.", heads, y, memory, causal, pad if memory_mask else None)
    logits = F.linear(y, w["to_logits.weight"], w["to_logits.bias"])
    return F.softmax(logits, dim=-1) if softmax else logits


_MODEL_MISTAKES = ((MODEL_SOFTMAX, MappingProxyType({"softmax": True})),
                   (MODEL_NOT_CAUSAL, MappingProxyType({"causal": False})),
                   (MODEL_MEMORY_NOT_MASKED, MappingProxyType({"memory_mask": False})),
                   (MODEL_ENCODER_NOT_MASKED, MappingProxyType({"encoder_mask": False})),
                   (MODEL_PADDING_NOT_MASKED, MappingProxyType({"encoder_mask": False, "memory_mask": False})),
                   (MODEL_NO_TARGET_POSITIONS, MappingProxyType({"tgt_positions": False})),
                   (MODEL_NO_SOURCE_POSITIONS, MappingProxyType({"src_positions": False})),
                   (MODEL_MEMORY_IS_EMBEDDINGS, MappingProxyType({"use_encoder": False})),
                   (MODEL_SCALED_EMBEDDINGS, MappingProxyType({"scaled": True})),
                   (MODEL_TARGET_SOURCE_EMBEDDING, MappingProxyType({"tgt_embedding": "src"})))


def _model_mistake_switches(case: ModelCase, tgt: torch.Tensor) -> list[tuple[Mistake, dict]]:
    return [(m, dict(sw)) for m, sw in _MODEL_MISTAKES
            if m is not MODEL_TARGET_SOURCE_EMBEDDING or int(tgt.max()) < case.src_vocab]


def _model_mistakes(w, case, src, tgt, lengths) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        return [(m, _model_oracle(w, case, src, tgt, lengths, **sw)) for m, sw in _model_mistake_switches(case, tgt)]


_MODEL_HINT = ("encode: x = positions(src_embedding(src)), then every encoder block with mask src_mask[:, None, :]; "
               "decode: y = positions(tgt_embedding(tgt)), every decoder block with self_mask = causal_mask(t) and "
               "memory_mask = src_mask[:, None, :], then to_logits.")
_MODEL_CALL_HINT = ("If the error is about sizes inside attention: a (b, s) padding mask must reach "
                    "MultiHeadAttention as (b, 1, s) — src_mask.unsqueeze(1) — so that it broadcasts over the queries.")


def _model_structure(ev: Evidence, key: str, case: ModelCase) -> None:
    __tracebackhide__ = True
    src_vocab, tgt_vocab, k, heads, depth, max_len = (case.src_vocab, case.tgt_vocab, case.k, case.heads,
                                                      case.depth, case.max_len)
    what = MODEL_NAME
    modules.built(ev, key, f"{MODEL_NAME}({src_vocab}, {tgt_vocab}, k={k}, heads={heads}, depth={depth}, "
                           f"max_len={max_len})")
    modules.expect_part(ev, key, what, "src_embedding", "Embedding", "nn.Embedding(src_vocab_size, k)")
    tgt_embedding = modules.expect_part(ev, key, what, "tgt_embedding", "Embedding", "nn.Embedding(tgt_vocab_size, k)")
    if tgt_embedding.get("same_as") == "src_embedding":
        fail(f"{what}.src_embedding and .tgt_embedding are the same module: source and target have different "
             "vocabularies, so each needs its own nn.Embedding.", mistake=SHARED_EMBEDDING)
    described = modules.described(ev, key)
    for name, size in (("src_embedding", src_vocab), ("tgt_embedding", tgt_vocab)):
        emb = described.get(name, {})
        if (emb.get("num_embeddings"), emb.get("embedding_dim")) != (size, k):
            fail(f"{what}.{name} is nn.Embedding({emb.get('num_embeddings')}, {emb.get('embedding_dim')}); it should "
                 f"be nn.Embedding({size}, {k}) here. Are the source and target vocabulary sizes swapped?",
                 mistake=WRONG_SIZE)
    modules.expect_part(ev, key, what, "positions", "PositionalEncoding", "PositionalEncoding(k, max_len, dropout)")
    encoder = modules.expect_part(ev, key, what, "encoder", "ModuleList",
                                  "nn.ModuleList of `depth` TransformerBlock(k, heads)")
    decoder = modules.expect_part(ev, key, what, "decoder", "ModuleList",
                                  "nn.ModuleList of `depth` DecoderBlock(k, heads)")
    for name, blocks in (("encoder", encoder), ("decoder", decoder)):
        items = blocks.get("items")
        if not isinstance(items, list) or len(items) != depth:
            fail(f"{what}.{name} holds {len(items) if isinstance(items, list) else '?'} blocks; with depth={depth} it "
                 f"should hold {depth}.", mistake=WRONG_DEPTH)
    for item in encoder["items"]:
        if item != "TransformerBlock":
            fail(f"{what}.encoder holds a {str(item)[:60]}; it should hold course TransformerBlock(k, heads).",
                 mistake=WRONG_PART_TYPE)
    like = decoder.get("decoder_like")
    if not isinstance(like, list) or not all(v is True for v in like):
        fail(f"{what}.decoder holds something other than DecoderBlocks; it should hold your DecoderBlock(k, heads).",
             mistake=WRONG_PART_TYPE)
    if ev.facts[f"{key}.parts"].get("distinct_blocks") != 2 * depth:
        fail(f"{what} reuses one block several times: create a new block for every layer, or the layers share "
             "weights.", mistake=SHARED_BLOCK)
    modules.expect_part(ev, key, what, "to_logits", "Linear", "nn.Linear(k, tgt_vocab_size)")
    to_logits = described.get("to_logits", {})
    if (to_logits.get("in_features"), to_logits.get("out_features")) != (k, tgt_vocab):
        fail(f"{what}.to_logits maps {to_logits.get('in_features')} -> {to_logits.get('out_features')}; it should be "
             f"nn.Linear({k}, {tgt_vocab}): one logit per target token.", mistake=WRONG_SIZE)


def _model_weights(ev: Evidence, run: ModelRun) -> dict[str, torch.Tensor]:
    """The structure of the model the run built, then the weights the probe loaded."""
    __tracebackhide__ = True
    case = run.case
    _model_structure(ev, run.key, case)
    return modules.expect_parameters(ev, run.key, MODEL_NAME,
                                     _model_shapes(case.src_vocab, case.tgt_vocab, case.k, case.depth), run.seed,
                                     hint=modules.PARTS_HINT)


def _logits(ev: Evidence, key: str, case: ModelCase, t: int | None = None) -> torch.Tensor:
    __tracebackhide__ = True
    b, s, t_case, tgt_vocab, k = case.b, case.s, case.t, case.tgt_vocab, case.k
    t = t_case if t is None else t
    return output(ev, key, what=f"{MODEL_NAME}.forward(src, tgt, src_mask)", shape=(b, t, tgt_vocab),
                  hint=_MODEL_CALL_HINT, shape_hints={
                      (b, t, k): "Those are the decoder's states: map them to logits with to_logits.",
                      (b, s, tgt_vocab): "One output per source position: the decoder must produce one per target "
                                         "position."})


def _anchor_model(ev: Evidence, logits: torch.Tensor, w, case, src, tgt, lengths, claim: str) -> None:
    __tracebackhide__ = True
    with torch.no_grad():
        expected = _model_oracle(w, case, src, tgt, lengths)
        candidates = [expected, *(m for _, m in _model_mistakes(w, case, src, tgt, lengths))]
    if not matches_any(logits, candidates, ev.device):
        fail(f"{claim}, but it is not an encoder-decoder transformer with the check's weights: " + _MODEL_HINT,
             expected, logits, case=f"src {tuple(src.shape)}, tgt {tuple(tgt.shape)}")


@judge("seq2seq_structure")
def _judge_model_structure(ev: Evidence) -> None:
    """The named parts; forward gives (b, t, tgt_vocab) logits; encode gives (b, s, k)."""
    run = probes.STRUCTURE_RUN
    case = run.case
    b, s, k = case.b, case.s, case.k
    w = _model_weights(ev, run)
    src, tgt, lengths = run.inputs()
    output(ev, "memory", what=f"{MODEL_NAME}.encode(src, src_mask)", shape=(b, s, k), hint=_MODEL_CALL_HINT)
    logits = _logits(ev, "logits", case)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} has the right parts and shapes")


@judge("seq2seq_causality")
def _judge_model_causality(ev: Evidence) -> None:
    """Changing a later target token never changes the logits at earlier positions."""
    case = probes.CAUSALITY_RUN.case
    w = _model_weights(ev, probes.CAUSALITY_RUN)
    src, tgt, lengths = probes.CAUSALITY_RUN.inputs()
    logits = _logits(ev, "logits", case)
    for j in _CAUSAL_POSITIONS:
        expect_causal(ev, logits, _logits(ev, f"logits_changed{j}", case), j, f"{MODEL_NAME}.forward on targets",
                      _model_mistakes(w, case, src, tgt, lengths), "In training the model could read the answer: "
                      "pass causal_mask(t) as self_mask to every decoder block.", MODEL_READS_FUTURE)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} is causal")


@judge("seq2seq_oracle")
def _judge_model_oracle(ev: Evidence) -> None:
    """Random weights against PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with the same
    weights; decode(tgt, encode(src, src_mask), src_mask) equals forward."""
    for i, run in enumerate(probes.ORACLE_RUNS):
        case = run.case
        b, s, t, tgt_vocab, k, heads, depth = case.b, case.s, case.t, case.tgt_vocab, case.k, case.heads, case.depth
        w = _model_weights(ev, run)
        src, tgt, lengths = run.inputs()
        logits = _logits(ev, f"logits{i}", case)
        with torch.no_grad():
            expected = _model_oracle(w, case, src, tgt, lengths)
        expect_close_batch(logits, expected, what=f"{MODEL_NAME}.forward", device=ev.device,
                            mistakes=_model_mistakes(w, case, src, tgt, lengths), otherwise=_MODEL_HINT,
                            case=f"b={b}, s={s}, t={t}, k={k}, heads={heads}, depth={depth}, source lengths "
                                 f"{lengths.tolist()}")
        output(ev, f"memory{i}", what=f"{MODEL_NAME}.encode", shape=(b, s, k))
        decoded = output(ev, f"decoded{i}", what=f"{MODEL_NAME}.decode", shape=(b, t, tgt_vocab))
        if not matches_any(decoded, [logits], ev.device):
            fail(f"{MODEL_NAME}.decode(tgt, encode(src, src_mask), src_mask) differs from forward(src, tgt, src_mask). "
                 "forward must equal decode(tgt, encode(src, src_mask), src_mask): greedy decoding encodes once and "
                 "decodes step by step.", logits[0, :, 0], decoded[0, :, 0], case="first logit of sequence 0",
                 mistake=DECODE_INCONSISTENT)


@judge("seq2seq_padding")
def _judge_model_padding(ev: Evidence) -> None:
    """More padding on the source (filled with arbitrary tokens, masked out) never changes the logits."""
    case = probes.PADDING_RUN.case
    w = _model_weights(ev, probes.PADDING_RUN)
    src, tgt, lengths = probes.PADDING_RUN.inputs()
    logits = _logits(ev, "logits", case)
    longer = _logits(ev, "logits_longer", case)
    if not matches_any(longer, [logits], ev.device):
        named = [m for m, out in _model_mistakes(w, case, src, tgt, lengths) if matches_any(logits, [out], ev.device)]
        fail(f"{MODEL_NAME} reads the source padding: four more padded positions (masked out by src_mask) changed "
             "the logits. Pass src_mask shaped (b, 1, s) to every encoder block AND as memory_mask to every decoder "
             "block.", logits[0, :, 0], longer[0, :, 0], case="first logit of sequence 0, before and after",
             mistake=named[0].id if named else MODEL_READS_PADDING)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} ignores the source padding")


def _expect_model_gradients(ev: Evidence, run: ModelRun, case_text: str, *, strict: bool) -> None:
    """The run's logits against PyTorch's layers (strict), or only an encoder-decoder's output, right or typically
    wrong (the mistake named by another check); then in autograd's graph, every parameter with autograd's gradient
    through PyTorch's layers (or through the typical mistake the logits are)."""
    __tracebackhide__ = True
    case = run.case
    w = _model_weights(ev, run)
    src, tgt, lengths = run.inputs()
    logits = _logits(ev, "logits", case)
    with torch.no_grad():
        expected = _model_oracle(w, case, src, tgt, lengths)
    if strict:
        expect_close_batch(logits, expected, what=f"{MODEL_NAME}.forward", device=ev.device, otherwise=_MODEL_HINT,
                           mistakes=_model_mistakes(w, case, src, tgt, lengths), case=case_text)
    else:
        modules.expect_attached(ev, "logits", f"{MODEL_NAME}.forward")
        _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} passes gradients")
    modules.expect_differentiable(ev, "logits", f"{MODEL_NAME}.forward")
    because, chosen = None, {}
    with torch.no_grad():
        if not matches_any(logits, [expected], ev.device):
            because, chosen = next(((m, sw) for m, sw in _model_mistake_switches(case, tgt) if matches_any(
                logits, [_model_oracle(w, case, src, tgt, lengths, **sw)], ev.device)), (None, {}))
    expected = modules.autograd(lambda leaves: _model_oracle(leaves, case, src, tgt, lengths, **chosen), w, {},
                                randn(case.b, case.t, case.tgt_vocab, seed=run.upstream))
    hints = {name: "Is memory the output of the encoder blocks?" for name in w
             if name.startswith("encoder") or name.startswith("src")}
    modules.expect_gradients(ev, expected, owner=MODEL_NAME, case=case_text, because=because, hints=hints,
                             oracle="PyTorch's encoder and decoder layers with the same weights")


@judge("seq2seq_gradients")
def _judge_model_gradients(ev: Evidence) -> None:
    """A loss on the logits sends a gradient to every parameter (embeddings, encoder, decoder, output layer), as
    autograd through PyTorch's layers gives it."""
    _expect_model_gradients(ev, probes.GRADIENT_RUN, "the logits of a random batch", strict=False)


@judge("seq2seq_small_case")
def _judge_model_small_case(ev: Evidence) -> None:
    """A small model and batch (k=4, depth=2, source lengths 5 and 3) against PyTorch's encoder and decoder layers
    with the same weights; a loss on the logits sends autograd's gradient to every parameter."""
    _expect_model_gradients(ev, probes.SMALL_RUN, "src (2, 5) with lengths [5, 3], tgt (2, 4), k=4, heads=2, depth=2",
                            strict=True)


# ---------------------------------------------------------------- the loss

def _translator_logits(feed: str, model: nn.Module, src, src_mask, tgt, pad) -> torch.Tensor:
    """The stand-in model's logits (b, n, vocab) on the targets it reads: tgt[:, :-1] for the logits that predict
    tgt[:, 1:] ("shifted"), tgt itself ("unshifted"), tgt[:, 1:] ("backwards")."""
    read = {"shifted": tgt[:, :-1], "unshifted": tgt, "backwards": tgt[:, 1:]}[feed]
    return model(src, read, src_mask)


TEACHER_FORCING = LossOracle(
    LOSS_NAME, _translator_logits, tokens="tgt", pad="pad",
    # first: with pad != 0 and no label 0, ignoring 0 and ignoring nothing give the same number
    mistakes=(LOSS_PAD_HARD_CODED, LOSS_NOT_SHIFTED, LOSS_COUNTS_PADDING, LOSS_WRONG_SHIFT, LOSS_SUM,
              LOSS_PER_SEQUENCE, LOSS_SOFTMAX),
    hint="logits = model(src, tgt[:, :-1], src_mask); loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], "
         "ignore_index=pad). F.cross_entropy wants the classes in dimension 1.",
    name="F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)")

against_loss(probes.loss_oracle, TEACHER_FORCING,
             passed="Targets of different lengths: the mean cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1], "
                    "padding ignored.")
against_loss(probes.loss_gradients, TEACHER_FORCING,
             passed="A padding id other than 0 (here 4), and a loss that trains the model: its gradients are "
                    "autograd's through F.cross_entropy.")
against_loss(probes.loss_hidden, TEACHER_FORCING, passed="Other batches, with padding ids 0 and 5.")


def _step_by_step(model: nn.Module, src, src_mask, max_len: int, bos: int, eos: int, *, position: int = -1,
                  pad_after_eos: bool = True, stop: bool = True) -> torch.Tensor:
    """The oracle: run the whole model on the prefix, append the argmax at `position`, stop at eos."""
    b = src.shape[0]
    tokens = torch.full((b, 1), bos, dtype=torch.long)
    finished = torch.zeros(b, dtype=torch.bool)
    rows = []
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, position].argmax(dim=-1)  # (b,)
            if pad_after_eos:
                nxt = torch.where(finished, torch.full_like(nxt, PAD_ID), nxt)
            rows.append(nxt)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if stop and bool(finished.all()):
                break
    return torch.stack(rows, dim=1)  # (b, n)


def _fit(tokens: torch.Tensor, width: int) -> torch.Tensor:
    if tokens.shape[1] >= width:
        return tokens[:, :width]
    fill = torch.full((tokens.shape[0], width - tokens.shape[1]), PAD_ID, dtype=tokens.dtype)
    return torch.cat([tokens, fill], dim=1)


def _decode_mistakes(model, src, src_mask, max_len, expected, width) -> list[tuple[Mistake, torch.Tensor]]:
    """What typical wrong decoders return, cut or padded to the student's width."""
    b = src.shape[0]
    target = _fit(expected, width)
    out = [
        (DECODE_NEVER_STOPS, _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID, pad_after_eos=False,
                                           stop=False)),
        (DECODE_RETURNS_BOS, torch.cat([torch.full((b, 1), BOS_ID, dtype=torch.long), expected], dim=1)),
        (DECODE_EOS_PADDED, torch.where(target == PAD_ID, torch.full((), EOS_ID), target)),
        (DECODE_EOS_OVERWRITTEN, torch.where(target == EOS_ID, torch.full((), PAD_ID), target)),
        (DECODE_FORGETS_BOS, _step_by_step(model, src, src_mask, max_len, PAD_ID, EOS_ID)),
        (DECODE_FIRST_POSITION, _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID, position=0)),
    ]
    return [(m, _fit(v, width)) for m, v in out]


_DECODE_HINT = ("Start every sequence with <bos>; at each step run the model on what you have, take the argmax of "
                "the LAST position, append it; once a sequence has written <eos>, append <pad> (0) to it; stop when "
                "all sequences are finished or after max_len steps. Return the tokens without the <bos>.")


def _expect_decode(ev: Evidence, case: DecodeCase) -> None:
    """The tokens recorded for case against the step-by-step argmax of its model, naming the typical mistake."""
    __tracebackhide__ = True
    model, src, lengths = case.source()
    max_len, label = case.max_len, case.label.format(lengths=lengths.tolist(), max_len=case.max_len)
    src_mask = _padding(lengths, src.shape[1])
    expected = _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID)  # (b, n)
    out = output(ev, case.key, what=DECODE_NAME, floating=False, hint=_DECODE_HINT)
    if out.dtype != torch.long:
        fail(f"{DECODE_NAME} returned dtype {out.dtype}; token ids are torch.long (argmax gives them).",
             mistake=DECODE_NOT_IDS)
    b, n = expected.shape
    if out.dim() != 2 or out.shape[0] != b:
        fail(f"{DECODE_NAME} returned shape {tuple(out.shape)}; expected (b, n) = ({b}, n) with n <= max_len.",
             mistake=WRONG_SHAPE)
    width = out.shape[1]
    mistakes = _decode_mistakes(model, src, src_mask, max_len, expected, width)
    if width > max_len:
        if torch.equal(out, mistakes[1][1]):
            fail(f"{DECODE_NAME} is not what was asked: {DECODE_RETURNS_BOS.explanation}", Rows(expected),
                 Rows(out), label, DECODE_RETURNS_BOS.id)
        fail(f"{DECODE_NAME} returned {width} tokens per sequence, more than max_len={max_len}. Generate at most "
             "max_len tokens, and do not return the <bos>.", Rows(expected), Rows(out), label, DECODE_TOO_LONG)
    if width < n:
        fail(f"{DECODE_NAME} stopped after {width} tokens, but a sequence had not written <eos> yet (it needs {n}). "
             "Stop only when every sequence is finished, or after max_len steps.", Rows(expected), Rows(out), label,
             DECODE_STOPS_EARLY)
    expect_equal(out, _fit(expected, width), what=DECODE_NAME, mistakes=mistakes, otherwise=_DECODE_HINT, case=label,
                 differs="does not agree with the step-by-step argmax of the model")


_against_cases(probes.greedy_decode_scripted, _expect_decode,
               passed="A stand-in model whose greedy output is known: each sequence stops at its <eos>, padded with 0 "
                      "after it.")
_against_cases(probes.greedy_decode_step_by_step, _expect_decode,
               passed="A random stand-in translator against the step-by-step argmax; and max_len cuts long outputs.")
