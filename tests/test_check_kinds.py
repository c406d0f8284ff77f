"""The check kinds (course/checks/kinds.py, course/judges/kinds.py): a check declared once, whose probe and judge
draw the same cases. Shown on assignment 01, whose checks are all declared this way but its two properties."""

import pytest
import torch
import torch.nn.functional as F

from course.checks import self_attention as probes
from course.checks.compare import CheckFailed
from course.checks.kinds import drawn
from course.checks.seeds import grading_seed
from course.self_attention import attention_weights, basic_self_attention


def _verdict(check, student) -> str | None:
    """None when the check passes, else the mistake id it names ('' for none)."""
    try:
        check(student)
    except CheckFailed as failure:
        return failure.mistake or ""
    return None


def test_a_secret_case_is_drawn_only_under_grading_and_from_the_grading_seed():
    check = probes.attention_weights_by_hand
    assert [c.key for c in drawn(check.cases)] == ["w"]
    with grading_seed(1234):
        assert [c.key for c in drawn(check.cases)] == ["w", "w_secret"]
        first = check.record(attention_weights).tensors["w_secret"]
    with grading_seed(5678):
        other = check.record(attention_weights).tensors["w_secret"]
    assert first.shape == other.shape == (2, 5, 5) and not torch.allclose(first, other)


def test_probe_and_judge_agree_on_every_case_under_any_seed():
    for seed in (None, 7, 99):
        with grading_seed(seed):
            for check, answer in ((probes.attention_weights_by_hand, attention_weights),
                                  (probes.attention_weights_oracle, attention_weights),
                                  (probes.basic_self_attention_by_hand, basic_self_attention),
                                  (probes.basic_self_attention_oracle, basic_self_attention)):
                record = check.record(answer)
                assert {c.key for c in drawn(check.cases)} <= set(record.tensors), check.name
                assert _verdict(check, answer) is None, (check.name, seed)


def test_a_declared_check_names_the_mistake_its_oracle_simulates():
    def columns(x):
        return F.softmax(x @ x.transpose(1, 2), dim=1)

    assert _verdict(probes.attention_weights_oracle, columns) == "softmax-over-columns"
    assert _verdict(probes.basic_self_attention_oracle, lambda x: x) == "output-is-input"


def test_a_gradient_case_records_and_judges_the_input_gradient():
    record = probes.basic_self_attention_vs_pytorch.record(basic_self_attention)
    assert record.tensors["grad.x"].shape == (2, 4, 3)

    def detached(x):
        return basic_self_attention(x.detach())

    assert _verdict(probes.basic_self_attention_vs_pytorch, detached) == "detached"


def test_a_declared_pass_message_is_what_a_passing_test_says():
    assert probes.attention_weights_oracle.passed.startswith("Random inputs of several shapes")
    assert probes.permutation_equivariance.passed.startswith("Permuting the input positions")  # a docstring judge


def test_a_module_check_builds_with_the_checks_weights_and_records_every_gradient():
    from course.checks import qkv as probes_02  # noqa: PLC0415 - assignment 02's declared module checks
    from course.qkv import SelfAttentionQKV  # noqa: PLC0415

    record = probes_02.self_attention_qkv_oracle.record(SelfAttentionQKV)
    assert {"y0", "y1", "y2", "y_grad", "grad.x"} <= set(record.tensors)
    assert {"grad.to_queries.weight", "grad.to_keys.weight", "grad.to_values.weight"} <= set(record.tensors)
    assert _verdict(probes_02.self_attention_qkv_oracle, SelfAttentionQKV) is None

    class KeysAsValues(SelfAttentionQKV):
        def forward(self, x):
            from course.qkv import attention  # noqa: PLC0415
            return attention(self.to_queries(x), self.to_keys(x), self.to_keys(x))

    assert _verdict(probes_02.self_attention_qkv_oracle, KeysAsValues) == "keys-as-values"


