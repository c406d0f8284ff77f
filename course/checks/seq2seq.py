"""Checks for assignment 07: causal_mask, padding_mask, DecoderBlock, Seq2SeqTransformer, teacher_forcing_loss
and greedy_decode.

Each check is a probe (runs the student's code on inputs and weights chosen here) and a judge (decides from what
the probe recorded). Oracles: PyTorch's own nn.TransformerDecoderLayer and nn.TransformerEncoderLayer carrying
the check's weights (their boolean masks mean True = NOT allowed, so ours are inverted), F.cross_entropy, and a
step-by-step argmax over stand-in models defined here. Properties (causality, padding invariance) are anchored
to outputs the judge recomputes. See course/checks/check.py.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from course.checks import modules, oracles, weights
from course.checks.check import Check, with_prerequisites
from course.checks.compare import (
    Mistake,
    Rows,
    expect_close,
    expect_close_batch,
    expect_equal,
    fail,
    matches_any,
    output,
    raised,
    randn,
    value_kind,
)
from course.checks.evidence import Evidence, Recorder
from course.checks.modules import WRONG_PART_TYPE
from course.multi_head import MultiHeadAttention
from course.positional_encoding import PositionalEncoding
from course.transformer_block import FeedForward, TransformerBlock

CAUSAL_NAME = "causal_mask(t)"
PADDING_NAME = "padding_mask(lengths, t)"
BLOCK_NAME = "DecoderBlock"
MODEL_NAME = "Seq2SeqTransformer"
LOSS_NAME = "teacher_forcing_loss(model, src, src_mask, tgt, pad)"
DECODE_NAME = "greedy_decode(model, src, src_mask, max_len, bos, eos)"

BOS_ID, EOS_ID, PAD_ID = 1, 2, 0

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
DECODE_FORGETS_BOS = Mistake("greedy-forgets-bos", "the decoder does not start from <bos>: the first input of every "
                             "sequence is the <bos> token.")
DECODE_FIRST_POSITION = Mistake("greedy-first-position", "the next token is the argmax at the FIRST position of the "
                                "decoder's output; the prediction for the next token is at the LAST position: "
                                "logits[:, -1].argmax(-1).")

# ids of structure, property and format failures of this assignment (the shared ones: course/checks/modules.py)
FLOAT_MASK = "float-mask"
ADDITIVE_MASK = "additive-mask"
PADDING_TRANSPOSED = "padding-transposed"
MASK_DEVICE = "mask-wrong-device"
WRONG_SIZE = "wrong-size"
SHARED_ATTENTION = "block-shared-attention"
SHARED_NORM = "shared-norm"
SHARED_EMBEDDING = "shared-embedding"
SHARED_BLOCK = "shared-block"
WRONG_DEPTH = "wrong-depth"
PARAMETER_COUNT = "parameter-count"
BLOCK_NOT_CAUSAL = "block-not-causal"
BLOCK_READS_PADDING = "block-reads-padding"
MODEL_READS_FUTURE = "model-reads-future"
MODEL_READS_PADDING = "model-reads-padding"
DECODE_INCONSISTENT = "decode-inconsistent"
DECODE_TOO_LONG = "greedy-too-long"
DECODE_STOPS_EARLY = "greedy-stops-early"
DECODE_NOT_IDS = "greedy-not-ids"


# ---------------------------------------------------------------- masks

def _mask(ev: Evidence, key: str, *, what: str, shape: tuple[int, ...], device: str,
          hints: dict[tuple[int, ...], tuple[str, str | None]] | None = None) -> torch.Tensor:
    """The bool tensor the student's mask function returned, of this shape, on this device."""
    __tracebackhide__ = True
    raised(ev, key, what)
    kind = value_kind(ev, key)
    fact = ev.facts.get(key)
    if kind == "missing":
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    if kind != "tensor" or fact.get("type") != "Tensor" or key not in ev.tensors:
        shown = {"none": "None", "tuple": "a tuple"}.get(kind, str(fact.get("type"))[:60])
        fail(f"{what} should return a torch.Tensor, but returned {shown}.", mistake="not-a-tensor")
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
        hint, mistake = (hints or {}).get(tuple(value.shape), ("", "wrong-shape"))
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


def _probe_causal_by_hand(causal_mask, rec: Recorder) -> None:
    rec.call("mask", causal_mask, 4)


def _judge_causal_by_hand(ev: Evidence) -> None:
    """t = 4: the lower triangle, diagonal included, as bools."""
    mask = _mask(ev, "mask", what=CAUSAL_NAME, shape=(4, 4), device="cpu")
    expect_equal(mask, oracles.causal_mask(4), what=CAUSAL_NAME, mistakes=_causal_mistakes(4),
                       otherwise=_CAUSAL_HINT, case="t=4, shown as 0/1")


causal_mask_by_hand = Check("causal_mask_by_hand", _probe_causal_by_hand, _judge_causal_by_hand)

CAUSAL_LENGTHS = (3, 7, 1)


def _probe_causal_oracle(causal_mask, rec: Recorder) -> None:
    for t in CAUSAL_LENGTHS:
        rec.call(f"mask{t}", causal_mask, t, device=rec.device)
    rec.call("mask_default", causal_mask, 2)


def _judge_causal_oracle(ev: Evidence) -> None:
    """Several lengths, on the device asked and on the CPU by default; True where j <= i."""
    for t in CAUSAL_LENGTHS:
        what = f"causal_mask({t}, device={ev.device!r})"
        mask = _mask(ev, f"mask{t}", what=what, shape=(t, t), device=ev.device)
        expect_equal(mask, oracles.causal_mask(t), what=what, mistakes=_causal_mistakes(t),
                           otherwise=_CAUSAL_HINT, case=f"t={t}")
    mask = _mask(ev, "mask_default", what="causal_mask(2) without a device", shape=(2, 2), device="cpu")
    expect_equal(mask, oracles.causal_mask(2), what="causal_mask(2)", mistakes=_causal_mistakes(2),
                       otherwise=_CAUSAL_HINT, case="t=2")


causal_mask_oracle = Check("causal_mask_oracle", _probe_causal_oracle, _judge_causal_oracle)


