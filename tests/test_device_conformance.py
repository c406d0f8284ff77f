"""Device conformance on a CPU-only machine: every reference in course/ runs on a stand-in GPU, and nothing it makes
stays behind on the CPU.

The stand-in GPU is course/checks/device.py's: PyTorch's meta device (shapes, dtypes and a device, no data, so a
whole forward and backward runs in microseconds; PyTorch refuses to mix it with a CPU tensor, as CUDA and MPS do)
under DeviceRules, a TorchDispatchMode that adds the rules meta lacks, per GPU: on both, a CPU tensor read beside a
device tensor is refused (even a 0-dim one, which CUDA would accept); on "mps", any float64 or complex128 tensor on
the device is refused (Apple's MPS has no 64-bit float, pytorch#122602). FakeTensorMode's fake "cuda" was tried
first: on torch 2.13's CPU build `.to("cuda")` raises and F.linear on a fake CUDA tensor aborts the process.

Each reference then must run forward (and backward where the course trains it), and every output must be on the
device. test_the_layer_catches_* prove each rule with a deliberately wrong function.

What this layer cannot see (checked only by a run on a real GPU, or not at all):
- numerics: meta tensors hold no values, so no result, tolerance, TF32 rounding on Ampere and later, or
  nondeterminism of GPU kernels (atomic adds in index_add_, scatter, embedding backward) is compared;
- device-side asserts: an index out of range is only known from values; on CUDA it is an asynchronous
  device-side assert that leaves the CUDA context unusable, on the CPU an IndexError (09's section 7 now shows that
  failure on a CPU copy of the model for this reason);
- data-dependent control flow: `bool(t)`, `.item()` and `.tolist()` on a meta tensor raise, so greedy_decode (which
  stops when every row has ended) runs only up to that question: its graded outcome is "unknown" (see the test);
- a copy from the device back to the CPU (`.cpu()`, a CPU tensor filled from device tensors): meta has no data to
  copy, so such code is "unknown" too, and 08's generate, whose device mistakes go that way, is not graded on it;
- kernels missing on a real backend: meta has a shape function for nearly every operation, so an operation MPS
  lacks (or that falls back to the CPU under PYTORCH_ENABLE_MPS_FALLBACK) passes here; fused AdamW needs a real
  CUDA/MPS device and refuses meta, so optimizer steps are not run;
- code that branches on `device.type == "cuda"` sees "meta", and so takes its other branch;
- a torch.Generator's device: meta has no generator (on CUDA, multinomial with a CPU generator raises);
- speed, memory, and synchronisation (e.g. a `.cpu()` per step in a training loop).
"""

import json
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import ASSIGNMENTS
from replay import _exec_cell
from torch import nn

from autograder import course_dir
from autograder.notebooks import answer
from course import language_model as lm
from course import modern_decoder as md
from course import multi_head, positional_encoding, qkv, scaling, self_attention, seq2seq, transformer_block
from course.checks import seq2seq as seq2seq_checks
from course.checks.device import (
    GPUS,
    STAND_IN,
    DeviceRuleBroken,
    DeviceRules,
    off_device,
    on_gpu,
    on_gpus,
    outcome,
)
from course.checks.evidence import Recorder

ROOT = Path(__file__).resolve().parent.parent


def assert_on_device(outputs, what: str) -> None:
    """Every tensor in outputs (a tensor, or tuples, lists and dicts of them) is on the stand-in device."""
    left = off_device(outputs)
    assert not left, f"{what} returned {', '.join(left)}, not on the device"


def backward(loss: torch.Tensor, model: nn.Module, what: str) -> None:
    """loss.backward(), then every gradient of the model is on the device."""
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads), f"{what}: some parameter got no gradient"
    assert_on_device(grads, f"{what}'s gradients")


# ------------------------------------------------------------------ the references, each run on the device `d`

def x(*shape: int, d: torch.device) -> torch.Tensor:
    return torch.randn(*shape, device=d)


