"""Which device the notebooks and the checks run on, and how closely a result computed there must match.

The choice: $COURSE_DEVICE when set ("cpu", "cuda", "cuda:1", "mps"), else CUDA when PyTorch sees it, else the CPU.
Apple's GPU (MPS) is used only when asked for with COURSE_DEVICE=mps, never picked by itself, because:
- it has no float64 (TypeError, pytorch#122602, closed as Apple's limit), and operations without an MPS kernel raise
  NotImplementedError unless PYTORCH_ENABLE_MPS_FALLBACK=1 moves them to the CPU (PyTorch's "MPS backend" notes);
  the course sets no fallback, so a missing kernel would stop a notebook that runs on the Mac's CPU;
- no line of the course has run on a real MPS device (tests/test_device_conformance.py proves only what a CPU can:
  no tensor left on the CPU, no float64 there), and MPS results are reduced in another order, so a student's
  notebook might disagree with the tests for reasons that are not theirs;
- the course's models are small and every notebook is sized to run on a CPU in the minutes it promises, so the
  Mac's CPU loses a student little time, where a wrong device costs them an afternoon.
A Mac student who wants the GPU sets COURSE_DEVICE=mps; the checks then use the MPS row of TOLERANCES.
"""

import os
from types import MappingProxyType

import torch

#: Set to "cpu", "cuda", "cuda:1" or "mps" to override the automatic choice.
DEVICE_ENV = "COURSE_DEVICE"

#: How closely a float32 result computed on each device must match the oracle (computed on the CPU in float64 or
#: float32): |actual - expected| <= atol + rtol * |expected| elementwise; "update" is the relative tolerance on one
#: optimizer step's change of the parameters (07's train_step), which divides by a small difference and so needs
#: more room. The one table every check reads (course.checks.compare.tolerance); a device not named here gets the
#: loosest row.
TOLERANCES = MappingProxyType({
    # float32 on the CPU: the oracle's own arithmetic, differing only in summation order (1e-6 relative seen)
    "cpu": MappingProxyType({"rtol": 1e-4, "atol": 1e-5, "update": 1e-3}),
    # CUDA: other kernels and summation orders (cuBLAS, fused attention). TF32: PyTorch >= 1.12 computes float32
    # matmuls in full float32 by default (torch.backends.cuda.matmul.allow_tf32 = False, "TensorFloat-32 on Ampere"
    # in PyTorch's CUDA semantics notes; TF32 would give ~1e-3 relative); cuDNN convolutions allow TF32 by default,
    # but the course has no convolution. The course sets neither flag, so a student who turns TF32 on for matmuls
    # stays within 2e-3 for the small sizes the checks use.
    "cuda": MappingProxyType({"rtol": 2e-3, "atol": 2e-4, "update": 1e-2}),
    # MPS: float32 only (no float64 to accumulate in) and Metal's own reduction order
    "mps": MappingProxyType({"rtol": 2e-3, "atol": 2e-4, "update": 1e-2}),
})


def device_row(device: torch.device | str) -> MappingProxyType:
    """The row of TOLERANCES for the device's type (a GPU it does not name gets CUDA's, the loosest)."""
    return TOLERANCES.get(torch.device(device).type, TOLERANCES["cuda"])


def tolerance(device: torch.device | str) -> dict[str, float]:
    """rtol and atol for a float32 result computed on device, as torch.allclose(a, b, **tolerance(device)) takes."""
    row = device_row(device)
    return {"rtol": row["rtol"], "atol": row["atol"]}


def _choose() -> tuple[torch.device, str]:
    """The device, and why it was chosen, in words a student reads in each notebook's first cell."""
    name = os.environ.get(DEVICE_ENV, "").strip()
    if name:
        device = torch.device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"{DEVICE_ENV}={name} but PyTorch sees no CUDA device on this machine.")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise RuntimeError(f"{DEVICE_ENV}={name} but Apple MPS is not available on this machine.")
        return device, f"{DEVICE_ENV}={name}"
    if torch.cuda.is_available():
        return torch.device("cuda"), f"PyTorch sees a CUDA GPU; set {DEVICE_ENV}=cpu to use the CPU"
    if torch.backends.mps.is_available():
        return torch.device("cpu"), f"an Apple GPU is used only when asked for: set {DEVICE_ENV}=mps"
    return torch.device("cpu"), f"no CUDA GPU found; set {DEVICE_ENV} to choose"


def get_device() -> torch.device:
    """The device named by $COURSE_DEVICE, else CUDA, else the CPU (Apple's MPS only when named)."""
    return _choose()[0]


def announce_device() -> torch.device:
    """get_device(), after printing which device the notebook runs on and why (each notebook's first cell)."""
    device, why = _choose()
    print(f"PyTorch {torch.__version__}, running on {device} ({why})")
    return device