def _padding(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: (b, t), True at positions p < lengths[i]."""
    return torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)


def _padding_mistakes(lengths: torch.Tensor, t: int) -> list[tuple[Mistake, torch.Tensor]]:
    good = _padding(lengths, t)
    return [(PADDING_INVERTED, ~good), (PADDING_ONE_TOO_MANY, _padding(lengths + 1, t)),
            (PADDING_ONE_TOO_FEW, _padding(lengths - 1, t))]


_PADDING_HINT = "Entry (i, p) is True exactly when p < lengths[i]: compare torch.arange(t) with lengths[:, None]."


def _padding_hints(b: int, t: int) -> dict[tuple[int, ...], tuple[str, str | None]]:
    return {(t, b): ("That is the transposed shape: one row per sequence, one column per position.",
                     PADDING_TRANSPOSED),
            (b, t, 1): ("Drop the trailing dimension; MultiHeadAttention gets it as mask.unsqueeze(1) later.",
                        "wrong-shape"),
            (b, 1, t): ("Return the plain (b, t) mask; the model adds the middle dimension when it attends.",
                        "wrong-shape")}


PADDING_BY_HAND = ((3, 1, 4), 5)
PADDING_CASES = (((2, 7, 5, 1), 7), ((4, 4), 9), ((6,), 6), ((1, 3, 2, 5, 4), 5))


def _probe_padding_by_hand(padding_mask, rec: Recorder) -> None:
    lengths, t = PADDING_BY_HAND
    rec.call("mask", padding_mask, torch.tensor(lengths), t)


def _judge_padding_by_hand(ev: Evidence) -> None:
    """lengths [3, 1, 4], t = 5."""
    lengths, t = torch.tensor(PADDING_BY_HAND[0]), PADDING_BY_HAND[1]
    mask = _mask(ev, "mask", what=PADDING_NAME, shape=(3, t), device="cpu", hints=_padding_hints(3, t))
    expect_equal(mask, _padding(lengths, t), what=PADDING_NAME, mistakes=_padding_mistakes(lengths, t),
                       otherwise=_PADDING_HINT, case="lengths=[3, 1, 4], t=5, shown as 0/1")


padding_mask_by_hand = Check("padding_mask_by_hand", _probe_padding_by_hand, _judge_padding_by_hand)


def _probe_padding_oracle(padding_mask, rec: Recorder) -> None:
    for i, (lengths, t) in enumerate(PADDING_CASES):
        rec.call(f"mask{i}", padding_mask, torch.tensor(lengths, device=rec.device), t)


def _judge_padding_oracle(ev: Evidence) -> None:
    """Several batches on the device: lengths from 1 to t, t larger than every length, a batch of one."""
    for i, (lengths_list, t) in enumerate(PADDING_CASES):
        lengths, b = torch.tensor(lengths_list), len(lengths_list)
        mask = _mask(ev, f"mask{i}", what=PADDING_NAME, shape=(b, t), device=ev.device, hints=_padding_hints(b, t))
        expect_equal(mask, _padding(lengths, t), what=PADDING_NAME, mistakes=_padding_mistakes(lengths, t),
                           otherwise=_PADDING_HINT, case=f"lengths={list(lengths_list)}, t={t}")


padding_mask_oracle = Check("padding_mask_oracle", _probe_padding_oracle, _judge_padding_oracle)


# ---------------------------------------------------------------- modules: the probe's side

#: course classes a part may be an instance of, most specific first
_KINDS = (("MultiHeadAttention", MultiHeadAttention), ("FeedForward", FeedForward),
          ("TransformerBlock", TransformerBlock), ("PositionalEncoding", PositionalEncoding),
          ("LayerNorm", nn.LayerNorm), ("Embedding", nn.Embedding), ("Linear", nn.Linear),
          ("ModuleList", nn.ModuleList))
BLOCK_PARTS = ("self_attention", "cross_attention", "norm1", "norm2", "norm3", "ff")
MODEL_PARTS = ("src_embedding", "tgt_embedding", "positions", "encoder", "decoder", "to_logits")
_DECODER_ATTRIBUTES = ("self_attention", "cross_attention", "ff", "norm3")


def _part_facts(module: nn.Module, names: tuple[str, ...]) -> dict:
    """modules.part_facts, with the items of each nn.ModuleList and whether they look like decoder blocks, and the
    number of distinct blocks of a model."""
    facts = modules.part_facts(module, names, _KINDS)
    for name in names:
        part = getattr(module, name, None)
        if isinstance(part, nn.ModuleList):
            facts[name]["items"] = [modules.kind(item, _KINDS) for item in part]
            facts[name]["decoder_like"] = [all(hasattr(item, n) for n in _DECODER_ATTRIBUTES) for item in part]
    blocks = [*getattr(module, "encoder", ()), *getattr(module, "decoder", ())] if "encoder" in names else []
    if blocks:
        facts["distinct_blocks"] = len({id(b) for b in blocks})
    return facts


def _build(cls: Callable, rec: Recorder, key: str, args: tuple, parts: tuple[str, ...], seed: int) -> nn.Module | None:
    """modules.build with dropout 0 and the named parts' facts, in evaluation mode, the check's weights loaded."""
    return modules.build(rec, key, cls, *args, dropout=0.0, seed=seed, facts=lambda m: {"parts": _part_facts(m, parts)},
                         train=False)


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


def _block_oracle(w, heads, x, memory, causal: bool, pad: torch.Tensor | None) -> torch.Tensor:
    return _torch_decoder(w, "", heads, x, memory, causal, pad)


def _block_mistakes(w, heads, x, memory, self_mask, memory_mask) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        return [(m, _block_variant(w, heads, x, memory, self_mask, memory_mask, **switches))
                for m, switches in _BLOCK_MISTAKES]


# ---------------------------------------------------------------- DecoderBlock

_BLOCK_HINT = ("x = norm1(x + self_attention(x, mask=self_mask)); x = norm2(x + cross_attention(x, context=memory, "
               "mask=memory_mask)); return norm3(x + ff(x)).")
_MASK_SHAPE_HINT = ("Masks are bool and broadcast to (b, t, t) for self-attention and to (b, t, s) for "
                    "cross-attention; pass them on to MultiHeadAttention unchanged (mask=...).")
BLOCK_STRUCTURES = ((8, 2, 4), (12, 3, 2))
# (b, t, s, k, heads, ff_mult): t != s, batch > 1, head size != k, odd lengths
BLOCK_CASES = ((3, 5, 7, 8, 2, 4), (2, 1, 4, 12, 3, 2), (1, 6, 3, 6, 1, 4), (2, 4, 9, 16, 4, 1))


def _block_inputs(b: int, t: int, s: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = randn(b, t, k, seed=seed)
    memory = randn(b, s, k, seed=seed + 1)
    lengths = torch.tensor([s - (i * 2) % s for i in range(b)]).clamp(min=1)
    return x, memory, lengths


def _make_block(DecoderBlock: Callable, rec: Recorder, key: str, k: int, heads: int, ff_mult: int,
                seed: int) -> nn.Module | None:
    return _build(lambda *a, **kw: DecoderBlock(*a, ff_mult=ff_mult, **kw), rec, key, (k, heads), BLOCK_PARTS, seed)


def _run_block(rec: Recorder, key: str, block: nn.Module, x, memory, self_mask=None, memory_mask=None) -> None:
    kwargs = {}
    if self_mask is not None:
        kwargs["self_mask"] = self_mask.to(rec.device)
    if memory_mask is not None:
        kwargs["memory_mask"] = memory_mask.to(rec.device)
    with torch.no_grad():
        rec.call(key, block, x.to(rec.device), memory.to(rec.device), **kwargs)


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


def _block_weights(ev: Evidence, key: str, k: int, heads: int, ff_mult: int, seed: int) -> dict[str, torch.Tensor]:
    __tracebackhide__ = True
    _block_structure(ev, key, k, heads, ff_mult)
    return modules.expect_parameters(ev, key, f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})",
                                     _block_shapes("", k, ff_mult), seed, hint=modules.PARTS_HINT)


def _anchor_block(ev: Evidence, y: torch.Tensor, w, heads, x, memory, pad: torch.Tensor | None, causal: bool,
                  claim: str) -> None:
    """Rule 2: the output is what the block, right or typically wrong, computes with the check's weights."""
    __tracebackhide__ = True
    self_mask = oracles.causal_mask(x.shape[1]) if causal else None
    memory_mask = None if pad is None else pad.unsqueeze(1)
    with torch.no_grad():
        expected = _block_oracle(w, heads, x, memory, causal, pad)
        candidates = [expected, *(m for _, m in _block_mistakes(w, heads, x, memory, self_mask, memory_mask))]
    if not matches_any(y, candidates, ev.device):
        fail(f"{claim}, but it is not a decoder block with the check's weights: " + _BLOCK_HINT, expected, y,
             case=f"x {tuple(x.shape)}, memory {tuple(memory.shape)}")


def _structure_case(k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, memory, _ = _block_inputs(2, 3, 4, k, 1000 + k)
    return x, memory, torch.tensor([4, 2])


def _probe_block_structure(DecoderBlock, rec: Recorder) -> None:
    for i, (k, heads, ff_mult) in enumerate(BLOCK_STRUCTURES):
        block = _make_block(DecoderBlock, rec, f"block{i}", k, heads, ff_mult, 1000 + i)
        if block is None:
            return
        x, memory, lengths = _structure_case(k)
        _run_block(rec, f"y{i}", block, x, memory, oracles.causal_mask(3), _padding(lengths, 4).unsqueeze(1))


def _judge_block_structure(ev: Evidence) -> None:
    """self_attention and cross_attention (two MultiHeadAttention), norm1-3 (LayerNorm(k)), ff (FeedForward)."""
    for i, (k, heads, ff_mult) in enumerate(BLOCK_STRUCTURES):
        w = _block_weights(ev, f"block{i}", k, heads, ff_mult, 1000 + i)
        x, memory, lengths = _structure_case(k)
        y = output(ev, f"y{i}", what=f"{BLOCK_NAME}.forward", shape=(2, 3, k), hint=_MASK_SHAPE_HINT)
        _anchor_block(ev, y, w, heads, x, memory, _padding(lengths, 4), True, f"{BLOCK_NAME} has the right parts")


decoder_block_structure = Check("decoder_block_structure", _probe_block_structure, _judge_block_structure)


_CAUSALITY_BLOCK = (2, 5, 7, 8, 2)  # b, t, s, k, heads


def _causality_inputs():
    b, t, s, k, _ = _CAUSALITY_BLOCK
    x, memory, lengths = _block_inputs(b, t, s, k, 1110)
    changed = x.clone()
    changed[:, 3:] = randn(b, t - 3, k, seed=1120)
    return x, changed, memory, lengths


def _probe_block_causality(DecoderBlock, rec: Recorder) -> None:
    _b, t, s, k, heads = _CAUSALITY_BLOCK
    block = _make_block(DecoderBlock, rec, "block", k, heads, 4, 1100)
    if block is None:
        return
    x, changed, memory, lengths = _causality_inputs()
    self_mask, memory_mask = oracles.causal_mask(t), _padding(lengths, s).unsqueeze(1)
    _run_block(rec, "y", block, x, memory, self_mask, memory_mask)
    _run_block(rec, "y_changed", block, changed, memory, self_mask, memory_mask)


def _judge_block_causality(ev: Evidence) -> None:
    """(b, t, k) out for (b, t, k) in; with a causal self_mask, changing a later position never changes earlier
    ones."""
    b, t, s, k, heads = _CAUSALITY_BLOCK
    w = _block_weights(ev, "block", k, heads, 4, 1100)
    x, _changed, memory, lengths = _causality_inputs()
    hints = {(b, s, k): "One output per memory position: are x and memory swapped in cross-attention? The queries "
                        "come from x."}
    y = output(ev, "y", what=f"{BLOCK_NAME}.forward(x, memory, self_mask, memory_mask)", shape=(b, t, k),
               shape_hints=hints, hint=_MASK_SHAPE_HINT)
    y_changed = output(ev, "y_changed", what=f"{BLOCK_NAME}.forward", shape=(b, t, k), shape_hints=hints)
    if not matches_any(y_changed[:, :3], [y[:, :3]], ev.device):
        pad = _padding(lengths, s)
        named = [m for m, out in _block_mistakes(w, heads, x, memory, oracles.causal_mask(t), pad.unsqueeze(1))
                 if matches_any(y, [out], ev.device)]
        fail(f"{BLOCK_NAME} is not causal: changing target positions 3 and 4 changed the outputs at positions 0-2. "
             "Pass self_mask to self-attention (self_attention(x, mask=self_mask))."
             + (f" The output matches another mistake: {named[0].explanation}" if named
                and named[0] is not BLOCK_SELF_MASK_IGNORED else ""),
             y[:, :3, 0], y_changed[:, :3, 0], case="outputs at positions 0-2 (first feature) before and after the "
             "change", mistake=named[0].id if named else BLOCK_NOT_CAUSAL)
    _anchor_block(ev, y, w, heads, x, memory, _padding(lengths, s), True, f"{BLOCK_NAME} is causal")


decoder_block_causality = Check("decoder_block_causality", _probe_block_causality, _judge_block_causality)


def _probe_block_oracle(DecoderBlock, rec: Recorder) -> None:
    for i, (b, t, s, k, heads, ff_mult) in enumerate(BLOCK_CASES):
        block = _make_block(DecoderBlock, rec, f"block{i}", k, heads, ff_mult, 1200 + 50 * i)
        if block is None:
            return
        x, memory, lengths = _block_inputs(b, t, s, k, 1230 + 10 * i)
        _run_block(rec, f"y{i}", block, x, memory, oracles.causal_mask(t), _padding(lengths, s).unsqueeze(1))
    block = _make_block(DecoderBlock, rec, "block_unmasked", 8, 2, 4, 1400)
    if block is not None:
        x, memory, _ = _block_inputs(2, 3, 5, 8, 1410)
        _run_block(rec, "y_unmasked", block, x, memory)


def _judge_block_oracle(ev: Evidence) -> None:
    """Random weights and inputs against nn.TransformerDecoderLayer (post-norm, ReLU) with the same weights."""
    for i, (b, t, s, k, heads, ff_mult) in enumerate(BLOCK_CASES):
        w = _block_weights(ev, f"block{i}", k, heads, ff_mult, 1200 + 50 * i)
        x, memory, lengths = _block_inputs(b, t, s, k, 1230 + 10 * i)
        pad = _padding(lengths, s)
        y = output(ev, f"y{i}", what=f"{BLOCK_NAME}.forward(x, memory, self_mask, memory_mask)", shape=(b, t, k),
                   hint=_MASK_SHAPE_HINT)
        with torch.no_grad():
            expected = _block_oracle(w, heads, x, memory, True, pad)
        expect_close_batch(y, expected, what=f"{BLOCK_NAME}.forward", device=ev.device,
                            mistakes=_block_mistakes(w, heads, x, memory, oracles.causal_mask(t), pad.unsqueeze(1)),
                            otherwise=_BLOCK_HINT,
                            case=f"b={b}, t={t}, s={s}, k={k}, heads={heads}, source lengths {lengths.tolist()}")
    # without masks (both None), as an encoder-free decoder or a test would call it
    w = _block_weights(ev, "block_unmasked", 8, 2, 4, 1400)
    x, memory, _ = _block_inputs(2, 3, 5, 8, 1410)
    y = output(ev, "y_unmasked", what=f"{BLOCK_NAME}.forward(x, memory)", shape=(2, 3, 8))
    with torch.no_grad():
        expected = _block_oracle(w, 2, x, memory, False, None)
    expect_close(y, expected, what=f"{BLOCK_NAME}.forward(x, memory) without masks", device=ev.device,
                 mistakes=[(m, o) for m, o in _block_mistakes(w, 2, x, memory, None, None)
                           if m not in (BLOCK_MEMORY_NOT_MASKED, BLOCK_SELF_MASK_IGNORED)],
                 otherwise=_BLOCK_HINT, case="no masks")


decoder_block_oracle = Check("decoder_block_oracle", _probe_block_oracle, _judge_block_oracle)


def _small_block_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (2, 3, 4), memory (2, 5, 4), source lengths [5, 3] and the upstream gradient (2, 3, 4)."""
    x, memory, _ = _block_inputs(2, 3, 5, 4, 1460)
    return x, memory, torch.tensor([5, 3]), randn(2, 3, 4, seed=1470)


def _probe_block_small_case(DecoderBlock, rec: Recorder) -> None:
    block = _make_block(DecoderBlock, rec, "block", 4, 2, 4, 1450)
    if block is None:
        return
    x, memory, lengths, upstream = _small_block_case()
    _run_block(rec, "y", block, x, memory, oracles.causal_mask(3), _padding(lengths, 5).unsqueeze(1))
    _probe_block_backward(rec, "y_grad", block, x, memory, lengths, upstream)


def _judge_block_small_case(ev: Evidence) -> None:
    """k=4, 2 heads, a target of 3 and a source of 5 positions (the second with 2 padded): the block against
    nn.TransformerDecoderLayer with the same weights, with the causal and the padding mask; a loss on the output
    sends autograd's gradient to x, memory and every parameter."""
    w = _block_weights(ev, "block", 4, 2, 4, 1450)
    x, memory, lengths, upstream = _small_block_case()
    pad = _padding(lengths, 5)
    y = output(ev, "y", what=f"{BLOCK_NAME}.forward(x, memory, self_mask, memory_mask)", shape=(2, 3, 4),
               hint=_MASK_SHAPE_HINT)
    with torch.no_grad():
        expected = _block_oracle(w, 2, x, memory, True, pad)
    case = "x (2, 3, 4), memory (2, 5, 4), source lengths [5, 3], heads=2"
    expect_close_batch(y, expected, what=f"{BLOCK_NAME}.forward", device=ev.device, otherwise=_BLOCK_HINT,
                        mistakes=_block_mistakes(w, 2, x, memory, oracles.causal_mask(3), pad.unsqueeze(1)), case=case)
    _expect_block_gradients(ev, "y_grad", w, 2, x, memory, lengths, upstream, case)


decoder_block_small_case = Check("decoder_block_small_case", _probe_block_small_case, _judge_block_small_case)


_PADDING_BLOCK = (2, 4, 5, 8, 2)  # b, t, s, k, heads


def _padding_block_inputs():
    b, t, s, k, _ = _PADDING_BLOCK
    x, memory, _ = _block_inputs(b, t, s, k, 1510)
    longer = torch.cat([memory, randn(b, 3, k, seed=1520)], dim=1)  # (b, s + 3, k): more padding
    return x, memory, longer, torch.tensor([5, 3]), randn(b, t, k, seed=1530)


def _probe_block_backward(rec: Recorder, key: str, block: nn.Module, x: torch.Tensor, memory: torch.Tensor,
                         lengths: torch.Tensor, upstream: torch.Tensor) -> None:
    """Record block(x, memory, causal, padding) in training mode and the gradients of sum(output · upstream) for
    x, memory and every parameter."""
    t, s = x.shape[1], memory.shape[1]
    block.train()
    x, memory = x.to(rec.device).requires_grad_(True), memory.to(rec.device).requires_grad_(True)
    modules.record_backward(rec, key, block, x, memory, self_mask=oracles.causal_mask(t).to(rec.device),
                            memory_mask=_padding(lengths, s).unsqueeze(1).to(rec.device),
                            loss=lambda y: (y * upstream.to(rec.device)).sum(), inputs={"x": x, "memory": memory})


def _expect_block_gradients(ev: Evidence, key: str, w: dict[str, torch.Tensor], heads: int, x: torch.Tensor,
                            memory: torch.Tensor, lengths: torch.Tensor, upstream: torch.Tensor, case: str) -> None:
    """The output under key is in autograd's graph, and x, memory and every parameter got autograd's gradient
    through nn.TransformerDecoderLayer (or through the typical mistake the output is)."""
    __tracebackhide__ = True
    output(ev, key, what=f"{BLOCK_NAME}.forward", shape=tuple(x.shape), hint=_MASK_SHAPE_HINT)
    modules.expect_differentiable(ev, key, f"{BLOCK_NAME}.forward")
    pad = _padding(lengths, memory.shape[1])
    self_mask, memory_mask = oracles.causal_mask(x.shape[1]), pad.unsqueeze(1)

    def forward(leaves, x, memory, **switches):
        return (_block_variant(leaves, heads, x, memory, self_mask, memory_mask, **switches) if switches
                else _torch_decoder(leaves, "", heads, x, memory, True, pad))

    because, chosen = None, {}
    with torch.no_grad():
        if not matches_any(ev.tensors[key], [forward(w, x, memory)], ev.device):
            because, chosen = next(((m, dict(sw)) for m, sw in _BLOCK_MISTAKES
                                    if matches_any(ev.tensors[key], [forward(w, x, memory, **sw)], ev.device)),
                                   (None, {}))
    expected = modules.autograd(lambda leaves, x, memory: forward(leaves, x, memory, **chosen), w,
                                {"x": x, "memory": memory}, upstream)
    modules.expect_gradients(ev, expected, owner=f"{BLOCK_NAME}.forward", case=case, because=because,
                             oracle="nn.TransformerDecoderLayer with the same weights",
                             hints={"memory": _MEMORY_GRADIENT_HINT})


_MEMORY_GRADIENT_HINT = ("Cross-attention must read memory (cross_attention(x, context=memory, ...)), or the "
                         "encoder would never learn.")


def _probe_block_padding(DecoderBlock, rec: Recorder) -> None:
    _b, t, s, k, heads = _PADDING_BLOCK
    block = _make_block(DecoderBlock, rec, "block", k, heads, 4, 1500)
    if block is None:
        return
    x, memory, longer, lengths, upstream = _padding_block_inputs()
    _run_block(rec, "y", block, x, memory, oracles.causal_mask(t), _padding(lengths, s).unsqueeze(1))
    _run_block(rec, "y_longer", block, x, longer, oracles.causal_mask(t), _padding(lengths, s + 3).unsqueeze(1))
    _probe_block_backward(rec, "y_grad", block, x, memory, lengths, upstream)


def _judge_block_padding(ev: Evidence) -> None:
    """Extra masked memory positions change nothing; a loss reaches every parameter, x and memory, as autograd
    through nn.TransformerDecoderLayer gives it."""
    b, t, s, k, heads = _PADDING_BLOCK
    w = _block_weights(ev, "block", k, heads, 4, 1500)
    x, memory, _longer, lengths, upstream = _padding_block_inputs()
    y = output(ev, "y", what=f"{BLOCK_NAME}.forward", shape=(b, t, k), hint=_MASK_SHAPE_HINT)
    y_longer = output(ev, "y_longer", what=f"{BLOCK_NAME}.forward", shape=(b, t, k), hint=_MASK_SHAPE_HINT)
    pad = _padding(lengths, s)
    if not matches_any(y_longer, [y], ev.device):
        memory_not_masked = _block_variant(w, heads, x, memory, oracles.causal_mask(t), None, cross_mask="none")
        fail(f"{BLOCK_NAME} reads padded memory positions: three more padded source positions (masked out by "
             "memory_mask) changed its output. Pass memory_mask to cross-attention.", y[:, :, 0], y_longer[:, :, 0],
             case="first feature, before and after adding padding",
             mistake=BLOCK_MEMORY_NOT_MASKED.id if matches_any(y, [memory_not_masked.detach()], ev.device)
             else BLOCK_READS_PADDING)
    _anchor_block(ev, y, w, heads, x, memory, pad, True, f"{BLOCK_NAME} ignores padded memory")
    _expect_block_gradients(ev, "y_grad", w, heads, x, memory, lengths, upstream,
                            f"b={b}, t={t}, s={s}, k={k}, source lengths [5, 3]")


decoder_block_padding_gradients = Check("decoder_block_padding_gradients", _probe_block_padding, _judge_block_padding)


# ---------------------------------------------------------------- the model

@dataclass(frozen=True)
class ModelCase:
    """A case for the model: batch b, source length s, target length t, the vocabularies, and the model's size."""

    b: int
    s: int
    t: int
    src_vocab: int
    tgt_vocab: int
    k: int
    heads: int
    depth: int
    max_len: int


MODEL_CASES = (ModelCase(3, 7, 5, 11, 9, 16, 2, 2, 20), ModelCase(2, 4, 6, 7, 13, 12, 3, 1, 12),
               ModelCase(1, 5, 1, 11, 9, 8, 4, 2, 10))


def _sinusoids(t: int, k: int) -> torch.Tensor:
    """The sinusoidal table of assignment 06, computed here independently: (t, k)."""
    position = torch.arange(t, dtype=torch.float64).unsqueeze(1)  # (t, 1)
    rate = 10000.0 ** (-torch.arange(0, k, 2, dtype=torch.float64) / k)  # (k/2,)
    table = torch.zeros(t, k, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table.to(torch.float32)


def _model_inputs(case: ModelCase, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, s, t, src_vocab, tgt_vocab = case.b, case.s, case.t, case.src_vocab, case.tgt_vocab
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, src_vocab, (b, s), generator=g)
    tgt = torch.randint(3, tgt_vocab, (b, t), generator=g)
    tgt[:, 0] = BOS_ID
    lengths = torch.tensor([s - (2 * i) % s for i in range(b)]).clamp(min=1)
    src = src.masked_fill(~_padding(lengths, s), PAD_ID)
    return src, tgt, lengths


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


def _make_model(Seq2SeqTransformer: Callable, rec: Recorder, key: str, case: ModelCase, seed: int) -> nn.Module | None:
    src_vocab, tgt_vocab, k, heads, depth, max_len = (case.src_vocab, case.tgt_vocab, case.k, case.heads,
                                                      case.depth, case.max_len)
    return _build(Seq2SeqTransformer, rec, key, (src_vocab, tgt_vocab, k, heads, depth, max_len), MODEL_PARTS, seed)


def _run_model(rec: Recorder, key: str, model: nn.Module, src, tgt, lengths, grad: bool = False) -> Any:
    mask = _padding(lengths, src.shape[1]).to(rec.device)
    with torch.set_grad_enabled(grad):
        return rec.call(key, model, src.to(rec.device), tgt.to(rec.device), mask)


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


def _model_weights(ev: Evidence, key: str, case: ModelCase, seed: int) -> dict[str, torch.Tensor]:
    __tracebackhide__ = True
    _model_structure(ev, key, case)
    src_vocab, tgt_vocab, k, depth = case.src_vocab, case.tgt_vocab, case.k, case.depth
    return modules.expect_parameters(ev, key, MODEL_NAME, _model_shapes(src_vocab, tgt_vocab, k, depth), seed,
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


def _probe_model_structure(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 1600)
    if model is None:
        return
    src, tgt, lengths = _model_inputs(case, 1610)
    with torch.no_grad():
        rec.call("memory", model.encode, src.to(rec.device), _padding(lengths, src.shape[1]).to(rec.device))
    _run_model(rec, "logits", model, src, tgt, lengths)


def _judge_model_structure(ev: Evidence) -> None:
    """The named parts; forward gives (b, t, tgt_vocab) logits; encode gives (b, s, k)."""
    case = MODEL_CASES[0]
    b, s, k = case.b, case.s, case.k
    w = _model_weights(ev, "model", case, 1600)
    src, tgt, lengths = _model_inputs(case, 1610)
    output(ev, "memory", what=f"{MODEL_NAME}.encode(src, src_mask)", shape=(b, s, k), hint=_MODEL_CALL_HINT)
    logits = _logits(ev, "logits", case)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} has the right parts and shapes")


_CAUSAL_POSITIONS = (4, 2)


def _changed_targets(case: ModelCase, tgt: torch.Tensor) -> list[torch.Tensor]:
    out = []
    for j in _CAUSAL_POSITIONS:
        changed = tgt.clone()
        changed[:, j] = 3 + (changed[:, j] - 2) % (case.tgt_vocab - 3)  # another real token
        out.append(changed)
    return out


def _probe_model_causality(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 1700)
    if model is None:
        return
    src, tgt, lengths = _model_inputs(case, 1710)
    _run_model(rec, "logits", model, src, tgt, lengths)
    for j, changed in zip(_CAUSAL_POSITIONS, _changed_targets(case, tgt), strict=True):
        _run_model(rec, f"logits_changed{j}", model, src, changed, lengths)


def _judge_model_causality(ev: Evidence) -> None:
    """Changing a later target token never changes the logits at earlier positions."""
    case = MODEL_CASES[0]
    w = _model_weights(ev, "model", case, 1700)
    src, tgt, lengths = _model_inputs(case, 1710)
    logits = _logits(ev, "logits", case)
    for j in _CAUSAL_POSITIONS:
        changed = _logits(ev, f"logits_changed{j}", case)
        if not matches_any(changed[:, :j], [logits[:, :j]], ev.device):
            named = [m for m, out in _model_mistakes(w, case, src, tgt, lengths)
                     if matches_any(logits, [out], ev.device)]
            fail(f"{MODEL_NAME} is not causal: changing target token {j} changed the logits at earlier positions, "
                 "so in training the model could read the answer. Pass causal_mask(t) as self_mask to every "
                 "decoder block.", logits[0, :j, 0], changed[0, :j, 0],
                 case=f"first logit at positions 0-{j - 1}, before and after changing token {j}",
                 mistake=named[0].id if named else MODEL_READS_FUTURE)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} is causal")


def _probe_model_oracle(Seq2SeqTransformer, rec: Recorder) -> None:
    for i, case in enumerate(MODEL_CASES):
        model = _make_model(Seq2SeqTransformer, rec, f"model{i}", case, 1800 + 100 * i)
        if model is None:
            return
        src, tgt, lengths = _model_inputs(case, 1850 + i)
        _run_model(rec, f"logits{i}", model, src, tgt, lengths)
        mask = _padding(lengths, src.shape[1]).to(rec.device)
        with torch.no_grad():
            memory = rec.call(f"memory{i}", model.encode, src.to(rec.device), mask)
            if isinstance(memory, torch.Tensor):
                rec.call(f"decoded{i}", model.decode, tgt.to(rec.device), memory, mask)


def _judge_model_oracle(ev: Evidence) -> None:
    """Random weights against PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with the same
    weights; decode(tgt, encode(src, src_mask), src_mask) equals forward."""
    for i, case in enumerate(MODEL_CASES):
        b, s, t, tgt_vocab, k, heads, depth = case.b, case.s, case.t, case.tgt_vocab, case.k, case.heads, case.depth
        w = _model_weights(ev, f"model{i}", case, 1800 + 100 * i)
        src, tgt, lengths = _model_inputs(case, 1850 + i)
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


def _padding_model_inputs(case: ModelCase):
    b, s, src_vocab = case.b, case.s, case.src_vocab
    src, tgt, lengths = _model_inputs(case, 1910)
    extra = torch.randint(3, src_vocab, (b, 4), generator=torch.Generator().manual_seed(1920))
    longer = torch.cat([src, extra], dim=1)  # (b, s + 4): garbage in the padded positions, masked out
    longer[:, :s] = longer[:, :s].masked_fill(~_padding(lengths, s), 5)
    return src, longer, tgt, lengths


def _probe_model_padding(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 1900)
    if model is None:
        return
    src, longer, tgt, lengths = _padding_model_inputs(case)
    _run_model(rec, "logits", model, src, tgt, lengths)
    _run_model(rec, "logits_longer", model, longer, tgt, lengths)


def _judge_model_padding(ev: Evidence) -> None:
    """More padding on the source (filled with arbitrary tokens, masked out) never changes the logits."""
    case = MODEL_CASES[0]
    w = _model_weights(ev, "model", case, 1900)
    src, _, tgt, lengths = _padding_model_inputs(case)
    logits = _logits(ev, "logits", case)
    longer = _logits(ev, "logits_longer", case)
    if not matches_any(longer, [logits], ev.device):
        named = [m for m, out in _model_mistakes(w, case, src, tgt, lengths) if matches_any(logits, [out], ev.device)]
        fail(f"{MODEL_NAME} reads the source padding: four more padded positions (masked out by src_mask) changed "
             "the logits. Pass src_mask shaped (b, 1, s) to every encoder block AND as memory_mask to every decoder "
             "block.", logits[0, :, 0], longer[0, :, 0], case="first logit of sequence 0, before and after",
             mistake=named[0].id if named else MODEL_READS_PADDING)
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} ignores the source padding")


def _probe_model_backward(rec: Recorder, key: str, model: nn.Module, case: ModelCase, seed: int,
                         upstream_seed: int) -> None:
    """Record the logits of the case's batch in training mode, and the gradients of sum(logits · upstream) for
    every parameter."""
    b, t, tgt_vocab = case.b, case.t, case.tgt_vocab
    src, tgt, lengths = _model_inputs(case, seed)
    upstream = randn(b, t, tgt_vocab, seed=upstream_seed).to(rec.device)
    model.train()
    modules.record_backward(rec, key, model, src.to(rec.device), tgt.to(rec.device),
                            _padding(lengths, src.shape[1]).to(rec.device), loss=lambda y: (y * upstream).sum())


def _expect_model_gradients(ev: Evidence, key: str, w: dict[str, torch.Tensor], case: ModelCase, seed: int,
                            upstream_seed: int, case_text: str) -> None:
    """The logits under key are in autograd's graph, and every parameter got autograd's gradient through PyTorch's
    layers (or through the typical mistake the logits are)."""
    __tracebackhide__ = True
    b, t, tgt_vocab = case.b, case.t, case.tgt_vocab
    src, tgt, lengths = _model_inputs(case, seed)
    logits = _logits(ev, key, case)
    modules.expect_differentiable(ev, key, f"{MODEL_NAME}.forward")
    because, chosen = None, {}
    with torch.no_grad():
        if not matches_any(logits, [_model_oracle(w, case, src, tgt, lengths)], ev.device):
            because, chosen = next(((m, sw) for m, sw in _model_mistake_switches(case, tgt) if matches_any(
                logits, [_model_oracle(w, case, src, tgt, lengths, **sw)], ev.device)), (None, {}))
    expected = modules.autograd(lambda leaves: _model_oracle(leaves, case, src, tgt, lengths, **chosen), w, {},
                                randn(b, t, tgt_vocab, seed=upstream_seed))
    hints = {name: "Is memory the output of the encoder blocks?" for name in w
             if name.startswith("encoder") or name.startswith("src")}
    modules.expect_gradients(ev, expected, owner=MODEL_NAME, case=case_text, because=because, hints=hints,
                             oracle="PyTorch's encoder and decoder layers with the same weights")


def _probe_model_gradients(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 2000)
    if model is not None:
        _probe_model_backward(rec, "logits", model, case, 2010, 2020)


def _judge_model_gradients(ev: Evidence) -> None:
    """A loss on the logits sends a gradient to every parameter (embeddings, encoder, decoder, output layer), as
    autograd through PyTorch's layers gives it."""
    case = MODEL_CASES[0]
    w = _model_weights(ev, "model", case, 2000)
    src, tgt, lengths = _model_inputs(case, 2010)
    logits = _logits(ev, "logits", case)
    modules.expect_attached(ev, "logits", f"{MODEL_NAME}.forward")
    _anchor_model(ev, logits, w, case, src, tgt, lengths, f"{MODEL_NAME} passes gradients")
    _expect_model_gradients(ev, "logits", w, case, 2010, 2020, "the logits of a random batch")


#: (b, s, t, src_vocab, tgt_vocab, k, heads, depth, max_len): a source with padding, two layers of each kind
SMALL_MODEL = ModelCase(2, 5, 4, 7, 6, 4, 2, 2, 8)


def _probe_model_small_case(Seq2SeqTransformer, rec: Recorder) -> None:
    model = _make_model(Seq2SeqTransformer, rec, "model", SMALL_MODEL, 2500)
    if model is not None:
        _probe_model_backward(rec, "logits", model, SMALL_MODEL, 2510, 2520)


def _judge_model_small_case(ev: Evidence) -> None:
    """A small model and batch (k=4, depth=2, source lengths 5 and 3) against PyTorch's encoder and decoder layers
    with the same weights; a loss on the logits sends autograd's gradient to every parameter."""
    w = _model_weights(ev, "model", SMALL_MODEL, 2500)
    src, tgt, lengths = _model_inputs(SMALL_MODEL, 2510)
    logits = _logits(ev, "logits", SMALL_MODEL)
    with torch.no_grad():
        expected = _model_oracle(w, SMALL_MODEL, src, tgt, lengths)
    case = f"src (2, 5) with lengths {lengths.tolist()}, tgt (2, 4), k=4, heads=2, depth=2"
    expect_close_batch(logits, expected, what=f"{MODEL_NAME}.forward", device=ev.device, otherwise=_MODEL_HINT,
                        mistakes=_model_mistakes(w, SMALL_MODEL, src, tgt, lengths), case=case)
    _expect_model_gradients(ev, "logits", w, SMALL_MODEL, 2510, 2520, case)


# ---------------------------------------------------------------- stand-in translators for the loss and decoding

class StandInTranslator(nn.Module):
    """A small translator with the interface of Seq2SeqTransformer (encode, decode, forward) whose logits a judge
    recomputes: the mean of the real source embeddings, and a causal running mean of the target embeddings plus
    learned positions. Every weight comes from weights.fill(seed), so the probe and the judge build the same one.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, k: int, max_len: int, seed: int, eos_bias: float = 0.0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            self.src_embedding = nn.Embedding(src_vocab, k)
            self.tgt_embedding = nn.Embedding(tgt_vocab, k)
            self.positions = nn.Parameter(torch.zeros(max_len, k))
            self.mix = nn.Linear(k, k)
            self.to_logits = nn.Linear(k, tgt_vocab)
        weights.fill(self, seed, {"to_logits.weight": 3.0, "positions": 3.0})
        with torch.no_grad():
            self.to_logits.bias[EOS_ID] += eos_bias
            self.to_logits.bias[[PAD_ID, BOS_ID]] -= 5.0  # it writes real tokens and <eos>, like a trained model

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.src_embedding(src) * src_mask.unsqueeze(-1)  # (b, s, k), zero at padding

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        summary = memory.sum(dim=1) / src_mask.sum(dim=1, keepdim=True).clamp(min=1)  # (b, k)
        t = tgt.shape[1]
        h = self.tgt_embedding(tgt) + self.positions[:t]  # (b, t, k)
        h = h.cumsum(dim=1) / torch.arange(1, t + 1, device=tgt.device).unsqueeze(1)  # causal running mean
        return self.to_logits(torch.tanh(self.mix(h) + summary.unsqueeze(1)))  # (b, t, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


# ---------------------------------------------------------------- the loss

_LOSS_SHAPE_HINTS = MappingProxyType({(3, 6): "That is one loss per token: average them over the real tokens.",
                                      (3,): "That is one loss per sequence: the mean is over all real tokens of the "
                                            "batch."})
_LOSS_HINT = ("logits = model(src, tgt[:, :-1], src_mask); loss = F.cross_entropy(logits.transpose(1, 2), "
              "tgt[:, 1:], ignore_index=pad). F.cross_entropy wants the classes in dimension 1.")


def _loss_case(seed: int, pad: int) -> tuple[StandInTranslator, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A stand-in model and a batch with targets of different lengths."""
    model = StandInTranslator(10, 9, 8, 16, seed)
    g = torch.Generator().manual_seed(seed + 1)
    b, s, t = 3, 6, 7
    src = torch.randint(3, 10, (b, s), generator=g)
    lengths = torch.tensor([6, 4, 5])
    tgt = torch.randint(3, 9, (b, t), generator=g)
    tgt[:, 0] = BOS_ID
    tgt[tgt == pad] = 3  # real tokens never equal the padding id
    for i, n in enumerate((7, 4, 5)):
        tgt[i, n - 1] = EOS_ID
        tgt[i, n:] = pad
    return model, src.masked_fill(~_padding(lengths, s), PAD_ID), _padding(lengths, s), tgt


def _loss_oracle(model, src, src_mask, tgt, pad) -> torch.Tensor:
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)


