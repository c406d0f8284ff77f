"""Probes for assignment 08: LanguageModel, next_token_loss, sample_next_token and generate.

Each check runs the student's code on inputs and weights chosen here and records what it gives; its judge (in
course/judges/language_model.py, hidden under grading) decides from that record alone, against a stack of PyTorch's
nn.TransformerEncoderLayer, F.cross_entropy and torch.multinomial. Generation is driven on stand-in models
defined here (StandInLM), whose logits are exact, so a cached and an uncached run agree to the last bit. Sampling
and generation are probed on the CPU, where a seeded generator draws the same numbers on every machine. Under
grading every random input, weight and generator comes from the grader's secret seed (course/checks/seeds.py).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from course.checks import modules
from course.checks.check import Check, with_prerequisites
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import salted
from course.multi_head import MultiHeadAttention
from course.transformer_block import FeedForward

MODEL_NAME = "LanguageModel"
# ---------------------------------------------------------------- the model: structure

_KINDS = (("MultiHeadAttention", MultiHeadAttention), ("FeedForward", FeedForward), ("LayerNorm", nn.LayerNorm),
          ("Embedding", nn.Embedding), ("Linear", nn.Linear), ("ModuleList", nn.ModuleList),
          ("Sequential", nn.Sequential), ("list", list), ("tuple", tuple))
MODEL_PARTS = ("token_embedding", "position_embedding", "blocks", "norm", "to_logits")
#: each block's parts: (name, kind, how to create it)
BLOCK_PARTS = (("norm1", "LayerNorm", "nn.LayerNorm(k)"), ("attention", "MultiHeadAttention",
                                                            "MultiHeadAttention(k, heads)"),
               ("norm2", "LayerNorm", "nn.LayerNorm(k)"), ("ff", "FeedForward", "FeedForward(k, 4 * k)"))


@dataclass(frozen=True)
class ModelCase:
    """A case for the model: b sequences of t tokens, and LanguageModel(vocab, k, heads, depth, max_len)."""

    b: int
    t: int
    vocab: int
    k: int
    heads: int
    depth: int
    max_len: int

    @property
    def call(self) -> str:
        """How the case builds the model, as a student would write it."""
        return (f"{MODEL_NAME}({self.vocab}, k={self.k}, heads={self.heads}, depth={self.depth}, "
                f"max_len={self.max_len})")


# head size != k, batch > 1, odd lengths, one case with t == max_len
STRUCTURE_CASE = ModelCase(2, 6, 11, 16, 2, 2, 10)
ORACLE_CASES = (ModelCase(3, 7, 11, 16, 2, 2, 12), ModelCase(2, 5, 13, 12, 3, 1, 5))
HIDDEN_CASES = (ModelCase(1, 9, 7, 8, 4, 3, 9), ModelCase(4, 4, 17, 20, 5, 2, 30))


def _lm_facts(model: nn.Module) -> dict:
    """The model's named parts (parts: blocks with their count and how many are distinct objects), and the parts
    of each of its blocks (blocks.<i>.parts)."""
    facts = {"parts": modules.part_facts(model, MODEL_PARTS, _KINDS)}
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, (nn.ModuleList, nn.Sequential, list, tuple)):
        items = list(blocks)[:16]
        facts["parts"]["blocks"].update(count=len(blocks), distinct=len({id(b) for b in items}))
        facts.update({f"blocks.{i}.parts": modules.part_facts(b, [name for name, _, _ in BLOCK_PARTS], _KINDS)
                      for i, b in enumerate(items)})
    return facts


def _make_lm(LanguageModel: Callable, rec: Recorder, key: str, case: ModelCase, seed: int) -> nn.Module | None:
    return modules.build(rec, key, LanguageModel, case.vocab, case.k, case.heads, case.depth, case.max_len, seed=seed,
                         facts=_lm_facts, train=False)


# ---------------------------------------------------------------- the model: inputs

def lm_tokens(case: ModelCase, seed: int) -> torch.Tensor:
    return torch.randint(case.vocab, (case.b, case.t), generator=generator(seed))


def _run_lm(rec: Recorder, key: str, model: nn.Module, tokens: torch.Tensor, grad: bool = False) -> Any:
    with torch.set_grad_enabled(grad):
        return rec.call(key, model, tokens.to(rec.device))


# ---------------------------------------------------------------- LanguageModel: structure, causality, oracle

def _probe_lm_structure(LanguageModel, rec: Recorder) -> None:
    model = _make_lm(LanguageModel, rec, "model", STRUCTURE_CASE, 3000)
    if model is not None:
        _run_lm(rec, "logits", model, lm_tokens(STRUCTURE_CASE, 3010))


lm_structure = Check("lm_structure", _probe_lm_structure)

CAUSALITY_CASE = ModelCase(3, 7, 11, 16, 2, 2, 9)
CHANGED_POSITIONS = (5, 2)


def _changed_tokens(tokens: torch.Tensor, j: int, vocab: int) -> torch.Tensor:
    changed = tokens.clone()
    changed[:, j:] = (changed[:, j:] + 1 + torch.arange(changed.shape[1] - j)) % vocab  # every later token changes
    return changed


def _probe_lm_causality(LanguageModel, rec: Recorder) -> None:
    model = _make_lm(LanguageModel, rec, "model", CAUSALITY_CASE, 3100)
    if model is None:
        return
    tokens = lm_tokens(CAUSALITY_CASE, 3110)
    _run_lm(rec, "logits", model, tokens)
    for j in CHANGED_POSITIONS:
        _run_lm(rec, f"changed{j}", model, _changed_tokens(tokens, j, CAUSALITY_CASE.vocab))


lm_causality = Check("lm_causality", _probe_lm_causality)


def _probe_lm_oracle_cases(LanguageModel, rec: Recorder, cases: Sequence[ModelCase], seed: int) -> None:
    for i, case in enumerate(cases):
        model = _make_lm(LanguageModel, rec, f"model{i}", case, seed + 100 * i)
        if model is None:
            return
        _run_lm(rec, f"logits{i}", model, lm_tokens(case, seed + 100 * i + 10))


def _probe_lm_oracle(LanguageModel, rec: Recorder) -> None:
    _probe_lm_oracle_cases(LanguageModel, rec, ORACLE_CASES, 3200)


lm_oracle = Check("lm_oracle", _probe_lm_oracle)


# ---------------------------------------------------------------- LanguageModel: the KV cache

@dataclass(frozen=True)
class CacheCase:
    """The model's tokens fed in chunks of these sizes: the first (the prompt) without a cache, each later one with
    the cache the call before returned; seed: the check's weights (tokens: seed + 10)."""

    model: ModelCase
    seed: int
    chunks: tuple[int, ...]


