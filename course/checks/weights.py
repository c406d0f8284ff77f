"""Weights the check chooses: a probe loads them into the student's module, a judge recreates them.

Every parameter gets values that depend only on (seed, its name, its shape): matrices noise/√fan_in, 1-d
weights (norm scales) 1 + 0.3·noise, biases 0.3·noise. A probe records the names and shapes it filled; the
judge rebuilds the same values from those and computes the oracle with PyTorch's own modules. Forged names or
shapes change nothing: the outputs must still be what a correct module computes with the judge's weights.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping

import torch
from torch import nn

from course.checks.compare import generator


def value(seed: int, name: str, shape: tuple[int, ...] | list[int], gain: float = 1.0) -> torch.Tensor:
    """The value a check gives the parameter `name` of this shape (float32, CPU)."""
    shape = tuple(int(n) for n in shape)
    noise = torch.randn(shape, generator=generator((seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 62)))
    if len(shape) >= 2:
        return gain * noise / math.sqrt(max(1, shape[-1]))
    if name.endswith("bias"):
        return gain * 0.3 * noise
    return gain * (1.0 + 0.3 * noise)


def fill(module: nn.Module, seed: int, gains: Mapping[str, float] | None = None) -> list[list]:
    """Load the check's values into every parameter of module; return [[name, shape], ...] for the evidence."""
    filled = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(value(seed, name, p.shape, (gains or {}).get(name, 1.0)).to(p.device, p.dtype))
            filled.append([name, list(p.shape)])
    return filled


def recreate(filled: list, seed: int, gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """name -> value for the [[name, shape], ...] a probe recorded (malformed entries are skipped)."""
    out = {}
    for entry in filled if isinstance(filled, list) else []:
        if (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], list)
                and all(isinstance(n, int) and 0 < n <= 4096 for n in entry[1]) and len(entry[1]) <= 4):
            out[entry[0]] = value(seed, entry[0], entry[1], (gains or {}).get(entry[0], 1.0))
    return out


def describe(module: nn.Module) -> list[dict]:
    """Structure facts: every submodule's qualified name, type and the attributes a structure check reads."""
    found = []
    for name, sub in module.named_modules():
        fact: dict = {"name": name, "type": type(sub).__name__}
        if isinstance(sub, nn.Linear):
            fact.update(in_features=sub.in_features, out_features=sub.out_features, bias=sub.bias is not None)
        elif isinstance(sub, nn.LayerNorm):
            fact.update(shape=list(sub.normalized_shape), eps=sub.eps, affine=sub.elementwise_affine)
        elif isinstance(sub, nn.Embedding):
            fact.update(num_embeddings=sub.num_embeddings, embedding_dim=sub.embedding_dim)
        elif isinstance(sub, nn.Dropout):
            fact.update(p=sub.p)
        found.append(fact)
    return found


def buffers(module: nn.Module) -> list[list]:
    """[[name, shape, persistent], ...] of the module's registered buffers."""
    persistent = set(module.state_dict())
    return [[name, list(b.shape), name in persistent] for name, b in module.named_buffers()]
