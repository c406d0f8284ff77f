"""Judging a self-attention module the student builds (assignments 02, 03 and 04): its three projections and their
parameter count, its outputs anchored to the oracle or a typical mistake.

Each assignment's judges pass their own names and mistakes (owner, bias_mistake): nothing here belongs to
one assignment.
"""

from collections.abc import Mapping

import torch

from course.checks import modules
from course.checks.compare import Mistake
from course.checks.evidence import Evidence
from course.checks.kinds import Built, Runs, RunsCheck
from course.judges import kinds
from course.judges.kinds import ForwardOracle, anchor_forward

#: the projections' attribute names, as assignments 02 and 03 ask for them
ROLES = ("to_queries", "to_keys", "to_values")
PROJECTION = "nn.Linear(k, k, bias=False)"


def projections(ev: Evidence, built: Built, *, owner: str, bias_mistake: Mistake,
                gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """The module's three separate bias-free k×k projections (a bias is bias_mistake); their loaded weights."""
    __tracebackhide__ = True
    (k,) = built.args
    return kinds.expect_linear_layers(ev, built.key, f"{owner}({k})", owner,
                                      dict.fromkeys(ROLES, (k, k, False, PROJECTION, bias_mistake)),
                                      "Two of to_queries, to_keys, to_values are one layer: create three nn.Linear.",
                                      built.seed, gains)


def projection_count(k: int) -> tuple[int, str, str]:
    """What expect_structure's count is for three bias-free k×k projections: 3k² values."""
    return 3 * k * k, "three k×k matrices make 3k²", "Extra layers or biases, or a projection kept outside the module?"


def anchored(ev: Evidence, run: Runs, oracle: ForwardOracle, claim: str,
             w: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The outputs (b, t, k) of run's cases by key, each what the module computes with the weights w or what a
    typical mistake does (anchor_forward, with claim)."""
    __tracebackhide__ = True
    outputs = {case.key: kinds.forward_output(ev, case.key, oracle, case.inputs()) for case in run.cases}
    for case in run.cases:
        anchor_forward(ev, outputs[case.key], oracle, w, run.module.args, case.inputs(), claim, case.label)
    return outputs


def expect_structure(ev: Evidence, check: RunsCheck, oracle: ForwardOracle, claim: str,
                     count: tuple[int, str, str]) -> None:
    """The module of check has the right layers and count (values, formula, hint), its outputs anchored."""
    __tracebackhide__ = True
    (run,) = check.runs
    w = oracle.weights(ev, run.module)
    modules.expect_parameter_count(ev, run.module.key, kinds.block_call(run.module, oracle.owner), *count)
    anchored(ev, run, oracle, claim, w)
