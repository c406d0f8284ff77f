"""Variants of the answers of assignment 02_qkv."""

from autograder.catalogue import Variant

A = "02_qkv"


def _attention(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "attention", f"def attention(queries, keys, values):\n{body}", diagnosis)


def _module(name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        "class SelfAttentionQKV(nn.Module):\n"
        "    def __init__(self, k):\n"
        "        super().__init__()\n"
        f"{init}\n"
        "    def forward(self, x):\n"
        f"{forward}"
    )
    return Variant(A, name, "self_attention_qkv", code, diagnosis)


_INIT = (
    "        self.to_queries = nn.Linear(k, k, bias=False)\n"
    "        self.to_keys = nn.Linear(k, k, bias=False)\n"
    "        self.to_values = nn.Linear(k, k, bias=False)\n"
)
_FORWARD = "        return attention(self.to_queries(x), self.to_keys(x), self.to_values(x))\n"

VARIANTS = [
    # mistakes in attention
    _attention("attention-softmax-queries",
               "    return F.softmax(queries @ keys.transpose(1, 2), dim=1) @ values\n", "softmax runs over the queries"),
    _attention("attention-no-softmax", "    return (queries @ keys.transpose(1, 2)) @ values\n", "softmax is missing"),
    _attention("attention-keys-as-values",
               "    return F.softmax(queries @ keys.transpose(1, 2), dim=-1) @ keys\n", "keys used as values"),
    _attention("attention-transposed",
               "    w = F.softmax(queries @ keys.transpose(1, 2), dim=-1)\n    return w.transpose(1, 2) @ values\n",
               "number of queries and of keys differ"),
    _attention("attention-scaled",
               "    s = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])\n    return F.softmax(s, dim=-1) @ values\n",
               "divided by √k"),
    # mistakes in the module
    _module("module-bias", _INIT.replace("bias=False", "bias=True"), _FORWARD, "has a bias"),
    _module("module-shared-projection", "        self.to_queries = self.to_keys = self.to_values = nn.Linear(k, k, bias=False)\n",
            _FORWARD, "are the same layer"),
    _module("module-values-not-projected", _INIT,
            "        return attention(self.to_queries(x), self.to_keys(x), x)\n", "values are the raw inputs"),
    _module("module-keys-as-values", _INIT,
            "        k = self.to_keys(x)\n        return attention(self.to_queries(x), k, k)\n", "keys are used as values"),
    _module("module-queries-for-all", _INIT,
            "        q = self.to_queries(x)\n        return attention(q, q, q)\n", "to_queries is used for every role"),
    _module("module-wrong-size", _INIT.replace("nn.Linear(k, k,", "nn.Linear(k, 2 * k,"), _FORWARD, "maps 6 -> 12 features"),
    # correct, written differently
    _attention("attention-fused", "    return F.scaled_dot_product_attention(queries, keys, values, scale=1.0)\n"),
    _attention("attention-einsum",
               "    w = torch.einsum('bqk,btk->bqt', queries, keys).softmax(-1)\n    return torch.einsum('bqt,btv->bqv', w, values)\n"),
    _module("module-one-matrix-split",
            "        self.to_queries = nn.Linear(k, k, bias=False)\n        self.to_keys = nn.Linear(k, k, bias=False)\n"
            "        self.to_values = nn.Linear(k, k, bias=False)\n",
            "        w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])\n"
            "        q, k, v = F.linear(x, w).chunk(3, dim=-1)\n        return attention(q, k, v)\n"),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["attention-softmax-queries", "module-values-not-projected"]
