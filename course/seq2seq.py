"""Reference encoder-decoder transformer from assignment 07: the answers of its notebook.

These match the solutions of source/07_seq2seq; the tests run the notebook's checks on them. The training
harness (settings, training loop, translation, cross-attention weights) is in course/seq2seq_training.py, which
does not import this module: while 07 is graded, this module is hidden from the student's kernel.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from course.dates import EOS, PAD  # noqa: F401 - EOS: the notebook's, which a variant of greedy_decode uses
from course.multi_head import MultiHeadAttention
from course.positional_encoding import PositionalEncoding
from course.transformer_block import FeedForward, TransformerBlock


def causal_mask(t: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(t, t) bool, True where position i may attend to position j, that is j <= i."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """(b,) lengths -> (b, t) bool, True at the first lengths[i] (real) positions of row i."""
    return torch.arange(t, device=lengths.device) < lengths.unsqueeze(1)  # (b, t)


class DecoderBlock(nn.Module):
    """Post-norm decoder block: masked self-attention, cross-attention to the memory, feed-forward.

    forward(x (b, t, k), memory (b, s, k), self_mask broadcastable to (b, t, t), memory_mask broadcastable to
    (b, t, s); both bool, True where attention is allowed) -> (b, t, k).
    """

    def __init__(self, k: int, heads: int, ff_mult: int = 4, dropout: float = 0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder transformer: source ids (b, s) and target ids (b, t) -> next-token logits (b, t, tgt_vocab).

    src_mask: (b, s) bool padding mask, True at real source tokens. The decoder is causal.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, k: int, heads: int, depth: int, max_len: int,
                 dropout: float = 0.0):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, k)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)
        self.positions = PositionalEncoding(k, max_len, dropout)
        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))
        self.to_logits = nn.Linear(k, tgt_vocab_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """(b, s) ids, (b, s) padding mask -> memory (b, s, k)."""
        x = self.positions(self.src_embedding(src))  # (b, s, k)
        for block in self.encoder:
            x = block(x, mask=src_mask.unsqueeze(1))  # mask (b, 1, s): no query reads padding
        return x

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """(b, t) target ids, memory (b, s, k), (b, s) padding mask -> logits (b, t, tgt_vocab)."""
        x = self.positions(self.tgt_embedding(tgt))  # (b, t, k)
        self_mask = causal_mask(tgt.shape[1], device=tgt.device)  # (t, t)
        for block in self.decoder:
            x = block(x, memory, self_mask=self_mask, memory_mask=src_mask.unsqueeze(1))  # (b, t, k)
        return self.to_logits(x)  # (b, t, tgt_vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt, self.encode(src, src_mask), src_mask)


def teacher_forcing_loss(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, tgt: torch.Tensor,
                         pad: int = PAD) -> torch.Tensor:
    """Mean cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1], over the real (non-pad) target tokens."""
    logits = model(src, tgt[:, :-1], src_mask)  # (b, t-1, vocab)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


# torch.no_grad() in the body, as the notebook's solution has it, not as a decorator: the judges' variants of this
# answer are its text as a cell holds it, without decorators
def greedy_decode(model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor, max_len: int, bos: int,
                  eos: int) -> torch.Tensor:
    """Generated ids (b, n), n <= max_len, <bos> not included: each row ends at its <eos>, then <pad> (0)."""
    with torch.no_grad():
        memory = model.encode(src, src_mask)  # (b, s, k)
        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)  # (b, 1)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            next_token = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)  # (b,)
            next_token = next_token.masked_fill(done, PAD)
            tokens = torch.cat([tokens, next_token.unsqueeze(1)], dim=1)  # (b, t + 1)
            done |= next_token == eos
            if bool(done.all()):
                break
    return tokens[:, 1:]


def configure_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with two groups: weight_decay on the trainable parameters of two or more dimensions (weight matrices,
    embeddings), 0 on the others (biases, LayerNorm gains and offsets); frozen parameters left out."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decayed = [p for p in trainable if p.dim() >= 2]
    not_decayed = [p for p in trainable if p.dim() < 2]
    return torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                              {"params": not_decayed, "weight_decay": 0.0}], lr=lr, fused=True)


def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
    """The learning rate of step (0 .. steps - 1): linear warm-up to peak at step warmup - 1, then a cosine decay
    to 0 at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step + 1 - warmup) / (steps - warmup)  # in (0, 1]: 1 at the last step
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float,
               max_norm: float) -> torch.Tensor:
    """One update: every group's lr set, gradients zeroed, loss backpropagated, the total gradient norm clipped to
    max_norm, the optimizer stepped; returns the norm before clipping."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm
