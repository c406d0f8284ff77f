"""A module's typical mistakes (course/judges/kinds.py ForwardOracle) are run only when they can matter: none for a
right output, and in order up to the first one the output matches (04 has 179 per case). In-process, on a made-up
oracle whose mistakes record that they ran."""

import pytest
import torch

from course.checks import compare
from course.checks.compare import CheckFailed, Mistake
from course.checks.evidence import Evidence
from course.checks.kinds import Built, Case
from course.judges.kinds import ForwardOracle, anchor_forward, expect_forward_case, simulated

W = {"scale": torch.tensor(2.0)}
X = torch.arange(6.0).reshape(1, 2, 3)
ARGS = (3,)  # the constructor arguments: k
BUILT = Built("m", ARGS, seed=0)


def _oracle(ran: list[str]) -> ForwardOracle:
    """x · scale is right; the mistakes are x · (scale + i), each recording its id in ran when it runs."""

    def mistake(i: int):
        def simulate(w, k, x):
            ran.append(f"plus-{i}")
            assert not torch.is_grad_enabled(), "a mistake runs without autograd"
            return x * (w["scale"] + i)
        return Mistake(f"plus-{i}", f"{i} too much.", declared_in="made_up"), simulate

    return ForwardOracle("Made", "made-up scaling", lambda ev, built: W, lambda w, k, x: x * w["scale"], "x · scale",
                         simulators=lambda k, x: [mistake(i) for i in (1, 2, 3)])


@pytest.fixture(autouse=True)
def _made_up_ids(monkeypatch):
    monkeypatch.setattr(compare, "_DECLARED", {})  # the made-up ids below stay out of the course's


def _evidence(y: torch.Tensor) -> Evidence:
    return Evidence("made", tensors={"y": y},
                    facts={"y": {"kind": "tensor", "type": "Tensor", "shape": list(y.shape), "dtype": str(y.dtype),
                                 "device": "cpu"}})


@pytest.mark.parametrize(("y", "runs"), [(X * 2, []), (X * 4, ["plus-1", "plus-2"])], ids=["right", "second-mistake"])
def test_an_anchor_runs_no_mistake_for_a_right_output_and_stops_at_the_first_match(y, runs):
    ran: list[str] = []
    anchor_forward(_evidence(y), y, _oracle(ran), W, ARGS, {"x": X}, "It scales", "x (1, 2, 3)")
    assert ran == runs


def test_an_anchor_fails_an_output_that_is_none_of_the_mistakes_after_running_them_all():
    ran: list[str] = []
    with pytest.raises(CheckFailed, match=r"neither the reference\s+nor a known mistake"):
        anchor_forward(_evidence(X * 9), X * 9, _oracle(ran), W, ARGS, {"x": X}, "It scales", "x (1, 2, 3)")
    assert ran == ["plus-1", "plus-2", "plus-3"]


@pytest.mark.parametrize(("y", "runs", "named"), [(X * 2, [], None), (X * 4, ["plus-1", "plus-2"], "plus-2")],
                         ids=["right", "second-mistake"])
def test_a_forward_case_runs_no_mistake_for_a_right_output_and_names_the_first_it_matches(y, runs, named):
    ran: list[str] = []
    case = Case("y", lambda: {"x": X}, "x (1, 2, 3)")
    if named is None:
        expect_forward_case(_evidence(y), W, BUILT, case, _oracle(ran))
    else:
        with pytest.raises(CheckFailed) as failed:
            expect_forward_case(_evidence(y), W, BUILT, case, _oracle(ran))
        assert failed.value.mistake == named
    assert ran == runs


def test_the_mistakes_outputs_come_one_at_a_time_and_leave_autograd_on_for_their_reader():
    ran: list[str] = []
    outputs = simulated(_oracle(ran), W, ARGS, {"x": X})
    assert ran == []
    mistake, out = next(outputs)
    assert (mistake.id, ran) == ("plus-1", ["plus-1"]) and torch.equal(out, X * 3)
    assert torch.is_grad_enabled()
