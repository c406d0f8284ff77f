"""Checks for assignment 07: causal_mask, padding_mask, DecoderBlock, Seq2SeqTransformer, teacher_forcing_loss
and greedy_decode.

Oracles: PyTorch's own nn.TransformerDecoderLayer and nn.TransformerEncoderLayer with the student's weights
copied in (their boolean masks mean True = NOT allowed, so ours are inverted), F.cross_entropy, and a
step-by-step argmax. Properties: causality, padding invariance, gradients reaching every parameter.
"""

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.transformer_block import FeedForward, TransformerBlock
from course.checks.compare import _Tensor, CheckFailed, close, expect_close, expect_tensor, fail, randn, run, tolerance
from course.multi_head import MultiHeadAttention
from course.positional_encoding import PositionalEncoding

CAUSAL_NAME = "causal_mask(t)"
PADDING_NAME = "padding_mask(lengths, t)"
BLOCK_NAME = "DecoderBlock"
MODEL_NAME = "Seq2SeqTransformer"
LOSS_NAME = "teacher_forcing_loss(model, src, src_mask, tgt, pad)"
DECODE_NAME = "greedy_decode(model, src, src_mask, max_len, bos, eos)"


class _Rows:
    """Integer rows (masks as 0/1, token ids) shown as a small table in a failure message."""

    def __init__(self, values: torch.Tensor):
        v = values.detach().to("cpu").long()
        self.rows = (v.unsqueeze(0) if v.dim() == 1 else v).tolist()

    def __repr__(self) -> str:
        return "\n    ".join(" ".join(f"{x:3d}" for x in row) for row in self.rows)


def _expect_close_shown(actual: torch.Tensor, expected: torch.Tensor, *, what: str, otherwise: str, case: str,
                        mistakes: dict[str, torch.Tensor] | None = None) -> None:
    """compare.expect_close on a batch, but the message shows the sequence that differs most, not sequence 0."""
    __tracebackhide__ = True
    tol = tolerance(expected.device)
    if close(actual, expected, **tol):
        return
    i = 0
    if actual.shape == expected.shape and actual.dim() >= 3:
        diff = (actual.detach() - expected.detach()).abs().nan_to_num(float("inf")).flatten(1).amax(dim=1)  # (b,)
        i = int(diff.argmax())
    named = {k: v[i] for k, v in (mistakes or {}).items() if close(actual, v, **tol)}
    shown = f"{case}; sequence {i} of the batch shown"
    expect_close(actual[i], expected[i], what=what, mistakes=named, otherwise=otherwise, case=shown)
    fail(f"{what} does not match the reference. {otherwise}", expected[i], actual[i], shown)


# ----------------------------------------------------------------------------------------------- masks

def _expect_mask(value, *, what: str, shape: tuple[int, ...], device, hints: dict | None = None) -> torch.Tensor:
    """Fail unless value is a plain bool tensor of this shape on this device."""
    __tracebackhide__ = True
    if type(value) is not _Tensor:
        fail(f"{what} should return a torch.Tensor, but returned {type(value).__name__}.")
    if value.dtype != torch.bool:
        v = value.detach().float().cpu()
        if bool(torch.isinf(v).any()):
            kind = "an additive float mask of 0 and -inf (the convention of nn.Transformer's float masks)"
        else:
            kind = f"a tensor of dtype {value.dtype}"
        fail(f"{what} returned {kind}, but a boolean mask is asked, True where attention is allowed: the mask was "
             "returned as floats (or integers) where a boolean is asked. MultiHeadAttention inverts it with ~mask, "
             "which is wrong for numbers. Build it with a comparison or torch.ones(..., dtype=torch.bool).")
    if tuple(value.shape) != tuple(shape):
        hint = (hints or {}).get(tuple(value.shape), "")
        fail(f"{what} returned shape {tuple(value.shape)}, expected {tuple(shape)}. {hint}".strip())
    if device is not None and value.device.type != torch.device(device).type:
        fail(f"{what} returned a mask on {value.device}, but {torch.device(device)} was asked. Create it with "
             "device=... (or on the device of its input) so the model runs on any device.")
    return value


def _expect_equal_mask(actual: torch.Tensor, expected: torch.Tensor, *, what: str, mistakes: dict[str, torch.Tensor],
                       otherwise: str, case: str) -> None:
    __tracebackhide__ = True
    if torch.equal(actual.cpu(), expected.cpu()):
        return
    for explanation, candidate in mistakes.items():
        if torch.equal(actual.cpu(), candidate.cpu()):
            fail(f"{what} is not what was asked: {explanation}", _Rows(expected), _Rows(actual), case)
    fail(f"{what} does not match the reference. {otherwise}", _Rows(expected), _Rows(actual), case)


def _causal(t: int, device=None) -> torch.Tensor:
    i = torch.arange(t, device=device)
    return i.unsqueeze(1) >= i.unsqueeze(0)  # (t, t): row i, column j, True where j <= i


def _causal_mistakes(t: int) -> dict[str, torch.Tensor]:
    good = _causal(t)
    return {
        "the mask is inverted: True marks the future (j > i). In this course True means 'may attend', "
        "so row i must be True for j <= i.": ~good,
        "the mask excludes the diagonal: position i must be allowed to attend to itself (j <= i, not j < i); "
        "without it the first position has nothing to attend to.": good & ~torch.eye(t, dtype=torch.bool),
        "the mask is transposed: True where j >= i lets every position read the future. Use the lower "
        "triangle (torch.tril), row i = query, column j = key.": good.T,
        "nothing is masked: every entry is True, so the decoder can read the future.": torch.ones(t, t, dtype=torch.bool),
    }


_CAUSAL_HINT = "Entry (i, j) is True exactly when j <= i: the lower triangle including the diagonal (torch.tril)."


def causal_mask_by_hand(causal_mask: Callable) -> None:
    """t = 4: the lower triangle, diagonal included, as bools."""
    __tracebackhide__ = True
    mask = run(causal_mask, 4, what=CAUSAL_NAME)
    _expect_mask(mask, what=CAUSAL_NAME, shape=(4, 4), device="cpu")
    _expect_equal_mask(mask, _causal(4), what=CAUSAL_NAME, mistakes=_causal_mistakes(4), otherwise=_CAUSAL_HINT,
                       case="t=4, shown as 0/1")


def causal_mask_matches_oracle(causal_mask: Callable, device: torch.device | str = "cpu") -> None:
    """Several lengths, on the device asked and on the CPU by default; True where j <= i."""
    __tracebackhide__ = True
    for t in (1, 3, 7):
        mask = run(causal_mask, t, device=device, what=f"causal_mask({t}, device=...)")
        _expect_mask(mask, what=f"causal_mask({t}, device={str(device)!r})", shape=(t, t), device=device)
        _expect_equal_mask(mask, _causal(t, device), what=f"causal_mask({t})", mistakes=_causal_mistakes(t),
                           otherwise=_CAUSAL_HINT, case=f"t={t}")
    mask = run(causal_mask, 2, what=CAUSAL_NAME)
    _expect_mask(mask, what="causal_mask(2) without a device", shape=(2, 2), device="cpu")