def _loss_mistakes(model, src, src_mask, tgt, pad) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        shifted = model(src, tgt[:, :-1], src_mask).transpose(1, 2)  # (b, vocab, t-1)
        unshifted = model(src, tgt, src_mask).transpose(1, 2)  # (b, vocab, t)
        backwards = model(src, tgt[:, 1:], src_mask).transpose(1, 2)
    labels = tgt[:, 1:]
    per_token = F.cross_entropy(shifted, labels, ignore_index=pad, reduction="none")  # (b, t-1)
    real = (labels != pad).float()
    return [
        # first: with pad != 0 and no label 0, ignoring 0 and ignoring nothing give the same number
        (LOSS_PAD_HARD_CODED, F.cross_entropy(shifted, labels, ignore_index=0)),
        (LOSS_NOT_SHIFTED, F.cross_entropy(unshifted, tgt, ignore_index=pad)),
        (LOSS_COUNTS_PADDING, F.cross_entropy(shifted, labels)),
        (LOSS_WRONG_SHIFT, F.cross_entropy(backwards, tgt[:, :-1], ignore_index=pad)),
        (LOSS_SUM, per_token.sum()),
        (LOSS_PER_SEQUENCE, ((per_token * real).sum(1) / real.sum(1)).mean()),
        (LOSS_SOFTMAX, F.cross_entropy(F.softmax(shifted, dim=1), labels, ignore_index=pad)),
    ]


