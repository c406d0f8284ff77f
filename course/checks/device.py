"""A stand-in GPU that a CPU can run: PyTorch's meta device under the rules of CUDA or of Apple's MPS.

A meta tensor has a shape, a dtype and a device but no data, and PyTorch refuses to mix it with a CPU tensor in one
operation, as CUDA and MPS do. DeviceRules, a dispatch mode that sees every aten operation, adds what meta lets pass:
- on both GPUs, a CPU tensor read beside a device tensor (even a 0-dim one, which CUDA would copy over silently): it
  was made on the CPU and mixed in;
- on "mps", any float64 or complex128 tensor on the device: Apple's GPU has no 64-bit float (TypeError there).
(Fake "cuda"/"mps" tensors of torch._subclasses.fake_tensor were tried first: on a CPU-only build `.to("cuda")`
raises and F.linear on a fake CUDA tensor aborts the process, so the meta device it is.)
Graded checks run a student's function on it in the probe and record outcome() as a fact (09's rotary_tables, 07's
masks, 06's positional buffer); tests/test_device_conformance.py runs every reference of course/ on it and lists
what it cannot see.
"""

import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

STAND_IN = torch.device("meta")
#: the GPUs the course runs on, each played by the meta device under its own rules
GPUS = ("cuda", "mps")
#: dtypes Apple's MPS backend cannot hold
NOT_ON_MPS = (torch.float64, torch.complex128)
#: operations whose whole point is to move a tensor between devices
COPIES = frozenset((torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default, torch.ops.aten.lift_fresh.default))
_TORCH = str(Path(torch.__file__).parent)


class DeviceRuleBroken(AssertionError):
    """A rule of the real GPU that the stand-in device would have let pass."""


def _in_a_cell(filename: str) -> bool:
    """True for code a notebook cell defined (a kernel's ipykernel_ file, or a replay's <notebook:cell>)."""
    return "ipykernel_" in filename or filename.startswith("<")


