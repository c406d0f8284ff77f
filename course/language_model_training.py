"""The training harness of assignment 08: its settings, the training loop, held-out evaluation and timings.

Nothing here imports course.language_model (the answers of 08, hidden from the kernel while 08 is graded): every
function takes the model and the parts it needs — the loss, the generation functions — as arguments, so the
notebook passes the student's parts and benchmarks/train_language_model.py the reference ones.
"""

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from course import seq2seq_training
from course.corpus import CHARACTERS, encode, windows
from course.demo_size import grading_run
from course.seq2seq import configure_optimizer, learning_rate, train_step
from course.seq2seq_training import parameter_count  # noqa: F401 - 08's and 09's notebooks import it from here


@dataclass(frozen=True)
class ModelConfig(seq2seq_training.ModelConfig):
    """The size of the notebook's model (LanguageModel keyword arguments besides the vocabulary)."""

    k: int = 64
    heads: int = 4
    max_len: int = 72  # the longest sentence the grammar writes, its newline before it, and room to spare


@dataclass(frozen=True)
class TrainingConfig(seq2seq_training.TrainingConfig):
    """The notebook's training settings: batch_size windows of max_len characters per step; 07's recipe (AdamW at
    peak learning rate `lr` with `weight_decay` on the weight matrices, a linear warm-up over the first `warmup`
    fraction of the steps, then a cosine decay to 0, the gradient norm clipped to `max_norm`)."""

    batch_size: int = 24
    lr: float = 8e-3


#: The model and training settings of the notebook (and of benchmarks/train_language_model.py).
#: With 07's recipe on one thread, seed 0: a peak of 4e-3 gave 0.674 held-out bits per character, 6e-3 0.652,
#: 8e-3 0.645 and 1e-2 0.643 (the floor is 0.633); the former loop (Adam, one-cycle, 4e-3) gave 0.670.
MODEL = ModelConfig()
TRAINING = TrainingConfig()


def new_model(model_class: Callable[..., nn.Module], device: torch.device | str = "cpu",
              config: ModelConfig = MODEL) -> nn.Module:
    """The notebook's model, untrained, for the corpus's characters: model_class is a LanguageModel."""
    return model_class(len(CHARACTERS), k=config.k, heads=config.heads, depth=config.depth,
                       max_len=config.max_len).to(device)


@dataclass
class History:
    """What training recorded: every step's loss (nats per character) and the held-out bits per character at
    (step, bits) checkpoints."""

    losses: list[float] = field(default_factory=list)
    held_out: list[tuple[int, float]] = field(default_factory=list)


def train(model: nn.Module, text: str, device: torch.device | str, *, loss_fn: Callable, steps: int,
          batch_size: int, lr: float, length: int, seed: int = 0,
          held_out: Sequence[str] = (), evaluate_every: int = 0,
          progress: Callable[[Iterable], Iterable] = lambda steps: steps) -> History:
    """07's recipe on windows of text, with 07's parts (course/seq2seq.py): AdamW with TRAINING's weight decay on
    the weight matrices, peak learning rate lr after a warm-up over TRAINING's fraction of the steps, then a cosine
    decay to 0, the gradient norm clipped to TRAINING.max_norm.

    loss_fn(logits, tokens) is a next_token_loss; a window is `length` characters (the model's max_len),
    starting after a sentence's end. With held_out sentences and evaluate_every > 0 it measures their
    bits per character every evaluate_every steps and at the end, and shows the latest figures on the progress bar
    (when progress gives one with set_postfix, as tqdm's does); no progress is shown while nbgrader grades.
    """
    optimizer = configure_optimizer(model, lr, TRAINING.weight_decay)
    warmup = max(1, round(TRAINING.warmup * steps))
    stream = windows(text, length, batch_size, seed=seed)
    history = History()
    bar = range(steps) if grading_run() else progress(range(steps))
    model.train()
    for step in bar:
        tokens = next(stream).to(device)  # (b, t)
        loss = loss_fn(model(tokens), tokens)
        train_step(model, optimizer, loss, learning_rate(step, steps, lr, warmup), TRAINING.max_norm)
        history.losses.append(loss.item())
        if held_out and evaluate_every and ((step + 1) % evaluate_every == 0 or step + 1 == steps):
            history.held_out.append((step + 1, bits_per_character(model, held_out, device)))
            model.train()
        if hasattr(bar, "set_postfix") and (step % 25 == 0 or step + 1 == steps):
            recent = history.losses[-25:]
            shown = {"train bits/char": f"{sum(recent) / len(recent) / math.log(2):.3f}"}
            if history.held_out:
                shown["held-out"] = f"{history.held_out[-1][1]:.3f}"
            bar.set_postfix(shown, refresh=False)
    model.eval()
    return history


