"""Train the reference seq2seq model exactly as notebook 07 does and print time and held-out accuracy.

    .venv/bin/python benchmarks/train_seq2seq.py [--threads N] [--device cpu|cuda] [--steps N]

The target of the course: on one CPU thread, at least 99.9% exact match on the held-out dates after at most
25 s of training. Besides the wall time it prints the CPU time of the training (with one thread, what the
training would take on an otherwise idle core) and the load average, since a shared machine stretches the wall
time. The script only reports; it exits non-zero only when something crashes.
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

    start, cpu_start = time.perf_counter(), time.process_time()
    losses = train(model, train_pairs, device, loss_fn=teacher_forcing_loss, padding_mask=padding_mask,
                   steps=args.steps, batch_size=TRAINING.batch_size, lr=TRAINING.lr, seed=TRAINING.seed)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    accuracy, _ = exact_match(model, test_pairs, device, decode=greedy_decode, padding_mask=padding_mask)
    print(f"training: {seconds:.1f} s for {args.steps} steps ({seconds / args.steps * 1000:.0f} ms/step), "
          f"{cpu_seconds:.1f} s of CPU time, final loss {sum(losses[-50:]) / len(losses[-50:]):.4f}")
    print(f"held-out exact match: {accuracy:.2%} of {len(test_pairs)} dates never seen in training")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    target = seconds <= 25 and accuracy >= 0.999
    print("meets the course target (>= 99.9% in <= 25 s)" if target else
          "does NOT meet the course target (>= 99.9% in <= 25 s) here")


if __name__ == "__main__":
    main()
