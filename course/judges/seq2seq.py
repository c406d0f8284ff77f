"""Judges for assignment 07 (probes in course/checks/seq2seq.py): the masks against their definitions, DecoderBlock
and Seq2SeqTransformer against nn.TransformerDecoderLayer / nn.TransformerEncoderLayer carrying the check's weights
(whose boolean masks mean True = NOT allowed, so ours are inverted), the loss against F.cross_entropy, greedy decoding
against a step-by-step argmax, the training loop's parts against PyTorch's SGD, learning rates and groups.

The typical mistakes of every exercise are written as code beside its judge (course/judges/variants.py), named by
running them; those named from a structure, a dtype, a device or a property are declared there too.
"""

import math
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache, partial
from itertools import chain
from typing import Any, NoReturn

import torch
import torch.nn.functional as F
from torch import nn

from course import device as course_device
from course.checks import modules
from course.checks import seq2seq as probes
from course.checks.compare import (
    WRONG_SHAPE,
    Mistake,
    OnGpus,
    Rows,
    expect_close,
    expect_close_batch,
    expect_equal,
    expect_on_gpus,
    fail,
    matches_any,
    output,
    raised,
    tensor,
)
from course.checks.evidence import Evidence, fact_key
from course.checks.kinds import Built, Case, Runs, RunsCheck
from course.checks.modules import WRONG_PART_TYPE
from course.checks.seq2seq import BOS_ID, PAD_ID
from course.dates import PAD
from course.judges import oracles
from course.judges.kinds import (
    Advice,
    BlockOracle,
    ForwardOracle,
    against_block,
    declared,
    each_case,
    expect_block_gradients,
    expect_block_runs,
    expect_causal,
    forward_output,
    simulated,
)
from course.judges.token_loss import LossOracle, against_loss
from course.judges.variants import Variants, Written, simulators

PADDING_NAME = "padding_mask(lengths, t)"
BLOCK_NAME = "DecoderBlock"
MODEL_NAME = "Seq2SeqTransformer"
LOSS_NAME = "teacher_forcing_loss(model, src, src_mask, tgt, pad)"
DECODE_NAME = "greedy_decode(model, src, src_mask, max_len, bos, eos)"


# ---------------------------------------------------------------- mistakes
# Written as code (course/judges/variants.py): edits of the reference answers of course/seq2seq.py, each exercise's
# at the head of its section with the message beside it, named by running them; when an output matches two, the first
# declared is named. Mistakes every check names (a wrong shape, an error, a detached output) are in
# catalogue/seq2seq.py.

WRITTEN = Variants(__name__, reference="course.seq2seq")
edit = WRITTEN.edit

#     causal_mask:  return torch.ones(t, t, dtype=torch.bool, device=device).tril()
TRIL = ".tril()"
edit("causal-inverted", "causal_mask", (TRIL, ".triu(1)"), mistake="causal-inverted",
     says="the mask is inverted: True marks the future (j > i). In this course True means 'may attend', so row i must "
          "be True for j <= i.")
edit("causal-no-diagonal", "causal_mask", (TRIL, ".tril(-1)"), mistake="causal-no-diagonal",
     says="the mask excludes the diagonal: position i must be allowed to attend to itself (j <= i, not j < i); "
          "without it the first position has nothing to attend to.")
edit("causal-transposed", "causal_mask", (TRIL, ".triu()"), mistake="causal-transposed",
     says="the mask is transposed: True where j >= i lets every position read the future. Use the lower triangle "
          "(torch.tril), row i = query, column j = key.")
edit("causal-all-true", "causal_mask", (TRIL, ""), mistake="causal-all-true",
     says="nothing is masked: every entry is True, so the decoder can read the future.")

#     padding_mask: return torch.arange(t, device=lengths.device) < lengths.unsqueeze(1)
LESS = " < lengths.unsqueeze(1)"
edit("padding-inverted", "padding_mask", (LESS, " >= lengths.unsqueeze(1)"), mistake="padding-inverted",
     says="the mask is inverted: True marks the padding. True must mark the real tokens (position < length).")
edit("padding-off-by-one", "padding_mask", (LESS, " <= lengths.unsqueeze(1)"), mistake="padding-one-too-many",
     says="the mask is off by one: it marks one position too many (position <= length). Row i has lengths[i] real "
          "tokens at positions 0 .. lengths[i] - 1.")
edit("padding-one-too-few", "padding_mask", (LESS, f"{LESS} - 1"), mistake="padding-one-too-few",
     says="the mask is off by one: it marks one real token too few (position < length - 1). Row i has lengths[i] real "
          "tokens at positions 0 .. lengths[i] - 1.")

# named from the mask's dtype, shape or device (catalogue/seq2seq.py holds the answers that make them); the model's
# checks name the device one too
FLOAT_MASK = WRITTEN.mistake("float-mask", "the mask is a tensor of numbers; a boolean mask is asked, True where "
                                           "attention is allowed.")
ADDITIVE_MASK = WRITTEN.mistake(
    "additive-mask", "the mask is an additive float mask of 0 and -inf (nn.Transformer's convention); a boolean mask "
                     "is asked, True where attention is allowed.")
PADDING_TRANSPOSED = WRITTEN.mistake("padding-transposed", "the padding mask is transposed: one row per sequence, one "
                                                           "column per position, (b, t).")
MASK_WRONG_DEVICE = WRITTEN.mistake(
    "mask-wrong-device", "the mask is not on the device of its input: make it there (device=device in causal_mask, "
                         "device=lengths.device for padding_mask's torch.arange, causal_mask(tgt.shape[1], "
                         "device=tgt.device) in the model's decode). A CPU grader would pass it; a GPU refuses to mix "
                         "it with the scores.")


def _not_asked(what: str, mistake: Mistake, more: str = "", *shown: Any) -> NoReturn:
    """Fail naming mistake: what, its explanation, then more; shown: expected, actual, case."""
    __tracebackhide__ = True
    fail(f"{what} is not what was asked: {mistake.explanation}{more}", *shown, mistake=mistake)


# ---------------------------------------------------------------- masks

