"""Variants of the answers of assignment 05_transformer_block."""

from autograder.catalogue import Variant

A = "05_transformer_block"


def _ff(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class FeedForward(nn.Module):\n"
        "    def __init__(self, k, hidden):\n"
        "        super().__init__()\n"
        f"{init}"
        "    def forward(self, x):\n"
        f"{forward}"
    )
    return Variant(A, name, "feed_forward", code, diagnosis)


def _block(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class TransformerBlock(nn.Module):\n"
        "    def __init__(self, k, heads, ff_mult=4, dropout=0.0):\n"
        "        super().__init__()\n"
        f"{init}"
        "    def forward(self, x, mask=None):\n"
        f"{forward}"
    )
    return Variant(A, name, "transformer_block", code, diagnosis)


def _classifier(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class TransformerClassifier(nn.Module):\n"
        "    def __init__(self, vocab_size, k, heads, depth, num_classes):\n"
        "        super().__init__()\n"
        f"{init}"
        "    def forward(self, tokens):\n"
        f"{forward}"
    )
    return Variant(A, name, "transformer_classifier", code, diagnosis)


_FF_INIT = "        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k))\n"
_FF_FORWARD = "        return self.net(x)\n"

_BLOCK_INIT = (
    "        self.attention = MultiHeadAttention(k, heads)\n"
    "        self.norm1 = nn.LayerNorm(k)\n"
    "        self.norm2 = nn.LayerNorm(k)\n"
    "        self.ff = FeedForward(k, ff_mult * k)\n"
)
_BLOCK_FORWARD = (
    "        x = self.norm1(x + self.attention(x, mask=mask))\n"
    "        return self.norm2(x + self.ff(x))\n"
)

_CLF_INIT = (
    "        self.embedding = nn.Embedding(vocab_size, k)\n"
    "        self.blocks = nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))\n"
    "        self.to_classes = nn.Linear(k, num_classes)\n"
)
_CLF_FORWARD = (
    "        x = self.embedding(tokens)\n"
    "        for block in self.blocks:\n"
    "            x = block(x)\n"
    "        return self.to_classes(x.mean(dim=1))\n"
)