def tokens(*shape: int, vocab: int = 11, d: torch.device) -> torch.Tensor:
    return torch.randint(0, vocab, shape, device=d)


def _self_attention(d):
    return self_attention.attention_weights(x(2, 5, 4, d=d)), self_attention.basic_self_attention(x(2, 5, 4, d=d))


def _qkv(d):
    model = qkv.SelfAttentionQKV(8).to(d)
    y = model(x(2, 5, 8, d=d))
    backward(y.pow(2).mean(), model, "SelfAttentionQKV")
    return qkv.attention(x(2, 5, 4, d=d), x(2, 6, 4, d=d), x(2, 6, 3, d=d)), y


def _scaling(d):
    mask = torch.ones(5, 5, dtype=torch.bool, device=d).tril()
    model = scaling.ScaledSelfAttention(8).to(d)
    y = model(x(2, 5, 8, d=d), mask)
    backward(y.pow(2).mean(), model, "ScaledSelfAttention")
    return scaling.scaled_dot_product_attention(x(2, 5, 4, d=d), x(2, 6, 4, d=d), x(2, 6, 3, d=d),
                                                torch.ones(5, 6, dtype=torch.bool, device=d)), y


def _multi_head(d):
    out = [multi_head.merge_heads(multi_head.split_heads(x(2, 5, 8, d=d), 2))]
    for cls in (multi_head.MultiHeadAttention, multi_head.WideMultiHeadAttention):
        model = cls(8, 2).to(d)
        y = model(x(2, 5, 8, d=d), x(2, 6, 8, d=d), mask=torch.ones(2, 5, 6, dtype=torch.bool, device=d))
        backward(y.pow(2).mean(), model, cls.__name__)
        out.append(y)
    return out


def _transformer_block(d):
    model = transformer_block.TransformerClassifier(11, 8, 2, 2, 3,
                                                    positions=positional_encoding.PositionalEncoding(8, 16)).to(d)
    logits = model(tokens(2, 5, d=d), mask=torch.ones(2, 5, 5, dtype=torch.bool, device=d))
    backward(logits.logsumexp(-1).mean(), model, "TransformerClassifier")
    return logits, transformer_block.FeedForward(8, 16).to(d)(x(2, 5, 8, d=d))


def _positional_encoding(d):
    learned = positional_encoding.LearnedPositionalEmbedding(16, 8).to(d)
    return positional_encoding.PositionalEncoding(8, 16).to(d)(x(2, 5, 8, d=d)), learned(x(2, 5, 8, d=d))


def _seq2seq(d):
    model = seq2seq.Seq2SeqTransformer(11, 13, 8, 2, 2, 16).to(d)
    src, tgt = tokens(2, 6, d=d), tokens(2, 5, vocab=13, d=d)
    src_mask = seq2seq.padding_mask(torch.tensor([6, 4], device=d), 6)
    loss = seq2seq.teacher_forcing_loss(model, src, src_mask, tgt)
    seq2seq.configure_optimizer(model, 1e-3, 0.1)  # built only: fused AdamW refuses the meta device
    backward(loss, model, "Seq2SeqTransformer")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return loss, src_mask, seq2seq.causal_mask(5, device=d), model(src, tgt, src_mask)


def _language_model(d):
    out = []
    for cls in (lm.LanguageModel, lm.CachedLanguageModel):
        model = cls(11, 8, 2, 2, 16).to(d)
        ids = tokens(2, 6, d=d)
        loss = lm.next_token_loss(model(ids), ids)
        backward(loss, model, cls.__name__)
        out.append(loss)
    # no generator: meta has none (torch.Generator(device="meta") raises), so a generator's device goes unchecked
    out.append(lm.generate(model, tokens(2, 3, d=d), 4, temperature=0.8, top_k=5, top_p=0.9))
    out.append(lm.generate_cached(model, tokens(2, 3, d=d), 4, temperature=0.8, top_k=5, top_p=0.9))
    out.append(lm.sample_next_token(x(2, 11, d=d), temperature=0))
    return out


