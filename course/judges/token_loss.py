"""Next-token losses: the judge of a loss check (course/checks/kinds.py's ``losses``), for the language models'
assignments: 07 (seq2seq's teacher-forcing loss) and 08 (next_token_loss).

A :class:`LossOracle` says which logits predict which tokens and which input holds the padding id; one line judges
a declared loss check::

    against_loss(LOSS_CHECK, LossOracle("next_token_loss(logits, tokens)", ...), passed="...")

Every drawn case's loss is compared with F.cross_entropy (its shape first, with hints for a loss per token or per
sequence), a match with a typical mistake's loss names it (a secret companion case confirming which of two), and
the cases that recorded gradients have them compared with autograd through the oracle. The generic kinds (calls,
modules, blocks, properties) are in course/judges/kinds.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks.compare import Mistake, expect_close, fail, matches_any, output
from course.checks.evidence import Evidence
from course.checks.kinds import Case, LossCheck, drawn
from course.judges.kinds import declared


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
