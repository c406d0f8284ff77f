"""Probes for assignment 08 (LanguageModel, next_token_loss, sample_next_token, generate, CachedLanguageModel,
generate_cached); judges in course/judges/language_model.py. Generation runs on exact stand-in models (StandInLM);
sampling and generation on the CPU, where a seeded generator draws the same numbers everywhere."""

from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from course.checks import device, modules
from course.checks.check import when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder, fact_key
from course.checks.kinds import (
    AfterPrerequisites,
    Case,
    ModelRun,
    PropertyCheck,
    RunKeys,
    loss_case,
    losses,
    model_backward,
    model_facts,
    probe_models,
    property_check,
)
from course.checks.seeds import salted
from course.multi_head import MultiHeadAttention
from course.seeding import manual_seed
from course.transformer_block import FeedForward

MODEL_NAME = "LanguageModel"
CACHED_NAME = "CachedLanguageModel"


# ---------------------------------------------------------------- LanguageModel: the cases

_LM_KINDS = (("MultiHeadAttention", MultiHeadAttention), ("FeedForward", FeedForward), ("LayerNorm", nn.LayerNorm),
             ("Embedding", nn.Embedding), ("Linear", nn.Linear), ("ModuleList", nn.ModuleList),
             ("Sequential", nn.Sequential), ("list", list), ("tuple", tuple))
