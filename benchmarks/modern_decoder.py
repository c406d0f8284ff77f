"""Notebook 09's ablation at 08's full settings: 08's language model, then the parts of course/modern_decoder.py
(RMSNorm, rotary positions, SwiGLU, grouped-query attention) added one at a time, on 08's corpus.

    .venv/bin/python benchmarks/modern_decoder.py [--threads N] [--device cpu|cuda] [--steps N] [--seeds N]
                                                  [--window N]

For each seed it trains, with 08's training loop and settings and windows of --window characters, the five models
of notebook 09's table: 08's model (learned positions of --window places); the modern decoder with LayerNorm's
replacement only (RMSNorm; learned positions, 05's ReLU MLP, a key/value head per query head); then with rotary
positions; then with SwiGLU; then with half the key/value heads. It prints each model's parameters, training time
(wall and CPU), held-out bits per character on the sentences that fit a window, as the notebook measures
them, beside what the grammar needs on them; for rotary models also on all held-out sentences, against the
grammar's entropy (the floor), and on held-out text four windows long: the bits at the positions seen in training
and at the later ones. Then each variant's mean and spread over the seeds, and the cache per token. It only
reports; it exits non-zero only when something crashes.
"""

import math
import time

import torch
import torch.nn.functional as F
from common import chosen_device, device_arguments, machine
from torch import nn

from course import seed_everything
from course.corpus import CHARACTERS, corpus, encode, entropy_per_character, sentence_probability
from course.language_model import LanguageModel, next_token_loss
from course.language_model_training import MODEL, TRAINING, bits_per_character, parameter_count, train
from course.modern_decoder import ModernLanguageModel
from course.transformer_block import FeedForward


class LearnedPositions(nn.Module):
    """A token embedding plus a learned vector per position (08's way), to put into the modern model: (b, t) ->
    (b, t, k)."""

    def __init__(self, tokens: nn.Embedding, max_len: int):
        super().__init__()
        self.tokens = tokens
        self.positions = nn.Embedding(max_len, tokens.embedding_dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))


def models(window: int, device: torch.device) -> dict[str, tuple[torch.nn.Module, bool]]:
    """Notebook 09's ablation, untrained, at 08's width and depth: 08's model, then RMSNorm, rotary positions,
    SwiGLU and half the key/value heads added one at a time to the modern decoder (the old parts swapped back in
    as submodules, as the notebook does). name -> (model, whether it has rotary positions)."""
    vocab, k, heads, depth = len(CHARACTERS), MODEL.k, MODEL.heads, MODEL.depth

    def modern(kv_heads: int, rotary: bool, swiglu: bool) -> ModernLanguageModel:
        model = ModernLanguageModel(vocab, k, heads, kv_heads, depth, 4 * window)
        if not swiglu:
            for block in model.blocks:
                block.ff = FeedForward(k, 4 * k)  # 05's ReLU MLP
        if not rotary:
            model.token_embedding = LearnedPositions(model.token_embedding, window)
            model.cos.fill_(1.0)  # a rotation by zero
            model.sin.zero_()
        return model

    return {"08 (LayerNorm, learned positions, ReLU MLP)": (LanguageModel(vocab, k, heads, depth, window), False),
            "+ RMSNorm": (modern(heads, rotary=False, swiglu=False), False),
            "+ rotary": (modern(heads, rotary=True, swiglu=False), True),
            "+ SwiGLU": (modern(heads, rotary=True, swiglu=True), True),
            f"+ GQA ({heads // 2} kv heads)": (modern(heads // 2, rotary=True, swiglu=True), True)}


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
    short = [s for s in data.held_out if len(s) < args.window]  # fit a window with their newline, as in 09
    grammar_bits = sum(-math.log2(sentence_probability(s)) for s in short) / sum(len(s) for s in short)
    floor = entropy_per_character()
    print(machine(device))
    print(f"{args.steps} steps of {TRAINING.batch_size} windows of {args.window} characters, lr {TRAINING.lr}; "
          f"the floor: {floor:.4f} bits/character; the grammar needs {grammar_bits:.4f} on the {len(short)} "
          f"held-out sentences that fit a window")
    fits: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        for name, (model, rotary) in models(args.window, device).items():
            seed_everything(seed)
            model = model.to(device)
            start, cpu = time.perf_counter(), time.process_time()
            train(model, data.train, device, loss_fn=next_token_loss, steps=args.steps,
                  batch_size=TRAINING.batch_size, lr=TRAINING.lr, length=args.window, seed=seed)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            fits.setdefault(name, []).append(bits_per_character(model, short, device))
            line = (f"seed {seed}, {name}: {parameter_count(model):,} parameters, {seconds:.1f} s ({cpu:.1f} s CPU); "
                    f"sentences that fit: {fits[name][-1]:.4f} bits/char")
            if rotary:  # whole held-out sentences, and text four windows long
                bits = bits_per_character(model, data.held_out, device)
                longer = bits_by_position(model, held_out_text, 4 * args.window, device)
                early, late = longer[: args.window - 1].mean(), longer[args.window - 1 :].mean()
                line += (f"; all held-out sentences {bits:.4f} (+{bits - floor:.4f} over the floor); windows of "
                         f"{4 * args.window}: positions < {args.window} {early:.4f}, later ones {late:.4f}")
            print(line, flush=True)
    print(f"means over {args.seeds} seed(s), sentences that fit (the grammar: {grammar_bits:.4f}):")
    for name, bits in fits.items():
        print(f"  {name}: {sum(bits) / len(bits):.4f} (spread {max(bits) - min(bits):.4f})")
    k, heads, depth = MODEL.k, MODEL.heads, MODEL.depth
    print("cache per token, float32: 08 and modern with all kv heads "
          f"{2 * depth * k * 4:,} bytes; with {heads // 2} kv heads {2 * depth * (k // 2) * 4:,} bytes")


if __name__ == "__main__":
    main()
