"""Judges for assignment 07 (probes in course/checks/seq2seq.py): the masks against their definitions, DecoderBlock
and Seq2SeqTransformer against nn.TransformerDecoderLayer / nn.TransformerEncoderLayer carrying the check's weights
(whose boolean masks mean True = NOT allowed, so ours are inverted), the loss against F.cross_entropy, greedy decoding
against a step-by-step argmax, each with the simulators of its typical mistakes.
"""

import math
from collections.abc import Callable
from functools import partial
from types import MappingProxyType
from typing import Any, NoReturn

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
from course.checks.kinds import Built, Case, PropertyCheck
from course.checks.modules import PARAMETER_COUNT, WRONG_PART_TYPE
from course.checks.seq2seq import BOS_ID, EOS_ID, PAD_ID, DecodeCase, MaskCase, ModelCase, ModelRun
from course.judges import judge, mistakes, oracles
from course.judges.kinds import LossOracle, against_loss, each_case, expect_causal

PADDING_NAME = "padding_mask(lengths, t)"
BLOCK_NAME = "DecoderBlock"
MODEL_NAME = "Seq2SeqTransformer"
LOSS_NAME = "teacher_forcing_loss(model, src, src_mask, tgt, pad)"
DECODE_NAME = "greedy_decode(model, src, src_mask, max_len, bos, eos)"


# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/seq2seq.txt


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
        if value.is_floating_point() and bool(torch.isinf(value).any()):
            kind_text, mistake = ("an additive float mask of 0 and -inf (the convention of nn.Transformer's float "
                                  "masks)"), M["additive-mask"]
        else:
            kind_text, mistake = f"a tensor of dtype {value.dtype}", M["float-mask"]
        fail(f"{what} returned {kind_text}, but a boolean mask is asked, True where attention is allowed: the mask "
             "was returned as floats (or integers) where a boolean is asked. MultiHeadAttention inverts it with "
             "~mask, which is wrong for numbers. Build it with a comparison or torch.ones(..., dtype=torch.bool).",
             mistake=mistake)
    if tuple(value.shape) != tuple(shape):
        hint, mistake = (hints or {}).get(tuple(value.shape), ("", WRONG_SHAPE))
        fail(f"{what} returned shape {tuple(value.shape)}, expected {tuple(shape)}. {hint}".strip(), mistake=mistake)
    if fact.get("device") != device:
        fail(f"{what} returned a mask on {fact.get('device')}, but {device} was asked. Create it with device=... "
             "(or on the device of its input) so the model runs on any device.", mistake=M["mask-wrong-device"])
    return value


def _causal_mistakes(t: int) -> list[tuple[Mistake, torch.Tensor]]:
    good = oracles.causal_mask(t)
    return [(M["causal-inverted"], ~good), (M["causal-no-diagonal"], good & ~torch.eye(t, dtype=torch.bool)),
            (M["causal-transposed"], good.T.contiguous()), (M["causal-all-true"], torch.ones(t, t, dtype=torch.bool))]


_CAUSAL_HINT = "Entry (i, j) is True exactly when j <= i: the lower triangle including the diagonal (torch.tril)."


