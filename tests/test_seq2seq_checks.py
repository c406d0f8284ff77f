"""Assignment 07's checks beyond the catalogue and the generic forgeries (test_forged_records.py): forged records
specific to 07 fail, the stand-in models behave as the checks need, and the training harness works without the
reference answers."""


import forgery
import pytest
import torch

from autograder import course_dir
from course import seq2seq as reference
from course import seq2seq_training as harness
from course.checks import seq2seq
from course.checks.compare import CheckFailed

A = "07_seq2seq"


def _noise(key: str, t: torch.Tensor) -> torch.Tensor:
    return t + 0.01 * torch.randn(t.shape, generator=torch.Generator().manual_seed(len(key)))


def test_a_claimed_structure_without_its_outputs_earns_nothing():
    """The facts of the reference DecoderBlock with outputs of another block (other weights): the structure check
    is anchored to what the block computes."""
    forged = forgery.forged(A, "decoder_block_structure", lambda key, t: torch.randn(t.shape, generator=torch.Generator()))
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
    out = seq2seq._step_by_step(model, src, torch.ones(1, 3, dtype=torch.bool), 8, seq2seq.BOS_ID, seq2seq.EOS_ID)
    assert out.tolist() == [[3 + (3 + 1) % 5, 3 + (4 + out[0, 0].item()) % 5, 3 + (5 + out[0, 1].item()) % 5, 2]]


def test_random_stand_in_translator_ends_some_sequences_early_and_not_others():
    model, src, lengths = seq2seq._random_translator()
    out = seq2seq._step_by_step(model, src, seq2seq._padding(lengths, src.shape[1]), 10, seq2seq.BOS_ID,
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


def test_the_notebook_trains_with_the_settings_the_benchmark_uses():
    import nbformat

    nb = nbformat.read(course_dir.source_dir() / "07_seq2seq" / "seq2seq.ipynb", as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    m, t = harness.MODEL, harness.TRAINING
    line = next(line for line in code.splitlines() if line.startswith("STEPS, BATCH_SIZE, LR = "))
    settings: dict = {}
    exec(line, {"QUICK": False}, settings)  # noqa: S102 - a line of the notebook
    assert (settings["STEPS"], settings["BATCH_SIZE"], settings["LR"]) == (t.steps, t.batch_size, t.lr)
    assert (f"Seq2SeqTransformer(len(SOURCE), len(TARGET), k={m.k}, heads={m.heads}, depth={m.depth}, "
            f"max_len={m.max_len})") in code
    assert f"endless_batches(train_pairs, BATCH_SIZE, seed={t.seed})" in code
    assert "OneCycleLR(optimizer, max_lr=LR, total_steps=STEPS, pct_start=0.1" in code
    assert "torch.optim.Adam(model.parameters(), lr=LR, fused=True)" in code
    with pytest.raises(AttributeError):
        harness.TRAINING.steps = 1  # frozen


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
    from course.dates import translation_data

    torch.manual_seed(0)
    train_pairs, test_pairs = translation_data(n_train=2000, n_test=10)
    model = harness.new_model(reference.Seq2SeqTransformer, config=harness.ModelConfig(k=32, heads=2, depth=1))
    losses = harness.train(model, train_pairs, "cpu", loss_fn=reference.teacher_forcing_loss,
                           padding_mask=reference.padding_mask, steps=30, batch_size=32, lr=2e-3)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    accuracy, predictions = harness.exact_match(model, test_pairs, "cpu", decode=reference.greedy_decode,
                                                padding_mask=reference.padding_mask)
    assert 0.0 <= accuracy <= 1.0 and len(predictions) == len(test_pairs)
    assert harness.parameter_count(model) == sum(p.numel() for p in model.parameters())
