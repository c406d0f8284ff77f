"""Checks for assignment 05: FeedForward, TransformerBlock and TransformerClassifier."""

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.compare import close, expect_close, expect_tensor, fail, randn, run, tolerance

FF_NAME = "FeedForward"
BLOCK_NAME = "TransformerBlock"
CLASSIFIER_NAME = "TransformerClassifier"

# (b, t, k, heads, ff_mult): batch > 1, odd lengths, head size != k, a non-default ff_mult
BLOCK_SHAPES = ((2, 5, 12, 3, 4), (3, 7, 8, 2, 2), (1, 4, 6, 1, 4), (2, 1, 8, 4, 3))
# (b, t, vocab, k, heads, depth, classes)
CLASSIFIER_SHAPES = ((4, 6, 11, 8, 2, 2, 3), (3, 5, 7, 12, 3, 1, 2), (2, 9, 5, 6, 2, 3, 4))


# ---------------------------------------------------------------- finding the parts, by type and order

def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def _ff_linears(ff: nn.Module, k: int, hidden: int, what: str, in_block: bool = False) -> tuple[nn.Linear, nn.Linear]:
    """The two nn.Linear layers of a feed-forward module, in the order they were registered."""
    __tracebackhide__ = True
    layers = _linears(ff)
    if len(layers) != 2:
        fail(f"{what} should hold exactly two nn.Linear layers (k -> hidden, then hidden -> k), registered as "
             f"attributes or in an nn.Sequential; found {len(layers)}. Layers kept in a plain Python list are not "
             "registered.")
    first, second = layers
    if (first.in_features, first.out_features, second.in_features, second.out_features) != (k, hidden, hidden, k):
        hint = ""
        if not in_block:
            if first.out_features != hidden:
                hint = " The hidden size is the `hidden` argument, not a size fixed inside FeedForward."
        elif first.out_features == 16 and hidden != 16:
            hint = " A hidden size of 16 is 4·4: the hidden size is a multiple of k, ff_mult·k."
        elif first.out_features == k and hidden != k:
            hint = " The hidden size equals k: multiply k by ff_mult."
        elif first.out_features == 4 * k and hidden != 4 * k:
            hint = " The hidden size is 4·k whatever ff_mult is: use ff_mult·k."
        fail(f"{what}'s linear layers map {first.in_features} -> {first.out_features} -> {second.out_features}; "
             f"with k={k} they should map {k} -> {hidden} -> {k} (the first layer registered first).{hint}")
    if first.bias is None or second.bias is None:
        fail(f"{what}'s linear layers should have biases (nn.Linear's default).")
    return first, second


def _randomize(module: nn.Module, seed: int) -> None:
    """Distinct, well-spread weights in every parameter, so that swapped or shared parts show."""
    with torch.no_grad():
        for i, (name, p) in enumerate(sorted(module.named_parameters())):
            noise = randn(*p.shape, seed=seed + i, device=p.device)
            if p.dim() > 1:
                p.copy_(noise / math.sqrt(p.shape[-1]))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.3 * noise)


# ---------------------------------------------------------------- FeedForward

def _ff_mistakes(x: torch.Tensor, w1: nn.Linear, w2: nn.Linear) -> dict[str, torch.Tensor]:
    a = w1(x)
    return {
        "the ReLU is applied after the second linear layer too (or instead). The output layer is linear: "
        "Linear -> ReLU -> Linear, nothing after it.": F.relu(w2(F.relu(a))),
        "a GELU is used where a ReLU is asked (the original transformer uses ReLU; GELU came with BERT and GPT).":
            w2(F.gelu(a)),
        "the tanh approximation of GELU is used where a ReLU is asked.": w2(F.gelu(a, approximate="tanh")),
        "the ReLU is missing: two linear layers in a row collapse into one linear map.": w2(a),
        "the ReLU is applied to the input, before the first linear layer.": w2(w1(F.relu(x))),
        "there is a residual connection inside the feed-forward layer; the block adds it, not FeedForward.":
            x + w2(F.relu(a)),
    }


def _ff_oracle(x: torch.Tensor, w1: nn.Linear, w2: nn.Linear) -> torch.Tensor:
    return F.linear(F.relu(F.linear(x, w1.weight, w1.bias)), w2.weight, w2.bias)


