"""Checks declared, not written: the probe side of the check kinds.

A check that calls the student's function on a table of inputs is one declaration::

    attention_weights_oracle = calls("attention_weights_oracle", shapes("w", SHAPES, seed=100))

and one that builds the student's module with the check's weights and runs it on cases is another::

    qkv_oracle = builds_and_runs("self_attention_qkv_oracle", (Runs(Built("module0", (3,), 600), (case,)), ...),
                                 facts=modules.sharing(ROLES))

Each :class:`Case` owns its evidence key, how it draws its inputs (from seeds, which grading salts) and how a
failure names it; ``secret`` cases are drawn only under grading, ``upstream`` cases also record the gradient of
sum(output · upstream) with respect to every input (in a check declared with ``calls_backward`` or
``builds_and_runs_backward``, so that a check without one never reads the gradient code). The judge side
(course/judges/kinds.py) is declared from the same cases — ``against(check, oracle)``, ``against_forward(check,
oracle)``, ... — so probe and judge agree on keys, seeds and shapes by construction, and nothing here computes an
answer. A check's judges are those of the module that binds it under its name (course/checks/check.py's
``Check.module``): course/judges/<that module>.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from typing import Any

import torch

from course.checks import modules
from course.checks.check import Check, Prerequisite, noting_prerequisites, record_prerequisites
from course.checks.compare import generator, randn
from course.checks.evidence import Evidence, Recorder, fact_key
from course.checks.seeds import grading

Inputs = Callable[[], Mapping[str, torch.Tensor]]


@dataclass(frozen=True)
class Case:
    """One call of the student's code: output recorded under key, inputs() passed positionally in their order."""

    key: str
    inputs: Inputs
    label: str  # how a failure names the case, e.g. "x of shape (2, 4, 3)"
    secret: bool = False  # drawn only under grading
    upstream: Callable[[], torch.Tensor] | None = None  # also record d sum(y · upstream) / d input as grad.<name>


def drawn(cases: tuple[Any, ...]) -> tuple[Any, ...]:
    """The cases of this run: the secret ones (of any kind: those whose `secret` is true) only under grading."""
    return tuple(case for case in cases if not getattr(case, "secret", False) or grading())


def _random(shape: tuple[int, ...], seed: int) -> dict[str, torch.Tensor]:
    return {"x": randn(*shape, seed=seed)}


def random_case(key: str, shape: tuple[int, ...], seed: int, *, secret: bool = False,
                upstream: tuple[tuple[int, ...], int] | None = None) -> Case:
    """A case with one random input x of shape, drawn from seed; upstream: (shape, seed) of a random upstream
    gradient."""
    grad = partial(randn, *upstream[0], seed=upstream[1]) if upstream else None
    return Case(key, partial(_random, tuple(shape), seed), f"x of shape {tuple(shape)}", secret, grad)


def shapes(prefix: str, table: tuple[tuple[int, ...], ...], seed: int) -> tuple[Case, ...]:
    """One random case per shape of table, keyed prefix0, prefix1, ..., drawn from seed, seed + 1, ..."""
    return tuple(random_case(f"{prefix}{i}", shape, seed + i) for i, shape in enumerate(table))


def given(key: str, make: Callable[[], torch.Tensor], label: str) -> Case:
    """A case with one input x worked out in the notebook (make returns it)."""
    return Case(key, lambda: {"x": make()}, label)


def random_mask(shape: tuple[int, ...], seed: int, forbidden: tuple[tuple[int, ...], ...] = (),
                share: float = 0.6) -> torch.Tensor:
    """A random mask (True = allowed, about share of it) in which every query may attend to some key, then False at
    the indices forbidden (a query's whole row, or one entry)."""
    mask = torch.rand(*shape, generator=generator(seed)) < share
    tq, tk = shape[-2], shape[-1]
    mask[..., torch.arange(tq), torch.arange(tq) % tk] = True  # every query may attend to at least one key
    for index in forbidden:
        mask[index] = False
    return mask


