"""Assignment 07's checks beyond the catalogue and the generic forgeries (test_forged_records.py): forged records
specific to 07 fail, the stand-in models behave as the checks need, and the training harness works without the
reference answers."""

import functools
import importlib.util
import sys
from dataclasses import replace

import forgery
import nbformat
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from autograder import course_dir
from autograder.notebooks import grade_id
from course import seq2seq as reference
from course import seq2seq_training as harness
from course.checks import seq2seq
from course.checks.compare import CheckFailed
from course.dates import translation_data
from course.judges import seq2seq as judges

A = "07_seq2seq"


def _noise(key: str, t: torch.Tensor) -> torch.Tensor:
    return t + 0.01 * torch.randn(t.shape, generator=torch.Generator().manual_seed(len(key)))


def test_a_claimed_structure_without_its_outputs_earns_nothing():
    """The facts of the reference DecoderBlock with outputs of another block (other weights): the structure check
    is anchored to what the block computes."""
    forged = forgery.forged(A, "decoder_block_structure",
                            lambda key, t: torch.randn(t.shape, generator=torch.Generator()))
    with pytest.raises(CheckFailed, match="it is not a decoder block"):
        seq2seq.decoder_block_structure.judge(forged)


def test_a_model_failing_because_of_an_earlier_exercise_says_so():
    namespace = {"torch": torch, "nn": torch.nn, "DecoderBlock": reference.DecoderBlock, "__name__": "notebook",
                 "causal_mask": lambda t, device=None: torch.ones(t, t, dtype=torch.bool, device=device).tril(-1)}
    exec("class Model(__import__('course.seq2seq').seq2seq.Seq2SeqTransformer):\n"  # noqa: S102 - a notebook namespace
         "    def decode(self, tgt, memory, src_mask):\n"
         "        x = self.positions(self.tgt_embedding(tgt))\n"
         "        for block in self.decoder:\n"
         "            x = block(x, memory, causal_mask(tgt.shape[1], tgt.device), src_mask.unsqueeze(1))\n"
         "        return self.to_logits(x)\n", namespace)
    with pytest.raises(CheckFailed, match=r"your causal_mask \(exercise 1\) does not pass its own tests"):
        seq2seq.seq2seq_oracle(namespace["Model"])


def test_scripted_model_needs_its_own_predictions_fed_back():
    model = seq2seq.ScriptedModel()
    src = torch.tensor([[3, 4, 5]])
    out = judges._step_by_step(model, src, torch.ones(1, 3, dtype=torch.bool), 8, seq2seq.BOS_ID, seq2seq.EOS_ID)
    assert out.tolist() == [[3 + (3 + 1) % 5, 3 + (4 + out[0, 0].item()) % 5, 3 + (5 + out[0, 1].item()) % 5, 2]]


def test_random_stand_in_translator_ends_some_sequences_early_and_not_others():
    model, src, lengths = seq2seq._random_translator()
    out = judges._step_by_step(model, src, judges._padding(lengths, src.shape[1]), 10, seq2seq.BOS_ID,
                                seq2seq.EOS_ID)
    ended = (out == seq2seq.EOS_ID).any(dim=1)
    assert 0 < int(ended.sum()) < len(lengths) and out.shape[1] == 10, out
    assert len({tuple(row) for row in out.tolist()}) == len(lengths), "every source gets its own translation"


def test_nothing_the_kernel_needs_while_07_is_graded_imports_the_answers():
    """The checks and the training harness work while course/seq2seq.py is hidden."""
    root = course_dir.ROOT
    assert "seq2seq_training" not in course_dir.answer_modules("07_seq2seq")
    for path in (root / "course" / "seq2seq_training.py", root / "course" / "checks" / "seq2seq.py"):
        assert "seq2seq" not in course_dir.course_imports(path), path


def _notebook_training_call(monkeypatch) -> tuple[dict, dict, list[str]]:
    """Run the solution's cells up to its training cell, as nbgrader runs them (training cut short), with the
    harness's train() watched: (the arguments it was called with, the notebook's names, each cell's stderr)."""
    calls, train = [], harness.train

    @functools.wraps(train)
    def watched(model, pairs, device, **kwargs):
        calls.append({"model": model, "pairs": pairs, **kwargs})
        return train(model, pairs, device, **kwargs)

    monkeypatch.setattr(harness, "train", watched)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    nb = nbformat.read(course_dir.source_dir() / A / "seq2seq.ipynb", as_version=4)
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(colors="nocolor")
    stderr = []
    try:
        for cell in nb.cells:
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
                continue  # test cells: graded elsewhere
            with capture_output() as shown:
                assert shell.run_cell(cell.source).success, shown.stdout + shown.stderr
            stderr.append(shown.stderr)
            if grade_id(cell) == "demo_11":
                break
        names = dict(shell.user_ns)
    finally:
        InteractiveShell.clear_instance()
    assert len(calls) == 1, f"the notebook called the harness's train() {len(calls)} times"
    return calls[0], names, stderr