def _padding(lengths: torch.Tensor, t: int) -> torch.Tensor:
    return torch.arange(t, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (b, t)


def _padding_mistakes(lengths: torch.Tensor, t: int) -> dict[str, torch.Tensor]:
    good = _padding(lengths, t)
    return {
        "the mask is inverted: True marks the padding. True must mark the real tokens (position < length).": ~good,
        "the mask is off by one: it marks one position too many (position <= length). Row i has lengths[i] real "
        "tokens at positions 0 .. lengths[i] - 1.": _padding(lengths + 1, t),
        "the mask is off by one: it marks one real token too few (position < length - 1). Row i has lengths[i] "
        "real tokens at positions 0 .. lengths[i] - 1.": _padding(lengths - 1, t),
    }


_PADDING_HINT = "Entry (i, p) is True exactly when p < lengths[i]: compare torch.arange(t) with lengths[:, None]."


def _padding_hints(b: int, t: int) -> dict[tuple[int, ...], str]:
    return {(t, b): "That is the transposed shape: one row per sequence, one column per position.",
            (b, t, 1): "Drop the trailing dimension; MultiHeadAttention gets it as mask.unsqueeze(1) later.",
            (b, 1, t): "Return the plain (b, t) mask; the model adds the middle dimension when it attends."}


def padding_mask_by_hand(padding_mask: Callable) -> None:
    """lengths [3, 1, 4], t = 5."""
    __tracebackhide__ = True
    lengths = torch.tensor([3, 1, 4])
    mask = run(padding_mask, lengths.clone(), 5, what=PADDING_NAME)
    _expect_mask(mask, what=PADDING_NAME, shape=(3, 5), device="cpu", hints=_padding_hints(3, 5))
    _expect_equal_mask(mask, _padding(lengths, 5), what=PADDING_NAME, mistakes=_padding_mistakes(lengths, 5),
                       otherwise=_PADDING_HINT, case="lengths=[3, 1, 4], t=5, shown as 0/1")


def padding_mask_matches_oracle(padding_mask: Callable, device: torch.device | str = "cpu") -> None:
    """Several batches on the device: lengths from 1 to t, t larger than every length, a batch of one."""
    __tracebackhide__ = True
    cases = [([2, 7, 5, 1], 7), ([4, 4], 9), ([6], 6), ([1, 3, 2, 5, 4], 5)]
    for lengths_list, t in cases:
        lengths = torch.tensor(lengths_list, device=device)
        mask = run(padding_mask, lengths.clone(), t, what=PADDING_NAME)
        _expect_mask(mask, what=PADDING_NAME, shape=(len(lengths_list), t), device=device,
                     hints=_padding_hints(len(lengths_list), t))
        _expect_equal_mask(mask, _padding(lengths, t), what=PADDING_NAME, mistakes=_padding_mistakes(lengths, t),
                           otherwise=_PADDING_HINT, case=f"lengths={lengths_list}, t={t}")


# ----------------------------------------------------------------------------------------------- weights

def _randomize(module: nn.Module, seed: int) -> None:
    """Distinct, well-spread weights (LayerNorm gains away from 1, biases away from 0) so each mistake shows."""
    device = next(module.parameters()).device
    with torch.no_grad():
        for i, (name, p) in enumerate(module.named_parameters()):
            noise = randn(*p.shape, seed=seed + i, device=device)
            if p.dim() >= 2:
                p.copy_(noise / math.sqrt(p.shape[-1]))
            elif name.endswith("weight"):  # LayerNorm gains
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.3 * noise)


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def _copy_attention(target: nn.MultiheadAttention, source: nn.Module) -> None:
    """Course MultiHeadAttention -> nn.MultiheadAttention: in_proj = [Wq; Wk; Wv] without bias, out_proj = unify_heads."""
    target.in_proj_weight.copy_(torch.cat([source.to_queries.weight, source.to_keys.weight, source.to_values.weight]))
    target.in_proj_bias.zero_()
    target.out_proj.weight.copy_(source.unify_heads.weight)
    target.out_proj.bias.copy_(source.unify_heads.bias)


def _copy_norm(target: nn.LayerNorm, source: nn.LayerNorm) -> None:
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)


def _copy_ff(linear1: nn.Linear, linear2: nn.Linear, ff: nn.Module) -> None:
    first, second = _linears(ff)
    linear1.weight.copy_(first.weight)
    linear1.bias.copy_(first.bias)
    linear2.weight.copy_(second.weight)
    linear2.bias.copy_(second.bias)


def _torch_decoder_layer(block: nn.Module, k: int, heads: int, ff_hidden: int, device) -> nn.TransformerDecoderLayer:
    layer = nn.TransformerDecoderLayer(k, heads, dim_feedforward=ff_hidden, dropout=0.0, activation="relu",
                                       batch_first=True, norm_first=False).to(device).eval()
    with torch.no_grad():
        _copy_attention(layer.self_attn, block.self_attention)
        _copy_attention(layer.multihead_attn, block.cross_attention)
        for n in ("norm1", "norm2", "norm3"):
            _copy_norm(getattr(layer, n), getattr(block, n))
        _copy_ff(layer.linear1, layer.linear2, block.ff)
    return layer


def _torch_encoder_layer(block: nn.Module, k: int, heads: int, ff_hidden: int, device) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(k, heads, dim_feedforward=ff_hidden, dropout=0.0, activation="relu",
                                       batch_first=True, norm_first=False).to(device).eval()
    with torch.no_grad():
        _copy_attention(layer.self_attn, block.attention)
        _copy_norm(layer.norm1, block.norm1)
        _copy_norm(layer.norm2, block.norm2)
        _copy_ff(layer.linear1, layer.linear2, block.ff)
    return layer


# ----------------------------------------------------------------------------------------------- DecoderBlock

def _attribute(module: nn.Module, owner: str, name: str, kind: type, how: str) -> nn.Module:
    __tracebackhide__ = True
    part = getattr(module, name, None)
    if part is None:
        fail(f"{owner} has no attribute `{name}`. Create it in __init__: self.{name} = {how}.")
    if not isinstance(part, kind):
        fail(f"{owner}.{name} is a {type(part).__name__}; it should be {how}.")
    return part


