"""Probes for assignment 07 (masks, DecoderBlock, Seq2SeqTransformer, the loss, greedy decoding, the training loop's
parts): each runs the student's code on the cases declared here and records what it gives; the judges are in
course/judges/seq2seq.py. The stand-in models here are no answers: they only drive the student's loss and decoder.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import device, modules, weights
from course.checks.check import when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder, fact_key
from course.checks.kinds import (
    AfterPrerequisites,
    Built,
    Case,
    PropertyCheck,
    Runs,
    RunsCheck,
    builds_and_runs,
    builds_and_runs_backward,
    drawn,
    loss_case,
    losses,
    property_check,
)

BOS_ID, EOS_ID, PAD_ID = 1, 2, 0


# ---------------------------------------------------------------- masks

def secret_ints(seed: int, *ranges: tuple[int, int]) -> tuple[int, ...]:
    """Under grading, secret sizes: one integer of each range [low, high), drawn in order from seed."""
    g = generator(seed)
    return tuple(int(torch.randint(low, high, (), generator=g)) for low, high in ranges)


def secret_padding_case(seed: int) -> tuple[tuple[int, ...], int]:
    """Under grading, a padding check's secret (lengths, t): 2 to 5 lengths from 1 to t (3 to 9), one < t."""
    g = generator(seed)
    b = int(torch.randint(2, 6, (), generator=g))
    t = int(torch.randint(3, 10, (), generator=g))
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[int(torch.randint(0, b, (), generator=g))] = int(torch.randint(1, t, (), generator=g))
    return tuple(int(n) for n in lengths), t


@dataclass(frozen=True)
class SettingCase:
    """A call recorded under key with these sizes or settings, or a function drawing them (secret: only under
    grading); label: how a failure names it (default: its sizes); on_device: asked on the notebook's device."""

    key: str
    setting: tuple | Callable[[], tuple]
    secret: bool = False
    label: str = ""
    on_device: bool = False

    def settings(self) -> tuple:
        return self.setting() if callable(self.setting) else self.setting


def _probe_masks(cases: tuple[SettingCase, ...], mask_function: Callable, rec: Recorder) -> None:
    """causal_mask(t) for settings (t,), padding_mask(lengths, t) for (lengths, t); on the CPU unless on_device."""
    for case in drawn(cases):
        *lengths, t = case.settings()
        device = {"device": rec.device} if case.on_device else {}
        if lengths:
            rec.call(case.key, mask_function, torch.tensor(lengths[0], device=device.get("device", "cpu")), t)
        else:
            rec.call(case.key, mask_function, t, **device)


#: the calls run on each stand-in GPU (course/checks/device.py): is the mask made on the device of its input?
MASK_ON_GPU = "causal_mask(5, device=...)", "padding_mask(torch.tensor([3, 1, 5], device=...), 5)"
causal_mask_by_hand = property_check("causal_mask_by_hand", device.on_gpus(
    _probe_masks, "mask", lambda f, d: f(5, device=d)), (
    SettingCase(key="mask", setting=(4,), label="t=4, shown as 0/1"),
    SettingCase(key="mask_secret", setting=partial(secret_ints, 3000, (8, 21)), secret=True)))
causal_mask_oracle = property_check("causal_mask_oracle", _probe_masks, (
    *(SettingCase(key=f"mask{t}", setting=(t,), on_device=True) for t in (3, 7, 1)),
    SettingCase(key="mask_default", setting=(2,)),
    SettingCase(key="mask_secret", setting=partial(secret_ints, 3010, (8, 21)), secret=True, on_device=True)))
padding_mask_by_hand = property_check("padding_mask_by_hand", device.on_gpus(
    _probe_masks, "mask", lambda f, d: f(torch.tensor([3, 1, 5], device=d), 5)), (
    SettingCase(key="mask", setting=((3, 1, 4), 5), label="lengths=[3, 1, 4], t=5, shown as 0/1"),
    SettingCase(key="mask_secret", setting=partial(secret_padding_case, 3020), secret=True)))
padding_mask_oracle = property_check("padding_mask_oracle", _probe_masks, (
    *(SettingCase(key=f"mask{i}", setting=size, on_device=True)
      for i, size in enumerate((((2, 7, 5, 1), 7), ((4, 4), 9), ((6,), 6), ((1, 3, 2, 5, 4), 5)))),
    SettingCase(key="mask_secret", setting=partial(secret_padding_case, 3030), secret=True, on_device=True)))


# ---------------------------------------------------------------- modules: the probe's side

#: torch classes a part may be an instance of; a part of the course's (MultiHeadAttention, FeedForward,
#: TransformerBlock, PositionalEncoding: each a direct nn.Module) is known by its class's name
_KINDS = (("LayerNorm", nn.LayerNorm), ("Embedding", nn.Embedding), ("Linear", nn.Linear),
          ("ModuleList", nn.ModuleList))
