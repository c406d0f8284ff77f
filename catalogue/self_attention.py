"""Variants of the answers of assignment 01_self_attention."""
# ruff: noqa: F821 - variants use the notebook's names (torch, F, math, attention_weights), as a student's cell does

from catalogue import alternative, mistake

ASSIGNMENT = "01_self_attention"


# ------------------------------------------------------------------ attention_weights: mistakes

@mistake("softmax-over-columns", "attention_weights")
def weights_softmax_dim1(x):
    return F.softmax(torch.bmm(x, x.transpose(1, 2)), dim=1)


@mistake("no-softmax", "attention_weights")
def weights_no_softmax(x):
    return torch.bmm(x, x.transpose(1, 2))


@mistake("scaled", "attention_weights")
def weights_scaled(x):
    return F.softmax(x @ x.transpose(1, 2) / math.sqrt(x.shape[-1]), dim=-1)


@mistake("softmax-over-batch", "attention_weights")
def weights_softmax_batch(x):
    return F.softmax(x @ x.transpose(1, 2), dim=0)


@mistake("normalised-without-exp", "attention_weights")
def weights_sum_normalised(x):
    raw = x @ x.transpose(1, 2)
    return raw / raw.sum(-1, keepdim=True)


@mistake("exp-not-normalised", "attention_weights")
def weights_exp_only(x):
    return torch.exp(torch.bmm(x, x.transpose(1, 2)))


@mistake("wrong-shape", "attention_weights")
def weights_returns_input(x):
    return x


@mistake("first-sequence-only", "attention_weights")
def weights_first_sequence_only(x):
    raw = x[0] @ x[0].T
    return F.softmax(raw, dim=-1).expand(x.shape[0], -1, -1)


@mistake("detached", "attention_weights")
def weights_under_no_grad(x):
    with torch.no_grad():
        return F.softmax(x @ x.transpose(1, 2), dim=-1)


# ------------------------------------------------------------------ basic_self_attention: mistakes

@mistake("weights-transposed", "basic_self_attention")
def output_transposed_weights(x):
    return attention_weights(x).transpose(1, 2) @ x


@mistake("wrong-shape", "basic_self_attention")
def output_returns_weights(x):
    return attention_weights(x)


@mistake("output-from-raw-scores", "basic_self_attention")
def output_raw_scores(x):
    return torch.bmm(x, x.transpose(1, 2)) @ x


@mistake("output-scaled", "basic_self_attention")
def output_fused_with_default_scale(x):
    return F.scaled_dot_product_attention(x, x, x)


@mistake("output-is-input", "basic_self_attention")
def output_returns_the_input(x):
    w = attention_weights(x)
    y = torch.bmm(w, x)  # noqa: F841 - the student's slip: y is computed, x returned
    return x


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


@mistake("first-sequence-only", "basic_self_attention")
def output_first_sequence_only(x):
    w = attention_weights(x[:1])
    return (w @ x[:1]).expand_as(x)


@mistake("t-on-a-batch", "attention_weights")
def weights_dot_t(x):
    return F.softmax(x @ x.T, dim=-1)


@mistake("output-xT-w", "basic_self_attention")
def output_xt_w(x):
    return x.transpose(1, 2) @ attention_weights(x)


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