MODEL_PARTS = ("token_embedding", "position_embedding", "blocks", "norm", "to_logits")
#: each block's parts: (name, kind, how to create it)
BLOCK_PARTS = (("norm1", "LayerNorm", "nn.LayerNorm(k)"),
               ("attention", "MultiHeadAttention", "MultiHeadAttention(k, heads)"),
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

    def constructor(self) -> tuple[tuple, dict]:
        """LanguageModel's arguments: (vocab, k, heads, depth, max_len), no keywords."""
        return (self.vocab, self.k, self.heads, self.depth, self.max_len), {}

    @property
    def call(self) -> str:
        """How the case builds the model, as a student would write it."""
        return (f"{MODEL_NAME}({self.vocab}, k={self.k}, heads={self.heads}, depth={self.depth}, "
                f"max_len={self.max_len})")


def lm_tokens(case: ModelCase, seed: int) -> torch.Tensor:
    """Random token ids (b, t) of the case."""
    return torch.randint(case.vocab, (case.b, case.t), generator=generator(seed))


# head size != k, batch > 1, odd lengths, one case with t == max_len
STRUCTURE_CASE = ModelCase(b=2, t=6, vocab=11, k=16, heads=2, depth=2, max_len=10)
ON_GPU_CASE = replace(STRUCTURE_CASE, depth=1)  # on the stand-in GPU: one block shows what every block does
ORACLE_CASES = (ModelCase(b=3, t=7, vocab=11, k=16, heads=2, depth=2, max_len=12),
                ModelCase(b=2, t=5, vocab=13, k=12, heads=3, depth=1, max_len=5))
HIDDEN_CASES = (ModelCase(b=1, t=9, vocab=7, k=8, heads=4, depth=3, max_len=9),
                ModelCase(b=4, t=4, vocab=17, k=20, heads=5, depth=2, max_len=30))
CAUSALITY_CASE = ModelCase(b=3, t=7, vocab=11, k=16, heads=2, depth=2, max_len=9)
GRADIENT_CASE = ModelCase(b=2, t=6, vocab=9, k=12, heads=3, depth=2, max_len=8)
CACHE_CASE = ModelRun(case=ModelCase(b=2, t=8, vocab=11, k=16, heads=2, depth=2, max_len=10), seed=3300,
                      keys=RunKeys(logits="full"), chunks=(3, 2, 1, 1, 1))
HIDDEN_CACHE_CASE = ModelRun(case=ModelCase(b=3, t=9, vocab=13, k=12, heads=3, depth=3, max_len=12), seed=3400,
                             keys=RunKeys(model="cache.model", logits="cache.full", steps="cache.step"),
                             chunks=(2, 1, 3, 1, 2))


def numbered_runs(cases: Sequence[ModelCase], seed: int) -> tuple[ModelRun, ...]:
    """The i-th case built under model<i> with the weights of seed + 100 i, its logits under logits<i>."""
    return tuple(ModelRun(case=case, seed=seed + 100 * i, keys=RunKeys(model=f"model{i}", logits=f"logits{i}"))
                 for i, case in enumerate(cases))


# ---------------------------------------------------------------- LanguageModel: the probes

_FACTS = partial(model_facts, parts=MODEL_PARTS, block_parts=[name for name, _, _ in BLOCK_PARTS], kinds=_LM_KINDS)
_probe_model = partial(probe_models, facts=_FACTS)  # a run that cannot be built ends the probe



def _on_gpu(cls: Callable, d: torch.device, cached: bool = False) -> Any:
    """ON_GPU_CASE's model moved to d and run on 6 tokens there (cached: 4, then 2 more with the cache)."""
    model, tokens = cls(*astuple(ON_GPU_CASE)[2:]).to(d), torch.randint(11, (2, 6), device=d)
    if not cached:
        return model(tokens)
    _, cache = model(tokens[:, :4], use_cache=True)
    return model(tokens[:, 4:], cache=cache, use_cache=True)


#: the calls run on each stand-in GPU (course/checks/device.py): are the positions and the mask made on the device?
LM_ON_GPU = f"{ON_GPU_CASE.call}.to(device)(tokens (2, 6) on device)"
CACHE_ON_GPU = f"{LM_ON_GPU.replace(MODEL_NAME, CACHED_NAME)[:-1]}: 4 with use_cache=True, then 2 with the cache)"
lm_structure = property_check("lm_structure", device.on_gpus(_probe_model, "model", _on_gpu),
                              (ModelRun(case=STRUCTURE_CASE, seed=3000),))
lm_causality = property_check("lm_causality", _probe_model, (ModelRun(case=CAUSALITY_CASE, seed=3100, changed=(5, 2)),))
lm_oracle = property_check("lm_oracle", _probe_model, numbered_runs(ORACLE_CASES, 3200))
lm_hidden = property_check("lm_hidden", _probe_model, numbered_runs(HIDDEN_CASES, 3500))
lm_gradients = property_check("lm_gradients", partial(_probe_model, backward=partial(model_backward, train=True)),
                              (ModelRun(case=GRADIENT_CASE, seed=3600, upstream=3620),))


def _cache_check(name: str, cases: tuple[ModelRun, ...], probe: Callable = _probe_model) -> PropertyCheck:
    """A CachedLanguageModel check that also says when the cause may be the LanguageModel it inherits (exercise 1)."""
    return AfterPrerequisites(name, probe, tuple(cases), user=CACHED_NAME,
                              prerequisites=((MODEL_NAME, 1, (lm_structure, lm_oracle)),),
                              namespace=lambda cls: {c.__name__: c for c in reversed(getattr(cls, "__mro__", ())[1:])})


#: CachedLanguageModel.run_block called directly on the first block of HIDDEN_CACHE_CASE's model: x (b, t, k) after a
#: cache of t_past random positions, mask (t, t_past + t) (the exercise asks for the method, not only a forward)
RUN_BLOCK = MappingProxyType({"t": 3, "t_past": 4, "seed": 3450})


def run_block_inputs(case: ModelCase) -> dict[str, Any]:
    """x (b, t, k), mask (t, t_past + t) and past (keys, values), each (b, heads, t_past, s), from RUN_BLOCK's seed."""
    b, t, past, seed = case.b, RUN_BLOCK["t"], RUN_BLOCK["t_past"], RUN_BLOCK["seed"]
    shape = (b, case.heads, past, case.k // case.heads)
    return {"x": randn(b, t, case.k, seed=seed), "mask": torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past),
            "past": (randn(*shape, seed=seed + 1), randn(*shape, seed=seed + 2))}


def _probe_cache_hidden(runs: tuple[ModelRun, ...], cls: Callable, rec: Recorder) -> None:
    """_probe_model, then run_block on the first block of the run's model (its weights again), recorded as run_block."""
    _probe_model(runs, cls, rec)
    run = runs[0]
    model = modules.build(rec, "run_block.model", cls, *astuple(run.case)[2:], seed=run.seed, train=False)
    blocks = getattr(model, "blocks", None)
    if model is None or not isinstance(blocks, (nn.ModuleList, nn.Sequential)) or not len(blocks):
        return
    inputs = run_block_inputs(run.case)
    with torch.no_grad():
        rec.call("run_block", getattr(model, "run_block", None), next(iter(blocks)), inputs["x"].to(rec.device),
                 inputs["mask"].to(rec.device), tuple(v.to(rec.device) for v in inputs["past"]))


lm_cache = _cache_check("lm_cache", (CACHE_CASE,), device.on_gpus(_probe_model, "model", partial(_on_gpu, cached=True)))
lm_cache_hidden = _cache_check("lm_cache_hidden", (HIDDEN_CACHE_CASE,), _probe_cache_hidden)


# ---------------------------------------------------------------- next_token_loss

def random_logits(key: str, seed: int, b: int, t: int, vocab: int, scale: float) -> Case:
    """A loss case: random logits (b, t, vocab) times scale, and tokens (b, t), drawn from seed; with gradients."""

    def inputs() -> dict[str, torch.Tensor]:
        g = generator(seed)
        return {"logits": scale * torch.randn(b, t, vocab, generator=g),
                "tokens": torch.randint(vocab, (b, t), generator=g)}

    return loss_case(key, inputs, f"logits {(b, t, vocab)} of scale {scale:g}, tokens {(b, t)}", gradients=True)


# vocab != t - 1, so logits with the classes last cannot pass
loss_oracle = losses("loss_oracle", (random_logits("loss0", 4000, 3, 6, 11, 1.0),
                                     random_logits("loss1", 4100, 2, 5, 7, 60.0)))
loss_hidden = losses("loss_hidden", (random_logits("loss0", 4200, 1, 2, 3, 1.0),
                                     random_logits("loss1", 4300, 4, 13, 29, 3.0)))


# ---------------------------------------------------------------- sample_next_token

#: the seed the probe gives PyTorch's global generator before a draw (the probe restores the student's after)
GLOBAL_SEED = 777


@dataclass(frozen=True)
class Sampling:
    """How sample_next_token draws: at temperature (0: greedy), from the top_k tokens (None: all), then from the
    smallest set holding top_p of the probability (None: top_p not passed)."""

    temperature: float
    top_k: int | None
    top_p: float | None = None

    @property
    def words(self) -> str:
        nucleus = "" if self.top_p is None else f", top_p={self.top_p:g}"
        return f"temperature={self.temperature:g}, top_k={self.top_k}{nucleus}"


@dataclass(frozen=True)
class SamplingCase:
    """Random logits (b, vocab) of scale 2 drawn from seed (copies: b copies of one row, also drawn on the notebook's
    device), drawn as sampling says with a generator seeded seed + 1; recorded under key."""

    key: str
    seed: int
    b: int
    vocab: int
    sampling: Sampling
    copies: bool = False
    global_seeds: tuple[int, ...] = ()  # drawn once under each, keyed <key><i>, instead of under GLOBAL_SEED

    @property
    def call(self) -> str:
        return f"sample_next_token(logits, {self.sampling.words}, generator=generator)"

    def logits(self) -> torch.Tensor:
        rows = 2.0 * torch.randn(1 if self.copies else self.b, self.vocab, generator=generator(self.seed))
        return rows.expand(self.b, self.vocab).contiguous()  # (b, vocab): copies of one row where copies


def numbered_sampling(cases: Sequence[tuple]) -> tuple[SamplingCase, ...]:
    """One SamplingCase(tokens<i>, seed, b, vocab, Sampling(temperature, top_k[, top_p])) per row of the table."""
    return tuple(SamplingCase(f"tokens{i}", seed, b, vocab, Sampling(*how)) for i, (seed, b, vocab, *how) in
                 enumerate(cases))


def settings(case: "SamplingCase | Generation", device: str = "cpu", seed: int = 1) -> dict[str, Any]:
    """The case's keyword arguments, its generator seeded case.seed + seed; top_p only where set (written last)."""
    how = case.sampling
    nucleus = {} if how.top_p is None else {"top_p": how.top_p}
    return {"temperature": how.temperature, "top_k": how.top_k, **nucleus,
            "generator": generator(case.seed + seed, device)}


def _seeded_call(rec: Recorder, key: str, function: Callable, *args: Any, global_seed: int = GLOBAL_SEED,
                 **keywords: Any) -> bool:
    """rec.call under PyTorch's global generator seeded to global_seed (then restored); True when the call drew."""
    with torch.random.fork_rng(devices=[]):
        manual_seed(salted(global_seed))
        before = torch.random.get_rng_state()
        rec.call(key, function, *args, **keywords)
        return not torch.equal(before, torch.random.get_rng_state())


def _probe_sampling(cases: tuple[SamplingCase, ...], sample_next_token, rec: Recorder) -> None:
    """Each case drawn as it says; with global_seeds, whether each draw changed the global generator too."""
    for case in cases:
        keys = [f"{case.key}{i}" for i in range(len(case.global_seeds))] or [case.key]
        changed = [_seeded_call(rec, key, sample_next_token, case.logits(), global_seed=seed, **settings(case))
                   for key, seed in zip(keys, case.global_seeds or (GLOBAL_SEED,), strict=True)]
        if case.global_seeds:
            rec.fact("global_state_changed", changed)
        if case.copies and rec.device.type != "cpu":
            rec.call("on_device", sample_next_token, case.logits().to(rec.device), **settings(case, rec.device, 0))


GREEDY_CASES = numbered_sampling(((4500, 5, 9, 0, None), (4510, 4, 6, 0, 3)))
SAMPLING_CASES = numbered_sampling(((4600, 64, 10, 1.0, None), (4609, 4, 10, 0.9, 3), (4610, 64, 10, 0.7, 3),
                                    (4620, 48, 12, 2.0, None), (4630, 40, 9, 1.3, 5)))
# top-p: a small p first (sorted the wrong way, a large p keeps nearly every token, as ignoring top_p does), at
# T = 1, at a temperature (so that top-p before the temperature shows), and after top_k
TOP_P_CASES = numbered_sampling(((4680, 32, 8, 1.0, None, 0.35), (4650, 64, 10, 1.0, None, 0.9),
                                 (4660, 48, 12, 0.6, None, 0.7), (4670, 40, 9, 1.4, 5, 0.8)))
SAMPLING_HIDDEN_CASES = numbered_sampling(((4700, 1, 5, 0.9, 2), (4710, 33, 40, 1.0, 40), (4720, 20, 7, 0.5, 1),
                                           (4730, 9, 3, 1e-3, None), (4760, 16, 11, 1.0, None, 1e-3),
                                           (4740, 1, 6, 0.8, None, 0.5), (4750, 24, 30, 1.7, None, 1.0),
                                           (4770, 36, 20, 1.2, 8, 0.95)))
sampling_greedy = property_check("sampling_greedy", _probe_sampling, GREEDY_CASES)
sampling_distribution = property_check("sampling_distribution", _probe_sampling, SAMPLING_CASES)
#: the call run on each stand-in GPU: is every mask of the vocabulary made where the logits are?
SAMPLE_ON_GPU = "sample_next_token(logits (4, 10) on device, temperature=0.8, top_k=3, top_p=0.9)"
sampling_top_p = property_check("sampling_top_p", device.on_gpus(_probe_sampling, "sample", lambda f, d: f(
    torch.randn(4, 10, device=d), temperature=0.8, top_k=3, top_p=0.9)), TOP_P_CASES)

#: one case, drawn with the same generator under each global seed (tokens<i>)
GENERATOR_CASE = SamplingCase(key="tokens", seed=4800, b=32, vocab=8, sampling=Sampling(temperature=1.0, top_k=4),
                              global_seeds=(11, 22))
sampling_generator = property_check("sampling_generator", _probe_sampling, (GENERATOR_CASE,))

#: b copies of one row of logits (seed, vocab): the draws must never leave its top k (also on the notebook's device)
TOP_K_PROPERTY = SamplingCase(key="many", seed=4900, b=1500, vocab=12, sampling=Sampling(temperature=1.0, top_k=4),
                              copies=True)
sampling_hidden = property_check("sampling_hidden", _probe_sampling, (*SAMPLING_HIDDEN_CASES, TOP_K_PROPERTY))


# ---------------------------------------------------------------- generate

class StandInLM(nn.Module):
    """A stand-in LanguageModel with exact logits (cached and uncached runs agree to the last bit): at position p,
    table[token p] + the mean of table[token] over 0..p + positions[p] + tiebreak (token index / 997: no two logits
    tie, so what top-k and top-p keep never depends on how ties are broken). Its cache has the notebook's format, one
    (keys, values) pair (b, 1, t, vocab_size); `calls` notes every call: [tokens fed, positions cached, use_cache]."""

    def __init__(self, vocab_size: int, max_len: int, seed: int):
        super().__init__()
        g = generator(seed)
        self.max_len = max_len
        fixed = partial(nn.Parameter, requires_grad=False)
        self.table = fixed(torch.randint(-3, 4, (vocab_size, vocab_size), generator=g).float())
        self.positions = fixed(torch.randint(-2, 3, (max_len, vocab_size), generator=g).float() / 2)
        self.tiebreak = fixed(torch.arange(vocab_size, dtype=torch.float32) / 997)
        self.calls: list[list] = []
        self.autograd_on = False  # whether any call ran with autograd on (generation works inside torch.no_grad())

    def forward(self, tokens: torch.Tensor, cache: list | None = None, use_cache: bool = False):
        _b, t = tokens.shape
        past = 0 if cache is None else int(cache[0][0].shape[2])
        self.calls.append([int(t), past, bool(use_cache)])
        self.autograd_on |= torch.is_grad_enabled()
        if past + t > self.max_len:
            raise ValueError(f"{past + t} positions exceed max_len={self.max_len}")
        rows = self.table[tokens]  # (b, t, V), small integers
        keys = rows.unsqueeze(1) if cache is None else torch.cat([cache[0][0], rows.unsqueeze(1)], dim=2)
        sums = keys[:, 0].cumsum(dim=1)[:, past:]  # (b, t, V): exact, the values are integers
        count = torch.arange(past + 1, past + t + 1, dtype=torch.float32, device=tokens.device).unsqueeze(1)
        logits = rows + sums / count + self.positions[past : past + t] + self.tiebreak
        return (logits, [(keys, keys)]) if use_cache else logits


@dataclass(frozen=True)
class Generation:
    """generate (or generate_cached: use_cache) on stand_in(self): new_tokens tokens after a prompt (b, t0), each
    drawn as sampling says with a generator seeded seed + 1; recorded under key and the model's calls under
    <key>.calls."""

    key: str
    seed: int
    vocab: int
    b: int
    t0: int
    new_tokens: int
    sampling: Sampling
    use_cache: bool = False


GREEDY_GENERATION = Generation(key="tokens", seed=5000, vocab=9, b=3, t0=4, new_tokens=6,
                               sampling=Sampling(temperature=0.0, top_k=None))
SAMPLED_GENERATIONS = (Generation(key="tokens0", seed=5100, vocab=9, b=3, t0=4, new_tokens=7,
                                  sampling=Sampling(temperature=0.8, top_k=4)),
                       Generation(key="tokens1", seed=5150, vocab=10, b=2, t0=3, new_tokens=8,
                                  sampling=Sampling(temperature=1.2, top_k=None, top_p=0.8)))
CACHED_GENERATIONS = (Generation(key="tokens0", seed=5200, vocab=9, b=3, t0=4, new_tokens=6,
                                 sampling=Sampling(temperature=0.0, top_k=None), use_cache=True),
                      Generation(key="tokens1", seed=5300, vocab=11, b=2, t0=3, new_tokens=8,
                                 sampling=Sampling(temperature=1.0, top_k=None), use_cache=True),
                      Generation(key="tokens2", seed=5350, vocab=10, b=2, t0=2, new_tokens=7,
                                 sampling=Sampling(temperature=0.9, top_k=6, top_p=0.85), use_cache=True))
#: run by generate, then by generate_cached (keys tokens<i>c)
HIDDEN_GENERATIONS = (Generation(key="tokens0", seed=5400, vocab=7, b=1, t0=1, new_tokens=5,
                                 sampling=Sampling(temperature=1.2, top_k=3)),
                      Generation(key="tokens1", seed=5500, vocab=13, b=4, t0=5, new_tokens=1,
                                 sampling=Sampling(temperature=0.6, top_k=2)),
                      Generation(key="tokens2", seed=5600, vocab=10, b=2, t0=2, new_tokens=9,
                                 sampling=Sampling(temperature=1.0, top_k=1)),
                      Generation(key="tokens3", seed=5700, vocab=12, b=3, t0=3, new_tokens=6,
                                 sampling=Sampling(temperature=0.7, top_k=None, top_p=0.6)))


def stand_in(spec: Generation) -> tuple[StandInLM, torch.Tensor]:
    """The stand-in model of spec and its prompt (b, t0)."""
    prompt = torch.randint(spec.vocab, (spec.b, spec.t0), generator=generator(spec.seed + 7))
    return StandInLM(spec.vocab, 64, spec.seed), prompt  # max_len 64: longer than any generation


def _probe_generation(cases: tuple[Generation, ...], generate, rec: Recorder) -> None:
    """generate (or generate_cached) on each case's stand-in with PyTorch's global generator seeded to GLOBAL_SEED."""
    for spec in cases:
        model, prompt = stand_in(spec)
        _seeded_call(rec, spec.key, generate, model, prompt, spec.new_tokens, **settings(spec))
        rec.fact(fact_key(spec.key, "calls"), model.calls[:64])
        rec.fact(fact_key(spec.key, "autograd_on"), model.autograd_on)


def _generate_check(name: str, cases: Sequence[Generation], user: str = "generate") -> PropertyCheck:
    """A generation check that also says when the cause may be the student's sample_next_token."""
    return AfterPrerequisites(name, _probe_generation, tuple(cases), user=user,
                              namespace=lambda f: getattr(f, "__globals__", {}),
                              prerequisites=(("sample_next_token", 3,
                                              (sampling_greedy, sampling_distribution, sampling_top_p)),))


generate_greedy = _generate_check("generate_greedy", (GREEDY_GENERATION,))
generate_sampling = _generate_check("generate_sampling", SAMPLED_GENERATIONS)
generate_hidden = _generate_check("generate_hidden", HIDDEN_GENERATIONS)
generate_cached = _generate_check("generate_cached", CACHED_GENERATIONS, "generate_cached")
generate_cached_hidden = _generate_check("generate_cached_hidden", [replace(g, key=f"{g.key}c", use_cache=True)
                                                                    for g in HIDDEN_GENERATIONS], "generate_cached")
