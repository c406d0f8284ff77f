"""Judges for assignment 05 (probes in course/checks/transformer_block.py): FeedForward, TransformerBlock and
TransformerClassifier, their parts' roles mapped from the recorded structure whatever they are called; the oracles
are nn.TransformerEncoderLayer (post-norm, ReLU) and F.linear / F.relu."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, partial
from types import MappingProxyType
from typing import NoReturn

import torch
import torch.nn.functional as F
from torch import nn

from course.checks import modules, weights
from course.checks import transformer_block as probes
from course.checks.compare import Mistake, expect_close, fail
from course.checks.evidence import Evidence, fact_key
from course.checks.kinds import Built
from course.checks.modules import MISSING_PART, WRONG_LAYER_SIZE
from course.judges import oracles
from course.judges.kinds import (
    Advice,
    BlockOracle,
    ForwardOracle,
    Simulator,
    against_block,
    block_call,
    expect_block_gradients,
)
from course.judges.variants import Variants, Written, defined, reference_source

FF_NAME = "FeedForward"
BLOCK_NAME = "TransformerBlock"
CLASSIFIER_NAME = "TransformerClassifier"

ATTENTION_LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")

# ---------------------------------------------------------------- mistakes
# Edits change the reference answers of course/transformer_block.py (quoted above each group), run with the student's
# weights in the roles their recorded structure gives (_run_ff, _run_block, _run_classifier); the first declared of two
# that match is named. Mistakes of structure are declared beside the code reading them; those every check names (a
# wrong shape, an error, a detached output, a missing part) are in catalogue/transformer_block.py.

WRITTEN = Variants(__name__, reference="course.transformer_block")
edit = WRITTEN.edit

# FeedForward: self.net = nn.Sequential(nn.Linear(k, hidden), nn.ReLU(), nn.Linear(hidden, k)); return self.net(x)

edit("ff-relu-after-second", FF_NAME, ("nn.Linear(hidden, k))", "nn.Linear(hidden, k), nn.ReLU())"),
     mistake="relu-after-output", says="the ReLU is applied after the second linear layer too (or instead). The "
                                       "output layer is linear: Linear -> ReLU -> Linear, nothing after it.")
edit("ff-gelu", FF_NAME, ("nn.ReLU()", "nn.GELU()"), mistake="gelu",
     says="a GELU is used where a ReLU is asked (the original transformer uses ReLU; GELU came with BERT and GPT).")
edit("ff-gelu-tanh", FF_NAME, ("nn.ReLU()", 'nn.GELU(approximate="tanh")'), mistake="gelu-tanh",
     says="the tanh approximation of GELU is used where a ReLU is asked.")
edit("ff-no-relu", FF_NAME, ("nn.ReLU(), ", ""), mistake="no-relu",
     says="the ReLU is missing: two linear layers in a row collapse into one linear map.")
edit("ff-relu-on-input", FF_NAME, ("(nn.Linear(k, hidden), nn.ReLU(), ", "(nn.ReLU(), nn.Linear(k, hidden), "),
     mistake="relu-on-input", says="the ReLU is applied to the input, before the first linear layer.")
edit("ff-residual-inside", FF_NAME, ("return self.net(x)", "return x + self.net(x)"), mistake="residual-inside-ff",
     says="there is a residual connection inside the feed-forward layer; the block adds it, not FeedForward.")

# TransformerBlock: x = self.norm1(x + self.dropout(self.attention(x, mask=mask)))
#                  return self.norm2(x + self.dropout(self.ff(x)))
ATTENTION_SUBLAYER = "self.norm1(x + self.dropout(self.attention(x, mask=mask)))"
FF_SUBLAYER = "self.norm2(x + self.dropout(self.ff(x)))"

edit("block-mask-not-passed", BLOCK_NAME, ("self.attention(x, mask=mask)", "self.attention(x)"),
     mistake="mask-not-passed", says="the mask is not passed on to the attention: self.attention(x, mask=mask).")
MASK_NOT_PASSED = WRITTEN["mask-not-passed"]
# the dropouts, declared before the wiring: the check builds a block with dropout=1.0 and runs it in training mode,
# where a dropout zeroes all it is given, so the right block gives norm2(norm1(x)), a misplaced dropout zeros or a
# norm of zeros (its bias), which a wiring mistake (no-residual) gives there too
DROPOUT_MISPLACED = ("the dropout is not where it belongs. Built with dropout=1.0 and run in training mode, where a "
                     "dropout zeroes all it is given, the block should give norm2(norm1(x)); yours drops the sum or "
                     "the normalised output instead. Apply nn.Dropout(dropout) to each sub-layer's output before it "
                     "is added: x = norm1(x + dropout(attention(x, mask))).")
edit("block-dropout-after-the-norm", BLOCK_NAME,
     (ATTENTION_SUBLAYER, "self.dropout(self.norm1(x + self.attention(x, mask=mask)))"),
     (FF_SUBLAYER, "self.dropout(self.norm2(x + self.ff(x)))"), mistake="dropout-misplaced", says=DROPOUT_MISPLACED)
edit("block-dropout-on-the-sum", BLOCK_NAME, (FF_SUBLAYER, "self.norm2(self.dropout(x + self.ff(x)))"),
     mistake="dropout-misplaced")
edit("block-dropout-never-applied", BLOCK_NAME,
     (ATTENTION_SUBLAYER, "self.norm1(x + self.attention(x, mask=mask))"), (FF_SUBLAYER, "self.norm2(x + self.ff(x))"),
     mistake="dropout-not-applied", says="the sub-layers' outputs do not pass through nn.Dropout(dropout): built "
     "with dropout=1.0 and run in training mode, the block should drop both and give norm2(norm1(x)). Apply the "
     "dropout to each sub-layer's output before it is added.")
edit("block-prenorm-wiring", BLOCK_NAME,
     (ATTENTION_SUBLAYER, "x + self.dropout(self.attention(self.norm1(x), mask=mask))"),
     (FF_SUBLAYER, "x + self.dropout(self.ff(self.norm2(x)))"), mistake="pre-norm",
     says="this is the pre-norm block x = x + attention(norm1(x)); x = x + ff(norm2(x)). This exercise asks for the "
          "original post-norm block: x = norm1(x + attention(x)); x = norm2(x + ff(x)).")
edit("block-residual-after-norm", BLOCK_NAME,
     (ATTENTION_SUBLAYER, "x + self.norm1(self.dropout(self.attention(x, mask=mask)))"),
     (FF_SUBLAYER, "x + self.norm2(self.dropout(self.ff(x)))"), mistake="residual-after-norm",
     says="the residual is added after the norm: x + norm(sublayer(x)). The norm comes last, around the sum: norm1(x "
          "+ attention(x)).")
edit("block-norm-plus-sublayer", BLOCK_NAME,
     (ATTENTION_SUBLAYER, "self.norm1(x) + self.dropout(self.attention(x, mask=mask))"),
     (FF_SUBLAYER, "self.norm2(x) + self.dropout(self.ff(x))"), mistake="norm-plus-sublayer",
     says="the residual is added after the norm: norm(x) + sublayer(x). Add first, then normalise the sum: norm1(x + "
          "attention(x)).")
edit("block-without-residuals", BLOCK_NAME, ("self.norm1(x + ", "self.norm1("), ("self.norm2(x + ", "self.norm2("),
     mistake="no-residual", says="there is no residual connection: norm1(attention(x)) and norm2(ff(x)) drop the "
                                 "input. Add x back before each norm.")
edit("block-without-attention-residual", BLOCK_NAME, ("self.norm1(x + ", "self.norm1("),
     mistake="no-attention-residual",
     says="the residual connection around the attention is missing: norm1(x + attention(x)), not norm1(attention(x)).")
edit("block-without-ff-residual", BLOCK_NAME, ("self.norm2(x + ", "self.norm2("), mistake="no-ff-residual",
     says="the residual connection around the feed-forward layer is missing: norm2(x + ff(x)), not norm2(ff(x)).")
edit("block-norm1-twice", BLOCK_NAME, ("return self.norm2(", "return self.norm1("), mistake="norm1-twice",
     says="norm1 is used in both places; the second sum goes through norm2.")
edit("block-norms-swapped", BLOCK_NAME, ("x = self.norm1(", "x = self.norm2("),
     ("return self.norm2(", "return self.norm1("), mistake="norms-swapped",
     says="norm1 and norm2 are swapped: norm1 follows the attention, norm2 the feed-forward layer.")
edit("block-ff-on-input", BLOCK_NAME, ("x = self.norm1(", "h = self.norm1("),
     (FF_SUBLAYER, "self.norm2(h + self.dropout(self.ff(x)))"), mistake="ff-on-input",
     says="the feed-forward layer is applied to the block's input x instead of the attention sub-layer's output.")
edit("block-second-residual-from-input", BLOCK_NAME, ("x = self.norm1(", "h = self.norm1("),
     (FF_SUBLAYER, "self.norm2(x + self.dropout(self.ff(h)))"), mistake="second-residual-from-input",
     says="the second residual adds the block's input x instead of the attention sub-layer's output.")
edit("block-without-final-norm", BLOCK_NAME, (FF_SUBLAYER, "x + self.dropout(self.ff(x))"), mistake="no-final-norm",
     says="the final norm2 is missing: x = norm2(x + ff(x)).")
edit("block-sublayers-swapped", BLOCK_NAME, (ATTENTION_SUBLAYER, "self.norm1(x + self.dropout(self.ff(x)))"),
     (FF_SUBLAYER, "self.norm2(x + self.dropout(self.attention(x, mask=mask)))"), mistake="sublayers-swapped",
     says="the two sub-layers are in the wrong order: attention comes first, then the feed-forward layer.")
# TransformerClassifier: x = embedding(tokens) -> [positions] -> each block in turn -> to_classes(x.mean(dim=1))
HEAD = "self.to_classes(x.mean(dim=1))"
LOOP = "        for block in self.blocks:\n            x = block(x, mask=mask)\n"
ONE_MEAN = "average over all positions with .mean(dim=1)."
CROSS_ENTROPY = "Return the raw logits: F.cross_entropy applies log-softmax itself."

edit("clf-sum-pooling", CLASSIFIER_NAME, ("x.mean(dim=1)", "x.sum(dim=1)"), mistake="sum-pooling",
     says="the positions are summed instead of averaged: use .mean(dim=1).")
edit("clf-first-token", CLASSIFIER_NAME, ("x.mean(dim=1)", "x[:, 0]"), mistake="first-token",
     says=f"only the first position is classified; {ONE_MEAN}")
edit("clf-last-token", CLASSIFIER_NAME, ("x.mean(dim=1)", "x[:, -1]"), mistake="last-token",
     says=f"only the last position is classified; {ONE_MEAN}")
edit("clf-max-pooling", CLASSIFIER_NAME, ("x.mean(dim=1)", "x.max(dim=1).values"), mistake="max-pooling",
     says="max-pooling is used; this model averages over the positions with .mean(dim=1).")
edit("clf-softmax", CLASSIFIER_NAME, (HEAD, f"F.softmax({HEAD}, dim=-1)"), mistake="softmax-on-logits",
     says=f"a softmax is applied to the output. {CROSS_ENTROPY}")
edit("clf-log-softmax", CLASSIFIER_NAME, (HEAD, f"F.log_softmax({HEAD}, dim=-1)"), mistake="log-softmax-on-logits",
     says=f"a log-softmax is applied to the output. {CROSS_ENTROPY}")
edit("clf-blocks-skipped", CLASSIFIER_NAME, (LOOP, ""), mistake="blocks-skipped",
     says="the blocks are skipped: the embeddings go straight to the mean.")
edit("clf-first-block-only", CLASSIFIER_NAME, (LOOP, "        x = self.blocks[0](x, mask=mask)\n"),
     mistake="first-block-only", says="only the first block is used; apply every block, in order.")
edit("clf-blocks-not-chained", CLASSIFIER_NAME, ("x = block(x, mask=mask)", "h = block(x, mask=mask)"),
     (HEAD, "self.to_classes(h.mean(dim=1))"), mistake="blocks-not-chained",
     says="each block is applied to the embeddings rather than to the previous block's output: write x = block(x) in "
          "the loop.")


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


LINEAR_COUNT = WRITTEN.mistake(
    "linear-count", "the feed-forward layer does not hold exactly two registered nn.Linear layers (a plain Python list "
                    "does not register them).")
HIDDEN_IGNORED = WRITTEN.mistake(
    "hidden-ignored", "the hidden size is fixed inside FeedForward instead of taken from the `hidden` argument.")
HIDDEN_4X4 = WRITTEN.mistake("hidden-4x4", "the hidden size is 4·4 = 16; it is a multiple of k, ff_mult·k.")
HIDDEN_EQUALS_K = WRITTEN.mistake("hidden-equals-k", "the hidden size equals k; it is ff_mult·k.")
HIDDEN_IGNORES_FF_MULT = WRITTEN.mistake("hidden-ignores-ff-mult",
                                         "the hidden size is 4·k whatever ff_mult is: use ff_mult·k.")
FF_NO_BIAS = WRITTEN.mistake(
    "ff-no-bias", "the feed-forward layer's linear layers have no biases (nn.Linear has them by default).")


def _ff_roles(described: Mapping[str, dict], prefix: str, k: int, hidden: int | None, what: str,
              in_block: bool) -> Named:
    """Roles f1 (k -> hidden), f2 (hidden -> k): the two nn.Linear under prefix; hidden None: any, biases optional."""
    __tracebackhide__ = True
    layers = [m for name, m in described.items() if name.startswith(prefix) and _is_linear(m)]
    if len(layers) != 2:
        _wrong(what, LINEAR_COUNT, f" Found {len(layers)}: Linear(k, hidden), then Linear(hidden, k).")
    first, second = layers
    if (first["in_features"], second["out_features"]) != (k, k) and (second["in_features"], first["out_features"]) \
            == (k, k) and second["out_features"] == first["in_features"]:
        first, second = second, first  # registered in the other order; the sizes tell them apart
    h = first["out_features"]
    sizes = (first["in_features"], h, second["in_features"], second["out_features"])
    if sizes != (k, hidden or h, hidden or h, k):
        # the first hidden size that tells a typical mistake
        mistake = next((m for m, seen in ((HIDDEN_IGNORED, not in_block), (HIDDEN_4X4, in_block and h == 16),
                                          (HIDDEN_EQUALS_K, in_block and h == k),
                                          (HIDDEN_IGNORES_FF_MULT, in_block and h == 4 * k))
                        if seen and hidden not in (None, h)), WRONG_LAYER_SIZE)
        _wrong(f"{what}'s linear layers map {sizes[0]} -> {h} -> {sizes[3]}, not {k} -> {hidden or 'hidden'} -> {k}",
               mistake)
    if hidden is not None and (first.get("bias") is not True or second.get("bias") is not True):
        _wrong(what, FF_NO_BIAS)
    return {"f1w": (f"{first['name']}.weight", (h, k)), "f2w": (f"{second['name']}.weight", (k, h)),
            "f1b": (f"{first['name']}.bias" if first.get("bias") else None, (h,)),
            "f2b": (f"{second['name']}.bias" if second.get("bias") else None, (k,))}


@dataclass(frozen=True)
class Roles:
    """role -> (the recorded parameter playing it or None, its shape); the number of heads and the LayerNorm eps."""

    named: Mapping[str, tuple[str | None, tuple[int, ...]]]
    heads: int = 1
    eps: float = 1e-5


NOT_COURSE_ATTENTION = WRITTEN.mistake(
    "not-course-attention", "the attention is not the course's MultiHeadAttention(k, heads) (from course.multi_head "
                            "import MultiHeadAttention).")
HEADS_NOT_PASSED = WRITTEN.mistake(
    "heads-not-passed", "the attention has another number of heads than the block: pass `heads` on, "
                        "MultiHeadAttention(k, heads).")
WRONG_NORM = WRITTEN.mistake("wrong-norm", "a norm is not nn.LayerNorm(k), which normalises each position's k "
                                           "features.")
SHARED_NORM = WRITTEN.mistake("shared-norm", "norm1 and norm2 are one LayerNorm: each place needs its own gain and "
                                             "bias.")


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
                       f"`{layer}`", NOT_COURSE_ATTENTION)
            named[f"w{role}"] = (f"{a}{layer}.weight", (k, k))
            named[f"b{role}"] = (f"{a}{layer}.bias" if entry.get("bias") else None, (k,))
    heads = fact.get("heads")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1 or k % heads:
        _wrong(f"{what}.attention has no attribute `heads` dividing k={k}", NOT_COURSE_ATTENTION)
    if strict is not None and heads != strict[0]:
        _wrong(f"{what}.attention has {heads} heads, not {strict[0]}", HEADS_NOT_PASSED)
    shared = fact.get("shared_norms") is True
    for i in (1, 2):
        norm = described.get(f"{prefix}norm{1 if shared else i}")
        if not isinstance(norm, dict) or norm.get("type") != "LayerNorm" or norm.get("shape") != [k] \
                or norm.get("affine") is not True:
            shown = f"a {str(norm.get('type'))[:60]}" if isinstance(norm, dict) else "missing"
            _wrong(f"{what}.norm{i} is {shown}, not nn.LayerNorm({k})", WRONG_NORM)
        named[f"n{i}w"], named[f"n{i}b"] = (f"{norm['name']}.weight", (k,)), (f"{norm['name']}.bias", (k,))
    if shared and strict is not None:
        _wrong(what, SHARED_NORM)
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

def _run_ff(variant: Written, v: Mapping[str, torch.Tensor | None], x: torch.Tensor) -> torch.Tensor:
    """The FeedForward variant built for these weights on the meta device (nothing drawn), run with the weights v
    in the roles its own structure gives (as the student's is read: _ff_roles), a missing bias as zeros."""
    module, own = _built_ff(variant, *reversed(v["f1w"].shape))
    given = {name: x.new_zeros(shape) if v[role] is None else v[role] for role, (name, shape) in own.items()}
    return torch.func.functional_call(module, given, (x,), strict=True)


@cache
def _built_ff(variant: Written, k: int, hidden: int) -> tuple[nn.Module, Named]:
    with torch.device("meta"):
        module = variant.run(k, hidden)
    return module, _ff_roles({m["name"]: m for m in weights.describe(module)}, "", k, hidden, variant.name, False)


def _block(roles: Roles, variant: Written | None, ff: Written | None, w: Mapping[str, torch.Tensor], *args: float,
           x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The block with the weights w in these roles on x (b, t, k): the right one (variant and ff None: PyTorch's encoder
    layer), a TransformerBlock variant, or the right block calling the FeedForward variant ff. args: the block's (k,
    heads, ff_mult, dropout); built with dropout=1.0, the check ran it in training mode, where every dropout zeroes
    what it is given: the right block gives norm2(norm1(x))."""
    v, heads, eps, dropout = _values(roles, w), roles.heads, roles.eps, float(args[3]) if len(args) > 3 else 0.0
    if variant is not None or ff is not None:
        return _run_block(variant, ff, v, x, mask, heads, eps, dropout)
    b, t, k = x.shape
    if dropout == 1.0:  # x = norm1(x + dropout(attention(x))): both sub-layers' outputs dropped
        norm = partial(F.layer_norm, normalized_shape=(k,), eps=eps)
        return norm(norm(x, weight=v["n1w"], bias=v["n1b"]), weight=v["n2w"], bias=v["n2b"])
    layer = oracles.encoder_layer(k, heads, v["f1w"].shape[0], eps)
    return torch.func.functional_call(layer, _layer_parameters(v), (x,),
                                      {"src_mask": oracles.torch_mask(mask, b, t, t, heads)})


def _layer_parameters(v: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """nn.TransformerEncoderLayer's parameters, by name, carrying the block's weights by role (_values); a missing bias
    zero (oracles.attention_parameters zeroes the attention's)."""
    params = oracles.attention_parameters(v, prefix="self_attn.")
    for i in (1, 2):
        bias = v[f"f{i}b"] if v[f"f{i}b"] is not None else torch.zeros(v[f"f{i}w"].shape[0])
        params |= {f"norm{i}.weight": v[f"n{i}w"], f"norm{i}.bias": v[f"n{i}b"], f"linear{i}.weight": v[f"f{i}w"],
                   f"linear{i}.bias": bias}
    return params


def _run_block(variant: Written | None, ff: Written | None, v: Mapping[str, torch.Tensor | None], x: torch.Tensor,
               mask: torch.Tensor | None, heads: int, eps: float, dropout: float) -> torch.Tensor:
    """The TransformerBlock variant (None: the reference) calling the FeedForward variant ff (None: the reference),
    run with the weights v by role, a missing bias as zeros (see _built_block)."""
    biases = tuple(v[f"b{r}"] is not None for r in "qkvo")
    module, role_of = _built_block(variant, ff, x.shape[-1], heads, v["f1w"].shape[0], dropout, eps, biases)
    given = {name: x.new_zeros(p.shape) if v[role_of[name]] is None else v[role_of[name]]
             for name, p in module.named_parameters()}
    return torch.func.functional_call(module, given, (x,), {"mask": mask}, strict=True)


@cache
def _built_block(variant: Written | None, ff: Written | None, k: int, heads: int, hidden: int, dropout: float,
                 eps: float, biases: tuple[bool, ...]) -> tuple[nn.Module, dict[str, str]]:
    """The block variant (None: the reference) calling the FeedForward variant ff (None: the reference), defined as a
    notebook cell defines them and built on the meta device (nothing drawn) as the student's was, its feed-forward
    layer of hidden size `hidden`, a bias on each attention projection whose role has one (biases: q, k, v, o),
    the norms' eps the student's; and the role of each of its parameters. A fresh module trains, so a dropout of 1.0
    zeroes what it is given, as in the check's training-mode run."""
    code = variant.code if variant else reference_source(WRITTEN.reference, BLOCK_NAME)
    with torch.device("meta"):
        module = defined(code, BLOCK_NAME, WRITTEN.reference, () if ff is None else ((ff.code, FF_NAME),))(
            k, heads, 1, dropout)
        module.ff = type(module.ff)(k, hidden)  # its FeedForward (the reference's or ff) of the student's hidden size
        for layer, has_bias in zip(ATTENTION_LAYERS, biases, strict=True):
            linear = module.attention.get_submodule(layer)
            if has_bias and linear.bias is None:
                linear.bias = nn.Parameter(torch.empty(k))
    module.norm1.eps = module.norm2.eps = eps
    role_of = {f"attention.{layer}.{p}": f"{p[0]}{r}" for layer, r in zip(ATTENTION_LAYERS, "qkvo", strict=True)
               for p in ("weight", "bias")}
    role_of |= {f"norm{i}.{p}": f"n{i}{p[0]}" for i in (1, 2) for p in ("weight", "bias")}
    ff_roles = _ff_roles({m["name"]: m for m in weights.describe(module)}, "ff.", k, None, "ff", in_block=True)
    return module, role_of | {name: role for role, (name, _) in ff_roles.items()}


def _block_specs(mask: torch.Tensor | None) -> list[tuple[Mistake | None, Written | None, Written | None]]:
    """(mistake or None for the right block, TransformerBlock variant, FeedForward variant) of every computation a
    block check recognises (without a mask, not passing it changes nothing); a FeedForward mistake seen in the block
    keeps its id, with the advice to fix FeedForward first."""
    specs: list[tuple[Mistake | None, Written | None, Written | None]] = [(None, None, None)]
    specs += [(w.mistake, w, None) for w in WRITTEN.of(BLOCK_NAME) if mask is not None or w.mistake != MASK_NOT_PASSED]
    return specs + [(Mistake(w.mistake.id, f"its feed-forward layer is wrong: {w.mistake.explanation} Make your "
                             f"{FF_NAME} pass its tests (exercise 1) first."), None, w) for w in WRITTEN.of(FF_NAME)]


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


def _ff_of(roles: Roles, variant: Written | None, w: Mapping[str, torch.Tensor], *_: int, x: torch.Tensor
           ) -> torch.Tensor:
    """The feed-forward layer with the weights w in these roles: the right one (variant None), or the variant."""
    v = _values(roles, w)
    if variant is None:
        return F.linear(F.relu(F.linear(x, v["f1w"], v["f1b"])), v["f2w"], v["f2b"])
    return _run_ff(variant, v, x)


def _ff_oracle(roles: Roles) -> ForwardOracle:
    return ForwardOracle(FF_NAME, "the feed-forward layer", lambda ev, built: _ff_weights(ev, built)[1],
                         partial(_ff_of, roles, None), "F.linear(F.relu(F.linear(x, W1, b1)), W2, b2)",
                         lambda *_, **__: [(w.mistake, partial(_ff_of, roles, w)) for w in WRITTEN.of(FF_NAME)],
                         advice=Advice(otherwise=_FF_HINT, hint=_FF_HINT))


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

def _encoder_block_weights(ev: Evidence, built: Built, strict: bool) -> tuple[Roles, dict[str, torch.Tensor]]:
    """The block's roles (strictly or tolerantly) and the weights loaded."""
    __tracebackhide__ = True
    k, heads, *ff_mult = built.args
    what = block_call(built, BLOCK_NAME)
    modules.built(ev, built.key, what)
    roles = _block_roles(ev, built.key, "", k, what, (heads, ff_mult[0] if ff_mult else 4) if strict else None)
    return roles, _recreated(ev, built, what, roles)


def _counted_block(ev: Evidence, built: Built) -> tuple[Roles, dict[str, torch.Tensor]]:
    """The block's roles, strictly, and the weights loaded; nothing else has parameters."""
    __tracebackhide__ = True
    roles, w = _encoder_block_weights(ev, built, strict=True)
    k, _, *ff_mult = built.args
    hidden = (ff_mult[0] if ff_mult else 4) * k
    modules.expect_parameter_count(ev, built.key, block_call(built, BLOCK_NAME),
                                   (4 * k * k + k) + 4 * k + (2 * k * hidden + hidden + k),
                                   f"attention (4k² + k), two LayerNorms (4k) and the feed-forward layer "
                                   f"(2·k·{hidden} + {hidden} + k) make", "Is an extra layer registered?")
    return roles, w


def _encoder_block_oracle(roles: Roles) -> ForwardOracle:
    return ForwardOracle(
        BLOCK_NAME, "a transformer block", lambda ev, built: _encoder_block_weights(ev, built, strict=False)[1],
        partial(_block, roles, None, None), "nn.TransformerEncoderLayer with the same weights",
        lambda *_, x, mask=None: [(m, partial(_block, roles, variant, ff))
                                  for m, variant, ff in _block_specs(mask)[1:]],
        advice=Advice(
            otherwise=_BLOCK_HINT,
            hint=lambda x, mask=None: _BLOCK_HINT + ("" if mask is None else
                                                     " forward's signature is forward(self, x, mask=None)."),
            shape_hints=lambda x, mask=None: {(len(x), x.shape[1], x.shape[1]):
                                              "That is the shape of attention weights: return the block's output."}))


#: the exercise's structure exactly (the course's MultiHeadAttention with the block's heads, two separate
#: nn.LayerNorm(k), hidden size ff_mult·k, biases); COUNTED: and nothing else with parameters; TOLERANT: any real
#: block the judge can recompute (nn.MultiheadAttention, shared norms, any hidden size and number of heads)
STRICT = BlockOracle(partial(_encoder_block_weights, strict=True), _encoder_block_oracle)
COUNTED = BlockOracle(_counted_block, _encoder_block_oracle)
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
              gradients=partial(expect_block_gradients, tolerate_mistakes=True),
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
              then=_permutes_outputs, gradients=partial(expect_block_gradients, tolerate_mistakes=True),
              passed="A loss on the output sends autograd's gradient to every parameter and to the input; and without "
                     "positions, permuting the input positions permutes the outputs the same way.")


# ================================================================ TransformerClassifier

#: the roles of a classifier's own parameters (e: the embedding; ow, ob: the output layer), and its blocks' roles
Classifier = tuple[Roles, tuple[Roles, ...]]


BLOCKS_NOT_REGISTERED = WRITTEN.mistake(
    "blocks-not-registered", "the blocks are kept in a plain Python list, which does not register them: use "
                             "nn.ModuleList or nn.Sequential.")
REPEATED_BLOCK = WRITTEN.mistake(
    "repeated-block", "one block is repeated depth times ([TransformerBlock(...)] * depth): create a new block for "
                      "each layer.")
BLOCK_COUNT = WRITTEN.mistake("block-count", "the classifier does not hold depth separate blocks.")
WRONG_EMBEDDING = WRITTEN.mistake("wrong-embedding", "the classifier should have one nn.Embedding(vocab_size, k).")
NO_OUTPUT_LAYER = WRITTEN.mistake("no-output-layer",
                                  "the classifier has no nn.Linear(k, num_classes) after the blocks.")
CLASSIFIER_FF_MULT = WRITTEN.mistake(
    "classifier-ff-mult", "the classifier builds its blocks with another ff_mult: the exercise asks for "
                          "TransformerBlock(k, heads) with its default ff_mult, a hidden size of 4·k.")


def _block_names(ev: Evidence, key: str, what: str) -> list[str]:
    """The names of the classifier's registered blocks, in order (probes.block_facts)."""
    __tracebackhide__ = True
    facts = ev.facts.get(fact_key(key, "blocks"))
    if not isinstance(facts, list):
        fail(f"The test recorded nothing about the blocks of {what}: the check did not run to the end.")
    return [f["name"] for f in facts if isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"]]


def _classifier_values(ev: Evidence, built: Built) -> tuple[Classifier, dict[str, torch.Tensor]]:
    """The classifier's roles: embedding, blocks in order, output layer; the weights loaded."""
    __tracebackhide__ = True
    key, (vocab, k, _, depth, classes) = built.key, built.args
    what = block_call(built, CLASSIFIER_NAME)
    modules.built(ev, key, what)
    names = _block_names(ev, key, what)
    if len(names) != depth:
        _wrong(what, {0: BLOCKS_NOT_REGISTERED, 1: REPEATED_BLOCK}.get(len(names), BLOCK_COUNT),
               f" Found {len(names)} registered blocks, depth={depth}.")
    described = modules.described(ev, key).values()
    embeddings = [m for m in described if m.get("type") == "Embedding"]
    if len(embeddings) != 1 or (embeddings[0].get("num_embeddings"), embeddings[0].get("embedding_dim")) != (vocab, k):
        shown = [f"Embedding({m.get('num_embeddings')}, {m.get('embedding_dim')})" for m in embeddings[:4]]
        _wrong(what, WRONG_EMBEDDING, f" Here nn.Embedding({vocab}, {k}); found {shown}.")
    outputs = [m for m in described if _is_linear(m) and not any(m["name"].startswith(n + ".") for n in names)
               and (m["in_features"], m["out_features"]) == (k, classes)]
    if not outputs:
        _wrong(what, NO_OUTPUT_LAYER, f" Here nn.Linear({k}, {classes}), outside the blocks.")
    blocks = tuple(_block_roles(ev, key, f"{n}.", k, f"{what}'s block {n}", None) for n in names)
    out = outputs[-1]["name"]
    own = Roles(MappingProxyType({"e": (f"{embeddings[0]['name']}.weight", (vocab, k)),
                                  "ow": (f"{out}.weight", (classes, k)),
                                  "ob": (f"{out}.bias" if outputs[-1].get("bias") else None, (classes,))}))
    return (own, blocks), _recreated(ev, built, what, *blocks, own)


def _counted_classifier(ev: Evidence, built: Built) -> tuple[Classifier, dict[str, torch.Tensor]]:
    """The classifier's roles and the weights loaded (_classifier_values); nothing else has parameters."""
    __tracebackhide__ = True
    found, what = _classifier_values(ev, built), block_call(built, CLASSIFIER_NAME)
    vocab, k, _, depth, classes = built.args
    per_block = modules.parameter_count(ev, built.key, _block_names(ev, built.key, what)[0] + ".")
    modules.expect_parameter_count(ev, built.key, what, vocab * k + depth * per_block + k * classes + classes,
                                   f"the embedding ({vocab * k}), {depth} blocks ({per_block} each) and the output "
                                   f"layer ({k * classes + classes}) make", "Is an extra layer registered?")
    return found


def _default_ff_classifier(ev: Evidence, built: Built) -> tuple[Classifier, dict[str, torch.Tensor]]:
    """The classifier's roles and weights (_classifier_values), its blocks' hidden sizes 4·k, TransformerBlock's
    default ff_mult: one that is another multiple of k was given another ff_mult (k itself and 16 are left to the
    block's own checks: FeedForward mistakes give them)."""
    __tracebackhide__ = True
    parts, w = _classifier_values(ev, built)
    k, hidden = built.args[1], [block.named["f1w"][1][0] for block in parts[1]]
    other = next((h for h in hidden if h != 4 * k and h % k == 0 and h not in (k, 16)), None)
    if other is not None:
        _wrong(f"{block_call(built, CLASSIFIER_NAME)}'s blocks have a hidden size of {other} = {other // k}·k",
               CLASSIFIER_FF_MULT)
    return parts, w


def _classifier_logits(parts: Classifier, block: Written | None, ff: Written | None, head: Written | None,
                       w: Mapping[str, torch.Tensor], *_: int, tokens: torch.Tensor) -> torch.Tensor:
    """The logits (b, classes) for tokens (b, t), the blocks computed as (block, ff) say (see _block): the right
    classifier (head None: embedding, each block in turn, mean over positions, linear), or the TransformerClassifier
    variant head calling those blocks."""
    own, blocks = parts
    v = _values(own, w)
    computed = [partial(_block, roles, block, ff, w) for roles in blocks]
    if head is not None:
        return _run_classifier(head, computed, v, tokens)
    x = F.embedding(tokens, v["e"])  # (b, t, k)
    for run in computed:
        x = run(x=x)
    return F.linear(x.mean(dim=1), v["ow"], v["ob"])  # (b, classes)


class _Computed(nn.Module):
    """A block as the judge computes it with the student's weights, run(x=..., mask=...): a variant's block."""

    def __init__(self, run: Callable[..., torch.Tensor]):
        super().__init__()
        self.run = run

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.run(x=x, mask=mask)


def _run_classifier(head: Written, computed: list[Callable], v: Mapping[str, torch.Tensor | None],
                    tokens: torch.Tensor) -> torch.Tensor:
    """The TransformerClassifier variant built on the meta device (nothing drawn), its blocks the computed ones, run
    with the embedding and output layer v by role (a missing output bias as zeros)."""
    (vocab, k), classes = v["e"].shape, v["ow"].shape[0]
    with torch.device("meta"):
        module = head.run(vocab, k, 1, len(computed), classes)
    module.blocks = nn.ModuleList(_Computed(run) for run in computed)
    bias = v["ob"] if v["ob"] is not None else v["ow"].new_zeros(classes)
    return torch.func.functional_call(module, {"embedding.weight": v["e"], "to_classes.weight": v["ow"],
                                               "to_classes.bias": bias}, (tokens,), strict=True)


def _heads(parts: Classifier, block: Written | None, ff: Written | None, *_: int,
           **__: torch.Tensor) -> list[tuple[Mistake, Simulator]]:
    """The classifier's typical mistakes on blocks computed as (block, ff) say."""
    return [(w.mistake, partial(_classifier_logits, parts, block, ff, w)) for w in WRITTEN.of(CLASSIFIER_NAME)]


def _classifier_oracles(parts: Classifier) -> list[ForwardOracle]:
    """The right head (its typical mistakes simulated) on the blocks computed as each block check recognises
    (_block_specs: those checks name a block's mistakes), the logits (b, classes)."""
    own, blocks = parts
    classes, head = own.named["ow"][1][0], (None, own.named["ow"][0], own.named["ob"][0])
    hint = f"Make your {BLOCK_NAME} pass its tests first (exercise 2): a block cut off from autograd stops it."
    return [ForwardOracle(
        CLASSIFIER_NAME, "a transformer classifier", lambda *_: {},
        partial(_classifier_logits, parts, block, ff, None), "the classifier's layers",
        partial(_heads, parts, block, ff), shape=lambda tokens: (len(tokens), classes), advice=Advice(
            otherwise=_CLASSIFIER_HINT, hint=_CLASSIFIER_HINT,
            shape_hints=lambda tokens: {
                (tokens.shape[1], classes): "There is one row per position: the mean runs over the batch (dim=0), not "
                                            "the positions.",
                (*tokens.shape, classes): "There is one row per position: average over the positions (dim=1) before "
                                          "the output layer."},
            gradient_hints={name: hint for r in (own, *blocks) for name, _ in r.named.values() if name not in head}))
        for _, block, ff in _block_specs(None)]


#: the check's classifier (counted: and nothing else with parameters), its blocks computed as the student's compute
#: them (the right head on them judged, gradients too)
CLASSIFIER = BlockOracle(_classifier_values, _classifier_oracles)
COUNTED_CLASSIFIER = BlockOracle(_counted_classifier, _classifier_oracles)

against_block(probes.transformer_classifier_structure, COUNTED_CLASSIFIER,
              passed="An embedding, depth separate registered blocks and a linear output layer; logits of shape "
                     "(b, num_classes).")
against_block(probes.transformer_classifier_oracle, BlockOracle(_default_ff_classifier, _classifier_oracles),
              passed="Random weights and tokens: embedding -> your blocks in order -> mean over positions -> "
                     "linear (the blocks recomputed with nn.TransformerEncoderLayer, or as your TransformerBlock "
                     "computes them).")
against_block(probes.transformer_classifier_order_blind, CLASSIFIER,
              passed="Without positions the whole classifier is permutation invariant: shuffled tokens give the "
                     "same logits.")
against_block(probes.transformer_classifier_gradients, CLASSIFIER, gradients=expect_block_gradients,
              passed="A small batch: the logits are the classifier's, and a loss on them sends autograd's gradient to "
                     "the embedding, every block and the output layer.")
