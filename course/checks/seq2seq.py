"""Probes for assignment 07: causal_mask, padding_mask, DecoderBlock, Seq2SeqTransformer, teacher_forcing_loss
and greedy_decode.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/seq2seq.py, hidden under grading) decides with PyTorch's own nn.TransformerDecoderLayer and
nn.TransformerEncoderLayer carrying the check's weights, F.cross_entropy, and a step-by-step argmax over the
stand-in models defined here (which are no answers: they only drive the student's loss and decoder). Under grading
every random input and weight comes from the grader's secret seed, and the cases worked by hand (and the masks,
whose answers depend only on sizes) add a secret random case (see course/checks/seeds.py).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules, weights
from course.checks.check import Check, with_prerequisites
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading
from course.multi_head import MultiHeadAttention
from course.positional_encoding import PositionalEncoding
from course.transformer_block import FeedForward, TransformerBlock

BOS_ID, EOS_ID, PAD_ID = 1, 2, 0


# ---------------------------------------------------------------- masks

CAUSAL_LENGTHS = (3, 7, 1)
PADDING_BY_HAND = ((3, 1, 4), 5)
PADDING_CASES = (((2, 7, 5, 1), 7), ((4, 4), 9), ((6,), 6), ((1, 3, 2, 5, 4), 5))
#: the seeds of the secret cases the mask checks add under grading
SECRET_CAUSAL_BY_HAND, SECRET_CAUSAL_ORACLE = 3000, 3010
SECRET_PADDING_BY_HAND, SECRET_PADDING_ORACLE = 3020, 3030


def secret_causal_length(seed: int) -> int:
    """Under grading, the secret length a causal-mask check adds: 8 to 20, longer than every fixed case."""
    return int(torch.randint(8, 21, (), generator=generator(seed)))


def secret_padding_case(seed: int) -> tuple[tuple[int, ...], int]:
    """Under grading, the secret (lengths, t) a padding-mask check adds: 2 to 5 sequences, t from 3 to 9, each
    length from 1 to t, at least one of them shorter than t."""
    g = generator(seed)
    b = int(torch.randint(2, 6, (), generator=g))
    t = int(torch.randint(3, 10, (), generator=g))
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[int(torch.randint(0, b, (), generator=g))] = int(torch.randint(1, t, (), generator=g))
    return tuple(int(n) for n in lengths), t


def _probe_causal_by_hand(causal_mask, rec: Recorder) -> None:
    rec.call("mask", causal_mask, 4)
    if grading():
        rec.call("mask_secret", causal_mask, secret_causal_length(SECRET_CAUSAL_BY_HAND))


causal_mask_by_hand = Check("causal_mask_by_hand", _probe_causal_by_hand)


def _probe_causal_oracle(causal_mask, rec: Recorder) -> None:
    for t in CAUSAL_LENGTHS:
        rec.call(f"mask{t}", causal_mask, t, device=rec.device)
    rec.call("mask_default", causal_mask, 2)
    if grading():
        rec.call("mask_secret", causal_mask, secret_causal_length(SECRET_CAUSAL_ORACLE), device=rec.device)


causal_mask_oracle = Check("causal_mask_oracle", _probe_causal_oracle)


def _probe_padding_by_hand(padding_mask, rec: Recorder) -> None:
    lengths, t = PADDING_BY_HAND
    rec.call("mask", padding_mask, torch.tensor(lengths), t)
    if grading():
        lengths, t = secret_padding_case(SECRET_PADDING_BY_HAND)
        rec.call("mask_secret", padding_mask, torch.tensor(lengths), t)


padding_mask_by_hand = Check("padding_mask_by_hand", _probe_padding_by_hand)


def _probe_padding_oracle(padding_mask, rec: Recorder) -> None:
    for i, (lengths, t) in enumerate(PADDING_CASES):
        rec.call(f"mask{i}", padding_mask, torch.tensor(lengths, device=rec.device), t)
    if grading():
        lengths, t = secret_padding_case(SECRET_PADDING_ORACLE)
        rec.call("mask_secret", padding_mask, torch.tensor(lengths, device=rec.device), t)


padding_mask_oracle = Check("padding_mask_oracle", _probe_padding_oracle)


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


# ---------------------------------------------------------------- DecoderBlock

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


def _run_block(rec: Recorder, key: str, block: nn.Module, x, memory, lengths: torch.Tensor | None = None,
               upstream: torch.Tensor | None = None) -> None:
    """Record block(x, memory), with a causal self-mask (t, t) and the source's padding mask (b, 1, s) when lengths
    are given (True where attention is allowed); with upstream, in training mode, and the gradients of
    sum(output · upstream) for x, memory and every parameter. (The masks are made here, inline, and never by a
    function the student's code could call: making them is exercise 1 and 2's answer.)"""
    kwargs = {}
    if lengths is not None:
        t, s = x.shape[1], memory.shape[1]
        kwargs = {"self_mask": torch.ones(t, t, dtype=torch.bool).tril().to(rec.device),
                  "memory_mask": (torch.arange(s) < lengths.unsqueeze(1)).unsqueeze(1).to(rec.device)}
    if upstream is None:
        with torch.no_grad():
            rec.call(key, block, x.to(rec.device), memory.to(rec.device), **kwargs)
        return
    block.train()
    x, memory = x.to(rec.device).requires_grad_(True), memory.to(rec.device).requires_grad_(True)
    modules.record_backward(rec, key, block, x, memory, **kwargs, loss=lambda y: (y * upstream.to(rec.device)).sum(),
                            inputs={"x": x, "memory": memory})


def _structure_case(k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, memory, _ = _block_inputs(2, 3, 4, k, 1000 + k)
    return x, memory, torch.tensor([4, 2])


def _probe_block_structure(DecoderBlock, rec: Recorder) -> None:
    for i, (k, heads, ff_mult) in enumerate(BLOCK_STRUCTURES):
        block = _make_block(DecoderBlock, rec, f"block{i}", k, heads, ff_mult, 1000 + i)
        if block is None:
            return
        x, memory, lengths = _structure_case(k)
        _run_block(rec, f"y{i}", block, x, memory, lengths)


decoder_block_structure = Check("decoder_block_structure", _probe_block_structure)


_CAUSALITY_BLOCK = (2, 5, 7, 8, 2)  # b, t, s, k, heads


def _causality_inputs():
    b, t, s, k, _ = _CAUSALITY_BLOCK
    x, memory, lengths = _block_inputs(b, t, s, k, 1110)
    changed = x.clone()
    changed[:, 3:] = randn(b, t - 3, k, seed=1120)
    return x, changed, memory, lengths


def _probe_block_causality(DecoderBlock, rec: Recorder) -> None:
    _b, _t, _s, k, heads = _CAUSALITY_BLOCK
    block = _make_block(DecoderBlock, rec, "block", k, heads, 4, 1100)
    if block is None:
        return
    x, changed, memory, lengths = _causality_inputs()
    _run_block(rec, "y", block, x, memory, lengths)
    _run_block(rec, "y_changed", block, changed, memory, lengths)


decoder_block_causality = Check("decoder_block_causality", _probe_block_causality)


def _probe_block_oracle(DecoderBlock, rec: Recorder) -> None:
    for i, (b, t, s, k, heads, ff_mult) in enumerate(BLOCK_CASES):
        block = _make_block(DecoderBlock, rec, f"block{i}", k, heads, ff_mult, 1200 + 50 * i)
        if block is None:
            return
        x, memory, lengths = _block_inputs(b, t, s, k, 1230 + 10 * i)
        _run_block(rec, f"y{i}", block, x, memory, lengths)
    block = _make_block(DecoderBlock, rec, "block_unmasked", 8, 2, 4, 1400)
    if block is not None:
        x, memory, _ = _block_inputs(2, 3, 5, 8, 1410)
        _run_block(rec, "y_unmasked", block, x, memory)


decoder_block_oracle = Check("decoder_block_oracle", _probe_block_oracle)


def _small_block_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (2, 3, 4), memory (2, 5, 4), source lengths [5, 3] and the upstream gradient (2, 3, 4)."""
    x, memory, _ = _block_inputs(2, 3, 5, 4, 1460)
    return x, memory, torch.tensor([5, 3]), randn(2, 3, 4, seed=1470)


