"""Mistakes written as code (course/judges/variants.py): how they are declared, and how a judge names one by running
them. In-process, on the worked example's reference (tests/example_check/answer.py)."""

import pytest
import torch

from course.checks import compare
from course.judges.variants import Variants, calling, module_output, simulators, together

ANSWER = "sliding_window_weights"


@pytest.fixture
def written(monkeypatch):
    monkeypatch.setattr(compare, "_DECLARED", {})  # the made-up ids below stay out of the course's
    return Variants("judges_made_up", reference="example_check.answer")


def test_an_edit_is_the_reference_with_its_change_and_one_that_no_longer_applies_is_refused(written):
    written.edit("wide", ANSWER, ("> i[:, None] - window", ">= i[:, None] - window"), mistake="made-up-wide",
                 says="one too wide.")
    (variant,) = written.of(ANSWER)
    assert ">= i[:, None] - window" in variant.code and variant.code.startswith(f"def {ANSWER}(x, window):")
    with pytest.raises(ValueError, match="occurs 0 times"):
        written.edit("stale", ANSWER, ("window + 1", "window"), mistake="made-up-stale", says="stale.")
    with pytest.raises(ValueError, match="occurs 2 times"):
        written.edit("ambiguous", ANSWER, ("i[:, None]", "i[None, :]"), mistake="made-up-ambiguous", says="two.")


def test_an_id_is_explained_the_first_time_it_is_written_and_only_then(written):
    with pytest.raises(ValueError, match="say what 'made-up-silent' means"):
        written.edit("silent", ANSWER, ("dim=-1", "dim=1"), mistake="made-up-silent")
    written.edit("columns", ANSWER, ("dim=-1", "dim=1"), mistake="made-up-columns", says="columns.")
    written.edit("batch", ANSWER, ("dim=-1", "dim=0"), mistake="made-up-columns")  # reused: its message is kept
    assert [w.mistake.explanation for w in written.written] == ["columns.", "columns."]
    with pytest.raises(ValueError, match="explained already"):
        written.edit("again", ANSWER, ("dim=-1", "dim=2"), mistake="made-up-columns", says="other words.")


def test_the_judge_skips_a_variant_that_raises_and_tries_the_others_in_order(written):
    written.edit("raises", ANSWER, ("x.shape[1]", "x.shape[7]"), mistake="made-up-raises", says="raises.")
    written.edit("first", ANSWER, ("dim=-1", "dim=1"), mistake="made-up-first", says="first.")
    written.edit("second", ANSWER, ("dim=-1)", "dim=1) + 0.0"), mistake="made-up-second", says="same output.")
    x = torch.randn(2, 5, 3)
    named = [(m.id, out) for m, out in written.outputs(ANSWER, x=x, window=2)]
    assert [i for i, _ in named] == ["made-up-first", "made-up-second"]
    assert torch.equal(named[0][1], named[1][1])  # both match: expect_close names the first, as declared


def test_variants_run_only_as_far_as_the_judge_asks(written, capsys):
    written.edit("first", ANSWER, ("dim=-1", "dim=1"), mistake="made-up-first", says="first.")
    written.edit("second", ANSWER, ("return F.softmax", "print('ran')\n    return F.softmax"), mistake="made-up-late",
                 says="late.")
    outputs = written.outputs(ANSWER, x=torch.randn(1, 3, 2), window=1)
    assert next(outputs)[0].id == "made-up-first"
    assert capsys.readouterr().out == ""  # the second has not run: a right answer, which matches none, runs none
    assert next(outputs)[0].id == "made-up-late" and capsys.readouterr().out == "ran\n"


# ------------------------------------------------------------------ modules: built with the student's recorded weights

MODULE = "SelfAttentionQKV"  # assignment 02's reference module (course/qkv.py), which calls its attention
PROJECTED = "attention(self.to_queries(x), self.to_keys(x), self.to_values(x))"


@pytest.fixture
def qkv(monkeypatch):
    monkeypatch.setattr(compare, "_DECLARED", {})
    return Variants("judges_made_up", reference="course.qkv")


def test_a_module_variant_computes_what_the_students_module_with_those_weights_computes(qkv):
    """module_output builds the variant with the recorded constructor arguments, runs it with the recorded weights."""
    qkv.edit("raw-values", MODULE, (PROJECTED, "attention(self.to_queries(x), self.to_keys(x), x)"),
             mistake="made-up-raw-values", says="raw values.")
    (variant,) = qkv.of(MODULE)
    torch.manual_seed(0)
    student = variant.run(4)  # the class a student with this mistake writes, given their own weights
    with torch.no_grad():
        student.to_keys.bias = torch.nn.Parameter(torch.randn(4))  # a bias the judge tolerates in a property
    w = {name: p.detach().clone().requires_grad_() for name, p in student.named_parameters()}
    x = torch.randn(2, 5, 4)
    before = torch.get_rng_state()
    y = module_output(variant.code, MODULE, "course.qkv", (), w, 4, x=x)
    assert torch.equal(torch.get_rng_state(), before)  # built without drawing weights: grading seeds stay put
    assert torch.allclose(y, student(x), atol=1e-6)
    y.sum().backward()  # the weights are leaves of the graph, as the student's parameters are
    assert w["to_queries.weight"].grad is not None and w["to_values.weight"].grad is None


def test_module_simulators_name_its_mistakes_then_the_called_answers_then_both_together(qkv):
    qkv.edit("raw-values", MODULE, (PROJECTED, "attention(self.to_queries(x), self.to_keys(x), x)"),
             mistake="made-up-raw-values", says="raw values.")
    qkv.edit("no-softmax", "attention", ("F.softmax(queries @ keys.transpose(-2, -1), dim=-1)",
                                         "queries @ keys.transpose(-2, -1)"), mistake="made-up-no-softmax",
             says="no softmax.")
    several = qkv.mistake("made-up-several", "two at once.")
    found = [*simulators(qkv, MODULE), *calling(qkv, MODULE, ("no-softmax",)),
             *together(qkv, MODULE, ("no-softmax",), several)]
    assert [m.id for m, _ in found] == ["made-up-raw-values", "made-up-no-softmax", "made-up-several"]
    assert found[2][0].explanation == "several things at once. (1) Raw values. (2) No softmax."
    w = {f"{role}.weight": torch.randn(3, 3) for role in ("to_queries", "to_keys", "to_values")}
    x = torch.randn(2, 4, 3)
    q, k = x @ w["to_queries.weight"].T, x @ w["to_keys.weight"].T
    assert torch.allclose(found[2][1](w, 3, x=x), q @ k.transpose(1, 2) @ x, atol=1e-5)  # both mistakes made
    with pytest.raises(ValueError, match="no variants named"):
        calling(qkv, MODULE, ("never-written",))