BLOCK_PARTS = ("self_attention", "cross_attention", "norm1", "norm2", "norm3", "ff")


# ---------------------------------------------------------------- DecoderBlock

def _decoder_inputs(b: int, t: int, s: int, k: int, seed: int, *, masked: bool = True, change: int | None = None,
                    pad_more: int = 0) -> dict[str, torch.Tensor]:
    """x (b, t, k), memory (b, s, k) and, if masked, a causal self_mask (t, t) and a padding memory_mask (b, 1, s);
    change: x redrawn from there on; pad_more: that many more memory positions, masked out."""
    x = randn(b, t, k, seed=seed)
    memory = randn(b, s, k, seed=seed + 1)
    if change is not None:
        x[:, change:] = randn(b, t - change, k, seed=seed + 10)
    if pad_more:
        memory = torch.cat([memory, randn(b, pad_more, k, seed=seed + 10)], dim=1)  # (b, s + pad_more, k)
    if not masked:
        return {"x": x, "memory": memory}
    lengths = torch.tensor([s - (i * 2) % s for i in range(b)]).clamp(min=1)  # (b,)
    memory_mask = (torch.arange(s + pad_more) < lengths.unsqueeze(1)).unsqueeze(1)  # (b, 1, s + pad_more)
    return {"x": x, "memory": memory, "self_mask": torch.ones(t, t, dtype=torch.bool).tril(),
            "memory_mask": memory_mask}


def decoder_case(key: str, size: tuple[int, int, int, int], seed: int, *, upstream: int | None = None,
                 **more: Any) -> Case:
    """A case of a DecoderBlock check of size (b, t, s, k); upstream: the seed of an upstream gradient (b, t, k)."""
    b, t, s, k = size
    inputs = partial(_decoder_inputs, *size, seed, **more)
    masks = inputs().get("memory_mask")
    label = (f"x ({b}, {t}, {k}), memory ({b}, {s + more.get('pad_more', 0)}, {k}), "
             + ("no masks" if masks is None else f"source lengths {masks[:, 0].sum(dim=1).tolist()}"))
    return Case(key, inputs, label, upstream=None if upstream is None else partial(randn, b, t, k, seed=upstream))


def _decoder_check(name: str, runs: tuple[Runs, ...], declare: Callable[..., RunsCheck] = builds_and_runs,
                   train: bool = False) -> RunsCheck:
    """DecoderBlock(k, heads, ff_mult, dropout=0.0) built for each Runs, in training mode only with train, declared
    with declare (builds_and_runs_backward for a check with gradients); a check whose Built args are (k, heads,
    ff_mult, dropout) passes each its own dropout, fourth."""
    dropout = {} if any(len(run.module.args) > 3 for run in runs) else {"dropout": 0.0}
    return declare(name, runs, **dropout, train=train,
                   facts=lambda m: {"parts": modules.part_facts(m, BLOCK_PARTS, _KINDS)})


decoder_block_structure = _decoder_check("decoder_block_structure", tuple(
    Runs(Built(key=f"block{i}", args=(k, heads, ff_mult), seed=1000 + i),
         (decoder_case(f"y{i}", (2, 3, 4, k), 1000 + k),))
    for i, (k, heads, ff_mult) in enumerate(((8, 2, 4), (12, 3, 2)))))
decoder_block_causality = _decoder_check("decoder_block_causality",
                                         (Runs(Built(key="block", args=(8, 2, 4), seed=1100), (
    decoder_case("y", (2, 5, 7, 8), 1110), decoder_case("y_changed", (2, 5, 7, 8), 1110, change=3))),))
# (b, t, s, k, heads, ff_mult): t != s, batch > 1, head size != k, odd lengths; then without masks
BLOCK_CASES = ((3, 5, 7, 8, 2, 4), (2, 1, 4, 12, 3, 2), (1, 6, 3, 6, 1, 4), (2, 4, 9, 16, 4, 1))
#: dropout=1.0 in training mode: each sub-layer's output dropped before it is added, the block gives
#: norm3(norm2(norm1(x))), which shows where its dropout sits
DROPOUT_RUNS = Runs(Built(key="block_dropout", args=(8, 2, 4, 1.0), seed=1420),
                    (decoder_case("y_dropout", (2, 4, 5, 8), 1430),), modules.training_mode)
decoder_block_oracle = _decoder_check("decoder_block_oracle", (
    *(Runs(Built(key=f"block{i}", args=(k, heads, ff_mult, 0.0), seed=1200 + 50 * i),
           (decoder_case(f"y{i}", (b, t, s, k), 1230 + 10 * i),)) for i, (b, t, s, k, heads, ff_mult) in
      enumerate(BLOCK_CASES)),
    Runs(Built(key="block_unmasked", args=(8, 2, 4, 0.0), seed=1400),
         (decoder_case("y_unmasked", (2, 3, 5, 8), 1410, masked=False),)),
    DROPOUT_RUNS))