def _modern_decoder(d):
    cos, sin = md.rotary_tables(12, 4, device=d)
    out = [cos, sin, md.apply_rotary(x(2, 2, 5, 4, d=d), cos, sin, offset=3), md.RMSNorm(8).to(d)(x(2, 5, 8, d=d)),
           md.SwiGLU(8, 12).to(d)(x(2, 5, 8, d=d))]
    model = md.ModernLanguageModel(11, 8, 4, 2, 2, 16).to(d)
    ids = tokens(2, 6, d=d)
    logits, cache = model(ids, use_cache=True)
    backward(lm.next_token_loss(logits, ids), model, "ModernLanguageModel")
    with torch.no_grad():
        out += [logits, cache, model(ids[:, -1:], cache=cache, use_cache=True)]
    out.append(lm.generate_cached(model, tokens(2, 3, d=d), 4, temperature=0))
    return out


REFERENCES: dict[str, Callable[[torch.device], object]] = {
    "self_attention": _self_attention, "qkv": _qkv, "scaling": _scaling, "multi_head": _multi_head,
    "transformer_block": _transformer_block, "positional_encoding": _positional_encoding, "seq2seq": _seq2seq,
    "language_model": _language_model, "modern_decoder": _modern_decoder,
}


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("name", REFERENCES)
def test_every_reference_runs_on_the_gpu_and_leaves_nothing_on_the_cpu(name, gpu):
    torch.manual_seed(0)  # modules are built on the CPU with real weights, then moved, as a notebook does
    with on_gpu(gpu) as d:
        outputs = REFERENCES[name](d)
    assert_on_device(outputs, f"course/{name}.py on {gpu}")


def _solution_function(assignment: str, cell_id: str, name: str) -> Callable:
    """The function `name` defined by the solved cell `cell_id` of solutions/<assignment>: the code students copy."""
    notebook = next((ROOT / "solutions" / assignment).glob("*.ipynb"))
    cell = next(c for c in json.loads(notebook.read_text())["cells"] if c.get("id") == cell_id)
    namespace = {"torch": torch}
    exec("".join(cell["source"]), namespace)  # noqa: S102 - the course's own solution, not a student's
    return namespace[name]


@pytest.mark.parametrize("gpu", GPUS)
def test_09s_solution_of_rotary_tables_runs_on_the_gpu(gpu):
    rotary_tables = _solution_function("09_modern_decoder", "rotary-tables", "rotary_tables")
    with on_gpu(gpu) as d:
        tables = rotary_tables(40, 8, device=d)
    assert_on_device(tables, "09's solution of rotary_tables")
    assert all(t.dtype == torch.float32 for t in tables)


# ------------------------------------------------------------------ the layer catches what it claims

def _mask_made_on_the_cpu(x: torch.Tensor) -> torch.Tensor:
    scores = x @ x.transpose(-2, -1)
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()  # no device=: on the CPU
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def _device_ignored(t: int, device=None) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()  # device accepted, never used


def _scale_as_cpu_tensor(x: torch.Tensor) -> torch.Tensor:
    return x / torch.tensor(x.shape[-1]).sqrt()  # a 0-dim CPU tensor: CUDA accepts it, this course does not


def _angles_in_float64_on_the_device(t: int, device=None) -> torch.Tensor:
    return torch.arange(t, dtype=torch.float64, device=device).cos().float()