_FF_HINT = "forward should compute second(relu(first(x))): Linear(k, hidden), ReLU, Linear(hidden, k)."


def feed_forward_structure(FeedForward: Callable, k: int = 6, hidden: int = 10) -> None:
    """Two linear layers, k -> hidden -> k with biases, and nothing else with parameters."""
    __tracebackhide__ = True
    ff = run(FeedForward, k, hidden, what=f"{FF_NAME}({k}, {hidden})")
    if not isinstance(ff, nn.Module):
        fail(f"{FF_NAME}({k}, {hidden}) should create an nn.Module, but gave a {type(ff).__name__}.")
    _ff_linears(ff, k, hidden, f"{FF_NAME}({k}, {hidden})")
    count = sum(p.numel() for p in ff.parameters())
    if count != 2 * k * hidden + hidden + k:
        fail(f"{FF_NAME}({k}, {hidden}) has {count} parameters; two linear layers with biases make "
             f"2·k·hidden + hidden + k = {2 * k * hidden + hidden + k}.")


def feed_forward_by_hand(FeedForward: Callable) -> None:
    """k=1, hidden=2, weights set by hand so that FF(x) = relu(x) + relu(-x) - 1 = |x| - 1."""
    __tracebackhide__ = True
    ff = run(FeedForward, 1, 2, what=f"{FF_NAME}(1, 2)")
    first, second = _ff_linears(ff, 1, 2, f"{FF_NAME}(1, 2)")
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[1.0], [-1.0]]))
        first.bias.zero_()
        second.weight.copy_(torch.tensor([[1.0, 1.0]]))
        second.bias.fill_(-1.0)
    x = torch.tensor([[[-2.0], [0.5], [3.0]]])  # (1, 3, 1)
    with torch.no_grad():
        y = run(ff, x.clone(), what=f"{FF_NAME}.forward(x)", hint=_FF_HINT)
        mistakes = _ff_mistakes(x, first, second)
    expect_tensor(y, what=f"{FF_NAME}.forward(x)", shape=(1, 3, 1), device="cpu")
    expect_close(y, torch.tensor([[[1.0], [-0.5], [2.0]]]), what=f"{FF_NAME}.forward(x)", mistakes=mistakes,
                 otherwise=_FF_HINT, case="first = [[1], [-1]], second = [[1, 1]], bias -1, so FF(x) = |x| - 1; "
                                       "x = -2, 0.5, 3")


