"""Judges for assignment 05 (probes in course/checks/transformer_block.py): FeedForward, TransformerBlock and
TransformerClassifier, their parts' roles mapped from the recorded structure whatever they are called; the oracles
are nn.TransformerEncoderLayer (post-norm, ReLU) and F.linear / F.relu."""

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import NoReturn

import torch
import torch.nn.functional as F

from course.checks import modules
from course.checks import transformer_block as probes
from course.checks.compare import Mistake, expect_close, fail
from course.checks.evidence import Evidence, fact_key
from course.checks.kinds import Built
from course.checks.modules import MISSING_PART, WRONG_LAYER_SIZE
from course.judges import mistakes, oracles
from course.judges.kinds import (
    BlockOracle,
    ForwardOracle,
    Simulator,
    against_block,
    block_call,
)

FF_NAME = "FeedForward"
BLOCK_NAME = "TransformerBlock"
CLASSIFIER_NAME = "TransformerClassifier"

ATTENTION_LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")
#: the keywords of oracles.attention_parameters
ATTENTION_ROLES = ("wq", "wk", "wv", "wo", "bo", "bq", "bk", "bv")

# ---------------------------------------------------------------- mistakes

M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/transformer_block.txt
#: each id also names the feed-forward computation in _ff; "relu" is the right one
FF_MISTAKES = (M["relu-after-output"], M["gelu"], M["gelu-tanh"], M["no-relu"], M["relu-on-input"],
               M["residual-inside-ff"])
#: the block's wiring mistakes; each id also names the computation in _block_forward
LAYOUT_MISTAKES = (M["pre-norm"], M["residual-after-norm"], M["norm-plus-sublayer"], M["no-residual"],
                   M["no-attention-residual"], M["no-ff-residual"], M["norm1-twice"], M["norms-swapped"],
                   M["ff-on-input"], M["second-residual-from-input"], M["no-final-norm"], M["sublayers-swapped"])
#: each id also names the computation in _head; "mean" is the right one
CLASSIFIER_MISTAKES = (M["sum-pooling"], M["first-token"], M["last-token"], M["max-pooling"], M["softmax-on-logits"],
                       M["log-softmax-on-logits"], M["blocks-skipped"], M["first-block-only"], M["blocks-not-chained"])


_FF_HINT = "forward should compute second(relu(first(x))): Linear(k, hidden), ReLU, Linear(hidden, k)."
_BLOCK_HINT = "forward should compute x = norm1(x + attention(x, mask=mask)), then x = norm2(x + ff(x))."
_CLASSIFIER_HINT = ("forward should compute embedding(tokens) -> each block in order -> .mean(dim=1) -> the linear "
                    "layer.")


# ================================================================ structure and roles

def _wrong(what: str, mistake: Mistake, found: str = "") -> NoReturn:
    """Fail naming the mistake: what is wrong (e.g. "TransformerBlock(8, 2)"), its explanation, what was found."""
    __tracebackhide__ = True
    fail(f"{what}: {mistake.explanation}{found}", mistake=mistake)


def _is_linear(entry: dict | None) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("in_features"), int) \
        and isinstance(entry.get("out_features"), int)


Named = dict[str, tuple[str | None, tuple[int, ...]]]  # role -> (the parameter playing it or None, its shape)