def _padding(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Oracle: (b, t), True at positions p < lengths[i]."""
    return torch.arange(t).unsqueeze(0) < lengths.cpu().unsqueeze(1)


def _padding_mistakes(lengths: torch.Tensor, t: int) -> list[tuple[Mistake, torch.Tensor]]:
    good = _padding(lengths, t)
    return [(M["padding-inverted"], ~good), (M["padding-one-too-many"], _padding(lengths + 1, t)),
            (M["padding-one-too-few"], _padding(lengths - 1, t))]


_PADDING_HINT = "Entry (i, p) is True exactly when p < lengths[i]: compare torch.arange(t) with lengths[:, None]."


def _padding_hints(b: int, t: int) -> dict[tuple[int, ...], tuple[str, Mistake | str | None]]:
    return {(t, b): ("That is the transposed shape: one row per sequence, one column per position.",
                     M["padding-transposed"]),
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


each_case(probes.causal_mask_by_hand, _expect_mask,
               passed="t = 4: the lower triangle, diagonal included, as bools.")
each_case(probes.causal_mask_oracle, _expect_mask,
               passed="Several lengths, on the device asked and on the CPU by default; True where j <= i.")
each_case(probes.padding_mask_by_hand, _expect_mask, passed="lengths [3, 1, 4], t = 5.")
each_case(probes.padding_mask_oracle, _expect_mask,
               passed="Several batches on the device: lengths from 1 to t, t larger than every length, a batch of one.")


# ---------------------------------------------------------------- modules: the judge's side

def _block_shapes(p: str, k: int, ff_mult: int) -> dict[str, tuple[int, ...]]:
    return {**modules.attention_shapes(f"{p}self_attention.", k), **modules.attention_shapes(f"{p}cross_attention.", k),
            **modules.norm_shapes(p, k, ("norm1", "norm2", "norm3")), **modules.feed_forward_shapes(p, k, ff_mult * k)}


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


_BLOCK_MISTAKES = tuple((m, MappingProxyType(switches)) for m, switches in (
    (M["block-cross-reads-itself"], {"context": "self", "cross_mask": "self"}),
    (M["block-cross-reads-itself"], {"context": "self", "cross_mask": "none"}),
    (M["block-memory-not-masked"], {"cross_mask": "none"}), (M["block-self-mask-ignored"], {"use_self_mask": False}),
    (M["block-no-residual"], {"layout": "no-residual"}), (M["block-pre-norm"], {"layout": "pre"}),
    (M["block-cross-first"], {"layout": "cross-first"}), (M["block-cross-on-input"], {"layout": "cross-on-input"})))


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


def _block_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The block built (args (k, heads, ff_mult)): the attributes the notebook names, of the right kinds and sizes,
    and no others with parameters; then the weights the probe loaded."""
    __tracebackhide__ = True
    key, (k, heads, ff_mult) = built.key, built.args
    modules.built(ev, key, f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}, dropout=0.0)")
    attention = [modules.expect_part(ev, key, BLOCK_NAME, n, "MultiHeadAttention", "MultiHeadAttention(k, heads)")
                 for n in ("self_attention", "cross_attention")]
    if attention[1].get("same_as") == "self_attention":
        fail(f"{BLOCK_NAME}.self_attention and .cross_attention are the same module. Reading the target and reading "
             "the source are different jobs: create two MultiHeadAttention modules.",
             mistake=M["block-shared-attention"])
    described = modules.described(ev, key)
    for name, fact in zip(("self_attention", "cross_attention"), attention, strict=False):
        size, count = described.get(f"{name}.to_queries", {}).get("in_features"), fact.get("heads", heads)
        if (size, count) != (k, heads):
            fail(f"{BLOCK_NAME}'s attention has k={size}, heads={count}; with DecoderBlock({k}, {heads}) it should be "
                 f"MultiHeadAttention({k}, {heads}).", mistake=M["wrong-size"])
    norms = [modules.expect_part(ev, key, BLOCK_NAME, n, "LayerNorm", "nn.LayerNorm(k)")
             for n in ("norm1", "norm2", "norm3")]
    if any(n.get("same_as") for n in norms):
        fail(f"Two of {BLOCK_NAME}.norm1, norm2, norm3 are the same module: each sublayer needs its own LayerNorm(k).",
             mistake=M["shared-norm"])
    for name in ("norm1", "norm2", "norm3"):
        shape = described.get(name, {}).get("shape")
        if shape != [k]:
            fail(f"{BLOCK_NAME}.{name} normalizes shape {shape}; it should be nn.LayerNorm({k}).",
                 mistake=M["wrong-size"])
    modules.expect_part(ev, key, BLOCK_NAME, "ff", "FeedForward", "FeedForward(k, ff_mult * k)")
    first = described.get("ff.net.0", {})
    if (first.get("in_features"), first.get("out_features")) != (k, ff_mult * k):
        fail(f"{BLOCK_NAME}.ff maps {first.get('in_features')} -> {first.get('out_features')} features first; with "
             f"k={k} and ff_mult={ff_mult} it should be FeedForward(k, ff_mult * k) = FeedForward({k}, "
             f"{ff_mult * k}).", mistake=M["wrong-size"])
    expected = 2 * (4 * k * k + k) + 3 * 2 * k + 2 * ff_mult * k * k + ff_mult * k + k
    count = modules.parameter_count(ev, key)
    if count != expected:
        fail(f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}) has {count} parameters; two attentions, three norms and "
             f"the feed-forward make {expected}. Is an extra layer registered?", mistake=PARAMETER_COUNT)
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