def feed_forward_matches_oracle(FeedForward: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and inputs of several shapes against relu-then-linear written with torch.nn.functional."""
    __tracebackhide__ = True
    for i, (b, t, k, hidden) in enumerate([(2, 5, 6, 10), (3, 1, 4, 16), (1, 7, 8, 32)]):
        ff = run(FeedForward, k, hidden, what=f"{FF_NAME}({k}, {hidden})")
        first, second = _ff_linears(ff, k, hidden, f"{FF_NAME}({k}, {hidden})")
        ff = ff.to(device)
        _randomize(ff, seed=1000 + 20 * i)
        x = randn(b, t, k, seed=1100 + i, device=device)
        with torch.no_grad():
            y = run(ff, x.clone(), what=f"{FF_NAME}.forward(x)", hint=_FF_HINT)
            expected = _ff_oracle(x, first, second)
            mistakes = _ff_mistakes(x, first, second)
        expect_tensor(y, what=f"{FF_NAME}.forward(x)", shape=(b, t, k), device=device)
        expect_close(y, expected, what=f"{FF_NAME}.forward(x)", mistakes=mistakes, otherwise=_FF_HINT,
                     case=f"x of shape {(b, t, k)}, hidden={hidden}")


def feed_forward_is_position_wise(FeedForward: Callable, device: torch.device | str = "cpu") -> None:
    """Each position is transformed alone: changing one position changes that output only."""
    __tracebackhide__ = True
    torch.manual_seed(1200)
    ff = run(FeedForward, 4, 8, what=f"{FF_NAME}(4, 8)").to(device)
    x = randn(2, 5, 4, seed=1201, device=device)
    x2 = x.clone()
    x2[:, 3] += 1.0
    with torch.no_grad():
        y = run(ff, x, what=f"{FF_NAME}.forward(x)", hint=_FF_HINT)
        y2 = run(ff, x2, what=f"{FF_NAME}.forward(x)", hint=_FF_HINT)
    expect_tensor(y, what=f"{FF_NAME}.forward(x)", shape=(2, 5, 4), device=device)
    keep = [0, 1, 2, 4]
    expect_close(y2[:, keep], y[:, keep], what=f"{FF_NAME}.forward at the positions that did not change",
                 otherwise="Changing position 3 of the input changed other positions' outputs. The feed-forward "
                           "layer acts on the last dimension only; nothing should mix positions.",
                 case="position 3 of x changed")


# ---------------------------------------------------------------- TransformerBlock

def _block_parts(block: nn.Module, k: int, heads: int, ff_mult: int) -> dict[str, nn.Module]:
    """The student's attention projections, norms and feed-forward layers, checked for type and size."""
    __tracebackhide__ = True
    what = f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})"
    for name in ("attention", "norm1", "norm2", "ff"):
        if not isinstance(getattr(block, name, None), nn.Module):
            fail(f"{what} has no module attribute `{name}`. __init__ should create self.attention, self.norm1, "
                 "self.norm2 and self.ff.")
    attention = block.attention
    parts: dict[str, nn.Module] = {}
    for name in ("to_queries", "to_keys", "to_values", "unify_heads"):
        layer = getattr(attention, name, None)
        if not isinstance(layer, nn.Linear) or (layer.in_features, layer.out_features) != (k, k):
            fail(f"{what}.attention should be the course's MultiHeadAttention(k, heads) "
                 "(from course.multi_head import MultiHeadAttention); it is a "
                 f"{type(attention).__name__} without a {k} -> {k} nn.Linear `{name}`.")
        parts[name] = layer
    if getattr(attention, "heads", heads) != heads:
        fail(f"{what}.attention has {attention.heads} heads; pass the block's `heads` on: MultiHeadAttention(k, heads).")
    for name in ("norm1", "norm2"):
        norm = getattr(block, name)
        if not isinstance(norm, nn.LayerNorm) or tuple(norm.normalized_shape) != (k,) or not norm.elementwise_affine:
            fail(f"{what}.{name} should be nn.LayerNorm(k) = nn.LayerNorm({k}), which normalises each position's "
                 f"{k} features; it is {norm}.")
        parts[name] = norm
    if block.norm1 is block.norm2:
        fail(f"{what}.norm1 and norm2 are the same LayerNorm. Each place needs its own, with its own gain and "
             "bias: create two nn.LayerNorm(k).")
    parts["first"], parts["second"] = _ff_linears(block.ff, k, ff_mult * k, f"{what}.ff", in_block=True)
    return parts


def block_structure(TransformerBlock: Callable) -> None:
    """Attention, two separate LayerNorms and a feed-forward layer with hidden size ff_mult·k, all registered."""
    __tracebackhide__ = True
    for k, heads, ff_mult in ((12, 3, None), (8, 2, 2)):
        args = (k, heads) if ff_mult is None else (k, heads, ff_mult)
        what = f"{BLOCK_NAME}{args}"
        block = run(TransformerBlock, *args, what=what)
        if not isinstance(block, nn.Module):
            fail(f"{what} should create an nn.Module, but gave a {type(block).__name__}.")
        ff_mult = 4 if ff_mult is None else ff_mult
        _block_parts(block, k, heads, ff_mult)
        hidden = ff_mult * k
        expected = (4 * k * k + k) + 4 * k + (2 * k * hidden + hidden + k)
        count = sum(p.numel() for p in block.parameters())
        if count != expected:
            fail(f"{what} has {count} parameters; attention (4k² + k), two LayerNorms (4k) and the feed-forward "
                 f"layer (2·k·{hidden} + {hidden} + k) make {expected}. Is an extra layer registered?")


def _mha_oracle(parts: dict[str, nn.Module], k: int, heads: int) -> nn.MultiheadAttention:
    mha = nn.MultiheadAttention(k, heads, batch_first=True).to(parts["to_queries"].weight.device)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([parts[n].weight for n in ("to_queries", "to_keys", "to_values")]))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(parts["unify_heads"].weight)
        mha.out_proj.bias.copy_(parts["unify_heads"].bias)
    return mha.eval()