def _probe_loss_case(teacher_forcing_loss, rec: Recorder, key: str, seed: int, pad: int) -> None:
    model, src, src_mask, tgt = _loss_case(seed, pad)
    rec.call(key, teacher_forcing_loss, model.to(rec.device), src.to(rec.device), src_mask.to(rec.device),
             tgt.to(rec.device), pad)


def _judge_loss_case(ev: Evidence, key: str, seed: int, pad: int) -> None:
    __tracebackhide__ = True
    model, src, src_mask, tgt = _loss_case(seed, pad)
    loss = output(ev, key, what=LOSS_NAME, shape=(), shape_hints=_LOSS_SHAPE_HINTS, hint=_LOSS_HINT)
    with torch.no_grad():
        expected = _loss_oracle(model, src, src_mask, tgt, pad)
    expect_close(loss, expected, what=LOSS_NAME, device=ev.device,
                 mistakes=_loss_mistakes(model, src, src_mask, tgt, pad),
                 otherwise=_LOSS_HINT, case=f"3 targets of lengths 7, 4, 5 padded with {pad}")


LOSS_CASES = ((2100, 0),)
LOSS_GRADIENT_CASE = (2300, 4)
LOSS_HIDDEN_CASES = ((2200, 0), (2400, 5))


def _probe_loss(teacher_forcing_loss, rec: Recorder) -> None:
    for i, (seed, pad) in enumerate(LOSS_CASES):
        _probe_loss_case(teacher_forcing_loss, rec, f"loss{i}", seed, pad)