def _block_parts(block: nn.Module, k: int, heads: int, ff_mult: int) -> None:
    """The attributes the issue names, of the right kinds and sizes, and no others with parameters."""
    __tracebackhide__ = True
    self_attention = _attribute(block, BLOCK_NAME, "self_attention", MultiHeadAttention, "MultiHeadAttention(k, heads)")
    cross_attention = _attribute(block, BLOCK_NAME, "cross_attention", MultiHeadAttention, "MultiHeadAttention(k, heads)")
    if self_attention is cross_attention:
        fail(f"{BLOCK_NAME}.self_attention and .cross_attention are the same module. Reading the target and reading "
             "the source are different jobs: create two MultiHeadAttention modules.")
    for attention in (self_attention, cross_attention):
        size, count = attention.to_queries.in_features, getattr(attention, "heads", heads)
        if (size, count) != (k, heads):
            fail(f"{BLOCK_NAME}'s attention has k={size}, heads={count}; with DecoderBlock({k}, {heads}) it should be "
                 f"MultiHeadAttention({k}, {heads}).")
    norms = [_attribute(block, BLOCK_NAME, n, nn.LayerNorm, "nn.LayerNorm(k)") for n in ("norm1", "norm2", "norm3")]
    if len({id(n) for n in norms}) < 3:
        fail(f"Two of {BLOCK_NAME}.norm1, norm2, norm3 are the same module: each sublayer needs its own LayerNorm(k).")
    for n in norms:
        if tuple(n.normalized_shape) != (k,):
            fail(f"{BLOCK_NAME}'s LayerNorm normalizes shape {tuple(n.normalized_shape)}; it should be nn.LayerNorm({k}).")
    ff = _attribute(block, BLOCK_NAME, "ff", FeedForward, "FeedForward(k, ff_mult * k)")
    first, second = _linears(ff)
    if (first.in_features, first.out_features) != (k, ff_mult * k):
        fail(f"{BLOCK_NAME}.ff maps {first.in_features} -> {first.out_features} features first; with k={k} and "
             f"ff_mult={ff_mult} it should be FeedForward(k, ff_mult * k) = FeedForward({k}, {ff_mult * k}).")
    expected = 2 * (4 * k * k + k) + 3 * 2 * k + 2 * ff_mult * k * k + ff_mult * k + k
    count = sum(p.numel() for p in block.parameters())
    if count != expected:
        fail(f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}) has {count} parameters; two attentions, three norms and "
             f"the feed-forward make {expected}. Is an extra layer registered?")


def _new_block(DecoderBlock: Callable, k: int, heads: int, ff_mult: int, device, seed: int) -> nn.Module:
    __tracebackhide__ = True
    torch.manual_seed(seed)
    block = run(DecoderBlock, k, heads, ff_mult=ff_mult, dropout=0.0,
                what=f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult}, dropout=0.0)")
    if not isinstance(block, nn.Module):
        fail(f"{BLOCK_NAME}(...) should create an nn.Module, but gave a {type(block).__name__}.")
    _block_parts(block, k, heads, ff_mult)
    block = block.to(device).eval()
    _randomize(block, seed)
    return block


def decoder_block_structure(DecoderBlock: Callable) -> None:
    """self_attention and cross_attention (two MultiHeadAttention), norm1-3 (LayerNorm(k)), ff (FeedForward)."""
    __tracebackhide__ = True
    for k, heads, ff_mult in ((8, 2, 4), (12, 3, 2)):
        block = run(DecoderBlock, k, heads, ff_mult=ff_mult, what=f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})")
        if not isinstance(block, nn.Module):
            fail(f"{BLOCK_NAME}(...) should create an nn.Module, but gave a {type(block).__name__}.")
        _block_parts(block, k, heads, ff_mult)


def _block_mistakes(block: nn.Module, x, memory, self_mask, memory_mask) -> dict[str, torch.Tensor]:
    sa, ca, ff = block.self_attention, block.cross_attention, block.ff
    n1, n2, n3 = block.norm1, block.norm2, block.norm3

    def post(self_mask=self_mask, memory_mask=memory_mask, context=memory):
        h = n1(x + sa(x, mask=self_mask))
        h = n2(h + ca(h, context=context, mask=memory_mask))
        return n3(h + ff(h))

    h = n1(x + sa(x, mask=self_mask))
    no_residual = n2(ca(n1(sa(x, mask=self_mask)), context=memory, mask=memory_mask))
    no_residual = n3(ff(no_residual))
    h_pre = x + sa(n1(x), mask=self_mask)
    h_pre = h_pre + ca(n2(h_pre), context=memory, mask=memory_mask)
    pre = h_pre + ff(n3(h_pre))
    c = n1(x + ca(x, context=memory, mask=memory_mask))
    c = n2(c + sa(c, mask=self_mask))
    swapped = n3(c + ff(c))
    cross_on_x = n2(h + ca(x, context=memory, mask=memory_mask))
    cross_on_x = n3(cross_on_x + ff(cross_on_x))
    out = {
        "cross-attention reads the decoder's own states: its keys and values must come from `memory` "
        "(cross_attention(x, context=memory, mask=memory_mask)).": post(context=None, memory_mask=self_mask),
        "cross-attention reads the decoder's own states, without a mask: its keys and values must come from "
        "`memory` (cross_attention(x, context=memory, mask=memory_mask)).": post(context=None, memory_mask=None),
        "source padding is not masked in cross-attention: pass memory_mask to cross_attention, so no target "
        "position reads a padded source position.": post(memory_mask=None),
        "self_mask is not used in self-attention, so every target position reads the future: "
        "self_attention(x, mask=self_mask).": post(self_mask=None),
        "the residual connections are missing: each sublayer's output is added to its input before the norm, "
        "x = norm(x + sublayer(x)).": no_residual,
        "the block is pre-norm (x + sublayer(norm(x))); this course's blocks are post-norm: "
        "x = norm(x + sublayer(x)).": pre,
        "cross-attention comes before self-attention: the decoder first reads its own past (self-attention, "
        "norm1), then the source (cross-attention, norm2), then the feed-forward (norm3).": swapped,
        "cross-attention is applied to the block's input x instead of to the output of the self-attention "
        "sublayer, so the self-attention result is lost in the second sublayer.": cross_on_x,
    }
    return out


_BLOCK_HINT = ("x = norm1(x + self_attention(x, mask=self_mask)); x = norm2(x + cross_attention(x, context=memory, "
               "mask=memory_mask)); return norm3(x + ff(x)).")

# (b, t, s, k, heads, ff_mult): t != s, batch > 1, head size != k, odd lengths
BLOCK_CASES = ((3, 5, 7, 8, 2, 4), (2, 1, 4, 12, 3, 2), (1, 6, 3, 6, 1, 4), (2, 4, 9, 16, 4, 1))


def _block_inputs(b: int, t: int, s: int, k: int, seed: int, device):
    x = randn(b, t, k, seed=seed, device=device)
    memory = randn(b, s, k, seed=seed + 1, device=device)
    lengths = torch.tensor([s - (i * 2) % s for i in range(b)], device=device).clamp(min=1)
    return x, memory, lengths


def decoder_block_shapes_and_causality(DecoderBlock: Callable, device: torch.device | str = "cpu") -> None:
    """(b, t, k) out for (b, t, k) in; with a causal self_mask, changing a later position never changes earlier ones."""
    __tracebackhide__ = True
    b, t, s, k, heads = 2, 5, 7, 8, 2
    block = _new_block(DecoderBlock, k, heads, 4, device, seed=1100)
    x, memory, lengths = _block_inputs(b, t, s, k, 1110, device)
    self_mask, memory_mask = _causal(t, device), _padding(lengths, s).unsqueeze(1)
    with torch.no_grad():
        y = run(block, x.clone(), memory.clone(), self_mask=self_mask, memory_mask=memory_mask,
                what=f"{BLOCK_NAME}.forward(x, memory, self_mask, memory_mask)", hint=_MASK_SHAPE_HINT)
        expect_tensor(y, what=f"{BLOCK_NAME}.forward", shape=(b, t, k), device=device,
                      shape_hints={(b, s, k): "One output per memory position: are x and memory swapped in "
                                              "cross-attention? The queries come from x."})
        changed = x.clone()
        changed[:, 3:] = randn(b, t - 3, k, seed=1120, device=device)
        y_changed = run(block, changed, memory.clone(), self_mask=self_mask, memory_mask=memory_mask,
                        what=f"{BLOCK_NAME}.forward")
    if not close(y_changed[:, :3], y[:, :3], **tolerance(device)):
        fail(f"{BLOCK_NAME} is not causal: changing target positions 3 and 4 changed the outputs at positions 0-2. "
             "Pass self_mask to self-attention (self_attention(x, mask=self_mask)).", y[:, :3, 0], y_changed[:, :3, 0],
             case="outputs at positions 0-2 (first feature) before and after the change")