class _BrokenBackward(torch.autograd.Function):
    """Identity forward, and a backward pass that raises, as a hand-written autograd.Function with a bug does."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("the backward pass of this Function is broken")


def test_an_error_in_the_backward_pass_is_recorded_and_named_not_raised_in_the_probe():
    from course.checks import qkv as probes_02  # noqa: PLC0415 - a declared module check with a gradient case
    from course.qkv import SelfAttentionQKV  # noqa: PLC0415

    def broken_function(x):
        return _BrokenBackward.apply(basic_self_attention(x))

    class BrokenModule(SelfAttentionQKV):
        def forward(self, x):
            return _BrokenBackward.apply(super().forward(x))

    for check, student in ((probes.basic_self_attention_vs_pytorch, broken_function),
                           (probes_02.self_attention_qkv_vs_pytorch, BrokenModule)):
        record = check.record(student)  # the probe finishes: the error is evidence, not a crash of the test cell
        errors = [fact["type"] for key, fact in record.facts.items() if key.endswith(".backward")]
        assert errors == ["RuntimeError"], check.name
        try:
            check(student)
        except CheckFailed as failure:
            assert failure.mistake == "raised" and "the backward pass of this Function is broken" in str(failure)
        else:
            raise AssertionError(f"{check.name} passed a module whose backward pass raises")


def test_a_checks_judges_are_those_of_the_module_that_declares_it(monkeypatch):
    """A declared check finds its judges through the module of course/checks that binds it under its name (no frame
    of the declaring code is inspected), and a check that no such module binds, or two do, is refused by name."""
    import sys  # noqa: PLC0415
    from types import ModuleType  # noqa: PLC0415

    from course.checks.kinds import calls, random_case  # noqa: PLC0415

    assert probes.attention_weights_by_hand.module == "self_attention"
    assert probes.basic_self_attention_oracle.module == "self_attention"
    stray = calls("stray", (random_case("w", (1, 2, 2), 1),))
    with pytest.raises(LookupError, match="'stray' is bound under its name in 0 modules"):
        stray.judge  # noqa: B018 - asking for the judge is what looks the module up
    twice = ModuleType("course.checks.copy_of_self_attention")
    twice.attention_weights_oracle = probes.attention_weights_oracle
    monkeypatch.setitem(sys.modules, twice.__name__, twice)
    with pytest.raises(LookupError, match="in 2 modules"):
        probes.attention_weights_oracle.module  # noqa: B018 - reading it looks the module up


def test_only_a_check_declared_with_backward_records_and_judges_gradients():
    """A case with an upstream gradient belongs to a check declared with calls_backward (judged with
    against_gradients) or builds_and_runs_backward: the plain kinds refuse it at declaration, so no gradient goes
    unrecorded or unjudged, and a check without one never reads the gradient code."""
    from course.checks.kinds import Built, Runs, builds_and_runs, calls, random_case  # noqa: PLC0415
    from course.judges.kinds import against  # noqa: PLC0415
    from course.judges.self_attention import WEIGHTS  # noqa: PLC0415

    case = random_case("w", (1, 2, 2), 1, upstream=((1, 2, 2), 2))
    with pytest.raises(ValueError, match="calls_backward"):
        calls("stray", (case,))
    with pytest.raises(ValueError, match="builds_and_runs_backward"):
        builds_and_runs("stray", (Runs(Built(key="module", args=(2,), seed=3), (case,)),))
    with pytest.raises(ValueError, match="against_gradients"):
        against(probes.attention_weights_vs_pytorch, WEIGHTS, passed="")


def test_a_module_check_that_records_gradients_names_how_its_judge_judges_them():
    """A module check declared with builds_and_runs_backward is judged by against_forward or against_block with
    gradients= (expect_forward_gradients, expect_block_gradients); without it they refuse the check at declaration,
    so no recorded gradient goes unjudged, and a check without one never reads the gradient judging."""
    from course.checks import qkv, transformer_block  # noqa: PLC0415
    from course.judges.kinds import against_block, against_forward  # noqa: PLC0415
    from course.judges.qkv import MODULE  # noqa: PLC0415
    from course.judges.transformer_block import TOLERANT  # noqa: PLC0415

    with pytest.raises(ValueError, match="gradients=expect_forward_gradients"):
        against_forward(qkv.self_attention_qkv_oracle, MODULE, passed="")
    with pytest.raises(ValueError, match="gradients=expect_block_gradients"):
        against_block(transformer_block.transformer_block_gradients, TOLERANT, passed="")
