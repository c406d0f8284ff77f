"""Variants of the answers of assignment 01_self_attention."""

from autograder.catalogue import Variant

A = "01_self_attention"


def _weights(name: str, body: str, diagnosis: str | None = None) -> Variant:
    code = f"def attention_weights(x):\n{body}"
    return Variant(A, name, "attention_weights", code, diagnosis)


def _output(name: str, body: str, diagnosis: str | None = None) -> Variant:
    code = f"def basic_self_attention(x):\n{body}"
    return Variant(A, name, "basic_self_attention", code, diagnosis)


VARIANTS = [
    # mistakes
    _weights("weights-softmax-dim1", "    return F.softmax(torch.bmm(x, x.transpose(1, 2)), dim=1)\n",
             "each column sums to 1 instead of each row"),
    _weights("weights-no-softmax", "    return torch.bmm(x, x.transpose(1, 2))\n", "the softmax is missing"),
    _weights("weights-scaled", "    return F.softmax(x @ x.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)\n",
             "divided by √k"),
    _weights("weights-softmax-batch", "    return F.softmax(x @ x.transpose(1, 2), dim=0)\n", "batch dimension"),
    _weights("weights-sum-normalised", "    raw = x @ x.transpose(1, 2)\n    return raw / raw.sum(-1, keepdim=True)\n",
             "without exponentiating"),
    _weights("weights-returns-input", "    return x\n", "return the (t, t) weights"),
    _output("output-transposed-weights", "    return attention_weights(x).transpose(1, 2) @ x\n",
            "the weights are transposed"),
    _output("output-returns-weights", "    return attention_weights(x)\n", "return the weighted sum"),
    _output("output-raw-scores", "    return torch.bmm(x, x.transpose(1, 2)) @ x\n", "apply the softmax"),
    _output("output-detached", "    return (attention_weights(x) @ x).detach()\n", "cut off from autograd"),
    # correct, written differently
    _weights("weights-einsum", "    return torch.einsum('btk,bsk->bts', x, x).softmax(dim=-1)\n"),
    _weights("weights-matmul-exp",
             "    raw = torch.matmul(x, x.mT)\n    e = torch.exp(raw - raw.amax(dim=2, keepdim=True))\n"
             "    return e / e.sum(dim=2, keepdim=True)\n"),
    _output("output-fused", "    return F.scaled_dot_product_attention(x, x, x, scale=1.0)\n"),
    _output("output-einsum", "    w = attention_weights(x)\n    return torch.einsum('bts,bsk->btk', w, x)\n"),
]

# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ["weights-softmax-dim1", "output-raw-scores"]