_MASK_SHAPE_HINT = ("Masks are bool and broadcast to (b, t, t) for self-attention and to (b, t, s) for "
                    "cross-attention; pass them on to MultiHeadAttention unchanged (mask=...).")


def decoder_block_matches_oracle(DecoderBlock: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and inputs against nn.TransformerDecoderLayer (post-norm, ReLU) with the same weights."""
    __tracebackhide__ = True
    for i, (b, t, s, k, heads, ff_mult) in enumerate(BLOCK_CASES):
        block = _new_block(DecoderBlock, k, heads, ff_mult, device, seed=1200 + 50 * i)
        x, memory, lengths = _block_inputs(b, t, s, k, 1230 + 10 * i, device)
        self_mask, pad = _causal(t, device), _padding(lengths, s)
        oracle = _torch_decoder_layer(block, k, heads, ff_mult * k, device)
        with torch.no_grad():
            y = run(block, x.clone(), memory.clone(), self_mask=self_mask, memory_mask=pad.unsqueeze(1),
                    what=f"{BLOCK_NAME}.forward(x, memory, self_mask, memory_mask)", hint=_MASK_SHAPE_HINT)
            expected = oracle(x, memory, tgt_mask=~self_mask, memory_key_padding_mask=~pad)
            mistakes = _block_mistakes(block, x, memory, self_mask, pad.unsqueeze(1))
        case = f"b={b}, t={t}, s={s}, k={k}, heads={heads}, source lengths {lengths.tolist()}"
        expect_tensor(y, what=f"{BLOCK_NAME}.forward", shape=(b, t, k), device=device)
        _expect_close_shown(y, expected, what=f"{BLOCK_NAME}.forward", mistakes=mistakes, otherwise=_BLOCK_HINT,
                            case=case)
    # without masks (both None), as an encoder-free decoder or a test would call it
    block = _new_block(DecoderBlock, 8, 2, 4, device, seed=1400)
    x, memory, _ = _block_inputs(2, 3, 5, 8, 1410, device)
    oracle = _torch_decoder_layer(block, 8, 2, 32, device)
    with torch.no_grad():
        y = run(block, x.clone(), memory.clone(), what=f"{BLOCK_NAME}.forward(x, memory)")
        expected = oracle(x, memory)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward(x, memory)", shape=(2, 3, 8), device=device)
    expect_close(y, expected, what=f"{BLOCK_NAME}.forward(x, memory) without masks", otherwise=_BLOCK_HINT,
                 case="no masks")


def decoder_block_ignores_padding_and_passes_gradients(DecoderBlock: Callable, device: torch.device | str = "cpu") -> None:
    """Extra masked memory positions change nothing; a loss reaches every parameter, x and memory."""
    __tracebackhide__ = True
    b, t, s, k = 2, 4, 5, 8
    block = _new_block(DecoderBlock, k, 2, 4, device, seed=1500)
    x, memory, lengths = _block_inputs(b, t, s, k, 1510, device)
    lengths = torch.tensor([5, 3], device=device)
    self_mask = _causal(t, device)
    longer = torch.cat([memory, randn(b, 3, k, seed=1520, device=device)], dim=1)  # (b, s + 3, k): more padding
    with torch.no_grad():
        y = run(block, x.clone(), memory.clone(), self_mask=self_mask, memory_mask=_padding(lengths, s).unsqueeze(1),
                what=f"{BLOCK_NAME}.forward", hint=_MASK_SHAPE_HINT)
        y_longer = run(block, x.clone(), longer, self_mask=self_mask,
                       memory_mask=_padding(lengths, s + 3).unsqueeze(1), what=f"{BLOCK_NAME}.forward",
                       hint=_MASK_SHAPE_HINT)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward", shape=(b, t, k), device=device)
    if not close(y_longer, y, **tolerance(device)):
        fail(f"{BLOCK_NAME} reads padded memory positions: three more padded source positions (masked out by "
             "memory_mask) changed its output. Pass memory_mask to cross-attention.", y[:, :, 0], y_longer[:, :, 0],
             case="first feature, before and after adding padding")
    block.train()
    x = x.clone().requires_grad_(True)
    memory = memory.clone().requires_grad_(True)
    y = run(block, x, memory, self_mask=self_mask, memory_mask=_padding(lengths, s).unsqueeze(1),
            what=f"{BLOCK_NAME}.forward")
    if not y.requires_grad:
        fail(f"{BLOCK_NAME}.forward is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    (y * randn(b, t, k, seed=1530, device=device)).sum().backward()
    for name, p in block.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0.0:
            fail(f"{BLOCK_NAME}.{name} receives no gradient, so it would never learn. Is it used in forward?")
    if memory.grad is None or float(memory.grad.abs().sum()) == 0.0:
        fail(f"The memory given to {BLOCK_NAME}.forward receives no gradient: cross-attention must read memory "
             "(cross_attention(x, context=memory, ...)), or the encoder would never learn.")
    if x.grad is None or float(x.grad.abs().sum()) == 0.0:
        fail(f"The input x of {BLOCK_NAME}.forward receives no gradient.")


# ----------------------------------------------------------------------------------------------- the model

def _sinusoids(t: int, k: int, device) -> torch.Tensor:
    """The sinusoidal table of assignment 06, computed here independently: (t, k)."""
    position = torch.arange(t, dtype=torch.float64).unsqueeze(1)  # (t, 1)
    rate = 10000.0 ** (-torch.arange(0, k, 2, dtype=torch.float64) / k)  # (k/2,)
    table = torch.zeros(t, k, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table.to(device, torch.float32)


def _model_parts(model: nn.Module, src_vocab: int, tgt_vocab: int, k: int, depth: int) -> None:
    __tracebackhide__ = True
    what = MODEL_NAME
    src_embedding = _attribute(model, what, "src_embedding", nn.Embedding, "nn.Embedding(src_vocab_size, k)")
    tgt_embedding = _attribute(model, what, "tgt_embedding", nn.Embedding, "nn.Embedding(tgt_vocab_size, k)")
    if src_embedding is tgt_embedding:
        fail(f"{what}.src_embedding and .tgt_embedding are the same module: source and target have different "
             "vocabularies, so each needs its own nn.Embedding.")
    for name, emb, size in (("src_embedding", src_embedding, src_vocab), ("tgt_embedding", tgt_embedding, tgt_vocab)):
        if (emb.num_embeddings, emb.embedding_dim) != (size, k):
            fail(f"{what}.{name} is nn.Embedding({emb.num_embeddings}, {emb.embedding_dim}); it should be "
                 f"nn.Embedding({size}, {k}) here. Are the source and target vocabulary sizes swapped?")
    _attribute(model, what, "positions", PositionalEncoding, "PositionalEncoding(k, max_len, dropout)")
    encoder = _attribute(model, what, "encoder", nn.ModuleList, "nn.ModuleList of `depth` TransformerBlock(k, heads)")
    decoder = _attribute(model, what, "decoder", nn.ModuleList, "nn.ModuleList of `depth` DecoderBlock(k, heads)")
    for name, blocks in (("encoder", encoder), ("decoder", decoder)):
        if len(blocks) != depth:
            fail(f"{what}.{name} holds {len(blocks)} blocks; with depth={depth} it should hold {depth}.")
    for block in encoder:
        if not isinstance(block, TransformerBlock):
            fail(f"{what}.encoder holds a {type(block).__name__}; it should hold course TransformerBlock(k, heads).")
    for block in decoder:
        if not all(hasattr(block, n) for n in ("self_attention", "cross_attention", "ff", "norm3")):
            fail(f"{what}.decoder holds a {type(block).__name__}; it should hold your DecoderBlock(k, heads).")
    if len({id(b) for b in list(encoder) + list(decoder)}) < 2 * depth:
        fail(f"{what} reuses one block several times: create a new block for every layer, or the layers share weights.")
    to_logits = _attribute(model, what, "to_logits", nn.Linear, "nn.Linear(k, tgt_vocab_size)")
    if (to_logits.in_features, to_logits.out_features) != (k, tgt_vocab):
        fail(f"{what}.to_logits maps {to_logits.in_features} -> {to_logits.out_features}; it should be "
             f"nn.Linear({k}, {tgt_vocab}): one logit per target token.")


def _prerequisite_note(Seq2SeqTransformer: Callable) -> str:
    """If the notebook's causal_mask or DecoderBlock, which the model uses, fail their own checks, say so."""
    namespace = getattr(getattr(Seq2SeqTransformer, "decode", None), "__globals__", {})
    notes = []
    for name, exercise, checks in (("causal_mask", 1, (causal_mask_by_hand,)),
                                   ("DecoderBlock", 3, (decoder_block_structure, decoder_block_matches_oracle))):
        part = namespace.get(name)
        if not callable(part):
            continue
        try:
            for part_check in checks:
                part_check(part)
        except CheckFailed:
            notes.append(f"your {name} (exercise {exercise}) does not pass its own tests yet")
    if not notes:
        return ""
    return (f"Note: {' and '.join(notes)}, and {MODEL_NAME} is built from it. Fix that first; this test may then "
            "pass too.")


def _blames_prerequisites(model_check: Callable) -> Callable:
    """A failing model check also says when the cause may be an earlier exercise the model uses."""

    @functools.wraps(model_check)
    def checked(Seq2SeqTransformer: Callable, *args, **kwargs) -> None:
        __tracebackhide__ = True
        try:
            model_check(Seq2SeqTransformer, *args, **kwargs)
        except CheckFailed as failure:
            note = _prerequisite_note(Seq2SeqTransformer)
            if not note:
                raise
            raise CheckFailed(f"{failure}\n\n{note}") from failure.__cause__

    return checked


# (b, s, t, src_vocab, tgt_vocab, k, heads, depth, max_len)
MODEL_CASES = ((3, 7, 5, 11, 9, 16, 2, 2, 20), (2, 4, 6, 7, 13, 12, 3, 1, 12), (1, 5, 1, 11, 9, 8, 4, 2, 10))


def _new_model(Seq2SeqTransformer: Callable, case: tuple, device, seed: int) -> nn.Module:
    __tracebackhide__ = True
    b, s, t, src_vocab, tgt_vocab, k, heads, depth, max_len = case
    torch.manual_seed(seed)
    model = run(Seq2SeqTransformer, src_vocab, tgt_vocab, k, heads, depth, max_len, dropout=0.0,
                what=f"{MODEL_NAME}({src_vocab}, {tgt_vocab}, k={k}, heads={heads}, depth={depth}, max_len={max_len})")
    if not isinstance(model, nn.Module):
        fail(f"{MODEL_NAME}(...) should create an nn.Module, but gave a {type(model).__name__}.")
    _model_parts(model, src_vocab, tgt_vocab, k, depth)
    model = model.to(device).eval()
    _randomize(model, seed)
    return model


def _model_inputs(case: tuple, seed: int, device):
    b, s, t, src_vocab, tgt_vocab = case[:5]
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, src_vocab, (b, s), generator=g)
    tgt = torch.randint(3, tgt_vocab, (b, t), generator=g)
    tgt[:, 0] = 1
    lengths = torch.tensor([s - (2 * i) % s for i in range(b)]).clamp(min=1)
    src = src.masked_fill(~_padding(lengths, s), 0)
    return src.to(device), tgt.to(device), lengths.to(device)


