"""Evidence records are read as data and nothing else: every malformed record gives a plain 'bad-evidence'
verdict for its own test, and the judge never runs code it loads."""

import json
import os
import pickle

import pytest
import torch
from safetensors.torch import save

from autograder.judging import judge
from course.checks import self_attention
from course.checks.evidence import Evidence, Recorder, read, write
from course.self_attention import attention_weights

CHECK = self_attention.attention_weights_by_hand
MARKER = "/tmp/course-test-evidence-pickle-ran"


class _Boom:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def _good(folder):
    write(CHECK.record(self_attention_reference(), "cpu"), folder / CHECK.name)


def self_attention_reference():
    return attention_weights


def test_a_real_record_round_trips_and_passes(tmp_path):
    _good(tmp_path)
    evidence = read(tmp_path / CHECK.name, CHECK.name)
    assert set(evidence.tensors) == {"w"} and evidence.facts["w"]["kind"] == "tensor"
    assert judge(CHECK, tmp_path).passed


def _corrupt(tmp_path, how):
    _good(tmp_path)
    folder = tmp_path / CHECK.name
    if how == "missing":
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    elif how == "truncated":
        data = (folder / "tensors.safetensors").read_bytes()
        (folder / "tensors.safetensors").write_bytes(data[: len(data) // 2])
    elif how == "pickle":
        (folder / "tensors.safetensors").write_bytes(pickle.dumps(_Boom()))
    elif how == "oversized":
        (folder / "tensors.safetensors").write_bytes(b"\0" * (33 << 20))
    elif how == "symlink":
        (folder / "tensors.safetensors").unlink()
        (folder / "tensors.safetensors").symlink_to("/etc/passwd")
    elif how == "symlinked-folder":
        other = tmp_path / "elsewhere"
        folder.rename(other)
        folder.symlink_to(other)
    elif how == "extra-file":
        (folder / "exploit.py").write_text("import os")
    elif how == "wrong-dtype":
        (folder / "tensors.safetensors").write_bytes(save({"w": torch.zeros(1, 3, 3, dtype=torch.complex64)}))
    elif how == "another-check":
        record = json.loads((folder / "record.json").read_text())
        record["check"] = "attention_weights_rows"
        (folder / "record.json").write_text(json.dumps(record))
    elif how == "not-json":
        (folder / "record.json").write_text("{'format': ")
    elif how == "deep-json":
        (folder / "record.json").write_text("[" * 100_000 + "]" * 100_000)
    elif how == "wrong-shape-fact":
        record = json.loads((folder / "record.json").read_text())
        record["facts"]["w"]["shape"] = "everything"
        (folder / "record.json").write_text(json.dumps(record))
    elif how == "nan":
        (folder / "tensors.safetensors").write_bytes(save({"w": torch.full((1, 3, 3), float("nan"))}))
    elif how == "fifo":
        (folder / "tensors.safetensors").unlink()
        os.mkfifo(folder / "tensors.safetensors")
    return tmp_path


@pytest.mark.parametrize("how", ["missing", "truncated", "pickle", "oversized", "symlink", "symlinked-folder",
                                 "extra-file", "wrong-dtype", "another-check", "not-json", "deep-json",
                                 "wrong-shape-fact", "nan", "fifo"])
def test_a_bad_record_fails_its_test_with_a_plain_message(tmp_path, how):
    if os.path.exists(MARKER):
        os.unlink(MARKER)
    verdict = judge(CHECK, _corrupt(tmp_path, how))
    assert not verdict.passed
    assert verdict.message and "Traceback" not in verdict.message
    assert not os.path.exists(MARKER), "a pickle was unpickled"
    if how not in ("nan", "wrong-shape-fact"):
        assert verdict.mistake == "bad-evidence", verdict.message


def test_recorder_keeps_plain_cpu_copies_and_the_exceptions_of_student_code():
    rec = Recorder("demo", "cpu")

    class Sub(torch.Tensor):
        pass

    x = torch.ones(2, requires_grad=True)
    rec.call("ok", lambda: (x * 2).as_subclass(Sub))
    rec.call("boom", lambda: 1 / 0)
    rec.call("todo", lambda: (_ for _ in ()).throw(NotImplementedError()))
    facts = rec.evidence.facts
    assert facts["ok"]["type"] == "Sub" and type(rec.evidence.tensors["ok"]) is torch.Tensor
    assert facts["ok"]["requires_grad"] and not rec.evidence.tensors["ok"].requires_grad
    assert facts["boom"]["type"] == "ZeroDivisionError" and not facts["boom"]["not_implemented"]
    assert facts["todo"]["not_implemented"]


def test_a_subclass_pretending_to_be_a_tensor_is_named_as_what_it_is(tmp_path):
    class Anything(torch.Tensor):
        def __eq__(self, other):
            return True

    evidence = CHECK.record(lambda x: torch.zeros(1, 3, 3).as_subclass(Anything), "cpu")
    write(evidence, tmp_path / CHECK.name)
    verdict = judge(CHECK, tmp_path)
    assert not verdict.passed and "should return a torch.Tensor, but returned Anything" in verdict.message


def test_evidence_holds_only_plain_data():
    evidence = CHECK.record(self_attention_reference(), "cpu")
    assert isinstance(evidence, Evidence)
    json.dumps(evidence.facts)  # JSON all the way down
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in evidence.tensors.values())