def _torch_mask(mask: torch.Tensor | None, b: int, t: int, heads: int) -> torch.Tensor | None:
    """Our mask (True = allowed, broadcastable to (b, t, t)) as PyTorch's (b·heads, t, t) (True = NOT allowed)."""
    if mask is None:
        return None
    full = mask.expand(b, t, t)  # (b, t, t)
    return ~full.unsqueeze(1).expand(b, heads, t, t).reshape(b * heads, t, t)  # (b·h, t, t)


def _block_oracle(parts: dict[str, nn.Module], x: torch.Tensor, heads: int, ff_mult: int,
                  mask: torch.Tensor | None) -> torch.Tensor:
    """nn.TransformerEncoderLayer (post-norm, ReLU, no dropout) with the student's weights copied in."""
    b, t, k = x.shape
    layer = nn.TransformerEncoderLayer(k, heads, ff_mult * k, dropout=0.0, batch_first=True,
                                       layer_norm_eps=parts["norm1"].eps).to(x.device)
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([parts[n].weight for n in ("to_queries", "to_keys", "to_values")]))
        layer.self_attn.in_proj_bias.zero_()
        layer.self_attn.out_proj.weight.copy_(parts["unify_heads"].weight)
        layer.self_attn.out_proj.bias.copy_(parts["unify_heads"].bias)
        for ours, theirs in (("first", layer.linear1), ("second", layer.linear2), ("norm1", layer.norm1),
                             ("norm2", layer.norm2)):
            theirs.weight.copy_(parts[ours].weight)
            theirs.bias.copy_(parts[ours].bias)
        layer.eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return layer(x, src_mask=_torch_mask(mask, b, t, heads))