def _model_oracle(model: nn.Module, case: tuple, src, tgt, lengths, *, src_positions=True, tgt_positions=True,
                  encoder_mask=True, memory_mask=True, causal=True, use_encoder=True, tgt_embedding="tgt",
                  scale=1.0, softmax=False) -> torch.Tensor:
    """PyTorch's encoder and decoder layers with the model's weights; the keywords switch typical mistakes on."""
    b, s, t, src_vocab, tgt_vocab, k, heads, depth, max_len = case
    ff_hidden = _linears(model.encoder[0].ff)[0].out_features
    pad = _padding(lengths, s)
    x = F.embedding(src, model.src_embedding.weight) * scale
    if src_positions:
        x = x + _sinusoids(s, k, src.device)
    if use_encoder:
        for block in model.encoder:
            layer = _torch_encoder_layer(block, k, heads, ff_hidden, src.device)
            x = layer(x, src_key_padding_mask=~pad if encoder_mask else None)
    memory = x
    weights = model.tgt_embedding.weight if tgt_embedding == "tgt" else model.src_embedding.weight
    y = F.embedding(tgt, weights) * scale
    if tgt_positions:
        y = y + _sinusoids(t, k, tgt.device)
    for block in model.decoder:
        layer = _torch_decoder_layer(block, k, heads, _linears(block.ff)[0].out_features, tgt.device)
        y = layer(y, memory, tgt_mask=~_causal(t, tgt.device) if causal else None,
                  memory_key_padding_mask=~pad if memory_mask else None)
    logits = model.to_logits(y)
    return F.softmax(logits, dim=-1) if softmax else logits


