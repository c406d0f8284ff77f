"""Train the reference language model exactly as notebook 08 does; print time, held-out perplexity and the KV
cache's speedup.

    .venv/bin/python benchmarks/train_language_model.py [--threads N] [--device cpu|cuda] [--steps N]

The target of the course: on one CPU thread, at most 2 minutes of training. Besides the wall time it prints the
CPU time of the training (with one thread, what it would take on an otherwise idle core). It prints the held-out
cross-entropy against the grammar's own entropy (the floor no model goes below), then times generation with and
without the cache at a few lengths, in the same run. It only reports; it exits non-zero only when something
crashes.
"""

import os
import time
from dataclasses import replace

import torch
from common import chosen_device, device_arguments, machine

from course import seed_everything
from course.corpus import CHARACTERS, corpus, entropy_per_character
from course.language_model import CachedLanguageModel, LanguageModel, generate, generate_cached, next_token_loss
from course.language_model_training import (
    MODEL,
    TRAINING,
    bits_per_character,
    new_model,
    parameter_count,
    seconds_to_generate,
    train,
)

#: generated lengths at which the cache is timed (an untrained model of the same width with room for them)
LENGTHS = (64, 128, 256, 512)


def main() -> None:
    parser = device_arguments(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING.steps)
    parser.add_argument("--lr", type=float, default=TRAINING.lr)
    parser.add_argument("--batch-size", type=int, default=TRAINING.batch_size)
    args = parser.parse_args()

    device = chosen_device(args)
    seed_everything(0)
    data = corpus()
    model = new_model(LanguageModel, device)
    settings = replace(TRAINING, steps=args.steps, lr=args.lr, batch_size=args.batch_size)
    print(machine(device))
    print(f"model {MODEL}, {parameter_count(model):,} parameters; training {settings}")
    print(f"corpus: {len(data.train):,} training characters, {len(data.held_out):,} held-out sentences")

    start, cpu_start = time.perf_counter(), time.process_time()
    history = train(model, data.train, device, loss_fn=next_token_loss, steps=settings.steps,
                   batch_size=settings.batch_size, lr=settings.lr, length=MODEL.max_len, seed=settings.seed)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    bits = bits_per_character(model, data.held_out, device)
    floor = entropy_per_character()
    print(f"training: {seconds:.1f} s for {settings.steps} steps ({seconds / settings.steps * 1000:.0f} ms/step), "
          f"{cpu_seconds:.1f} s of CPU time, "
          f"final loss {sum(history.losses[-50:]) / len(history.losses[-50:]):.4f} nats/character")
    print(f"held-out: {bits:.4f} bits/character, perplexity {2 ** bits:.3f}; the grammar's entropy "
          f"{floor:.4f} bits/character, perplexity {2 ** floor:.3f} (the floor)")
    print(f"load average after training: {os.getloadavg()[0]:.2f}")
    print("meets the course target (<= 2 minutes)" if seconds <= 120 else "does NOT meet the course target here")

    timing_model = CachedLanguageModel(len(CHARACTERS), MODEL.k, MODEL.heads, MODEL.depth,
                                       max(LENGTHS) + 1).to(device).eval()  # both ways, as the notebook times them
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    print("generating n tokens after a one-token prompt (best of 3), batch 1:")
    for n in LENGTHS:
        plain = seconds_to_generate(generate, timing_model, prompt, n)
        cached = seconds_to_generate(generate_cached, timing_model, prompt, n)
        print(f"  n = {n:4d}: without cache {plain * 1000:8.1f} ms, with cache {cached * 1000:7.1f} ms, "
              f"speedup {plain / cached:5.1f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