CACHE_CASE = CacheCase(ModelCase(2, 8, 11, 16, 2, 2, 10), 3300, (3, 2, 1, 1, 1))
HIDDEN_CACHE_CASE = CacheCase(ModelCase(3, 9, 13, 12, 3, 3, 12), 3400, (2, 1, 3, 1, 2))


def chunk_bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) of each chunk."""
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out


def _probe_cache(LanguageModel, rec: Recorder, spec: CacheCase, prefix: str = "") -> None:
    case, seed, sizes = spec.model, spec.seed, spec.chunks
    model = _make_lm(LanguageModel, rec, f"{prefix}model", case, seed)
    if model is None:
        return
    tokens = lm_tokens(case, seed + 10).to(rec.device)
    with torch.no_grad():
        rec.call(f"{prefix}full", model, tokens)
        cache = None
        for c, (start, end) in enumerate(chunk_bounds(sizes)):
            result = rec.call(f"{prefix}step{c}", model, tokens[:, start:end], cache=cache, use_cache=True)
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                return
            cache = result[1]


def _probe_lm_cache(LanguageModel, rec: Recorder) -> None:
    _probe_cache(LanguageModel, rec, CACHE_CASE)


lm_cache = Check("lm_cache", _probe_lm_cache)


def _probe_lm_hidden(LanguageModel, rec: Recorder) -> None:
    _probe_lm_oracle_cases(LanguageModel, rec, HIDDEN_CASES, 3500)
    _probe_cache(LanguageModel, rec, HIDDEN_CACHE_CASE, prefix="cache.")


lm_hidden = Check("lm_hidden", _probe_lm_hidden)

GRADIENT_CASE = ModelCase(2, 6, 9, 12, 3, 2, 8)


def _probe_lm_gradients(LanguageModel, rec: Recorder) -> None:
    model = _make_lm(LanguageModel, rec, "model", GRADIENT_CASE, 3600)
    if model is None:
        return
    model.train()
    modules.record_backward(rec, "logits", model, lm_tokens(GRADIENT_CASE, 3610).to(rec.device),
                            loss=lambda y: (y * randn(*y.shape, seed=3620, device=y.device)).sum())


lm_gradients = Check("lm_gradients", _probe_lm_gradients)


# ---------------------------------------------------------------- next_token_loss

@dataclass(frozen=True)
class LossCase:
    """Random logits (b, t, vocab) times scale, and tokens (b, t), drawn from seed."""

    seed: int
    b: int
    t: int
    vocab: int
    scale: float

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = generator(self.seed)
        return (self.scale * torch.randn(self.b, self.t, self.vocab, generator=g),
                torch.randint(self.vocab, (self.b, self.t), generator=g))


# vocab != t - 1, so logits with the classes last cannot pass
LOSS_CASES = (LossCase(4000, 3, 6, 11, 1.0), LossCase(4100, 2, 5, 7, 60.0))
LOSS_HIDDEN_CASES = (LossCase(4200, 1, 2, 3, 1.0), LossCase(4300, 4, 13, 29, 3.0))


def _probe_loss_cases(next_token_loss, rec: Recorder, cases: Sequence[LossCase]) -> None:
    for i, spec in enumerate(cases):
        logits, tokens = spec.inputs()
        logits = logits.to(rec.device).requires_grad_(True)
        modules.record_backward(rec, f"loss{i}", next_token_loss, logits, tokens.to(rec.device), loss=lambda loss: loss,
                                inputs={f"logits{i}": logits})


def _probe_loss(next_token_loss, rec: Recorder) -> None:
    _probe_loss_cases(next_token_loss, rec, LOSS_CASES)


loss_oracle = Check("loss_oracle", _probe_loss)


def _probe_loss_hidden(next_token_loss, rec: Recorder) -> None:
    _probe_loss_cases(next_token_loss, rec, LOSS_HIDDEN_CASES)


loss_hidden = Check("loss_hidden", _probe_loss_hidden)


# ---------------------------------------------------------------- sample_next_token

#: the seed the probe gives PyTorch's global generator before a draw (the probe restores the student's after)
GLOBAL_SEED = 777


def logits_rows(seed: int, b: int, vocab: int, scale: float = 2.0) -> torch.Tensor:
    return scale * torch.randn(b, vocab, generator=generator(seed))


def _call_sampler(rec: Recorder, key: str, sample_next_token, logits: torch.Tensor, temperature: float,
                  top_k: int | None, seed: int, global_seed: int = GLOBAL_SEED) -> None:
    """One call, with a generator of this seed and PyTorch's global generator seeded to global_seed; the student's
    global generator is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(salted(global_seed))
        rec.call(key, sample_next_token, logits.clone(), temperature, top_k, generator(seed))


