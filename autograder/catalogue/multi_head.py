"""Variants of the answers of assignment 04_multi_head."""

from autograder.catalogue import Variant

A = "04_multi_head"


def _split(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "split_heads", f"def split_heads(x, heads):\n    b, t, k = x.shape\n{body}", diagnosis)


def _merge(name: str, body: str, diagnosis: str | None = None) -> Variant:
    return Variant(A, name, "merge_heads", f"def merge_heads(x):\n    b, h, t, s = x.shape\n{body}", diagnosis)


_NARROW_INIT = (
    "        if k % heads != 0:\n"
    "            raise ValueError(f'k={k} is not divisible by heads={heads}')\n"
    "        self.k, self.heads = k, heads\n"
    "        self.to_queries = nn.Linear(k, k, bias=False)\n"
    "        self.to_keys = nn.Linear(k, k, bias=False)\n"
    "        self.to_values = nn.Linear(k, k, bias=False)\n"
    "        self.unify_heads = nn.Linear(k, k)\n"
)
_WIDE_INIT = (
    "        self.k, self.heads = k, heads\n"
    "        self.to_queries = nn.Linear(k, k * heads, bias=False)\n"
    "        self.to_keys = nn.Linear(k, k * heads, bias=False)\n"
    "        self.to_values = nn.Linear(k, k * heads, bias=False)\n"
    "        self.unify_heads = nn.Linear(k * heads, k)\n"
)
_PROJECT = (
    "        context = x if context is None else context\n"
    "        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]\n"
    "        q = split_heads(self.to_queries(x), self.heads)\n"
    "        k = split_heads(self.to_keys(context), self.heads)\n"
    "        v = split_heads(self.to_values(context), self.heads)\n"
)
_MASK = (
    "        if mask is not None:\n"
    "            mask = torch.broadcast_to(mask, (b, tq, tk)).unsqueeze(1)\n"
)
_ATTEND = "        out, _ = scaled_dot_product_attention(q, k, v, mask)\n"
_UNIFY = "        return self.unify_heads(merge_heads(out))\n"
_FORWARD = _PROJECT + _MASK + _ATTEND + _UNIFY


def _own_attention(scale: str, dim: int = -1) -> str:
    """Attention written out by hand inside forward, with this scale and softmax axis."""
    return (
        f"        scores = q @ k.transpose(-2, -1) / {scale}\n"
        "        if mask is not None:\n"
        "            scores = scores.masked_fill(~mask, float('-inf'))\n"
        f"        out = F.softmax(scores, dim={dim}) @ v\n"
    )


def _module(cls: str, cell: str, name: str, init: str, forward: str, diagnosis: str | None = None) -> Variant:
    code = (
        f"class {cls}(nn.Module):\n"
        "    def __init__(self, k, heads):\n"
        "        super().__init__()\n"
        f"{init}\n"
        "    def forward(self, x, context=None, mask=None):\n"
        f"{forward}"
    )
    return Variant(A, name, cell, code, diagnosis)


def _narrow(name: str, forward: str = _FORWARD, diagnosis: str | None = None, init: str = _NARROW_INIT) -> Variant:
    return _module("MultiHeadAttention", "multi_head_attention", name, init, forward, diagnosis)


def _wide(name: str, forward: str = _FORWARD, diagnosis: str | None = None, init: str = _WIDE_INIT) -> Variant:
    return _module("WideMultiHeadAttention", "wide_multi_head_attention", name, init, forward, diagnosis)


_NO_TRANSPOSE = (
    "        context = x if context is None else context\n"
    "        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]\n"
    "        s = self.to_queries.out_features // self.heads\n"
    "        q = self.to_queries(x).reshape(b, self.heads, tq, s)\n"
    "        k = self.to_keys(context).reshape(b, self.heads, tk, s)\n"
    "        v = self.to_values(context).reshape(b, self.heads, tk, s)\n"
) + _MASK + _ATTEND + "        return self.unify_heads(out.reshape(b, tq, self.heads * s))\n"