def _block_mistakes(parts: dict[str, nn.Module], x: torch.Tensor, heads: int,
                    mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    b, t, k = x.shape
    mha = _mha_oracle(parts, k, heads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def attn(z: torch.Tensor, m: torch.Tensor | None = mask) -> torch.Tensor:
            return mha(z, z, z, attn_mask=_torch_mask(m, b, t, heads), need_weights=False)[0]

        def ff(z: torch.Tensor) -> torch.Tensor:
            return _ff_oracle(z, parts["first"], parts["second"])

        def n1(z: torch.Tensor) -> torch.Tensor:
            return parts["norm1"](z)

        def n2(z: torch.Tensor) -> torch.Tensor:
            return parts["norm2"](z)

        h = n1(x + attn(x))
        mistakes = {
            "this is the pre-norm block x = x + attention(norm1(x)); x = x + ff(norm2(x)). This exercise asks for "
            "the original post-norm block: x = norm1(x + attention(x)); x = norm2(x + ff(x)).":
                (lambda g: g + ff(n2(g)))(x + attn(n1(x))),
            "the residual is added after the norm: x + norm(sublayer(x)). The norm comes last, around the sum: "
            "norm1(x + attention(x)).": (lambda g: g + n2(ff(g)))(x + n1(attn(x))),
            "the residual is added after the norm: norm(x) + sublayer(x). Add first, then normalise the sum: "
            "norm1(x + attention(x)).": (lambda g: n2(g) + ff(g))(n1(x) + attn(x)),
            "there is no residual connection: norm1(attention(x)) and norm2(ff(x)) drop the input. Add x back "
            "before each norm.": n2(ff(n1(attn(x)))),
            "the residual connection around the attention is missing: norm1(x + attention(x)), not "
            "norm1(attention(x)).": (lambda g: n2(g + ff(g)))(n1(attn(x))),
            "the residual connection around the feed-forward layer is missing: norm2(x + ff(x)), not "
            "norm2(ff(x)).": n2(ff(h)),
            "norm1 is used in both places; the second sum goes through norm2.": n1(h + ff(h)),
            "norm1 and norm2 are swapped: norm1 follows the attention, norm2 the feed-forward layer.":
                (lambda g: n1(g + ff(g)))(n2(x + attn(x))),
            "the feed-forward layer is applied to the block's input x instead of the attention sub-layer's output.":
                n2(h + ff(x)),
            "the second residual adds the block's input x instead of the attention sub-layer's output.":
                n2(x + ff(h)),
            "the final norm2 is missing: x = norm2(x + ff(x)).": h + ff(h),
            "the two sub-layers are in the wrong order: attention comes first, then the feed-forward layer.":
                (lambda g: n2(g + attn(g)))(n1(x + ff(x))),
        }
        if mask is not None:
            mistakes = {
                "the mask is not passed on to the attention: self.attention(x, mask=mask).":
                    (lambda g: n2(g + ff(g)))(n1(x + attn(x, None))),
                **mistakes,
            }
    return mistakes


_BLOCK_HINT = "forward should compute x = norm1(x + attention(x, mask=mask)), then x = norm2(x + ff(x))."


def _built_block(TransformerBlock: Callable, k: int, heads: int, ff_mult: int, seed: int,
                 device: torch.device | str) -> tuple[nn.Module, dict[str, nn.Module]]:
    __tracebackhide__ = True
    block = run(TransformerBlock, k, heads, ff_mult, what=f"{BLOCK_NAME}({k}, {heads}, ff_mult={ff_mult})")
    parts = _block_parts(block, k, heads, ff_mult)
    block = block.to(device).eval()
    _randomize(block, seed)
    return block, parts


def _compare_block(block: nn.Module, parts: dict[str, nn.Module], x: torch.Tensor, heads: int, ff_mult: int,
                   mask: torch.Tensor | None, case: str) -> None:
    __tracebackhide__ = True
    with torch.no_grad():
        ff_out = run(block.ff, x.clone(), what=f"{BLOCK_NAME}.ff(x)")
        ff_expected = _ff_oracle(x, parts["first"], parts["second"])
    if not close(ff_out, ff_expected, **tolerance(x.device)):
        fail(f"{BLOCK_NAME}.ff does not compute Linear -> ReLU -> Linear, so the block cannot match PyTorch's "
             "nn.TransformerEncoderLayer. Make your FeedForward pass its tests (exercise 1) first.",
             ff_expected, ff_out, case="block.ff(x)")
    with torch.no_grad():
        if mask is None:
            y = run(block, x.clone(), what=f"{BLOCK_NAME}.forward(x)", hint=_BLOCK_HINT)
        else:
            y = run(block, x.clone(), mask=mask, what=f"{BLOCK_NAME}.forward(x, mask=mask)", hint=_BLOCK_HINT)
        expected = _block_oracle(parts, x, heads, ff_mult, mask)
        mistakes = _block_mistakes(parts, x, heads, mask)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward(x)", shape=tuple(x.shape), device=x.device)
    expect_close(y, expected, what=f"{BLOCK_NAME}.forward(x{'' if mask is None else ', mask=mask'})",
                 mistakes=mistakes, otherwise=_BLOCK_HINT, case=case)


def block_output_is_normalised(TransformerBlock: Callable, device: torch.device | str = "cpu") -> None:
    """A post-norm block ends with a fresh LayerNorm: each output position has mean 0 and variance 1."""
    __tracebackhide__ = True
    torch.manual_seed(1300)
    block = run(TransformerBlock, 8, 2, what=f"{BLOCK_NAME}(8, 2)").to(device).eval()
    x = 3.0 * randn(2, 5, 8, seed=1301, device=device) + 1.0
    with torch.no_grad():
        y = run(block, x, what=f"{BLOCK_NAME}.forward(x)", hint=_BLOCK_HINT)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward(x)", shape=(2, 5, 8), device=device)
    mean, var = y.mean(dim=-1), y.var(dim=-1, unbiased=False)
    if not (torch.allclose(mean, torch.zeros_like(mean), atol=1e-4) and torch.allclose(var, torch.ones_like(var), atol=1e-3)):
        fail(f"The outputs of a new {BLOCK_NAME} should be normalised per position (mean 0, variance 1 over the k "
             "features), because the post-norm block ends with norm2(x + ff(x)). Is the last LayerNorm missing, or "
             "the residual added after it (x + norm2(...)), or is this a pre-norm block?",
             torch.stack([torch.zeros(5), torch.ones(5)]), torch.stack([mean[0], var[0]]),
             case="row 1: mean of each output position, row 2: its variance")


def block_matches_oracle(TransformerBlock: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and inputs of several shapes against nn.TransformerEncoderLayer with the same weights."""
    __tracebackhide__ = True
    for i, (b, t, k, heads, ff_mult) in enumerate(BLOCK_SHAPES):
        block, parts = _built_block(TransformerBlock, k, heads, ff_mult, seed=1400 + 50 * i, device=device)
        x = randn(b, t, k, seed=1390 + i, device=device)
        _compare_block(block, parts, x, heads, ff_mult, None, case=f"x of shape {(b, t, k)}, heads={heads}")


def block_passes_mask_on(TransformerBlock: Callable, device: torch.device | str = "cpu") -> None:
    """A causal mask (t, t) and a padding mask (b, 1, t), True = allowed, reach the attention."""
    __tracebackhide__ = True
    b, t, k, heads = 3, 6, 8, 2
    block, parts = _built_block(TransformerBlock, k, heads, 4, seed=1600, device=device)
    x = randn(b, t, k, seed=1601, device=device)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (t, t)
    _compare_block(block, parts, x, heads, 4, causal, case=f"causal mask ({t}, {t})")
    lengths = torch.tensor([6, 4, 2], device=device)
    padding = (torch.arange(t, device=device) < lengths[:, None]).unsqueeze(1)  # (b, 1, t)
    _compare_block(block, parts, x, heads, 4, padding, case=f"padding mask ({b}, 1, {t}), lengths 6, 4, 2")


def block_passes_gradients(TransformerBlock: Callable, device: torch.device | str = "cpu") -> None:
    """A loss on the output sends a gradient to every parameter and to the input."""
    __tracebackhide__ = True
    torch.manual_seed(1700)
    block = run(TransformerBlock, 8, 2, what=f"{BLOCK_NAME}(8, 2)").to(device)
    x = randn(2, 5, 8, seed=1701, device=device).requires_grad_(True)
    y = run(block, x, what=f"{BLOCK_NAME}.forward(x)", hint=_BLOCK_HINT)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward(x)", shape=(2, 5, 8), device=device)
    if not y.requires_grad:
        fail(f"{BLOCK_NAME}.forward(x) is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    (y * randn(2, 5, 8, seed=1702, device=device)).sum().backward()
    for name, p in block.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0.0:
            fail(f"The parameter {name} of {BLOCK_NAME} receives no gradient, so it would never learn. Is its "
                 "layer used in forward?")
    if x.grad is None or float(x.grad.abs().sum()) == 0.0:
        fail(f"The input x of {BLOCK_NAME}.forward receives no gradient.")


def block_is_permutation_equivariant(TransformerBlock: Callable, device: torch.device | str = "cpu") -> None:
    """Without positions, permuting the input positions permutes the block's outputs the same way."""
    __tracebackhide__ = True
    torch.manual_seed(1800)
    block = run(TransformerBlock, 8, 2, what=f"{BLOCK_NAME}(8, 2)").to(device).eval()
    x = randn(2, 6, 8, seed=1801, device=device)
    perm = torch.tensor([5, 2, 0, 4, 1, 3], device=device)
    with torch.no_grad():
        y = run(block, x, what=f"{BLOCK_NAME}.forward(x)", hint=_BLOCK_HINT)
        y_perm = run(block, x[:, perm], what=f"{BLOCK_NAME}.forward(x)", hint=_BLOCK_HINT)
    expect_tensor(y, what=f"{BLOCK_NAME}.forward(x)", shape=(2, 6, 8), device=device)
    expect_close(y_perm, y[:, perm], what=f"{BLOCK_NAME}.forward on permuted positions",
                 case="permutation [5, 2, 0, 4, 1, 3]",
                 otherwise="Every part of the block is permutation equivariant, so the block must be too. Does "
                           "something mix positions outside the attention (a norm or a mean over dim=1)?")


# ---------------------------------------------------------------- TransformerClassifier

def _is_block(module: nn.Module) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Module) for n in ("attention", "norm1", "norm2", "ff"))


def _classifier_parts(model: nn.Module, vocab: int, k: int, depth: int,
                      classes: int) -> tuple[nn.Embedding, list[nn.Module], nn.Linear]:
    """The embedding, the blocks (in order) and the output layer of a classifier, found by type."""
    __tracebackhide__ = True
    what = f"{CLASSIFIER_NAME}({vocab}, {k}, heads, {depth}, {classes})"
    blocks = [m for m in model.modules() if _is_block(m)]
    if len(blocks) != depth:
        hint = (" Blocks kept in a plain Python list are not registered: use nn.ModuleList or nn.Sequential."
                if not blocks else
                " [TransformerBlock(...)] * depth repeats ONE block; create a new one for each layer."
                if len(blocks) == 1 else "")
        fail(f"{what} should hold depth={depth} separate TransformerBlocks; found {len(blocks)} registered.{hint}")
    inside = {id(m) for blk in blocks for m in blk.modules()}
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    if len(embeddings) != 1 or (embeddings[0].num_embeddings, embeddings[0].embedding_dim) != (vocab, k):
        fail(f"{what} should have one nn.Embedding(vocab_size, k) = nn.Embedding({vocab}, {k}); found "
             f"{[str(e) for e in embeddings]}.")
    outputs = [m for m in model.modules() if isinstance(m, nn.Linear) and id(m) not in inside
               and (m.in_features, m.out_features) == (k, classes)]
    if not outputs:
        fail(f"{what} should end with an nn.Linear(k, num_classes) = nn.Linear({k}, {classes}) outside the blocks; "
             "none found.")
    return embeddings[0], blocks, outputs[-1]


def _classifier_mistakes(x: torch.Tensor, blocks: list[nn.Module], out: nn.Linear) -> dict[str, torch.Tensor]:
    h = x
    for blk in blocks:
        h = blk(h)
    mean = h.mean(dim=1)
    logits = out(mean)
    return {
        "the positions are summed instead of averaged: use .mean(dim=1).": out(h.sum(dim=1)),
        "only the first position is classified; average over all positions with .mean(dim=1).": out(h[:, 0]),
        "only the last position is classified; average over all positions with .mean(dim=1).": out(h[:, -1]),
        "max-pooling is used; this model averages over the positions with .mean(dim=1).": out(h.amax(dim=1)),
        "a softmax is applied to the output. Return the raw logits: F.cross_entropy applies log-softmax itself.":
            F.softmax(logits, dim=-1),
        "a log-softmax is applied to the output. Return the raw logits: F.cross_entropy applies log-softmax itself.":
            F.log_softmax(logits, dim=-1),
        "the blocks are skipped: the embeddings go straight to the mean.": out(x.mean(dim=1)),
        "only the first block is used; apply every block, in order.": out(blocks[0](x).mean(dim=1)),
        "each block is applied to the embeddings rather than to the previous block's output: write x = block(x) "
        "in the loop.": out(blocks[-1](x).mean(dim=1)),
    }


_CLASSIFIER_HINT = "forward should compute embedding(tokens) -> each block in order -> .mean(dim=1) -> the linear layer."


def classifier_structure(TransformerClassifier: Callable) -> None:
    """An embedding, depth separate registered blocks and a linear output layer; logits of shape (b, num_classes)."""
    __tracebackhide__ = True
    vocab, k, heads, depth, classes = 11, 8, 2, 3, 4
    what = f"{CLASSIFIER_NAME}({vocab}, {k}, {heads}, {depth}, {classes})"
    torch.manual_seed(1900)
    model = run(TransformerClassifier, vocab, k, heads, depth, classes, what=what)
    if not isinstance(model, nn.Module):
        fail(f"{what} should create an nn.Module, but gave a {type(model).__name__}.")
    _, blocks, _ = _classifier_parts(model, vocab, k, depth, classes)
    block_params = sum(p.numel() for p in blocks[0].parameters())
    expected = vocab * k + depth * block_params + k * classes + classes
    count = sum(p.numel() for p in model.parameters())
    if count != expected:
        fail(f"{what} has {count} parameters; the embedding ({vocab * k}), {depth} blocks ({block_params} each) and "
             f"the output layer ({k * classes + classes}) make {expected}. Is an extra layer registered?")
    tokens = torch.randint(0, vocab, (5, 7), generator=torch.Generator().manual_seed(1901))
    with torch.no_grad():
        y = run(model.eval(), tokens, what=f"{CLASSIFIER_NAME}.forward(tokens)", hint=_CLASSIFIER_HINT)
    expect_tensor(y, what=f"{CLASSIFIER_NAME}.forward(tokens) for tokens of shape (5, 7)", shape=(5, classes),
                  device="cpu", shape_hints={
                      (7, classes): "There is one row per position: the mean runs over the batch (dim=0) instead of "
                                    "the positions (dim=1).",
                      (5, 7, classes): "There is one row per position: average over the positions (dim=1) before "
                                       "the output layer."})


def classifier_matches_reference(TransformerClassifier: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and tokens: embedding -> the model's own blocks in order -> mean over positions -> linear."""
    __tracebackhide__ = True
    for i, (b, t, vocab, k, heads, depth, classes) in enumerate(CLASSIFIER_SHAPES):
        torch.manual_seed(2000 + i)
        what = f"{CLASSIFIER_NAME}({vocab}, {k}, {heads}, {depth}, {classes})"
        model = run(TransformerClassifier, vocab, k, heads, depth, classes, what=what)
        embedding, blocks, out = _classifier_parts(model, vocab, k, depth, classes)
        model = model.to(device).eval()
        _randomize(model, seed=2100 + 100 * i)
        tokens = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(2050 + i)).to(device)
        with torch.no_grad():
            y = run(model, tokens.clone(), what=f"{CLASSIFIER_NAME}.forward(tokens)", hint=_CLASSIFIER_HINT)
            x = F.embedding(tokens, embedding.weight)  # (b, t, k)
            h = x
            for blk in blocks:
                h = blk(h)
            expected = F.linear(h.mean(dim=1), out.weight, out.bias)  # (b, classes)
            mistakes = _classifier_mistakes(x, blocks, out)
        expect_tensor(y, what=f"{CLASSIFIER_NAME}.forward(tokens)", shape=(b, classes), device=device)
        expect_close(y, expected, what=f"{CLASSIFIER_NAME}.forward(tokens)", mistakes=mistakes,
                     otherwise=_CLASSIFIER_HINT, case=f"tokens of shape {(b, t)}, depth={depth}")


def classifier_is_order_blind(TransformerClassifier: Callable, device: torch.device | str = "cpu") -> None:
    """Without positions the whole classifier is permutation invariant: shuffled tokens give the same logits."""
    __tracebackhide__ = True
    torch.manual_seed(2200)
    model = run(TransformerClassifier, 9, 8, 2, 2, 3, what=f"{CLASSIFIER_NAME}(9, 8, 2, 2, 3)").to(device).eval()
    tokens = torch.randint(0, 9, (4, 7), generator=torch.Generator().manual_seed(2201)).to(device)
    perm = torch.tensor([6, 2, 0, 4, 1, 5, 3], device=device)
    with torch.no_grad():
        y = run(model, tokens, what=f"{CLASSIFIER_NAME}.forward(tokens)", hint=_CLASSIFIER_HINT)
        y_perm = run(model, tokens[:, perm], what=f"{CLASSIFIER_NAME}.forward(tokens)", hint=_CLASSIFIER_HINT)
    expect_tensor(y, what=f"{CLASSIFIER_NAME}.forward(tokens)", shape=(4, 3), device=device)
    expect_close(y_perm, y, what=f"{CLASSIFIER_NAME}.forward on shuffled tokens", case="positions permuted",
                 otherwise="Equivariant blocks followed by a mean over the positions cannot see order, so shuffling "
                           "the tokens must leave the logits unchanged. Is something position-dependent (a "
                           "first/last token, a flatten) used instead of the mean?")


def classifier_passes_gradients(TransformerClassifier: Callable, device: torch.device | str = "cpu") -> None:
    """The cross-entropy of a batch sends a gradient to the embedding, every block and the output layer."""
    __tracebackhide__ = True
    torch.manual_seed(2300)
    model = run(TransformerClassifier, 9, 8, 2, 2, 3, what=f"{CLASSIFIER_NAME}(9, 8, 2, 2, 3)").to(device)
    tokens = torch.arange(9, device=device).view(3, 3)  # every token used once
    y = run(model, tokens, what=f"{CLASSIFIER_NAME}.forward(tokens)", hint=_CLASSIFIER_HINT)
    expect_tensor(y, what=f"{CLASSIFIER_NAME}.forward(tokens)", shape=(3, 3), device=device)
    if not y.requires_grad:
        fail(f"{CLASSIFIER_NAME}.forward is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    F.cross_entropy(y, torch.tensor([0, 1, 2], device=device)).backward()
    for name, p in model.named_parameters():
        if p.grad is None or float(p.grad.abs().sum()) == 0.0:
            fail(f"The parameter {name} of {CLASSIFIER_NAME} receives no gradient, so it would never learn. Is its "
                 "layer used in forward?")