@torch.no_grad()
def sentence_bits(model: nn.Module, sentences: Sequence[str], device: torch.device | str,
                  batch_size: int = 500) -> torch.Tensor:
    """(n,) bits the model needs for each sentence: -log2 p(sentence), every character scored from the start.

    Each sentence is fed after a newline (position 0), as in training, and all its characters, ".\\n" included,
    are predicted.
    """
    model.eval()
    out = []
    for start in range(0, len(sentences), batch_size):
        rows = [encode("\n" + s) for s in sentences[start : start + batch_size]]
        lengths = torch.tensor([len(r) for r in rows], device=device)
        tokens = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long, device=device)
        for i, r in enumerate(rows):
            tokens[i, : len(r)] = torch.tensor(r, device=device)
        logits = model(tokens)  # (b, t, V)
        nats = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (b, t - 1)
        real = torch.arange(tokens.shape[1] - 1, device=device) < (lengths - 1).unsqueeze(1)  # (b, t - 1)
        out.append((nats * real).sum(dim=1).cpu() / torch.log(torch.tensor(2.0)))
    return torch.cat(out)


def bits_per_character(model: nn.Module, sentences: Sequence[str], device: torch.device | str) -> float:
    """Held-out cross-entropy in bits per character: all sentences' bits over all their characters."""
    return float(sentence_bits(model, sentences, device).sum()) / sum(len(s) for s in sentences)


def synchronize(device: torch.device | str) -> None:
    """Wait for the device to finish, so a timing measures the work and not only its launch."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def seconds_to_generate(generate: Callable, model: nn.Module, prompt: torch.Tensor, max_new_tokens: int,
                        repeats: int = 3) -> float:
    """The fastest of `repeats` runs of generate(model, prompt, max_new_tokens, generator=...) in seconds: generate is
    the notebook's generate or generate_cached."""
    best = float("inf")
    for _ in range(repeats):
        generator = torch.Generator(prompt.device).manual_seed(0)
        synchronize(prompt.device)
        start = time.perf_counter()
        generate(model, prompt, max_new_tokens, temperature=1.0, generator=generator)
        synchronize(prompt.device)
        best = min(best, time.perf_counter() - start)
    return best


def cache_bytes(cache: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Bytes held by a KV cache: every block's keys and values."""
    return sum(keys.nbytes + values.nbytes for keys, values in cache)


def multiplies_to_generate(n: int, k: int, depth: int, use_cache: bool, prompt: int = 1) -> int:
    """Multiplications of the blocks' matrix products to generate n tokens after a prompt, batch 1.

    Per position and block: 4k² for queries, keys, values and the output projection, 8k² for the feed-forward
    (k -> 4k -> k). Attention: every query of the step is scored against all m keys of the sequence so far and
    averages their values, 2mk (the causal mask zeroes weights after the product; it saves no multiplication).
    Without a cache, the step that sees m positions computes all m of them, 12mk² + 2m²k, as section 8 of the
    notebook counts; with it, only the newest (the prompt once, in the first step).
    """
    total = 0
    for m in range(prompt, prompt + n):
        new = (m if m == prompt else 1) if use_cache else m  # positions this step computes
        total += depth * (12 * k * k * new + 2 * k * new * m)
    return total
