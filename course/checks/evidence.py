"""Evidence: the plain data a probe records about the student's code, written and read without running code.

A probe runs the student's code on inputs the check chooses and records what came out: tensors (moved to the
CPU, detached) and JSON facts (types, shapes, exception names and messages, parameter names). A judge decides
from that record alone. Under grading the kernel writes one record per test cell into ``.evidence/<check>/``
— ``record.json`` and ``tensors.safetensors``, never a pickle — and the grader reads it back in its own
process with :func:`read`, which refuses anything that is not exactly such a record.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

FORMAT = "course-evidence/1"
FOLDER = ".evidence"
RECORD = "record.json"
TENSORS = "tensors.safetensors"
#: size limits of one record: a probe records small cases, so anything larger is not a probe's record
MAX_RECORD_BYTES = 1 << 20
MAX_TENSOR_BYTES = 32 << 20
MAX_MESSAGE = 600
MAX_TRACE = 2400
#: dtypes a record may hold; anything else is refused
DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.int64, torch.int32,
                    torch.int8, torch.uint8})

_Tensor = torch.Tensor  # bound at import: a cell rebinding torch.Tensor does not change what counts as one


class BadEvidence(Exception):
    """A record that is missing, malformed, oversized, or not what a probe writes."""


@dataclass
class Evidence:
    """What a probe saw: tensors by key, and JSON facts by key (see Recorder for their shapes)."""

    check: str
    device: str = "cpu"
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------- keys
# A probe records under keys its judge reads back; each kind of key is made by one function, on both sides.

def gradient_key(name: str) -> str:
    """The gradient that the input or parameter `name` received: grad.<name>."""
    return f"grad.{name}"


def fact_key(key: str, fact: str) -> str:
    """A fact about what key holds (its module's params, parts..., its backward pass, an output): <key>.<fact>."""
    return f"{key}.{fact}"


def item_key(key: str, index: int) -> str:
    """Item index of a tuple recorded under key: <key>.<index>."""
    return f"{key}.{index}"


def prerequisite_key(check: str) -> str:
    """A check's record of an earlier exercise's check `check` (course/checks/check.py): pre.<check>."""
    return f"pre.{check}"


# ------------------------------------------------------------------------------------------- the probe's side

def _student_frames(error: BaseException) -> str:
    """The traceback of an error in the student's code, without the course's own frames."""
    checks_dir = str(Path(__file__).resolve().parent)
    lines = []
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.startswith(checks_dir):
            continue
        where = "a notebook cell" if "ipykernel_" in frame.filename else frame.filename
        lines += [f"  {where}, line {frame.lineno}, in {frame.name}", f"    {frame.line}"]
    return "\n".join(lines)[-MAX_TRACE:]


class Recorder:
    """Runs the student's code for a probe and records what it gives.

    Facts of a recorded value (``describe``): ``{"kind": "tensor", "type", "dtype", "shape", "device",
    "requires_grad"}`` with the tensor itself in ``tensors``; ``{"kind": "tuple", "length"}`` with the items
    under ``key.0``, ``key.1``, ...; ``{"kind": "none"}``; ``{"kind": "other", "type"}``; and for code that
    raised ``{"kind": "raised", "type", "message", "trace", "not_implemented"}``.
    """

    def __init__(self, check: str, device: torch.device | str):
        self.device = torch.device(device)
        self.evidence = Evidence(check, self.device.type)

    def call(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs), recorded under key; None when it raised (the error is recorded instead)."""
        try:
            value = fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - whatever the student's code raises is evidence
            self.raised(key, error)
            return None
        self.value(key, value)
        return value

    def raised(self, key: str, error: BaseException) -> None:
        self.evidence.facts[key] = {
            "kind": "raised", "type": type(error).__name__, "message": str(error)[:MAX_MESSAGE],
            "trace": _student_frames(error), "not_implemented": isinstance(error, NotImplementedError),
        }

    def value(self, key: str, value: Any) -> None:
        """Record any value: tensors (copied to the CPU), tuples of them, or just the type of anything else."""
        if isinstance(value, _Tensor):
            self.evidence.facts[key] = {
                "kind": "tensor", "type": type(value).__name__, "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape), "device": value.device.type, "requires_grad": bool(value.requires_grad),
            }
            self.evidence.tensors[key] = value.detach().to("cpu").as_subclass(_Tensor).clone().contiguous()
        elif isinstance(value, (tuple, list)):
            self.evidence.facts[key] = {"kind": "tuple", "length": len(value)}
            for i, item in enumerate(value[:8]):
                self.value(item_key(key, i), item)
        elif value is None:
            self.evidence.facts[key] = {"kind": "none"}
        else:
            self.evidence.facts[key] = {"kind": "other", "type": type(value).__name__}

    tensor = value  # a tensor the probe computed from the student's results (a gradient, say); None if missing

    def fact(self, key: str, value: Any) -> None:
        """Record a JSON value: a flag, a count, a list of parameter names and shapes."""
        self.evidence.facts[key] = json.loads(json.dumps(value))


# ------------------------------------------------------------------------------------------- files

def write(evidence: Evidence, folder: Path) -> None:
    """Write one record: folder/record.json and folder/tensors.safetensors (replacing what was there)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    record = {"format": FORMAT, "check": evidence.check, "device": evidence.device, "facts": evidence.facts}
    (folder / RECORD).write_text(json.dumps(record))
    (folder / TENSORS).write_bytes(save(dict(evidence.tensors)))


def _read_regular_file(path: Path, limit: int) -> bytes:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise BadEvidence(f"{path.name} is missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise BadEvidence(f"{path.name} is not a plain file")
    if info.st_size > limit:
        raise BadEvidence(f"{path.name} has {info.st_size} bytes, more than the {limit} a record may have")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BadEvidence(f"{path.name} grew past {limit} bytes while it was read")
    return data


def read(folder: Path, check: str) -> Evidence:
    """Read a record written by :func:`write`, or raise BadEvidence saying plainly what is wrong with it.

    Nothing in it is executed: JSON is parsed as data, tensors are parsed by safetensors (a header and raw
    bytes). Symlinks, extra files, oversized files, unknown dtypes and records of another check are refused.
    """
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise BadEvidence("no evidence was recorded: the test did not run to the end "
                          "(an earlier error, a timeout, or code that stopped it)") from None
    if not stat.S_ISDIR(info.st_mode):
        raise BadEvidence("the evidence folder is not a plain folder")
    extra = sorted(set(os.listdir(folder)) - {RECORD, TENSORS})
    if extra:
        raise BadEvidence(f"the evidence folder holds files no probe writes: {', '.join(extra)[:200]}")
    raw = _read_regular_file(folder / RECORD, MAX_RECORD_BYTES)
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadEvidence(f"{RECORD} is not valid JSON") from None
    if not isinstance(record, dict) or set(record) != {"format", "check", "device", "facts"}:
        raise BadEvidence(f"{RECORD} is not an evidence record")
    if record["format"] != FORMAT or record["check"] != check:
        raise BadEvidence(f"{RECORD} is a record of {str(record['check'])[:60]!r}, not of {check!r}")
    if record["device"] not in ("cpu", "cuda", "mps") or not isinstance(record["facts"], dict):
        raise BadEvidence(f"{RECORD} is not an evidence record")
    blob = _read_regular_file(folder / TENSORS, MAX_TENSOR_BYTES)
    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, RuntimeError, OverflowError, TypeError):
        raise BadEvidence(f"{TENSORS} is not a safetensors file") from None
    for key, value in tensors.items():
        if value.dtype not in DTYPES:
            raise BadEvidence(f"the tensor {key!r} has dtype {value.dtype}, which no probe records")
    return Evidence(check, record["device"], dict(tensors), record["facts"])