def _against_block(check: PropertyCheck, *, passed: str, claim: str = "") -> None:
    """Register the judge of a DecoderBlock check: for each block built, its structure and weights, then every
    case against nn.TransformerDecoderLayer with those weights (naming the typical mistake it matches), or only
    anchored to a decoder block's output (claim: what the check shows); a case with an upstream gradient has its
    gradients compared with autograd."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for run in check.cases:
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
    (run,) = probes.decoder_block_causality.cases
    w, heads = _block_weights(ev, run.module), run.module.args[1]
    case, changed = run.cases
    b, s, k = case.inputs()["memory"].shape
    hints = {(b, s, k): "One output per memory position: are x and memory swapped in cross-attention? The queries "
                        "come from x."}
    y = _block_output(ev, case, hints)
    y_changed = _block_output(ev, changed, hints)
    expect_causal(ev, y, y_changed, 3, f"{BLOCK_NAME}.forward with a causal self_mask",
                  _block_mistakes(w, heads, dict(case.inputs())), "The block reads the future: pass self_mask to "
                  "self-attention (self_attention(x, mask=self_mask)).", M["block-not-causal"])
    _anchor_block(ev, y, w, heads, case, f"{BLOCK_NAME} is causal")


@judge("decoder_block_padding_gradients")
def _judge_block_padding(ev: Evidence) -> None:
    """Extra masked memory positions change nothing; a loss reaches every parameter, x and memory, as autograd
    through nn.TransformerDecoderLayer gives it."""
    (run,) = probes.decoder_block_padding_gradients.cases
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
             mistake=M["block-memory-not-masked"].id if matches_any(y, [memory_not_masked.detach()], ev.device)
             else M["block-reads-padding"])
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


_MODEL_MISTAKES = tuple((m, MappingProxyType(switches)) for m, switches in (
    (M["model-softmax"], {"softmax": True}), (M["model-not-causal"], {"causal": False}),
    (M["model-memory-not-masked"], {"memory_mask": False}), (M["model-encoder-not-masked"], {"encoder_mask": False}),
    (M["model-padding-not-masked"], {"encoder_mask": False, "memory_mask": False}),
    (M["model-no-target-positions"], {"tgt_positions": False}),
    (M["model-no-source-positions"], {"src_positions": False}),
    (M["model-memory-is-embeddings"], {"use_encoder": False}), (M["model-scaled-embeddings"], {"scaled": True}),
    (M["model-target-source-embedding"], {"tgt_embedding": "src"})))


def _model_mistake_switches(case: ModelCase, tgt: torch.Tensor) -> list[tuple[Mistake, dict]]:
    return [(m, dict(sw)) for m, sw in _MODEL_MISTAKES
            if m is not M["model-target-source-embedding"] or int(tgt.max()) < case.src_vocab]


def _model_mistakes(w, case, src, tgt, lengths) -> list[tuple[Mistake, torch.Tensor]]:
    with torch.no_grad():
        return [(m, _model_oracle(w, case, src, tgt, lengths, **sw)) for m, sw in _model_mistake_switches(case, tgt)]


_MODEL_HINT = ("encode: x = positions(src_embedding(src)), then every encoder block with mask src_mask[:, None, :]; "
               "decode: y = positions(tgt_embedding(tgt)), every decoder block with self_mask = causal_mask(t) and "
               "memory_mask = src_mask[:, None, :], then to_logits.")
_MODEL_CALL_HINT = ("If the error is about sizes inside attention: a (b, s) padding mask must reach "
                    "MultiHeadAttention as (b, 1, s) — src_mask.unsqueeze(1) — so that it broadcasts over the queries.")


def _model_weights(ev: Evidence, run: ModelRun) -> dict[str, torch.Tensor]:
    """The structure of the model the run built (its named parts, of the right kinds and sizes), then the weights
    the probe loaded."""
    __tracebackhide__ = True
    key, case = run.key, run.case
    src_vocab, tgt_vocab, k, heads, depth, max_len = (case.src_vocab, case.tgt_vocab, case.k, case.heads,
                                                      case.depth, case.max_len)
    what = MODEL_NAME
    modules.built(ev, key, f"{MODEL_NAME}({src_vocab}, {tgt_vocab}, k={k}, heads={heads}, depth={depth}, "
                           f"max_len={max_len})")
    modules.expect_part(ev, key, what, "src_embedding", "Embedding", "nn.Embedding(src_vocab_size, k)")
    tgt_embedding = modules.expect_part(ev, key, what, "tgt_embedding", "Embedding", "nn.Embedding(tgt_vocab_size, k)")
    if tgt_embedding.get("same_as") == "src_embedding":
        fail(f"{what}.src_embedding and .tgt_embedding are the same module: source and target have different "
             "vocabularies, so each needs its own nn.Embedding.", mistake=M["shared-embedding"])
    described = modules.described(ev, key)
    for name, size in (("src_embedding", src_vocab), ("tgt_embedding", tgt_vocab)):
        emb = described.get(name, {})
        if (emb.get("num_embeddings"), emb.get("embedding_dim")) != (size, k):
            fail(f"{what}.{name} is nn.Embedding({emb.get('num_embeddings')}, {emb.get('embedding_dim')}); it should "
                 f"be nn.Embedding({size}, {k}) here. Are the source and target vocabulary sizes swapped?",
                 mistake=M["wrong-size"])
    modules.expect_part(ev, key, what, "positions", "PositionalEncoding", "PositionalEncoding(k, max_len, dropout)")
    encoder = modules.expect_part(ev, key, what, "encoder", "ModuleList",
                                  "nn.ModuleList of `depth` TransformerBlock(k, heads)")
    decoder = modules.expect_part(ev, key, what, "decoder", "ModuleList",
                                  "nn.ModuleList of `depth` DecoderBlock(k, heads)")
    for name, blocks in (("encoder", encoder), ("decoder", decoder)):
        items = blocks.get("items")
        if not isinstance(items, list) or len(items) != depth:
            fail(f"{what}.{name} holds {len(items) if isinstance(items, list) else '?'} blocks; with depth={depth} it "
                 f"should hold {depth}.", mistake=M["wrong-depth"])
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
             "weights.", mistake=M["shared-block"])
    modules.expect_part(ev, key, what, "to_logits", "Linear", "nn.Linear(k, tgt_vocab_size)")
    to_logits = described.get("to_logits", {})
    if (to_logits.get("in_features"), to_logits.get("out_features")) != (k, tgt_vocab):
        fail(f"{what}.to_logits maps {to_logits.get('in_features')} -> {to_logits.get('out_features')}; it should be "
             f"nn.Linear({k}, {tgt_vocab}): one logit per target token.", mistake=M["wrong-size"])
    shapes = {"src_embedding.weight": (src_vocab, k), "tgt_embedding.weight": (tgt_vocab, k)}
    for i in range(depth):
        shapes.update(modules.block_shapes(f"encoder.{i}.", k, 4 * k))
    for i in range(depth):
        shapes.update(_block_shapes(f"decoder.{i}.", k, 4))
    shapes.update({"to_logits.weight": (tgt_vocab, k), "to_logits.bias": (tgt_vocab,)})
    return modules.expect_parameters(ev, key, MODEL_NAME, shapes, run.seed, hint=modules.PARTS_HINT)


def _logits(ev: Evidence, key: str, case: ModelCase) -> torch.Tensor:
    __tracebackhide__ = True
    b, s, t, tgt_vocab, k = case.b, case.s, case.t, case.tgt_vocab, case.k
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
    for j in probes._CAUSAL_POSITIONS:
        expect_causal(ev, logits, _logits(ev, f"logits_changed{j}", case), j, f"{MODEL_NAME}.forward on targets",
                      _model_mistakes(w, case, src, tgt, lengths), "In training the model could read the answer: "
                      "pass causal_mask(t) as self_mask to every decoder block.", M["model-reads-future"])
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
                 mistake=M["decode-inconsistent"])


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
             mistake=named[0].id if named else M["model-reads-padding"])
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
    mistakes=(M["loss-pad-hard-coded"], M["loss-not-shifted"], M["loss-counts-padding"], M["loss-wrong-shift"],
              M["loss-sum"], M["loss-per-sequence"], M["loss-softmax"]),
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
        (M["greedy-never-stops"], _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID, pad_after_eos=False,
                                           stop=False)),
        (M["greedy-returns-bos"], torch.cat([torch.full((b, 1), BOS_ID, dtype=torch.long), expected], dim=1)),
        (M["greedy-eos-padded"], torch.where(target == PAD_ID, torch.full((), EOS_ID), target)),
        (M["greedy-eos-overwritten"], torch.where(target == EOS_ID, torch.full((), PAD_ID), target)),
        (M["greedy-forgets-bos"], _step_by_step(model, src, src_mask, max_len, PAD_ID, EOS_ID)),
        (M["greedy-first-position"], _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID, position=0)),
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
             mistake=M["greedy-not-ids"])
    b, n = expected.shape
    if out.dim() != 2 or out.shape[0] != b:
        fail(f"{DECODE_NAME} returned shape {tuple(out.shape)}; expected (b, n) = ({b}, n) with n <= max_len.",
             mistake=WRONG_SHAPE)
    width = out.shape[1]
    mistakes = _decode_mistakes(model, src, src_mask, max_len, expected, width)
    if width > max_len:
        if torch.equal(out, mistakes[1][1]):
            _not_asked(DECODE_NAME, M["greedy-returns-bos"], "", Rows(expected), Rows(out), label)
        fail(f"{DECODE_NAME} returned {width} tokens per sequence, more than max_len={max_len}. Generate at most "
             "max_len tokens, and do not return the <bos>.", Rows(expected), Rows(out), label, M["greedy-too-long"])
    if width < n:
        fail(f"{DECODE_NAME} stopped after {width} tokens, but a sequence had not written <eos> yet (it needs {n}). "
             "Stop only when every sequence is finished, or after max_len steps.", Rows(expected), Rows(out), label,
             M["greedy-stops-early"])
    expect_equal(out, _fit(expected, width), what=DECODE_NAME, mistakes=mistakes, otherwise=_DECODE_HINT, case=label,
                 differs="does not agree with the step-by-step argmax of the model")


each_case(probes.greedy_decode_scripted, _expect_decode,
               passed="A stand-in model whose greedy output is known: each sequence stops at its <eos>, padded with 0 "
                      "after it.")
each_case(probes.greedy_decode_step_by_step, _expect_decode,
               passed="A random stand-in translator against the step-by-step argmax; and max_len cuts long outputs.")


# ---------------------------------------------------------------- the training loop's parts

def _not_asked(what: str, mistake: Mistake, more: str = "", *shown: Any) -> NoReturn:
    """Fail naming mistake: what, its explanation, then more (a table, the groups' lr); shown: expected, actual,
    case."""
    __tracebackhide__ = True
    fail(f"{what} is not what was asked: {mistake.explanation}{more}", *shown, mistake=mistake)


def _table(rows: list[tuple[str, ...]], align: Callable[[str, int], str] = str.ljust) -> str:
    """Lines of a table a message shows, indented so that wrapping keeps them."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("    " + "  ".join(align(cell, w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


# configure_optimizer


def _expect_optimizer(ev: Evidence, case: probes.OptimizerCase) -> None:
    """The optimizer configured for case: an AdamW whose groups hold every trainable parameter once, with
    weight_decay on those of two or more dimensions and 0 on the others, and the lr given."""
    __tracebackhide__ = True
    sizes, lr, weight_decay = case.settings()
    what = f"configure_optimizer(model, lr={lr:g}, weight_decay={weight_decay:g})"
    label = (f"a stand-in model: an Embedding, Linear layers, LayerNorms, a 0-d scale{', blocks' if sizes[2] else ''} "
             "and a frozen matrix")
    fact = ev.facts.get(case.key)
    if isinstance(fact, dict) and fact.get("kind") == "raised" and "more than one parameter group" in str(
            fact.get("message")):
        fail(f"{what} raised ValueError: {str(fact.get('message'))[:200]}. "
             f"{M['optimizer-parameter-twice'].explanation}", mistake=M["optimizer-parameter-twice"])
    raised(ev, case.key, what)
    kind = value_kind(ev, case.key)
    if kind == "missing":
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    found = ev.facts.get(f"{case.key}.class")
    found = found if isinstance(found, dict) else {}
    if not found.get("optimizer"):
        shown = "None" if kind == "none" else str((fact or {}).get("type", "something else"))[:60]
        fail(f"{what} returned {shown}; it should return the optimizer, a torch.optim.AdamW.")
    if not found.get("adamw"):
        if found.get("adam"):
            _not_asked(what, M["optimizer-plain-adam"])
        fail(f"{what} returned a {str(fact.get('type'))[:60]}; torch.optim.AdamW is asked.")
    model = case.model()
    params = dict(model.named_parameters())
    n = len(params)
    found_tensors = [ev.tensors.get(f"{case.key}.{name}") for name in ("count", "decay", "lr", "foreign")]
    count, decay, rates, foreign = found_tensors
    if (any(t is None for t in found_tensors) or tuple(count.shape) != (n,) or count.dtype != torch.int64
            or tuple(decay.shape) != (n,) or tuple(rates.shape) != (n,) or not decay.is_floating_point()
            or not rates.is_floating_point() or foreign.numel() != 1 or foreign.is_floating_point()):
        fail(f"The test's record of {what} is inconsistent (its parameter groups).")
    names = list(params)
    held = {name: int(count[i]) for i, name in enumerate(names)}
    wd = {name: float(decay[i]) for i, name in enumerate(names)}
    trainable = {name: p.dim() for name, p in params.items() if p.requires_grad}
    frozen = [name for name, p in params.items() if not p.requires_grad]

    def given(name: str) -> str:
        return {0: "in no group", 1: f"{wd[name]:g}"}.get(held[name], f"in {held[name]} groups")

    rows = [("parameter", "dims", "weight_decay", "yours")]
    rows += [(name, str(dims), f"{weight_decay if dims >= 2 else 0.0:g}", given(name))
             for name, dims in trainable.items()]
    rows += [(name, "frozen", "in no group", given(name)) for name in frozen]
    table = f"\n\nOn a small case ({label}):\n{_table(rows)}"

    def decayed(name: str) -> bool:
        return held[name] == 1 and math.isclose(wd[name], weight_decay, rel_tol=1e-6)

    def not_decayed(name: str) -> bool:
        return held[name] == 1 and wd[name] == 0.0

    matrices = [n for n, d in trainable.items() if d >= 2]
    others = [n for n, d in trainable.items() if d < 2]
    if all(decayed(n) for n in trainable):
        _not_asked(what, M["optimizer-decay-everything"], table)
    if all(decayed(n) for n in others) and all(not_decayed(n) for n in matrices):
        _not_asked(what, M["optimizer-decay-swapped"], table)
    if int(foreign.reshape(())) != 0:
        fail(f"{what} holds tensors that are not parameters of the model: build the groups from "
             f"model.parameters().{table}")
    if any(held[name] for name in frozen):
        _not_asked(what, M["optimizer-frozen-included"], table)
    if any(held[name] == 0 for name in trainable):
        _not_asked(what, M["optimizer-parameter-missing"], table)
    wrong = [n for n in trainable if not (decayed(n) if trainable[n] >= 2 else not_decayed(n))]
    if wrong:
        fail(f"{what} gives {', '.join(wrong[:3])} the wrong weight decay: weight_decay on every parameter of two "
             f"or more dimensions, 0 on the others, each parameter in exactly one group.{table}")
    lrs = sorted({float(rates[i]) for i, name in enumerate(names) if name in trainable})
    if not all(math.isclose(v, lr, rel_tol=1e-6) for v in lrs):
        _not_asked(what, M["optimizer-lr-not-set"], f" The groups have lr {', '.join(f'{v:g}' for v in lrs[:4])}, "
                   f"expected {lr:g}.")


each_case(probes.configure_optimizer_groups, _expect_optimizer,
               passed="An AdamW whose groups hold every trainable parameter once: weight_decay on the weight matrices "
                      "and the embedding, 0 on the biases, the LayerNorm parameters and a 0-d scale, the frozen "
                      "matrix left out; the lr given.")
each_case(probes.configure_optimizer_hidden, _expect_optimizer,
               passed="Other stand-ins (blocks in an nn.ModuleList), learning rates and weight decays.")


# learning_rate

def _schedule(steps: int, peak: float, warmup: int, *, first: int = 1, rise: str = "step", offset: str = "warmup",
              shape: str = "cosine") -> torch.Tensor:
    """The learning rate of every step (float64): the oracle with the defaults, a typical mistake otherwise.
    first: the warm-up's numerator is step + first (0: off by one); rise: "step" (a linear warm-up while
    step < warmup), "step<=" (while step <= warmup) or "none" (the decay from step 0); offset: the decay's progress
    (step + 1 - warmup) / (steps - warmup) ("warmup"), (step + 1) / steps ("none"), (step + 1) / (steps - warmup)
    ("denominator"), (step - warmup) / (steps - warmup) ("late") or (step - warmup) / (steps - 1 - warmup)
    ("stretched"); shape: "cosine", "upward" (1 - cos) or "linear"."""
    out = []
    for step in range(steps):
        warming = {"step": step < warmup, "step<=": step <= warmup, "none": False}[rise]
        if warming:
            out.append(peak * (step + first) / warmup)
            continue
        progress = {"warmup": (step + 1 - warmup) / max(1, steps - warmup), "none": (step + 1) / steps,
                    "denominator": (step + 1) / max(1, steps - warmup),
                    "late": (step - warmup) / max(1, steps - warmup),
                    "stretched": (step - warmup) / max(1, steps - 1 - warmup)}[offset]
        out.append({"cosine": peak * 0.5 * (1 + math.cos(math.pi * progress)),
                    "upward": peak * 0.5 * (1 - math.cos(math.pi * progress)),
                    "linear": peak * (1 - progress)}[shape])
    return torch.tensor(out, dtype=torch.float64)


def _schedule_mistakes(steps: int, peak: float, warmup: int) -> list[tuple[Mistake, torch.Tensor]]:
    at = partial(_schedule, steps, peak, warmup)
    return [(M["lr-warmup-off-by-one"], at(first=0)), (M["lr-warmup-off-by-one"], at(rise="step<=")),
            (M["lr-decay-not-offset"], at(offset="none")), (M["lr-decay-not-offset"], at(offset="denominator")),
            (M["lr-decay-off-by-one"], at(offset="late")), (M["lr-decay-off-by-one"], at(offset="stretched")),
            (M["lr-decays-upward"], at(shape="upward")), (M["lr-linear-decay"], at(shape="linear")),
            (M["lr-no-warmup"], at(rise="none")), (M["lr-no-warmup"], at(rise="none", offset="none"))]


def _shown_steps(steps: int, warmup: int) -> list[int]:
    """The steps a message shows: the first, one inside the warm-up, the peak, the first of the decay, its middle
    and the last."""
    middle = warmup - 1 + (steps - warmup + 1) // 2
    return sorted({0, warmup // 2, max(0, warmup - 1), min(warmup, steps - 1), middle, steps - 1})


def _schedule_close(actual: torch.Tensor, expected: torch.Tensor, peak: float) -> bool:
    return actual.shape == expected.shape and bool(((actual - expected).abs() <= 1e-6 * peak + 1e-5 * expected.abs())
                                                   .all())


def _expect_schedule(ev: Evidence, case: probes.ScheduleCase) -> None:
    """Every step's learning rate of case against the formula, naming the typical mistake it matches, with a small
    table of expected against actual at the steps that matter."""
    __tracebackhide__ = True
    steps, peak, warmup = case.settings()
    what = f"learning_rate(step, steps={steps}, peak={peak:g}, warmup={warmup})"
    fact = ev.facts.get(case.key)
    raised(ev, case.key, f"{what} at step {ev.facts.get(f'{case.key}.step')}")
    kind = value_kind(ev, case.key)
    if kind == "missing":
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    if kind != "tensor" or case.key not in ev.tensors or ev.tensors[case.key].dtype != torch.float64:
        shown = "None" if kind == "none" else str((fact or {}).get("type", "something else"))[:60]
        fail(f"{what} returned {shown}; it should return the learning rate, a number (a float).")
    actual = ev.tensors[case.key]
    expected = _schedule(steps, peak, warmup)
    if actual.shape != expected.shape:
        fail(f"The test's record of {what} is inconsistent (its length).")
    if _schedule_close(actual, expected, peak):
        return
    wrong = int(next(i for i in range(steps) if not _schedule_close(actual[i:i + 1], expected[i:i + 1], peak)))
    shown = sorted({*_shown_steps(steps, warmup), wrong})
    rows = [("step", "expected", "yours"), *((str(s), f"{float(expected[s]):.6g}", f"{float(actual[s]):.6g}")
                                            for s in shown)]
    table = _table(rows, str.rjust)
    body = f"\n\nOn a small case ({steps} steps, peak {peak:g}, warmup {warmup}; first difference at step {wrong}):\n"
    for mistake, simulated in _schedule_mistakes(steps, peak, warmup):
        if _schedule_close(actual, simulated, peak):
            _not_asked(what, mistake, body + table)
    fail(f"{what} does not follow the schedule: lr = peak * (step + 1) / warmup for step < warmup, else "
         "peak * (1 + cos(pi * (step + 1 - warmup) / (steps - warmup))) / 2." + body + table)


each_case(probes.learning_rate_schedule, _expect_schedule,
               passed="20 steps, 4 of warm-up: peak / 4 at step 0, the peak at step 3, half of it in the middle of "
                      "the decay, 0 at step 19; and every step in between.")
each_case(probes.learning_rate_hidden, _expect_schedule,
               passed="The notebook's 800 steps, a single warm-up step, a warm-up of all steps but the last.")


# train_step

def _train_steps(case: probes.StepCase, *, zero: bool = True, clip: str = "norm", lr_set: str = "all",
                 returned: str = "before") -> tuple[list[dict[str, torch.Tensor]], list[float | None]]:
    """What two calls of a train_step do on the case, exactly (float64): the oracle with the defaults, a typical
    mistake otherwise: zero (the gradients zeroed first), clip ("norm": the total norm, between backward and step;
    "after-step": after the step; "before-backward": before backward, after zero_grad; "values": each entry
    clamped), lr_set ("all" groups, "first" group only, "none"), returned ("before" or "after" clipping). Returns
    the parameters after each call and the norms returned."""
    model = case.model()
    w = {name: p.detach().double() for name, p in model.named_parameters()}
    grad = {name: torch.zeros_like(v) for name, v in w.items()}
    lrs = {name: probes.INITIAL_LR for name in w}
    after, norms = [], []
    for i, lr in enumerate(case.lrs):
        x, y = (v.double() for v in case.batch(i))
        if lr_set != "none":
            lrs = {name: lr if lr_set == "all" or name == "weight" else lrs[name] for name in w}
        leaves = {name: value.detach().clone().requires_grad_(True) for name, value in w.items()}
        loss = ((x @ leaves["weight"].T + leaves["bias"] - y) ** 2).mean()  # the gradient of the MSE, float64
        g = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
        grad = {name: g[name] + (0 if zero else grad[name]) for name in w}
        total = math.sqrt(sum(float((v ** 2).sum()) for v in grad.values()))
        if clip == "norm":
            grad = {name: v * min(1.0, case.max_norm / (total + 1e-6)) for name, v in grad.items()}
        elif clip == "values":
            grad = {name: v.clamp(-case.max_norm, case.max_norm) for name, v in grad.items()}
        w = {name: w[name] - lrs[name] * grad[name] for name in w}
        after.append(w)
        norms.append({"before": total, "after": min(total, case.max_norm)}[returned] if clip != "before-backward"
                     else 0.0)
    return after, norms


def _step_mistakes(case: probes.StepCase) -> list[tuple[Mistake, list[dict[str, torch.Tensor]]]]:
    return [(m, _train_steps(case, **changes)[0]) for m, changes in (
        (M["train-step-lr-not-set"], {"lr_set": "none"}), (M["train-step-lr-one-group"], {"lr_set": "first"}),
        (M["train-step-no-zero-grad"], {"zero": False}),
        (M["train-step-clips-values"], {"clip": "values"}), (M["train-step-clips-after-step"], {"clip": "after-step"}),
        (M["train-step-no-zero-grad"], {"zero": False, "lr_set": "none"}))]


def _updates_close(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
                   before: dict[str, torch.Tensor], device: str) -> bool:
    """The updates (after - before) agree, relative to the size of the expected update."""
    rtol = 1e-3 if device == "cpu" else 1e-2
    for name, want in expected.items():
        move, done = want - before[name], actual[name] - before[name]
        if done.shape != move.shape or not bool(((done - move).abs() <= rtol * (move.abs().max() + 1e-9)).all()):
            return False
    return True


def _expect_steps(ev: Evidence, case: probes.StepCase) -> None:
    """Two calls of train_step on case: the parameters after each against the oracle's (one SGD step along the
    clipped gradient at lr), naming the typical mistake they match; then the norms returned, before clipping."""
    __tracebackhide__ = True
    b, n_in, n_out = case.shape()
    what = f"train_step(model, optimizer, loss, lr, max_norm={case.max_norm:g})"
    label = (f"nn.Linear({n_in}, {n_out}) and SGD created at lr {probes.INITIAL_LR:g}, two calls at lr "
             f"{case.lrs[0]:g} then {case.lrs[1]:g}; the weight's first row shown")
    names = ("weight", "bias")
    model = case.model()
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    for i in range(2):
        raised(ev, f"{case.key}.norm{i}", f"{what} (call {i + 1})")

    def params(stage: str) -> dict[str, torch.Tensor]:
        out = {}
        for name in names:
            value = ev.tensors.get(f"{case.key}.{stage}.{name}")
            if value is None or tuple(value.shape) != shapes[name] or not value.is_floating_point():
                fail(f"The test recorded no {name} {stage} {what}: the check did not run to the end.")
            out[name] = value.double()
        return out

    before = params("before")
    expected, norms = _train_steps(case)
    start = {name: p.detach().double() for name, p in model.named_parameters()}
    if not all(torch.allclose(before[n], start[n], atol=1e-6) for n in names):
        fail(f"The test's record of {what} is inconsistent (the parameters before the first call).")
    for i in range(2):
        actual = params(f"after{i}")
        first = before if i == 0 else expected[i - 1]
        if _updates_close(actual, expected[i], first, ev.device):
            continue
        lrs = ev.facts.get(f"{case.key}.lrs{i}")
        if i == 0 and (_updates_close(actual, before, before, ev.device)
                       or all(torch.equal(actual[n], before[n]) for n in names)):
            fail(f"{what} did not change the parameters: call loss.backward() and optimizer.step().",
                 expected[0]["weight"][0], actual["weight"][0], label)
        for mistake, simulated in _step_mistakes(case):
            if all(_updates_close(params(f"after{j}"), simulated[j], before if j == 0 else simulated[j - 1], ev.device)
                   for j in range(i + 1)):
                first_norm = ev.tensors.get(f"{case.key}.norm0")
                if (mistake is M["train-step-clips-after-step"] and first_norm is not None
                        and first_norm.numel() == 1 and float(first_norm.reshape(())) == 0.0):
                    # unclipped steps, and clipping found no gradient to measure
                    mistake = M["train-step-clips-before-backward"]
                about_lr = f" After call {i + 1} the optimizer's groups have lr {lrs}." if mistake in (
                    M["train-step-lr-not-set"], M["train-step-lr-one-group"]) else ""
                _not_asked(what, mistake, about_lr, expected[i]["weight"][0], actual["weight"][0], label)
        fail(f"{what} does not update the parameters as asked (call {i + 1}): set lr in every group, zero the "
             "gradients, loss.backward(), clip the total norm with torch.nn.utils.clip_grad_norm_, then "
             f"optimizer.step(). After call {i + 1} the optimizer's groups have lr {lrs}.",
             expected[i]["weight"][0], actual["weight"][0], label)
    for i in range(2):
        key = f"{case.key}.norm{i}"
        kind = value_kind(ev, key)
        if kind != "tensor" or key not in ev.tensors or ev.tensors[key].numel() != 1:
            shown = "None" if kind == "none" else str(ev.facts.get(f"{key}.type", "something else"))[:60]
            fail(f"{what} returned {shown} (call {i + 1}); it should return the gradient norm before clipping, what "
                 "torch.nn.utils.clip_grad_norm_ returns.")
        got = float(ev.tensors[key].reshape(()))
        if math.isclose(got, norms[i], rel_tol=1e-3):
            continue
        shown = torch.tensor(norms[i]), torch.tensor(got)
        clipped = _train_steps(case, returned="after")[1][i]
        loss = float(((case.batch(i)[0].double() @ (before if i == 0 else expected[0])["weight"].T
                       + (before if i == 0 else expected[0])["bias"] - case.batch(i)[1].double()) ** 2).mean())
        if math.isclose(got, clipped, rel_tol=1e-3):
            _not_asked(what, M["train-step-norm-after-clipping"], "", *shown,
                       f"call {i + 1}, max_norm {case.max_norm:g}")
        if math.isclose(got, loss, rel_tol=1e-3):
            fail(f"{what} returned the loss (call {i + 1}); return the gradient norm before clipping, what "
                 "torch.nn.utils.clip_grad_norm_ returns.", *shown, f"call {i + 1}")
        if got == 0.0 or (i == 1 and math.isclose(got, norms[0], rel_tol=1e-3)):
            _not_asked(what, M["train-step-clips-before-backward"], "", *shown, f"call {i + 1}")
        fail(f"{what} returned {got:.6g} (call {i + 1}), not the gradient's total norm before clipping: return "
             "what torch.nn.utils.clip_grad_norm_ returns.", *shown, f"call {i + 1}")


each_case(probes.train_step_update, _expect_steps,
               passed="Two calls on a stand-in (a gradient norm below max_norm): each an SGD step at the lr given, "
                      "along the gradient of its own loss only; the norm returned.")
each_case(probes.train_step_clipping, _expect_steps,
               passed="Two calls with a gradient norm above max_norm: each step along the gradient scaled to "
                      "max_norm, clipped after backward and before the step; the norm before clipping returned.")
