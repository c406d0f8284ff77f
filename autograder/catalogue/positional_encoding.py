"""Variants of the answers of assignment 06_positional_encoding."""

from autograder.catalogue import Variant

A = "06_positional_encoding"


def _table(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "sinusoidal_positional_encoding", f"def sinusoidal_positional_encoding(max_len, k):\n{body}",
                   diagnosis)


def _module(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class PositionalEncoding(nn.Module):\n"
        "    def __init__(self, k, max_len=5000, dropout=0.0):\n"
        "        super().__init__()\n"
        f"{init}"
        "    def forward(self, x):\n"
        f"{forward}"
    )
    return Variant(A, name, "positional_encoding", code, diagnosis)


def _learned(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class LearnedPositionalEmbedding(nn.Module):\n"
        "    def __init__(self, max_len, k):\n"
        "        super().__init__()\n"
        f"{init}"
        "    def forward(self, x):\n"
        f"{forward}"
    )
    return Variant(A, name, "learned_positional_embedding", code, diagnosis)


_CHECK = "    if k % 2:\n        raise ValueError(f'k must be even, got {k}')\n"
_ANGLES = (
    "    positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)\n"
    "    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)\n"
    "    angles = positions * frequencies\n"
)
_FILL = (
    "    table = torch.zeros(max_len, k)\n"
    "    table[:, 0::2] = torch.sin(angles)\n"
    "    table[:, 1::2] = torch.cos(angles)\n"
    "    return table\n"
)

_INIT = (
    "        self.register_buffer('table', sinusoidal_positional_encoding(max_len, k))\n"
    "        self.dropout = nn.Dropout(dropout)\n"
)
_LENGTH = (
    "        if x.shape[1] > self.table.shape[0]:\n"
    "            raise ValueError(f'sequence of length {x.shape[1]} is longer than max_len={self.table.shape[0]}')\n"
)
_FORWARD = _LENGTH + "        return self.dropout(x + self.table[:x.shape[1]])\n"

_LEARNED_INIT = "        self.embedding = nn.Embedding(max_len, k)\n"
_LEARNED_FORWARD = "        return x + self.embedding(torch.arange(x.shape[1], device=x.device))\n"