def _judge_loss(ev: Evidence) -> None:
    """Targets of different lengths: the mean cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1], padding
    ignored."""
    for i, (seed, pad) in enumerate(LOSS_CASES):
        _judge_loss_case(ev, f"loss{i}", seed, pad)


loss_oracle = Check("loss_oracle", _probe_loss, _judge_loss)


def _probe_loss_gradients(teacher_forcing_loss, rec: Recorder) -> None:
    seed, pad = LOSS_GRADIENT_CASE
    model, src, src_mask, tgt = _loss_case(seed, pad)
    model = model.to(rec.device)
    if modules.record_backward(rec, "loss", teacher_forcing_loss, model, src.to(rec.device), src_mask.to(rec.device),
                               tgt.to(rec.device), pad, loss=lambda loss: loss):
        modules.record_gradients(rec, model)


def _judge_loss_gradients(ev: Evidence) -> None:
    """A padding id other than 0 (here 4), and a loss that trains the model: its gradients are autograd's through
    F.cross_entropy."""
    seed, pad = LOSS_GRADIENT_CASE
    _judge_loss_case(ev, "loss", seed, pad)
    modules.expect_differentiable(ev, "loss", LOSS_NAME)
    model, src, src_mask, tgt = _loss_case(seed, pad)

    def loss(leaves: dict[str, torch.Tensor]) -> torch.Tensor:
        return functional_call(model, leaves, (src, tgt[:, :-1], src_mask)).transpose(1, 2)

    expected = modules.autograd(loss, {name: p.detach() for name, p in model.named_parameters()}, {},
                                lambda logits: F.cross_entropy(logits, tgt[:, 1:], ignore_index=pad))
    modules.expect_gradients(ev, expected, owner=LOSS_NAME, case=f"3 targets padded with {pad}",
                             oracle="F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)")


