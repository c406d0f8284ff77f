"""Checks declared, not written: the judge side of the check kinds (probe side: course/checks/kinds.py).

An :class:`Oracle` says what the student's function should give and how a typical mistake looks; one line then
judges a declared check from the very cases its probe drew::

    against(attention_weights_oracle, WEIGHTS, passed="Random inputs of several shapes against PyTorch's ...")

Every case's output is compared with the oracle (its shape first, with hints for the shapes of typical confusions),
a match with a typical mistake's output names it, and a case that recorded gradients has them compared with autograd
through the oracle. Cases worked by hand in the notebook compare with the hand-worked answer instead
(``answers``), the secret case with the oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks.compare import (
    Mistake,
    OnGpus,
    expect_close,
    expect_close_batch,
    expect_on_gpus,
    expect_tuple,
    fail,
    matches_any,
    output,
    tensor,
    value_kind,
)
from course.checks.evidence import Evidence, fact_key, item_key
from course.checks.kinds import (
    Built,
    CallCheck,
    Case,
    LossCheck,
    ModelRun,
    PropertyCheck,
    Runs,
    RunsCheck,
    chunk_bounds,
    drawn,
)
from course.judges import judge
from course.judges.oracles import dense

Tensors = Mapping[str, torch.Tensor]


def declared(check: Any, judged: Callable[[Evidence], None], passed: str) -> Callable[[Evidence], None]:
    """Register judged as the judge of check (a declared check of course/checks/kinds.py), in the judges module of
    check's assignment; passed: the line a student reads when the test passes."""
    judged.__module__ = f"course.judges.{check.module}"
    judged.__doc__ = judged.passed = passed
    return judge(check.name)(judged)