VARIANTS = [
    # mistakes in split_heads
    _split("mh-split-no-transpose", "    return x.reshape(b, heads, t, k // heads)\n", "without a transpose"),
    _split("mh-split-interleaved", "    return x.view(b, t, k // heads, heads).permute(0, 3, 1, 2)\n", "split interleaved"),
    _split("mh-split-transpose-missing", "    return x.view(b, t, heads, k // heads)\n", "swap the middle axes"),
    # mistakes in merge_heads
    _merge("mh-merge-no-transpose", "    return x.reshape(b, t, h * s)\n", "without a transpose"),
    _merge("mh-merge-interleaved", "    return x.permute(0, 2, 3, 1).reshape(b, t, h * s)\n", "merged interleaved"),
    _merge("mh-merge-not-flattened", "    return x.transpose(1, 2)\n", "Flatten the last two dimensions"),
    # mistakes in MultiHeadAttention
    _narrow("mh-scaled-by-model-size", _PROJECT + _MASK + _own_attention("math.sqrt(self.k)") + _UNIFY,
            "divided by √k, the model size"),
    _narrow("mh-reshape-without-transpose", _NO_TRANSPOSE, "without a transpose"),
    _narrow("mh-interleaved-heads", _FORWARD.replace(
        "split_heads(self.to_queries(x), self.heads)",
        "self.to_queries(x).view(b, tq, -1, self.heads).permute(0, 3, 1, 2)").replace(
        "split_heads(self.to_keys(context), self.heads)",
        "self.to_keys(context).view(b, tk, -1, self.heads).permute(0, 3, 1, 2)").replace(
        "split_heads(self.to_values(context), self.heads)",
        "self.to_values(context).view(b, tk, -1, self.heads).permute(0, 3, 1, 2)").replace(
        "merge_heads(out)", "out.permute(0, 2, 3, 1).reshape(b, tq, -1)"), "split interleaved"),
    _narrow("mh-context-ignored", "        context = x\n" + _FORWARD, "the context is ignored"),
    _narrow("mh-mask-ignored", _PROJECT + "        out, _ = scaled_dot_product_attention(q, k, v)\n" + _UNIFY,
            "the mask is not applied to every head"),
    _narrow("mh-mask-not-broadcast-over-heads", _PROJECT + _ATTEND + _UNIFY, "put a heads axis"),
    _narrow("mh-softmax-over-queries", _PROJECT + _MASK + _own_attention("math.sqrt(q.shape[-1])", dim=-2) + _UNIFY,
            "softmax runs over the queries"),
    _narrow("mh-unify-without-bias", init=_NARROW_INIT.replace("nn.Linear(k, k)\n", "nn.Linear(k, k, bias=False)\n"),
            diagnosis="unify_heads has no bias"),
    _narrow("mh-unify-skipped", _PROJECT + _MASK + _ATTEND + "        return merge_heads(out)\n",
            "unify_heads is not applied"),
    _narrow("mh-no-divisibility-check", init=_NARROW_INIT.replace(
        "        if k % heads != 0:\n            raise ValueError(f'k={k} is not divisible by heads={heads}')\n", ""),
        diagnosis="was created without complaint"),
    _narrow("mh-loop-over-heads",
            "        context = x if context is None else context\n"
            "        s = self.k // self.heads\n"
            "        q, k, v = self.to_queries(x), self.to_keys(context), self.to_values(context)\n"
            "        outs = []\n"
            "        for i in range(self.heads):\n"
            "            part = slice(i * s, (i + 1) * s)\n"
            "            outs.append(scaled_dot_product_attention(q[..., part], k[..., part], v[..., part], mask)[0])\n"
            "        return self.unify_heads(torch.cat(outs, dim=-1))\n",
            "Python loop over the heads"),
    # mistakes in WideMultiHeadAttention
    _wide("wide-scaled-by-projected-size",
          "        context = x if context is None else context\n"
          "        b, tq, tk = x.shape[0], x.shape[1], context.shape[1]\n"
          "        scale = math.sqrt(self.to_queries.out_features)\n"
          "        q = split_heads(self.to_queries(x), self.heads)\n"
          "        k = split_heads(self.to_keys(context), self.heads)\n"
          "        v = split_heads(self.to_values(context), self.heads)\n"
          + _MASK + _own_attention("scale") + _UNIFY, "divided by √(k·heads)"),
    _wide("wide-scaled-by-head-fraction", _PROJECT + _MASK + _own_attention("math.sqrt(self.k / self.heads)") + _UNIFY,
          "divided by √(k / heads)"),
    _wide("wide-narrow-projections", init=_WIDE_INIT.replace("k * heads, bias", "k, bias").replace(
        "nn.Linear(k * heads, k)", "nn.Linear(k, k)"), diagnosis="should map 6 -> 18"),
    _wide("wide-context-ignored", "        context = x\n" + _FORWARD, "the context is ignored"),
    _wide("wide-reshape-without-transpose", _NO_TRANSPOSE, "without a transpose"),
    # correct, written differently
    _split("mh-split-unflatten", "    return x.unflatten(-1, (heads, k // heads)).transpose(1, 2)\n"),
    _split("mh-split-chunk", "    return torch.stack(x.chunk(heads, dim=-1), dim=1)\n"),
    _merge("mh-merge-flatten", "    return x.transpose(1, 2).flatten(2)\n"),
    _merge("mh-merge-cat", "    return torch.cat(x.unbind(dim=1), dim=-1)\n"),
    _narrow("mh-fused-one-matrix",
            "        context = x if context is None else context\n"
            "        q = split_heads(self.to_queries(x), self.heads)\n"
            "        w_kv = torch.cat([self.to_keys.weight, self.to_values.weight])\n"
            "        k, v = (split_heads(t, self.heads) for t in F.linear(context, w_kv).chunk(2, dim=-1))\n"
            "        if mask is not None and mask.dim() == 3:\n"
            "            mask = mask.unsqueeze(1)\n"
            "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
            "        return self.unify_heads(merge_heads(out))\n",
            init=_NARROW_INIT.replace(
                "        if k % heads != 0:\n            raise ValueError(f'k={k} is not divisible by heads={heads}')\n",
                "        assert k % heads == 0, 'k must be divisible by heads'\n")),
    _narrow("mh-einsum-by-hand", _PROJECT + _MASK +
            "        scores = torch.einsum('bhqs,bhks->bhqk', q, k) / math.sqrt(self.k // self.heads)\n"
            "        if mask is not None:\n"
            "            scores = scores.masked_fill(~mask, float('-inf'))\n"
            "        out = torch.einsum('bhqk,bhks->bhqs', scores.softmax(-1), v)\n" + _UNIFY),
    _wide("wide-einsum-by-hand", _PROJECT + _MASK +
          "        scores = torch.einsum('bhqs,bhks->bhqk', q, k) / math.sqrt(self.k)\n"
          "        if mask is not None:\n"
          "            scores = torch.where(mask, scores, float('-inf'))\n"
          "        out = torch.einsum('bhqk,bhks->bhqs', scores.softmax(-1), v)\n" + _UNIFY),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["mh-split-interleaved", "mh-merge-no-transpose", "mh-scaled-by-model-size", "wide-context-ignored"]
