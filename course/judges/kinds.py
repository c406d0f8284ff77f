"""Checks declared, not written: the judge side of the check kinds (probe side: course/checks/kinds.py).

An :class:`Oracle` says what the student's function should give and how a typical mistake looks; one line then
judges a declared check from the very cases its probe drew::

    against(attention_weights_oracle, WEIGHTS, passed="Random inputs of several shapes against PyTorch's ...")

Every case's output is compared with the oracle (its shape first, with hints for the shapes of typical confusions),
a match with a simulated mistake names it, and a case that recorded gradients has them compared with autograd
through the oracle. Cases worked by hand in the notebook compare with the hand-worked answer instead
(``answers``), the secret case with the oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from course.checks import modules
from course.checks.compare import Mistake, expect_close, output
from course.checks.evidence import Evidence
from course.checks.kinds import Built, CallCheck, Case, ModuleCheck, drawn
from course.judges import judge

Tensors = Mapping[str, torch.Tensor]


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
    mistakes: Callable[..., list[tuple[Mistake, torch.Tensor]]] = _none
    shape_hints: Callable[..., dict[tuple[int, ...], str]] = lambda **_: {}
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
        modules.expect_attached(ev, case.key, oracle.what)
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

    judged.__module__ = f"course.judges.{check.module}"
    judged.__doc__ = judged.passed = passed
    return judge(check.name)(judged)


# ------------------------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class ModuleOracle:
    """What the student's module must compute with the check's weights w (read back from the evidence by
    `weights`, which also judges the module's structure), as functions of w and the named inputs of a case."""

    what: str  # e.g. "SelfAttentionQKV.forward(x)"
    weights: Callable[[Evidence, Built], dict[str, torch.Tensor]]
    compute: Callable[..., torch.Tensor]  # compute(w, **inputs)
    gradients: Callable[..., dict[str, torch.Tensor | None]]  # gradients(w, upstream, **inputs), course names
    name: str  # the oracle in words, e.g. "nn.MultiheadAttention"
    mistakes: Callable[..., list[tuple[Mistake, torch.Tensor]]] = _none  # mistakes(w, **inputs)
    hint: str = ""  # what a wrong shape suggests
    otherwise: str = ""


def expect_module_case(ev: Evidence, built: Built, case: Case, oracle: ModuleOracle) -> None:
    """The structure and weights of the module built for case, its output against the oracle with those weights,
    and, for a case with an upstream gradient, the gradients of the inputs and parameters against autograd."""
    w = oracle.weights(ev, built)
    inputs = dict(case.inputs())
    first = next(iter(inputs.values()))
    y = output(ev, case.key, what=oracle.what, shape=tuple(first.shape), hint=oracle.hint)
    expect_close(y, oracle.compute(w, **inputs), what=oracle.what, device=ev.device,
                 mistakes=oracle.mistakes(w, **inputs), case=case.label, otherwise=oracle.otherwise)
    if case.upstream is not None:
        owner = oracle.what.split("(", 1)[0]
        modules.expect_attached(ev, case.key, oracle.what)
        modules.expect_gradients(ev, oracle.gradients(w, case.upstream(), **inputs), owner=owner, case=case.label,
                                 oracle=oracle.name)


def against_module(check: ModuleCheck, oracle: ModuleOracle, *, passed: str) -> Callable[[Evidence], None]:
    """Register the judge of a module check: every drawn case against the oracle with the check's weights."""

    def judged(ev: Evidence) -> None:
        __tracebackhide__ = True
        for item in check.module_cases:
            if item.case in drawn((item.case,)):
                expect_module_case(ev, item.module, item.case, oracle)

    judged.__module__ = f"course.judges.{check.module}"
    judged.__doc__ = judged.passed = passed
    return judge(check.name)(judged)