def _ff_roles(described: Mapping[str, dict], prefix: str, k: int, hidden: int | None, what: str,
              in_block: bool) -> Named:
    """Roles f1 (k -> hidden), f2 (hidden -> k): the two nn.Linear under prefix; hidden None: any, biases optional."""
    __tracebackhide__ = True
    layers = [m for name, m in described.items() if name.startswith(prefix) and _is_linear(m)]
    if len(layers) != 2:
        _wrong(what, M["linear-count"], f" Found {len(layers)}: Linear(k, hidden), then Linear(hidden, k).")
    first, second = layers
    if (first["in_features"], second["out_features"]) != (k, k) and (second["in_features"], first["out_features"]) \
            == (k, k) and second["out_features"] == first["in_features"]:
        first, second = second, first  # registered in the other order; the sizes tell them apart
    h = first["out_features"]
    sizes = (first["in_features"], h, second["in_features"], second["out_features"])
    if sizes != (k, hidden or h, hidden or h, k):
        # the first hidden size that tells a typical mistake
        mistake = next((m for m, seen in ((M["hidden-ignored"], not in_block), (M["hidden-4x4"], in_block and h == 16),
                                          (M["hidden-equals-k"], in_block and h == k),
                                          (M["hidden-ignores-ff-mult"], in_block and h == 4 * k))
                        if seen and hidden not in (None, h)), WRONG_LAYER_SIZE)
        _wrong(f"{what}'s linear layers map {sizes[0]} -> {h} -> {sizes[3]}, not {k} -> {hidden or 'hidden'} -> {k}",
               mistake)
    if hidden is not None and (first.get("bias") is not True or second.get("bias") is not True):
        _wrong(what, M["ff-no-bias"])
    return {"f1w": (f"{first['name']}.weight", (h, k)), "f2w": (f"{second['name']}.weight", (k, h)),
            "f1b": (f"{first['name']}.bias" if first.get("bias") else None, (h,)),
            "f2b": (f"{second['name']}.bias" if second.get("bias") else None, (k,))}


@dataclass(frozen=True)
class Roles:
    """role -> (the recorded parameter playing it or None, its shape); the number of heads and the LayerNorm eps."""

    named: Mapping[str, tuple[str | None, tuple[int, ...]]]
    heads: int = 1
    eps: float = 1e-5