loss_gradients = Check("loss_gradients", _probe_loss_gradients, _judge_loss_gradients)


def _probe_loss_hidden(teacher_forcing_loss, rec: Recorder) -> None:
    for i, (seed, pad) in enumerate(LOSS_HIDDEN_CASES):
        _probe_loss_case(teacher_forcing_loss, rec, f"loss{i}", seed, pad)


def _judge_loss_hidden(ev: Evidence) -> None:
    """Other batches, with padding ids 0 and 5."""
    for i, (seed, pad) in enumerate(LOSS_HIDDEN_CASES):
        _judge_loss_case(ev, f"loss{i}", seed, pad)


loss_hidden = Check("loss_hidden", _probe_loss_hidden, _judge_loss_hidden)


# ---------------------------------------------------------------- greedy decoding

_SCRIPT_VOCAB = 9
_AFTER_EOS = 8  # what the scripted model says once a sequence is over: never <eos>, never <pad>


class ScriptedModel(nn.Module):
    """A stand-in for a trained Seq2SeqTransformer whose greedy output is known exactly.

    Reading <bos> first, it writes one token per real source token, each depending on the source token and on
    the previous target token (so its own predictions must be fed back), then <eos>; after that it keeps
    writing token 8. Without <bos> first it never stops. Logits are exact, so every device agrees.
    """

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.stack([src.float(), src_mask.float()], dim=-1)  # (b, s, 2)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        b, t = tgt.shape
        src = memory[..., 0].long()  # (b, s)
        lengths = memory[..., 1].sum(dim=1).long()  # (b,)
        position = torch.arange(t, device=tgt.device).expand(b, t)  # (b, t)
        src_token = src.gather(1, position.clamp(max=src.shape[1] - 1))  # (b, t)
        token = 3 + (src_token + tgt) % 5  # (b, t) values 3..7
        token = torch.where(position == lengths.unsqueeze(1), torch.full_like(token, EOS_ID), token)
        token = torch.where(position > lengths.unsqueeze(1), torch.full_like(token, _AFTER_EOS), token)
        token = torch.where((tgt[:, :1] == BOS_ID).expand(b, t), token, torch.full_like(token, _AFTER_EOS))
        return 10.0 * F.one_hot(token, _SCRIPT_VOCAB).float()  # (b, t, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


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
        (DECODE_FORGETS_BOS, _step_by_step(model, src, src_mask, max_len, PAD_ID, EOS_ID)),
        (DECODE_FIRST_POSITION, _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID, position=0)),
    ]
    return [(m, _fit(v, width)) for m, v in out]


