"""Variants of the answers of assignment 07_seq2seq."""

from autograder.catalogue import Variant

A = "07_seq2seq"


def _causal(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "causal_mask", f"def causal_mask(t, device=None):\n{body}", diagnosis)


def _padding(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "padding_mask", f"def padding_mask(lengths, t):\n{body}", diagnosis)


_BLOCK_INIT = (
    "        self.self_attention = MultiHeadAttention(k, heads)\n"
    "        self.cross_attention = MultiHeadAttention(k, heads)\n"
    "        self.norm1 = nn.LayerNorm(k)\n"
    "        self.norm2 = nn.LayerNorm(k)\n"
    "        self.norm3 = nn.LayerNorm(k)\n"
    "        self.ff = FeedForward(k, ff_mult * k)\n"
    "        self.dropout = nn.Dropout(dropout)\n"
)
_SELF = "        x = self.norm1(x + self.dropout(self.self_attention(x, mask=self_mask)))\n"
_CROSS = "        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory, mask=memory_mask)))\n"
_FF = "        return self.norm3(x + self.dropout(self.ff(x)))\n"


def _block(name: str, forward: str, diagnosis: str | None = None, init: str = _BLOCK_INIT) -> Variant:
    code = (
        "class DecoderBlock(nn.Module):\n"
        "    def __init__(self, k, heads, ff_mult=4, dropout=0.0):\n"
        "        super().__init__()\n"
        f"{init}\n"
        "    def forward(self, x, memory, self_mask=None, memory_mask=None):\n"
        f"{forward}"
    )
    return Variant(A, name, "decoder_block", code, diagnosis)


_MODEL_INIT = (
    "        self.src_embedding = nn.Embedding(src_vocab_size, k)\n"
    "        self.tgt_embedding = nn.Embedding(tgt_vocab_size, k)\n"
    "        self.positions = PositionalEncoding(k, max_len, dropout)\n"
    "        self.encoder = nn.ModuleList(TransformerBlock(k, heads, dropout=dropout) for _ in range(depth))\n"
    "        self.decoder = nn.ModuleList(DecoderBlock(k, heads, dropout=dropout) for _ in range(depth))\n"
    "        self.to_logits = nn.Linear(k, tgt_vocab_size)\n"
)
_ENCODE = (
    "        x = self.positions(self.src_embedding(src))\n"
    "        for block in self.encoder:\n"
    "            x = block(x, mask=src_mask.unsqueeze(1))\n"
    "        return x\n"
)
_DECODE = (
    "        x = self.positions(self.tgt_embedding(tgt))\n"
    "        for block in self.decoder:\n"
    "            x = block(x, memory, self_mask=causal_mask(tgt.shape[1], tgt.device), memory_mask=src_mask.unsqueeze(1))\n"
    "        return self.to_logits(x)\n"
)
_FORWARD = "        return self.decode(tgt, self.encode(src, src_mask), src_mask)\n"


def _model(name: str, diagnosis: str | None = None, init: str = _MODEL_INIT, encode: str = _ENCODE,
           decode: str = _DECODE, forward: str = _FORWARD) -> Variant:
    code = (
        "class Seq2SeqTransformer(nn.Module):\n"
        "    def __init__(self, src_vocab_size, tgt_vocab_size, k, heads, depth, max_len, dropout=0.0):\n"
        "        super().__init__()\n"
        f"{init}\n"
        "    def encode(self, src, src_mask):\n"
        f"{encode}\n"
        "    def decode(self, tgt, memory, src_mask):\n"
        f"{decode}\n"
        "    def forward(self, src, tgt, src_mask):\n"
        f"{forward}"
    )
    return Variant(A, name, "seq2seq_model", code, diagnosis)


def _loss(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "teacher_forcing_loss", f"def teacher_forcing_loss(model, src, src_mask, tgt, pad=PAD):\n{body}",
                   diagnosis)


_DECODE_LOOP_START = (
    "    with torch.no_grad():\n"
    "        memory = model.encode(src, src_mask)\n"
    "        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)\n"
    "        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)\n"
    "        for _ in range(max_len):\n"
    "            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)\n"
)


def _greedy(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "greedy_decode", f"def greedy_decode(model, src, src_mask, max_len, bos, eos):\n{body}",
                   diagnosis)


