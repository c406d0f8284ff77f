"""Variants of the answers of assignment 03_scaling."""

from autograder.catalogue import Variant

A = "03_scaling"


def _sdpa(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "scaled_dot_product_attention",
                   f"def scaled_dot_product_attention(queries, keys, values, mask=None):\n{body}", diagnosis)


def _sdpa_steps(name: str, scores: str = "queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])",
                fill: str = "        scores = scores.masked_fill(~mask, float('-inf'))\n",
                after: str = "        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)\n",
                result: str = "weights @ values, weights", diagnosis: str | None = None) -> Variant:
    """The reference solution with one step replaced."""
    body = (f"    scores = {scores}\n"
            f"    if mask is not None:\n{fill}"
            "    weights = F.softmax(scores, dim=-1)\n"
            f"    if mask is not None:\n{after}"
            f"    return {result}\n")
    return _sdpa(name, body, diagnosis)


def _module(name: str, init: str, forward: str, diagnosis: str | None = None, signature: str = "x, mask=None") -> Variant:
    code = (
        "class ScaledSelfAttention(nn.Module):\n"
        "    def __init__(self, k):\n"
        "        super().__init__()\n"
        f"{init}\n"
        f"    def forward(self, {signature}):\n"
        f"{forward}"
    )
    return Variant(A, name, "scaled_self_attention", code, diagnosis)


_INIT = (
    "        self.to_queries = nn.Linear(k, k, bias=False)\n"
    "        self.to_keys = nn.Linear(k, k, bias=False)\n"
    "        self.to_values = nn.Linear(k, k, bias=False)\n"
)
_QKV = "        q, k, v = self.to_queries(x), self.to_keys(x), self.to_values(x)\n"
_FORWARD = _QKV + "        return scaled_dot_product_attention(q, k, v, mask)[0]\n"
_PASS = "        pass\n"

VARIANTS = [
    # mistakes in scaled_dot_product_attention
    _sdpa_steps("scaling-unscaled", scores="queries @ keys.transpose(-2, -1)", diagnosis="scores are not scaled"),
    _sdpa_steps("scaling-divided-by-d", scores="queries @ keys.transpose(-2, -1) / queries.shape[-1]",
                diagnosis="divided by d"),
    _sdpa_steps("scaling-by-value-size", scores="queries @ keys.transpose(-2, -1) / math.sqrt(values.shape[-1])",
                diagnosis="square root of the value size"),
    _sdpa_steps("scaling-mask-inverted", fill="        scores = scores.masked_fill(mask, float('-inf'))\n",
                after="        weights = weights.masked_fill(~(~mask).any(dim=-1, keepdim=True), 0.0)\n",
                diagnosis="mask is inverted"),
    _sdpa_steps("scaling-mask-with-zero", fill="        scores = scores.masked_fill(~mask, 0.0)\n",
                diagnosis="set to 0 instead of −∞"),
    _sdpa_steps("scaling-mask-after-softmax", fill=_PASS, after="        weights = weights * mask\n",
                diagnosis="without renormalising"),
    _sdpa_steps("scaling-mask-ignored", fill=_PASS, after=_PASS, diagnosis="mask is ignored"),
    _sdpa_steps("scaling-raw-scores-as-weights", result="F.softmax(scores, dim=-1).nan_to_num() @ values, scores",
                diagnosis="weights returned are"),
    _sdpa_steps("scaling-nan-in-empty-rows", after=_PASS, diagnosis="returns NaN for a query that may attend to nothing"),
    _sdpa_steps("scaling-large-negative-fill", fill="        scores = scores.masked_fill(~mask, -1e9)\n", after=_PASS,
                diagnosis="equal weights on every key"),
    _sdpa_steps("scaling-additive-mask",
                fill="        scores = scores + torch.zeros_like(scores).masked_fill(~mask, float('-inf'))\n",
                after="        weights = torch.nan_to_num(weights, nan=0.0)\n", diagnosis="NaN gradients"),
    _sdpa_steps("scaling-transpose-1-2", scores="queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])",
                diagnosis="transpose(-2, -1)"),
    _sdpa("scaling-softmax-over-queries",
          "    w = F.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-2)\n"
          "    return w @ values, w\n", "softmax runs over the queries"),
    _sdpa("scaling-returns-output-only",
          "    w = F.softmax(queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1]), dim=-1)\n"
          "    return w @ values\n", "should return a pair (output, weights)"),
    # mistakes in ScaledSelfAttention
    _module("scaling-module-mask-dropped", _INIT, _QKV + "        return scaled_dot_product_attention(q, k, v)[0]\n",
            "later positions leak through the mask"),
    _module("scaling-module-scaled-twice", _INIT,
            _QKV + "        return scaled_dot_product_attention(q / math.sqrt(q.shape[-1]), k, v, mask)[0]\n",
            "divided by d"),
    _module("scaling-module-values-not-projected", _INIT,
            _QKV + "        return scaled_dot_product_attention(q, k, x, mask)[0]\n", "values are the raw inputs"),
    _module("scaling-module-bias", _INIT.replace("bias=False", "bias=True"), _FORWARD, "has a bias"),
    _module("scaling-module-returns-pair", _INIT, _QKV + "        return scaled_dot_product_attention(q, k, v, mask)\n",
            "should return a torch.Tensor"),
    _module("scaling-module-no-mask-argument", _INIT, _QKV + "        return scaled_dot_product_attention(q, k, v)[0]\n",
            "def forward(self, x, mask=None)", signature="x"),
    # correct, written differently
    _sdpa("scaling-where-and-nan-to-num",
          "    scores = torch.matmul(queries, keys.mT) * queries.shape[-1] ** -0.5\n"
          "    if mask is not None:\n"
          "        scores = torch.where(mask, scores, float('-inf'))\n"
          "    weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)\n"
          "    return weights @ values, weights\n"),
    _sdpa("scaling-finite-fill-and-zeroed-rows",
          "    queries = queries / math.sqrt(queries.shape[-1])\n"
          "    scores = torch.einsum('...qd,...kd->...qk', queries, keys)\n"
          "    if mask is None:\n"
          "        mask = torch.ones_like(scores, dtype=torch.bool)\n"
          "    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n"
          "    weights = F.softmax(scores, dim=-1) * mask.any(dim=-1, keepdim=True)\n"
          "    return torch.einsum('...qk,...kv->...qv', weights, values), weights\n"),
    _module("scaling-module-fused", _INIT,
            _QKV + "        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"),
    _module("scaling-module-one-matrix-split", _INIT,
            "        w = torch.cat([self.to_queries.weight, self.to_keys.weight, self.to_values.weight])\n"
            "        q, k, v = F.linear(x, w).chunk(3, dim=-1)\n"
            "        output, weights = scaled_dot_product_attention(q, k, v, mask=mask)\n"
            "        return output\n"),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["scaling-unscaled", "scaling-module-mask-dropped"]
