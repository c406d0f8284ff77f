"""What the catalogue cannot test about course.checks.positional_encoding: the reference passes every check, and
forged records (zeros, claimed structure, the right facts with wrong outputs) fail every judge."""

import dataclasses
import warnings

import pytest
import torch

from course import positional_encoding as reference
from course.checks import positional_encoding as check
from course.checks.check import checks_of
from course.checks.compare import CheckFailed
from course.checks.evidence import Evidence

CHECKS = checks_of(check)


def _student(name):
    if name.startswith("table"):
        return reference.sinusoidal_positional_encoding
    if name.startswith("positional_encoding"):
        return reference.PositionalEncoding
    return reference.LearnedPositionalEmbedding


def _honest(name) -> Evidence:
    return CHECKS[name].record(_student(name), "cpu")


def _forged(ev: Evidence, make, keep=()) -> Evidence:
    """The same facts, with every tensor (but those in keep) replaced by make(tensor)."""
    tensors = {key: (t if key in keep else make(t)) for key, t in ev.tensors.items()}
    return dataclasses.replace(ev, tensors=tensors, facts=dict(ev.facts))


def test_the_hand_case_is_sines_and_cosines_of_p_and_p_over_100():
    p = torch.arange(3.0)
    expected = torch.stack([p.sin(), p.cos(), (p / 100).sin(), (p / 100).cos()], dim=1)
    assert torch.allclose(check.reference_table(3, 4), expected)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_reference_passes(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CHECKS[name](_student(name), "cpu")


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_an_empty_record_fails(name):
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(Evidence(name))


@pytest.mark.parametrize("forge", [torch.zeros_like, lambda t: torch.full_like(t, 0.5),
                                   lambda t: torch.randn(t.shape, generator=torch.Generator().manual_seed(0))],
                         ids=["zeros", "uniform", "noise"])
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_right_facts_with_forged_outputs_fail(name, forge):
    with pytest.raises(CheckFailed):
        CHECKS[name].judge(_forged(_honest(name), forge))


def test_a_right_table_buffer_does_not_earn_the_structure_point_without_the_encoding():
    ev = _forged(_honest("positional_encoding_buffer"), torch.zeros_like, keep=("module.table",))
    with pytest.raises(CheckFailed, match="but it is not the"):
        check.positional_encoding_buffer.judge(ev)


def test_a_claimed_buffer_without_recorded_table_fails():
    ev = _honest("positional_encoding_buffer")
    del ev.tensors["module.table"]
    with pytest.raises(CheckFailed):
        check.positional_encoding_buffer.judge(ev)


@pytest.mark.parametrize("name,anchor", [("table_odd_size", "table"), ("positional_encoding_too_long", "y")])
def test_a_claimed_value_error_needs_a_real_computation(name, anchor):
    ev = _honest(name)
    assert ev.facts["long" if name.endswith("too_long") else "odd"]["type"] == "ValueError"
    ev.tensors[anchor] = torch.zeros_like(ev.tensors[anchor])
    with pytest.raises(CheckFailed, match="but"):
        CHECKS[name].judge(ev)


def test_forged_dropout_in_training_fails():
    ev = _honest("positional_encoding_oracle")
    y = ev.tensors["y_eval"]
    mask = torch.rand(y.shape, generator=torch.Generator().manual_seed(1)) < 0.5
    ev.tensors["y_train"] = torch.where(mask, torch.zeros_like(y), y)  # half zeroed, the rest not doubled
    with pytest.raises(CheckFailed, match="training mode"):
        check.positional_encoding_oracle.judge(ev)


def test_a_forged_embedding_gradient_fails():
    ev = _honest("learned_oracle")
    key = next(k for k in ev.tensors if k.startswith("grad."))
    ev.tensors[key] = torch.ones_like(ev.tensors[key])  # every row, not just the positions used
    with pytest.raises(CheckFailed, match="gradient"):
        check.learned_oracle.judge(ev)


def test_renamed_parameters_change_the_judge_s_weights_not_the_verdict():
    """Claiming the embedding under another name makes the judge recreate other values: the honest output no
    longer matches them."""
    ev = _honest("learned_structure")
    ev.facts["module.modules"] = [{**m, "name": "emb"} if m["name"] == "embedding" else m
                                  for m in ev.facts["module.modules"]]
    ev.facts["module.params"] = [["emb.weight", [10, 6]]]
    with pytest.raises(CheckFailed, match="does not match"):
        check.learned_structure.judge(ev)
