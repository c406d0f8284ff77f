"""The worked example of docs/contributors.md, kept out of the course: a check of sliding_window_weights(x, window)
with three typical mistakes (tests/example_check/). Its reference passes; each mistake it writes fails and is named by
its id, with its message; a correct answer written differently passes. As in a notebook while a student works, the
check probes and judges in this process."""

import pytest
import torch
import torch.nn.functional as F
from example_check import answer, checks, judges

from course.checks.compare import CheckFailed


def test_the_reference_passes():
    checks.sliding_window_oracle(answer.sliding_window_weights)


def test_a_correct_answer_written_differently_passes():
    def with_a_band(x, window):
        t = x.shape[1]
        band = torch.ones(t, t, dtype=torch.bool).tril().triu(1 - window)
        return F.softmax((x @ x.mT).masked_fill(~band, -torch.inf), dim=-1)

    checks.sliding_window_oracle(with_a_band)


@pytest.mark.parametrize("written", judges.WRITTEN.written, ids=lambda w: w.name)
def test_each_written_mistake_fails_and_is_named_with_its_message(written):
    with pytest.raises(CheckFailed) as failed:
        checks.sliding_window_oracle(written.run)
    assert failed.value.mistake == written.mistake.id
    assert written.mistake.explanation.split()[0] in str(failed.value)


def test_the_example_writes_three_mistakes_as_code():
    assert [w.mistake.id for w in judges.WRITTEN.written] == [
        "window-one-too-wide", "window-sees-the-future", "masked-after-softmax"]
    assert "i[:, None] - window" in judges.WRITTEN.written[0].code  # the reference, edited