def _padding(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: (b, t), True at positions p < lengths[i]."""
    return torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)


def _expect_mask(ev: Evidence, case: probes.SettingCase) -> None:
    """The mask recorded for case: bool, of its shape, on the device asked, and equal to its definition."""
    __tracebackhide__ = True
    *lengths, t = case.settings()
    device = ev.device if case.on_device else "cpu"
    if lengths:
        lengths = torch.tensor(lengths[0])
        what, expected = PADDING_NAME, _padding(lengths, t)
        mistakes = WRITTEN.outputs("padding_mask", lengths=lengths, t=t)
        b, label = len(lengths), case.label or f"lengths={lengths.tolist()}, t={t}"
        hints = {(t, b): PADDING_TRANSPOSED, **dict.fromkeys(((b, t, 1), (b, 1, t)), "Return a plain (b, t).")}
        otherwise = "Entry (i, p) is True exactly when p < lengths[i]: compare torch.arange(t) with lengths[:, None]."
    else:
        what = f"causal_mask({t}, device={ev.device!r})" if case.on_device else f"causal_mask({t})"
        expected, label, hints = oracles.causal_mask(t), case.label or f"t={t}", {}
        mistakes = WRITTEN.outputs("causal_mask", t=t)
        otherwise = "Entry (i, j) is True exactly when j <= i: the lower triangle including the diagonal (torch.tril)."
    mask = output(ev, case.key, what=what, dtype="any", device=False)
    if mask.dtype != torch.bool:
        mistake = ADDITIVE_MASK if mask.is_floating_point() and bool(torch.isinf(mask).any()) else FLOAT_MASK
        _not_asked(what, mistake, f" (it returned dtype {mask.dtype})")
    output(ev, case.key, what=what, shape=tuple(expected.shape), shape_hints=hints, dtype="any", device=False)
    if ev.facts[case.key].get("device") != device:
        _not_asked(what, MASK_WRONG_DEVICE, f" (it is on {ev.facts[case.key].get('device')}, not {device})")
    expect_equal(mask, expected, what=what, mistakes=mistakes, otherwise=otherwise, case=label)


each_case(probes.causal_mask_by_hand, _expect_mask,
          then=partial(expect_on_gpus, seen_on=OnGpus("mask", probes.MASK_ON_GPU[0], MASK_WRONG_DEVICE)),
          passed="t = 4: the lower triangle, diagonal included, as bools; made on the device asked for (a stand-in "
                 "CUDA and MPS).")
each_case(probes.causal_mask_oracle, _expect_mask, passed="Several lengths and devices: True where j <= i.")
each_case(probes.padding_mask_by_hand, _expect_mask,
          then=partial(expect_on_gpus, seen_on=OnGpus("mask", probes.MASK_ON_GPU[1], MASK_WRONG_DEVICE)),
          passed="lengths [3, 1, 4], t = 5; made on the device of lengths (a stand-in CUDA and MPS).")
each_case(probes.padding_mask_oracle, _expect_mask, passed="Several batches: lengths 1 to t, a batch of one.")


# ---------------------------------------------------------------- PyTorch's layers with the check's weights

def _block_shapes(p: str, k: int, ff_mult: int) -> dict[str, tuple[int, ...]]:
    return {**modules.attention_shapes(f"{p}self_attention.", k), **modules.attention_shapes(f"{p}cross_attention.", k),
            **modules.norm_shapes(p, k, ("norm1", "norm2", "norm3")), **modules.feed_forward_shapes(p, k, ff_mult * k)}


#     DecoderBlock.forward: x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
#                           x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
#                           return self.norm3(x + self.dropout(self.ff(x)))
# Each is built with the check's constructor arguments and run with the student's weights (variants.module_output).
SELF = "self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))"
CROSS = "self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))"
FF = "self.norm3(x + self.dropout(self.ff(x)))"
edit("block-cross-reads-itself", "DecoderBlock", ("context=memory, mask=memory_mask)))", "mask=self_mask)))"),
     mistake="block-cross-reads-itself",
     says="cross-attention reads the decoder's own states: its keys and values must come from `memory` "
          "(cross_attention(x, context=memory, mask=memory_mask)).")
edit("block-cross-reads-itself-unmasked", "DecoderBlock",
     ("cross_attention(x, context=memory, mask=memory_mask)", "cross_attention(x)"), mistake="block-cross-reads-itself")
edit("block-memory-not-masked", "DecoderBlock", ("context=memory, mask=memory_mask)))", "context=memory)))"),
     mistake="block-memory-not-masked",
     says="source padding is not masked in cross-attention: pass memory_mask to cross_attention, so no target position "
          "reads a padded source position.")
edit("block-self-mask-ignored", "DecoderBlock",
     ("self.dropout(self.self_attention(x, mask=self_mask)))", "self.dropout(self.self_attention(x)))"),
     mistake="block-self-mask-ignored",
     says="self_mask is not used in self-attention, so every target position reads the future: self_attention(x, "
          "mask=self_mask).")
edit("block-no-residual", "DecoderBlock", (SELF, "self.norm1(self.self_attention(x, mask=self_mask))"),
     (CROSS, "self.norm2(self.cross_attention(x, context=memory, mask=memory_mask))"), (FF, "self.norm3(self.ff(x))"),
     mistake="block-no-residual",
     says="the residual connections are missing: each sublayer's output is added to its input before the norm, x = "
          "norm(x + sublayer(x)).")
edit("block-pre-norm", "DecoderBlock", (SELF, "x + self.self_attention(self.norm1(x), mask=self_mask)"),
     (CROSS, "x + self.cross_attention(self.norm2(x), context=memory, mask=memory_mask)"),
     (FF, "x + self.ff(self.norm3(x))"), mistake="block-pre-norm",
     says="the block is pre-norm (x + sublayer(norm(x))); this course's blocks are post-norm: x = norm(x + "
          "sublayer(x)).")
edit("block-cross-first", "DecoderBlock",
     ("self.dropout(self.self_attention(x, mask=self_mask)))",
      "self.cross_attention(x, context=memory, mask=memory_mask))"),
     ("self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))",
      "self.self_attention(x, mask=self_mask))"), mistake="block-cross-first",
     says="cross-attention comes before self-attention: the decoder first reads its own past (self-attention, norm1), "
          "then the source (cross-attention, norm2), then the feed-forward (norm3).")
edit("block-cross-on-input", "DecoderBlock",
     (f"x = {SELF}", "h = self.norm1(x + self.self_attention(x, mask=self_mask))"),
     (f"x = {CROSS}", "h = self.norm2(h + self.cross_attention(x, context=memory, mask=memory_mask))"),
     (FF, "self.norm3(h + self.ff(h))"), mistake="block-cross-on-input",
     says="cross-attention is applied to the block's input x instead of to the output of the self-attention "
          "sublayer, so the self-attention result is lost in the second sublayer.")
# these differ from the right block only where it drops what it is given: built with dropout=1.0, in training mode
edit("decoder-dropout-on-the-sum", "DecoderBlock",
     (SELF, "self.norm1(self.dropout(x + self.self_attention(x, mask=self_mask)))"),
     (CROSS, "self.norm2(self.dropout(x + self.cross_attention(x, context=memory, mask=memory_mask)))"),
     (FF, "self.norm3(self.dropout(x + self.ff(x)))"), mistake="block-dropout-misplaced",
     says="the dropout is not where it belongs. Built with dropout=1.0 and run in training mode, where a dropout "
          "zeroes all it is given, the block should give norm3(norm2(norm1(x))); yours drops the residual sum or the "
          "normalised output instead. Apply the dropout to each sub-layer's output before it is added: x = norm1(x + "
          "dropout(self_attention(x, mask=self_mask))).")
edit("decoder-dropout-after-the-last-norm", "DecoderBlock", (FF, "self.dropout(self.norm3(x + self.ff(x)))"),
     mistake="block-dropout-misplaced")
edit("decoder-dropout-never-applied", "DecoderBlock",
     (SELF, "self.norm1(x + self.self_attention(x, mask=self_mask))"),
     (CROSS, "self.norm2(x + self.cross_attention(x, context=memory, mask=memory_mask))"),
     (FF, "self.norm3(x + self.ff(x))"), mistake="block-dropout-not-applied",
     says="the sub-layers' outputs do not pass through the dropout: built with dropout=1.0 and run in training mode, "
          "the block should drop all three and give norm3(norm2(norm1(x))). Apply nn.Dropout(dropout) to each "
          "sub-layer's output before it is added.")
BLOCK_MISTAKES = simulators(WRITTEN, "DecoderBlock")
# named from the structure recorded, or from a property (catalogue/seq2seq.py makes each)
WRITTEN.mistake("block-shared-attention",
                "self_attention and cross_attention are one module: create two MultiHeadAttention modules.")
WRITTEN.mistake("shared-norm", "two of the block's norms are one module: each sublayer needs its own LayerNorm(k).")
WRONG_SIZE = WRITTEN.mistake("wrong-size", "a part has the wrong size for the sizes the model was given.")
WRITTEN.mistake("block-not-causal",
                "the block reads the future: changing later target positions changes earlier outputs.")
WRITTEN.mistake("block-reads-padding", "the block reads padded memory positions, which memory_mask masks out.")


def _decoder(w: dict[str, torch.Tensor], *args: int | float, x: torch.Tensor, memory: torch.Tensor,
             self_mask: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The block built with args (k, heads, ff_mult[, dropout]) on x (b, t, k) and memory (b, s, k):
    nn.TransformerDecoderLayer with the weights w. Built with dropout=1.0 and run in training mode, where every
    dropout zeroes what it is given, the block gives norm3(norm2(norm1(x)))."""
    heads, dropout = args[1], args[3:]
    if dropout == (1.0,):
        for i in (1, 2, 3):
            x = oracles.layer_norm(w, f"norm{i}", x)
        return x
    return oracles.course_layer(w, "", heads, x, memory, causal=self_mask is not None,
                                pad=None if memory_mask is None else memory_mask[:, 0])


def _expect_padding_ignored(ev: Evidence, y: torch.Tensor, longer: torch.Tensor,
                            leaks: Iterable[tuple[Mistake, torch.Tensor]], *_: Any, what: str, advice: str,
                            mistake: Mistake) -> None:
    """Outputs (b, t, ...) y, and longer on the same inputs with more padding, masked out: equal. Else fail naming
    the first typical mistake in leaks (mistake, its output on the plain inputs) that y is, or advice and mistake
    (further arguments, a model check's then-callback's, ignored)."""
    __tracebackhide__ = True
    if matches_any(longer, [y], ev.device):
        return
    named = next((m for m, leak in leaks if matches_any(y, [leak], ev.device)), None)
    fail(f"{what} reads padded positions: more padded positions (masked out) changed its output. "
         + (f"It is not what was asked: {named.explanation}" if named else advice), y[0, :, 0], longer[0, :, 0],
         case="first feature of sequence 0, before and after adding padding", mistake=named or mistake)


# ---------------------------------------------------------------- DecoderBlock

#: the block's parts in groups: their kind, how each is made, the mistake of one module used twice
_BLOCK_GROUPS = ((("self_attention", "cross_attention"), "MultiHeadAttention", "MultiHeadAttention(k, heads)",
                  WRITTEN["block-shared-attention"]),
                 (("norm1", "norm2", "norm3"), "LayerNorm", "nn.LayerNorm(k)", WRITTEN["shared-norm"]),
                 (("ff",), "FeedForward", "FeedForward(k, ff_mult * k)", None))


def _block_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The block built (args (k, heads, ff_mult)) has the parts of _BLOCK_GROUPS; returns the weights loaded."""
    __tracebackhide__ = True
    key, (k, heads, ff_mult), dropout = built.key, built.args[:3], (*built.args[3:], 0.0)[0]
    what = f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})"
    modules.built(ev, key, f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}, dropout={dropout})")
    for names, kind, how, shared in _BLOCK_GROUPS:
        facts = [modules.expect_part(ev, key, BLOCK_NAME, name, kind, how) for name in names]
        if shared is not None and any(fact.get("same_as") for fact in facts):
            _not_asked(BLOCK_NAME, shared)
        if any(fact.get("heads", heads) != heads for fact in facts):
            _not_asked(what, WRONG_SIZE, f" Its attentions need {heads} heads: {how}.")
    w = modules.expect_parameters(ev, key, what, _block_shapes("", k, ff_mult), built.seed, hint=modules.PARTS_HINT,
                                  resized=WRONG_SIZE)
    modules.expect_parameter_count(ev, key, what, sum(v.numel() for v in w.values()),
                                   "two attentions, three norms and the feed-forward make",
                                   "Is an extra layer registered?")
    return w


DECODER = ForwardOracle(
    BLOCK_NAME, "a decoder block", _block_weights, _decoder,
    "nn.TransformerDecoderLayer with the same weights", lambda *_, **__: BLOCK_MISTAKES, advice=Advice(
        otherwise="x = norm1(x + self_attention(x, mask=self_mask)); x = norm2(x + cross_attention(x, "
                  "context=memory, mask=memory_mask)); return norm3(x + ff(x)).",
        hint="Masks are bool and broadcast to (b, t, t) for self-attention and to (b, t, s) for cross-attention; "
             "pass them on to MultiHeadAttention unchanged (mask=...).",
        shape_hints=lambda memory, **_: {tuple(memory.shape): "One output per memory position: are x and memory "
                                                              "swapped in cross-attention? The queries come from x."}))
DECODER_BLOCK = BlockOracle(lambda ev, built: (None, _block_weights(ev, built)), lambda _: DECODER)


against_block(probes.decoder_block_structure, DECODER_BLOCK, claim="has the right parts",
              passed="self_attention and cross_attention (two MultiHeadAttention), norm1-3 (LayerNorm(k)), ff "
                     "(FeedForward).")
against_block(probes.decoder_block_oracle, DECODER_BLOCK,
              passed="Random weights and inputs against nn.TransformerDecoderLayer (post-norm, ReLU) with the same "
                     "weights; with dropout=1.0 in training mode, norm3(norm2(norm1(x))).")
against_block(probes.decoder_block_small_case, DECODER_BLOCK,
              gradients=partial(expect_block_gradients, tolerate_mistakes=True),
              passed="k=4, 2 heads, a target of 3 and a source of 5 positions (the second with 2 padded): the block "
                     "against nn.TransformerDecoderLayer with the same weights, with the causal and the padding "
                     "mask; a loss on the output sends autograd's gradient to x, memory and every parameter.")


def _expect_block_property(check: RunsCheck, expect: Callable[..., None], claim: str, ev: Evidence,
                           gradients: Callable[..., None] | None = None) -> None:
    """The block on its run's first two cases has the property expect(ev, y, other, leaks=...) judges, naming the
    typical mistake it is; then every case as expect_block_runs judges it (claim: the property; gradients: a case
    with an upstream gradient, in a check declared with builds_and_runs_backward)."""
    __tracebackhide__ = True
    (run,) = check.runs
    w = _block_weights(ev, run.module)
    y, other = (forward_output(ev, c.key, DECODER, dict(c.inputs())) for c in run.cases[:2])
    expect(ev, y, other, leaks=simulated(DECODER, w, run.module.args, dict(run.cases[0].inputs())))
    expect_block_runs(ev, check.runs, DECODER_BLOCK, claim=claim, gradients=gradients)


declared(probes.decoder_block_causality,
         partial(_expect_block_property, probes.decoder_block_causality,
                 partial(expect_causal, position=3, what=f"{BLOCK_NAME}.forward with a causal self_mask",
                         advice=WRITTEN["block-self-mask-ignored"].explanation, mistake=WRITTEN["block-not-causal"]),
                 "is causal"),
         passed="(b, t, k) out for (b, t, k) in; with a causal self_mask, changing a later position never changes "
                "earlier ones.")
declared(probes.decoder_block_padding_gradients,
         partial(_expect_block_property, probes.decoder_block_padding_gradients,
                 partial(_expect_padding_ignored, what=BLOCK_NAME, advice="Pass memory_mask to cross-attention.",
                         mistake=WRITTEN["block-reads-padding"]), "ignores padded memory",
                 gradients=partial(expect_block_gradients, tolerate_mistakes=True)),
         passed="Extra masked memory positions change nothing; a loss reaches every parameter, x and memory, as "
                "autograd through nn.TransformerDecoderLayer gives it.")


# ---------------------------------------------------------------- Seq2SeqTransformer

#     Seq2SeqTransformer.encode: x = self.positions(self.src_embedding(src))
#                                for block in self.encoder: x = block(x, mask=src_mask.unsqueeze(1))
#                        decode: x = self.positions(self.tgt_embedding(tgt))
#                                self_mask = causal_mask(tgt.shape[1], device=tgt.device)
#                                for block in self.decoder:
#                                    x = block(x, memory, self_mask=self_mask, memory_mask=src_mask.unsqueeze(1))
#                                return self.to_logits(x)
# Each is built with the check's constructor arguments and run with the student's weights (_variant_outputs) on the
# first forward case of a run (the dropout ones only on the run built with dropout=1.0); when the logits match two,
# the first declared is named.
ENCODER_MASKED = "block(x, mask=src_mask.unsqueeze(1))"
MEMORY_MASKED = "self_mask=self_mask, memory_mask=src_mask.unsqueeze(1))"
SRC_POSITIONS, TGT_POSITIONS = "self.positions(self.src_embedding(src))", "self.positions(self.tgt_embedding(tgt))"
edit("model-softmax-output", "Seq2SeqTransformer",
     ("return self.to_logits(x)", "return self.to_logits(x).softmax(dim=-1)"), mistake="model-softmax",
     says="forward returns probabilities (a softmax of the logits). Return the raw logits: F.cross_entropy applies "
          "log-softmax itself.")
edit("model-not-causal", "Seq2SeqTransformer", ("self_mask=self_mask, ", ""), mistake="model-not-causal",
     says="the decoder is not causal: pass causal_mask(t) to every DecoderBlock as self_mask.")
edit("model-memory-not-masked", "Seq2SeqTransformer", (MEMORY_MASKED, "self_mask=self_mask)"),
     mistake="model-memory-not-masked",
     says="source padding is not masked in cross-attention: pass src_mask as memory_mask, shaped (b, 1, s), to every "
          "DecoderBlock.")
edit("model-encoder-not-masked", "Seq2SeqTransformer", (ENCODER_MASKED, "block(x)"), mistake="model-encoder-not-masked",
     says="source padding is not masked in the encoder: pass src_mask, shaped (b, 1, s), to every encoder block.")
edit("model-padding-not-masked", "Seq2SeqTransformer", (ENCODER_MASKED, "block(x)"),
     (MEMORY_MASKED, "self_mask=self_mask)"), mistake="model-padding-not-masked",
     says="source padding is masked neither in the encoder nor in cross-attention: pass src_mask shaped (b, 1, s) to "
          "both.")
edit("model-no-target-positions", "Seq2SeqTransformer", (TGT_POSITIONS, "self.tgt_embedding(tgt)"),
     mistake="model-no-target-positions",
     says="no positions are added to the target embeddings: apply self.positions in decode too.")
edit("model-no-source-positions", "Seq2SeqTransformer", (SRC_POSITIONS, "self.src_embedding(src)"),
     mistake="model-no-source-positions",
     says="no positions are added to the source embeddings: apply self.positions in encode too.")
edit("model-memory-is-embeddings", "Seq2SeqTransformer",
     ("        for block in self.encoder:\n"
      "            x = block(x, mask=src_mask.unsqueeze(1))  # mask (b, 1, s): no query reads padding\n", ""),
     mistake="model-memory-is-embeddings",
     says="the memory is the source embeddings: encode must run them through the encoder blocks.")
edit("model-scaled-embeddings", "Seq2SeqTransformer",
     ("        self.to_logits = nn.Linear(k, tgt_vocab_size)\n",
      "        self.to_logits = nn.Linear(k, tgt_vocab_size)\n        self.k = k\n"),
     (SRC_POSITIONS, "self.positions(self.src_embedding(src) * self.k ** 0.5)"),
     (TGT_POSITIONS, "self.positions(self.tgt_embedding(tgt) * self.k ** 0.5)"), mistake="model-scaled-embeddings",
     says="the embeddings are multiplied by √k; in this course the positions are added to the plain embeddings.")
# raises where a target id is past the source vocabulary (skipped there)
edit("model-target-source-embedding", "Seq2SeqTransformer", ("self.tgt_embedding(tgt)", "self.src_embedding(tgt)"),
     mistake="model-target-source-embedding",
     says="the target tokens are embedded with src_embedding; use tgt_embedding for them.")
# the same logits as model-memory-not-masked, so last: it never matches where that one did not
edit("model-decode-ignores-src-mask", "Seq2SeqTransformer",
     ("memory_mask=src_mask", "memory_mask=torch.ones_like(src_mask)"), mistake="model-memory-not-masked")
# named only on the run built with dropout=1.0 in training mode, where every dropout zeroes what it is given
edit("model-positions-without-dropout", "Seq2SeqTransformer",
     ("PositionalEncoding(k, max_len, dropout)", "PositionalEncoding(k, max_len)"), mistake="model-dropout-not-passed",
     says="a part of the model ignores its dropout: built with dropout=1.0 and run in training mode, where a dropout "
          "zeroes all it is given, the positions should give zeros and each block the norms of its input in turn. "
          "Pass dropout on to PositionalEncoding, every TransformerBlock and every DecoderBlock (dropout=dropout).")
edit("model-encoder-without-dropout", "Seq2SeqTransformer",
     ("TransformerBlock(k, heads, dropout=dropout)", "TransformerBlock(k, heads)"), mistake="model-dropout-not-passed")
edit("model-decoder-without-dropout", "Seq2SeqTransformer",
     ("DecoderBlock(k, heads, dropout=dropout)", "DecoderBlock(k, heads)"), mistake="model-dropout-not-passed")
# named from the structure recorded, or from a property (catalogue/seq2seq.py makes each)
SHARED_EMBEDDING = WRITTEN.mistake("shared-embedding", "src_embedding and tgt_embedding are one module: source and "
                                                       "target have their own vocabularies.")
SHARED_BLOCK = WRITTEN.mistake("shared-block", "one block is used for several layers: create a new block for every "
                                               "layer.")
WRONG_DEPTH = WRITTEN.mistake("wrong-depth", "the encoder or the decoder does not hold `depth` blocks.")
READS_FUTURE = WRITTEN.mistake("model-reads-future", "the model reads the future: changing a later target token "
                                                     "changes the logits at earlier positions.")
READS_PADDING = WRITTEN.mistake("model-reads-padding", "the model reads the source padding, which src_mask masks out.")
DECODE_INCONSISTENT = WRITTEN.mistake("decode-inconsistent", "decode(tgt, encode(src, src_mask), src_mask) differs "
                                                             "from forward(src, tgt, src_mask).")


def _translator(w: dict[str, torch.Tensor], k: int, heads: int, depth: int, src: torch.Tensor, tgt: torch.Tensor,
                src_mask: torch.Tensor) -> torch.Tensor:
    """Logits (b, t, tgt_vocab) by PyTorch's encoder and decoder layers with the check's weights."""
    x = F.embedding(src, w["src_embedding.weight"]) + oracles.sinusoidal_table(src.shape[1], k)  # (b, s, k)
    for i in range(depth):
        x = oracles.course_layer(w, f"encoder.{i}.", heads, x, pad=src_mask)
    y = F.embedding(tgt, w["tgt_embedding.weight"]) + oracles.sinusoidal_table(tgt.shape[1], k)  # (b, t, k)
    for i in range(depth):
        y = oracles.course_layer(w, f"decoder.{i}.", heads, y, x, causal=True, pad=src_mask)
    return oracles.dense(w, "to_logits", y)


@lru_cache(maxsize=128)
def _variant_model(written: Written, args: tuple, method: str) -> nn.Module:
    """The variant built with the constructor arguments args on the meta device (no weights drawn), once (building is
    most of a small model's cost; functional_call lends it weights), called through method (forward, or encode)."""
    with torch.device("meta"):
        model = written.run(*args)
    model.forward = getattr(model, method)  # what functional_call calls
    return model


def _variant_outputs(w: dict[str, torch.Tensor], args: tuple, method: str = "forward", **inputs: torch.Tensor
                     ) -> Iterator[tuple[Mistake, torch.Tensor, Callable]]:
    """(mistake, output, its function of the weights) of each written variant of Seq2SeqTransformer, lazily, in order,
    run with the weights w and the sinusoidal table as the positions' buffer, without autograd: built with a dropout
    (args' seventh), only the dropout ones, else the others; one that raises is skipped."""
    table = {"positions.table": oracles.sinusoidal_table(args[5], args[2])}  # args: (..., k, heads, depth, max_len)

    def run(written: Written, leaves: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.func.functional_call(_variant_model(written, args, method), {**leaves, **table}, kwargs=inputs,
                                          strict=True)

    for written in WRITTEN.of(MODEL_NAME):
        if (written.mistake is WRITTEN["model-dropout-not-passed"]) != bool(args[6:]):
            continue
        try:
            with torch.no_grad():
                out = run(written, w)
        except Exception:  # noqa: BLE001 - a variant that cannot run on these inputs matches nothing
            continue
        yield written.mistake, out, partial(run, written)


_MODEL_HINT = ("encode: x = positions(src_embedding(src)), then every encoder block with mask src_mask[:, None, :]; "
               "decode: y = positions(tgt_embedding(tgt)), every decoder block with self_mask = causal_mask(t) and "
               "memory_mask = src_mask[:, None, :], then to_logits.")
_MODEL_CALL_HINT = ("If the error is about sizes inside attention: a (b, s) padding mask must reach "
                    "MultiHeadAttention as (b, 1, s) — src_mask.unsqueeze(1) — so that it broadcasts over the queries.")
#: the model's parts: name, kind, how it is made
_MODEL_PARTS = (("src_embedding", "Embedding", "nn.Embedding(src_vocab_size, k)"),
                ("tgt_embedding", "Embedding", "nn.Embedding(tgt_vocab_size, k)"),
                ("positions", "PositionalEncoding", "PositionalEncoding(k, max_len, dropout)"),
                ("encoder", "ModuleList", "nn.ModuleList of `depth` TransformerBlock(k, heads)"),
                ("decoder", "ModuleList", "nn.ModuleList of `depth` DecoderBlock(k, heads)"),
                ("to_logits", "Linear", "nn.Linear(k, tgt_vocab_size)"))


def _model_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The model built has its named parts, of the right kinds and sizes, none shared; returns its weights."""
    __tracebackhide__ = True
    key, (src_vocab, tgt_vocab, k, heads, depth, max_len) = built.key, built.args[:6]
    modules.built(ev, key, f"{MODEL_NAME}({src_vocab}, {tgt_vocab}, k={k}, heads={heads}, depth={depth}, "
                           f"max_len={max_len})")
    parts = {name: modules.expect_part(ev, key, MODEL_NAME, name, kind, how) for name, kind, how in _MODEL_PARTS}
    if parts["tgt_embedding"].get("same_as") == "src_embedding":
        _not_asked(MODEL_NAME, SHARED_EMBEDDING)
    for name in ("encoder", "decoder"):
        items = parts[name].get("items")
        if not isinstance(items, list) or len(items) != depth:
            fail(f"{MODEL_NAME}.{name} holds {len(items) if isinstance(items, list) else '?'} blocks; with "
                 f"depth={depth} it should hold {depth}.", mistake=WRONG_DEPTH)
    if (parts["encoder"]["items"], parts["decoder"]["items"]) != (["TransformerBlock"] * depth,
                                                                  ["DecoderBlock"] * depth):
        fail(f"{MODEL_NAME}.encoder should hold course TransformerBlock(k, heads), and .decoder your "
             f"DecoderBlock(k, heads); the encoder holds {str(parts['encoder']['items'])[:80]}.",
             mistake=WRONG_PART_TYPE)
    if ev.facts[fact_key(key, "parts")].get("distinct_blocks") != 2 * depth:
        _not_asked(MODEL_NAME, SHARED_BLOCK)
    shapes = {"src_embedding.weight": (src_vocab, k), "tgt_embedding.weight": (tgt_vocab, k),
              **{n: s for i in range(depth) for n, s in modules.block_shapes(f"encoder.{i}.", k, 4 * k).items()},
              **{n: s for i in range(depth) for n, s in _block_shapes(f"decoder.{i}.", k, 4).items()},
              "to_logits.weight": (tgt_vocab, k), "to_logits.bias": (tgt_vocab,)}
    return modules.expect_parameters(ev, key, MODEL_NAME, shapes, built.seed, hint=modules.PARTS_HINT,
                                     resized=WRONG_SIZE)


#: how the strict checks judge the first logits: against PyTorch's encoder and decoder layers' with the check's weights,
#: naming the typical mistake they match (the others accept a typical mistake, which those checks name)
EXACT = partial(expect_close_batch, what=f"{MODEL_NAME}.forward", otherwise=_MODEL_HINT)


def _expect_translator(strict: Callable[..., None] | None, ev: Evidence, run: Runs,
                       then: Callable[..., None] | None = None) -> tuple[Case, dict[str, torch.Tensor], torch.Tensor]:
    """The run's model (probes.model_runs): its structure; the logits of its first forward case judged at once by
    strict (EXACT), else only as an encoder-decoder's, right or typically wrong, after what the other cases show:
    encode's shape, decode equal to forward, and then(ev, first logits, output, the typical mistakes' logits, first
    case, case) for each other one (causality, padding ignored). Returns that case, the weights and its logits."""
    __tracebackhide__ = True
    args, first = run.module.args, None
    w = _model_weights(ev, run.module)
    for case in run.cases:
        inputs = dict(case.inputs())
        (b, s), t = inputs["src"].shape, inputs["tgt"].shape[1]
        if case.key.startswith("memory"):
            output(ev, case.key, what=f"{MODEL_NAME}.encode(src, src_mask)", shape=(b, s, args[2]),
                   hint=_MODEL_CALL_HINT)
            continue
        what = f"{MODEL_NAME}.{'decode' if case.key.startswith('decoded') else 'forward(src, tgt, src_mask)'}"
        y = output(ev, case.key, what=what, shape=(b, t, args[1]), hint=_MODEL_CALL_HINT, shape_hints={
            (b, t, args[2]): "Those are the decoder's states: map them to logits with to_logits.",
            (b, s, args[1]): "One output per source position: the decoder must produce one per target position."})
        if first is None:
            first, logits = case, y
            with torch.no_grad():
                expected = _translator(w, *args[2:5], **inputs)
            mistakes = ((m, out) for m, out, _ in _variant_outputs(w, args, **inputs))  # computed only if needed
            if strict:
                strict(y, expected, device=ev.device, mistakes=mistakes, case=case.label)
            elif case.upstream is not None:
                modules.expect_attached(ev, case.key, f"{MODEL_NAME}.forward")
        elif case.key.startswith("decoded") and not matches_any(y, [logits], ev.device):
            _not_asked(MODEL_NAME, DECODE_INCONSISTENT, " Greedy decoding encodes once, then decodes step by step.",
                       logits[0, :, 0], y[0, :, 0], "first logit of sequence 0")
        elif then is not None:
            then(ev, logits, y, mistakes, first, case)
    if strict is None and not matches_any(logits, chain([expected], (out for _, out, _ in _variant_outputs(
            w, args, **first.inputs()))), ev.device):
        fail(f"{MODEL_NAME}'s logits match neither an encoder-decoder transformer with the check's weights nor a "
             f"known mistake: {_MODEL_HINT}", expected, logits, case=first.label)
    return first, w, logits


def _reads_no_future(ev: Evidence, logits: torch.Tensor, y: torch.Tensor, leaks: Iterable, first: Case,
                     case: Case) -> None:
    """Another target token at j changed no logit before j."""
    __tracebackhide__ = True
    j = int((case.inputs()["tgt"] != first.inputs()["tgt"]).any(dim=0).nonzero()[0])  # the target changed there
    expect_causal(ev, logits, y, j, f"{MODEL_NAME}.forward on targets", leaks, WRITTEN["model-not-causal"].explanation,
                  READS_FUTURE)


def _expect_gradients(strict: Callable[..., None] | None, ev: Evidence, run: Runs) -> None:
    """The run as _expect_translator judges it, then autograd's gradients on its first case (which has an upstream)
    through PyTorch's layers, or through the typical mistake its logits match (named where a parameter gets none)."""
    __tracebackhide__ = True
    (first, w, logits), args = _expect_translator(strict, ev, run), run.module.args
    because, through = None, lambda leaves: _translator(leaves, *args[2:5], **first.inputs())
    if not matches_any(logits, [through(w).detach()], ev.device):  # then a typical mistake's, as the run found
        because, _, through = next(c for c in _variant_outputs(w, args, **first.inputs())
                                   if matches_any(logits, [c[1]], ev.device))
    modules.expect_differentiable(ev, first.key, f"{MODEL_NAME}.forward")
    modules.expect_gradients(ev, modules.autograd(through, w, {}, first.upstream()), owner=MODEL_NAME,
                             case=first.label, because=because, hints={name: "Is memory the output of the encoder "
                             "blocks?" for name in w if name.startswith(("encoder", "src"))},
                             oracle="PyTorch's encoder and decoder layers with the same weights")


def _dropped(w: dict[str, torch.Tensor], k: int, depth: int, src: torch.Tensor, tgt: torch.Tensor,
             src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(memory, logits) of the model built with dropout=1.0 and run in training mode, where every dropout zeroes what
    it is given: the positions give zeros, each block the norms of its input in turn; src_mask changes nothing."""
    x, y = torch.zeros(*src.shape, k), torch.zeros(*tgt.shape, k)  # the positions' outputs, dropped
    for norm in [f"encoder.{i}.norm{j}" for i in range(depth) for j in (1, 2)]:
        x = oracles.layer_norm(w, norm, x)
    for norm in [f"decoder.{i}.norm{j}" for i in range(depth) for j in (1, 2, 3)]:
        y = oracles.layer_norm(w, norm, y)
    return x, oracles.dense(w, "to_logits", y)


def _expect_oracle(ev: Evidence) -> None:
    """Each run of seq2seq_oracle as _expect_translator judges it (with EXACT); the one built with a dropout
    (1.0, in training mode): encode's and forward's outputs against _dropped's, else the dropout variant they match
    named."""
    __tracebackhide__ = True
    for run in probes.seq2seq_oracle.cases:
        if not run.module.args[6:]:
            _expect_translator(EXACT, ev, run)
            continue
        args, w = run.module.args, _model_weights(ev, run.module)
        for case in run.cases:
            inputs, memory = dict(case.inputs()), case.key.startswith("memory")
            call = "encode(src, src_mask)" if memory else "forward(src, tgt, src_mask)"
            what, method = f"{MODEL_NAME}(..., dropout=1.0) in training mode: {call}", call.split("(")[0]
            y = output(ev, case.key, what=what, hint=_MODEL_CALL_HINT, shape=(*inputs["src"].shape, args[2]) if memory
                       else (*inputs["tgt"].shape, args[1]))
            called = {name: v for name, v in inputs.items() if not (memory and name == "tgt")}  # encode(src, src_mask)
            expect_close(y, _dropped(w, args[2], args[4], **inputs)[0 if memory else 1], what=what, device=ev.device,
                         mistakes=((m, out) for m, out, _ in _variant_outputs(w, args, method, **called)),
                         case=case.label, otherwise="Every dropout zeroes what it is given, so the positions "
                         "give zeros and each block the norms of its input in turn: pass dropout on to "
                         "PositionalEncoding(k, max_len, dropout), TransformerBlock(k, heads, dropout=dropout), "
                         "DecoderBlock(k, heads, dropout=dropout).")


each_case(probes.seq2seq_structure, partial(_expect_translator, None),
          then=partial(expect_on_gpus, seen_on=OnGpus("model", probes.TRANSLATE_ON_GPU, MASK_WRONG_DEVICE)),
          passed="The named parts; forward gives (b, t, tgt_vocab) logits; encode gives (b, s, k); on a stand-in CUDA "
                 "and MPS, the masks are made on the device.")
# the other model checks run one model each (seq2seq_oracle several, judged in turn), on no stand-in GPU
declared(probes.seq2seq_causality,
         lambda ev: _expect_translator(None, ev, *probes.seq2seq_causality.cases, then=_reads_no_future),
         passed="Changing a later target token never changes the logits at earlier positions.")
declared(probes.seq2seq_oracle, _expect_oracle,
         passed="Random weights against PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with the "
                "same weights; decode(tgt, encode(src, src_mask), src_mask) equals forward; with dropout=1.0 in "
                "training mode, every part drops what it is given.")
declared(probes.seq2seq_padding, lambda ev: _expect_translator(None, ev, *probes.seq2seq_padding.cases, then=partial(
    _expect_padding_ignored, what=MODEL_NAME, mistake=READS_PADDING, advice="Pass src_mask shaped (b, 1, s) to every "
    "encoder block AND as memory_mask to every decoder block.")),
         passed="More padding on the source (filled with arbitrary tokens, masked out) never changes the logits.")
declared(probes.seq2seq_gradients, lambda ev: _expect_gradients(None, ev, *probes.seq2seq_gradients.cases),
         passed="A loss on the logits sends a gradient to every parameter (embeddings, encoder, decoder, output "
                "layer), as autograd through PyTorch's layers gives it.")
declared(probes.seq2seq_small_case, lambda ev: _expect_gradients(EXACT, ev, *probes.seq2seq_small_case.cases),
         passed="A small model and batch (k=4, depth=2, source lengths 5 and 3) against PyTorch's encoder and "
                "decoder layers with the same weights; a loss on the logits sends autograd's gradient to every "
                "parameter.")


# ---------------------------------------------------------------- the loss

def _translator_logits(model: nn.Module, src, src_mask, tgt, pad) -> torch.Tensor:
    """The stand-in model's logits (b, n - 1, vocab) on tgt[:, :-1]: those that predict tgt[:, 1:]."""
    return model(src, tgt[:, :-1], src_mask)


#     teacher_forcing_loss: logits = model(src, tgt[:, :-1], src_mask)
#                           return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)
# first: with pad != 0 and no label 0, ignoring 0 and ignoring nothing give the same number
edit("loss-pad-hard-coded", "teacher_forcing_loss", ("ignore_index=pad", "ignore_index=0"),
     mistake="loss-pad-hard-coded",
     says="the padding id is hard-coded as 0 (or the padding is not ignored at all): ignore the labels equal to the "
          "`pad` argument (ignore_index=pad).")
edit("loss-not-shifted", "teacher_forcing_loss", ("model(src, tgt[:, :-1], src_mask)", "model(src, tgt, src_mask)"),
     ("tgt[:, 1:], ignore_index", "tgt, ignore_index"), mistake="loss-not-shifted",
     says="the targets are not shifted: the decoder reads tgt and is scored on tgt itself, so at every position the "
          "answer is already in its input and the model learns to copy its input. Feed tgt[:, :-1], score against "
          "tgt[:, 1:].")
edit("loss-counts-padding", "teacher_forcing_loss", (", ignore_index=pad)", ")"), mistake="loss-counts-padding",
     says="the loss counts the padding: pass ignore_index=pad to F.cross_entropy (or average over real tokens only).")
edit("loss-wrong-shift", "teacher_forcing_loss", ("tgt[:, :-1], src_mask", "tgt[:, 1:], src_mask"),
     ("tgt[:, 1:], ignore_index", "tgt[:, :-1], ignore_index"), mistake="loss-wrong-shift",
     says="the shift goes the wrong way: the decoder reads tgt[:, :-1] (starting with <bos>) and predicts tgt[:, 1:].")
edit("loss-sum", "teacher_forcing_loss", ("ignore_index=pad)", "ignore_index=pad, reduction='sum')"),
     mistake="loss-sum", says="the loss is a sum, not a mean over the real target tokens.")


@WRITTEN.rewrite("teacher_forcing_loss", "loss-per-sequence",
                 says="the loss is averaged per sequence first; the task asks for the mean over all real target tokens "
                      "of the batch (what F.cross_entropy(..., ignore_index=pad) gives).")
def loss_per_sequence(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    labels = tgt[:, 1:]
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=pad, reduction='none')
    real = (labels != pad).float()
    return ((per_token * real).sum(1) / real.sum(1)).mean()


edit("loss-softmax-twice", "teacher_forcing_loss", ("logits.transpose(1, 2)", "logits.softmax(dim=-1).transpose(1, 2)"),
     mistake="loss-softmax",
     says="a softmax is applied before F.cross_entropy, which applies log-softmax itself: pass the raw logits.")

TEACHER_FORCING = LossOracle(
    LOSS_NAME, _translator_logits, tokens="tgt", pad="pad",
    written=lambda **inputs: WRITTEN.outputs("teacher_forcing_loss", **inputs),
    hint="logits = model(src, tgt[:, :-1], src_mask); loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], "
         "ignore_index=pad). F.cross_entropy wants the classes in dimension 1.",
    name="F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)")

against_loss(probes.loss_oracle, TEACHER_FORCING,
             passed="Targets of different lengths: cross-entropy of tgt[:, 1:] given tgt[:, :-1], padding ignored.")
against_loss(probes.loss_gradients, TEACHER_FORCING,
             passed="A padding id of 4, and the gradients autograd gives through F.cross_entropy.")
against_loss(probes.loss_hidden, TEACHER_FORCING, passed="Other batches, with padding ids 0 and 5.")


#     greedy_decode: with torch.no_grad():
#                        memory = model.encode(src, src_mask); tokens = torch.full((b, 1), bos, ...); done = zeros(b)
#                        for _ in range(max_len):
#                            next_token = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)
#                            next_token = next_token.masked_fill(done, PAD); tokens = torch.cat([tokens, next_token...])
#                            done |= next_token == eos; if bool(done.all()): break
#                    return tokens[:, 1:]
# Each is run on the case's model and inputs, its tokens cut or padded to the student's width. First the notebook's
# ids in place of the arguments: only the case with other ids tells them apart, and there they also look like never
# stopping or forgetting <bos> (BOS in place of bos is named too, by the oracle given BOS: not catalogued, see there).
MASK_DONE, MARK_DONE = "next_token = next_token.masked_fill(done, PAD)", "            done |= next_token == eos\n"
edit("greedy-notebook-eos", "greedy_decode", ("== eos", "== EOS"), mistake="greedy-ids-hard-coded",
     says="the notebook's BOS or EOS is used in place of the `bos` and `eos` arguments: start every sequence with "
          "`bos`, and finish it at `eos`, whichever ids the caller passes.")
edit("greedy-never-stops", "greedy_decode", (f"            {MASK_DONE}\n", ""),
     ("            if bool(done.all()):\n                break\n", ""), mistake="greedy-never-stops",
     says="decoding never stops at <eos>: the tokens after a sequence's <eos> must be <pad> (0) — keep a `finished` "
          "flag per sequence and write <pad> once it is set.")
edit("greedy-returns-bos", "greedy_decode", ("return tokens[:, 1:]", "return tokens"), mistake="greedy-returns-bos",
     says="the output starts with <bos>: return only the generated tokens (drop column 0).")
edit("greedy-fills-with-eos", "greedy_decode", ("masked_fill(done, PAD)", "masked_fill(done, eos)"),
     mistake="greedy-eos-padded",
     says="after <eos> the sequence is filled with <eos>; fill it with <pad> (0) instead.")
edit("greedy-eos-overwritten-by-pad", "greedy_decode", (MARK_DONE, ""),
     (MASK_DONE, f"{MARK_DONE.strip()}\n            {MASK_DONE}"), mistake="greedy-eos-overwritten",
     says="the <eos> itself is replaced by <pad>: a sequence is marked finished before its <eos> is appended. Append "
          "the token first, then set `finished` where it is <eos>, so only the tokens after it become <pad>.")
edit("greedy-forgets-bos", "greedy_decode", ("(src.shape[0], 1), bos,", "(src.shape[0], 1), 0,"),
     mistake="greedy-forgets-bos",
     says="the decoder does not start from <bos>: the first input of every sequence is the <bos> token.")
edit("greedy-first-position", "greedy_decode", ("[:, -1].argmax(dim=-1)", "[:, 0].argmax(dim=-1)"),
     mistake="greedy-first-position",
     says="the next token is the argmax at the FIRST position of the decoder's output; the prediction for the next "
          "token is at the LAST position: logits[:, -1].argmax(-1).")
# named from the width, the dtype, the autograd fact or the device (catalogue/seq2seq.py makes each)
TOO_LONG = WRITTEN.mistake("greedy-too-long", "more than max_len tokens are returned per sequence.")
STOPS_EARLY = WRITTEN.mistake("greedy-stops-early", "decoding stops before every sequence has written <eos>.")
NOT_IDS = WRITTEN.mistake("greedy-not-ids", "the tokens are not torch.long ids.")
WITH_AUTOGRAD = WRITTEN.mistake(
    "greedy-not-under-no-grad", "the model runs with autograd on: decode inside `with torch.no_grad():`, so that no "
                                "graph of every step is kept (the notebook's instructions ask for it).")
MADE_ON_THE_CPU = WRITTEN.mistake(
    "greedy-made-on-the-cpu", "the start tokens or the finished flags are made on the CPU (no device=): make them "
                              "where the source is, torch.full((b, 1), bos, dtype=torch.long, device=src.device) and "
                              "torch.zeros(b, dtype=torch.bool, device=src.device). A CPU grader would pass it; on a "
                              "GPU the model refuses CPU tokens.")


def _step_by_step(model: nn.Module, src, src_mask, max_len: int, bos: int, eos: int) -> torch.Tensor:
    """The tokens (b, n) of greedy decoding (the oracle): run the whole model on the prefix, append the argmax at the
    last position, <pad> after <eos>, stop when every sequence has its <eos>."""
    tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long)  # (b, 1)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1)  # (b,)
            nxt = nxt.masked_fill(finished, PAD_ID)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if bool(finished.all()):
                break
    return tokens[:, 1:]  # (b, n)


def _decode_mistakes(inputs: dict[str, Any], bos: int, eos: int) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """(mistake, its tokens) lazily: first the notebook's BOS in place of bos, the oracle given BOS (no variant of it:
    only the hidden case tells it apart, and 07's catalogue keeps nine in ten of its mistakes caught while working),
    then each written variant of greedy_decode."""
    yield WRITTEN["greedy-ids-hard-coded"], _step_by_step(**inputs, bos=BOS_ID, eos=eos)
    yield from WRITTEN.outputs("greedy_decode", **inputs, bos=bos, eos=eos)


def _fit(tokens: torch.Tensor, width: int) -> torch.Tensor:
    """tokens (b, n) cut or padded with <pad> to (b, width)."""
    return F.pad(tokens, (0, max(0, width - tokens.shape[1])), value=PAD_ID)[:, :width]


_DECODE_HINT = ("Start every sequence with <bos>; at each step run the model on what you have, take the argmax of "
                "the LAST position, append it; once a sequence has written <eos>, append <pad> (0) to it; stop when "
                "all sequences are finished or after max_len steps. Return the tokens without the <bos>.")


def _expect_decode(ev: Evidence, case: probes.SettingCase) -> None:
    """The tokens recorded for case against the step-by-step argmax of its model, naming the typical mistake."""
    __tracebackhide__ = True
    source, max_len = case.settings()
    model, src, lengths = source()
    label = case.label.format(lengths=lengths.tolist(), max_len=max_len)
    bos, eos = probes.ids_of(model)
    inputs = {"model": model, "src": src, "src_mask": _padding(lengths, src.shape[1]), "max_len": max_len}
    expected = _step_by_step(**inputs, bos=bos, eos=eos)  # (b, n)
    out = output(ev, case.key, what=DECODE_NAME, dtype="any", hint=_DECODE_HINT)
    if out.dtype != torch.long:
        _not_asked(DECODE_NAME, NOT_IDS, f" It returned dtype {out.dtype}; argmax gives torch.long.")
    if out.dim() != 2 or out.shape[0] != expected.shape[0]:
        fail(f"{DECODE_NAME} returned shape {tuple(out.shape)}, not ({len(src)}, n <= max_len).", mistake=WRONG_SHAPE)
    width, shown = out.shape[1], (Rows(expected), Rows(out), label)
    if width > max_len:
        with_bos = _fit(torch.cat([torch.full_like(expected[:, :1], bos), expected], dim=1), width)
        mistake = WRITTEN["greedy-returns-bos"] if torch.equal(out, with_bos) else TOO_LONG
        _not_asked(DECODE_NAME, mistake, f" (max_len={max_len})", *shown)
    if width < expected.shape[1]:
        _not_asked(DECODE_NAME, STOPS_EARLY, f" (it stopped after {width} tokens)", *shown)
    mistakes = _decode_mistakes(inputs, bos, eos)
    expect_equal(out, _fit(expected, width), what=DECODE_NAME, mistakes=((m, _fit(v, width)) for m, v in mistakes),
                 case=label, otherwise=_DECODE_HINT, differs="does not agree with the step-by-step argmax of the model")
    if ev.facts.get(fact_key(case.key, "autograd_on")):
        _not_asked(DECODE_NAME, WITH_AUTOGRAD, f" (the right tokens, {label})")


each_case(probes.greedy_decode_scripted, _expect_decode,
          then=partial(expect_on_gpus, seen_on=OnGpus("tokens", probes.DECODE_ON_GPU, MADE_ON_THE_CPU)),
          passed="A stand-in model whose greedy output is known: each sequence stops at its <eos>, then 0s; on a "
                 "stand-in CUDA and MPS, the tokens are made on the source's device.")
each_case(probes.greedy_decode_step_by_step, _expect_decode,
          passed="A random stand-in translator against the step-by-step argmax; and max_len cuts long outputs.")


# ---------------------------------------------------------------- the training loop's parts

def _table(rows: list[tuple[str, ...]], align: Callable[[str, int], str] = str.ljust) -> str:
    """Lines of a table a message shows, indented so that wrapping keeps them."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("    " + "  ".join(align(cell, w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def _returned(ev: Evidence, key: str, what: str, asked: str) -> NoReturn:
    """Fail: what returned the type recorded under key, not what was asked."""
    __tracebackhide__ = True
    fact = ev.facts.get(key)
    fail(f"{what} returned {str(fact.get('type') if isinstance(fact, dict) else 'nothing')[:60]}; it should return "
         f"{asked}.")


# configure_optimizer's mistakes, named from the parameter groups recorded (catalogue/seq2seq.py makes each)
WRITTEN.mistake(
    "optimizer-decay-everything",
    "weight decay is applied to every parameter, the biases and the LayerNorm gains and offsets too (as "
    "AdamW(model.parameters(), weight_decay=...) does). Those set scales and offsets: shrinking them towards 0 "
    "regularises nothing. Put the parameters of two or more dimensions in a group with weight_decay, the others in a "
    "group with weight_decay=0.")
WRITTEN.mistake(
    "optimizer-decay-swapped",
    "the groups are swapped: the biases and LayerNorm parameters (fewer than two dimensions) are decayed and the "
    "weight matrices and embeddings are not. Decay the parameters with p.dim() >= 2.")
WRITTEN.mistake(
    "optimizer-plain-adam",
    "the optimizer is torch.optim.Adam, whose weight_decay adds weight_decay * p to the gradient, where Adam's "
    "scaling then shrinks it for the parameters with large gradients: not a decay of every weight at the same rate. "
    "Use torch.optim.AdamW, which decouples the decay from the gradient.")
WRITTEN.mistake(
    "optimizer-parameter-twice",
    "a parameter is in both groups (PyTorch refuses that). Split the parameters by p.dim() >= 2: each goes to exactly "
    "one group.")
WRITTEN.mistake(
    "optimizer-parameter-missing",
    "a trainable parameter is in no group, so the optimizer never updates it. Go through model.parameters() (or "
    "model.named_parameters()) and put every trainable parameter in one of the two groups.")
WRITTEN.mistake(
    "optimizer-frozen-included",
    "a frozen parameter (requires_grad=False) is in a group. Leave out the parameters that do not require gradients: "
    "they are not trained.")
WRITTEN.mistake(
    "optimizer-lr-not-set",
    "the groups do not have the lr given: pass lr=lr to torch.optim.AdamW (its default is 1e-3).")


def _expect_optimizer(ev: Evidence, case: probes.SettingCase) -> None:
    """An AdamW whose groups hold every trainable parameter once: weight_decay if p.dim() >= 2, else 0; the lr given."""
    __tracebackhide__ = True
    sizes, lr, weight_decay = case.settings()
    what = f"configure_optimizer(model, lr={lr:g}, weight_decay={weight_decay:g})"
    fact = ev.facts.get(case.key)
    if isinstance(fact, dict) and "more than one parameter group" in str(fact.get("message")):
        _not_asked(what, WRITTEN["optimizer-parameter-twice"], f" It raised: {str(fact.get('message'))[:200]}")
    raised(ev, case.key, what)
    if ev.facts.get(fact_key(case.key, "class")) == "Adam":
        _not_asked(what, WRITTEN["optimizer-plain-adam"])
    if ev.facts.get(fact_key(case.key, "class")) != "AdamW":
        _returned(ev, case.key, what, "a torch.optim.AdamW")
    params = dict(probes.StandInNetwork(*sizes).named_parameters())
    count, decay, rates = (tensor(ev, fact_key(case.key, name), shape=(len(params),))
                           for name in ("count", "decay", "lr"))
    foreign = tensor(ev, fact_key(case.key, "foreign"), shape=())
    if (any(t is None for t in (count, decay, rates, foreign)) or count.dtype != torch.int64
            or not decay.is_floating_point() or not rates.is_floating_point() or foreign.is_floating_point()):
        fail(f"The test's record of {what} is inconsistent (its parameter groups).")
    held, wd = dict(zip(params, count.tolist(), strict=True)), dict(zip(params, decay.tolist(), strict=True))
    dims = {name: p.dim() for name, p in params.items() if p.requires_grad}  # the trainable parameters
    yours = {name: {0: "in no group", 1: f"{wd[name]:g}"}.get(held[name], f"in {held[name]} groups") for name in params}
    table = "\n\nOn a small case (a stand-in model):\n" + _table([
        ("parameter", "dims", "weight_decay", "yours"),
        *((name, str(d), f"{weight_decay if d >= 2 else 0.0:g}", yours[name]) for name, d in dims.items()),
        *((name, "frozen", "in no group", yours[name]) for name in params if name not in dims)])
    decayed = {name: held[name] == 1 and math.isclose(wd[name], weight_decay, rel_tol=1e-6) for name in dims}
    plain = {name: held[name] == 1 and wd[name] == 0.0 for name in dims}
    if all(decayed.values()):
        _not_asked(what, WRITTEN["optimizer-decay-everything"], table)
    if all(decayed[n] if d < 2 else plain[n] for n, d in dims.items()):
        _not_asked(what, WRITTEN["optimizer-decay-swapped"], table)
    if int(foreign) != 0:
        fail(f"{what} holds tensors that are not parameters of the model: use model.parameters().{table}")
    if any(held[name] for name in params if name not in dims):
        _not_asked(what, WRITTEN["optimizer-frozen-included"], table)
    if any(held[name] == 0 for name in dims):
        _not_asked(what, WRITTEN["optimizer-parameter-missing"], table)
    if not all(decayed[n] if d >= 2 else plain[n] for n, d in dims.items()):
        fail(f"{what} gives parameters the wrong weight decay: weight_decay if p.dim() >= 2, else 0.{table}")
    lrs = sorted({float(rates[i]) for i, name in enumerate(params) if name in dims})
    if not all(math.isclose(v, lr, rel_tol=1e-6) for v in lrs):
        _not_asked(what, WRITTEN["optimizer-lr-not-set"],
                   f" The groups have lr {', '.join(f'{v:g}' for v in lrs[:4])}.")


each_case(probes.configure_optimizer_groups, _expect_optimizer,
          passed="An AdamW: weight_decay on the matrices and the embedding, 0 on the rest, the frozen one left out.")
each_case(probes.configure_optimizer_hidden, _expect_optimizer,
          passed="Other stand-ins (blocks in an nn.ModuleList), learning rates and weight decays.")


#     learning_rate: if step < warmup: return peak * (step + 1) / warmup
#                    progress = (step + 1 - warmup) / (steps - warmup)
#                    return peak * 0.5 * (1 + math.cos(math.pi * progress))
WARMUP, PROGRESS = "peak * (step + 1) / warmup", "(step + 1 - warmup) / (steps - warmup)"
NO_WARMUP = ("    if step < warmup:\n        return peak * (step + 1) / warmup\n", "")
edit("lr-warmup-off-by-one", "learning_rate", (WARMUP, "peak * step / warmup"), mistake="lr-warmup-off-by-one",
     says="the warm-up is one step off: step 0 must already have peak / warmup, and step warmup - 1 the peak, lr = "
          "peak * (step + 1) / warmup for step < warmup.")
edit("lr-warmup-one-step-long", "learning_rate", ("if step < warmup:", "if step <= warmup:"),
     mistake="lr-warmup-off-by-one")
edit("lr-decay-not-offset", "learning_rate", (PROGRESS, "(step + 1) / steps"), mistake="lr-decay-not-offset",
     says="the cosine decay does not start where the warm-up ends: its progress must count the steps after the "
          "warm-up, (step + 1 - warmup) / (steps - warmup), so it is 0 at the peak and 1 at the last step.")
edit("lr-decay-counted-from-zero", "learning_rate", (PROGRESS, "(step + 1) / (steps - warmup)"),
     mistake="lr-decay-not-offset")
edit("lr-decay-off-by-one", "learning_rate", (PROGRESS, "(step - warmup) / (steps - warmup)"),
     mistake="lr-decay-off-by-one",
     says="the decay is one step off: with progress (step + 1 - warmup) / (steps - warmup) the first step after the "
          "warm-up is already below the peak and the last step (steps - 1) has exactly 0.")
edit("lr-decay-off-by-one-twice", "learning_rate", (PROGRESS, "(step - warmup) / (steps - warmup - 1)"),
     mistake="lr-decay-off-by-one")
edit("lr-decays-upward", "learning_rate", ("(1 + math.cos(", "(1 - math.cos("), mistake="lr-decays-upward",
     says="the learning rate rises after the warm-up instead of falling: the decay is peak * (1 + cos(pi * progress)) "
          "/ 2, which is peak at progress 0 and 0 at progress 1 (not 1 - cos).")
edit("lr-linear-decay", "learning_rate",
     ("return peak * 0.5 * (1 + math.cos(math.pi * progress))", "return peak * (1 - progress)"),
     mistake="lr-linear-decay", says="the decay is linear; a cosine is asked: peak * (1 + cos(pi * progress)) / 2.")
edit("lr-no-warmup", "learning_rate", NO_WARMUP, mistake="lr-no-warmup",
     says="there is no warm-up: the first warmup steps must rise linearly, peak * (step + 1) / warmup, before the "
          "cosine decay starts.")
edit("lr-no-warmup-decay-from-zero", "learning_rate", NO_WARMUP, (PROGRESS, "(step + 1) / steps"),
     mistake="lr-no-warmup")
# named from the type recorded (catalogue/seq2seq.py's lr-as-a-tensor makes it)
LR_NOT_A_FLOAT = WRITTEN.mistake("lr-not-a-float", "the exercise asks for the rate as a Python float: compute it "
                                                   "with math.cos and math.pi (torch.cos takes and returns a tensor).")


def _schedule(steps: int, peak: float, warmup: int) -> torch.Tensor:
    """Every step's learning rate (steps,) float64: peak * (step + 1) / warmup while step < warmup, then a cosine
    decay of progress (step + 1 - warmup) / (steps - warmup)."""
    progress = [(step + 1 - warmup) / max(1, steps - warmup) for step in range(steps)]
    return torch.tensor([peak * (step + 1) / warmup if step < warmup else peak * 0.5 * (1 + math.cos(math.pi * p))
                         for step, p in enumerate(progress)], dtype=torch.float64)


def _schedules(steps: int, peak: float, warmup: int) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """(mistake, every step's rate) of each written variant of learning_rate, in order, lazily; one that raises at a
    step is skipped."""
    for written in WRITTEN.of("learning_rate"):
        try:
            rates = [float(written.run(step, steps, peak, warmup)) for step in range(steps)]
        except Exception:  # noqa: BLE001 - a variant that cannot run on these settings matches nothing
            continue
        yield written.mistake, torch.tensor(rates, dtype=torch.float64)


def _off(actual: torch.Tensor, expected: torch.Tensor, peak: float) -> torch.Tensor:
    """The steps (bool, (steps,)) at which a schedule is not expected's."""
    return ~((actual - expected).abs() <= 1e-6 * peak + 1e-5 * expected.abs())


def _expect_schedule(ev: Evidence, case: probes.SettingCase) -> None:
    """Every step's learning rate against the formula, naming the typical mistake it matches, with a table of the
    steps that matter (the warm-up's, the decay's, the first that differs)."""
    __tracebackhide__ = True
    steps, peak, warmup = case.settings()
    what = f"learning_rate(step, steps={steps}, peak={peak:g}, warmup={warmup})"
    raised(ev, case.key, f"{what} at step {ev.facts.get(fact_key(case.key, 'step'))}")
    actual = tensor(ev, case.key, shape=(steps,))
    if actual is None or actual.dtype != torch.float64:
        _returned(ev, case.key, what, "the learning rate, a number (a float)")
    expected = _schedule(steps, peak, warmup)
    if not _off(actual, expected, peak).any():
        others = [name for name in ev.facts.get(fact_key(case.key, "types"), ()) if name not in ("float", "int")]
        if others:
            fail(f"{what} gives the right rates, as {' and '.join(others)}: {LR_NOT_A_FLOAT.explanation}",
                 mistake=LR_NOT_A_FLOAT)
        return
    wrong = int(_off(actual, expected, peak).nonzero()[0])
    shown = sorted({0, warmup // 2, max(0, warmup - 1), min(warmup, steps - 1), warmup - 1 + (steps - warmup + 1) // 2,
                    steps - 1, wrong})
    table = _table([("step", "expected", "yours"), *((str(s), f"{float(expected[s]):.6g}", f"{float(actual[s]):.6g}")
                                                     for s in shown)], str.rjust)
    more = f"\n\nOn a small case ({steps} steps, peak {peak:g}, warmup {warmup}; first difference at step {wrong}):\n"
    mistake = next((m for m, v in _schedules(steps, peak, warmup) if not _off(actual, v, peak).any()), None)
    if mistake is not None:
        _not_asked(what, mistake, more + table)
    fail(f"{what} does not follow the schedule: lr = peak * (step + 1) / warmup for step < warmup, else "
         f"peak * (1 + cos(pi * (step + 1 - warmup) / (steps - warmup))) / 2.{more}{table}")


each_case(probes.learning_rate_schedule, _expect_schedule,
          passed="20 steps, 4 of warm-up: every step's learning rate, from peak / 4 at step 0 to 0 at step 19.")
each_case(probes.learning_rate_hidden, _expect_schedule,
          passed="The notebook's 800 steps, a single warm-up step, a warm-up of all steps but the last.")


#     train_step: for group in optimizer.param_groups: group["lr"] = lr
#                 optimizer.zero_grad(); loss.backward()
#                 norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(); return norm
# Each is run as the oracle is (_train_steps), and named by the parameters after its calls.
SETS_LR, ZEROES = '    for group in optimizer.param_groups:\n        group["lr"] = lr\n', "    optimizer.zero_grad()\n"
CLIPS = "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n"
edit("train-step-lr-not-set", "train_step", (SETS_LR, ""), mistake="train-step-lr-not-set",
     says="the step uses the learning rate the optimizer was created with, not the lr argument. Set it in every "
          "parameter group first: for group in optimizer.param_groups: group['lr'] = lr.")
edit("train-step-lr-one-group", "train_step", (SETS_LR, '    optimizer.param_groups[0]["lr"] = lr\n'),
     mistake="train-step-lr-one-group",
     says="only the first parameter group gets the new lr: the optimizer has one group per kind of parameter (here "
          "two). Set it in every group: for group in optimizer.param_groups: group['lr'] = lr.")
edit("train-step-no-zero-grad", "train_step", (ZEROES, ""), mistake="train-step-no-zero-grad",
     says="the gradients are not zeroed: loss.backward() adds to the .grad the previous step left, so the second step "
          "moves along the sum of both gradients. Call optimizer.zero_grad() before loss.backward().")
edit("train-step-clips-values", "train_step", ("clip_grad_norm_", "clip_grad_value_"),
     mistake="train-step-clips-values",
     says="each gradient entry is clamped to [-max_norm, max_norm] (clip_grad_value_), which changes the gradient's "
          "direction. Scale the whole gradient so that its total norm is at most max_norm: "
          "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).")
edit("train-step-clips-after-step", "train_step", (f"{CLIPS}    optimizer.step()\n", f"    optimizer.step()\n{CLIPS}"),
     mistake="train-step-clips-after-step",
     says="the gradient is clipped after optimizer.step(), which has already used the unclipped gradient. Clip "
          "between loss.backward() and optimizer.step().")
# named from the norms returned (catalogue/seq2seq.py makes each): clipping before backward moves the parameters as
# clipping after the step does, but measures no gradient
WRITTEN.mistake("train-step-clips-before-backward",
                "the gradient is clipped before loss.backward() computes it: clipping then sees no gradient (or the "
                "previous step's), and the step uses the unclipped one. Clip between loss.backward() and "
                "optimizer.step().")
WRITTEN.mistake("train-step-norm-after-clipping",
                "the norm returned is the one after clipping (at most max_norm). Return the norm before clipping: it "
                "is what torch.nn.utils.clip_grad_norm_ returns, and what tells how often clipping acts.")


def _clipped_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float,
                  max_norm: float) -> torch.Tensor:
    """The oracle's update: lr in every group, the gradients zeroed, backward, the total norm clipped, one step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _train_steps(case: probes.StepCase, step: Callable = _clipped_step) -> tuple[list[dict[str, torch.Tensor]], list]:
    """The parameters after each of two calls of step (the oracle's, or a variant's train_step) on case and what each
    call returned, by PyTorch's SGD in float64."""
    model = case.model().double()
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=probes.INITIAL_LR)
    after, returned = [], []
    for i, lr in enumerate(case.lrs):
        x, y = (v.double() for v in case.batch(i))
        returned.append(step(model, optimizer, ((model(x) - y) ** 2).mean(), lr, case.max_norm))
        after.append({name: p.detach().clone() for name, p in model.named_parameters()})
    return after, returned


def _variant_steps(case: probes.StepCase) -> Iterator[tuple[Mistake, list[dict[str, torch.Tensor]]]]:
    """(mistake, the parameters after each call) of each written variant of train_step, in order, lazily; one that
    raises is skipped."""
    for written in WRITTEN.of("train_step"):
        try:
            yield written.mistake, _train_steps(case, written.run)[0]
        except Exception:  # noqa: BLE001, PERF203 - a variant that cannot run on this case matches nothing
            continue


def _moved_as(actual: list[dict[str, torch.Tensor]], expected: list[dict[str, torch.Tensor]],
              before: dict[str, torch.Tensor], device: str, calls: int) -> bool:
    """The updates of the first calls (each call's parameters minus the previous ones) agree, relative to the size
    of the expected update."""
    rtol = course_device.device_row(device)["update"]
    for i in range(calls):
        for name, want in expected[i].items():
            start = before[name] if i == 0 else expected[i - 1][name]
            move, done = want - start, actual[i][name] - start
            if not bool(((done - move).abs() <= rtol * (move.abs().max() + 1e-9)).all()):
                return False
    return True


def _expect_steps(ev: Evidence, case: probes.StepCase) -> None:
    """Two calls of train_step: the parameters after each against one SGD step along the clipped gradient at lr,
    naming the typical mistake they match; then the norms returned, before clipping."""
    __tracebackhide__ = True
    _, n_in, n_out = case.settings()
    what = f"train_step(model, optimizer, loss, lr, max_norm={case.max_norm:g})"
    for i in range(2):
        raised(ev, fact_key(case.key, f"norm{i}"), f"{what} (call {i + 1})")
    before = {name: p.detach().double() for name, p in case.model().named_parameters()}
    actual = [{name: tensor(ev, fact_key(case.key, f"after{i}.{name}"), shape=tuple(p.shape))
               for name, p in before.items()} for i in range(2)]
    if any(v is None or not v.is_floating_point() for after in actual for v in after.values()):
        fail(f"The test recorded no parameters of {what}: the check did not run to the end.")
    actual = [{name: v.double() for name, v in after.items()} for after in actual]
    expected, norms = _train_steps(case)
    norms = [float(norm) for norm in norms]
    wrong = next((i for i in range(2) if not _moved_as(actual, expected, before, ev.device, i + 1)), None)
    if wrong is not None:
        shown = (expected[wrong]["weight"][0], actual[wrong]["weight"][0], f"nn.Linear({n_in}, {n_out}), SGD created "
                 f"at lr {probes.INITIAL_LR:g}, called at lr {case.lrs[0]:g} then {case.lrs[1]:g}; weight[0] shown")
        lrs = f" After call {wrong + 1} the optimizer's groups have lr {ev.facts.get(f'{case.key}.lrs{wrong}')}."
        mistake = next((m for m, after in _variant_steps(case)
                        if _moved_as(actual, after, before, ev.device, wrong + 1)), None)
        first = tensor(ev, f"{case.key}.norm0")
        if mistake is WRITTEN["train-step-clips-after-step"] and first is not None and first.numel() == 1 \
                and float(first.reshape(())) == 0.0:
            mistake = WRITTEN["train-step-clips-before-backward"]  # clipping found no gradient to measure
        if mistake is not None:
            _not_asked(what, mistake, lrs, *shown)
        fail(f"{what} does not update the parameters as asked (call {wrong + 1}): set lr in every group, zero the "
             f"gradients, loss.backward(), clip_grad_norm_, then optimizer.step().{lrs}", *shown)
    for i in range(2):
        got = tensor(ev, fact_key(case.key, f"norm{i}"))
        if got is None or got.numel() != 1:
            _returned(ev, fact_key(case.key, f"norm{i}"), f"{what} (call {i + 1})", "the gradient norm before clipping")
        got = float(got.reshape(()))
        if math.isclose(got, norms[i], rel_tol=1e-3):
            continue
        shown = torch.tensor(norms[i]), torch.tensor(got), f"call {i + 1}, max_norm {case.max_norm:g}"
        if math.isclose(got, min(norms[i], case.max_norm), rel_tol=1e-3):
            _not_asked(what, WRITTEN["train-step-norm-after-clipping"], "", *shown)
        if got == 0.0 or (i == 1 and math.isclose(got, norms[0], rel_tol=1e-3)):
            _not_asked(what, WRITTEN["train-step-clips-before-backward"], "", *shown)
        fail(f"{what} returned {got:.6g} (call {i + 1}), not the total norm before clipping that "
             "torch.nn.utils.clip_grad_norm_ returns.", *shown)


each_case(probes.train_step_update, _expect_steps,
          passed="Two calls below max_norm: each an SGD step at the lr given along its own loss's gradient.")
each_case(probes.train_step_clipping, _expect_steps,
          passed="Two calls above max_norm: each step along the gradient clipped after backward; the norm returned.")