@dataclass(frozen=True)
class Mask:
    """A mask of a module case (True = allowed): "causal" (tq, tk), True where key j <= query i; "batched causal"
    (b, tq, tk); "random" (b, tq, tk) drawn from seed, every query attending to some key; or "padding" (b, 1, tk)
    hiding the keys of each sequence past its length in lengths."""

    kind: str
    lengths: Sequence[int] = ()
    seed: int = 0

    def of(self, b: int, tq: int, tk: int) -> torch.Tensor:
        causal = torch.ones(tq, tk, dtype=torch.bool).tril()  # (tq, tk)
        if self.kind == "causal":
            return causal
        if self.kind == "batched causal":
            return causal.expand(b, tq, tk).clone()  # (b, tq, tk)
        if self.kind == "random":
            return random_mask((b, tq, tk), self.seed, share=0.5)  # (b, tq, tk)
        return (torch.arange(tk) < torch.tensor(self.lengths)[:, None])[:, None, :]  # (b, 1, tk): padding


@dataclass(frozen=True)
class Shift:
    """Position `at` of x shifted by `by` after x is drawn: what comes before it must not change under a causal
    mask."""

    at: int
    by: float = 3.0


def module_inputs(shape: tuple[int, int, int], seed: int, *, mask: Mask | None = None,
                  context: tuple[int, int] | None = None, scale: float = 1.0, shift: float = 0.0,
                  order: Sequence[int] = (), changed: Shift | None = None) -> dict:
    """The inputs of forward(x, context=..., mask=...): x (b, t, k) = scale · randn + shift drawn from seed, its
    positions in order if given, then changed if given; a context (b, tk, k) drawn from seed s if context = (tk, s);
    and the mask, over the context's keys if any."""
    b, t, k = shape
    x = scale * randn(*shape, seed=seed) + shift
    x = x[:, list(order)] if order else x
    if changed is not None:
        x[:, changed.at] += changed.by  # only that position differs
    inputs = {"x": x} | ({} if context is None else {"context": randn(b, context[0], k, seed=context[1])})
    if mask is not None:
        inputs["mask"] = mask.of(b, t, t if context is None else context[0])
    return inputs


def module_case(key: str, shape: tuple[int, int, int], seed: int, label: str = "", *, secret: bool = False,
                upstream: int | None = None, **options: Any) -> Case:
    """forward on module_inputs(shape, seed, **options) (mask: a Mask, or the kind of one that needs no lengths nor
    seed), named label or else by its inputs' shapes, e.g. "x of shape (2, 5, 4), causal mask of shape (5, 5)";
    upstream: the seed of a random upstream gradient of x's shape."""
    if isinstance(options.get("mask"), str):
        options["mask"] = Mask(options["mask"])
    inputs = partial(module_inputs, tuple(shape), seed, **options)
    found = inputs()
    words = [f"{name} of shape {tuple(value.shape)}" for name, value in found.items() if name != "mask"]
    words.append(f"{options['mask'].kind} mask of shape {tuple(found['mask'].shape)}" if "mask" in found else "no mask")
    grad = None if upstream is None else partial(randn, *shape, seed=upstream)
    return Case(key, inputs, label or ", ".join(words), secret, grad)


def _on(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor | torch.nn.Module) else value


def _probe(cases: tuple[Case, ...], keywords: tuple[str, ...], backward: Callable | None, student: Any,
           rec: Recorder) -> None:
    for case in drawn(cases):
        inputs = {name: _on(value, rec.device) for name, value in case.inputs().items()}
        if case.upstream is not None:
            inputs = {name: value.requires_grad_(True) for name, value in inputs.items()}
        positional = [value for name, value in inputs.items() if name not in keywords]
        y = rec.call(case.key, student, *positional, **{name: inputs[name] for name in keywords if name in inputs})
        if case.upstream is not None:
            backward(rec, y, case.upstream(), inputs, key=case.key)


class CallCheck(Check):
    """A check that records the student's function on each of its cases (and nothing else); backward(rec, y,
    upstream, inputs, key=): how a case with an upstream gradient records the gradients (:func:`calls_backward`)."""

    def __init__(self, name: str, cases: tuple[Case, ...], keywords: tuple[str, ...] = (),
                 backward: Callable | None = None):
        if backward is None and any(case.upstream is not None for case in cases):
            raise ValueError(f"{name}: a case with an upstream gradient is declared with calls_backward")
        super().__init__(name, partial(_probe, cases, keywords, backward))
        self.cases = cases


