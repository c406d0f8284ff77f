"""Whole language models, with and without a cache: the judge side of course/checks/kinds.py's ``ModelRun``, for
assignments 08 (LanguageModel, CachedLanguageModel) and 09 (the modern decoder).

A :class:`ModelOracle` writes the model out (compute: tokens and an optional cache -> logits and the new cache), and
each typical mistake is another compute (the variant's model, run with the same weights); :func:`expect_model` judges
one call (its parts, its logits, causality), :func:`expect_model_gradients` its gradients too, and
:func:`expect_model_steps` the same tokens fed in chunks with the cache. The generic kinds (calls, modules, blocks,
properties) are in course/judges/kinds.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import torch
from torch import nn

from course.checks import modules
from course.checks.compare import (
    Mistake,
    expect_close_batch,
    expect_tuple,
    fail,
    matches_any,
    output,
    tensor,
    value_kind,
)
from course.checks.evidence import Evidence, fact_key, item_key
from course.checks.kinds import ModelRun, chunk_bounds
from course.judges.kinds import Tensors, expect_causal
from course.judges.variants import Variants, defined, reference_source

#: tokens (b, t) after a cache (None: nothing cached) with the weights -> (logits (b, t, vocab), the new cache)
Compute = Callable[..., tuple[torch.Tensor, list]]


def variant(written: Variants, mistake: str, owner: str, model: str = "", block: tuple[str, str] | None = None,
            cached: bool = True) -> tuple[Mistake, Compute]:
    """(the mistake, the compute of its model): the reference's class owner as the variant `model` writes it ("": the
    reference's own), calling block = (a variant, the class it writes) where given, run with the weights w lent to
    its parameters; cached: given the cache and use_cache=True, else the tokens alone (its cache then [])."""

    def compute(w: Tensors, case: Any, tokens: torch.Tensor, cache: list | None = None) -> tuple[torch.Tensor, list]:
        args, keywords = case.constructor()
        built, places = _model_of(written, owner, model, block, args, tuple(keywords.items()))
        if len(w) != len(places):
            raise ValueError(f"the weights {sorted(w)} are not the parameters of {mistake}'s {owner}")
        for name, module, attribute in places:  # lent by assignment (gradients reach w), which costs less than
            module._parameters[attribute] = w[name]  # torch.func.functional_call's bookkeeping, a small model's forward
        return built(tokens, cache=cache, use_cache=True) if cached else (built(tokens), [])

    return written[mistake], compute


@lru_cache(maxsize=256)
def _model_of(written: Variants, owner: str, model: str, block: tuple[str, str] | None, args: tuple, keywords: tuple
              ) -> tuple[nn.Module, tuple[tuple[str, nn.Module, str], ...]]:
    """The model of :func:`variant`, built once per constructor's arguments on the CPU (its buffers computed; the
    weights it draws never used, the global generator left as it was), and where each parameter sits: (name, module,
    attribute)."""
    code = {v.name: v.code for v in written.written}
    with torch.random.fork_rng(devices=[]):
        built = defined(code[model] if model else reference_source(written.reference, owner), owner, written.reference,
                        ((code[block[0]], block[1]),) if block else ())(*args, **dict(keywords))
    return built, tuple((name, built.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2])
                        for name, _ in built.named_parameters())


@dataclass(frozen=True)
class ModelMistakes:
    """A model's typical mistakes: as the computes of their models, and those named when a call shows them."""

    logits: tuple[tuple[Mistake, Compute], ...] = ()  # they change the logits of a call without a cache
    cached: tuple[tuple[Mistake, Compute], ...] = ()  # they change only calls given a cache
    reads_future: Mistake | None = None  # named when changing later tokens changes earlier logits
    returns_tuple: Mistake | None = None  # named when a call without use_cache returns a tuple
    cache_differs: Mistake | None = None  # right logits with a cache, but not the oracle's cache
    bad_cache: Mistake | None = None  # not a list of (keys, values) pairs of the right shapes
    not_returned: Mistake | None = None  # use_cache=True gave no (logits, cache) pair
    errors: tuple[tuple[str, int, Mistake], ...] = ()  # (a phrase of PyTorch's error, the least cache, its mistake)


@dataclass(frozen=True)
class ModelOracle:
    """A language model, tokens (b, t) -> logits (b, t, vocab) ((logits, cache) with use_cache=True): weights(ev, run)
    judges its structure, compute(w, case, tokens, cache=None) writes it out."""

    owner: str  # the student's class, e.g. "LanguageModel"
    weights: Callable[[Evidence, Any], dict[str, torch.Tensor]]
    compute: Compute
    name: str  # the oracle in words, for gradient messages
    hint: str  # how the logits are computed
    causal: str  # the advice when changing later tokens changes earlier logits
    mistakes: ModelMistakes = ModelMistakes()


