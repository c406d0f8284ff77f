"""Variants of the answers of assignment 01_self_attention: the mistakes its judges write as code (named by running
them, course/judges/self_attention.py), the mistakes every check names (a wrong shape, an error, a detached output),
and correct answers written differently."""
# ruff: noqa: F821 - variants use the notebook's names (torch, F, math, attention_weights), as a student's cell does

from catalogue import alternative, mistake, written
from course.judges.self_attention import WRITTEN

ASSIGNMENT = "01_self_attention"

written(WRITTEN)


# ------------------------------------------------------------------ mistakes every check names

@mistake("wrong-shape", "attention_weights")
def weights_returns_input(x):
    return x


@mistake("detached", "attention_weights")
def weights_under_no_grad(x):
    with torch.no_grad():
        return F.softmax(x @ x.transpose(1, 2), dim=-1)


@mistake("wrong-shape", "basic_self_attention")
def output_returns_weights(x):
    return attention_weights(x)


@mistake("not-implemented", "basic_self_attention")
def output_left_unfinished(x):
    # YOUR CODE HERE
    raise NotImplementedError()


@mistake("detached", "basic_self_attention")
def output_detached(x):
    return (attention_weights(x) @ x).detach()


@mistake("detached", "basic_self_attention")
def output_under_no_grad(x):
    with torch.no_grad():
        return attention_weights(x) @ x


@mistake("t-on-a-batch", "attention_weights")
def weights_dot_t(x):
    return F.softmax(x @ x.T, dim=-1)


# ------------------------------------------------------------------ correct, written differently

@alternative("attention_weights")
def weights_einsum(x):
    return torch.einsum("btk,bsk->bts", x, x).softmax(dim=-1)


@alternative("attention_weights")
def weights_matmul_exp(x):
    raw = torch.matmul(x, x.mT)
    e = torch.exp(raw - raw.amax(dim=2, keepdim=True))
    return e / e.sum(dim=2, keepdim=True)


@alternative("basic_self_attention")
def output_fused(x):
    return F.scaled_dot_product_attention(x, x, x, scale=1.0)


@alternative("basic_self_attention")
def output_einsum(x):
    w = attention_weights(x)
    return torch.einsum("bts,bsk->btk", w, x)


# one mistake per answer cell for samples/sample-mistakes, chosen so that none cancels another
SAMPLE_MISTAKES = ("weights-softmax-dim1", "output-raw-scores")
