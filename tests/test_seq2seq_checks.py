"""The course's reference seq2seq parts pass every check of assignment 07, and typical mistakes are named."""


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import seq2seq as reference
from course.checks import seq2seq as check
from course.checks.compare import CheckFailed

def test_an_inverted_causal_mask_is_diagnosed():
    with pytest.raises(CheckFailed, match="inverted"):
        check.causal_mask_by_hand(lambda t, device=None: ~reference.causal_mask(t, device))


def test_a_float_causal_mask_is_diagnosed():
    with pytest.raises(CheckFailed, match="returned as floats"):
        check.causal_mask_by_hand(lambda t, device=None: torch.ones(t, t, device=device).tril())


def test_an_off_by_one_padding_mask_is_diagnosed():
    def off_by_one(lengths, t):
        return torch.arange(t, device=lengths.device) <= lengths[:, None]

    with pytest.raises(CheckFailed, match="off by one"):
        check.padding_mask_by_hand(off_by_one)


class CrossAttentionOnItself(reference.DecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.self_attention(x, mask=self_mask))
        x = self.norm2(x + self.cross_attention(x))
        return self.norm3(x + self.ff(x))


def test_cross_attention_reading_the_decoder_states_is_diagnosed():
    with pytest.raises(CheckFailed, match="reads the decoder's own states"):
        check.decoder_block_matches_oracle(CrossAttentionOnItself)


class UnmaskedMemory(reference.Seq2SeqTransformer):
    def decode(self, tgt, memory, src_mask):
        return super().decode(tgt, memory, torch.ones_like(src_mask))


def test_unmasked_source_padding_is_diagnosed_by_the_oracle_and_the_property():
    with pytest.raises(CheckFailed, match="not masked in cross-attention"):
        check.model_matches_oracle(UnmaskedMemory)
    with pytest.raises(CheckFailed, match="reads the source padding"):
        check.model_ignores_padding(UnmaskedMemory)


def test_unshifted_targets_are_diagnosed():
    def unshifted(model, src, src_mask, tgt, pad=0):
        return F.cross_entropy(model(src, tgt, src_mask).transpose(1, 2), tgt, ignore_index=pad)

    with pytest.raises(CheckFailed, match="learns to copy its input"):
        check.loss_matches_oracle(unshifted)


def test_decoding_that_never_stops_is_diagnosed():
    @torch.no_grad()
    def never_stops(model, src, src_mask, max_len, bos, eos):
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens[:, 1:]

    with pytest.raises(CheckFailed, match="never stops at <eos>"):
        check.greedy_decode_scripted_model(never_stops)


def test_scripted_model_needs_its_own_predictions_fed_back():
    model = check.ScriptedModel()
    src = torch.tensor([[3, 4, 5]])
    out = check._step_by_step(model, src, torch.ones(1, 3, dtype=torch.bool), 8, check.BOS_ID, check.EOS_ID)
    assert out.tolist() == [[3 + (3 + 1) % 5, 3 + (4 + out[0, 0].item()) % 5, 3 + (5 + out[0, 1].item()) % 5, 2]]


def test_random_reference_model_used_by_the_decode_check_ends_some_sequences_early():
    torch.manual_seed(2400)
    model = reference.Seq2SeqTransformer(12, 8, 16, 2, 2, 24).eval()
    with torch.no_grad():
        model.to_logits.bias[check.EOS_ID] += 1.5
    src = torch.randint(3, 12, (4, 7), generator=torch.Generator().manual_seed(2410))
    mask = check._padding(torch.tensor([7, 3, 5, 1]), 7)
    out = check._step_by_step(model, src, mask, 10, check.BOS_ID, check.EOS_ID)
    ended = (out == check.EOS_ID).any(dim=1)
    assert 0 < int(ended.sum()) < 4 or out.shape[1] < 10, out


def test_a_model_failing_because_of_an_earlier_exercise_says_so():
    namespace = {"torch": torch, "nn": nn, "DecoderBlock": reference.DecoderBlock,
                 "causal_mask": lambda t, device=None: torch.ones(t, t, dtype=torch.bool, device=device).tril(-1)}
    exec("class Model(__import__('course.seq2seq').seq2seq.Seq2SeqTransformer):\n"
         "    def decode(self, tgt, memory, src_mask):\n"
         "        x = self.positions(self.tgt_embedding(tgt))\n"
         "        for block in self.decoder:\n"
         "            x = block(x, memory, causal_mask(tgt.shape[1], tgt.device), src_mask.unsqueeze(1))\n"
         "        return self.to_logits(x)\n", namespace)
    with pytest.raises(CheckFailed, match=r"your causal_mask \(exercise 1\) does not pass its own tests"):
        check.model_matches_oracle(namespace["Model"])


def test_the_notebook_trains_with_the_settings_the_benchmark_uses():
    import nbformat

    from autograder.course_dir import ROOT

    nb = nbformat.read(ROOT / "source" / "07_seq2seq" / "seq2seq.ipynb", as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    m, t = reference.MODEL, reference.TRAINING
    line = next(line for line in code.splitlines() if line.startswith("STEPS, BATCH_SIZE, LR = "))
    settings: dict = {}
    exec(line, {"QUICK": False}, settings)
    assert (settings["STEPS"], settings["BATCH_SIZE"], settings["LR"]) == (t["steps"], t["batch_size"], t["lr"])
    assert (f"Seq2SeqTransformer(len(SOURCE), len(TARGET), k={m['k']}, heads={m['heads']}, depth={m['depth']}, "
            f"max_len={m['max_len']})") in code
    assert f"endless_batches(train_pairs, BATCH_SIZE, seed={t['seed']})" in code
    assert "OneCycleLR(optimizer, max_lr=LR, total_steps=STEPS, pct_start=0.1" in code


def test_cross_attention_weights_are_rows_of_a_softmax_that_skip_padding():
    torch.manual_seed(0)
    model = reference.Seq2SeqTransformer(11, 9, 16, 4, 2, 20).eval()
    src = torch.randint(3, 11, (2, 6))
    src_mask = check._padding(torch.tensor([6, 4]), 6)
    weights = reference.cross_attention_weights(model, src, src_mask, torch.randint(3, 9, (2, 5)))
    assert len(weights) == 2 and all(w.shape == (2, 4, 5, 6) for w in weights)
    for w in weights:
        assert torch.allclose(w.sum(dim=-1), torch.ones(2, 4, 5))
        assert bool((w[1, :, :, 4:] == 0).all())


def test_training_lowers_the_loss():
    from course.dates import translation_data

    torch.manual_seed(0)
    train_pairs, _ = translation_data(n_train=2000, n_test=10)
    model = reference.new_model()
    losses = reference.train(model, train_pairs, "cpu", steps=30, batch_size=32, lr=2e-3)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