def expect_blocks(ev: Evidence, key: str, owner: str, depth: int, parts: Sequence[tuple[str, str, str]],
                  mistakes: Sequence[Mistake | None] = (None, None, None)) -> list[dict]:
    """The facts of the model's depth separate blocks in an nn.ModuleList (mistakes: a plain list, another count, one
    block shared), each with the parts (name, kind, how to create it)."""
    __tracebackhide__ = True
    blocks = modules.expect_part(ev, key, owner, "blocks", ("ModuleList", "Sequential", "list", "tuple"),
                                 "nn.ModuleList of `depth` blocks")
    wrong = (blocks.get("kind") in ("list", "tuple"), blocks.get("count") != depth, blocks.get("distinct") != depth)
    for mistake in (m for m, bad in zip(mistakes, wrong, strict=True) if bad):
        fail(f"{owner}.blocks is a {str(blocks.get('kind'))[:60]} of {blocks.get('count')} blocks "
             f"({blocks.get('distinct')} distinct) for depth={depth}: " + (mistake.explanation if mistake else
             f"it should be an nn.ModuleList of {depth} separate blocks."), mistake=mistake)
    return [{name: modules.expect_part(ev, f"{key}.blocks.{i}", f"{owner}.blocks[{i}]", name, kind, how)
             for name, kind, how in parts} for i in range(depth)]


def model_logits(ev: Evidence, oracle: ModelOracle, key: str, case: Any, what: str,
                 t: int | None = None) -> torch.Tensor:
    """The logits (b, t, vocab) recorded under key (t: the case's)."""
    __tracebackhide__ = True
    b, vocab, k, t = case.b, case.vocab, case.k, case.t if t is None else t
    if (returns_tuple := oracle.mistakes.returns_tuple) is not None and value_kind(ev, key) == "tuple":
        fail(f"{what} returned a tuple: {returns_tuple.explanation}", mistake=returns_tuple)
    return output(ev, key, what=what, shape=(b, t, vocab), shape_hints={
        (b, t, k): "Those are the states of the last block: apply the final norm and to_logits.",
        (b, vocab): "One row per sequence: return the logits of EVERY position, (b, t, vocab_size)."})


def run_steps(compute: Compute, w: Tensors, case: Any, tokens: torch.Tensor, chunks: tuple[int, ...]
              ) -> tuple[list[torch.Tensor], list[list]]:
    """The logits of each chunk of tokens (b, t) fed to compute with the cache before it, and the cache after it."""
    with torch.no_grad():
        cache, logits, caches = None, [], []
        for start, end in chunk_bounds(chunks):
            out, cache = compute(w, case, tokens[:, start:end], cache)
            logits.append(out)
            caches.append(cache)
    return logits, caches


class Lazily:
    """An iterable made by make() the first time it is iterated: typical mistakes' outputs, which a right answer
    never needs."""

    def __init__(self, make: Callable[[], Iterable]) -> None:
        self.make = make

    def __iter__(self) -> Iterator:
        return iter(self.make())


def expect_model(ev: Evidence, run: ModelRun, oracle: ModelOracle, *, exact: bool = False
                 ) -> tuple[dict[str, torch.Tensor], torch.Tensor, tuple[Mistake | None, Compute]]:
    """The run's model has its parts and gives the oracle's logits or a typical mistake's (exact: the oracle's);
    causal where run.changed. Returns (weights, logits, (the typical mistake they show or None, its compute))."""
    __tracebackhide__ = True
    case, tokens, owner = run.case, run.tokens(), oracle.owner
    what, label = f"{owner}.forward(tokens)", f"{case.call}, tokens {tuple(tokens.shape)}"
    w = oracle.weights(ev, run)
    logits = model_logits(ev, oracle, run.logits, case, what)
    with torch.no_grad():
        expected = oracle.compute(w, case, tokens)[0]

    @cache
    def mistaken() -> list[tuple[Mistake, torch.Tensor]]:  # only once the logits are wrong somewhere, and once
        with torch.no_grad():
            return [(m, compute(w, case, tokens)[0]) for m, compute in oracle.mistakes.logits]

    wrong = Lazily(mistaken)
    right = matches_any(logits, [expected], ev.device)
    found = [] if right else [(m, sw) for (m, sw), (_, out) in zip(oracle.mistakes.logits, wrong, strict=True)
                              if matches_any(logits, [out], ev.device)]
    for j in run.changed:
        expect_causal(ev, logits, model_logits(ev, oracle, fact_key(run.model, f"changed{j}"), case, what), j,
                      f"{owner} is not causal", wrong, oracle.causal, oracle.mistakes.reads_future)
    if not right and not found:
        fail(f"{owner} has the right parts, but it is not a language model with the check's weights: {oracle.hint}",
             expected[0], logits[0], case=f"{label}, sequence 0")
    if exact:
        expect_close_batch(logits, expected, what=what, device=ev.device, mistakes=wrong, otherwise=oracle.hint,
                           case=label)
    return w, logits, found[0] if found else (None, oracle.compute)


