"""Train the reference seq2seq model exactly as notebook 07 does and print time and held-out accuracy.

    .venv/bin/python benchmarks/train_seq2seq.py [--threads N] [--device cpu|cuda] [--steps N]

The target of the course: on a 2-core CPU, at least 95% exact match on the held-out dates after at most
3 minutes of training. The script only reports; it exits non-zero only when something crashes.
"""

import argparse
import os
import platform
import time
from dataclasses import replace

import torch

from course import get_device, seed_everything
from course.dates import translation_data
from course.seq2seq import Seq2SeqTransformer, greedy_decode, padding_mask, teacher_forcing_loss
from course.seq2seq_training import MODEL, TRAINING, exact_match, new_model, parameter_count, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads on the CPU (the notebook uses 1; 0 keeps PyTorch's default)")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: what the notebook picks)")
    parser.add_argument("--steps", type=int, default=TRAINING.steps)
    args = parser.parse_args()

    device = torch.device(args.device) if args.device else get_device()
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    seed_everything(0)
    train_pairs, test_pairs = translation_data()
    model = new_model(Seq2SeqTransformer, device)
    print(f"device {device}, torch threads {torch.get_num_threads()} (os.cpu_count() = {os.cpu_count()}), "
          f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.2f}")
    print(f"model {MODEL}, {parameter_count(model):,} parameters; training {replace(TRAINING, steps=args.steps)}")

    start = time.perf_counter()
    losses = train(model, train_pairs, device, loss_fn=teacher_forcing_loss, padding_mask=padding_mask,
                   steps=args.steps, batch_size=TRAINING.batch_size, lr=TRAINING.lr, seed=TRAINING.seed)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    accuracy, _ = exact_match(model, test_pairs, device, decode=greedy_decode, padding_mask=padding_mask)
    print(f"training: {seconds:.1f} s for {args.steps} steps ({seconds / args.steps * 1000:.0f} ms/step), "
          f"final loss {sum(losses[-50:]) / len(losses[-50:]):.4f}")
    print(f"held-out exact match: {accuracy:.2%} of {len(test_pairs)} dates never seen in training")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    target = seconds <= 180 and accuracy >= 0.95
    print("meets the course target (>= 95% in <= 3 minutes)" if target else "does NOT meet the course target here")


if __name__ == "__main__":
    main()
