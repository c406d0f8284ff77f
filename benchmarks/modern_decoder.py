"""08's language model against the modern decoder of course/modern.py (RMSNorm, rotary, SwiGLU, grouped-query
attention) on 08's corpus: the figures assignment 09 will be designed from.

    .venv/bin/python benchmarks/modern_decoder.py [--threads N] [--device cpu|cuda] [--steps N] [--seeds N]
                                                  [--window N]

For each seed it trains, with 08's training loop and settings and windows of --window characters: 08's model
(learned positions of --window places), the modern model with one key/value head per query head, and with half
as many. It prints each model's parameters, training time (wall and CPU), held-out bits per character against
the grammar's entropy (the floor), and, on held-out text four windows long, the bits per character at the
positions seen in training and at the later ones (learned positions have no vector there; rotary ones try). Then
the cache per token of each model. It only reports; it exits non-zero only when something crashes.
"""

import time

import torch
import torch.nn.functional as F
from common import chosen_device, device_arguments, machine

from course import seed_everything
from course.corpus import CHARACTERS, corpus, encode, entropy_per_character
from course.language_model import LanguageModel, next_token_loss
from course.language_model_training import MODEL, TRAINING, bits_per_character, parameter_count, train
from course.modern import ModernLanguageModel


def models(window: int, device: torch.device) -> dict[str, torch.nn.Module]:
    """The three models, untrained, at 08's width and depth."""
    vocab, k, heads, depth = len(CHARACTERS), MODEL.k, MODEL.heads, MODEL.depth
    return {"08 (LayerNorm, learned positions, ReLU MLP)": LanguageModel(vocab, k, heads, depth, window),
            f"modern, {heads} kv heads": ModernLanguageModel(vocab, k, heads, heads, depth, 4 * window),
            f"modern, {heads // 2} kv heads": ModernLanguageModel(vocab, k, heads, heads // 2, depth, 4 * window)}


@torch.no_grad()
def bits_by_position(model: torch.nn.Module, text: str, length: int, device: torch.device) -> torch.Tensor:
    """(length - 1,) bits per character at each position of windows of `length` characters of text, each starting
    after a newline."""
    ids = torch.tensor(encode(text), dtype=torch.long)
    starts = torch.nonzero(ids[: len(ids) - length] == 0).squeeze(1)[:400]
    tokens = ids[starts.unsqueeze(1) + torch.arange(length)].to(device)  # (n, length)
    logits = model.eval()(tokens)  # (n, length, V)
    nats = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (n, length - 1)
    return nats.mean(dim=0).cpu() / torch.log(torch.tensor(2.0))


def main() -> None:
    parser = device_arguments(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRAINING.steps)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--window", type=int, default=32, help="training window (08 uses its max_len, 72)")
    args = parser.parse_args()
    device = chosen_device(args)
    data = corpus()
    held_out_text = "\n" + "".join(data.held_out)  # each sentence ends with its newline
    floor = entropy_per_character()
    print(machine(device))
    print(f"{args.steps} steps of {TRAINING.batch_size} windows of {args.window} characters, lr {TRAINING.lr}; "
          f"the floor: {floor:.4f} bits/character")
    for seed in range(args.seeds):
        for name, model in models(args.window, device).items():
            seed_everything(seed)
            model = model.to(device)
            start, cpu = time.perf_counter(), time.process_time()
            train(model, data.train, device, loss_fn=next_token_loss, steps=args.steps,
                  batch_size=TRAINING.batch_size, lr=TRAINING.lr, length=args.window, seed=seed)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            bits = bits_per_character(model, data.held_out, device) if isinstance(model, ModernLanguageModel) \
                else float("nan")  # held-out sentences are longer than 08's window of learned positions
            seen = bits_by_position(model, held_out_text, args.window, device)
            line = (f"seed {seed}, {name}: {parameter_count(model):,} parameters, {seconds:.1f} s "
                    f"({cpu:.1f} s CPU); held-out sentences {bits:.4f} bits/char (+{bits - floor:.4f} over the "
                    f"floor); windows of {args.window}: {seen.mean():.4f}")
            if isinstance(model, ModernLanguageModel):
                longer = bits_by_position(model, held_out_text, 4 * args.window, device)
                early, late = longer[: args.window - 1].mean(), longer[args.window - 1 :].mean()
                line += f"; windows of {4 * args.window}: positions < {args.window} {early:.4f}, later ones {late:.4f}"
            print(line, flush=True)
    k, heads, depth = MODEL.k, MODEL.heads, MODEL.depth
    print("cache per token, float32: 08 and modern with all kv heads "
          f"{2 * depth * k * 4:,} bytes; with {heads // 2} kv heads {2 * depth * (k // 2) * 4:,} bytes")


if __name__ == "__main__":
    main()
