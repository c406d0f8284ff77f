"""Reproducible randomness for the notebooks."""

import random

import numpy as np
import torch


def manual_seed(seed: int) -> None:
    """torch.manual_seed(seed): seed PyTorch's global generators, on every device. Where no accelerator is available
    the CPU's is the only one, and only it is seeded: torch.manual_seed would also queue a seed for every GPU backend
    not initialised, formatting the whole stack as text for each (torch.cuda._lazy_call), some milliseconds a call in
    a deep stack; the checks of 08 seed once per draw, and the catalogue's replays spent a quarter of their time
    there. (torch.accelerator is PyTorch 2.6's; before it, torch.manual_seed.)"""
    if not hasattr(torch, "accelerator") or torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (every device) with one number."""
    random.seed(seed)
    np.random.seed(seed)
    manual_seed(seed)  # also seeds CUDA and MPS generators, where there is one
