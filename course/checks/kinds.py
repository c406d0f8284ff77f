"""Checks declared, not written: the probe side of the check kinds.

A check that calls the student's function on a table of inputs is one declaration::

    attention_weights_oracle = calls("attention_weights_oracle", shapes("w", SHAPES, seed=100))

and one that builds the student's module with the check's weights and runs it is another::

    qkv_oracle = builds("self_attention_qkv_oracle", (ModuleCase(Built("module0", (3,), 600), case), ...),
                        layers=ROLES)

Each :class:`Case` owns its evidence key, how it draws its inputs (from seeds, which grading salts) and how a
failure names it; ``secret`` cases are drawn only under grading, ``upstream`` cases also record the gradient of
sum(output · upstream) with respect to every input. The judge side (course/judges/kinds.py) is declared from the
same cases — ``against(check, oracle)`` or ``worked_by_hand(check, answers, oracle)`` — so probe and judge agree on
keys, seeds and shapes by construction, and nothing here computes an answer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from course.checks import modules
from course.checks.check import Check
from course.checks.compare import randn
from course.checks.evidence import Recorder
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


def drawn(cases: tuple[Case, ...]) -> tuple[Case, ...]:
    """The cases of this run: the secret ones only under grading."""
    return tuple(case for case in cases if not case.secret or grading())


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


def _probe(cases: tuple[Case, ...], student: Any, rec: Recorder) -> None:
    for case in drawn(cases):
        inputs = {name: value.to(rec.device) for name, value in case.inputs().items()}
        if case.upstream is None:
            rec.call(case.key, student, *inputs.values())
            continue
        inputs = {name: value.requires_grad_(True) for name, value in inputs.items()}
        modules.backward(rec, rec.call(case.key, student, *inputs.values()), case.upstream(), inputs)


class CallCheck(Check):
    """A check that records the student's function on each of its cases (and nothing else)."""

    def __init__(self, name: str, cases: tuple[Case, ...], module: str):
        super().__init__(name, partial(_probe, cases), module=module)
        self.cases = cases


def calls(name: str, cases: tuple[Case, ...]) -> CallCheck:
    """The check `name` of the calling module: the student's function called on each case."""
    return CallCheck(name, tuple(cases), sys._getframe(1).f_globals["__name__"])  # noqa: SLF001 - the declaring module


# ------------------------------------------------------------------------------------------- modules


@dataclass(frozen=True)
class Built:
    """A module of a check: cls(*args), its structure recorded under key, the check's weights (seed) loaded."""

    key: str
    args: tuple[Any, ...]
    seed: int


@dataclass(frozen=True)
class ModuleCase:
    """The module built, then called on the case's inputs: output under case.key, without autograd unless the case
    has an upstream gradient (then the gradients of the inputs and the parameters are recorded too)."""

    module: Built
    case: Case


def _probe_modules(cases: tuple[ModuleCase, ...], options: Mapping[str, Any], cls: Any, rec: Recorder) -> None:
    for item in cases:
        if item.case.secret and not grading():
            continue
        built = item.module
        module = modules.build(rec, built.key, cls, *built.args, seed=built.seed, **options)
        if module is None:
            return  # the judge says why from the structure recorded under built.key
        inputs = {name: value.to(rec.device) for name, value in item.case.inputs().items()}
        if item.case.upstream is None:
            with torch.no_grad():
                rec.call(item.case.key, module, *inputs.values())
            continue
        inputs = {name: value.requires_grad_(True) for name, value in inputs.items()}
        modules.backward(rec, rec.call(item.case.key, module, *inputs.values()), item.case.upstream(), inputs, module)


class ModuleCheck(Check):
    """A check that builds the student's module for each of its cases and records what it computes."""

    def __init__(self, name: str, cases: tuple[ModuleCase, ...], module: str, options: Mapping[str, Any]):
        super().__init__(name, partial(_probe_modules, cases, dict(options)), module=module)
        self.module_cases = cases


def builds(name: str, cases: tuple[ModuleCase, ...], **options: Any) -> ModuleCheck:
    """The check `name` of the calling module: the student's module built (options go to modules.build: layers,
    gains, ...) and run on each case."""
    return ModuleCheck(name, tuple(cases), sys._getframe(1).f_globals["__name__"], options)  # noqa: SLF001
