"""The order task of assignments 05 and 06: does token A come before token B?

Every sequence holds one A, one B and filler tokens. The data come in twins: each sequence appears with A and B
swapped, and the twin has the other label. Twins contain the same tokens, so a model that only sees the bag of
tokens gives both the same answer and scores exactly 50% — only the ORDER decides the label.
"""

import torch
import torch.nn.functional as F
from torch import nn

A, B = 0, 1  # the two marked tokens; tokens 2 .. vocab_size - 1 are fillers
SYMBOLS = "AB" + "cdefghijklmnopqrstuvwxyz"


def make_order_task(n: int, length: int = 8, vocab_size: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """n sequences (n even) of `length` tokens and their labels: 1 where A comes before B, else 0.

    Returns tokens (n, length) int64 and labels (n,) int64; the second half holds the A/B-swapped twins of the first.
    """
    if n % 2 or length < 2 or vocab_size < 3:
        raise ValueError("need an even n, length >= 2 and vocab_size >= 3 (A, B and at least one filler)")
    g = torch.Generator().manual_seed(seed)
    half = n // 2
    tokens = torch.randint(2, vocab_size, (half, length), generator=g)  # fillers everywhere
    where = torch.stack([torch.randperm(length, generator=g)[:2] for _ in range(half)])  # (half, 2): where A, B go
    rows = torch.arange(half)
    twins = tokens.clone()
    tokens[rows, where[:, 0]], tokens[rows, where[:, 1]] = A, B
    twins[rows, where[:, 0]], twins[rows, where[:, 1]] = B, A
    labels = (where[:, 0] < where[:, 1]).long()  # A before B
    return torch.cat([tokens, twins]), torch.cat([labels, 1 - labels])


def show(tokens: torch.Tensor) -> str:
    """One sequence as letters: 'A' and 'B' are the marked tokens, lower-case letters the fillers."""
    return " ".join(SYMBOLS[int(t)] for t in tokens)


@torch.no_grad()
def accuracy(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of sequences whose highest logit is the right label (the model in eval mode)."""
    was_training = model.training
    model.eval()
    correct = (model(tokens).argmax(dim=-1) == labels).float().mean().item()
    model.train(was_training)
    return correct


Pair = tuple[torch.Tensor, torch.Tensor]


def train(model: nn.Module, train_data: Pair, test_data: Pair, steps: int, batch_size: int = 128, lr: float = 3e-3,
          every: int = 10, seed: int = 0) -> dict[str, list[float]]:
    """Adam on the cross-entropy of random mini-batches; every `every` steps records the loss and test accuracy.

    Tokens and labels must be on the model's device. On the CPU it runs on one thread. Returns {"step": [...],
    "loss": [...], "accuracy": [...]}.
    """
    threads = torch.get_num_threads()
    if train_data[0].device.type == "cpu":
        torch.set_num_threads(1)  # matrices this small: one thread is faster than several waiting for each other
    try:
        return _train(model, train_data, test_data, steps, batch_size, lr, every, seed)
    finally:
        torch.set_num_threads(threads)


def _train(model: nn.Module, train_data: Pair, test_data: Pair, steps: int, batch_size: int, lr: float, every: int,
           seed: int) -> dict[str, list[float]]:
    tokens, labels = train_data
    g = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: dict[str, list[float]] = {"step": [], "loss": [], "accuracy": []}
    model.train()
    for step in range(1, steps + 1):
        batch = torch.randint(0, len(tokens), (batch_size,), generator=g).to(tokens.device)
        loss = F.cross_entropy(model(tokens[batch]), labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % every == 0 or step == steps:
            history["step"].append(step)
            history["loss"].append(loss.item())
            history["accuracy"].append(accuracy(model, *test_data))
    return history