decoder_block_small_case = _decoder_check("decoder_block_small_case",
                                          (Runs(Built(key="block", args=(4, 2, 4), seed=1450), (
    decoder_case("y", (2, 3, 5, 4), 1460), decoder_case("y_grad", (2, 3, 5, 4), 1460, upstream=1470))),),
    builds_and_runs_backward, train=True)
decoder_block_padding_gradients = _decoder_check("decoder_block_padding_gradients", (
    Runs(Built(key="block", args=(8, 2, 4), seed=1500), (
        decoder_case("y", (2, 4, 5, 8), 1510), decoder_case("y_longer", (2, 4, 5, 8), 1510, pad_more=3),
        decoder_case("y_grad", (2, 4, 5, 8), 1510, upstream=1530))),), builds_and_runs_backward, train=True)


# ---------------------------------------------------------------- the model

@dataclass(frozen=True)
class ModelCase:
    """A case for the model: Seq2SeqTransformer(src_vocab, tgt_vocab, k, heads, depth, max_len) on b sources of s
    tokens and b targets of t, shape (b, s, t)."""

    shape: tuple[int, int, int]
    src_vocab: int
    tgt_vocab: int
    k: int
    heads: int
    depth: int
    max_len: int

    b = property(lambda self: self.shape[0])
    s = property(lambda self: self.shape[1])
    t = property(lambda self: self.shape[2])


#: shape (b, s, t)
MODEL_CASES = (ModelCase(shape=(3, 7, 5), src_vocab=11, tgt_vocab=9, k=16, heads=2, depth=2, max_len=20),
               ModelCase(shape=(2, 4, 6), src_vocab=7, tgt_vocab=13, k=12, heads=3, depth=1, max_len=12),
               ModelCase(shape=(1, 5, 1), src_vocab=11, tgt_vocab=9, k=8, heads=4, depth=2, max_len=10))
#: a source with padding, two layers of each kind
SMALL_MODEL = ModelCase(shape=(2, 5, 4), src_vocab=7, tgt_vocab=6, k=4, heads=2, depth=2, max_len=8)
MODEL_PARTS = ("src_embedding", "tgt_embedding", "positions", "encoder", "decoder", "to_logits")
_DECODER_ATTRIBUTES = ("self_attention", "cross_attention", "ff", "norm3")


def _translator_facts(model: nn.Module) -> dict:
    """modules.part_facts of its parts, a ModuleList's items' kinds (DecoderBlock: by attributes), distinct blocks."""
    facts = modules.part_facts(model, MODEL_PARTS, _KINDS)
    for name in MODEL_PARTS:
        part = getattr(model, name, None)
        if isinstance(part, nn.ModuleList):
            facts[name]["items"] = ["DecoderBlock" if all(hasattr(item, n) for n in _DECODER_ATTRIBUTES)
                                    else modules.kind(item, _KINDS) for item in part]
    if blocks := [*getattr(model, "encoder", ()), *getattr(model, "decoder", ())]:
        facts["distinct_blocks"] = len({id(b) for b in blocks})
    return {"parts": facts}


def _source_mask(src: torch.Tensor) -> torch.Tensor:
    """(b, s), True at the source's real tokens: every source here holds real tokens (ids >= 3), then <pad>."""
    return src != PAD_ID


def _model_inputs(c: ModelCase, batch: int, change: int = -1, more: int = 0) -> dict[str, torch.Tensor]:
    """src (b, s) padded after lengths s, s - 2, ... (at least 1), tgt (b, t) from <bos>, src_mask (b, s), drawn from
    seed batch; change (unless -1): another real target token there; more: that many more masked source positions,
    every padded one holding an arbitrary real token."""
    g = generator(batch)
    src = torch.randint(3, c.src_vocab, (c.b, c.s), generator=g)
    tgt = torch.randint(3, c.tgt_vocab, (c.b, c.t), generator=g)
    tgt[:, 0] = BOS_ID
    lengths = torch.tensor([c.s - (2 * i) % c.s for i in range(c.b)]).clamp(min=1)  # (b,)
    src = src.masked_fill(torch.arange(c.s) >= lengths.unsqueeze(1), PAD_ID)
    mask = _source_mask(src)
    if change >= 0:
        tgt[:, change] = 3 + (tgt[:, change] - 2) % (c.tgt_vocab - 3)
    if more:
        extra = torch.randint(3, c.src_vocab, (c.b, more), generator=generator(batch + 10))
        src = torch.cat([src.masked_fill(~mask, 5), extra], dim=1)  # (b, s + more)
        mask = torch.cat([mask, torch.zeros(c.b, more, dtype=torch.bool)], dim=1)  # (b, s + more)
    return {"src": src, "tgt": tgt, "src_mask": mask}


