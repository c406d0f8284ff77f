"""Which device the notebooks and the checks run on."""

import os

import torch

#: Set to "cpu", "cuda", "cuda:1" or "mps" to override the automatic choice.
DEVICE_ENV = "COURSE_DEVICE"


def get_device() -> torch.device:
    """The device named by $COURSE_DEVICE, else CUDA, else Apple MPS, else the CPU."""
    name = os.environ.get(DEVICE_ENV, "").strip()
    if name:
        device = torch.device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"{DEVICE_ENV}={name} but PyTorch sees no CUDA device on this machine.")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise RuntimeError(f"{DEVICE_ENV}={name} but Apple MPS is not available on this machine.")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
