"""Variants of the answers of assignment 07_seq2seq."""
# ruff: noqa: F821 - variants use the notebook's names (MultiHeadAttention, FeedForward, TransformerBlock,
# PositionalEncoding, DecoderBlock, causal_mask), as a student's cell does

import math

import torch
import torch.nn.functional as F
from torch import nn

from catalogue import alternative, edits, mistake, written
from course.dates import PAD
from course.judges.seq2seq import WRITTEN

ASSIGNMENT = "07_seq2seq"
edit = edits(__name__)  # each edit(...) below is a variant of ASSIGNMENT

# the mistakes course/judges/seq2seq.py writes as code and names by running them
written(WRITTEN, cells={"DecoderBlock": "decoder_block", "Seq2SeqTransformer": "seq2seq_model"})


# ------------------------------------------------------------------ causal_mask: mistakes every check names

@mistake("float-mask", "causal_mask")
def causal_float(t, device=None):
    return torch.tril(torch.ones(t, t, device=device))


@mistake("additive-mask", "causal_mask")
def causal_additive(t, device=None):
    return torch.full((t, t), float('-inf'), device=device).triu(1)


@mistake("mask-wrong-device", "causal_mask")
def causal_device_ignored(t, device=None):
    return torch.ones(t, t, dtype=torch.bool).tril()  # device accepted, never used: the mask stays on the CPU


# ------------------------------------------------------------------ causal_mask: correct alternatives

@alternative("causal_mask")
def causal_compare_positions(t, device=None):
    i = torch.arange(t, device=device)
    return i[:, None] >= i[None, :]


@alternative("causal_mask")
def causal_not_future(t, device=None):
    return ~torch.ones(t, t, device=device).triu(diagonal=1).bool()


# ------------------------------------------------------------------ padding_mask: mistakes every check names

@mistake("mask-wrong-device", "padding_mask")
def padding_positions_on_the_cpu(lengths, t):
    return torch.arange(t) < lengths[:, None]  # arange on the CPU, lengths on the GPU: refused there


@mistake("float-mask", "padding_mask")
def padding_float(lengths, t):
    return (torch.arange(t, device=lengths.device) < lengths[:, None]).float()


@mistake("padding-transposed", "padding_mask")
def padding_transposed(lengths, t):
    return torch.arange(t, device=lengths.device)[:, None] < lengths[None, :]


# ------------------------------------------------------------------ padding_mask: correct alternatives

@alternative("padding_mask")
def padding_loop(lengths, t):
    mask = torch.zeros(len(lengths), t, dtype=torch.bool, device=lengths.device)
    for i, n in enumerate(lengths.tolist()):
        mask[i, :n] = True
    return mask


@alternative("padding_mask")
def padding_expand(lengths, t):
    b = lengths.shape[0]
    return torch.arange(t, device=lengths.device).expand(b, t) < lengths.unsqueeze(-1).expand(b, t)


# ------------------------------------------------------------------ DecoderBlock: mistakes named from its parts

edit("block-masks-in-pytorch-convention", "decoder_block",
     ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n",
      ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n"
       "        # PyTorch's attention masks are True where attention is NOT allowed\n"
       "        self_mask = None if self_mask is None else ~self_mask\n"
       "        memory_mask = None if memory_mask is None else ~memory_mask\n")),
     mistake="block-not-causal")
edit("block-memory-mask-as-key-padding", "decoder_block",
     ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n",
      ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n"
       "        if memory_mask is not None:\n"
       "            memory_mask = memory_mask == 0  # key padding mask: True at the padded keys\n")),
     mistake="block-reads-padding")
edit("block-shared-attention", "decoder_block",
     ("self.cross_attention = MultiHeadAttention(k, heads)", "self.cross_attention = self.self_attention"),
     mistake="block-shared-attention")
edit("block-shared-norm", "decoder_block", ("self.norm2 = nn.LayerNorm(k)", "self.norm2 = self.norm1"),
     ("self.norm3 = nn.LayerNorm(k)", "self.norm3 = self.norm1"), mistake="shared-norm")


# ------------------------------------------------------------------ DecoderBlock: correct alternatives

edit("block-positional-arguments", "decoder_block",
     ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n",
      ("    def forward(self, x, memory, self_mask=None, memory_mask=None):\n"
       "        def sublayer(norm, y):\n"
       "            return norm(x + self.dropout(y))\n")),
     ("self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))",
      "sublayer(self.norm1, self.self_attention(x, None, self_mask))"),
     ("self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))",
      "sublayer(self.norm2, self.cross_attention(x, memory, memory_mask))"),
     ("self.norm3(x + self.dropout(self.ff(x)))", "sublayer(self.norm3, self.ff(x))"))