def model_runs(seed: int, *calls: str, key: str = "model", c: ModelCase = MODEL_CASES[0], batch: int | None = None,
               upstream: bool = False, dropout: float | None = None) -> Runs:
    """Seq2SeqTransformer of c's sizes (under key, weights from seed) called on the batch drawn from seed batch
    (default seed + 10), once per key of calls: "memory…" encode, "decoded…" decode on that memory, "…changed<j>"
    another target token at j, "…longer" four more padded source positions, else forward; upstream: the logits'
    gradient drawn from seed + 20; dropout: the model built with it (its Built args' seventh) and run in training
    mode."""
    batch = seed + 10 if batch is None else batch
    grad = partial(randn, c.b, c.t, c.tgt_vocab, seed=seed + 20) if upstream else None
    lengths = [max(1, c.s - (2 * i) % c.s) for i in range(c.b)]
    label = f"src ({c.b}, {c.s}) with lengths {lengths}, tgt ({c.b}, {c.t}), k={c.k}, heads={c.heads}, depth={c.depth}"
    cases = tuple(Case(call, partial(_model_inputs, c, batch, int(call.partition("changed")[2] or -1),
                                     4 * call.endswith("longer")), label, upstream=grad) for call in calls)
    dropped = () if dropout is None else (dropout,)
    return Runs(Built(key=key, args=(c.src_vocab, c.tgt_vocab, c.k, c.heads, c.depth, c.max_len, *dropped), seed=seed),
                cases)


def _probe_translator(runs: tuple[Runs, ...], Seq2SeqTransformer: Callable, rec: Recorder) -> None:
    """Each run's model (built with the check's weights) on its cases (model_runs), without autograd; a case with an
    upstream in training mode, recording the gradients of sum(logits · upstream)."""
    for run in runs:
        built = run.module
        dropout = (*built.args[6:], 0.0)[0]
        model = modules.build(rec, built.key, Seq2SeqTransformer, *built.args[:6], dropout=dropout, seed=built.seed,
                              train=dropout > 0, facts=_translator_facts)
        if model is None:
            return
        memory = None
        for case in run.cases:
            src, tgt, mask = (v.to(rec.device) for v in case.inputs().values())
            if case.upstream is not None:
                model.train()
                upstream = case.upstream().to(rec.device)
                modules.record_backward(rec, case.key, model, src, tgt, mask, loss=lambda y, u=upstream: (y * u).sum())
                continue
            with torch.no_grad():
                if case.key.startswith("memory"):
                    memory = rec.call(case.key, model.encode, src, mask)
                elif not case.key.startswith("decoded"):
                    rec.call(case.key, model, src, tgt, mask)
                elif isinstance(memory, torch.Tensor):
                    rec.call(case.key, model.decode, tgt, memory, mask)


# ---------------------------------------------------------------- stand-in translators for the loss and decoding

class StandInTranslator(nn.Module):
    """A small translator with Seq2SeqTransformer's interface whose logits a judge recomputes: the mean of the real
    source embeddings and a causal running mean of the target embeddings plus learned positions; weights from seed."""

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

def _loss_batch(seed: int, pad: int) -> dict[str, Any]:
    """The arguments of teacher_forcing_loss: a stand-in model and a batch with targets of different lengths."""
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
    return {"model": model, "src": src, "src_mask": _source_mask(src), "tgt": tgt, "pad": pad}


def _loss_cases(key: str, seed: int, pad: int, *, gradients: bool = False) -> tuple[Case, Case]:
    """The batch (seed, pad) under key and, under grading, its secret companion (seed + 50, pad) under key_secret."""
    label = f"3 targets of lengths 7, 4, 5 padded with {pad}"
    return (loss_case(key, partial(_loss_batch, seed, pad), label, gradients=gradients),
            loss_case(f"{key}_secret", partial(_loss_batch, seed + 50, pad), label, secret=True))


loss_oracle = losses("loss_oracle", _loss_cases("loss0", 2100, 0))
loss_gradients = losses("loss_gradients", _loss_cases("loss", 2300, 4, gradients=True))
loss_hidden = losses("loss_hidden", (*_loss_cases("loss0", 2200, 0), *_loss_cases("loss1", 2400, 5)))


# ---------------------------------------------------------------- greedy decoding

_SCRIPT_VOCAB = 11
_AFTER_EOS = 8  # what the scripted model says once a sequence is over: never <eos>, never <pad>
#: <bos> and <eos> other than the notebook's, so that its BOS and EOS used in place of the arguments show
OTHER_IDS = (9, 10)