def expect_model_gradients(ev: Evidence, run: ModelRun, oracle: ModelOracle, *, exact: bool = False
                           ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """:func:`expect_model`, then, where run.upstream, autograd's gradients through the model whose logits the run's
    are (the oracle's, or the typical mistake's they show). Returns (weights, logits)."""
    __tracebackhide__ = True
    w, logits, (because, compute) = expect_model(ev, run, oracle, exact=exact)
    if run.upstream:
        case, tokens = run.case, run.tokens()
        modules.expect_differentiable(ev, run.logits, f"{oracle.owner}.forward(tokens)")
        gradients = modules.autograd(lambda leaves: compute(leaves, case, tokens)[0], w, {}, run.upstream_gradient())
        modules.expect_gradients(ev, gradients, owner=oracle.owner, case=f"{case.call}, tokens {tuple(tokens.shape)}",
                                 because=because, oracle=oracle.name)
    return w, logits


def expect_model_steps(ev: Evidence, run: ModelRun, oracle: ModelOracle, w: Tensors, full: torch.Tensor, heads: int,
                       *, caches: bool = True) -> None:
    """The run's chunks fed with the cache (<steps><c>) give the logits of one call (full) and the oracle's cache of
    `heads` heads (caches=False: its shapes), else the cache mistake (or a raised error's) is named, or differs."""
    __tracebackhide__ = True
    case, tokens, chunks, owner, mistakes = run.case, run.tokens(), run.chunks, oracle.owner, oracle.mistakes
    differs, bad_cache, not_returned = mistakes.cache_differs, mistakes.bad_cache, mistakes.not_returned
    bounds, steps, explained = chunk_bounds(chunks), [], f": {bad_cache.explanation}" if bad_cache else "."
    for step, (start, end) in ((f"{run.steps}{c}", bound) for c, bound in enumerate(bounds)):
        message = str(ev.facts[step].get("message"))[:300] if value_kind(ev, step) == "raised" else ""
        for mistake in (m for phrase, after, m in mistakes.errors if phrase in message and start >= after):
            fail(f"{owner}.forward, with a cache of {start} positions, raised: {message}\n\nThe likely cause: "
                 f"{mistake.explanation}", mistake=mistake)
        what = f"{owner}.forward(tokens[:, {start}:{end}], cache={'...' if start else 'None'}, use_cache=True)"
        expect_tuple(ev, step, what, f"{what} should return a pair, (logits, cache)"
                     + (f": {not_returned.explanation}" if not_returned else "."), 2, not_returned)
        out = model_logits(ev, oracle, item_key(step, 0), case, what, end - start)
        expect_tuple(ev, item_key(step, 1), what, f"The cache {what} returned should be a list of {case.depth} (keys, "
                     f"values) pairs, one per block{explained}", case.depth, bad_cache)
        shape, cache = (case.b, heads, end, case.k // case.heads), []
        for i in range(case.depth):
            expect_tuple(ev, f"{step}.1.{i}", what, f"Entry {i} of the cache is not a (keys, values) pair{explained}",
                         2, bad_cache)
            cache.append((tensor(ev, f"{step}.1.{i}.0"), tensor(ev, f"{step}.1.{i}.1")))
            for name, value in zip(("keys", "values"), cache[-1], strict=True):
                if value is None or tuple(value.shape) != shape:
                    got = "are not a tensor" if value is None else f"have shape {tuple(value.shape)}"
                    fail(f"The cached {name} of block {i} {got} after {end} positions; expected {shape}{explained}",
                         mistake=bad_cache)
        steps.append((out, cache))

    def same(logits: list[torch.Tensor], kept: list[list]) -> bool:
        """The steps gave these logits and (unless not caches) these caches, a list of (keys, values) per block."""
        pairs = [(got, want) for (out, cache), wanted, expected in zip(steps, logits, kept, strict=True)
                 for got, want in ((out, wanted), *(zip(sum(cache, ()), sum(expected, ()), strict=True) if caches
                                                    else ()))]
        return all(matches_any(got, [want], ev.device) for got, want in pairs)

    if same([full[:, start:end] for start, end in bounds], run_steps(oracle.compute, w, case, tokens, chunks)[1]):
        return
    named = next((m for m, compute in mistakes.cached if same(*run_steps(compute, w, case, tokens, chunks))), None)
    bad = next(((s, e, out) for (s, e), (out, _) in zip(bounds, steps, strict=True)
                if not matches_any(out, [full[:, s:e]], ev.device)), None)
    if named is None and bad is None:
        fail("The logits with a cache are right, but the cache does not hold the keys and values the attention "
             "computes (each block's keys and values, heads split), in time order.", mistake=differs)
    start, end, logits = bad or (*bounds[-1], steps[-1][0])
    fail(f"{owner} with a cache is not what was asked: " + (named.explanation if named else "with a cache of "
         f"{start} positions the logits of tokens {start}-{end - 1} are not those of one call without a cache. "
         "Positions continue after the cache, the cached keys and values go in front of the new ones, and the "
         "causal mask is shifted by the cache."), full[0, start:end, 0], logits[0, :, 0], mistake=named or differs,
         case=f"first logit of sequence 0 at positions {start}-{end - 1}: without the cache, and with it")

