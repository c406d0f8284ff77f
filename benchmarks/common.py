"""What the training benchmarks share: the --threads and --device options, and a line describing the machine.

train_seq2seq.py and train_language_model.py use it: device_arguments for their parser, chosen_device after
parsing, machine for their first line."""

import argparse
import os
import platform

import torch

from course import get_device


def device_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with --threads and --device, as every training benchmark takes them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads on the CPU (the notebook uses 1; 0 keeps PyTorch's default)")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: what the notebook picks)")
    return parser


def chosen_device(args: argparse.Namespace) -> torch.device:
    """The device asked for (or the notebook's), with the CPU's threads set as asked."""
    device = torch.device(args.device) if args.device else get_device()
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    return device


def machine(device: torch.device) -> str:
    """The device, the threads and the load: what a timing depends on."""
    return (f"device {device}, torch threads {torch.get_num_threads()} (os.cpu_count() = {os.cpu_count()}), "
            f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.2f}")