class ScriptedModel(nn.Module):
    """A stand-in for a trained Seq2SeqTransformer whose greedy output is known exactly: after <bos>, one token per
    real source token, each depending on it and on the previous target token (its predictions must be fed back),
    then <eos>, then token 8 forever; without <bos> first it never stops. Exact logits: every device agrees.
    bos, eos: its start and end ids; autograd_on: whether any call ran with autograd on (decoding belongs inside
    torch.no_grad())."""

    def __init__(self, bos: int = BOS_ID, eos: int = EOS_ID) -> None:
        super().__init__()
        self.bos, self.eos, self.autograd_on = bos, eos, False

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return torch.stack([src.float(), src_mask.float()], dim=-1)  # (b, s, 2)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        b, t = tgt.shape
        self.autograd_on |= torch.is_grad_enabled()
        src = memory[..., 0].long()  # (b, s)
        lengths = memory[..., 1].sum(dim=1).long()  # (b,)
        position = torch.arange(t, device=tgt.device).expand(b, t)  # (b, t)
        src_token = src.gather(1, position.clamp(max=src.shape[1] - 1))  # (b, t)
        token = 3 + (src_token + tgt) % 5  # (b, t) values 3..7
        token = token.masked_fill(position == lengths.unsqueeze(1), self.eos)
        token = token.masked_fill((position > lengths.unsqueeze(1)) | (tgt[:, :1] != self.bos), _AFTER_EOS)
        return 10.0 * F.one_hot(token, _SCRIPT_VOCAB).float()  # (b, t, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


def _scripted(src: tuple[tuple[int, ...], ...], lengths: tuple[int, ...],
              ids: tuple[int, int] = (BOS_ID, EOS_ID)) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The scripted model (its <bos> and <eos> ids), a source (b, s) and its lengths (b,)."""
    return ScriptedModel(*ids), torch.tensor(src), torch.tensor(lengths)


def ids_of(model: nn.Module) -> tuple[int, int]:
    """The <bos> and <eos> a case passes: the scripted model's own, the notebook's for the random translator."""
    return getattr(model, "bos", BOS_ID), getattr(model, "eos", EOS_ID)


def secret_scripted_source(seed: int, first: tuple[int, int], s: int, b: int,
                           at_most: int | None = None) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Under grading, (the scripted model, src (b, s) of tokens 3 to 9, lengths): the first length in [first[0],
    first[1]], the others from 1 to s (at most at_most), padded after."""
    g = generator(seed)
    lengths = torch.randint(1, s + 1, (b,), generator=g)
    lengths[0] = int(torch.randint(first[0], first[1] + 1, (), generator=g))
    src = torch.randint(3, 10, (b, s), generator=g)
    if at_most is not None:
        lengths[1:] = lengths[1:].clamp(max=at_most)
    return ScriptedModel(), src.masked_fill(torch.arange(s) >= lengths.unsqueeze(1), PAD_ID), lengths


def _random_translator() -> tuple[StandInTranslator, torch.Tensor, torch.Tensor]:
    """The random stand-in translator (weights from seed 2401, <eos> bias 1.5) and a source of lengths 7, 3, 5, 1."""
    model = StandInTranslator(12, 8, 16, 24, 2401, 1.5).eval()
    src = torch.randint(3, 12, (4, 7), generator=generator(2410))
    lengths = torch.tensor((7, 3, 5, 1))
    return model, src.masked_fill(torch.arange(7) >= lengths.unsqueeze(1), PAD_ID), lengths


def _probe_decodes(cases: tuple[SettingCase, ...], greedy_decode: Callable, rec: Recorder,
                   autograd: bool = False) -> None:
    """greedy_decode(model, src, src_mask, max_len, bos, eos) for settings (source, max_len), source() giving
    (model, src (b, s), source lengths (b,)), bos and eos the model's (ids_of); the label is formatted with {lengths}
    and {max_len}. autograd: called with autograd on, as the notebook calls it, recording whether a scripted model
    ran under it (fact autograd_on); otherwise called inside torch.no_grad()."""
    for case in drawn(cases):
        source, max_len = case.settings()
        model, src, _ = source()
        with torch.set_grad_enabled(autograd):
            rec.call(case.key, greedy_decode, model.to(rec.device), src.to(rec.device),
                     _source_mask(src).to(rec.device), max_len, *ids_of(model))
        if autograd and isinstance(model, ScriptedModel):
            rec.fact(fact_key(case.key, "autograd_on"), model.autograd_on)


def _decode_on_gpu(greedy_decode: Callable, d: torch.device) -> Any:
    """greedy_decode on the scripted model, a source (2, 5) and its mask on d. Its loop stops on `finished.all()`,
    which the data-less stand-in cannot answer: a decode that makes its tokens there says "unknown" (not held against
    it), while start tokens or flags made on the CPU are refused by the first step, before that question."""
    model, src, _ = _scripted(((3, 4, 5, 0, 0), (6, 0, 0, 0, 0)), (3, 1))
    with torch.no_grad():
        return greedy_decode(model.to(d), src.to(d), _source_mask(src).to(d), 9, BOS_ID, EOS_ID)