class _TableNotABuffer(nn.Module):
    """Keeps its table as a plain attribute, which .to(device) does not move."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Linear(4, 4)
        self.table = torch.ones(5, 4)

    def forward(self, x):
        return self.scale(x) + self.table[: x.shape[1]]


@pytest.mark.parametrize("gpu", GPUS)
def test_the_layer_catches_a_mask_made_on_the_cpu(gpu):
    with pytest.raises(DeviceRuleBroken, match="mixes a CPU tensor"), on_gpu(gpu) as d:
        _mask_made_on_the_cpu(x(2, 5, 4, d=d))


@pytest.mark.parametrize("gpu", GPUS)
def test_the_layer_catches_a_function_that_ignores_its_device_argument(gpu):
    with on_gpu(gpu) as d:
        made = _device_ignored(5, device=d)
    with pytest.raises(AssertionError, match="on cpu, not on the device"):
        assert_on_device(made, "_device_ignored")


@pytest.mark.parametrize("gpu", GPUS)
def test_the_layer_catches_a_cpu_scalar_tensor_mixed_in(gpu):
    with pytest.raises(DeviceRuleBroken, match="mixes a CPU tensor"), on_gpu(gpu) as d:
        _scale_as_cpu_tensor(x(2, 5, 4, d=d))


@pytest.mark.parametrize("gpu", GPUS)
def test_the_layer_catches_a_table_that_does_not_follow_to_device(gpu):
    model = _TableNotABuffer()
    with pytest.raises(DeviceRuleBroken, match="mixes a CPU tensor"), on_gpu(gpu) as d:
        model.to(d)(x(2, 3, 4, d=d))


def test_the_layer_catches_float64_on_mps_and_allows_it_on_cuda():
    with pytest.raises(DeviceRuleBroken, match="float64 tensor on mps"), on_gpu("mps") as d:
        _angles_in_float64_on_the_device(5, device=d)
    with on_gpu("cuda") as d:
        assert_on_device(_angles_in_float64_on_the_device(5, device=d), "float64 angles on cuda")


@pytest.mark.parametrize("gpu", GPUS)
def test_a_graded_outcome_holds_against_a_student_only_what_the_gpu_refuses(gpu):
    """The probes' outcome() is faithful, not strict: CUDA (and MPS) take CPU indices and 0-dim CPU tensors, so a
    student's code using them keeps its points; a CPU tensor of data mixed in, or an output left on the CPU, does
    not."""
    def by_cpu_indices(d):
        return torch.randn(10, 4, device=d)[torch.arange(3)], torch.randn(10, 4, device=d)[torch.arange(10) < 5]

    assert outcome(by_cpu_indices, gpu)["verdict"] == "kept"
    assert outcome(lambda d: _scale_as_cpu_tensor(x(2, 5, 4, d=d)), gpu)["verdict"] == "kept"
    assert outcome(lambda d: _mask_made_on_the_cpu(x(2, 5, 4, d=d)), gpu)["verdict"] == "broke"
    assert outcome(lambda d: _device_ignored(5, device=d), gpu)["verdict"] == "left"


@pytest.mark.parametrize("wrong", (_mask_made_on_the_cpu, _device_ignored, _angles_in_float64_on_the_device, None))
def test_a_graded_probe_records_on_each_gpu_what_its_own_rules_give(wrong):
    """on_gpus runs the student's call once, on MPS, whose rules are CUDA's and one more (no float64), and runs it
    again on CUDA only after a float64: each GPU's fact is what outcome() gives under that GPU's own rules."""
    def call(f, d):
        return f(x(2, 5, 4, d=d)) if f is _mask_made_on_the_cpu else f(5, device=d)

    rec, student = Recorder("check", "cpu"), wrong or (lambda t, device=None: torch.ones(t, device=device))
    on_gpus(lambda student, rec: None, "f", call)(student, rec)
    for gpu in GPUS:
        assert rec.evidence.facts[f"f_on_{gpu}"] == outcome(lambda d: call(student, d), gpu)


def _greedy_decode_from_cpu_start_tokens(model, src, src_mask, max_len, bos, eos):
    tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long)  # no device=: on the CPU
    for _ in range(max_len):
        tokens = torch.cat([tokens, model.decode(tokens, model.encode(src, src_mask), src_mask)[:, -1:].argmax(-1)], 1)
    return tokens[:, 1:]


@pytest.mark.parametrize("gpu", GPUS)
def test_greedy_decode_says_unknown_on_the_stand_in_and_cpu_start_tokens_break_before_it_asks(gpu):
    """The graded greedy_decode check (07) stops on `finished.all()`, which a data-less tensor cannot answer: the
    course's decode is "unknown" there (expect_on_gpus does not hold it against a student), and start tokens made on
    the CPU are refused by the first step, before the question."""
    assert outcome(lambda d: seq2seq_checks._decode_on_gpu(seq2seq.greedy_decode, d), gpu)["verdict"] == "unknown"
    seen = outcome(lambda d: seq2seq_checks._decode_on_gpu(_greedy_decode_from_cpu_start_tokens, d), gpu)
    assert seen["verdict"] == "broke", seen


def test_a_broken_rule_is_located_in_the_notebook_cell_that_called_the_course():
    """What the stand-in saw names the student's line (a cell's code, here a replay's <notebook:cell>) rather than the
    course module it called, where both are on the stack."""
    cell = {"torch": torch, "mask_made_on_the_cpu": _mask_made_on_the_cpu}
    exec(compile("def student(x):\n    return mask_made_on_the_cpu(x)\n", "<nb.ipynb:cell>", "exec"), cell)  # noqa: S102
    seen = outcome(lambda d: cell["student"](x(2, 5, 4, d=d)), "cuda")
    assert seen["verdict"] == "broke" and "<nb.ipynb:cell>, line 2" in seen["detail"], seen


# ------------------------------------------------------------------ every probe, given the stand-in as its device

class _RecordedOffTheDevice(DeviceRules):
    """A graded stand-in CUDA on which a copy off the device lands on the CPU as zeros: the recorder copies every
    value it keeps to the CPU, which a data-less tensor cannot do; what is copied is not what is checked here."""

    def __init__(self):
        super().__init__("cuda", strict=False)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args[0].device == STAND_IN \
                and kwargs.get("device", STAND_IN) != STAND_IN:
            return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype, device=kwargs["device"])
        return super().__torch_dispatch__(func, types, args, kwargs)


#: what a probe given the stand-in may raise: a torch.Generator on the device (08's draws on the notebook's device)
_NO_GENERATOR_ON_META = "META device type not an accelerator"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_probe_given_the_stand_in_mixes_no_cpu_input_into_the_solutions_computation(assignment):
    """Each test cell's check probes the solution with rec.device the stand-in CUDA: a probe that made an input on the
    CPU beside a module it moved (or a student's result) would be refused there. What runs on the CPU on purpose still
    does (06's table and 07's masks made with no device, 07's optimizer and schedule, 08's sampling and generation
    with a seeded CPU generator); greedy decoding says only "unknown" (it asks `.all()` of a data-less tensor)."""
    seen = []
    for notebook in course_dir.notebooks(assignment):
        namespace: dict = {"__name__": "__main__"}
        for cell in nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade_id"):
                continue
            if meta.get("grade_id") == "setup" or meta.get("solution"):
                _exec_cell(answer(cell.source), f"<{notebook}:{meta['grade_id']}>", namespace)
                continue
            for name, student in re.findall(r"check\.(\w+)\((\w+)", cell.source):
                try:
                    with _RecordedOffTheDevice():
                        facts = getattr(namespace["check"], name).record(namespace[student], STAND_IN).facts
                except RuntimeError as error:
                    assert _NO_GENERATOR_ON_META in str(error), f"{name}'s probe on the stand-in raised {error}"
                    continue
                seen.append(name)
                broke = {k: v["message"] for k, v in facts.items() if isinstance(v, dict)
                         and v.get("kind") == "raised" and v.get("type") == DeviceRuleBroken.__name__}
                assert not broke, f"{name}'s probe mixed a CPU tensor into the solution's computation: {broke}"
    assert seen, f"no check of {assignment} was probed"
