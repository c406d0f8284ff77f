"""The training harness of assignment 07: its settings, the training loop, translation and a look at attention.

Nothing here imports course.seq2seq (the answers of 07, hidden from the kernel while 07 is graded): every
function takes the model and the parts it needs — the loss, the decoder, the padding mask — as arguments, so the
notebook passes the student's parts and benchmarks/train_seq2seq.py the reference ones.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from course.dates import BOS, EOS, PAD, SOURCE, TARGET, endless_batches
from course.dates import pad as pad_sequences
from course.multi_head import split_heads
from course.scaling import scaled_dot_product_attention


@dataclass(frozen=True)
class ModelConfig:
    """The size of the notebook's model (Seq2SeqTransformer keyword arguments besides the vocabularies)."""

    k: int = 64
    heads: int = 4
    depth: int = 2
    max_len: int = 64


@dataclass(frozen=True)
class TrainingConfig:
    """The notebook's training settings."""

    steps: int = 800
    batch_size: int = 64
    lr: float = 2e-3
    seed: int = 0


#: The model and training settings of the notebook (and of benchmarks/train_seq2seq.py).
MODEL = ModelConfig()
TRAINING = TrainingConfig()


def new_model(model_class: Callable[..., nn.Module], device: torch.device | str = "cpu",
              config: ModelConfig = MODEL) -> nn.Module:
    """The notebook's model, untrained, for the date vocabularies: model_class is a Seq2SeqTransformer."""
    return model_class(len(SOURCE), len(TARGET), k=config.k, heads=config.heads, depth=config.depth,
                       max_len=config.max_len).to(device)


def train(model: nn.Module, pairs: Sequence[tuple[str, str]], device: torch.device | str, *, loss_fn: Callable,
          padding_mask: Callable, steps: int, batch_size: int, lr: float, seed: int = 0,
          progress: Callable[[Iterable], Iterable] = lambda steps: steps) -> list[float]:
    """The notebook's loop: Adam, a one-cycle schedule (10% warm-up, then a linear decay); returns every step's loss.

    loss_fn(model, src, src_mask, tgt, pad) is a teacher_forcing_loss; padding_mask(lengths, t) builds src_mask.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # one kernel for all ~100 tensors
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1,
                                                   anneal_strategy="linear")
    stream = endless_batches(pairs, batch_size, seed=seed)
    losses = []
    model.train()
    for _ in progress(range(steps)):
        batch = next(stream).to(device)
        src_mask = padding_mask(batch.src_lengths, batch.src.shape[1])  # (b, s)
        loss = loss_fn(model, batch.src, src_mask, batch.tgt, PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return losses


def translate(model: nn.Module, texts: Sequence[str], device: torch.device | str, *, decode: Callable,
              padding_mask: Callable) -> list[str]:
    """Greedy translations of source strings: decode(model, src, src_mask, max_len, bos, eos) is a greedy_decode."""
    src, lengths = pad_sequences([SOURCE.encode(text) for text in texts])
    src, lengths = src.to(device), lengths.to(device)
    out = decode(model, src, padding_mask(lengths, src.shape[1]), max_len=16, bos=BOS, eos=EOS)
    return [TARGET.decode(row) for row in out.cpu()]


def exact_match(model: nn.Module, pairs: Sequence[tuple[str, str]], device: torch.device | str, *, decode: Callable,
                padding_mask: Callable, batch_size: int = 500) -> tuple[float, list[str]]:
    """(fraction of pairs translated exactly right, the translations)."""
    predictions = []
    for start in range(0, len(pairs), batch_size):
        predictions += translate(model, [s for s, _ in pairs[start : start + batch_size]], device, decode=decode,
                                 padding_mask=padding_mask)
    correct = sum(p == t for p, (_, t) in zip(predictions, pairs))
    return correct / max(1, len(pairs)), predictions


def cross_attention_weights(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor,
                            tgt: torch.Tensor) -> list[torch.Tensor]:
    """Cross-attention weights of every decoder block, (b, heads, t, s) each, for a teacher-forced pass.

    Works for any model whose decoder blocks call a course MultiHeadAttention named `cross_attention`: a
    forward hook recomputes the weights from that module's own projections and inputs.
    """
    weights: list[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor) -> None:
        names = ("x", "context", "mask")
        given = {**dict(zip(names, args)), **kwargs}
        x, context, mask = given["x"], given.get("context"), given.get("mask")
        context = x if context is None else context
        queries = split_heads(module.to_queries(x), module.heads)  # (b, h, t, s_head)
        keys = split_heads(module.to_keys(context), module.heads)  # (b, h, s, s_head)
        if mask is not None and mask.dim() >= 3:
            mask = mask.unsqueeze(-3)  # (b, 1, t, s)
        weights.append(scaled_dot_product_attention(queries, keys, keys, mask)[1])  # (b, h, t, s)

    handles = [m.register_forward_hook(hook, with_kwargs=True)
               for name, m in model.named_modules() if name.endswith("cross_attention")]
    try:
        with torch.no_grad():
            model(src, tgt, src_mask)
    finally:
        for handle in handles:
            handle.remove()
    return weights


def parameter_count(model: nn.Module) -> int:
    """Number of parameters of a model."""
    return sum(p.numel() for p in model.parameters())