def calls(name: str, cases: tuple[Case, ...], *, keywords: tuple[str, ...] = ()) -> CallCheck:
    """The check `name`: the student's function called on each case, its inputs in their
    order; tensors go to the device, settings that are not tensors (e.g. split_heads(x, heads): {"x": x,
    "heads": 3}) are passed as they are, and the inputs named in keywords by name when the case has them (e.g.
    fn(q, k, v) or fn(q, k, v, mask=m) with keywords ("mask",)). One tensor per case is judged by
    course/judges/kinds.against; other results (a pair) by hand from check.cases."""
    return CallCheck(name, tuple(cases), tuple(keywords))


def calls_backward(name: str, cases: tuple[Case, ...]) -> CallCheck:
    """:func:`calls`, where a case with an upstream gradient also records the gradients of sum(output · upstream)
    its inputs (tensors) receive (modules.backward). Judged by course/judges/kinds.against_gradients."""
    return CallCheck(name, tuple(cases), backward=modules.backward)


# ------------------------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class Built:
    """A module of a check: cls(*args), its structure recorded under key, the check's weights (seed) loaded."""

    key: str
    args: tuple[Any, ...]
    seed: int


@dataclass(frozen=True)
class Runs:
    """A module built once (its structure recorded under module.key, the check's weights loaded), then called on
    each case in order (:func:`call_module`): without autograd, except a case with an upstream gradient, whose
    floating inputs and the module's parameters then have their gradients recorded (one such case per module: the
    gradients are kept as grad.<name>)."""

    module: Built
    cases: tuple[Case, ...]
    setup: Callable[[Any], None] | None = None  # setup(module), without autograd, once built: weights set by hand


def call_module(rec: Recorder, key: str, module: Any, inputs: Mapping[str, torch.Tensor]) -> Any:
    """Record module(first input, the others by name) under key, e.g. forward(x, context=c, mask=m): a case passes
    only the keyword inputs it has, so forward(x, context=None, mask=None) keeps its defaults for the others."""
    first, *others = inputs
    return rec.call(key, module, inputs[first], **{name: inputs[name] for name in others})


def _probe_runs(runs: tuple[Runs, ...], options: Mapping[str, Any], backward: Callable | None,
                observe: Callable[[Recorder, Any], None] | None, cls: Any, rec: Recorder) -> None:
    for item in runs:
        cases = drawn(item.cases)
        if not cases:
            continue
        built = item.module
        module = modules.build(rec, built.key, cls, *built.args, seed=built.seed, **options)
        if module is None:
            return  # the judge says why from the structure recorded under built.key
        if item.setup is not None:
            with torch.no_grad():
                item.setup(module)
        for case in cases:
            inputs = {name: value.to(rec.device) for name, value in case.inputs().items()}
            if case.upstream is None:
                with torch.no_grad():
                    call_module(rec, case.key, module, inputs)
                continue
            leaves = {name: value.requires_grad_(True) for name, value in inputs.items() if value.is_floating_point()}
            y = call_module(rec, case.key, module, inputs)
            if observe is not None:
                observe(rec, y)
            backward(rec, y, case.upstream(), leaves, module, case.key)


class RunsCheck(Check):
    """A check that builds the student's module once per :class:`Runs` and records what it computes on its cases;
    backward (:func:`builds_and_runs_backward`): how a case with an upstream gradient records the gradients."""

    def __init__(self, name: str, runs: tuple[Runs, ...], options: Mapping[str, Any], backward: Callable | None = None,
                 observe: Callable[[Recorder, Any], None] | None = None):
        if backward is None and any(case.upstream is not None for item in runs for case in item.cases):
            raise ValueError(f"{name}: a case with an upstream gradient is declared with builds_and_runs_backward")
        super().__init__(name, partial(_probe_runs, runs, dict(options), backward, observe))
        self.runs = runs


def builds_and_runs(name: str, runs: tuple[Runs, ...], **options: Any) -> RunsCheck:
    """The check `name`: for each Runs, the student's module built (options go to modules.build: facts, gains,
    train, ...) and called on its cases without autograd, inputs after the first by name."""
    return RunsCheck(name, tuple(runs), options)


def builds_and_runs_backward(name: str, runs: tuple[Runs, ...], *,
                             observe: Callable[[Recorder, Any], None] | None = None, **options: Any) -> RunsCheck:
    """:func:`builds_and_runs`, where a case with an upstream gradient runs with autograd and records the gradients
    of sum(output · upstream) its floating inputs and the module's parameters receive (modules.backward), judged by
    against_forward or against_block given gradients= (course/judges/kinds.py). observe(rec, y): further facts
    recorded from that output first (e.g. the size of its graph)."""
    return RunsCheck(name, tuple(runs), options, modules.backward, observe)


