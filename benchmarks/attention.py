"""Time the course's reference multi-head attention against PyTorch's nn.MultiheadAttention, in the same run.

    .venv/bin/python benchmarks/attention.py [--device cpu|cuda|mps] [--threads N] [--shape B T K HEADS]

Both modules get the same weights and the same input; the script checks that they agree, then prints the median
time of a forward pass (without gradients) and of a forward and backward pass, and the ratio reference / PyTorch
(below 1: the reference is faster). The default shape is (b, t, k, heads) = (8, 1000, 256, 4), on one CPU
thread. The script only reports; it exits non-zero only when something crashes or the two disagree.
"""

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from course import get_device
from course.multi_head import MultiHeadAttention


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a timer measures the computation."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def median_seconds(run: Callable[[], None], device: torch.device, repeats: int) -> float:
    """The median wall time of run() over `repeats` calls, after one warm-up call."""
    run()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_modules(k: int, heads: int, device: torch.device) -> tuple[nn.Module, nn.MultiheadAttention]:
    """The reference MultiHeadAttention and an nn.MultiheadAttention computing the same function."""
    torch.manual_seed(0)
    reference = MultiHeadAttention(k, heads)
    torch_mha = nn.MultiheadAttention(k, heads, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([reference.to_queries.weight, reference.to_keys.weight,
                                                  reference.to_values.weight]))
        torch_mha.in_proj_bias.zero_()
        torch_mha.out_proj.weight.copy_(reference.unify_heads.weight)
        torch_mha.out_proj.bias.copy_(reference.unify_heads.bias)
    return reference.to(device), torch_mha.to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps, or 'auto' for get_device()")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (0 keeps PyTorch's default)")
    parser.add_argument("--shape", type=int, nargs=4, default=(8, 1000, 256, 4), metavar=("B", "T", "K", "HEADS"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    device = get_device() if args.device == "auto" else torch.device(args.device)
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    b, t, k, heads = args.shape
    reference, torch_mha = paired_modules(k, heads, device)
    x = torch.randn(b, t, k, device=device)
    with torch.no_grad():
        difference = (reference(x) - torch_mha(x, x, x, need_weights=False)[0]).abs().max().item()
    if difference > 1e-3:
        raise SystemExit(f"the two modules disagree by {difference:.2e}: not the same function")

    def forward(module: nn.Module) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                module(x) if module is reference else module(x, x, x, need_weights=False)
        return run

    def forward_backward(module: nn.Module) -> Callable[[], None]:
        def run() -> None:
            y = module(x) if module is reference else module(x, x, x, need_weights=False)[0]
            y.sum().backward()
        return run

    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()} "
          f"(os.cpu_count() = {os.cpu_count()}){load}")
    print(f"(b, t, k, heads) = {(b, t, k, heads)}; outputs agree to {difference:.1e}; median of {args.repeats}")
    for name, make in (("forward", forward), ("forward + backward", forward_backward)):
        ours = median_seconds(make(reference), device, args.repeats)
        theirs = median_seconds(make(torch_mha), device, args.repeats)
        print(f"{name:>18}: reference {ours * 1000:8.1f} ms, nn.MultiheadAttention {theirs * 1000:8.1f} ms, "
              f"ratio {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