def _where() -> str:
    """The innermost line on the stack outside torch and this module, in a notebook cell where one is on the stack
    (the student's line, rather than the course's module it called): the line that broke the rule."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_TORCH) and f.filename != __file__]
    frames = [f for f in frames if _in_a_cell(f.filename)] or frames
    if not frames:
        return "(unknown line)"
    where = "a notebook cell" if "ipykernel_" in frames[-1].filename else frames[-1].filename
    return f"{where}, line {frames[-1].lineno}: {frames[-1].line}"


#: operations that take their indices (args[1]) from the CPU on a GPU: PyTorch moves them
INDEXING = frozenset((torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
                      torch.ops.aten._index_put_impl_.default))


def _leaf_tensors(tree: Any, found: list[torch.Tensor]) -> list[torch.Tensor]:
    """found, with the tensors in tree (an operation's arguments or outputs: in lists, tuples and dicts) appended:
    tree_flatten's tensor leaves without its bookkeeping (a sixth of the time, on every op)."""
    if isinstance(tree, torch.Tensor):
        found.append(tree)
    elif isinstance(tree, (list, tuple, dict)):
        for item in tree.values() if isinstance(tree, dict) else tree:
            _leaf_tensors(item, found)
    return found


def _mixed_in(func, args: tuple, kwargs: dict, strict: bool) -> list[torch.Tensor]:
    """The CPU tensors func reads beside a tensor on the stand-in. strict (the course's own code): all of them;
    otherwise (a student's, graded) only those a real GPU refuses: not a 0-dim one (a scalar to CUDA and MPS), not
    the indices of an indexing operation."""
    if func in COPIES:
        return []
    inputs = _leaf_tensors((args, kwargs), [])
    if not any(t.device == STAND_IN for t in inputs):
        return []
    if not strict:
        indices = {id(t) for t in _leaf_tensors(args[1:2], [])} if func in INDEXING else set()
        inputs = [t for t in inputs if t.dim() > 0 and id(t) not in indices]
    return [t for t in inputs if t.is_cpu]


class DeviceRules(TorchDispatchMode):
    """The rules of `gpu` ("cuda" or "mps") that the meta device does not enforce itself, checked on every aten op;
    strict: also refuse what a GPU would accept but the course's own code never does (see _mixed_in)."""

    def __init__(self, gpu: str, strict: bool = True):
        super().__init__()
        self.gpu, self.strict = gpu, strict

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mixed = _mixed_in(func, args, kwargs, self.strict)
        if mixed:
            cpu = mixed[0]
            raise DeviceRuleBroken(f"{func} mixes a CPU tensor {tuple(cpu.shape)} {cpu.dtype} with tensors on "
                                   f"{self.gpu}: make it on the input's device (device=x.device), at {_where()}")
        out = func(*args, **kwargs)
        if self.gpu == "mps":
            for t in _leaf_tensors(out, []):
                if t.device == STAND_IN and t.dtype in NOT_ON_MPS:
                    raise DeviceRuleBroken(f"{func} made a {t.dtype} tensor on mps, which has no 64-bit float "
                                           f"(compute it on the CPU and move the float32 result), at {_where()}")
        return out


@contextmanager
def on_gpu(gpu: str, strict: bool = True) -> Iterator[torch.device]:
    """Run the block on the stand-in for `gpu` under its rules; yields the device to put inputs on."""
    with DeviceRules(gpu, strict):
        yield STAND_IN


def off_device(outputs: Any) -> list[str]:
    """The tensors among outputs (a tensor, or tuples, lists and dicts of them) that are not on the stand-in."""
    return [f"a {tuple(t.shape)} tensor on {t.device}" for t in tree_flatten(outputs)[0]
            if isinstance(t, torch.Tensor) and t.device != STAND_IN]


def outcome(run: Callable[[torch.device], Any], gpu: str) -> dict[str, str]:
    """What run(device) does on the stand-in for gpu, as a fact a judge reads: {"verdict": "kept" (every output on
    the device), "left" (an output elsewhere), "broke" (a rule of the GPU broken) or "unknown" (it raised something
    else: the meta device has no data, so `.item()` and the like raise there and say nothing about the GPU),
    "detail": what was seen}."""
    try:
        with on_gpu(gpu, strict=False) as device:  # a grade: only what the real GPU refuses
            outputs = run(device)
    except DeviceRuleBroken as error:
        return {"verdict": "broke", "detail": str(error)[:400]}
    except Exception as error:  # noqa: BLE001 - whatever the student's code raises on meta is not a device verdict
        return {"verdict": "unknown", "detail": f"{type(error).__name__}: {str(error)[:200]}"}
    left = off_device(outputs)
    return {"verdict": "left" if left else "kept", "detail": ", ".join(left)[:400]}


def on_gpus(probe: Callable[..., None], key: str, call: Callable[[Any, torch.device], Any]) -> Callable[..., None]:
    """A check's probe that runs probe(..., student, rec), then call(student, device) on the stand-in for each GPU,
    recorded as the fact "<key>_on_<gpu>" (outcome()'s plain data) for compare.expect_on_gpus to judge. PyTorch's
    global generator is left as the probe left it (building a model there draws its weights)."""

    def probed(*args: Any) -> None:
        probe(*args)
        student, rec = args[-2:]
        with torch.random.fork_rng(devices=[]):
            seen = outcome(lambda d: call(student, d), "mps")
            # MPS's rules are CUDA's and one more (no float64), so CUDA's verdict is MPS's, except after a float64
            if "has no 64-bit float" in seen["detail"]:
                rec.fact(f"{key}_on_cuda", outcome(lambda d: call(student, d), "cuda"))
            else:
                rec.fact(f"{key}_on_cuda", {**seen, "detail": seen["detail"].replace(" on mps", " on cuda")})
            rec.fact(f"{key}_on_mps", seen)

    return probed