@dataclass(frozen=True)
class SamplingCase:
    """Logits (b, vocab) drawn from seed, sampled at this temperature and top_k with a generator seeded seed + 1."""

    seed: int
    b: int
    vocab: int
    temperature: float
    top_k: int | None

    @property
    def call(self) -> str:
        return f"sample_next_token(logits, temperature={self.temperature:g}, top_k={self.top_k}, generator)"


GREEDY_CASES = (SamplingCase(4500, 5, 9, 0, None), SamplingCase(4510, 4, 6, 0, 3))


def _probe_sampling_greedy(sample_next_token, rec: Recorder) -> None:
    _probe_sampling_cases(sample_next_token, rec, GREEDY_CASES)


sampling_greedy = Check("sampling_greedy", _probe_sampling_greedy)

SAMPLING_CASES = (SamplingCase(4600, 64, 10, 1.0, None), SamplingCase(4609, 4, 10, 0.9, 3),
                  SamplingCase(4610, 64, 10, 0.7, 3), SamplingCase(4620, 48, 12, 2.0, None),
                  SamplingCase(4630, 40, 9, 1.3, 5))
SAMPLING_HIDDEN_CASES = (SamplingCase(4700, 1, 5, 0.9, 2), SamplingCase(4710, 33, 40, 1.0, 40),
                         SamplingCase(4720, 20, 7, 0.5, 1), SamplingCase(4730, 9, 3, 1e-3, None))


