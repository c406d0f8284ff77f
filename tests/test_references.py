"""The course's reference parts pass the same checks as the students' code, and the checks can fail."""

import inspect

import pytest
import torch
import torch.nn.functional as F

from course import attention as reference
from course.checks import qkv, self_attention
from course.checks.compare import CheckFailed
from course.device import get_device

CHECKS = {
    "attention_weights": (self_attention, "attention_weights", reference.attention_weights),
    "basic_self_attention": (self_attention, "basic_self_attention", reference.basic_self_attention),
    "attention": (qkv, "attention", reference.attention),
    "SelfAttentionQKV": (qkv, "module", reference.SelfAttentionQKV),
}


def _checks(module, prefix):
    return [f for name, f in inspect.getmembers(module, inspect.isfunction)
            if name.startswith(prefix) and f.__module__ == module.__name__]


@pytest.mark.parametrize("graded", list(CHECKS))
def test_reference_passes_every_check(graded):
    module, prefix, implementation = CHECKS[graded]
    checks = _checks(module, prefix)
    assert len(checks) >= 3
    for check in checks:
        if "device" in inspect.signature(check).parameters:
            check(implementation, device=get_device())
        else:
            check(implementation)


def test_softmax_over_the_wrong_axis_is_diagnosed():
    def wrong(x):
        return F.softmax(x @ x.transpose(1, 2), dim=1)

    with pytest.raises(CheckFailed, match="each column sums to 1 instead of each row"):
        self_attention.attention_weights_match_oracle(wrong)


def test_an_impostor_that_equals_everything_fails():
    class Anything(torch.Tensor):
        def __eq__(self, other):
            return True

    def cheat(x):
        return torch.zeros(x.shape[0], x.shape[1], x.shape[1]).as_subclass(Anything)

    with pytest.raises(CheckFailed, match="should return a torch.Tensor"):
        self_attention.attention_weights_by_hand(cheat)


def test_unimplemented_code_is_reported_in_plain_words():
    def stub(x):
        raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not implemented yet"):
        self_attention.basic_self_attention_by_hand(stub)


def test_device_can_be_forced_by_environment(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        monkeypatch.setenv("COURSE_DEVICE", "cuda")
        with pytest.raises(RuntimeError, match="no CUDA device"):
            get_device()


def test_check_modules_hold_no_mutable_state():
    """A student's cell could empty a list of test shapes with a method call; constants must be immutable."""
    import importlib
    import pkgutil

    import course.checks

    for info in pkgutil.iter_modules(course.checks.__path__):
        module = importlib.import_module(f"course.checks.{info.name}")
        for name, value in vars(module).items():
            if not name.startswith("_") and isinstance(value, (list, dict, set, bytearray)):
                raise AssertionError(f"course.checks.{info.name}.{name} is a mutable {type(value).__name__}: use a tuple "
                                     "or a mapping proxy")