_DECODE_HINT = ("Start every sequence with <bos>; at each step run the model on what you have, take the argmax of "
                "the LAST position, append it; once a sequence has written <eos>, append <pad> (0) to it; stop when "
                "all sequences are finished or after max_len steps. Return the tokens without the <bos>.")


def _probe_decode(greedy_decode, rec: Recorder, key: str, model: nn.Module, src, lengths, max_len: int) -> None:
    src_mask = _padding(lengths, src.shape[1])
    with torch.no_grad():
        rec.call(key, greedy_decode, model.to(rec.device), src.to(rec.device), src_mask.to(rec.device), max_len,
                 BOS_ID, EOS_ID)


def _judge_decode(ev: Evidence, key: str, model: nn.Module, src, lengths, max_len: int, case: str) -> None:
    __tracebackhide__ = True
    src_mask = _padding(lengths, src.shape[1])
    expected = _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID)  # (b, n)
    out = output(ev, key, what=DECODE_NAME, floating=False, hint=_DECODE_HINT)
    if out.dtype != torch.long:
        fail(f"{DECODE_NAME} returned dtype {out.dtype}; token ids are torch.long (argmax gives them).",
             mistake=DECODE_NOT_IDS)
    b, n = expected.shape
    if out.dim() != 2 or out.shape[0] != b:
        fail(f"{DECODE_NAME} returned shape {tuple(out.shape)}; expected (b, n) = ({b}, n) with n <= max_len.",
             mistake="wrong-shape")
    width = out.shape[1]
    mistakes = _decode_mistakes(model, src, src_mask, max_len, expected, width)
    if width > max_len:
        if torch.equal(out, mistakes[1][1]):
            fail(f"{DECODE_NAME} is not what was asked: {DECODE_RETURNS_BOS.explanation}", Rows(expected),
                 Rows(out), case, DECODE_RETURNS_BOS.id)
        fail(f"{DECODE_NAME} returned {width} tokens per sequence, more than max_len={max_len}. Generate at most "
             "max_len tokens, and do not return the <bos>.", Rows(expected), Rows(out), case, DECODE_TOO_LONG)
    if width < n:
        fail(f"{DECODE_NAME} stopped after {width} tokens, but a sequence had not written <eos> yet (it needs {n}). "
             "Stop only when every sequence is finished, or after max_len steps.", Rows(expected), Rows(out), case,
             DECODE_STOPS_EARLY)
    expect_equal(out, _fit(expected, width), what=DECODE_NAME, mistakes=mistakes, otherwise=_DECODE_HINT, case=case,
                 differs="does not agree with the step-by-step argmax of the model")