def _probe_block_small_case(DecoderBlock, rec: Recorder) -> None:
    block = _make_block(DecoderBlock, rec, "block", 4, 2, 4, 1450)
    if block is None:
        return
    x, memory, lengths, upstream = _small_block_case()
    _run_block(rec, "y", block, x, memory, lengths)
    _run_block(rec, "y_grad", block, x, memory, lengths, upstream)


decoder_block_small_case = Check("decoder_block_small_case", _probe_block_small_case)


_PADDING_BLOCK = (2, 4, 5, 8, 2)  # b, t, s, k, heads


def _padding_block_inputs():
    b, t, s, k, _ = _PADDING_BLOCK
    x, memory, _ = _block_inputs(b, t, s, k, 1510)
    longer = torch.cat([memory, randn(b, 3, k, seed=1520)], dim=1)  # (b, s + 3, k): more padding
    return x, memory, longer, torch.tensor([5, 3]), randn(b, t, k, seed=1530)


def _probe_block_padding(DecoderBlock, rec: Recorder) -> None:
    _b, _t, _s, k, heads = _PADDING_BLOCK
    block = _make_block(DecoderBlock, rec, "block", k, heads, 4, 1500)
    if block is None:
        return
    x, memory, longer, lengths, upstream = _padding_block_inputs()
    _run_block(rec, "y", block, x, memory, lengths)
    _run_block(rec, "y_longer", block, x, longer, lengths)
    _run_block(rec, "y_grad", block, x, memory, lengths, upstream)