def _model_mistakes(model, case, src, tgt, lengths) -> dict[str, torch.Tensor]:
    k = case[5]
    oracle = lambda **kw: _model_oracle(model, case, src, tgt, lengths, **kw)  # noqa: E731
    out = {
        "forward returns probabilities (a softmax of the logits). Return the raw logits: F.cross_entropy applies "
        "log-softmax itself.": oracle(softmax=True),
        "the decoder is not causal: pass causal_mask(t) to every DecoderBlock as self_mask.": oracle(causal=False),
        "source padding is not masked in cross-attention: pass src_mask as memory_mask, shaped (b, 1, s), to every "
        "DecoderBlock.": oracle(memory_mask=False),
        "source padding is not masked in the encoder: pass src_mask, shaped (b, 1, s), to every encoder block.":
            oracle(encoder_mask=False),
        "source padding is masked neither in the encoder nor in cross-attention: pass src_mask shaped (b, 1, s) "
        "to both.": oracle(encoder_mask=False, memory_mask=False),
        "no positions are added to the target embeddings: apply self.positions in decode too.": oracle(tgt_positions=False),
        "no positions are added to the source embeddings: apply self.positions in encode too.": oracle(src_positions=False),
        "the memory is the source embeddings: encode must run them through the encoder blocks.": oracle(use_encoder=False),
        "the embeddings are multiplied by √k; in this course the positions are added to the plain embeddings.":
            oracle(scale=math.sqrt(k)),
    }
    if int(tgt.max()) < case[3]:  # target ids that also index the source vocabulary
        out["the target tokens are embedded with src_embedding; use tgt_embedding for them."] = oracle(tgt_embedding="src")
    return out


_MODEL_HINT = ("encode: x = positions(src_embedding(src)), then every encoder block with mask src_mask[:, None, :]; "
               "decode: y = positions(tgt_embedding(tgt)), every decoder block with self_mask = causal_mask(t) and "
               "memory_mask = src_mask[:, None, :], then to_logits.")
_MODEL_CALL_HINT = ("If the error is about sizes inside attention: a (b, s) padding mask must reach "
                    "MultiHeadAttention as (b, 1, s) — src_mask.unsqueeze(1) — so that it broadcasts over the queries.")


def _forward(model, src, tgt, lengths, what=f"{MODEL_NAME}.forward(src, tgt, src_mask)"):
    __tracebackhide__ = True
    return run(model, src.clone(), tgt.clone(), _padding(lengths, src.shape[1]), what=what, hint=_MODEL_CALL_HINT)


@_blames_prerequisites
def model_structure_and_shapes(Seq2SeqTransformer: Callable, device: torch.device | str = "cpu") -> None:
    """The named parts; forward gives (b, t, tgt_vocab) logits; encode gives (b, s, k)."""
    __tracebackhide__ = True
    case = MODEL_CASES[0]
    b, s, t, src_vocab, tgt_vocab, k = case[:6]
    model = _new_model(Seq2SeqTransformer, case, device, seed=1600)
    src, tgt, lengths = _model_inputs(case, 1610, device)
    with torch.no_grad():
        memory = run(model.encode, src.clone(), _padding(lengths, s), what=f"{MODEL_NAME}.encode(src, src_mask)",
                     hint=_MODEL_CALL_HINT)
        expect_tensor(memory, what=f"{MODEL_NAME}.encode", shape=(b, s, k), device=device)
        logits = _forward(model, src, tgt, lengths)
    expect_tensor(logits, what=f"{MODEL_NAME}.forward", shape=(b, t, tgt_vocab), device=device,
                  shape_hints={(b, t, k): "Those are the decoder's states: map them to logits with to_logits.",
                               (b, s, tgt_vocab): "One output per source position: the decoder must produce one "
                                                  "per target position."})


@_blames_prerequisites
def model_is_causal(Seq2SeqTransformer: Callable, device: torch.device | str = "cpu") -> None:
    """Changing a later target token never changes the logits at earlier positions."""
    __tracebackhide__ = True
    case = MODEL_CASES[0]
    t, tgt_vocab = case[2], case[4]
    model = _new_model(Seq2SeqTransformer, case, device, seed=1700)
    src, tgt, lengths = _model_inputs(case, 1710, device)
    with torch.no_grad():
        logits = _forward(model, src, tgt, lengths)
        expect_tensor(logits, what=f"{MODEL_NAME}.forward", shape=(case[0], t, tgt_vocab), device=device)
        for j in (t - 1, 2):
            changed = tgt.clone()
            changed[:, j] = 3 + (changed[:, j] - 2) % (tgt_vocab - 3)  # another real token
            logits_changed = _forward(model, src, changed, lengths)
            if not close(logits_changed[:, :j], logits[:, :j], **tolerance(device)):
                fail(f"{MODEL_NAME} is not causal: changing target token {j} changed the logits at earlier positions, "
                     "so in training the model could read the answer. Pass causal_mask(t) as self_mask to every "
                     "decoder block.", logits[0, :j, 0], logits_changed[0, :j, 0],
                     case=f"first logit at positions 0-{j - 1}, before and after changing token {j}")