_SCRIPTED_SRC = ((3, 4, 5, 0, 0), (6, 0, 0, 0, 0), (3, 3, 7, 5, 4))
_SCRIPTED_LENGTHS = (3, 1, 5)
_SHORT_SRC = ((3, 4, 5, 6, 7, 3), (6, 0, 0, 0, 0, 0))
_SHORT_LENGTHS = (6, 1)
#: the random stand-in translator: (seed of its weights, eos bias, seed of the source, lengths)
_RANDOM_TRANSLATOR = (2401, 1.5, 2410, (7, 3, 5, 1))


def _random_translator() -> tuple[StandInTranslator, torch.Tensor, torch.Tensor]:
    seed, eos_bias, src_seed, lengths = _RANDOM_TRANSLATOR
    model = StandInTranslator(12, 8, 16, 24, seed, eos_bias).eval()
    src = torch.randint(3, 12, (len(lengths), 7), generator=torch.Generator().manual_seed(src_seed))
    lengths = torch.tensor(lengths)
    return model, src.masked_fill(~_padding(lengths, 7), PAD_ID), lengths


def _probe_decode_scripted(greedy_decode, rec: Recorder) -> None:
    _probe_decode(greedy_decode, rec, "tokens", ScriptedModel(), torch.tensor(_SCRIPTED_SRC),
                  torch.tensor(_SCRIPTED_LENGTHS), 9)


def _judge_decode_scripted(ev: Evidence) -> None:
    """A stand-in model whose greedy output is known: each sequence stops at its <eos>, padded with 0 after it."""
    _judge_decode(ev, "tokens", ScriptedModel(), torch.tensor(_SCRIPTED_SRC), torch.tensor(_SCRIPTED_LENGTHS), 9,
                  "a stand-in model; the three sequences end after 3, 1 and 5 tokens")


greedy_decode_scripted = Check("greedy_decode_scripted", _probe_decode_scripted, _judge_decode_scripted)


def _probe_decode_step_by_step(greedy_decode, rec: Recorder) -> None:
    _probe_decode(greedy_decode, rec, "short", ScriptedModel(), torch.tensor(_SHORT_SRC), torch.tensor(_SHORT_LENGTHS),
                  4)
    model, src, lengths = _random_translator()
    _probe_decode(greedy_decode, rec, "random", model, src, lengths, 10)


def _judge_decode_step_by_step(ev: Evidence) -> None:
    """A random stand-in translator against the step-by-step argmax; and max_len cuts long outputs."""
    _judge_decode(ev, "short", ScriptedModel(), torch.tensor(_SHORT_SRC), torch.tensor(_SHORT_LENGTHS), 4,
                  "a stand-in model, max_len=4 shorter than the first translation")
    model, src, lengths = _random_translator()
    _judge_decode(ev, "random", model, src, lengths, 10, "a stand-in translator with random weights")


greedy_decode_step_by_step = Check("greedy_decode_step_by_step", _probe_decode_step_by_step,
                                   _judge_decode_step_by_step)


# ---------------------------------------------------------------- the model's checks (they name their prerequisites)

_PREREQUISITES = (("causal_mask", 1, (causal_mask_by_hand,)),
                  ("DecoderBlock", 3, (decoder_block_structure, decoder_block_oracle)))


def _model_check(name: str, probe: Callable[[Any, Recorder], None], judge: Callable[[Evidence], None]) -> Check:
    """A model check that also says when the cause may be an earlier exercise the model uses."""
    return with_prerequisites(name, probe, judge, prerequisites=_PREREQUISITES, user=MODEL_NAME,
                              namespace=lambda model: getattr(getattr(model, "decode", None), "__globals__", {}))

seq2seq_structure = _model_check("seq2seq_structure", _probe_model_structure, _judge_model_structure)
seq2seq_causality = _model_check("seq2seq_causality", _probe_model_causality, _judge_model_causality)
seq2seq_small_case = _model_check("seq2seq_small_case", _probe_model_small_case, _judge_model_small_case)
seq2seq_oracle = _model_check("seq2seq_oracle", _probe_model_oracle, _judge_model_oracle)
seq2seq_padding = _model_check("seq2seq_padding", _probe_model_padding, _judge_model_padding)
seq2seq_gradients = _model_check("seq2seq_gradients", _probe_model_gradients, _judge_model_gradients)