DECODE_ON_GPU = "greedy_decode(model, src (2, 5), src_mask, 9, bos, eos), all on device"
#: called with autograd on, as the notebook calls it, so that decoding outside torch.no_grad() shows while working
greedy_decode_scripted = property_check("greedy_decode_scripted", device.on_gpus(
    partial(_probe_decodes, autograd=True), "tokens", _decode_on_gpu), (
    SettingCase(key="tokens",
                setting=(partial(_scripted, ((3, 4, 5, 0, 0), (6, 0, 0, 0, 0), (3, 3, 7, 5, 4)), (3, 1, 5)), 9),
                label="a stand-in model; the three sequences end after 3, 1 and 5 tokens"),
    SettingCase(key="tokens_secret", setting=(partial(secret_scripted_source, 3040, (1, 5), 5, 3), 9), secret=True,
                label="a stand-in model; source lengths {lengths}")))
#: a first translation longer than max_len (cut), with <bos> and <eos> ids other than the notebook's; under grading,
#: the others of lengths 1 to 3; all called with autograd on, as the notebook calls greedy_decode
greedy_decode_step_by_step = property_check("greedy_decode_step_by_step", partial(_probe_decodes, autograd=True), (
    SettingCase(key="short", setting=(partial(_scripted, ((3, 4, 5, 6, 7, 3), (6, 0, 0, 0, 0, 0)), (6, 1), OTHER_IDS),
                                      4),
                label=f"a stand-in model, max_len=4 shorter than the first translation, bos={OTHER_IDS[0]}, "
                      f"eos={OTHER_IDS[1]}"),
    SettingCase(key="random", setting=(_random_translator, 10), label="a stand-in translator with random weights"),
    SettingCase(key="short_secret", setting=(partial(secret_scripted_source, 3050, (4, 6), 6, 2, at_most=3), 4),
                secret=True, label="a stand-in model, source lengths {lengths}, max_len={max_len}")))


# ---------------------------------------------------------------- the model's checks (they name their prerequisites)

#: causal_mask's own test on several lengths, on the model's device (its hand-worked test also runs it on stand-in
#: GPUs, which the model's structure check does itself: the model's mask is made there)
_PREREQUISITES = (("causal_mask", 1, (causal_mask_oracle,)),
                  ("DecoderBlock", 3, (decoder_block_structure, decoder_block_oracle)))


def _model_check(name: str, *runs: Runs, probe: Callable = _probe_translator) -> PropertyCheck:
    """A model check (_probe_translator on model_runs) that also names an earlier exercise the model uses as a cause."""
    return AfterPrerequisites(name, probe, runs, prerequisites=_PREREQUISITES, user="Seq2SeqTransformer",
                              namespace=lambda model: getattr(getattr(model, "decode", None), "__globals__", {}))


def _translate_on_gpu(cls: Callable, d: torch.device) -> Any:
    """MODEL_CASES[0]'s model, one layer of each kind, moved to d, on a source (3, 7), its mask, a target (3, 5)."""
    c = replace(MODEL_CASES[0], depth=1)
    model = cls(c.src_vocab, c.tgt_vocab, c.k, c.heads, c.depth, c.max_len).to(d)
    src, tgt = torch.randint(3, c.src_vocab, (c.b, c.s), device=d), torch.randint(3, c.tgt_vocab, (c.b, c.t), device=d)
    return model(src, tgt, torch.ones(c.b, c.s, dtype=torch.bool, device=d))


#: the call run on each stand-in GPU (course/checks/device.py): are the masks inside forward made on the device?
TRANSLATE_ON_GPU = "Seq2SeqTransformer(11, 9, 16, 2, 1, 20).to(device)(src, tgt, src_mask on device)"
seq2seq_structure = _model_check("seq2seq_structure", model_runs(1600, "memory", "logits"),
                                 probe=device.on_gpus(_probe_translator, "model", _translate_on_gpu))
seq2seq_causality = _model_check("seq2seq_causality", model_runs(1700, "logits", "logits_changed4", "logits_changed2"))
seq2seq_small_case = _model_check("seq2seq_small_case", model_runs(2500, "logits", c=SMALL_MODEL, upstream=True))
seq2seq_oracle = _model_check("seq2seq_oracle", *(model_runs(1800 + 100 * i, f"logits{i}", f"memory{i}", f"decoded{i}",
                                                             key=f"model{i}", c=c, batch=1850 + i)
                                                  for i, c in enumerate(MODEL_CASES)),
                              # dropout=1.0 in training mode: every dropout zeroes what it is given, so that each part
                              # the model does not pass its dropout on to shows
                              model_runs(2100, "memory_dropped", "logits_dropped", key="model_dropout", dropout=1.0))
seq2seq_padding = _model_check("seq2seq_padding", model_runs(1900, "logits", "logits_longer"))
seq2seq_gradients = _model_check("seq2seq_gradients", model_runs(2000, "logits", upstream=True))