# ------------------------------------------------------------------------------------------- token losses


def _one() -> torch.Tensor:
    return torch.ones(())


def loss_case(key: str, inputs: Callable[[], Mapping[str, Any]], label: str, *, secret: bool = False,
              gradients: bool = False) -> Case:
    """A case of a loss check (:func:`losses`): inputs() gives the loss function's arguments in order, by name:
    tensors, a model (an nn.Module) and plain numbers such as the padding id. gradients: also record the gradient
    of the loss with respect to the floating tensor inputs and the model's parameters (its upstream is 1)."""
    return Case(key, inputs, label, secret, _one if gradients else None)


def _probe_losses(cases: tuple[Case, ...], student: Any, rec: Recorder) -> None:
    for i, case in enumerate(cases):
        if case.secret and not grading():
            continue
        inputs = {name: _on(value, rec.device) for name, value in case.inputs().items()}
        if case.upstream is None:
            rec.call(case.key, student, *inputs.values())
            continue
        leaves = {f"{name}{i}": value.requires_grad_(True) for name, value in inputs.items()
                  if isinstance(value, torch.Tensor) and value.is_floating_point()}
        if modules.record_backward(rec, case.key, student, *inputs.values(), loss=torch.sum, inputs=leaves):
            for model in (value for value in inputs.values() if isinstance(value, torch.nn.Module)):
                modules.record_gradients(rec, model)


class LossCheck(Check):
    """A check that records the loss the student's function gives on each of its cases (and its gradients)."""

    def __init__(self, name: str, cases: tuple[Case, ...]):
        super().__init__(name, partial(_probe_losses, cases))
        self.cases = cases


def losses(name: str, cases: tuple[Case, ...]) -> LossCheck:
    """The check `name`: the student's loss function called on each case (:func:`loss_case`),
    a case with gradients backpropagating the loss. The gradient of the floating input `name` of the check's i-th
    case is kept as grad.<name><i>, those of a model's parameters as grad.<parameter> (one such case per check).
    Judged by course/judges/kinds.py's ``against_loss``."""
    return LossCheck(name, tuple(cases))


# ------------------------------------------------------------------------------------------- properties written out


class PropertyCheck(Check):
    """A check whose probe is written out, probe(cases, student, rec), running the student's code on the cases
    declared with it (of any kind: model runs, sampling calls, generations, ...) and recording what a property needs;
    its judge reads the very same cases (check.cases), e.g. with course/judges/kinds.py's ``each_case``."""

    def __init__(self, name: str, probe: Callable[..., None], cases: tuple[Any, ...]):
        super().__init__(name, partial(probe, cases))
        self.cases = cases


class AfterPrerequisites(PropertyCheck):
    """A PropertyCheck of code built from earlier exercises (prerequisites): the probe also records their checks on
    the parts of those names in namespace(student) (the notebook's globals), and a failure notes which of them fail
    their own tests (user: what the tested code is called in that note)."""

    def __init__(self, name: str, probe: Callable[..., None], cases: tuple[Any, ...], *,
                 prerequisites: Sequence[Prerequisite], namespace: Callable[[Any], Any], user: str):
        super().__init__(name, probe, cases)
        self.prerequisites, self._namespace, self._user = tuple(prerequisites), namespace, user

    def probe(self, student: Any, rec: Recorder) -> None:
        super().probe(student, rec)
        record_prerequisites(rec, self._namespace(student), self.prerequisites)

    def _found_judge(self) -> Callable[[Evidence], None]:
        return noting_prerequisites(super()._found_judge(), self.prerequisites, self._user)


def property_check(name: str, probe: Callable[..., None], cases: tuple[Any, ...]) -> PropertyCheck:
    """The check `name`: probe(cases, student, rec), written out, on the cases declared here."""
    return PropertyCheck(name, probe, tuple(cases))


# ------------------------------------------------------------------------------------------- language models


def chunk_bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) of each chunk of these sizes."""
    ends = list(accumulate(sizes))
    return list(zip([0, *ends][:-1], ends, strict=True))


def model_facts(model: Any, parts: Sequence[str], block_parts: Sequence[str], kinds: Sequence) -> dict:
    """The model's named parts (the blocks' count and how many are distinct) and each block's (blocks.<i>.parts)."""
    facts = {"parts": modules.part_facts(model, parts, kinds)}
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, (torch.nn.ModuleList, torch.nn.Sequential, list, tuple)):
        items = list(blocks)[:16]
        facts["parts"]["blocks"].update(count=len(blocks), distinct=len({id(b) for b in items}))
        facts.update({f"blocks.{i}.parts": modules.part_facts(b, block_parts, kinds) for i, b in enumerate(items)})
    return facts


