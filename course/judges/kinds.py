"""Checks declared, not written: the judge side of the check kinds (probe side: course/checks/kinds.py).

An :class:`Oracle` says what the student's function should give and how a typical mistake looks; one line then
judges a declared check from the very cases its probe drew::

    against(attention_weights_oracle, WEIGHTS, passed="Random inputs of several shapes against PyTorch's ...")

Every case's output is compared with the oracle (its shape first, with hints for the shapes of typical confusions),
a match with a typical mistake's output names it, and (``against_gradients``; a module's: ``gradients=``) a case that
recorded gradients has them compared with autograd through the oracle. Cases worked by hand in the notebook compare
with the hand-worked answer instead (``answers``), the secret case with the oracle.

Next-token losses are judged in course/judges/token_loss.py, whole language models (with and without a cache) in
course/judges/models.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from course.checks import modules
from course.checks.compare import (
    Mistake,
    expect_close,
    fail,
    matches_any,
    output,
)
from course.checks.evidence import Evidence
from course.checks.kinds import (
    Built,
    CallCheck,
    Case,
    PropertyCheck,
    Runs,
    RunsCheck,
    drawn,
)
from course.judges import judge
from course.judges.variants import Simulator

Tensors = Mapping[str, torch.Tensor]


def declared(check: Any, judged: Callable[[Evidence], None], passed: str) -> Callable[[Evidence], None]:
    """Register judged as the judge of check (a declared check of course/checks/kinds.py), in the judges module of
    check's assignment; passed: the line a student reads when the test passes."""
    judged.__module__ = f"course.judges.{check.module}"
    judged.__doc__ = judged.passed = passed
    return judge(check.name)(judged)


@dataclass(frozen=True)
class Advice:
    """What a student reads beside a failure of an oracle's check (:class:`Oracle`, :class:`ForwardOracle`)."""

    otherwise: str = ""  # the output matches neither the oracle nor a typical mistake
    hint: str | Callable[..., str] = ""  # wrong shape or raised; or hint(**inputs), from a case's named inputs
    shape_hints: Callable[..., dict[tuple[int, ...], str | Mistake]] = lambda **_: {}  # of the inputs: shape -> advice
    gradient_hints: Mapping[str, str] = field(default_factory=dict)  # input or parameter -> advice when it gets none
    refused: Callable[[Evidence, str, Tensors], None] | None = None  # (ev, key, inputs): fails first if forward refused

    def hint_for(self, inputs: Tensors) -> str:
        return self.hint(**inputs) if callable(self.hint) else self.hint


@dataclass(frozen=True)
class Oracle:
    """What the student's function must compute, and how its typical mistakes come out, as functions of the
    named inputs of a case."""

    what: str  # the call as a student reads it, e.g. "attention_weights(x)"
    compute: Callable[..., torch.Tensor]
    name: str  # the oracle in words, for gradient messages, e.g. "F.scaled_dot_product_attention"
    shape: Callable[..., tuple[int, ...]]  # the output's shape
    mistakes: Callable[..., Iterable[tuple[Mistake, torch.Tensor]]]  # tried in order, lazily
    advice: Advice = Advice()


def expect_case(ev: Evidence, case: Case, oracle: Oracle, expected: torch.Tensor | None = None) -> torch.Tensor:
    """The output recorded for case against expected (default: the oracle on the case's inputs); returns it."""
    inputs = dict(case.inputs())
    advice = oracle.advice
    y = output(ev, case.key, what=oracle.what, shape=oracle.shape(**inputs), shape_hints=advice.shape_hints(**inputs),
               hint=advice.hint_for(inputs))
    want = oracle.compute(**inputs) if expected is None else expected
    expect_close(y, want, what=oracle.what, device=ev.device, mistakes=oracle.mistakes(**inputs), case=case.label,
                 otherwise=advice.otherwise)
    return y