@_blames_prerequisites
def model_matches_oracle(Seq2SeqTransformer: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights against PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with the same weights."""
    __tracebackhide__ = True
    for i, case in enumerate(MODEL_CASES):
        b, s, t, src_vocab, tgt_vocab = case[:5]
        model = _new_model(Seq2SeqTransformer, case, device, seed=1800 + 100 * i)
        src, tgt, lengths = _model_inputs(case, 1850 + i, device)
        with torch.no_grad():
            logits = _forward(model, src, tgt, lengths)
            expected = _model_oracle(model, case, src, tgt, lengths)
            mistakes = _model_mistakes(model, case, src, tgt, lengths)
        expect_tensor(logits, what=f"{MODEL_NAME}.forward", shape=(b, t, tgt_vocab), device=device)
        _expect_close_shown(logits, expected, what=f"{MODEL_NAME}.forward", mistakes=mistakes, otherwise=_MODEL_HINT,
                     case=f"b={b}, s={s}, t={t}, k={case[5]}, heads={case[6]}, depth={case[7]}, "
                          f"source lengths {lengths.tolist()}")
        with torch.no_grad():
            memory = run(model.encode, src.clone(), _padding(lengths, s), what=f"{MODEL_NAME}.encode")
            decoded = run(model.decode, tgt.clone(), memory, _padding(lengths, s), what=f"{MODEL_NAME}.decode")
        expect_tensor(decoded, what=f"{MODEL_NAME}.decode", shape=(b, t, tgt_vocab), device=device)
        expect_close(decoded, logits, what=f"{MODEL_NAME}.decode(tgt, encode(src, src_mask), src_mask)",
                     otherwise="forward(src, tgt, src_mask) must equal decode(tgt, encode(src, src_mask), src_mask): "
                               "greedy decoding encodes once and decodes step by step.")


@_blames_prerequisites
def model_ignores_padding(Seq2SeqTransformer: Callable, device: torch.device | str = "cpu") -> None:
    """More padding on the source (filled with arbitrary tokens, masked out) never changes the logits."""
    __tracebackhide__ = True
    case = MODEL_CASES[0]
    b, s, t, src_vocab = case[:4]
    model = _new_model(Seq2SeqTransformer, case, device, seed=1900)
    src, tgt, lengths = _model_inputs(case, 1910, device)
    extra = torch.randint(3, src_vocab, (b, 4), generator=torch.Generator().manual_seed(1920)).to(device)
    longer = torch.cat([src, extra], dim=1)  # (b, s + 4): garbage in the padded positions, masked out
    longer[:, :s] = longer[:, :s].masked_fill(~_padding(lengths, s), 5)
    with torch.no_grad():
        logits = _forward(model, src, tgt, lengths)
        logits_longer = _forward(model, longer, tgt, lengths)
    expect_tensor(logits_longer, what=f"{MODEL_NAME}.forward", shape=(b, t, case[4]), device=device)
    if not close(logits_longer, logits, **tolerance(device)):
        fail(f"{MODEL_NAME} reads the source padding: four more padded positions (masked out by src_mask) changed "
             "the logits. Pass src_mask shaped (b, 1, s) to every encoder block AND as memory_mask to every decoder "
             "block.", logits[0, :, 0], logits_longer[0, :, 0], case="first logit of sequence 0, before and after")


@_blames_prerequisites
def model_passes_gradients(Seq2SeqTransformer: Callable, device: torch.device | str = "cpu") -> None:
    """A loss on the logits sends a gradient to every parameter: embeddings, encoder, decoder, output layer."""
    __tracebackhide__ = True
    case = MODEL_CASES[0]
    model = _new_model(Seq2SeqTransformer, case, device, seed=2000)
    model.train()
    src, tgt, lengths = _model_inputs(case, 2010, device)
    logits = _forward(model, src, tgt, lengths)
    if not isinstance(logits, torch.Tensor) or not logits.requires_grad:
        fail(f"{MODEL_NAME}.forward is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    (logits * randn(*logits.shape, seed=2020, device=device)).sum().backward()
    for name, p in model.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0.0:
            where = ("Is memory the output of the encoder blocks?" if name.startswith("encoder") or "src" in name
                     else "Is it used in forward?")
            fail(f"{MODEL_NAME}.{name} receives no gradient, so it would never learn. {where}")


# ----------------------------------------------------------------------------------------------- the loss

def _loss_case(seed: int, device, pad: int):
    """A small reference model and a batch with targets of different lengths."""
    from course.seq2seq import Seq2SeqTransformer as Reference

    torch.manual_seed(seed)
    model = Reference(10, 9, 8, 2, 1, 16).to(device).eval()
    g = torch.Generator().manual_seed(seed + 1)
    b, s, t = 3, 6, 7
    src = torch.randint(3, 10, (b, s), generator=g)
    lengths = torch.tensor([6, 4, 5])
    tgt = torch.randint(3, 9, (b, t), generator=g)
    tgt[:, 0] = 1  # <bos>
    tgt_lengths = torch.tensor([7, 4, 5])
    tgt[tgt == pad] = 3  # real tokens never equal the padding id
    for i, n in enumerate(tgt_lengths.tolist()):
        tgt[i, n - 1] = 2  # <eos>
        tgt[i, n:] = pad
    return model, src.to(device), _padding(lengths, s).to(device), tgt.to(device)


def _loss_mistakes(model, src, src_mask, tgt, pad) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        shifted = model(src, tgt[:, :-1], src_mask).transpose(1, 2)  # (b, vocab, t-1)
        unshifted = model(src, tgt, src_mask).transpose(1, 2)  # (b, vocab, t)
        backwards = model(src, tgt[:, 1:], src_mask).transpose(1, 2)
    labels = tgt[:, 1:]
    per_token = F.cross_entropy(shifted, labels, ignore_index=pad, reduction="none")  # (b, t-1)
    real = (labels != pad).float()
    return {
        # first: with pad != 0 and no label 0, ignoring 0 and ignoring nothing give the same number
        "the padding id is hard-coded as 0 (or the padding is not ignored at all): ignore the labels equal to the "
        "`pad` argument (ignore_index=pad).": F.cross_entropy(shifted, labels, ignore_index=0),
        "the targets are not shifted: the decoder reads tgt and is scored on tgt itself, so at every position the "
        "answer is already in its input and the model learns to copy its input. Feed tgt[:, :-1], score against "
        "tgt[:, 1:].": F.cross_entropy(unshifted, tgt, ignore_index=pad),
        "the loss counts the padding: pass ignore_index=pad to F.cross_entropy (or average over real tokens only).":
            F.cross_entropy(shifted, labels),
        "the shift goes the wrong way: the decoder reads tgt[:, :-1] (starting with <bos>) and predicts tgt[:, 1:].":
            F.cross_entropy(backwards, tgt[:, :-1], ignore_index=pad),
        "the loss is a sum, not a mean over the real target tokens.": per_token.sum(),
        "the loss is averaged per sequence first; the task asks for the mean over all real target tokens of the "
        "batch (what F.cross_entropy(..., ignore_index=pad) gives).":
            ((per_token * real).sum(1) / real.sum(1)).mean(),
        "a softmax is applied before F.cross_entropy, which applies log-softmax itself: pass the raw logits.":
            F.cross_entropy(F.softmax(shifted, dim=1), labels, ignore_index=pad),
    }


_LOSS_HINT = ("logits = model(src, tgt[:, :-1], src_mask); loss = F.cross_entropy(logits.transpose(1, 2), "
              "tgt[:, 1:], ignore_index=pad). F.cross_entropy wants the classes in dimension 1.")


def _loss_check(teacher_forcing_loss: Callable, device, pad: int, seed: int) -> torch.Tensor:
    __tracebackhide__ = True
    model, src, src_mask, tgt = _loss_case(seed, device, pad)
    loss = run(teacher_forcing_loss, model, src.clone(), src_mask.clone(), tgt.clone(), pad, what=LOSS_NAME,
               hint=_LOSS_HINT)
    expect_tensor(loss, what=LOSS_NAME, shape=(), device=device,
                  shape_hints={(3, 6): "That is one loss per token: average them over the real tokens.",
                               (3,): "That is one loss per sequence: the mean is over all real tokens of the batch."})
    with torch.no_grad():
        logits = model(src, tgt[:, :-1], src_mask)
        expected = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)
    expect_close(loss.detach(), expected, what=LOSS_NAME, mistakes=_loss_mistakes(model, src, src_mask, tgt, pad),
                 otherwise=_LOSS_HINT, case=f"3 targets of lengths 7, 4, 5 padded with {pad}")
    return loss


def loss_matches_oracle(teacher_forcing_loss: Callable, device: torch.device | str = "cpu") -> None:
    """Targets of different lengths: the mean cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1], padding ignored."""
    __tracebackhide__ = True
    _loss_check(teacher_forcing_loss, device, pad=0, seed=2100)


def loss_matches_oracle_hidden(teacher_forcing_loss: Callable, device: torch.device | str = "cpu") -> None:
    """Another batch, a padding id other than 0, and the loss must be differentiable."""
    __tracebackhide__ = True
    _loss_check(teacher_forcing_loss, device, pad=0, seed=2200)
    loss = _loss_check(teacher_forcing_loss, device, pad=4, seed=2300)
    if not loss.requires_grad:
        fail(f"{LOSS_NAME} returns a loss cut off from autograd, so loss.backward() cannot train the model: keep it "
             "a tensor (no .item(), .detach() or torch.no_grad()).")


# ----------------------------------------------------------------------------------------------- greedy decoding

BOS_ID, EOS_ID, PAD_ID = 1, 2, 0
_SCRIPT_VOCAB = 9
_AFTER_EOS = 8  # what the scripted model says once a sequence is over: never <eos>, never <pad>


class ScriptedModel(nn.Module):
    """A stand-in for a trained Seq2SeqTransformer whose greedy output is known exactly.

    Reading <bos> first, it writes one token per real source token, each depending on the source token and on
    the previous target token (so its own predictions must be fed back), then <eos>; after that it keeps
    writing token 8. Without <bos> first it never stops. Logits are exact, so every device agrees.
    """

    def __init__(self):
        super().__init__()
        self.calls = 0

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.stack([src.float(), src_mask.float()], dim=-1)  # (b, s, 2)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        self.calls += 1
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


def _step_by_step(model: nn.Module, src, src_mask, max_len: int, bos: int, eos: int) -> torch.Tensor:
    """The oracle: run the whole model on the prefix, append the argmax of the last position, stop at eos."""
    b = src.shape[0]
    tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)
    finished = torch.zeros(b, dtype=torch.bool, device=src.device)
    rows = []
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1)  # (b,)
            nxt = torch.where(finished, torch.full_like(nxt, PAD_ID), nxt)
            rows.append(nxt)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
            finished = finished | (nxt == eos)
            if bool(finished.all()):
                break
    return torch.stack(rows, dim=1)  # (b, n)


def _decode_mistakes(model, src, src_mask, max_len, expected, width) -> dict[str, torch.Tensor]:
    """What typical wrong decoders return, cut or padded to the student's width."""
    b = src.shape[0]
    out: dict[str, torch.Tensor] = {}
    never_stops = _no_padding_after_eos(model, src, src_mask, max_len)
    out["decoding never stops at <eos>: the tokens after a sequence's <eos> must be <pad> (0) — keep a `finished` "
        "flag per sequence and write <pad> once it is set."] = never_stops
    with_bos = torch.cat([torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device), expected], dim=1)
    out["the output starts with <bos>: return only the generated tokens (drop column 0)."] = with_bos
    eos_padded = torch.where(_fit(expected, width) == PAD_ID, torch.full((), EOS_ID, device=src.device),
                             _fit(expected, width))
    out["after <eos> the sequence is filled with <eos>; fill it with <pad> (0) instead."] = eos_padded
    out["the decoder does not start from <bos>: the first input of every sequence is the <bos> token."] = \
        _step_by_step(model, src, src_mask, max_len, PAD_ID, EOS_ID)
    return {k: _fit(v, width) for k, v in out.items()}