def _probe_sampling_cases(sample_next_token, rec: Recorder, cases: Sequence[SamplingCase]) -> None:
    for i, spec in enumerate(cases):
        _call_sampler(rec, f"tokens{i}", sample_next_token, logits_rows(spec.seed, spec.b, spec.vocab),
                      spec.temperature, spec.top_k, spec.seed + 1)


def _probe_sampling_distribution(sample_next_token, rec: Recorder) -> None:
    _probe_sampling_cases(sample_next_token, rec, SAMPLING_CASES)


sampling_distribution = Check("sampling_distribution", _probe_sampling_distribution)

GENERATOR_CASE = SamplingCase(4800, 32, 8, 1.0, 4)
GLOBAL_SEEDS = (11, 22)


def _probe_sampling_generator(sample_next_token, rec: Recorder) -> None:
    spec = GENERATOR_CASE
    logits = logits_rows(spec.seed, spec.b, spec.vocab)
    changed = []
    for i, global_seed in enumerate(GLOBAL_SEEDS):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(salted(global_seed))
            before = torch.random.get_rng_state()
            gen = generator(spec.seed + 1)
            rec.call(f"tokens{i}", sample_next_token, logits.clone(), spec.temperature, spec.top_k, gen)
            changed.append(not torch.equal(before, torch.random.get_rng_state()))
    rec.fact("global_state_changed", changed)


sampling_generator = Check("sampling_generator", _probe_sampling_generator)

#: b copies of one row of logits (seed, vocab): the draws must never leave its top k
TOP_K_PROPERTY = SamplingCase(4900, 1500, 12, 1.0, 4)


def _probe_sampling_hidden(sample_next_token, rec: Recorder) -> None:
    _probe_sampling_cases(sample_next_token, rec, SAMPLING_HIDDEN_CASES)
    spec = TOP_K_PROPERTY
    seed, vocab, top_k, temperature, draws = spec.seed, spec.vocab, spec.top_k, spec.temperature, spec.b
    row = logits_rows(seed, 1, vocab)
    many = row.expand(draws, vocab).contiguous()
    _call_sampler(rec, "many", sample_next_token, many, temperature, top_k, seed + 1)
    if rec.device.type != "cpu":
        gen = generator(seed, rec.device)
        rec.call("on_device", sample_next_token, many.to(rec.device), temperature, top_k, gen)


sampling_hidden = Check("sampling_hidden", _probe_sampling_hidden)


# ---------------------------------------------------------------- generate

class StandInLM(nn.Module):
    """A stand-in for a trained LanguageModel whose logits are exact, so a cached and an uncached run agree to the
    last bit, on every machine.

    The logits at position p are table[token p] + the mean of table[token] over positions 0..p + positions[p]: the
    last token and everything before it count. Its cache follows the notebook's format — one (keys, values) pair,
    (b, 1, t, vocab_size) — and it notes every call: [tokens fed, positions cached, use_cache].
    """

    def __init__(self, vocab_size: int, max_len: int, seed: int):
        super().__init__()
        g = generator(seed)
        self.max_len = max_len
        self.table = nn.Parameter(torch.randint(-3, 4, (vocab_size, vocab_size), generator=g).float(),
                                  requires_grad=False)
        self.positions = nn.Parameter(torch.randint(-2, 3, (max_len, vocab_size), generator=g).float() / 2,
                                      requires_grad=False)
        self.calls: list[list] = []

    def forward(self, tokens: torch.Tensor, cache: list | None = None, use_cache: bool = False):
        _b, t = tokens.shape
        past = 0 if cache is None else int(cache[0][0].shape[2])
        self.calls.append([int(t), past, bool(use_cache)])
        if past + t > self.max_len:
            raise ValueError(f"{past + t} positions exceed max_len={self.max_len}")
        rows = self.table[tokens]  # (b, t, V), small integers
        keys = rows.unsqueeze(1) if cache is None else torch.cat([cache[0][0], rows.unsqueeze(1)], dim=2)
        sums = keys[:, 0].cumsum(dim=1)[:, past:]  # (b, t, V): exact, the values are integers
        count = torch.arange(past + 1, past + t + 1, dtype=torch.float32, device=tokens.device).unsqueeze(1)
        logits = rows + sums / count + self.positions[past : past + t]
        return (logits, [(keys, keys)]) if use_cache else logits