# ---------------------------------------------------------------- the training loop's parts

class StandInNetwork(nn.Module):
    """A stand-in, never run, whose parameters an optimizer is configured for: of every kind of dimension, one frozen
    (requires_grad=False: in no group); with blocks, also an nn.ModuleList of (Linear, LayerNorm) pairs."""

    def __init__(self, vocab: int, k: int, blocks: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # the student's random state is left alone
            self.embedding = nn.Embedding(vocab, k)
            self.linear = nn.Linear(k, k + 1)
            self.norm = nn.LayerNorm(k + 1)
            self.head = nn.Linear(k + 1, vocab, bias=False)
            self.frozen = nn.Parameter(torch.zeros(k, k), requires_grad=False)
            self.scale = nn.Parameter(torch.ones(()))
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(k, k), nn.LayerNorm(k)) for _ in range(blocks))


def secret_optimizer_setting(seed: int) -> tuple[tuple[int, int, int], float, float]:
    """Under grading, the secret sizes (vocab 4 to 12, k 2 to 7, 1 to 3 blocks), lr and weight decay of a case."""
    g = generator(seed)
    sizes = tuple(int(torch.randint(low, high, (), generator=g)) for low, high in ((4, 13), (2, 8), (1, 4)))
    lr = float(10 ** torch.empty(()).uniform_(-4, -2, generator=g))
    weight_decay = float(torch.empty(()).uniform_(0.01, 0.3, generator=g))
    return sizes, round(lr, 6), round(weight_decay, 3)


def _number(value: Any, default: float | None = None) -> float | None:
    """A setting of a parameter group as a number (PyTorch allows a tensor lr), else default."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return default


def _probe_optimizers(cases: tuple[SettingCase, ...], configure_optimizer: Callable, rec: Recorder) -> None:
    """The optimizer's class and, per parameter in model.named_parameters() order, how many groups hold it
    (key.count) and the first one's weight_decay and lr (key.decay, key.lr; -1: none); key.foreign: other tensors."""
    for case in drawn(cases):
        sizes, lr, weight_decay = case.settings()
        model = StandInNetwork(*sizes)
        optimizer = rec.call(case.key, configure_optimizer, model, lr, weight_decay)
        rec.fact(fact_key(case.key, "class"), "AdamW" if isinstance(optimizer, torch.optim.AdamW)
                 else "Adam" if isinstance(optimizer, torch.optim.Adam) else None)
        groups = getattr(optimizer, "param_groups", None) if isinstance(optimizer, torch.optim.Optimizer) else None
        if not isinstance(groups, list):
            continue
        groups, params = [group for group in groups if isinstance(group, dict)], list(model.parameters())
        held = [q for group in groups for q in group.get("params", [])]
        first = [next((g for g in groups if any(q is p for q in g.get("params", []))), {}) for p in params]
        counts = [sum(q is p for q in held) for p in params]
        rec.tensor(fact_key(case.key, "count"), torch.tensor(counts, dtype=torch.int64))
        for key, setting in (("decay", "weight_decay"), ("lr", "lr")):
            rec.tensor(fact_key(case.key, key), torch.tensor([_number(g.get(setting), -1.0) for g in first],
                                                         dtype=torch.float64))
        rec.tensor(fact_key(case.key, "foreign"), torch.tensor(sum(not any(q is p for p in params) for q in held)))


#: (vocab, k, blocks), lr (not AdamW's default 1e-3), weight_decay: the case shown in the notebook, then others
configure_optimizer_groups = property_check("configure_optimizer_groups", _probe_optimizers, (
    SettingCase(key="optimizer", setting=((7, 4, 0), 3e-3, 0.1)),
    SettingCase(key="optimizer_secret", setting=partial(secret_optimizer_setting, 3060), secret=True)))
configure_optimizer_hidden = property_check("configure_optimizer_hidden", _probe_optimizers, (
    SettingCase(key="optimizer0", setting=((9, 5, 2), 3e-4, 0.05)),
    SettingCase(key="optimizer1", setting=((5, 3, 1), 2e-2, 0.3)),
    SettingCase(key="optimizer_secret", setting=partial(secret_optimizer_setting, 3070), secret=True)))