@alternative("decoder_block")
class block_sublayer_list(nn.Module):
    def __init__(self, k, heads, ff_mult=4, dropout=0.0):
        super().__init__()
        self.self_attention = MultiHeadAttention(k, heads)
        self.cross_attention = MultiHeadAttention(k, heads)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.norm3 = nn.LayerNorm(k)
        self.ff = FeedForward(k, ff_mult * k)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        steps = [(self.norm1, lambda h: self.self_attention(h, mask=self_mask)),
                 (self.norm2, lambda h: self.cross_attention(h, context=memory, mask=memory_mask)),
                 (self.norm3, self.ff)]
        for norm, sublayer in steps:
            x = norm(x + self.dropout(sublayer(x)))
        return x


# ------------------------------------------------------------------ Seq2SeqTransformer: mistakes named from its parts,
# a property or the device (those it names by their logits are written in course/judges/seq2seq.py)

edit("model-causal-mask-on-the-cpu", "seq2seq_model",
     ("causal_mask(tgt.shape[1], device=tgt.device)", "causal_mask(tgt.shape[1])"), mistake="mask-wrong-device")
edit("model-mask-not-unsqueezed", "seq2seq_model",
     ("memory_mask=src_mask.unsqueeze(1))  # (b, t, k)", "memory_mask=src_mask)"), mistake="raised")
edit("model-causal-mask-in-pytorch-convention", "seq2seq_model", ("self_mask=self_mask,", "self_mask=~self_mask,"),
     mistake="model-reads-future")
edit("model-mask-from-pad-tokens", "seq2seq_model",
     ("        return self.decode(tgt, self.encode(src, src_mask), src_mask)\n",
      ("        src_mask = src != PAD\n"
       "        return self.decode(tgt, self.encode(src, src_mask), src_mask)\n")),
     mistake="model-reads-padding")
edit("model-decode-without-positions", "seq2seq_model",
     ("self.positions(self.tgt_embedding(tgt))", "self.tgt_embedding(tgt)"),
     ("        return self.decode(tgt, self.encode(src, src_mask), src_mask)\n",
      ("        memory = self.encode(src, src_mask)\n"
       "        x = self.positions(self.tgt_embedding(tgt))\n"
       "        for block in self.decoder:\n"
       "            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), "
       "memory_mask=src_mask.unsqueeze(1))\n"
       "        return self.to_logits(x)\n")),
     mistake="decode-inconsistent")
edit("model-one-embedding-for-both", "seq2seq_model",
     ("nn.Embedding(src_vocab_size,", "nn.Embedding(max(src_vocab_size, tgt_vocab_size),"),
     ("nn.Embedding(tgt_vocab_size, k)", "self.src_embedding"), mistake="shared-embedding")
edit("model-six-layers-as-in-the-paper", "seq2seq_model",
     ("self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))",
      "self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(6))"),
     ("self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))",
      "self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(6))"),
     mistake="wrong-depth")
edit("model-vocabulary-sizes-swapped", "seq2seq_model",
     ("self.src_embedding = nn.Embedding(src_vocab_size, k)", "self.src_embedding = nn.Embedding(tgt_vocab_size, k)"),
     ("self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)", "self.tgt_embedding = nn.Embedding(src_vocab_size, k)"),
     mistake="wrong-size")
edit("model-pytorch-encoder-layers", "seq2seq_model",
     ("nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))",
      ("nn.ModuleList(nn.TransformerEncoderLayer(k, heads, 4 * k, dropout, batch_first=True)\n"
       "                                     for _ in range(depth))")),
     ("x = block(x, mask=src_mask.unsqueeze(1))  # mask (b, 1, s): no query reads padding",
      "x = block(x, src_key_padding_mask=~src_mask)"),
     mistake="wrong-part-type")
edit("model-one-block-reused", "seq2seq_model",
     (("        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))\n"
       "        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))\n"),
      ("        encoder_block = TransformerBlock(k, heads, dropout=dropout)\n"
       "        decoder_block = DecoderBlock(k, heads, dropout=dropout)\n"
       "        self.encoder = nn.ModuleList([encoder_block] * depth)\n"
       "        self.decoder = nn.ModuleList([decoder_block] * depth)\n")),
     mistake="shared-block")