def _none(**_: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    return []


@dataclass(frozen=True)
class Oracle:
    """What the student's function must compute, and how its typical mistakes come out, as functions of the
    named inputs of a case."""

    what: str  # the call as a student reads it, e.g. "attention_weights(x)"
    compute: Callable[..., torch.Tensor]
    name: str  # the oracle in words, for gradient messages, e.g. "F.scaled_dot_product_attention"
    shape: Callable[..., tuple[int, ...]]  # the output's shape
    mistakes: Callable[..., Iterable[tuple[Mistake, torch.Tensor]]] = _none  # tried in order, lazily
    shape_hints: Callable[..., dict[tuple[int, ...], str | Mistake]] = lambda **_: {}
    otherwise: str = ""  # the advice when the output matches neither the oracle nor a mistake
    gradient_hints: Mapping[str, str] = field(default_factory=dict)
    hint: str = ""  # the advice when the output has the wrong shape (or the code raised)


def expect_case(ev: Evidence, case: Case, oracle: Oracle, expected: torch.Tensor | None = None) -> torch.Tensor:
    """The output recorded for case against expected (default: the oracle on the case's inputs), then its gradients
    against autograd through the oracle; returns the output."""
    inputs = dict(case.inputs())
    y = output(ev, case.key, what=oracle.what, shape=oracle.shape(**inputs), shape_hints=oracle.shape_hints(**inputs),
               hint=oracle.hint)
    want = oracle.compute(**inputs) if expected is None else expected
    expect_close(y, want, what=oracle.what, device=ev.device, mistakes=oracle.mistakes(**inputs), case=case.label,
                 otherwise=oracle.otherwise)
    if case.upstream is not None:
        modules.expect_differentiable(ev, case.key, oracle.what)
        grads = modules.autograd(lambda _, **given: oracle.compute(**given), {}, inputs, case.upstream())
        modules.expect_gradients(ev, grads, owner=oracle.what, case=case.label, oracle=oracle.name,
                                 hints=oracle.gradient_hints or None)
    return y


def against(check: CallCheck, oracle: Oracle, *, passed: str,
            answers: Mapping[str, Callable[[], torch.Tensor]] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of check: every drawn case against the oracle, or against answers[case.key]() for a
    case worked by hand. passed: the line a student reads when the test passes."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in drawn(check.cases):
            answer = (answers or {}).get(case.key)
            expect_case(ev, case, oracle, None if answer is None else answer())

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- modules

Simulator = Callable[..., torch.Tensor]  # simulator(w, *args, **inputs): what a module computes with the weights w


def _no_simulators(*_: object, **__: torch.Tensor) -> list[tuple[Mistake, Simulator]]:
    return []


def _no_anchors(*_: object, **__: torch.Tensor) -> list[torch.Tensor]:
    return []


def _no_hint(**_: torch.Tensor) -> str:
    return ""


def _no_shape_hints(**_: torch.Tensor) -> dict[tuple[int, ...], str | Mistake]:
    return {}


def expect_linear_layers(ev: Evidence, key: str, what: str, owner: str,
                         layers: Mapping[str, tuple[int, int, bool, str]], shared: str,
                         bias_mistakes: Mapping[str, Mistake | str], seed: int,
                         gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """The module built under key (what: its constructor call) is made of separate layers, each name in layers an
    nn.Linear(n_in, n_out) with or without a bias as (n_in, n_out, bias, spec) says (modules.expect_layers: shared
    and bias_mistakes word the failures); returns the weights the probe loaded into them (seed, gains), by
    parameter name: name.weight (n_out, n_in), and name.bias (n_out,) where the layer has one."""
    __tracebackhide__ = True
    modules.expect_layers(ev, key, what, owner, layers, shared, bias_mistakes)
    shapes: dict[str, tuple[int, ...]] = {}
    for name, (n_in, n_out, bias, _) in layers.items():
        shapes[f"{name}.weight"] = (n_out, n_in)
        if bias:
            shapes[f"{name}.bias"] = (n_out,)
    return modules.expect_parameters(ev, key, what, shapes, seed, gains)


@dataclass(frozen=True)
class ForwardOracle:
    """What the student's module, called forward(x, context=..., mask=...) by a :class:`RunsCheck`, must compute
    with the check's weights w (read back from the evidence by `weights`, which also judges the structure), and
    the computations of its typical mistakes: functions of w, the module's constructor arguments args (Built.args,
    e.g. k, heads) and the named inputs of a case (those it passes)."""

    owner: str  # the student's class, e.g. "MultiHeadAttention"
    kind: str  # what its output must be, in words, e.g. "multi-head attention"
    weights: Callable[[Evidence, Built], dict[str, torch.Tensor]]
    compute: Simulator  # compute(w, *args, **inputs), differentiable: gradients are autograd's through it
    name: str  # the oracle in words, e.g. "nn.MultiheadAttention with your weights"
    simulators: Callable[..., list[tuple[Mistake, Simulator]]] = _no_simulators  # simulators(*args, **inputs)
    anchors: Callable[..., list[torch.Tensor]] = _no_anchors  # anchors(w, *args, **inputs): outputs no check names
    hint: Callable[..., str] = _no_hint  # hint(**inputs): what a wrong shape or an error suggests
    shape_hints: Callable[..., dict[tuple[int, ...], str | Mistake]] = _no_shape_hints  # shape_hints(**inputs)
    otherwise: str = ""  # the advice when the output matches neither the oracle nor a mistake
    keyword_mistake: Mistake | None = None  # forward raised TypeError naming a keyword input: it has no such argument
    shape: Callable[..., tuple[int, ...]] | None = None  # shape(**inputs): the output's; None: the first input's
    gradient_hints: Mapping[str, str] = field(default_factory=dict)  # parameter -> advice when it gets no gradient


def forward_what(oracle: ForwardOracle, inputs: Tensors) -> str:
    """The call as a student reads it, e.g. "MultiHeadAttention.forward(x, context, mask)"."""
    return f"{oracle.owner}.forward({', '.join(inputs)})"


def forward_output(ev: Evidence, key: str, oracle: ForwardOracle, inputs: Tensors) -> torch.Tensor:
    """The output recorded under key for these inputs: a tensor of oracle.shape (default: the first input's, e.g.
    (b, tq, k)), else a failure in plain words."""
    __tracebackhide__ = True
    first, *keywords = inputs
    fact = ev.facts.get(key)
    if (oracle.keyword_mistake is not None and isinstance(fact, dict) and fact.get("kind") == "raised"
            and fact.get("type") == "TypeError"):
        message = str(fact.get("message"))
        for name in keywords:
            if name in message:
                advice = oracle.keyword_mistake.explanation
                fail(f"{oracle.owner}.forward({first}, {name}=...) raised TypeError: {message[:200]}. "
                     f"{advice[0].upper()}{advice[1:]}", mistake=oracle.keyword_mistake)
    shape = oracle.shape(**inputs) if oracle.shape else tuple(inputs[first].shape)
    return output(ev, key, what=forward_what(oracle, inputs), shape=shape,
                  shape_hints=oracle.shape_hints(**inputs), hint=oracle.hint(**inputs))


def simulated(oracle: ForwardOracle, w: Tensors, args: tuple,
              inputs: Tensors) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """The outputs of oracle's typical mistakes with the weights w and constructor arguments args on these
    inputs, without autograd, lazily in order: whoever looks for the first match runs no mistake after it (04 has 179
    per case), and a right output none (expect_close returns before reading them)."""
    for mistake, simulate in oracle.simulators(*args, **inputs):
        with torch.no_grad():  # per call: a generator's no_grad would stay on in its reader between two outputs
            out = simulate(w, *args, **inputs)
        yield mistake, out


def expected_output(oracle: ForwardOracle, w: Tensors, args: tuple, inputs: Tensors) -> torch.Tensor:
    """The oracle's output with the weights w and constructor arguments args on these inputs, without autograd."""
    with torch.no_grad():
        return oracle.compute(w, *args, **inputs)


def _candidates(oracle: ForwardOracle, w: Tensors, args: tuple, inputs: Tensors) -> Iterator[torch.Tensor]:
    """The outputs of oracle's typical mistakes, then its anchors, lazily: matches_any stops at the first match."""
    yield from (out for _, out in simulated(oracle, w, args, inputs))
    with torch.no_grad():
        anchors = oracle.anchors(w, *args, **inputs)
    yield from anchors


def anchor_forward(ev: Evidence, y: torch.Tensor, oracle: ForwardOracle, w: Tensors, args: tuple, inputs: Tensors,
                   claim: str, label: str) -> None:
    """Fail unless y is what the module computes with the weights w on these inputs, or what one of its typical
    mistakes (or anchors) does: a property earns nothing for an output no real computation of the exercise gives.
    claim: the property y has, e.g. "MultiHeadAttention respects the causal mask"."""
    __tracebackhide__ = True
    want = expected_output(oracle, w, args, inputs)
    if matches_any(y, [want], ev.device):  # a right output runs no mistake's computation
        return
    if not matches_any(y, _candidates(oracle, w, args, inputs), ev.device):
        fail(f"{claim}, but it is not {oracle.kind}: its output matches neither the reference nor a known mistake. "
             f"{oracle.hint(**inputs)}", want, y, case=label)


def expect_forward_case(ev: Evidence, w: Tensors, built: Built, case: Case, oracle: ForwardOracle,
                        tolerate_mistakes: bool = False) -> torch.Tensor:
    """The output recorded for case (of the module built) against the oracle with the weights w, naming the
    typical mistake it matches; returns it. A case with an upstream gradient: the output must also be in an
    autograd graph, and the gradients of sum(output · upstream) its floating inputs and the parameters received
    must be autograd's through the oracle. tolerate_mistakes: a typical mistake's output passes there, its
    gradients compared with autograd through that mistake's computation (another check names it)."""
    __tracebackhide__ = True
    inputs, args = dict(case.inputs()), built.args
    what = forward_what(oracle, inputs)
    y = forward_output(ev, case.key, oracle, inputs)
    if case.upstream is not None:
        modules.expect_differentiable(ev, case.key, what)
    want = expected_output(oracle, w, args, inputs)
    tolerant = case.upstream is not None and tolerate_mistakes
    found = []
    if tolerant and not matches_any(y, [want], ev.device):
        found = [(m, simulate) for (m, simulate), (_, out) in zip(oracle.simulators(*args, **inputs),
                                                                  simulated(oracle, w, args, inputs), strict=True)
                 if matches_any(y, [out], ev.device)]
    if not found:
        expect_close(y, want, what=what, device=ev.device, case=case.label, otherwise=oracle.otherwise,
                     mistakes=[] if tolerant else simulated(oracle, w, args, inputs))
    if case.upstream is None:
        return y
    because, compute = found[0] if found else (None, oracle.compute)

    def forward(leaves: Tensors, **given: torch.Tensor) -> torch.Tensor:
        return compute(leaves, *args, **given)

    grads = modules.autograd(forward, w, inputs, case.upstream())
    modules.expect_gradients(ev, grads, owner=f"{oracle.owner}.forward", case=case.label, oracle=oracle.name,
                             because=because, hints=oracle.gradient_hints)
    return y


def against_forward(check: RunsCheck, oracle: ForwardOracle, *, passed: str, tolerate_mistakes: bool = False,
                    then: Callable[[Evidence], None] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a RunsCheck: for each module built, its weights read back and every drawn case
    against the oracle with them (:func:`expect_forward_case`); then(ev): a further property judged after the
    cases (e.g. the size of the graph observed). passed: the line a student reads when the test passes."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for item in check.runs:
            cases = drawn(item.cases)
            if not cases:
                continue
            w = oracle.weights(ev, item.module)
            for case in cases:
                expect_forward_case(ev, w, item.module, case, oracle, tolerate_mistakes)
        if then is not None:
            then(ev)

    return declared(check, judged, passed)


def expect_causal(ev: Evidence, y: torch.Tensor, y_changed: torch.Tensor, position: int, what: str,
                  leaks: Iterable[tuple[Mistake, torch.Tensor]], advice: str, mistake: Mistake | None = None) -> None:
    """Outputs (b, t, ...) y on an input and y_changed on it with position `position` changed: no earlier output
    changed. Else fail naming the first typical mistake in leaks (mistake, its output on the unchanged input) that
    y is, or with advice and mistake. what: the call, e.g. "M.forward with a causal mask of shape (6, 6)"."""
    __tracebackhide__ = True
    if matches_any(y_changed[:, :position], [y[:, :position]], ev.device):
        return
    named = next((m for m, leak in leaks if matches_any(y, [leak], ev.device)), None)
    fail(f"{what}: changing input {position} changed an earlier output (0-{position - 1}). "
         + (f"The output is not what was asked: {named.explanation}" if named else advice),
         y[:, :position], y_changed[:, :position], case=f"input {position} changed", mistake=named or mistake)


# ------------------------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class BlockOracle:
    """A module whose computation depends on what its recorded structure says, not only on its weights: which
    parameter plays which role, its number of heads, its norms' eps (a transformer block, a model made of blocks).

    structure(ev, built) judges the structure of the module built (its parts, their kinds and sizes) and returns
    (found, w): what the computation needs besides the weights, and the weights the probe loaded, by parameter
    name. oracle(found) is the :class:`ForwardOracle` computing with it (its weights are not called: structure
    reads them), or a list of equally right ones (e.g. a model on blocks computed as the student's blocks compute
    them, right or typically wrong, which another check judges): each case is judged against the first whose output
    it is, else the first whose typical mistake it is. tolerant: a case checking gradients may show a typical
    mistake (another check names it)."""

    structure: Callable[[Evidence, Built], tuple[Any, dict[str, torch.Tensor]]]
    oracle: Callable[[Any], ForwardOracle | list[ForwardOracle]]
    tolerant: bool = True


def block_call(built: Built, owner: str) -> str:
    """The constructor call of a built module as a student reads it, e.g. "TransformerBlock(8, 2, 4)"."""
    return f"{owner}({', '.join(repr(arg) for arg in built.args)})"


def matched_oracle(ev: Evidence, key: str, oracles: list[ForwardOracle], w: Tensors, args: tuple,
                   inputs: Tensors) -> ForwardOracle:
    """The first of oracles whose output is the one recorded under key for these inputs, else the first of which it
    is a typical mistake, else the first."""
    __tracebackhide__ = True
    if len(oracles) == 1:
        return oracles[0]
    y = forward_output(ev, key, oracles[0], inputs)
    return next((o for o in oracles if matches_any(y, [expected_output(o, w, args, inputs)], ev.device)), None) \
        or next((o for o in oracles if matches_any(y, [t for _, t in simulated(o, w, args, inputs)], ev.device)),
                oracles[0])


def expect_block_runs(ev: Evidence, runs: tuple[Runs, ...], block: BlockOracle, *, claim: str = "",
                      accept: Callable[[torch.Tensor], bool] | None = None) -> None:
    """For each module built (each of runs), its structure judged and its weights read back, then every drawn case
    against the oracle with them (:func:`expect_forward_case`, typical mistakes tolerated where a case checks
    gradients and block.tolerant, which then go through the mistake's computation; every parameter the probe
    recorded must receive one). claim, e.g. "has the right parts": the outputs need only be the module's, right or
    typically wrong (:func:`anchor_forward`; the claim is made of the module's constructor call). accept(y), with a
    claim: an output it rejects (e.g. not normalised) must then be the right one, a typical mistake named."""
    __tracebackhide__ = True
    for item in runs:
        cases = drawn(item.cases)
        if not cases:
            continue
        found, w = block.structure(ev, item.module)
        made = block.oracle(found)
        oracles = made if isinstance(made, list) else [made]
        for case in cases:
            inputs = dict(case.inputs())
            oracle = matched_oracle(ev, case.key, oracles, w, item.module.args, inputs)
            if claim and case.upstream is None:
                y = forward_output(ev, case.key, oracle, inputs)
                anchor_forward(ev, y, oracle, w, item.module.args, inputs,
                               f"{block_call(item.module, oracle.owner)} {claim}", case.label)
                if accept is None or accept(y):
                    continue
            expect_forward_case(ev, w, item.module, case, oracle, tolerate_mistakes=block.tolerant)
            if case.upstream is not None:
                modules.expect_gradients(ev, {}, owner=f"{oracle.owner}.forward", case=case.label, oracle=oracle.name,
                                         present=modules.parameter_names(ev, item.module.key))


def against_block(check: RunsCheck, block: BlockOracle, *, passed: str, claim: str = "",
                  then: Callable[[Evidence], None] | None = None,
                  accept: Callable[[torch.Tensor], bool] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a RunsCheck of a block (:func:`expect_block_runs`, claim and accept); then(ev): a further
    property judged after the cases. passed: the line a student reads when the test passes."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        expect_block_runs(ev, check.runs, block, claim=claim, accept=accept)
        if then is not None:
            then(ev)

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- token losses


@dataclass(frozen=True)
class LossOracle:
    """A next-token loss: the mean cross-entropy (F.cross_entropy, ignore_index = the padding id) of the logits at
    every position against the token that follows, as functions of the named inputs of a case.

    logits(**inputs) gives the (b, t - 1, vocab) logits that predict tokens[:, 1:]; written(**inputs) gives (mistake,
    loss) for each typical mistake written as code (course/judges/variants.py), the first match named."""

    what: str  # e.g. "next_token_loss(logits, tokens)"
    logits: Callable[..., torch.Tensor]
    tokens: str  # the input holding the tokens (b, t)
    #: e.g. lambda **inputs: WRITTEN.outputs("teacher_forcing_loss", **inputs)
    written: Callable[..., Iterable[tuple[Mistake, torch.Tensor]]]
    pad: str | None = None  # the input holding the padding id; None: every label counts
    unstable: Mistake | None = None  # named when the loss is not finite where the oracle's is
    hint: str = ""  # the advice when the loss is wrong (or not a scalar)
    name: str = "F.cross_entropy"  # the oracle in words, for gradient messages


def _ignored(oracle: LossOracle, inputs: Mapping) -> int:
    """The label F.cross_entropy ignores: the padding id, or its default -100 (no token) without padding."""
    return -100 if oracle.pad is None else int(inputs[oracle.pad])


def token_loss(oracle: LossOracle, inputs: Mapping) -> torch.Tensor:
    """The oracle: F.cross_entropy of the shifted logits against tokens[:, 1:], the padding ignored; a scalar."""
    logits = oracle.logits(**inputs).transpose(1, 2)  # (b, vocab, t - 1)
    return F.cross_entropy(logits, inputs[oracle.tokens][:, 1:], ignore_index=_ignored(oracle, inputs))


def token_loss_gradients(oracle: LossOracle, inputs: Mapping, index: int) -> dict[str, torch.Tensor | None]:
    """Autograd's gradients of the oracle's loss with respect to the floating tensor inputs (named <name><index>,
    as the probe keeps them) and the parameters of a model among the inputs (inputs: fresh from the case)."""
    given, leaves = {}, {}
    for name, value in inputs.items():
        if isinstance(value, torch.nn.Module):
            leaves.update(value.named_parameters())
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            value = value.detach().clone().requires_grad_(True)
            leaves[f"{name}{index}"] = value
        given[name] = value
    token_loss(oracle, given).backward()
    return {name: leaf.grad for name, leaf in leaves.items()}


def _loss_shape_hints(oracle: LossOracle, tokens: torch.Tensor) -> dict[tuple[int, ...], str | Mistake]:
    b, t = tokens.shape
    mean = "their mean over the real tokens" if oracle.pad else "their mean"
    return {(b, t - 1): f"That is one loss per predicted token: return {mean}.",
            (b * (t - 1),): f"That is one loss per predicted token: return {mean}.",
            (b,): "That is one loss per sequence: the mean is over all predicted tokens of the batch."}


def _confirmed_first(ev: Evidence, loss: torch.Tensor, mistakes: list[tuple[Mistake, torch.Tensor]],
                     companion: Case, oracle: LossOracle) -> list[tuple[Mistake, torch.Tensor]]:
    """mistakes, those that the loss matches AND that the companion's loss matches too put first: a single number
    can match two typical mistakes by chance, two numbers hardly."""
    matching = [m for m, value in mistakes if matches_any(loss, [value], ev.device)]
    other = ev.tensors.get(companion.key)
    if len(matching) < 2 or not isinstance(other, torch.Tensor) or other.shape != () or not other.is_floating_point():
        return mistakes
    there = dict((m.id, value) for m, value in reversed(list(oracle.written(**dict(companion.inputs())))))
    confirmed = {m.id for m in matching if m.id in there and matches_any(other, [there[m.id]], ev.device)}
    return sorted(mistakes, key=lambda pair: pair[0].id not in confirmed)


def expect_loss_case(ev: Evidence, case: Case, oracle: LossOracle, companion: Case | None = None) -> None:
    """The loss recorded for case against the oracle, naming the typical mistake it matches (confirmed by the
    companion's loss when it matches two)."""
    __tracebackhide__ = True
    inputs = dict(case.inputs())
    loss = output(ev, case.key, what=oracle.what, shape=(), hint=oracle.hint,
                  shape_hints=_loss_shape_hints(oracle, inputs[oracle.tokens]))
    with torch.no_grad():
        expected = token_loss(oracle, inputs)
    if oracle.unstable is not None and not bool(torch.isfinite(loss)) and bool(torch.isfinite(expected)):
        fail(f"{oracle.what} is {float(loss)} on {case.label}, where the loss is {float(expected):.4f}. A softmax "
             "followed by a log underflows: a probability below 1e-38 becomes 0 and its log -inf. F.cross_entropy "
             "(or F.log_softmax) computes the log-probabilities without that step.", mistake=oracle.unstable)
    mistakes = list(oracle.written(**inputs))
    if companion is not None and not matches_any(loss, [expected], ev.device):
        mistakes = _confirmed_first(ev, loss, mistakes, companion, oracle)
    expect_close(loss, expected, what=oracle.what, device=ev.device, mistakes=mistakes, otherwise=oracle.hint,
                 case=case.label)


def against_loss(check: LossCheck, oracle: LossOracle, *, passed: str) -> Callable[[Evidence], None]:
    """Register the judge of a loss check (course/checks/kinds.py's ``losses``): every drawn case's loss against
    F.cross_entropy, a case's secret companion (keyed <key>_secret) confirming which of two matching mistakes it
    is, then the gradients of the cases that recorded them against autograd through the oracle."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        cases = drawn(check.cases)
        keyed = {case.key: case for case in cases}
        for case in cases:
            expect_loss_case(ev, case, oracle, keyed.get(f"{case.key}_secret"))
        for i, case in enumerate(check.cases):
            if case.upstream is not None and case in cases:
                modules.expect_differentiable(ev, case.key, oracle.what)
                modules.expect_gradients(ev, token_loss_gradients(oracle, dict(case.inputs()), i), owner=oracle.what,
                                         case=case.label, oracle=oracle.name)

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- properties written out


def each_case(check: PropertyCheck, expect: Callable[[Evidence, Any], None], *,
              passed: str, on_gpus: OnGpus | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a property check (course/checks/kinds.py's ``property_check``): expect(ev, case) for
    each of the cases its probe declared that this run draws (a secret one only under grading), in order; then, with
    on_gpus, what its probe (wrapped in course/checks/device.py's on_gpus) saw on the stand-in GPUs. passed: the
    line a student reads when the test passes."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in drawn(check.cases):
            expect(ev, case)
        if on_gpus:
            expect_on_gpus(ev, on_gpus)

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- language models

Switches = Mapping[str, Any]


@dataclass(frozen=True)
class ModelOracle:
    """A language model, tokens (b, t) -> logits (b, t, vocab) ((logits, cache) with use_cache=True): weights(ev, run)
    judges its structure, compute(w, case, tokens, cache=None, **switches) writes it out (switches: a mistake)."""

    owner: str  # the student's class, e.g. "LanguageModel"
    weights: Callable[[Evidence, Any], dict[str, torch.Tensor]]
    compute: Callable[..., tuple[torch.Tensor, list]]
    name: str  # the oracle in words, for gradient messages
    hint: str  # how the logits are computed
    causal: str  # the advice when changing later tokens changes earlier logits
    reads_future: Mistake | None = None  # the mistake named then
    mistakes: tuple[tuple[Mistake, Switches], ...] = ()  # they change the logits of a call without a cache
    cache_mistakes: tuple[tuple[Mistake, Switches], ...] = ()  # they change only calls given a cache
    reference: Callable[..., torch.Tensor] | None = None  # reference(w, case, tokens): logits by PyTorch's layers
    returns_tuple: Mistake | None = None  # named when a call without use_cache returns a tuple


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
    if oracle.returns_tuple is not None and value_kind(ev, key) == "tuple":
        fail(f"{what} returned a tuple: {oracle.returns_tuple.explanation}", mistake=oracle.returns_tuple)
    return output(ev, key, what=what, shape=(b, t, vocab), shape_hints={
        (b, t, k): "Those are the states of the last block: apply the final norm and to_logits.",
        (b, vocab): "One row per sequence: return the logits of EVERY position, (b, t, vocab_size)."})


def run_steps(compute: Callable[..., tuple[torch.Tensor, list]], w: Tensors, case: Any, tokens: torch.Tensor,
              chunks: tuple[int, ...], switches: Switches) -> tuple[list[torch.Tensor], list[list]]:
    """The logits of each chunk of tokens (b, t) fed to compute with the cache before it, and the cache after it."""
    with torch.no_grad():
        cache, logits, caches = None, [], []
        for start, end in chunk_bounds(chunks):
            out, cache = compute(w, case, tokens[:, start:end], cache, **switches)
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


def expect_model(ev: Evidence, run: ModelRun, oracle: ModelOracle, *, exact: bool = False,
                 owner: str = "") -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The run's model has its parts and gives the oracle's logits or a typical mistake's (exact: the oracle's);
    causal where run.changed, autograd's gradients where run.upstream; owner: a subclass. Returns (weights, logits)."""
    __tracebackhide__ = True
    case, tokens, owner = run.case, run.tokens(), owner or oracle.owner
    what, label = f"{owner}.forward(tokens)", f"{case.call}, tokens {tuple(tokens.shape)}"
    w = oracle.weights(ev, run)
    logits = model_logits(ev, oracle, run.logits, case, what)
    with torch.no_grad():
        expected = (oracle.reference or (lambda *given: oracle.compute(*given)[0]))(w, case, tokens)

    @cache
    def mistaken() -> list[tuple[Mistake, torch.Tensor]]:  # only once the logits are wrong somewhere, and once
        with torch.no_grad():
            return [(m, oracle.compute(w, case, tokens, **switches)[0]) for m, switches in oracle.mistakes]

    wrong = Lazily(mistaken)
    right = matches_any(logits, [expected], ev.device)
    found = [] if right else [(m, sw) for (m, sw), (_, out) in zip(oracle.mistakes, wrong, strict=True)
                              if matches_any(logits, [out], ev.device)]
    for j in run.changed:
        expect_causal(ev, logits, model_logits(ev, oracle, fact_key(run.model, f"changed{j}"), case, what), j,
                      f"{owner} is not causal", wrong, oracle.causal, oracle.reads_future)
    if not right and not found:
        fail(f"{owner} has the right parts, but it is not a language model with the check's weights: {oracle.hint}",
             expected[0], logits[0], case=f"{label}, sequence 0")
    if exact:
        expect_close_batch(logits, expected, what=what, device=ev.device, mistakes=wrong, otherwise=oracle.hint,
                           case=label)
    if run.upstream:
        modules.expect_differentiable(ev, run.logits, what)
        because, switches = found[0] if found else (None, {})
        forward = oracle.reference if oracle.reference and not switches else None

        def logits_of(leaves: Tensors) -> torch.Tensor:
            return forward(leaves, case, tokens) if forward else oracle.compute(leaves, case, tokens, **switches)[0]

        modules.expect_gradients(ev, modules.autograd(logits_of, w, {}, run.upstream_gradient()), owner=oracle.owner,
                                 case=label, because=because, oracle=oracle.name)
    return w, logits


def expect_model_steps(ev: Evidence, run: ModelRun, oracle: ModelOracle, w: Tensors, full: torch.Tensor, heads: int,
                       differs: Mistake, *, owner: str = "", errors: tuple[tuple[str, int, Mistake], ...] = (),
                       not_returned: Mistake | None = None, bad_cache: Mistake | None = None, caches: bool = True
                       ) -> None:
    """The run's chunks fed with the cache (<steps><c>) give the logits of one call (full) and the oracle's cache of
    `heads` heads (caches=False: its shapes), else the cache mistake (or a raised error's) is named, or differs."""
    __tracebackhide__ = True
    case, tokens, chunks, owner = run.case, run.tokens(), run.chunks, owner or oracle.owner
    bounds = chunk_bounds(chunks)
    steps, explained = [], f": {bad_cache.explanation}" if bad_cache else "."
    for step, (start, end) in ((f"{run.steps}{c}", bound) for c, bound in enumerate(bounds)):
        message = str(ev.facts[step].get("message"))[:300] if value_kind(ev, step) == "raised" else ""
        for mistake in (m for phrase, after, m in errors if phrase in message and start >= after):
            fail(f"{owner}.forward, with a cache of {start} positions, raised: {message}\n\nThe likely cause: "
                 f"{mistake.explanation}", mistake=mistake)
        what = f"{owner}.forward(tokens[:, {start}:{end}], cache={'...' if start else 'None'}, use_cache=True)"
        expect_tuple(ev, step, what, f"{what} should return a pair, (logits, cache)"
                     + (f": {not_returned.explanation}" if not_returned else "."), 2, not_returned)
        out = model_logits(ev, oracle, item_key(step, 0), case, what, end - start)
        expect_tuple(ev, item_key(step, 1), what, f"The cache {what} returned should be a list of {case.depth} (keys, "
                     f"values) pairs, one per block{explained}", case.depth, bad_cache)
        for i in range(case.depth):
            expect_tuple(ev, f"{step}.1.{i}", what, f"Entry {i} of the cache is not a (keys, values) pair{explained}",
                         2, bad_cache)
            for j, name in enumerate(("keys", "values")):
                value, shape = tensor(ev, f"{step}.1.{i}.{j}"), (case.b, heads, end, case.k // case.heads)
                if value is None or tuple(value.shape) != shape:
                    got = "are not a tensor" if value is None else f"have shape {tuple(value.shape)}"
                    fail(f"The cached {name} of block {i} {got} after {end} positions; expected {shape}{explained}",
                         mistake=bad_cache)
        steps.append((out, [(tensor(ev, f"{step}.1.{i}.0"), tensor(ev, f"{step}.1.{i}.1"))
                            for i in range(case.depth)]))

    def same(logits: list[torch.Tensor], kept: list[list]) -> bool:
        """The steps gave these logits and (unless not caches) these caches, a list of (keys, values) per block."""
        pairs = [(got, want) for (out, cache), wanted, expected in zip(steps, logits, kept, strict=True)
                 for got, want in ((out, wanted), *(zip(sum(cache, ()), sum(expected, ()), strict=True) if caches
                                                    else ()))]
        return all(matches_any(got, [want], ev.device) for got, want in pairs)

    if same([full[:, start:end] for start, end in bounds], run_steps(oracle.compute, w, case, tokens, chunks, {})[1]):
        return
    named = next((m for m, switches in oracle.cache_mistakes
                  if same(*run_steps(oracle.compute, w, case, tokens, chunks, switches))), None)
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


def decoder(w: Tensors, x: torch.Tensor, depth: int, cache: list | None, attend: Callable, ff: Callable,
            norm: Callable) -> tuple[torch.Tensor, list]:
    """A pre-norm decoder-only language model after its embeddings: (logits (b, t, vocab), the new cache) of x
    (b, t, k) through depth blocks (x + attention(norm1(x)), then x + ff(norm2(x))), the final norm and to_logits.
    Block i calls attend(h, i, its cache or None) for (its output, what it caches), ff(name, h) and norm(name, h)
    with its parts' names (blocks.<i>.ff, ...)."""
    new_cache = []
    for i in range(depth):
        p = f"blocks.{i}."
        out, kept = attend(norm(f"{p}norm1", x), i, None if cache is None else cache[i])
        new_cache.append(kept)
        x = out + x
        x = ff(f"{p}ff", norm(f"{p}norm2", x)) + x
    return dense(w, "to_logits", norm("norm", x)), new_cache
