"""Reproducible randomness for the notebooks."""

import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's generators (every device) with one number."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS generators