VARIANTS = [
    # mistakes in FeedForward
    _ff("ff-relu-after-second",
        "        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k), nn.ReLU())\n",
        _FF_FORWARD, "after the second linear layer"),
    _ff("ff-gelu", "        self.net = nn.Sequential(nn.Linear(k, hidden), nn.GELU(), nn.Linear(hidden, k))\n",
        _FF_FORWARD, "GELU is used where a ReLU is asked"),
    _ff("ff-no-relu", "        self.net = nn.Sequential(nn.Linear(k, hidden), nn.Linear(hidden, k))\n",
        _FF_FORWARD, "the ReLU is missing"),
    _ff("ff-residual-inside", _FF_INIT, "        return x + self.net(x)\n", "residual connection inside the feed-forward"),
    _ff("ff-hidden-ignored", "        self.net = nn.Sequential(nn.Linear(k, 4 * k), nn.ReLU(), nn.Linear(4 * k, k))\n",
        _FF_FORWARD, "they should map 6 -> 10 -> 6"),
    # mistakes in TransformerBlock
    _block("block-hidden-4x4", _BLOCK_INIT.replace("ff_mult * k", "4 * 4"), _BLOCK_FORWARD, "4·4"),
    _block("block-hidden-ignores-ff-mult", _BLOCK_INIT.replace("ff_mult * k", "4 * k"), _BLOCK_FORWARD,
           "whatever ff_mult is"),
    _block("block-residual-after-norm", _BLOCK_INIT,
           "        x = x + self.norm1(self.attention(x, mask=mask))\n        return x + self.norm2(self.ff(x))\n",
           "the residual is added after the norm"),
    _block("block-without-residuals", _BLOCK_INIT,
           "        x = self.norm1(self.attention(x, mask=mask))\n        return self.norm2(self.ff(x))\n",
           "there is no residual connection"),
    _block("block-one-norm-module",
           "        self.attention = MultiHeadAttention(k, heads)\n        self.norm1 = self.norm2 = nn.LayerNorm(k)\n"
           "        self.ff = FeedForward(k, ff_mult * k)\n", _BLOCK_FORWARD, "are the same LayerNorm"),
    _block("block-norm1-twice", _BLOCK_INIT,
           "        x = self.norm1(x + self.attention(x, mask=mask))\n        return self.norm1(x + self.ff(x))\n",
           "norm1 is used in both places"),
    _block("block-prenorm-wiring", _BLOCK_INIT,
           "        x = x + self.attention(self.norm1(x), mask=mask)\n        return x + self.ff(self.norm2(x))\n",
           "pre-norm"),
    _block("block-mask-not-passed", _BLOCK_INIT,
           "        x = self.norm1(x + self.attention(x))\n        return self.norm2(x + self.ff(x))\n",
           "mask is not passed on"),
    _block("block-ff-on-input", _BLOCK_INIT,
           "        h = self.norm1(x + self.attention(x, mask=mask))\n        return self.norm2(h + self.ff(x))\n",
           "applied to the block's input x"),
    _block("block-torch-attention",
           _BLOCK_INIT.replace("MultiHeadAttention(k, heads)", "nn.MultiheadAttention(k, heads, batch_first=True)"),
           "        x = self.norm1(x + self.attention(x, x, x, need_weights=False)[0])\n"
           "        return self.norm2(x + self.ff(x))\n",
           "should be the course's MultiHeadAttention"),
    _block("block-one-head", _BLOCK_INIT.replace("MultiHeadAttention(k, heads)", "MultiHeadAttention(k, 1)"),
           _BLOCK_FORWARD, "pass the block's `heads` on"),
    # mistakes in TransformerClassifier
    _classifier("clf-python-list", _CLF_INIT.replace("nn.ModuleList(", "list("), _CLF_FORWARD, "plain Python list"),
    _classifier("clf-repeated-block",
                _CLF_INIT.replace("nn.ModuleList(TransformerBlock(k, heads) for _ in range(depth))",
                                  "nn.ModuleList([TransformerBlock(k, heads)] * depth)"),
                _CLF_FORWARD, "repeats ONE block"),
    _classifier("clf-sum-pooling", _CLF_INIT, _CLF_FORWARD.replace("x.mean(dim=1)", "x.sum(dim=1)"),
                "summed instead of averaged"),
    _classifier("clf-first-token", _CLF_INIT, _CLF_FORWARD.replace("x.mean(dim=1)", "x[:, 0]"),
                "only the first position"),
    _classifier("clf-softmax", _CLF_INIT,
                _CLF_FORWARD.replace("return self.to_classes(x.mean(dim=1))",
                                     "return F.softmax(self.to_classes(x.mean(dim=1)), dim=-1)"),
                "Return the raw logits"),
    _classifier("clf-mean-over-batch", _CLF_INIT, _CLF_FORWARD.replace("x.mean(dim=1)", "x.mean(dim=0)"),
                "the mean runs over the batch"),
    _classifier("clf-blocks-not-chained", _CLF_INIT,
                "        x = self.embedding(tokens)\n        for block in self.blocks:\n            h = block(x)\n"
                "        return self.to_classes(h.mean(dim=1))\n",
                "applied to the embeddings rather than to the previous block's output"),
    # correct, written differently
    _ff("ff-attributes-functional",
        "        self.first = nn.Linear(k, hidden)\n        self.second = nn.Linear(hidden, k)\n",
        "        return self.second(F.relu(self.first(x)))\n"),
    _ff("ff-sequential-with-dropout",
        "        self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Dropout(0.0), nn.Linear(hidden, k))\n",
        _FF_FORWARD),
    _block("block-no-dropout-named-steps", _BLOCK_INIT,
           "        attended = self.attention(x, mask=mask)\n        x = self.norm1(attended + x)\n"
           "        fed = self.ff(x)\n        x = self.norm2(fed + x)\n        return x\n"),
    _block("block-attention-positional-args", _BLOCK_INIT + "        self.drop = nn.Dropout(dropout)\n",
           "        x = self.norm1(x + self.drop(self.attention(x, None, mask)))\n"
           "        return self.norm2(x + self.drop(self.ff(x)))\n"),
    _classifier("clf-sequential-other-names",
                "        self.emb = nn.Embedding(vocab_size, k)\n"
                "        self.layers = nn.Sequential(*[TransformerBlock(k, heads) for _ in range(depth)])\n"
                "        self.head = nn.Linear(k, num_classes)\n",
                "        return self.head(torch.mean(self.layers(self.emb(tokens)), 1))\n"),
    _classifier("clf-head-declared-first",
                "        self.to_classes = nn.Linear(k, num_classes)\n"
                "        self.embedding = nn.Embedding(vocab_size, k)\n"
                "        self.blocks = nn.ModuleList([TransformerBlock(k, heads) for _ in range(depth)])\n",
                _CLF_FORWARD.replace("x.mean(dim=1)", "x.sum(dim=1) / x.shape[1]")),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["ff-relu-after-second", "block-one-norm-module", "clf-sum-pooling"]