VARIANTS = [
    # mistakes in sinusoidal_positional_encoding
    _table("table-sin-cos-swapped", _CHECK + _ANGLES + _FILL.replace("torch.sin(angles)", "SIN").replace(
        "torch.cos(angles)", "torch.sin(angles)").replace("SIN", "torch.cos(angles)"), "sin and cos are swapped"),
    _table("table-exponent-i",
           _CHECK + _ANGLES.replace("torch.arange(0, k, 2, dtype=torch.float32) / k",
                                    "torch.arange(k // 2, dtype=torch.float32) / k") + _FILL,
           "the exponent is i/k instead of 2i/k"),
    _table("table-concatenated", _CHECK + _ANGLES + "    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)\n",
           "concatenated"),
    _table("table-positions-from-1",
           _CHECK + _ANGLES.replace("torch.arange(max_len,", "torch.arange(1, max_len + 1,") + _FILL,
           "the positions start at 1"),
    _table("table-float64-numpy",
           _CHECK + "    import numpy as np\n"
           "    p = np.arange(max_len)[:, None]\n    i = np.arange(k // 2)[None, :]\n"
           "    angles = p / 10000 ** (2 * i / k)\n    table = np.zeros((max_len, k))\n"
           "    table[:, 0::2] = np.sin(angles)\n    table[:, 1::2] = np.cos(angles)\n"
           "    return torch.from_numpy(table)\n",
           "it should be torch.float32"),
    _table("table-odd-k-not-rejected",
           "    table = torch.zeros(max_len, k)\n"
           "    for p in range(max_len):\n"
           "        for j in range(k):\n"
           "            angle = p / 10000 ** ((j - j % 2) / k)\n"
           "            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)\n"
           "    return table\n",
           "returned a table for an odd k"),
    _table("table-odd-k-shape-error", _ANGLES + _FILL, "An odd k should be caught first"),
    _table("table-transposed", _CHECK + _ANGLES + _FILL.replace("return table", "return table.T"),
           "positions should run down the rows"),
    # mistakes in PositionalEncoding
    _module("pe-plain-attribute",
            "        self.table = sinusoidal_positional_encoding(max_len, k)\n        self.dropout = nn.Dropout(dropout)\n",
            _FORWARD, "plain tensor attribute"),
    _module("pe-parameter",
            "        self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k))\n"
            "        self.dropout = nn.Dropout(dropout)\n", _FORWARD, "registers parameters"),
    _module("pe-frozen-parameter",
            "        self.table = nn.Parameter(sinusoidal_positional_encoding(max_len, k), requires_grad=False)\n"
            "        self.dropout = nn.Dropout(dropout)\n", _FORWARD, "registers parameters"),
    _module("pe-seq-first-layout",
            "        self.register_buffer('table', sinusoidal_positional_encoding(max_len, k).unsqueeze(1))\n"
            "        self.dropout = nn.Dropout(dropout)\n",
            _LENGTH + "        return self.dropout(x + self.table[:x.size(0)])\n",
            "every position gets the encoding of position 0"),
    _module("pe-rescaled", _INIT, _LENGTH + "        return self.dropout(x * math.sqrt(x.shape[-1]) + self.table[:x.shape[1]])\n",
            "the input is rescaled inside the encoding"),
    _module("pe-returns-table", _INIT, _LENGTH + "        return self.dropout(self.table[:x.shape[1]].expand_as(x))\n",
            "the table is returned instead of added"),
    _module("pe-no-length-check", _INIT, "        return self.dropout(x + self.table[:x.shape[1]])\n",
            "Check the length first and raise a ValueError"),
    _module("pe-dropout-ignored", "        self.register_buffer('table', sinusoidal_positional_encoding(max_len, k))\n",
            _LENGTH + "        return x + self.table[:x.shape[1]]\n", "should zero about half"),
    # mistakes in LearnedPositionalEmbedding
    _learned("learned-returned-not-added", _LEARNED_INIT,
             "        return self.embedding(torch.arange(x.shape[1], device=x.device)).expand_as(x)\n",
             "returned instead of added"),
    _learned("learned-swapped-sizes", "        self.embedding = nn.Embedding(k, max_len)\n", _LEARNED_FORWARD,
             "The arguments are swapped"),
    _learned("learned-batch-positions", _LEARNED_INIT,
             "        return x + self.embedding(torch.arange(x.shape[0], device=x.device))\n",
             "positions = torch.arange(t, device=x.device)"),
    _learned("learned-positions-from-1", _LEARNED_INIT,
             "        return x + self.embedding(torch.arange(1, x.shape[1] + 1, device=x.device))\n",
             "the positions start at 1"),
    _learned("learned-parameter-table", "        self.table = nn.Parameter(torch.randn(max_len, k))\n",
             "        return x + self.table[:x.shape[1]]\n", "should hold one nn.Embedding(max_len, k)"),
    # correct, written differently
    _table("table-exp-log-stack",
           _CHECK + "    p = torch.arange(max_len).float()[:, None]\n"
           "    w = torch.exp(-math.log(10000.0) * torch.arange(0, k, 2).float() / k)\n"
           "    return torch.stack([torch.sin(p * w), torch.cos(p * w)], dim=-1).reshape(max_len, k)\n"),
    _table("table-loops-float64",
           "    if k % 2 == 1:\n        raise ValueError('odd k')\n"
           "    rows = [[(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j // 2) * 2 / k)) for j in range(k)]\n"
           "            for p in range(max_len)]\n"
           "    return torch.tensor(rows, dtype=torch.float64).float()\n"),
    _module("pe-batched-buffer-functional-dropout",
            "        self.register_buffer('pe', sinusoidal_positional_encoding(max_len, k).unsqueeze(0), persistent=False)\n"
            "        self.p = dropout\n",
            "        b, t, k = x.shape\n"
            "        if t > self.pe.shape[1]:\n            raise ValueError(f'{t} > max_len {self.pe.shape[1]}')\n"
            "        return F.dropout(x + self.pe[:, :t], p=self.p, training=self.training)\n"),
    _learned("learned-weight-slice", _LEARNED_INIT, "        return x + self.embedding.weight[: x.shape[1]]\n"),
    _learned("learned-expanded-positions", _LEARNED_INIT,
             "        b, t, _ = x.shape\n"
             "        positions = torch.arange(t, device=x.device).unsqueeze(0).expand(b, t)\n"
             "        return self.embedding(positions) + x\n"),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["table-odd-k-not-rejected", "pe-plain-attribute", "learned-returned-not-added"]