# ------------------------------------------------------------------ Seq2SeqTransformer: correct alternatives

edit("model-inline-masks", "seq2seq_model",
     ("            x = block(x, mask=src_mask.unsqueeze(1))", "            x = block(x, src_mask[:, None, :])"),
     ("self_mask = causal_mask(tgt.shape[1], device=tgt.device)",
      "future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), diagonal=1)"),
     ("        x = self.positions(self.tgt_embedding(tgt))",
      "        t = tgt.size(1)\n        x = self.positions(self.tgt_embedding(tgt))"),
     ("block(x, memory, self_mask=self_mask, memory_mask=src_mask.unsqueeze(1))",
      "block(x, memory, ~future, src_mask[:, None, :])"))
edit("model-forward-by-hand", "seq2seq_model",
     ("        return self.decode(tgt, self.encode(src, src_mask), src_mask)\n",
      ("        memory = self.encode(src, src_mask)\n"
       "        logits = self.decode(tgt, memory, src_mask)\n"
       "        return logits\n")))


# ------------------------------------------------------------------ teacher_forcing_loss: mistakes every check names

@mistake("raised", "teacher_forcing_loss")
def loss_classes_last(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits, tgt[:, 1:], ignore_index=pad)


@mistake("detached", "teacher_forcing_loss")
def loss_detached(model, src, src_mask, tgt, pad=PAD):
    with torch.no_grad():
        logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


# ------------------------------------------------------------------ teacher_forcing_loss: correct alternatives

@alternative("teacher_forcing_loss")
def loss_flattened(model, src, src_mask, tgt, pad=PAD):
    logits = model(src, tgt[:, :-1], src_mask)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)


@alternative("teacher_forcing_loss")
def loss_masked_mean(model, src, src_mask, tgt, pad=PAD):
    labels = tgt[:, 1:]
    log_probs = model(src, tgt[:, :-1], src_mask).log_softmax(dim=-1)
    picked = -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    real = (labels != pad).float()
    return (picked * real).sum() / real.sum()


@alternative("teacher_forcing_loss")
def loss_through_encode_decode(model, src, src_mask, tgt, pad=PAD):
    memory = model.encode(src, src_mask)
    logits = model.decode(tgt[:, :-1], memory, src_mask)
    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad)


# ------------------------------------------------------------------ greedy_decode: mistakes every check names
# (those it names by their tokens are written in course/judges/seq2seq.py; the width, dtype, autograd and device ones
# are made here)

edit("greedy-stops-at-first-eos", "greedy_decode", ("if finished.all():", "if finished.any():"),
     mistake="greedy-stops-early")
edit("greedy-start-on-the-cpu", "greedy_decode", ("dtype=torch.long, device=src.device)", "dtype=torch.long)"),
     mistake="greedy-made-on-the-cpu")
edit("greedy-finished-on-the-cpu", "greedy_decode", ("dtype=torch.bool, device=src.device)", "dtype=torch.bool)"),
     mistake="greedy-made-on-the-cpu")
edit("greedy-with-autograd", "greedy_decode", ("    with torch.no_grad():\n", "    if True:  # no torch.no_grad()\n"),
     mistake="greedy-not-under-no-grad")


@mistake("greedy-not-ids", "greedy_decode")
def greedy_into_zeros(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        b = src.shape[0]
        out = torch.zeros(b, max_len, device=src.device)
        tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)
        alive = torch.ones(b, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1)
            out[:, step] = torch.where(alive, nxt, torch.zeros_like(nxt))
            alive = alive & (nxt != eos)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return out


edit("greedy-one-step-too-many", "greedy_decode", ("range(max_len)", "range(max_len + 1)"),
     ("            if finished.all():\n                break\n", ""), mistake="greedy-too-long")


# ------------------------------------------------------------------ greedy_decode: correct alternatives

@alternative("greedy_decode")
def greedy_full_length(model, src, src_mask, max_len, bos, eos):
    with torch.no_grad():
        b = src.shape[0]
        out = torch.zeros(b, max_len, dtype=torch.long, device=src.device)
        tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)
        alive = torch.ones(b, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1)
            out[:, step] = torch.where(alive, nxt, torch.zeros_like(nxt))
            alive = alive & (nxt != eos)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
    return out