def test_the_notebook_trains_through_the_harness_with_its_settings_silently_under_grading(monkeypatch):
    """One loop: the notebook's training is the harness's train(), given the student's parts, TRAINING (cut to
    20 steps under grading) and a model of MODEL's size; under grading no progress bar and nothing on stderr."""
    call, names, stderr = _notebook_training_call(monkeypatch)
    assert call["config"] == replace(harness.TRAINING, steps=20)
    assert call["loss_fn"] is names["teacher_forcing_loss"] and call["padding_mask"] is names["padding_mask"]
    for part in ("configure_optimizer", "learning_rate", "train_step"):
        assert call[part] is names[part], part
    assert call["check"] is names["exact_match_by_format"]  # train() itself keeps quiet under grading: stderr below
    model, m = call["model"], harness.MODEL
    assert isinstance(model, names["Seq2SeqTransformer"]) and model is names["model"]
    assert (model.src_embedding.embedding_dim, len(model.encoder), len(model.decoder)) == (m.k, m.depth, m.depth)
    assert model.decoder[0].self_attention.heads == m.heads and model.positions.table.shape[0] == m.max_len
    log = names["log"]
    assert sorted(log.checks) == [20] and len(log.losses) == len(log.lrs) == len(log.norms) == 20
    assert log.lrs[1] == harness.TRAINING.lr and log.lrs[-1] == 0.0  # 2 warm-up steps of 20; 0 at the last
    assert not "".join(stderr), "".join(stderr)


def test_the_benchmark_trains_through_the_harness_with_the_notebooks_settings(monkeypatch, capsys):
    """benchmarks/train_seq2seq.py reads the same MODEL and TRAINING objects and calls the same train()."""
    monkeypatch.syspath_prepend(str(course_dir.ROOT / "benchmarks"))  # as when run as a script: common.py
    spec = importlib.util.spec_from_file_location("train_seq2seq", course_dir.ROOT / "benchmarks" / "train_seq2seq.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    assert benchmark.MODEL is harness.MODEL and benchmark.TRAINING is harness.TRAINING
    assert benchmark.train is harness.train and benchmark.new_model is harness.new_model
    calls = []

    def watched(model, pairs, device, **kwargs):
        calls.append({"model": model, **kwargs})
        return harness.TrainingLog(losses=[1.0], seconds=1.0)

    monkeypatch.setattr(benchmark, "train", watched)
    monkeypatch.setattr(benchmark, "exact_match", lambda *args, **kwargs: (1.0, []))
    monkeypatch.setattr(sys, "argv", ["train_seq2seq.py", "--device", "cpu", "--threads", "0"])
    benchmark.main()
    assert [call["config"] for call in calls] == [harness.TRAINING]
    assert calls[0]["loss_fn"] is reference.teacher_forcing_loss
    assert (calls[0]["configure_optimizer"], calls[0]["learning_rate"], calls[0]["train_step"]) == (
        reference.configure_optimizer, reference.learning_rate, reference.train_step)
    assert calls[0]["model"].src_embedding.embedding_dim == harness.MODEL.k
    assert "held-out exact match" in capsys.readouterr().out


def test_the_settings_are_frozen():
    with pytest.raises(AttributeError):
        harness.TRAINING.steps = 1
    with pytest.raises(AttributeError):
        harness.MODEL.k = 1


def test_cross_attention_weights_are_rows_of_a_softmax_that_skip_padding():
    torch.manual_seed(0)
    model = reference.Seq2SeqTransformer(11, 9, 16, 4, 2, 20).eval()
    src = torch.randint(3, 11, (2, 6))
    src_mask = reference.padding_mask(torch.tensor([6, 4]), 6)
    weights = harness.cross_attention_weights(model, src, src_mask, torch.randint(3, 9, (2, 5)))
    assert len(weights) == 2 and all(w.shape == (2, 4, 5, 6) for w in weights)
    for w in weights:
        assert torch.allclose(w.sum(dim=-1), torch.ones(2, 4, 5))
        assert bool((w[1, :, :, 4:] == 0).all())


def test_training_with_the_reference_parts_lowers_the_loss_and_translates():
    torch.manual_seed(0)
    train_pairs, test_pairs = translation_data(n_train=2000, n_test=10)
    model = harness.new_model(reference.Seq2SeqTransformer, config=harness.ModelConfig(k=32, heads=2, depth=1))
    checks = []
    log = harness.train(model, train_pairs, "cpu", loss_fn=reference.teacher_forcing_loss,
                        padding_mask=reference.padding_mask, configure_optimizer=reference.configure_optimizer,
                        learning_rate=reference.learning_rate, train_step=reference.train_step,
                        config=harness.TrainingConfig(steps=30, batch_size=32, lr=2e-3),
                        check=lambda m: checks.append(m.training) or {"a": 0.5, "b": 1.0}, check_every=10)
    losses = log.losses
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert len(losses) == len(log.lrs) == len(log.norms) == 30 and 0 < log.seconds
    assert log.checks == {s: {"a": 0.5, "b": 1.0} for s in (10, 20, 30)}
    assert checks == [True, True, True] and not model.training  # checks see the model as it trains; eval after
    accuracy, predictions = harness.exact_match(model, test_pairs, "cpu", decode=reference.greedy_decode,
                                                padding_mask=reference.padding_mask)
    assert 0.0 <= accuracy <= 1.0 and len(predictions) == len(test_pairs)
    assert harness.parameter_count(model) == sum(p.numel() for p in model.parameters())
