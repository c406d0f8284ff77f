"""The course's reference parts pass the same checks as the students' code, and the checks can fail."""

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

from course import attention as attention_ref
from course import transformer_block as blocks_ref
from course import multi_head as multi_head_ref
from course import positional_encoding as positional_ref
from course import seq2seq as seq2seq_ref
from course.checks import multi_head, positional_encoding, qkv, scaling, self_attention, seq2seq, transformer_block
from course.checks.compare import CheckFailed
from course.device import get_device

# (checks module, name prefix of its checks, the course's reference they must accept)
REFERENCES = [
    (self_attention, "attention_weights", attention_ref.attention_weights),
    (self_attention, "basic_self_attention", attention_ref.basic_self_attention),
    (qkv, "attention_", attention_ref.attention),
    (qkv, "module_", attention_ref.SelfAttentionQKV),
    (scaling, "sdpa_", attention_ref.scaled_dot_product_attention),
    (scaling, "module_", attention_ref.ScaledSelfAttention),
    (multi_head, "split_", multi_head_ref.split_heads),
    (multi_head, "merge_", multi_head_ref.merge_heads),
    (multi_head, "narrow_", multi_head_ref.MultiHeadAttention),
    (multi_head, "wide_", multi_head_ref.WideMultiHeadAttention),
    (transformer_block, "feed_forward_", blocks_ref.FeedForward),
    (transformer_block, "block_", blocks_ref.TransformerBlock),
    (transformer_block, "classifier_", blocks_ref.TransformerClassifier),
    (positional_encoding, "table_", positional_ref.sinusoidal_positional_encoding),
    (positional_encoding, "module_", positional_ref.PositionalEncoding),
    (positional_encoding, "learned_", positional_ref.LearnedPositionalEmbedding),
    (seq2seq, "causal_mask", seq2seq_ref.causal_mask),
    (seq2seq, "padding_mask", seq2seq_ref.padding_mask),
    (seq2seq, "decoder_block", seq2seq_ref.DecoderBlock),
    (seq2seq, "model", seq2seq_ref.Seq2SeqTransformer),
    (seq2seq, "loss", seq2seq_ref.teacher_forcing_loss),
    (seq2seq, "greedy_decode", seq2seq_ref.greedy_decode),
]


def _checks(module, prefix):
    return [f for name, f in inspect.getmembers(module, inspect.isfunction)
            if name.startswith(prefix) and f.__module__ == module.__name__]


@pytest.mark.parametrize("module,prefix,implementation", REFERENCES,
                         ids=[f"{m.__name__.split('.')[-1]}:{p.rstrip('_')}" for m, p, _ in REFERENCES])
def test_reference_passes_every_check_without_warnings(module, prefix, implementation):
    checks = _checks(module, prefix)
    assert len(checks) >= 2, f"{module.__name__} has only {len(checks)} checks named {prefix}*"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning in a test cell scores it 0
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