def secret_schedule(seed: int) -> tuple[int, float, int]:
    """Under grading, a secret (steps, peak, warmup): 10 to 60 steps, a peak in [1e-4, 1e-2], warmup <= steps // 2."""
    g = generator(seed)
    steps = int(torch.randint(10, 61, (), generator=g))
    peak = round(float(10 ** torch.empty(()).uniform_(-4, -2, generator=g)), 6)
    return steps, peak, int(torch.randint(1, steps // 2 + 1, (), generator=g))


def _probe_schedules(cases: tuple[SettingCase, ...], learning_rate: Callable, rec: Recorder) -> None:
    """Every step's learning rate as a float64 tensor (a one-element tensor is read with float()) and the names of the
    types returned (key.types: the exercise asks for a float), or the first value that is not a number or what was
    raised (at step key.step)."""
    for case in drawn(cases):
        steps, peak, warmup = case.settings()
        values, types = [], set()
        for step in range(steps):
            value = rec.call(case.key, learning_rate, step, steps, peak, warmup)
            number = _number(value) if not isinstance(value, (str, bytes)) else None
            if number is None:
                rec.fact(fact_key(case.key, "step"), step)
                break
            values.append(number)
            types.add(type(value).__name__)
        else:
            rec.value(case.key, torch.tensor(values, dtype=torch.float64))
            rec.fact(fact_key(case.key, "types"), sorted(types))


learning_rate_schedule = property_check("learning_rate_schedule", _probe_schedules, (
    SettingCase(key="lr", setting=(20, 0.01, 4)),
    SettingCase(key="lr_secret", setting=partial(secret_schedule, 3080), secret=True)))
#: the notebook's own schedule, a single warm-up step, a warm-up as long as all but one step, and a secret one
learning_rate_hidden = property_check("learning_rate_hidden", _probe_schedules, (
    SettingCase(key="lr0", setting=(800, 4e-3, 80)), SettingCase(key="lr1", setting=(7, 1.0, 1)),
    SettingCase(key="lr2", setting=(9, 0.5, 8)),
    SettingCase(key="lr_secret", setting=partial(secret_schedule, 3090), secret=True)))


@dataclass(frozen=True, kw_only=True)
class StepCase(SettingCase):
    """Two calls train_step(model, optimizer, loss, lr, max_norm) on nn.Linear(n_in, n_out) and an SGD at INITIAL_LR
    with a group for its weight and one for its bias; each loss the MSE of a batch; setting: (b, n_in, n_out)."""

    seed: int
    lrs: tuple[float, float]
    max_norm: float
    y_scale: float

    def model(self) -> nn.Linear:
        _, n_in, n_out = self.settings()
        with torch.random.fork_rng(devices=[]):
            model = nn.Linear(n_in, n_out)
        weights.fill(model, self.seed)
        return model

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x (b, n_in), y (b, n_out)) of call i (0 or 1), from seed + 1 + 10 i and seed + 2 + 10 i, y times y_scale."""
        b, n_in, n_out = self.settings()
        return (randn(b, n_in, seed=self.seed + 1 + 10 * i),
                self.y_scale * randn(b, n_out, seed=self.seed + 2 + 10 * i))


#: the lr SGD is created with, which train_step must replace by its lr argument
INITIAL_LR = 0.5


def _probe_steps(cases: tuple[StepCase, ...], train_step: Callable, rec: Recorder) -> None:
    """After each call, the norm returned (a Python number as a float64 tensor), the parameters and the groups' lr."""
    for case in drawn(cases):
        model = case.model().to(rec.device)
        optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=INITIAL_LR)
        for i, lr in enumerate(case.lrs):
            x, y = (v.to(rec.device) for v in case.batch(i))
            loss = ((model(x) - y) ** 2).mean()  # the loss the step trains on: an input, as a batch's loss is
            norm = rec.call(fact_key(case.key, f"norm{i}"), train_step, model, optimizer, loss, lr, case.max_norm)
            if isinstance(norm, (int, float)) and not isinstance(norm, bool):
                rec.value(fact_key(case.key, f"norm{i}"), torch.tensor(float(norm), dtype=torch.float64))
            for name, p in model.named_parameters():
                rec.tensor(fact_key(case.key, f"after{i}.{name}"), p)
            rec.fact(fact_key(case.key, f"lrs{i}"), [_number(group.get("lr")) for group in optimizer.param_groups])


def _step_cases(key: str, sizes: tuple[int, int, int], seed: int, max_norm: float,
                y_scale: float) -> tuple[StepCase, StepCase]:
    """The case shown (lr 0.1, then 0.05) and, under grading, a secret companion of other sizes and seeds."""
    return (StepCase(key=key, setting=sizes, seed=seed, lrs=(0.1, 0.05), max_norm=max_norm, y_scale=y_scale),
            StepCase(key=f"{key}_secret", setting=partial(secret_ints, seed + 50, (2, 7), (2, 7), (1, 5)), secret=True,
                     seed=seed + 60, lrs=(0.2, 0.07), max_norm=max_norm, y_scale=y_scale))


#: gradient norms of a few units: max_norm 100 never clips them, 0.5 always does (y 10 times larger)
train_step_update = property_check("train_step_update", _probe_steps, _step_cases("run", (4, 3, 2), 3100, 100.0, 1.0))
train_step_clipping = property_check("train_step_clipping", _probe_steps,
                                     _step_cases("run", (4, 3, 2), 3200, 0.5, 10.0))