def against(check: CallCheck, oracle: Oracle, *, passed: str,
            answers: Mapping[str, Callable[[], torch.Tensor]] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of check: every drawn case against the oracle, or against answers[case.key]() for a
    case worked by hand. passed: the line a student reads when the test passes."""
    if any(case.upstream is not None for case in check.cases):
        raise ValueError(f"{check.name} records gradients: its judge is against_gradients")

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in drawn(check.cases):
            answer = (answers or {}).get(case.key)
            expect_case(ev, case, oracle, None if answer is None else answer())

    return declared(check, judged, passed)


def against_gradients(check: CallCheck, oracle: Oracle, *, passed: str) -> Callable[[Evidence], None]:
    """Register the judge of a check declared with calls_backward: every drawn case against the oracle, and the
    gradients a case with an upstream recorded against autograd through the oracle."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in drawn(check.cases):
            expect_case(ev, case, oracle)
            if case.upstream is not None:
                modules.expect_differentiable(ev, case.key, oracle.what)
                inputs = dict(case.inputs())
                grads = modules.autograd(lambda _, **given: oracle.compute(**given), {}, inputs, case.upstream())
                modules.expect_gradients(ev, grads, owner=oracle.what, case=case.label, oracle=oracle.name,
                                         hints=oracle.advice.gradient_hints)

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- modules

def expect_linear_layers(ev: Evidence, key: str, what: str, owner: str,
                         layers: Mapping[str, tuple[int, int, bool, str, Mistake | str]], shared: str, seed: int,
                         gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """The module built under key (what: its constructor call) is made of separate layers as modules.expect_layers
    judges them (layers, shared); returns the weights the probe loaded into them (seed, gains), by parameter name:
    name.weight (n_out, n_in), and name.bias (n_out,) where the layer has one."""
    __tracebackhide__ = True
    modules.expect_layers(ev, key, what, owner, layers, shared)
    shapes: dict[str, tuple[int, ...]] = {}
    for name, (n_in, n_out, bias, *_) in layers.items():
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
    #: simulators(*args, **inputs): (mistake, computation), tried in order; a mistake None is a real computation no
    #: check names: an output it gives keeps a property's credit (:func:`anchor_forward`) but is no right answer
    simulators: Callable[..., list[tuple[Mistake | None, Simulator]]]
    advice: Advice = Advice()
    shape: Callable[..., tuple[int, ...]] | None = None  # shape(**inputs): the output's; None: the first input's


def forward_what(oracle: ForwardOracle, inputs: Tensors) -> str:
    """The call as a student reads it, e.g. "MultiHeadAttention.forward(x, context, mask)"."""
    return f"{oracle.owner}.forward({', '.join(inputs)})"


def forward_output(ev: Evidence, key: str, oracle: ForwardOracle, inputs: Tensors) -> torch.Tensor:
    """The output recorded under key for these inputs: a tensor of oracle.shape (default: the first input's, e.g.
    (b, tq, k)), else a failure in plain words."""
    __tracebackhide__ = True
    if oracle.advice.refused:
        oracle.advice.refused(ev, key, inputs)
    shape = oracle.shape(**inputs) if oracle.shape else tuple(next(iter(inputs.values())).shape)
    return output(ev, key, what=forward_what(oracle, inputs), shape=shape,
                  shape_hints=oracle.advice.shape_hints(**inputs), hint=oracle.advice.hint_for(inputs))


def _run(compute: Simulator, w: Tensors, args: tuple, inputs: Tensors) -> torch.Tensor:
    """compute (an oracle's or a mistake's) with the weights w and constructor arguments args on these inputs,
    without autograd (per call: a generator's no_grad would stay on in its reader between two outputs)."""
    with torch.no_grad():
        return compute(w, *args, **inputs)


def simulated(oracle: ForwardOracle, w: Tensors, args: tuple,
              inputs: Tensors) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """The outputs of oracle's typical mistakes with the weights w and constructor arguments args on these
    inputs, without autograd, lazily in order: whoever looks for the first match runs no mistake after it (04 has 179
    per case), and a right output none (expect_close returns before reading them)."""
    for mistake, simulate in oracle.simulators(*args, **inputs):
        if mistake is not None:
            yield mistake, _run(simulate, w, args, inputs)


def anchor_forward(ev: Evidence, y: torch.Tensor, oracle: ForwardOracle, w: Tensors, args: tuple, inputs: Tensors,
                   claim: str, label: str) -> None:
    """Fail unless y is what the module computes with the weights w on these inputs, or what one of its simulators
    does: a property earns nothing for an output no real computation of the exercise gives.
    claim: the property y has, e.g. "MultiHeadAttention respects the causal mask"."""
    __tracebackhide__ = True
    want = _run(oracle.compute, w, args, inputs)
    if matches_any(y, [want], ev.device):  # a right output runs no mistake's computation
        return
    if not matches_any(y, (_run(run, w, args, inputs) for _, run in oracle.simulators(*args, **inputs)), ev.device):
        fail(f"{claim}, but it is not {oracle.kind}: its output matches neither the reference nor a known mistake. "
             f"{oracle.advice.hint_for(inputs)}", want, y, case=label)


def expect_forward_case(ev: Evidence, w: Tensors, built: Built, case: Case, oracle: ForwardOracle) -> None:
    """The output recorded for case (of the module built) against the oracle with the weights w, naming the
    typical mistake it matches (the gradients a case recorded: :func:`expect_forward_gradients`)."""
    __tracebackhide__ = True
    inputs, args = dict(case.inputs()), built.args
    expect_close(forward_output(ev, case.key, oracle, inputs), _run(oracle.compute, w, args, inputs),
                 what=forward_what(oracle, inputs), device=ev.device, case=case.label,
                 otherwise=oracle.advice.otherwise, mistakes=simulated(oracle, w, args, inputs))


def expect_forward_gradients(ev: Evidence, w: Tensors, built: Built, case: Case, oracle: ForwardOracle,
                             tolerate_mistakes: bool = False) -> None:
    """A case with an upstream gradient (of a check declared with builds_and_runs_backward): its output as
    :func:`expect_forward_case` judges it, in an autograd graph, and the gradients of sum(output · upstream) its
    floating inputs and the parameters received autograd's through the oracle. tolerate_mistakes: a typical
    mistake's output passes, its gradients compared with autograd through that mistake's computation (another check
    names it)."""
    __tracebackhide__ = True
    inputs, args = dict(case.inputs()), built.args
    what, y = forward_what(oracle, inputs), forward_output(ev, case.key, oracle, inputs)
    modules.expect_differentiable(ev, case.key, what)
    want, because, compute = _run(oracle.compute, w, args, inputs), None, oracle.compute
    if tolerate_mistakes and not matches_any(y, [want], ev.device):
        because, compute = next(((m, run) for m, run in oracle.simulators(*args, **inputs) if m is not None
                                 and matches_any(y, [_run(run, w, args, inputs)], ev.device)), (None, compute))
    if because is None:
        expect_close(y, want, what=what, device=ev.device, case=case.label, otherwise=oracle.advice.otherwise,
                     mistakes=[] if tolerate_mistakes else simulated(oracle, w, args, inputs))
    grads = modules.autograd(lambda leaves, **given: compute(leaves, *args, **given), w, inputs, case.upstream())
    modules.expect_gradients(ev, grads, owner=f"{oracle.owner}.forward", case=case.label, oracle=oracle.name,
                             because=because, hints=oracle.advice.gradient_hints)


def against_forward(check: RunsCheck, oracle: ForwardOracle, *, passed: str,
                    then: Callable[[Evidence], None] | None = None,
                    gradients: Callable[..., None] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a RunsCheck: for each module built, its weights read back and every drawn case
    against the oracle with them (:func:`expect_forward_case`); then(ev): a further property judged after the
    cases (e.g. the size of the graph observed). passed: the line a student reads when the test passes.
    gradients(ev, w, built, case, oracle): how a case with an upstream gradient is judged, in a check declared with
    builds_and_runs_backward (:func:`expect_forward_gradients`); only those checks name it."""
    if gradients is None and any(case.upstream is not None for item in check.runs for case in item.cases):
        raise ValueError(f"{check.name} records gradients: judge it with gradients=expect_forward_gradients")

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for item in check.runs:
            cases = drawn(item.cases)
            if cases:
                w = oracle.weights(ev, item.module)
                for case in cases:
                    (expect_forward_case if case.upstream is None else gradients)(ev, w, item.module, case, oracle)
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
    it is, else the first whose typical mistake it is."""

    structure: Callable[[Evidence, Built], tuple[Any, dict[str, torch.Tensor]]]
    oracle: Callable[[Any], ForwardOracle | list[ForwardOracle]]


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
    return next((o for o in oracles if matches_any(y, [_run(o.compute, w, args, inputs)], ev.device)), None) \
        or next((o for o in oracles if matches_any(y, [t for _, t in simulated(o, w, args, inputs)], ev.device)),
                oracles[0])


def expect_block_runs(ev: Evidence, runs: tuple[Runs, ...], block: BlockOracle, *, claim: str = "",
                      accept: Callable[[torch.Tensor], bool] | None = None,
                      gradients: Callable[..., None] | None = None) -> None:
    """For each module built (each of runs), its structure judged and its weights read back, then every drawn case
    against the oracle with them (:func:`expect_forward_case`); a case with an upstream gradient as gradients(ev, w,
    built, case, oracle) judges it (:func:`expect_block_gradients`, passed only by the judges of checks declared with
    builds_and_runs_backward). claim, e.g. "has the right parts": the outputs need only be the module's, right or
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
            (expect_forward_case if case.upstream is None else gradients)(ev, w, item.module, case, oracle)


def expect_block_gradients(ev: Evidence, w: Tensors, built: Built, case: Case, oracle: ForwardOracle,
                           tolerate_mistakes: bool = False) -> None:
    """A case with an upstream gradient as :func:`expect_forward_gradients` judges it (tolerate_mistakes); every
    parameter the probe filled must receive some gradient too, also one the oracle does not compute with."""
    __tracebackhide__ = True
    expect_forward_gradients(ev, w, built, case, oracle, tolerate_mistakes)
    modules.expect_some_gradient(ev, modules.parameter_names(ev, built.key), owner=f"{oracle.owner}.forward")


def against_block(check: RunsCheck, block: BlockOracle, *, passed: str, claim: str = "",
                  then: Callable[[Evidence], None] | None = None,
                  accept: Callable[[torch.Tensor], bool] | None = None,
                  gradients: Callable[..., None] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a RunsCheck of a block (:func:`expect_block_runs`, claim, accept and gradients: in a
    check declared with builds_and_runs_backward, :func:`expect_block_gradients`); then(ev): a further property
    judged after the cases. passed: the line a student reads when the test passes."""
    if gradients is None and any(case.upstream is not None for item in check.runs for case in item.cases):
        raise ValueError(f"{check.name} records gradients: judge it with gradients=expect_block_gradients")

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        expect_block_runs(ev, check.runs, block, claim=claim, accept=accept, gradients=gradients)
        if then is not None:
            then(ev)

    return declared(check, judged, passed)


# ------------------------------------------------------------------------------------------- properties written out


def each_case(check: PropertyCheck, expect: Callable[[Evidence, Any], None], *,
              passed: str, then: Callable[[Evidence], None] | None = None) -> Callable[[Evidence], None]:
    """Register the judge of a property check (course/checks/kinds.py's ``property_check``): expect(ev, case) for
    each of the cases its probe declared that this run draws (a secret one only under grading), in order; then(ev):
    a further property judged after the cases (e.g. compare.expect_on_gpus: what a probe wrapped in course/checks/
    device.py's on_gpus saw on the stand-in GPUs). passed: the line a student reads when the test passes."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for case in drawn(check.cases):
            expect(ev, case)
        if then is not None:
            then(ev)

    return declared(check, judged, passed)