decoder_block_padding_gradients = Check("decoder_block_padding_gradients", _probe_block_padding)


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
#: (b, s, t, src_vocab, tgt_vocab, k, heads, depth, max_len): a source with padding, two layers of each kind
SMALL_MODEL = ModelCase(2, 5, 4, 7, 6, 4, 2, 2, 8)


def _source_mask(src: torch.Tensor) -> torch.Tensor:
    """(b, s), True at the source's real tokens: every source here holds real tokens (ids >= 3), then <pad>."""
    return src != PAD_ID


def _model_inputs(case: ModelCase, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, s, t, src_vocab, tgt_vocab = case.b, case.s, case.t, case.src_vocab, case.tgt_vocab
    g = generator(seed)
    src = torch.randint(3, src_vocab, (b, s), generator=g)
    tgt = torch.randint(3, tgt_vocab, (b, t), generator=g)
    tgt[:, 0] = BOS_ID
    lengths = torch.tensor([s - (2 * i) % s for i in range(b)]).clamp(min=1)
    src = src.masked_fill(torch.arange(s) >= lengths.unsqueeze(1), PAD_ID)
    return src, tgt, lengths


def _make_model(Seq2SeqTransformer: Callable, rec: Recorder, key: str, case: ModelCase, seed: int) -> nn.Module | None:
    src_vocab, tgt_vocab, k, heads, depth, max_len = (case.src_vocab, case.tgt_vocab, case.k, case.heads,
                                                      case.depth, case.max_len)
    return _build(Seq2SeqTransformer, rec, key, (src_vocab, tgt_vocab, k, heads, depth, max_len), MODEL_PARTS, seed)


def _run_model(rec: Recorder, key: str, model: nn.Module, src, tgt, src_mask: torch.Tensor | None = None,
               grad: bool = False) -> Any:
    mask = (_source_mask(src) if src_mask is None else src_mask).to(rec.device)
    with torch.set_grad_enabled(grad):
        return rec.call(key, model, src.to(rec.device), tgt.to(rec.device), mask)


def _probe_model_structure(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 1600)
    if model is None:
        return
    src, tgt, _ = _model_inputs(case, 1610)
    with torch.no_grad():
        rec.call("memory", model.encode, src.to(rec.device), _source_mask(src).to(rec.device))
    _run_model(rec, "logits", model, src, tgt)


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
    src, tgt, _ = _model_inputs(case, 1710)
    _run_model(rec, "logits", model, src, tgt)
    for j, changed in zip(_CAUSAL_POSITIONS, _changed_targets(case, tgt), strict=True):
        _run_model(rec, f"logits_changed{j}", model, src, changed)


def _probe_model_oracle(Seq2SeqTransformer, rec: Recorder) -> None:
    for i, case in enumerate(MODEL_CASES):
        model = _make_model(Seq2SeqTransformer, rec, f"model{i}", case, 1800 + 100 * i)
        if model is None:
            return
        src, tgt, _ = _model_inputs(case, 1850 + i)
        _run_model(rec, f"logits{i}", model, src, tgt)
        mask = _source_mask(src).to(rec.device)
        with torch.no_grad():
            memory = rec.call(f"memory{i}", model.encode, src.to(rec.device), mask)
            if isinstance(memory, torch.Tensor):
                rec.call(f"decoded{i}", model.decode, tgt.to(rec.device), memory, mask)


def _padding_model_inputs(case: ModelCase):
    """The batch of the padding check, and the same sources with four more padded positions, every padded one
    holding an arbitrary real token (masked out): (src, longer, longer's mask, tgt, lengths)."""
    b, s, src_vocab = case.b, case.s, case.src_vocab
    src, tgt, lengths = _model_inputs(case, 1910)
    extra = torch.randint(3, src_vocab, (b, 4), generator=generator(1920))
    longer = torch.cat([src, extra], dim=1)  # (b, s + 4): garbage in the padded positions, masked out
    real = _source_mask(src)
    longer[:, :s] = longer[:, :s].masked_fill(~real, 5)
    return src, longer, torch.cat([real, torch.zeros(b, 4, dtype=torch.bool)], dim=1), tgt, lengths


def _probe_model_padding(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 1900)
    if model is None:
        return
    src, longer, longer_mask, tgt, _ = _padding_model_inputs(case)
    _run_model(rec, "logits", model, src, tgt)
    _run_model(rec, "logits_longer", model, longer, tgt, longer_mask)


def _probe_model_backward(rec: Recorder, key: str, model: nn.Module, case: ModelCase, seed: int,
                          upstream_seed: int) -> None:
    """Record the logits of the case's batch in training mode, and the gradients of sum(logits · upstream) for
    every parameter."""
    b, t, tgt_vocab = case.b, case.t, case.tgt_vocab
    src, tgt, _ = _model_inputs(case, seed)
    upstream = randn(b, t, tgt_vocab, seed=upstream_seed).to(rec.device)
    model.train()
    modules.record_backward(rec, key, model, src.to(rec.device), tgt.to(rec.device),
                            _source_mask(src).to(rec.device), loss=lambda y: (y * upstream).sum())


def _probe_model_gradients(Seq2SeqTransformer, rec: Recorder) -> None:
    case = MODEL_CASES[0]
    model = _make_model(Seq2SeqTransformer, rec, "model", case, 2000)
    if model is not None:
        _probe_model_backward(rec, "logits", model, case, 2010, 2020)


def _probe_model_small_case(Seq2SeqTransformer, rec: Recorder) -> None:
    model = _make_model(Seq2SeqTransformer, rec, "model", SMALL_MODEL, 2500)
    if model is not None:
        _probe_model_backward(rec, "logits", model, SMALL_MODEL, 2510, 2520)


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

def _loss_case(seed: int, pad: int) -> tuple[StandInTranslator, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A stand-in model and a batch with targets of different lengths."""
    model = StandInTranslator(10, 9, 8, 16, seed)
    g = generator(seed + 1)
    b, s, t = 3, 6, 7
    src = torch.randint(3, 10, (b, s), generator=g)
    lengths = torch.tensor([6, 4, 5])
    tgt = torch.randint(3, 9, (b, t), generator=g)
    tgt[:, 0] = BOS_ID
    tgt[tgt == pad] = 3  # real tokens never equal the padding id
    for i, n in enumerate((7, 4, 5)):
        tgt[i, n - 1] = EOS_ID
        tgt[i, n:] = pad
    src = src.masked_fill(torch.arange(s) >= lengths.unsqueeze(1), PAD_ID)
    return model, src, _source_mask(src), tgt


LOSS_CASES = ((2100, 0),)
LOSS_GRADIENT_CASE = (2300, 4)
LOSS_HIDDEN_CASES = ((2200, 0), (2400, 5))


#: under grading, every loss case (seed, pad) has a secret companion (seed + SECRET_LOSS_OFFSET, pad)
SECRET_LOSS_OFFSET = 50


def _call_loss(teacher_forcing_loss, rec: Recorder, key: str, seed: int, pad: int) -> None:
    model, src, src_mask, tgt = _loss_case(seed, pad)
    rec.call(key, teacher_forcing_loss, model.to(rec.device), src.to(rec.device), src_mask.to(rec.device),
             tgt.to(rec.device), pad)


def _probe_loss_case(teacher_forcing_loss, rec: Recorder, key: str, seed: int, pad: int) -> None:
    """Record the loss on the case (seed, pad) under key and, under grading, on its secret companion (key_secret)."""
    _call_loss(teacher_forcing_loss, rec, key, seed, pad)
    if grading():
        _call_loss(teacher_forcing_loss, rec, f"{key}_secret", seed + SECRET_LOSS_OFFSET, pad)


def _probe_loss(teacher_forcing_loss, rec: Recorder) -> None:
    for i, (seed, pad) in enumerate(LOSS_CASES):
        _probe_loss_case(teacher_forcing_loss, rec, f"loss{i}", seed, pad)


loss_oracle = Check("loss_oracle", _probe_loss)


def _probe_loss_gradients(teacher_forcing_loss, rec: Recorder) -> None:
    seed, pad = LOSS_GRADIENT_CASE
    model, src, src_mask, tgt = _loss_case(seed, pad)
    model = model.to(rec.device)
    if modules.record_backward(rec, "loss", teacher_forcing_loss, model, src.to(rec.device), src_mask.to(rec.device),
                               tgt.to(rec.device), pad, loss=lambda loss: loss):
        modules.record_gradients(rec, model)
    if grading():
        _call_loss(teacher_forcing_loss, rec, "loss_secret", seed + SECRET_LOSS_OFFSET, pad)


loss_gradients = Check("loss_gradients", _probe_loss_gradients)


def _probe_loss_hidden(teacher_forcing_loss, rec: Recorder) -> None:
    for i, (seed, pad) in enumerate(LOSS_HIDDEN_CASES):
        _probe_loss_case(teacher_forcing_loss, rec, f"loss{i}", seed, pad)


loss_hidden = Check("loss_hidden", _probe_loss_hidden)


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


def _probe_decode(greedy_decode, rec: Recorder, key: str, model: nn.Module, src: torch.Tensor, max_len: int) -> None:
    with torch.no_grad():
        rec.call(key, greedy_decode, model.to(rec.device), src.to(rec.device), _source_mask(src).to(rec.device),
                 max_len, BOS_ID, EOS_ID)


_SCRIPTED_SRC = ((3, 4, 5, 0, 0), (6, 0, 0, 0, 0), (3, 3, 7, 5, 4))
_SCRIPTED_LENGTHS = (3, 1, 5)
_SHORT_SRC = ((3, 4, 5, 6, 7, 3), (6, 0, 0, 0, 0, 0))
_SHORT_LENGTHS = (6, 1)
#: the random stand-in translator: (seed of its weights, eos bias, seed of the source, lengths)
_RANDOM_TRANSLATOR = (2401, 1.5, 2410, (7, 3, 5, 1))
#: the seeds of the secret sources the decoding checks add for the scripted model under grading
SECRET_SCRIPTED, SECRET_SHORT = 3040, 3050


def _random_translator() -> tuple[StandInTranslator, torch.Tensor, torch.Tensor]:
    seed, eos_bias, src_seed, lengths = _RANDOM_TRANSLATOR
    model = StandInTranslator(12, 8, 16, 24, seed, eos_bias).eval()
    src = torch.randint(3, 12, (len(lengths), 7), generator=generator(src_seed))
    lengths = torch.tensor(lengths)
    return model, src.masked_fill(torch.arange(7) >= lengths.unsqueeze(1), PAD_ID), lengths


def secret_scripted_source(seed: int, first: tuple[int, int], s: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Under grading, a secret source for the scripted model: b sequences of s random tokens (3 to 9), the first
    of a random length in [first[0], first[1]], the others from 1 to s, padded after; (src, lengths)."""
    g = generator(seed)
    lengths = torch.randint(1, s + 1, (b,), generator=g)
    lengths[0] = int(torch.randint(first[0], first[1] + 1, (), generator=g))
    src = torch.randint(3, 10, (b, s), generator=g)
    return src.masked_fill(torch.arange(s) >= lengths.unsqueeze(1), PAD_ID), lengths


#: (first sequence's lengths, s, b, max_len) of the secret cases: any lengths for the scripted check; for the
#: step-by-step check a first translation longer than max_len (cut), and the others of lengths 1 to 3
SECRET_SCRIPTED_CASE = ((1, 5), 5, 3, 9)
SECRET_SHORT_CASE = ((4, 6), 6, 2, 4)


def secret_short_source() -> tuple[torch.Tensor, torch.Tensor]:
    first, s, b, _ = SECRET_SHORT_CASE
    src, lengths = secret_scripted_source(SECRET_SHORT, first, s, b)
    short = lengths[1:].clamp(max=3)
    src[1:] = src[1:].masked_fill(torch.arange(s) >= short.unsqueeze(1), PAD_ID)
    lengths[1:] = short
    return src, lengths


def secret_scripted() -> tuple[torch.Tensor, torch.Tensor]:
    first, s, b, _ = SECRET_SCRIPTED_CASE
    return secret_scripted_source(SECRET_SCRIPTED, first, s, b)


def _probe_decode_scripted(greedy_decode, rec: Recorder) -> None:
    _probe_decode(greedy_decode, rec, "tokens", ScriptedModel(), torch.tensor(_SCRIPTED_SRC), 9)
    if grading():
        _probe_decode(greedy_decode, rec, "tokens_secret", ScriptedModel(), secret_scripted()[0],
                      SECRET_SCRIPTED_CASE[3])


greedy_decode_scripted = Check("greedy_decode_scripted", _probe_decode_scripted)


def _probe_decode_step_by_step(greedy_decode, rec: Recorder) -> None:
    _probe_decode(greedy_decode, rec, "short", ScriptedModel(), torch.tensor(_SHORT_SRC), 4)
    model, src, _ = _random_translator()
    _probe_decode(greedy_decode, rec, "random", model, src, 10)
    if grading():
        _probe_decode(greedy_decode, rec, "short_secret", ScriptedModel(), secret_short_source()[0],
                      SECRET_SHORT_CASE[3])


greedy_decode_step_by_step = Check("greedy_decode_step_by_step", _probe_decode_step_by_step)


# ---------------------------------------------------------------- the model's checks (they name their prerequisites)

_PREREQUISITES = (("causal_mask", 1, (causal_mask_by_hand,)),
                  ("DecoderBlock", 3, (decoder_block_structure, decoder_block_oracle)))


def _model_check(name: str, probe: Callable[[Any, Recorder], None]) -> Check:
    """A model check that also says when the cause may be an earlier exercise the model uses."""
    return with_prerequisites(name, probe, prerequisites=_PREREQUISITES, user="Seq2SeqTransformer",
                              namespace=lambda model: getattr(getattr(model, "decode", None), "__globals__", {}))


seq2seq_structure = _model_check("seq2seq_structure", _probe_model_structure)
seq2seq_causality = _model_check("seq2seq_causality", _probe_model_causality)
seq2seq_small_case = _model_check("seq2seq_small_case", _probe_model_small_case)
seq2seq_oracle = _model_check("seq2seq_oracle", _probe_model_oracle)
seq2seq_padding = _model_check("seq2seq_padding", _probe_model_padding)
seq2seq_gradients = _model_check("seq2seq_gradients", _probe_model_gradients)