@dataclass(frozen=True)
class RunKeys:
    """Where a :class:`ModelRun` is recorded: the model it builds (model, and <model>.changed<j>, <model>.too_long),
    its logits, and its calls with the cache (<steps><c>)."""

    model: str = "model"
    logits: str = "logits"
    steps: str = "step"


@dataclass(frozen=True)
class ModelRun:
    """The language model of the case (b sequences of t tokens of vocab, max_len; constructor(): the model's
    arguments; call: that call in words) built under keys.model with the weights of seed, run on random tokens (b, t)
    drawn from seed + 10 as :func:`probe_models` says (upstream: the seed of an upstream gradient of the logits;
    secret: drawn only under grading)."""

    case: Any
    seed: int
    keys: RunKeys = RunKeys()
    changed: tuple[int, ...] = ()
    upstream: int | None = None
    chunks: tuple[int, ...] = ()
    too_long: bool = False
    secret: bool = False

    model = property(lambda self: self.keys.model)  # its keys, read as the run's own
    logits = property(lambda self: self.keys.logits)
    steps = property(lambda self: self.keys.steps)

    def tokens(self) -> torch.Tensor:
        return torch.randint(self.case.vocab, (self.case.b, self.case.t), generator=generator(self.seed + 10))

    def upstream_gradient(self) -> torch.Tensor:
        return randn(self.case.b, self.case.t, self.case.vocab, seed=self.upstream)


def probe_models(runs: tuple[ModelRun, ...], cls: Callable, rec: Recorder, *,
                 facts: Callable[[Any], Mapping[str, Any]],
                 backward: Callable[[Recorder, ModelRun, Any, torch.Tensor], None] | None = None) -> None:
    """The probe of a property check of language models: for each drawn run, cls(*args, **keywords) as the case's
    constructor() returns them, built with the run's weights (facts: what to record about it; one that cannot be
    built ends the probe); where run.upstream, the gradients of its logits as backward(rec, run, model, tokens) records
    them (:func:`model_backward`; a check without such a run needs none), else the logits; then, without autograd, on
    the tokens changed from each j in run.changed on (<model>.changed<j>), chunk by chunk with the cache the call
    before returned (<steps><c>), and, where run.too_long, on max_len + 1 tokens (<model>.too_long)."""
    for run in drawn(runs):
        args, keywords = run.case.constructor()
        model = modules.build(rec, run.model, cls, *args, seed=run.seed, facts=facts, train=False, **keywords)
        if model is None:
            return
        tokens = run.tokens()
        if run.upstream:
            backward(rec, run, model, tokens)
        with torch.no_grad():
            if not run.upstream:
                rec.call(run.logits, model, tokens.to(rec.device))
            for j in run.changed:
                changed = tokens.clone()
                changed[:, j:] = (changed[:, j:] + 1 + torch.arange(tokens.shape[1] - j)) % run.case.vocab
                rec.call(fact_key(run.model, f"changed{j}"), model, changed.to(rec.device))
            cache = None
            for c, (start, end) in enumerate(chunk_bounds(run.chunks)):
                result = rec.call(f"{run.steps}{c}", model, tokens[:, start:end].to(rec.device), cache=cache,
                                  use_cache=True)
                if not isinstance(result, (tuple, list)) or len(result) != 2:
                    break
                cache = result[1]
            if run.too_long:
                too_long = tokens.new_zeros(1, run.case.max_len + 1).to(rec.device)
                rec.call(fact_key(run.model, "too_long"), model, too_long)


def model_backward(rec: Recorder, run: ModelRun, model: Any, tokens: torch.Tensor, *, train: bool = False) -> None:
    """The gradients of sum(logits · run's upstream gradient) on tokens (train: in training mode), as
    :func:`probe_models` records them for a run with an upstream."""
    model.train(train)
    upstream = run.upstream_gradient()
    modules.record_backward(rec, run.logits, model, tokens.to(rec.device),
                            loss=lambda y: (y * upstream.to(y.device)).sum())