@dataclass(frozen=True)
class Generation:
    """generate on a stand-in model (seed, vocab) from a prompt (b, t0) drawn from seed + 7: new_tokens tokens at
    this temperature and top_k, with a generator seeded generator_seed."""

    seed: int
    vocab: int
    b: int
    t0: int
    new_tokens: int
    temperature: float
    top_k: int | None
    generator_seed: int


GREEDY_GENERATION = Generation(5000, 9, 3, 4, 6, 0.0, None, 5001)
SAMPLED_GENERATION = Generation(5100, 9, 3, 4, 7, 0.8, 4, 5101)
CACHED_GENERATIONS = (Generation(5200, 9, 3, 4, 6, 0.0, None, 5201), Generation(5300, 11, 2, 3, 8, 1.0, None, 5301))
HIDDEN_GENERATIONS = (Generation(5400, 7, 1, 1, 5, 1.2, 3, 5401), Generation(5500, 13, 4, 5, 1, 0.6, 2, 5501),
                      Generation(5600, 10, 2, 2, 9, 1.0, 1, 5601))
_STAND_IN_MAX_LEN = 64


def stand_in(spec: Generation) -> tuple[StandInLM, torch.Tensor]:
    prompt = torch.randint(spec.vocab, (spec.b, spec.t0), generator=generator(spec.seed + 7))
    return StandInLM(spec.vocab, _STAND_IN_MAX_LEN, spec.seed), prompt


def _probe_generation(generate, rec: Recorder, key: str, spec: Generation, use_cache: bool) -> None:
    """generate on the stand-in, on the CPU, with PyTorch's global generator seeded to GLOBAL_SEED."""
    model, prompt = stand_in(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(salted(GLOBAL_SEED))
        rec.call(key, generate, model, prompt, spec.new_tokens, spec.temperature, spec.top_k,
                 generator(spec.generator_seed), use_cache)
    rec.fact(f"{key}.calls", model.calls[:64])


def _generate_check(name: str, probe: Callable[[Any, Recorder], None]) -> Check:
    """A generate check that also says when the cause may be the student's sample_next_token."""
    return with_prerequisites(name, probe, user="generate",
                              prerequisites=(("sample_next_token", 3, (sampling_greedy, sampling_distribution)),),
                              namespace=lambda generate: getattr(generate, "__globals__", {}))


def _probe_generate_greedy(generate, rec: Recorder) -> None:
    _probe_generation(generate, rec, "tokens", GREEDY_GENERATION, False)


def _probe_generate_sampling(generate, rec: Recorder) -> None:
    _probe_generation(generate, rec, "tokens", SAMPLED_GENERATION, False)


def _probe_generate_cache(generate, rec: Recorder) -> None:
    for i, spec in enumerate(CACHED_GENERATIONS):
        _probe_generation(generate, rec, f"tokens{i}", spec, True)


def _probe_generate_hidden(generate, rec: Recorder) -> None:
    for i, spec in enumerate(HIDDEN_GENERATIONS):
        for use_cache in (False, True):
            _probe_generation(generate, rec, f"tokens{i}{'c' if use_cache else ''}", spec, use_cache)


generate_greedy = _generate_check("generate_greedy", _probe_generate_greedy)
generate_sampling = _generate_check("generate_sampling", _probe_generate_sampling)
generate_cache = _generate_check("generate_cache", _probe_generate_cache)
generate_hidden = _generate_check("generate_hidden", _probe_generate_hidden)