def _no_padding_after_eos(model, src, src_mask, max_len):
    b = src.shape[0]
    tokens = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src.device)
    with torch.no_grad():
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1)
            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)
    return tokens[:, 1:]


def _fit(tokens: torch.Tensor, width: int) -> torch.Tensor:
    if tokens.shape[1] >= width:
        return tokens[:, :width]
    fill = torch.full((tokens.shape[0], width - tokens.shape[1]), PAD_ID, dtype=tokens.dtype, device=tokens.device)
    return torch.cat([tokens, fill], dim=1)


_DECODE_HINT = ("Start every sequence with <bos>; at each step run the model on what you have, take the argmax of "
                "the LAST position, append it; once a sequence has written <eos>, append <pad> (0) to it; stop when "
                "all sequences are finished or after max_len steps. Return the tokens without the <bos>.")


def _decode_check(greedy_decode: Callable, model: nn.Module, src, lengths, max_len: int, case: str) -> None:
    __tracebackhide__ = True
    src_mask = _padding(lengths, src.shape[1])
    expected = _step_by_step(model, src, src_mask, max_len, BOS_ID, EOS_ID)  # (b, n)
    out = run(greedy_decode, model, src.clone(), src_mask.clone(), max_len, BOS_ID, EOS_ID, what=DECODE_NAME,
              hint=_DECODE_HINT)
    if type(out) is not _Tensor:
        fail(f"{DECODE_NAME} should return a torch.Tensor of token ids, but returned {type(out).__name__}.")
    if out.dtype != torch.long:
        fail(f"{DECODE_NAME} returned dtype {out.dtype}; token ids are torch.long (argmax gives them).")
    if out.device.type != src.device.type:
        fail(f"{DECODE_NAME} returned ids on {out.device}, but the source was on {src.device}: create new tensors on "
             "src.device.")
    b, n = expected.shape
    if out.dim() != 2 or out.shape[0] != b:
        fail(f"{DECODE_NAME} returned shape {tuple(out.shape)}; expected (b, n) = ({b}, n) with n <= max_len.")
    width = out.shape[1]
    mistakes = _decode_mistakes(model, src, src_mask, max_len, expected, width)
    if width > max_len:
        if torch.equal(out, mistakes["the output starts with <bos>: return only the generated tokens (drop column 0)."]):
            fail(f"{DECODE_NAME} is not what was asked: the output starts with <bos>: return only the generated "
                 "tokens (drop column 0).", _Rows(expected), _Rows(out), case)
        fail(f"{DECODE_NAME} returned {width} tokens per sequence, more than max_len={max_len}. Generate at most "
             "max_len tokens, and do not return the <bos>.", _Rows(expected), _Rows(out), case)
    if width < n:
        fail(f"{DECODE_NAME} stopped after {width} tokens, but a sequence had not written <eos> yet (it needs {n}). "
             "Stop only when every sequence is finished, or after max_len steps.", _Rows(expected), _Rows(out), case)
    target = _fit(expected, width)
    if torch.equal(out, target):
        return
    for explanation, candidate in mistakes.items():
        if torch.equal(out, candidate):
            fail(f"{DECODE_NAME} is not what was asked: {explanation}", _Rows(target), _Rows(out), case)
    fail(f"{DECODE_NAME} does not agree with the step-by-step argmax of the model. {_DECODE_HINT}", _Rows(target),
         _Rows(out), case)


def greedy_decode_scripted_model(greedy_decode: Callable, device: torch.device | str = "cpu") -> None:
    """A stand-in model whose greedy output is known: each sequence stops at its <eos>, padded with 0 after it."""
    __tracebackhide__ = True
    model = ScriptedModel().to(device)
    src = torch.tensor([[3, 4, 5, 0, 0], [6, 0, 0, 0, 0], [3, 3, 7, 5, 4]], device=device)
    lengths = torch.tensor([3, 1, 5], device=device)
    _decode_check(greedy_decode, model, src, lengths, max_len=9,
                  case="a stand-in model; the three sequences end after 3, 1 and 5 tokens")


def greedy_decode_matches_step_by_step(greedy_decode: Callable, device: torch.device | str = "cpu") -> None:
    """A random course Seq2SeqTransformer against the step-by-step argmax; and max_len cuts long outputs."""
    __tracebackhide__ = True
    from course.seq2seq import Seq2SeqTransformer as Reference

    model = ScriptedModel().to(device)
    src = torch.tensor([[3, 4, 5, 6, 7, 3], [6, 0, 0, 0, 0, 0]], device=device)
    _decode_check(greedy_decode, model, src, torch.tensor([6, 1], device=device), max_len=4,
                  case="a stand-in model, max_len=4 shorter than the first translation")
    torch.manual_seed(2400)
    reference = Reference(12, 8, 16, 2, 2, 24).to(device).eval()
    with torch.no_grad():
        reference.to_logits.bias[EOS_ID] += 1.5  # so that some sequences end early and some do not
    g = torch.Generator().manual_seed(2410)
    src = torch.randint(3, 12, (4, 7), generator=g).to(device)
    _decode_check(greedy_decode, reference, src, torch.tensor([7, 3, 5, 1], device=device), max_len=10,
                  case="a course Seq2SeqTransformer with random weights")
