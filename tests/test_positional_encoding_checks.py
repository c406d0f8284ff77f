"""Assignment 06's checks beyond the catalogue and the generic forgeries: records that claim a structure or an
error without the computation behind it earn nothing."""

import forgery
import pytest
import torch
from replay import grade

from course.checks import positional_encoding as check
from course.checks.compare import CheckFailed
from course.judges import oracles

A = "06_positional_encoding"


def test_the_hand_case_is_sines_and_cosines_of_p_and_p_over_100():
    p = torch.arange(3.0)
    expected = torch.stack([p.sin(), p.cos(), (p / 100).sin(), (p / 100).cos()], dim=1)
    assert torch.allclose(oracles.sinusoidal_table(3, 4), expected)


def test_a_right_table_buffer_does_not_earn_the_structure_point_without_the_encoding():
    ev = forgery.forged(A, "positional_encoding_buffer",
                        lambda key, t: t if key == "module.table" else torch.zeros_like(t))
    with pytest.raises(CheckFailed, match="but it is not the"):
        check.positional_encoding_buffer.judge(ev)


def test_a_claimed_buffer_without_recorded_table_fails():
    ev = forgery.honest(A, "positional_encoding_buffer")
    del ev.tensors["module.table"]
    with pytest.raises(CheckFailed):
        check.positional_encoding_buffer.judge(ev)


@pytest.mark.parametrize("name,anchor", [("table_odd_size", "table"), ("positional_encoding_too_long", "y")])
def test_a_claimed_value_error_needs_a_real_computation(name, anchor):
    ev = forgery.honest(A, name)
    assert ev.facts["long" if name.endswith("too_long") else "odd"]["type"] == "ValueError"
    ev.tensors[anchor] = torch.zeros_like(ev.tensors[anchor])
    with pytest.raises(CheckFailed, match="but"):
        forgery.check(A, name).judge(ev)


def test_forged_dropout_in_training_fails():
    ev = forgery.honest(A, "positional_encoding_dropout")
    y = ev.tensors["y_eval"]
    mask = torch.rand(y.shape, generator=torch.Generator().manual_seed(1)) < 0.5
    ev.tensors["y_train"] = torch.where(mask, torch.zeros_like(y), y)  # half zeroed, the rest not doubled
    with pytest.raises(CheckFailed, match="training mode"):
        check.positional_encoding_dropout.judge(ev)


def test_a_forged_embedding_gradient_fails():
    ev = forgery.honest(A, "learned_gradients")
    key = next(k for k in ev.tensors if k.startswith("grad.") and k != "grad.x")
    ev.tensors[key] = torch.ones_like(ev.tensors[key])  # every row, not just the positions used
    with pytest.raises(CheckFailed, match="gradient"):
        check.learned_gradients.judge(ev)


def test_renamed_parameters_change_the_judge_s_weights_not_the_verdict():
    """Claiming the embedding under another name makes the judge recreate other values: the honest output no
    longer matches them."""
    ev = forgery.honest(A, "learned_structure")
    ev.facts["module.modules"] = [{**m, "name": "emb"} if m["name"] == "embedding" else m
                                  for m in ev.facts["module.modules"]]
    ev.facts["module.params"] = [["emb.weight", [10, 6]]]
    with pytest.raises(CheckFailed, match="does not match"):
        check.learned_structure.judge(ev)


ROWS_FROM_ONE = """class LearnedPositionalEmbedding(nn.Module):
    def __init__(self, max_len, k):
        super().__init__()
        self.rows = nn.Embedding(max_len, k)

    def forward(self, x):
        return x + self.rows(torch.arange(1, x.shape[1] + 1, device=x.device))
"""


def test_a_learned_mistake_is_named_whatever_the_student_calls_the_embedding():
    """The judge runs its written mistakes (edits of course/positional_encoding.py, whose layer is `embedding`) with
    the student's embedding weight, whatever its name; positions from 1 raise where t = max_len, which matches
    nothing, and are named on the other cases."""
    result = grade(A, {"learned_positional_embedding": ROWS_FROM_ONE}, from_cell="learned_positional_embedding")
    assert {result.verdicts[f"test_learned_{name}"].mistake for name in ("structure", "oracle", "gradients")} == {
        "embedding-positions-from-1"}, result.failures()