VARIANTS = [
    # ---- causal_mask: mistakes
    _causal("causal-inverted", "    return torch.ones(t, t, dtype=torch.bool, device=device).triu(1)\n", "inverted"),
    _causal("causal-no-diagonal", "    return torch.ones(t, t, dtype=torch.bool, device=device).tril(-1)\n",
            "excludes the diagonal"),
    _causal("causal-transposed", "    return torch.ones(t, t, dtype=torch.bool, device=device).triu()\n", "transposed"),
    _causal("causal-float", "    return torch.tril(torch.ones(t, t, device=device))\n",
            "returned as floats (or integers) where a boolean is asked"),
    _causal("causal-additive", "    return torch.full((t, t), float('-inf'), device=device).triu(1)\n",
            "additive float mask"),
    # ---- causal_mask: correct alternatives
    _causal("causal-compare-positions",
            "    i = torch.arange(t, device=device)\n    return i[:, None] >= i[None, :]\n"),
    _causal("causal-not-future", "    return ~torch.ones(t, t, device=device).triu(diagonal=1).bool()\n"),
    # ---- padding_mask: mistakes
    _padding("padding-inverted", "    return torch.arange(t, device=lengths.device) >= lengths[:, None]\n", "inverted"),
    _padding("padding-off-by-one", "    return torch.arange(t, device=lengths.device) <= lengths[:, None]\n",
             "off by one"),
    _padding("padding-float", "    return (torch.arange(t, device=lengths.device) < lengths[:, None]).float()\n",
             "returned as floats (or integers) where a boolean is asked"),
    _padding("padding-transposed", "    return torch.arange(t, device=lengths.device)[:, None] < lengths[None, :]\n",
             "transposed shape"),
    # ---- padding_mask: correct alternatives
    _padding("padding-loop",
             "    mask = torch.zeros(len(lengths), t, dtype=torch.bool, device=lengths.device)\n"
             "    for i, n in enumerate(lengths.tolist()):\n        mask[i, :n] = True\n    return mask\n"),
    _padding("padding-expand",
             "    b = lengths.shape[0]\n"
             "    return torch.arange(t, device=lengths.device).expand(b, t) < lengths.unsqueeze(-1).expand(b, t)\n"),
    # ---- DecoderBlock: mistakes
    _block("block-cross-reads-itself",
           _SELF + "        x = self.norm2(x + self.dropout(self.cross_attention(x, mask=self_mask)))\n" + _FF,
           "reads the decoder's own states"),
    _block("block-memory-not-masked",
           _SELF + "        x = self.norm2(x + self.dropout(self.cross_attention(x, context=memory)))\n" + _FF,
           "source padding is not masked in cross-attention"),
    _block("block-self-mask-ignored",
           "        x = self.norm1(x + self.dropout(self.self_attention(x)))\n" + _CROSS + _FF, "is not causal"),
    _block("block-pre-norm",
           "        x = x + self.self_attention(self.norm1(x), mask=self_mask)\n"
           "        x = x + self.cross_attention(self.norm2(x), context=memory, mask=memory_mask)\n"
           "        return x + self.ff(self.norm3(x))\n", "pre-norm"),
    _block("block-no-residual",
           "        x = self.norm1(self.self_attention(x, mask=self_mask))\n"
           "        x = self.norm2(self.cross_attention(x, context=memory, mask=memory_mask))\n"
           "        return self.norm3(self.ff(x))\n", "residual connections are missing"),
    _block("block-cross-first",
           "        x = self.norm1(x + self.cross_attention(x, context=memory, mask=memory_mask))\n"
           "        x = self.norm2(x + self.self_attention(x, mask=self_mask))\n" + _FF,
           "cross-attention comes before self-attention"),
    _block("block-shared-attention", _SELF + _CROSS + _FF, "are the same module",
           init=_BLOCK_INIT.replace("self.cross_attention = MultiHeadAttention(k, heads)",
                                    "self.cross_attention = self.self_attention")),
    # ---- DecoderBlock: correct alternatives
    _block("block-positional-arguments",
           "        def sublayer(norm, y):\n            return norm(x + self.dropout(y))\n"
           "        x = sublayer(self.norm1, self.self_attention(x, None, self_mask))\n"
           "        x = sublayer(self.norm2, self.cross_attention(x, memory, memory_mask))\n"
           "        return sublayer(self.norm3, self.ff(x))\n"),
    _block("block-sublayer-list",
           "        steps = [(self.norm1, lambda h: self.self_attention(h, mask=self_mask)),\n"
           "                 (self.norm2, lambda h: self.cross_attention(h, context=memory, mask=memory_mask)),\n"
           "                 (self.norm3, self.ff)]\n"
           "        for norm, sublayer in steps:\n            x = norm(x + self.dropout(sublayer(x)))\n"
           "        return x\n"),
    # ---- Seq2SeqTransformer: mistakes
    _model("model-memory-not-masked", "source padding is not masked in cross-attention",
           decode=_DECODE.replace(", memory_mask=src_mask.unsqueeze(1)", "")),
    _model("model-not-causal", "is not causal",
           decode=_DECODE.replace("self_mask=causal_mask(tgt.shape[1], tgt.device), ", "")),
    _model("model-encoder-not-masked", "reads the source padding",
           encode=_ENCODE.replace("block(x, mask=src_mask.unsqueeze(1))", "block(x)")),
    _model("model-mask-not-unsqueezed", "src_mask.unsqueeze(1)",
           decode=_DECODE.replace("memory_mask=src_mask.unsqueeze(1)", "memory_mask=src_mask")),
    _model("model-no-target-positions", "no positions are added to the target",
           decode=_DECODE.replace("self.positions(self.tgt_embedding(tgt))", "self.tgt_embedding(tgt)")),
    _model("model-softmax-output", "returns probabilities",
           decode=_DECODE.replace("return self.to_logits(x)", "return self.to_logits(x).softmax(dim=-1)")),
    _model("model-memory-is-embeddings", "the memory is the source embeddings",
           encode="        return self.positions(self.src_embedding(src))\n"),
    # ---- Seq2SeqTransformer: correct alternatives
    _model("model-inline-masks",
           encode=("        mask = src_mask[:, None, :]\n        x = self.src_embedding(src)\n"
                   "        x = self.positions(x)\n        for block in self.encoder:\n"
                   "            x = block(x, mask)\n        return x\n"),
           decode=("        t = tgt.size(1)\n"
                   "        future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=tgt.device), diagonal=1)\n"
                   "        x = self.positions(self.tgt_embedding(tgt))\n"
                   "        for block in self.decoder:\n"
                   "            x = block(x, memory, ~future, src_mask[:, None, :])\n"
                   "        return self.to_logits(x)\n")),
    _model("model-forward-by-hand",
           forward=("        memory = self.encode(src, src_mask)\n"
                    "        logits = self.decode(tgt, memory, src_mask)\n        return logits\n")),
    # ---- teacher_forcing_loss: mistakes
    _loss("loss-not-shifted",
          "    logits = model(src, tgt, src_mask)\n"
          "    return F.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=pad)\n", "learns to copy its input"),
    _loss("loss-counts-padding",
          "    logits = model(src, tgt[:, :-1], src_mask)\n"
          "    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:])\n", "counts the padding"),
    _loss("loss-wrong-shift",
          "    logits = model(src, tgt[:, 1:], src_mask)\n"
          "    return F.cross_entropy(logits.transpose(1, 2), tgt[:, :-1], ignore_index=pad)\n", "wrong way"),
    _loss("loss-sum",
          "    logits = model(src, tgt[:, :-1], src_mask)\n"
          "    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=pad, reduction='sum')\n",
          "is a sum"),
    _loss("loss-softmax-twice",
          "    probs = model(src, tgt[:, :-1], src_mask).softmax(dim=-1)\n"
          "    return F.cross_entropy(probs.transpose(1, 2), tgt[:, 1:], ignore_index=pad)\n", "softmax is applied"),
    _loss("loss-pad-hard-coded",
          "    logits = model(src, tgt[:, :-1], src_mask)\n"
          "    return F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=0)\n", "hard-coded as 0"),
    _loss("loss-classes-last",
          "    logits = model(src, tgt[:, :-1], src_mask)\n"
          "    return F.cross_entropy(logits, tgt[:, 1:], ignore_index=pad)\n", "classes in dimension 1"),
    # ---- teacher_forcing_loss: correct alternatives
    _loss("loss-flattened",
          "    logits = model(src, tgt[:, :-1], src_mask)\n"
          "    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1), ignore_index=pad)\n"),
    _loss("loss-masked-mean",
          "    labels = tgt[:, 1:]\n"
          "    log_probs = model(src, tgt[:, :-1], src_mask).log_softmax(dim=-1)\n"
          "    picked = -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)\n"
          "    real = (labels != pad).float()\n"
          "    return (picked * real).sum() / real.sum()\n"),
    # ---- greedy_decode: mistakes
    _greedy("greedy-never-stops",
            "    with torch.no_grad():\n"
            "        tokens = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)\n"
            "        for _ in range(max_len):\n"
            "            nxt = model(src, tokens, src_mask)[:, -1].argmax(dim=-1, keepdim=True)\n"
            "            tokens = torch.cat([tokens, nxt], dim=1)\n"
            "    return tokens[:, 1:]\n", "never stops at <eos>"),
    _greedy("greedy-returns-bos",
            _DECODE_LOOP_START
            + "            nxt = nxt.masked_fill(finished, 0)\n"
              "            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)\n"
              "            finished = finished | (nxt == eos)\n"
              "            if finished.all():\n                break\n"
              "    return tokens\n", "starts with <bos>"),
    _greedy("greedy-forgets-bos",
            "    with torch.no_grad():\n"
            "        memory = model.encode(src, src_mask)\n"
            "        tokens = torch.zeros((src.shape[0], 1), dtype=torch.long, device=src.device)\n"
            "        finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)\n"
            "        for _ in range(max_len):\n"
            "            nxt = model.decode(tokens, memory, src_mask)[:, -1].argmax(dim=-1)\n"
            "            nxt = nxt.masked_fill(finished, 0)\n"
            "            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)\n"
            "            finished = finished | (nxt == eos)\n"
            "            if finished.all():\n                break\n"
            "    return tokens[:, 1:]\n", "does not start from <bos>"),
    _greedy("greedy-stops-at-first-eos",
            _DECODE_LOOP_START
            + "            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)\n"
              "            if (nxt == eos).any():\n                break\n"
              "    return tokens[:, 1:]\n", "had not written <eos> yet"),
    _greedy("greedy-first-position",
            _DECODE_LOOP_START.replace("[:, -1]", "[:, 0]")
            + "            nxt = nxt.masked_fill(finished, 0)\n"
              "            tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)\n"
              "            finished = finished | (nxt == eos)\n"
              "            if finished.all():\n                break\n"
              "    return tokens[:, 1:]\n", "LAST position"),
    # ---- greedy_decode: correct alternatives
    _greedy("greedy-full-length",
            "    with torch.no_grad():\n"
            "        b = src.shape[0]\n"
            "        out = torch.zeros(b, max_len, dtype=torch.long, device=src.device)\n"
            "        tokens = torch.full((b, 1), bos, dtype=torch.long, device=src.device)\n"
            "        alive = torch.ones(b, dtype=torch.bool, device=src.device)\n"
            "        for step in range(max_len):\n"
            "            nxt = model(src, tokens, src_mask)[:, -1].argmax(-1)\n"
            "            out[:, step] = torch.where(alive, nxt, torch.zeros_like(nxt))\n"
            "            alive = alive & (nxt != eos)\n"
            "            tokens = torch.cat([tokens, nxt[:, None]], dim=1)\n"
            "    return out\n"),
    _greedy("greedy-per-sequence",
            "    rows = []\n"
            "    with torch.no_grad():\n"
            "        for i in range(src.shape[0]):\n"
            "            memory = model.encode(src[i:i + 1], src_mask[i:i + 1])\n"
            "            seq = [bos]\n"
            "            while len(seq) <= max_len and seq[-1] != eos:\n"
            "                tgt = torch.tensor([seq], device=src.device)\n"
            "                seq.append(int(model.decode(tgt, memory, src_mask[i:i + 1])[0, -1].argmax()))\n"
            "            rows.append(seq[1:])\n"
            "    width = max(len(r) for r in rows)\n"
            "    return torch.tensor([r + [0] * (width - len(r)) for r in rows], device=src.device)\n"),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["causal-no-diagonal", "padding-off-by-one", "block-memory-not-masked", "model-no-target-positions",
                   "loss-not-shifted", "greedy-never-stops"]