def _block_roles(ev: Evidence, key: str, prefix: str, k: int, what: str,
                 strict: tuple[int, int] | None) -> Roles:
    """Map the block under prefix ("" for the module itself, "blocks.0." ...) to roles. strict = (heads, ff_mult):
    the exercise's structure exactly; None: any real block the judge can recompute (see STRICT and TOLERANT)."""
    __tracebackhide__ = True
    facts = ev.facts.get(fact_key(key, "blocks"))
    fact = next((f for f in facts if isinstance(f, dict) and f.get("name") == prefix.removesuffix(".")), None) \
        if isinstance(facts, list) else None
    parts = fact.get("parts") if isinstance(fact, dict) else None
    if not isinstance(parts, dict):
        fail(f"The test recorded nothing about the parts of {what}: the check did not run to the end.")
    for part in probes.BLOCK_PARTS:
        if not isinstance(parts.get(part), str):
            _wrong(f"{what} has no module attribute `{part}`", MISSING_PART,
                   " The parts are self.attention, self.norm1, self.norm2 and self.ff.")
    described = modules.described(ev, key)
    a = f"{prefix}attention."
    if strict is None and (described.get(a[:-1]) or {}).get("type") == "MultiheadAttention":
        named: Named = {"wqkv": (f"{a}in_proj_weight", (3 * k, k)), "bqkv": (f"{a}in_proj_bias", (3 * k,)),
                        "wo": (f"{a}out_proj.weight", (k, k)), "bo": (f"{a}out_proj.bias", (k,))}
    else:
        named = {}
        for layer, role in zip(ATTENTION_LAYERS, "qkvo", strict=True):
            entry = described.get(a + layer)
            if not _is_linear(entry) or (entry["in_features"], entry["out_features"]) != (k, k):
                _wrong(f"{what}.attention is a {str(parts['attention'])[:60]} without a {k} -> {k} nn.Linear "
                       f"`{layer}`", M["not-course-attention"])
            named[f"w{role}"] = (f"{a}{layer}.weight", (k, k))
            named[f"b{role}"] = (f"{a}{layer}.bias" if entry.get("bias") else None, (k,))
    heads = fact.get("heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1 or k % heads:
        _wrong(f"{what}.attention has no attribute `heads` dividing k={k}", M["not-course-attention"])
    if strict is not None and heads != strict[0]:
        _wrong(f"{what}.attention has {heads} heads, not {strict[0]}", M["heads-not-passed"])
    shared = fact.get("shared_norms") is True
    for i in (1, 2):
        norm = described.get(f"{prefix}norm{1 if shared else i}")
        if not isinstance(norm, dict) or norm.get("type") != "LayerNorm" or norm.get("shape") != [k] \
                or norm.get("affine") is not True:
            shown = f"a {str(norm.get('type'))[:60]}" if isinstance(norm, dict) else "missing"
            _wrong(f"{what}.norm{i} is {shown}, not nn.LayerNorm({k})", M["wrong-norm"])
        named[f"n{i}w"], named[f"n{i}b"] = (f"{norm['name']}.weight", (k,)), (f"{norm['name']}.bias", (k,))
    if shared and strict is not None:
        _wrong(what, M["shared-norm"])
    eps = described[f"{prefix}norm1"].get("eps")
    named |= _ff_roles(described, f"{prefix}ff.", k, None if strict is None else strict[1] * k, f"{what}.ff", True)
    return Roles(MappingProxyType(named), heads, eps if isinstance(eps, float) and 0 < eps <= 1e-2 else 1e-5)


def _recreated(ev: Evidence, built: Built, what: str, *roles: Roles) -> dict[str, torch.Tensor]:
    """name -> the value the probe loaded, for every parameter a role names (recreated here, never read)."""
    __tracebackhide__ = True
    shapes = {name: shape for r in roles for name, shape in r.named.values() if name is not None}
    return modules.expect_parameters(ev, built.key, what, shapes, built.seed, hint=modules.PARTS_HINT)


def _values(roles: Roles, w: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """role -> tensor (w by parameter name); nn.MultiheadAttention's packed projections split into q, k and v."""
    v = {role: (w[name] if name is not None else None) for role, (name, _) in roles.named.items()}
    if "wqkv" in v:
        v["wq"], v["wk"], v["wv"] = v.pop("wqkv").chunk(3)
        bqkv = v.pop("bqkv")
        v["bq"], v["bk"], v["bv"] = bqkv.chunk(3) if bqkv is not None else (None, None, None)
    return v


# ================================================================ oracles and typical mistakes

def _ff(v: Mapping[str, torch.Tensor | None], x: torch.Tensor, kind: str = "relu") -> torch.Tensor:
    """The feed-forward layer with these weights: the right one ("relu") or a typical mistake."""
    a = F.linear(F.relu(x) if kind == "relu-on-input" else x, v["f1w"], v["f1b"])
    if kind in ("gelu", "gelu-tanh"):
        a = F.gelu(a, approximate="tanh" if kind == "gelu-tanh" else "none")
    elif kind not in ("no-relu", "relu-on-input"):
        a = F.relu(a)
    y = F.linear(a, v["f2w"], v["f2b"])
    if kind == "relu-after-output":
        return F.relu(y)
    return x + y if kind == "residual-inside-ff" else y


def _block_forward(v: Mapping[str, torch.Tensor | None], x: torch.Tensor, mask: torch.Tensor | None, heads: int,
                   eps: float, layout: str = "post", ff: str = "relu", oracle: bool = True,
                   dropped: bool = False) -> torch.Tensor:
    """The block with these weights on x (b, t, k): the right one (layout "post", ff "relu", PyTorch's encoder
    layer), or a typical mistake (layout: a LAYOUT_MISTAKES id or "mask-not-passed"; ff: a FF_MISTAKES id).
    oracle=False writes the right block and the pre-norm one out with torch.nn.functional too (for tests).
    dropped: built with dropout=1.0 and run in training mode, where every dropout zeroes what it is given (layout:
    one of DROPOUT_LAYOUTS for a misplaced or missing dropout)."""
    if layout == M["mask-not-passed"].id:
        layout, mask = "post", None
    b, t, k = x.shape
    if dropped and layout != "dropout-not-applied":
        n1 = partial(F.layer_norm, normalized_shape=(k,), weight=v["n1w"], bias=v["n1b"], eps=eps)
        n2 = partial(F.layer_norm, normalized_shape=(k,), weight=v["n2w"], bias=v["n2b"], eps=eps)
        if layout == "dropout-after-norm":  # x = dropout(norm1(x + attention(x))): the output dropped whole
            return torch.zeros_like(x)
        if layout == "dropout-on-sum":  # x = norm1(dropout(x + attention(x))): a norm of zeros is its bias
            return n2(torch.zeros_like(x))
        return n2(n1(x))  # x = norm1(x + dropout(attention(x))): both sub-layers' outputs dropped
    if layout in DROPOUT_LAYOUTS:
        layout = "post"
    attention = {role: v[role] for role in ATTENTION_ROLES}
    if oracle and ff == "relu" and layout in ("post", "pre-norm"):
        params = oracles.layer_parameters({"self_attn": attention}, [(v["n1w"], v["n1b"]), (v["n2w"], v["n2b"])],
                                          (v["f1w"], v["f1b"], v["f2w"], v["f2b"]))
        layer = oracles.encoder_layer(k, heads, v["f1w"].shape[0], eps, layout == "pre-norm")
        return torch.func.functional_call(layer, params, (x,), {"src_mask": oracles.torch_mask(mask, b, t, t, heads)})
    a = partial(oracles.attention, context=None, mask=mask, heads=heads, **attention)
    f = partial(_ff, v, kind=ff)
    n1 = partial(F.layer_norm, normalized_shape=(k,), weight=v["n1w"], bias=v["n1b"], eps=eps)
    n2 = partial(F.layer_norm, normalized_shape=(k,), weight=v["n2w"], bias=v["n2b"], eps=eps)
    # the attention sub-layer's output g, then the block's output
    g = {"pre-norm": lambda: x + a(n1(x)), "residual-after-norm": lambda: x + n1(a(x)),
         "norm-plus-sublayer": lambda: n1(x) + a(x), "no-residual": lambda: n1(a(x)),
         "no-attention-residual": lambda: n1(a(x)), "sublayers-swapped": lambda: n1(x + f(x)),
         "norms-swapped": lambda: n2(x + a(x))}.get(layout, lambda: n1(x + a(x)))()
    return {"pre-norm": lambda: g + f(n2(g)), "residual-after-norm": lambda: g + n2(f(g)),
            "norm-plus-sublayer": lambda: n2(g) + f(g), "no-residual": lambda: n2(f(g)),
            "no-ff-residual": lambda: n2(f(g)), "sublayers-swapped": lambda: n2(g + a(g)),
            "norms-swapped": lambda: n1(g + f(g)), "norm1-twice": lambda: n1(g + f(g)),
            "ff-on-input": lambda: n2(g + f(x)), "second-residual-from-input": lambda: n2(x + f(g)),
            "no-final-norm": lambda: g + f(g)}.get(layout, lambda: n2(g + f(g)))()


#: where a dropout can sit instead of on each sub-layer's output before it is added (see _block_forward)
DROPOUT_LAYOUTS = ("dropout-after-norm", "dropout-on-sum", "dropout-not-applied")


def _block_specs(mask: torch.Tensor | None) -> list[tuple[Mistake | None, str, str]]:
    """(mistake or None for the right block, layout, ff) of every computation a block check recognises; a
    FeedForward mistake seen in the block keeps its id, with the advice to fix FeedForward first."""
    specs: list[tuple[Mistake | None, str, str]] = [(None, "post", "relu")]
    if mask is not None:
        specs.append((M["mask-not-passed"], M["mask-not-passed"].id, "relu"))
    specs += [(m, m.id, "relu") for m in LAYOUT_MISTAKES]
    specs += [(M["dropout-misplaced"], "dropout-after-norm", "relu"),
              (M["dropout-misplaced"], "dropout-on-sum", "relu"),
              (M["dropout-not-applied"], "dropout-not-applied", "relu")]
    return specs + [(Mistake(m.id, f"its feed-forward layer is wrong: {m.explanation} Make your {FF_NAME} pass its "
                             "tests (exercise 1) first."), "post", m.id) for m in FF_MISTAKES]


# ================================================================ FeedForward

def _ff_weights(ev: Evidence, built: Built) -> tuple[Roles, dict[str, torch.Tensor]]:
    """FeedForward's roles (k -> hidden -> k, biases, nothing else) and the weights loaded: the check's, or the
    notebook's example in the hand-worked module."""
    __tracebackhide__ = True
    k, hidden = built.args
    what = block_call(built, FF_NAME)
    modules.built(ev, built.key, what)
    roles = Roles(MappingProxyType(_ff_roles(modules.described(ev, built.key), "", k, hidden, what, False)))
    modules.expect_parameter_count(ev, built.key, what, 2 * k * hidden + hidden + k,
                                   "two linear layers with biases make 2·k·hidden + hidden + k", "")
    if built == probes.FF_HAND:
        hand = probes.hand_values()
        return roles, {name: hand[role] for role, (name, _) in roles.named.items()}
    return roles, _recreated(ev, built, what, roles)


def _ff_of(roles: Roles, kind: str, w: Mapping[str, torch.Tensor], *_: int, x: torch.Tensor) -> torch.Tensor:
    """The feed-forward layer with the weights w in these roles, computed as kind says (see _ff)."""
    return _ff(_values(roles, w), x, kind)


def _ff_oracle(roles: Roles) -> ForwardOracle:
    return ForwardOracle(FF_NAME, "the feed-forward layer", lambda ev, built: _ff_weights(ev, built)[1],
                         partial(_ff_of, roles, "relu"), "F.linear(F.relu(F.linear(x, W1, b1)), W2, b2)",
                         lambda *_, **__: [(m, partial(_ff_of, roles, m.id)) for m in FF_MISTAKES],
                         hint=lambda **_: _FF_HINT, otherwise=_FF_HINT)


FF = BlockOracle(_ff_weights, _ff_oracle)


def _left_to_random(y: torch.Tensor) -> bool:
    """-1 everywhere: no ReLU and a ReLU on the input both give it on the hand example; the random case tells them
    apart. Any other output must be the right one, a typical mistake named."""
    return torch.allclose(y, torch.full_like(y, -1.0))


against_block(probes.feed_forward_structure, FF, claim="has the right layers", accept=_left_to_random,
              passed="Two linear layers, k -> hidden -> k with biases, nothing else with parameters; and the |x| - 1 "
                     "example.")
against_block(probes.feed_forward_oracle, FF,
              passed="Random weights and inputs of several shapes against F.linear(F.relu(F.linear(x, W1, b1)), W2, "
                     "b2); and each position is transformed alone: changing one position changes that output only.")


# ================================================================ TransformerBlock

def _encoder_block_weights(ev: Evidence, built: Built, strict: bool,
                           counted: bool = False) -> tuple[Roles, dict[str, torch.Tensor]]:
    """The block's roles (strictly or tolerantly; counted: nothing else has parameters) and the weights loaded."""
    __tracebackhide__ = True
    k, heads, *ff_mult = built.args
    what = block_call(built, BLOCK_NAME)
    modules.built(ev, built.key, what)
    mult = ff_mult[0] if ff_mult else 4
    roles = _block_roles(ev, built.key, "", k, what, (heads, mult) if strict else None)
    w = _recreated(ev, built, what, roles)
    hidden = mult * k
    if counted:
        modules.expect_parameter_count(ev, built.key, what, (4 * k * k + k) + 4 * k + (2 * k * hidden + hidden + k),
                                       f"attention (4k² + k), two LayerNorms (4k) and the feed-forward layer "
                                       f"(2·k·{hidden} + {hidden} + k) make", "Is an extra layer registered?")
    return roles, w


def _block_of(roles: Roles, layout: str, ff: str, w: Mapping[str, torch.Tensor], *args: float, x: torch.Tensor,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """The block with the weights w in these roles, computed as (layout, ff) say (see _block_forward); args: the
    block's (k, heads, ff_mult, dropout), a dropout of 1.0 meaning the check ran it in training mode."""
    dropped = len(args) > 3 and args[3] == 1.0
    return _block_forward(_values(roles, w), x, mask, roles.heads, roles.eps, layout, ff, dropped=dropped)


def _encoder_block_oracle(roles: Roles) -> ForwardOracle:
    return ForwardOracle(
        BLOCK_NAME, "a transformer block", lambda ev, built: _encoder_block_weights(ev, built, strict=False)[1],
        partial(_block_of, roles, "post", "relu"), "nn.TransformerEncoderLayer with the same weights",
        lambda *_, x, mask=None: [(m, partial(_block_of, roles, layout, ff))
                                  for m, layout, ff in _block_specs(mask)[1:]],
        hint=lambda x, mask=None: _BLOCK_HINT + ("" if mask is None else
                                                 " forward's signature is forward(self, x, mask=None)."),
        shape_hints=lambda x, mask=None: {(len(x), x.shape[1], x.shape[1]):
                                          "That is the shape of attention weights: return the block's output."},
        otherwise=_BLOCK_HINT)


#: the exercise's structure exactly (the course's MultiHeadAttention with the block's heads, two separate
#: nn.LayerNorm(k), hidden size ff_mult·k, biases); COUNTED: and nothing else with parameters; TOLERANT: any real
#: block the judge can recompute (nn.MultiheadAttention, shared norms, any hidden size and number of heads)
STRICT = BlockOracle(partial(_encoder_block_weights, strict=True), _encoder_block_oracle)
COUNTED = BlockOracle(partial(_encoder_block_weights, strict=True, counted=True), _encoder_block_oracle)
TOLERANT = BlockOracle(partial(_encoder_block_weights, strict=False), _encoder_block_oracle)

against_block(probes.transformer_block_structure, COUNTED, claim="has the right parts",
              passed="Attention (the course's MultiHeadAttention), two separate LayerNorms and a feed-forward layer "
                     "with hidden size ff_mult·k, all registered.")


def _fresh_norms(ev: Evidence, built: Built) -> tuple[Roles, dict[str, torch.Tensor]]:
    """A tolerant block's roles and weights, its norms as the probe reset them: gain 1, bias 0."""
    roles, w = TOLERANT.structure(ev, built)
    return roles, w | {roles.named[f"n{i}{p}"][0]: torch.full((8,), float(p == "w")) for i in (1, 2) for p in "wb"}


def _normalised(y: torch.Tensor) -> bool:
    """Each position of y (b, t, k) has mean 0 and variance 1 over its k features."""
    mean, var = y.mean(dim=-1), y.var(dim=-1, unbiased=False)
    return torch.allclose(mean, torch.zeros_like(mean), atol=1e-4) \
        and torch.allclose(var, torch.ones_like(var), atol=1e-3)


against_block(probes.transformer_block_normalised, BlockOracle(_fresh_norms, _encoder_block_oracle), claim="runs",
              accept=_normalised, passed="A post-norm block ends with a fresh LayerNorm: each output position has "
                                         "mean 0 and variance 1.")


against_block(probes.transformer_block_small_case, TOLERANT,
              passed="k=4, 2 heads, x (2, 3, 4): the block against nn.TransformerEncoderLayer with the same weights, "
                     "without and with a causal mask (which must change the output); a loss on the output sends "
                     "autograd's gradient to x and to every parameter.")
against_block(probes.transformer_block_oracle, STRICT,
              passed="Random weights and inputs of several shapes against nn.TransformerEncoderLayer with the same "
                     "weights; with dropout=1.0 in training mode, norm2(norm1(x)).")
against_block(probes.transformer_block_mask, STRICT,
              passed="A causal mask (t, t) and a padding mask (b, 1, t), True = allowed, reach the attention.")


def _permutes_outputs(ev: Evidence) -> None:
    """Without positions, permuting the input positions permutes the outputs the same way."""
    __tracebackhide__ = True
    plain, permuted = probes.transformer_block_gradients.runs[1].cases
    expect_close(ev.tensors[permuted.key], ev.tensors[plain.key][:, list(probes.PERMUTATION)], device=ev.device,
                 what=f"{BLOCK_NAME}.forward on permuted positions", case=permuted.label,
                 otherwise="Every part of the block is permutation equivariant, so the block must be too. Does "
                           "something mix positions outside the attention (a norm or a mean over dim=1)?")


against_block(probes.transformer_block_gradients, TOLERANT, claim="is permutation equivariant",
              then=_permutes_outputs,
              passed="A loss on the output sends autograd's gradient to every parameter and to the input; and without "
                     "positions, permuting the input positions permutes the outputs the same way.")


# ================================================================ TransformerClassifier

#: the roles of a classifier's own parameters (e: the embedding; ow, ob: the output layer), and its blocks' roles
Classifier = tuple[Roles, tuple[Roles, ...]]


def _classifier_values(ev: Evidence, built: Built, counted: bool = False,
                       default_ff: bool = False) -> tuple[Classifier, dict[str, torch.Tensor]]:
    """The classifier's roles: embedding, blocks in order, output layer (counted: nothing else; default_ff: blocks
    built with the default ff_mult, see _expect_default_ff_mult); the weights loaded."""
    __tracebackhide__ = True
    key, (vocab, k, _, depth, classes) = built.key, built.args
    what = block_call(built, CLASSIFIER_NAME)
    modules.built(ev, key, what)
    facts = ev.facts.get(fact_key(key, "blocks"))
    if not isinstance(facts, list):
        fail(f"The test recorded nothing about the blocks of {what}: the check did not run to the end.")
    names = [f["name"] for f in facts if isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"]]
    if len(names) != depth:
        _wrong(what, {0: M["blocks-not-registered"], 1: M["repeated-block"]}.get(len(names), M["block-count"]),
               f" Found {len(names)} registered blocks, depth={depth}.")
    described = modules.described(ev, key).values()
    embeddings = [m for m in described if m.get("type") == "Embedding"]
    if len(embeddings) != 1 or (embeddings[0].get("num_embeddings"), embeddings[0].get("embedding_dim")) != (vocab, k):
        shown = [f"Embedding({m.get('num_embeddings')}, {m.get('embedding_dim')})" for m in embeddings[:4]]
        _wrong(what, M["wrong-embedding"], f" Here nn.Embedding({vocab}, {k}); found {shown}.")
    outputs = [m for m in described if _is_linear(m) and not any(m["name"].startswith(n + ".") for n in names)
               and (m["in_features"], m["out_features"]) == (k, classes)]
    if not outputs:
        _wrong(what, M["no-output-layer"], f" Here nn.Linear({k}, {classes}), outside the blocks.")
    blocks = tuple(_block_roles(ev, key, f"{n}.", k, f"{what}'s block {n}", None) for n in names)
    if default_ff:
        _expect_default_ff_mult(what, k, [block.named["f1w"][1][0] for block in blocks])
    out = outputs[-1]["name"]
    own = Roles(MappingProxyType({"e": (f"{embeddings[0]['name']}.weight", (vocab, k)),
                                  "ow": (f"{out}.weight", (classes, k)),
                                  "ob": (f"{out}.bias" if outputs[-1].get("bias") else None, (classes,))}))
    w = _recreated(ev, built, what, *blocks, own)
    if counted:
        per_block = modules.parameter_count(ev, key, names[0] + ".")
        modules.expect_parameter_count(ev, key, what, vocab * k + depth * per_block + k * classes + classes,
                                       f"the embedding ({vocab * k}), {depth} blocks ({per_block} each) and the "
                                       f"output layer ({k * classes + classes}) make", "Is an extra layer registered?")
    return (own, blocks), w


def _expect_default_ff_mult(what: str, k: int, hidden: list[int]) -> None:
    """The blocks' hidden sizes are 4·k, TransformerBlock's default ff_mult: one that is another multiple of k was
    given another ff_mult (k itself and 16 are left to the block's own checks: FeedForward mistakes give them)."""
    __tracebackhide__ = True
    other = next((h for h in hidden if h != 4 * k and h % k == 0 and h not in (k, 16)), None)
    if other is not None:
        _wrong(f"{what}'s blocks have a hidden size of {other} = {other // k}·k", M["classifier-ff-mult"])


def _classifier_logits(parts: Classifier, layout: str, ff: str, head: str, w: Mapping[str, torch.Tensor],
                       *_: int, tokens: torch.Tensor) -> torch.Tensor:
    """The logits (b, classes) for tokens (b, t), the blocks computed as (layout, ff) (see _block_forward): head
    "mean" is the right head, any other a CLASSIFIER_MISTAKES id."""
    own, blocks = parts
    v = _values(own, w)
    x = h = F.embedding(tokens, v["e"])  # (b, t, k)
    for roles in {"blocks-skipped": (), "first-block-only": blocks[:1]}.get(head, blocks):
        h = _block_forward(_values(roles, w), x if head == "blocks-not-chained" else h, None, roles.heads, roles.eps,
                           layout, ff)
    pooled = {"sum-pooling": lambda: h.sum(dim=1), "first-token": lambda: h[:, 0], "last-token": lambda: h[:, -1],
              "max-pooling": lambda: h.amax(dim=1)}.get(head, lambda: h.mean(dim=1))()  # (b, k)
    logits = F.linear(pooled, v["ow"], v["ob"])  # (b, classes)
    return {"softmax-on-logits": lambda: F.softmax(logits, dim=-1),
            "log-softmax-on-logits": lambda: F.log_softmax(logits, dim=-1)}.get(head, lambda: logits)()


def _heads(parts: Classifier, layout: str, ff: str, *_: int, **__: torch.Tensor) -> list[tuple[Mistake, Simulator]]:
    """The classifier's typical head mistakes on blocks computed as (layout, ff) say."""
    return [(m, partial(_classifier_logits, parts, layout, ff, m.id)) for m in CLASSIFIER_MISTAKES]


def _classifier_oracles(parts: Classifier) -> list[ForwardOracle]:
    """The right head (its typical mistakes simulated) on the blocks computed as each block check recognises
    (_block_specs: those checks name a block's mistakes), the logits (b, classes)."""
    own, blocks = parts
    classes, head = own.named["ow"][1][0], (None, own.named["ow"][0], own.named["ob"][0])
    hint = f"Make your {BLOCK_NAME} pass its tests first (exercise 2): a block cut off from autograd stops it."
    return [ForwardOracle(
        CLASSIFIER_NAME, "a transformer classifier", lambda *_: {},
        partial(_classifier_logits, parts, layout, ff, "mean"), "the classifier's layers",
        partial(_heads, parts, layout, ff), hint=lambda **_: _CLASSIFIER_HINT,
        shape=lambda tokens: (len(tokens), classes), otherwise=_CLASSIFIER_HINT,
        shape_hints=lambda tokens: {
            (tokens.shape[1], classes): "There is one row per position: the mean runs over the batch (dim=0), not the "
                                        "positions.",
            (*tokens.shape, classes): "There is one row per position: average over the positions (dim=1) before the "
                                      "output layer."},
        gradient_hints={name: hint for r in (own, *blocks) for name, _ in r.named.values() if name not in head})
        for _, layout, ff in _block_specs(None)]


#: the check's classifier (counted: and nothing else with parameters), its blocks computed as the student's compute
#: them (the right head on them judged, gradients too)
CLASSIFIER = BlockOracle(_classifier_values, _classifier_oracles, tolerant=False)
COUNTED_CLASSIFIER = BlockOracle(partial(_classifier_values, counted=True), _classifier_oracles, tolerant=False)

against_block(probes.transformer_classifier_structure, COUNTED_CLASSIFIER,
              passed="An embedding, depth separate registered blocks and a linear output layer; logits of shape "
                     "(b, num_classes).")
against_block(probes.transformer_classifier_oracle, BlockOracle(partial(_classifier_values, default_ff=True),
                                                                  _classifier_oracles, tolerant=False),
              passed="Random weights and tokens: embedding -> your blocks in order -> mean over positions -> "
                     "linear (the blocks recomputed with nn.TransformerEncoderLayer, or as your TransformerBlock "
                     "computes them).")
against_block(probes.transformer_classifier_order_blind, CLASSIFIER,
              passed="Without positions the whole classifier is permutation invariant: shuffled tokens give the "
                     "same logits.")
against_block(probes.transformer_classifier_gradients, CLASSIFIER,
              passed="A small batch: the logits are the classifier's, and a loss on them sends autograd's gradient to "
                     "the embedding, every block and the output layer.")
