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


#: what recreate() will build from a record's claims before refusing the rest: far above any probe's module (the
#: largest, 08's language model case, has about 40,000 parameters in about 40 tensors)
MAX_ENTRIES = 256
MAX_ELEMENTS = 1 << 20  # per parameter
MAX_TOTAL = 1 << 22  # all parameters of one record


def recreate(filled: list, seed: int, gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """name -> value for the [[name, shape], ...] a probe recorded. Malformed entries are skipped, and the claimed
    sizes are checked before anything is allocated: past MAX_ENTRIES entries, MAX_ELEMENTS per parameter or
    MAX_TOTAL in all, the rest of the claims are ignored (a forged record cannot make the judge allocate gigabytes)."""
    out: dict[str, torch.Tensor] = {}
    total = 0
    for entry in (filled if isinstance(filled, list) else [])[:MAX_ENTRIES]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and len(entry[0]) <= 200
                and isinstance(entry[1], list) and len(entry[1]) <= 4
                and all(type(n) is int and 0 < n <= 4096 for n in entry[1])):
            continue
        size = math.prod(entry[1])
        if size > MAX_ELEMENTS or total + size > MAX_TOTAL:
            continue
        total += size
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