@alternative("greedy_decode")
def greedy_per_sequence(model, src, src_mask, max_len, bos, eos):
    rows = []
    with torch.no_grad():
        for i in range(src.shape[0]):
            memory = model.encode(src[i:i + 1], src_mask[i:i + 1])
            seq = [bos]
            while len(seq) <= max_len and seq[-1] != eos:
                tgt = torch.tensor([seq], device=src.device)
                seq.append(int(model.decode(tgt, memory, src_mask[i:i + 1])[0, -1].argmax()))
            rows.append(seq[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=src.device)


# ------------------------------------------------------------------ configure_optimizer: mistakes

@mistake("optimizer-decay-everything", "configure_optimizer")
def optimizer_decay_everything(model, lr, weight_decay):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)


edit("optimizer-decay-swapped", "configure_optimizer",
     ('"params": decayed, "weight_decay": weight_decay', '"params": decayed, "weight_decay": 0.0'),
     ('"params": not_decayed, "weight_decay": 0.0', '"params": not_decayed, "weight_decay": weight_decay'),
     mistake="optimizer-decay-swapped")
edit("optimizer-plain-adam", "configure_optimizer", ("torch.optim.AdamW(", "torch.optim.Adam("),
     mistake="optimizer-plain-adam")
edit("optimizer-matrices-in-both-groups", "configure_optimizer", ("p.dim() < 2]", "p.dim() <= 2]"),
     mistake="optimizer-parameter-twice")
edit("optimizer-frozen-included", "configure_optimizer",
     ("trainable = [p for p in model.parameters() if p.requires_grad]", "trainable = list(model.parameters())"),
     mistake="optimizer-frozen-included")
edit("optimizer-lr-not-set", "configure_optimizer", ("], lr=lr, fused=True)", "], fused=True)"),
     mistake="optimizer-lr-not-set")
edit("optimizer-zero-dim-forgotten", "configure_optimizer", ("p.dim() < 2]", "p.dim() == 1]"),
     mistake="optimizer-parameter-missing")


@mistake("optimizer-parameter-missing", "configure_optimizer")
def optimizer_linear_layers_only(model, lr, weight_decay):
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    decayed = [m.weight for m in linears]
    not_decayed = [m.bias for m in linears if m.bias is not None]
    return torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                              {"params": not_decayed, "weight_decay": 0.0}], lr=lr)


# ------------------------------------------------------------------ configure_optimizer: correct alternatives

@alternative("configure_optimizer")
def optimizer_by_name(model, lr, weight_decay):
    groups = {"decay": [], "no_decay": []}
    for _, p in model.named_parameters():
        if p.requires_grad:
            groups["decay" if p.ndim >= 2 else "no_decay"].append(p)
    return torch.optim.AdamW([{"params": groups["no_decay"], "weight_decay": 0.0},
                              {"params": groups["decay"], "weight_decay": weight_decay}], lr=lr)


# ------------------------------------------------------------------ learning_rate: mistakes every check names

edit("lr-as-a-tensor", "learning_rate", ("(1 + math.cos(math.pi * progress))",
                                         "(1 + torch.cos(torch.tensor(math.pi * progress)))"), mistake="lr-not-a-float")


# ------------------------------------------------------------------ learning_rate: correct alternatives

@alternative("learning_rate")
def lr_counted_from_one(step, steps, peak, warmup):
    n = step + 1  # the steps counted from 1: the warm-up ends at n = warmup, the decay at n = steps
    if n <= warmup:
        return n / warmup * peak
    return peak * (1 + math.cos(math.pi * (n - warmup) / (steps - warmup))) / 2


# ------------------------------------------------------------------ train_step: mistakes named from the norms

edit("train-step-clips-before-backward", "train_step",
     ("    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # the norm before "
      "clipping\n",
      "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    loss.backward()\n"),
     mistake="train-step-clips-before-backward")


@mistake("train-step-norm-after-clipping", "train_step")
def train_step_norm_after_clipping(model, optimizer, loss, lr, max_norm):
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    optimizer.step()
    return norm


# ------------------------------------------------------------------ train_step: correct alternatives

@alternative("train_step")
def train_step_zeroes_after(model, optimizer, loss, lr, max_norm):
    for group in optimizer.param_groups:
        group.update(lr=lr)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()
    optimizer.step()
    model.zero_grad()
    return norm


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("causal-no-diagonal", "padding-off-by-one", "block-memory-not-masked", "model-no-target-positions",
                   "loss-not-shifted", "greedy-never-stops", "optimizer-decay-everything", "lr-warmup-off-by-one",
                   "train-step-no-zero-grad")
