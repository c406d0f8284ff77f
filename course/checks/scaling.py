"""Checks for assignment 03: scaled_dot_product_attention(q, k, v, mask=None) and ScaledSelfAttention."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.compare import expect_close, expect_linear, expect_tensor, fail, generator, randn, run

SDPA_NAME = "scaled_dot_product_attention"
MODULE_NAME = "ScaledSelfAttention"
_INF = float("-inf")

_SDPA_HINT = ("The inputs may have any number of leading dimensions (..., tq, d): use keys.transpose(-2, -1) "
              "(or keys.mT) rather than transpose(1, 2), and a mask that broadcasts to (..., tq, tk).")
_SDPA_RECIPE = ("scores = queries·keysᵀ / √d (d the query/key size), masked positions set to −∞ before a softmax "
                "over the keys (last dimension), output = weights·values.")


# ---------------------------------------------------------------- oracle and typical mistakes

def _no_row_allowed(mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if mask is None else ~mask.any(dim=-1, keepdim=True)


def _zero_empty_rows(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The course's convention for a query that may attend to nothing: all-zero weights, zero output."""
    empty = _no_row_allowed(mask)
    return t if empty is None else torch.where(empty, torch.zeros_like(t), t)


def _oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's fused attention: the output, and the weights (the output when the values are the identity)."""
    tk = k.shape[-2]
    eye = torch.eye(tk, device=q.device).expand(*k.shape[:-2], tk, tk)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    return _zero_empty_rows(out, mask), _zero_empty_rows(weights, mask)


def _attend(scores: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax with the course's masking convention, then the weighted values."""
    if mask is not None:
        scores = scores.masked_fill(~mask, _INF)
    w = _zero_empty_rows(F.softmax(scores, dim=-1), mask)
    return w @ v, w


def _variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """explanation -> (output, weights) that a typical wrong implementation returns."""
    d, dv = q.shape[-1], v.shape[-1]
    raw = q @ k.transpose(-2, -1)  # (..., tq, tk)
    scaled = raw / math.sqrt(d)
    found = {
        "the scores are not scaled. Divide queries·keysᵀ by √d, d the size of a query (queries.shape[-1]).":
            _attend(raw, v, mask),
        "the scores are divided by d; divide by √d (math.sqrt(d)), the standard deviation of q·k.":
            _attend(raw / d, v, mask),
        "the scores are divided by the square root of the value size; the scale is √d with d the size of a "
        "query and a key (queries.shape[-1]), not of a value.": _attend(raw / math.sqrt(dv), v, mask),
        "the softmax runs over the queries (dim=-2). Each query's weights over the keys must sum to 1: use dim=-1.":
            (F.softmax(scaled, dim=-2) @ v, F.softmax(scaled, dim=-2)),
    }
    if mask is not None:
        zero = F.softmax(scaled.masked_fill(~mask, 0.0), dim=-1)
        after = F.softmax(scaled, dim=-1) * mask
        plain = F.softmax(scaled, dim=-1)
        large = F.softmax(scaled.masked_fill(~mask, -1e9), dim=-1)
        found.update({
            "a query that may attend to nothing gets equal weights on every key. That happens when masked scores "
            "are filled with a large negative number instead of −∞ and such rows are not zeroed; the convention is "
            "all-zero weights and a zero output for them.": (large @ v, large),
            "the mask is inverted. True means attention is ALLOWED (PyTorch's convention): fill the scores where "
            "the mask is False (~mask) with −∞.": _attend(scaled, v, ~mask),
            "masked scores are set to 0 instead of −∞. A score of 0 is an ordinary score (e⁰ = 1), so masked keys "
            "still get weight: use float('-inf').": (zero @ v, zero),
            "the mask is applied after the softmax without renormalising, so the weights of a row no longer sum "
            "to 1. Mask the scores with −∞ before the softmax.": (after @ v, after),
            "the mask is ignored: masked keys still get weight. Is the mask passed on, and are the scores where it "
            "is False filled with −∞ before the softmax?": (plain @ v, plain),
        })
    return found


def _weight_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    found = {explanation: w for explanation, (_, w) in _variants(q, k, v, mask).items()}
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    masked = scores if mask is None else scores.masked_fill(~mask, _INF)
    found["the weights returned are the raw scores: return the softmax of the scaled, masked scores."] = masked
    found["the weights returned are the scores before the softmax: return the softmax of the scaled, masked "
          "scores."] = scores
    return found


def _output_variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    return {explanation: out for explanation, (out, _) in _variants(q, k, v, mask).items()}


def _call_sdpa(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               device: torch.device | str, case: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Call the student's function and check it returns (output, weights) of the right shapes."""
    __tracebackhide__ = True
    args = (q.clone(), k.clone(), v.clone())
    result = run(fn, *args, what=SDPA_NAME, hint=_SDPA_HINT) if mask is None else \
        run(fn, *args, mask=mask.clone(), what=SDPA_NAME, hint=_SDPA_HINT)
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"{SDPA_NAME} should return a pair (output, weights), but returned a {type(result).__name__}"
             f"{' of length ' + str(len(result)) if isinstance(result, (tuple, list)) else ''}. "
             "End with `return weights @ values, weights`.")
    out, weights = result
    lead, tq, tk, dv = tuple(q.shape[:-2]), q.shape[-2], k.shape[-2], v.shape[-1]
    expect_tensor(out, what=f"the output of {SDPA_NAME}", shape=(*lead, tq, dv), device=device, shape_hints={
        (*lead, tq, tk): "That is the shape of the weights: is the pair returned as (weights, output)?",
        (*lead, tq, q.shape[-1]): "The output has the size of a key, not of a value: are the keys used as values?"})
    expect_tensor(weights, what=f"the weights of {SDPA_NAME}", shape=(*lead, tq, tk), device=device, shape_hints={
        (*lead, tq, dv): "That is the shape of the output: is the pair returned as (weights, output)?"})
    return out, weights


def _check_sdpa(fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                device: torch.device | str, case: str) -> None:
    __tracebackhide__ = True
    out, weights = _call_sdpa(fn, q, k, v, mask, device, case)
    expected_out, expected_w = _oracle(q, k, v, mask)
    expect_close(weights, expected_w, what=f"the weights of {SDPA_NAME}", mistakes=_weight_variants(q, k, v, mask),
                 otherwise=_SDPA_RECIPE, case=case)
    expect_close(out, expected_out, what=f"the output of {SDPA_NAME}", mistakes=_output_variants(q, k, v, mask),
                 otherwise="The weights are right, so look at the last step: output = weights·values.", case=case)


# ---------------------------------------------------------------- scaled_dot_product_attention

def _by_hand_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0]])  # (1, 4): one query, d = 4
    k = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])  # (2, 4): scores 4 and 0, scaled 2 and 0
    v = torch.tensor([[10.0, 0.0], [20.0, 1.0]])  # (2, 2)
    return q, k, v


def sdpa_by_hand(fn: Callable) -> None:
    """d = 4: raw scores 4 and 0 become 2 and 0, weights e²/(e²+1) ≈ 0.881 and 1/(e²+1) ≈ 0.119."""
    __tracebackhide__ = True
    q, k, v = _by_hand_case()
    _check_sdpa(fn, q, k, v, None, "cpu", "q = [1,1,1,1], keys [1,1,1,1] and 0, values [10,0] and [20,1]")


def sdpa_masks_by_hand(fn: Callable) -> None:
    """Masking key 0 leaves all the weight on key 1: weights [0, 1], output = value 1; a mask (tk,) broadcasts."""
    __tracebackhide__ = True
    q, k, v = _by_hand_case()
    mask = torch.tensor([[False, True]])  # (tq, tk): the query may look at key 1 only
    _check_sdpa(fn, q, k, v, mask, "cpu", "the same case, mask [[False, True]] (True = allowed)")
    out, weights = _call_sdpa(fn, q, k, v, torch.tensor([False, True]), "cpu", "")
    expect_close(weights, torch.tensor([[0.0, 1.0]]), what=f"the weights of {SDPA_NAME} with a mask of shape (tk,)",
                 otherwise="The mask only has to be broadcastable to (..., tq, tk): use it as it is in masked_fill "
                           "or torch.where, without indexing or reshaping it.", case="mask [False, True]")


def sdpa_fully_masked_row(fn: Callable) -> None:
    """A query that may attend to nothing gets all-zero weights and a zero output — no NaN; other rows are unchanged."""
    __tracebackhide__ = True
    q = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # (2, 4)
    _, k, v = _by_hand_case()
    mask = torch.tensor([[True, True], [False, False]])  # the second query may attend to nothing
    out, weights = _call_sdpa(fn, q, k, v, mask, "cpu", "")
    expected_out, expected_w = _oracle(q, k, v, mask)
    if not bool(torch.isfinite(weights).all()) or not bool(torch.isfinite(out).all()):
        fail(f"{SDPA_NAME} returns NaN for a query that may attend to nothing. The softmax of a row of −∞ is 0/0. "
             "The convention (PyTorch's too) is all-zero weights and a zero output for such a row: after the "
             "softmax, zero the rows where mask.any(dim=-1, keepdim=True) is False.", expected_w, weights,
             case="query 2 may attend to nothing")
    expect_close(weights, expected_w, what=f"the weights of {SDPA_NAME}", mistakes=_weight_variants(q, k, v, mask),
                 otherwise="A row where nothing is allowed gets all-zero weights; the other rows are the usual "
                           "softmax.", case="query 2 may attend to nothing")
    expect_close(out, expected_out, what=f"the output of {SDPA_NAME}", mistakes=_output_variants(q, k, v, mask),
                 otherwise="A query that may attend to nothing gets a zero output.", case="query 2 may attend to nothing")


def _random_mask(shape: tuple[int, ...], seed: int, device: torch.device | str, keep_one: bool = True) -> torch.Tensor:
    mask = torch.rand(*shape, generator=generator(seed)) < 0.6
    if keep_one:  # every query may attend to at least one key
        tq, tk = shape[-2], shape[-1]
        mask[..., torch.arange(tq), torch.arange(tq) % tk] = True
    return mask.to(device)


def _oracle_cases(device: torch.device | str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, str]]:
    cases = []
    # (leading dimensions, tq, tk, d, dv, kind of mask): tq != tk, dv != d, 1, 2 or 3 leading dimensions
    specs = [((3,), 4, 6, 5, 2, None), ((2, 3), 5, 7, 8, 3, "random"), ((2,), 6, 6, 4, 6, "causal"),
             ((), 3, 5, 6, 4, "keys"), ((2, 3), 4, 5, 4, 3, "padding"), ((2,), 5, 4, 3, 2, "empty rows")]
    for i, (lead, tq, tk, d, dv, kind) in enumerate(specs):
        q = randn(*lead, tq, d, seed=300 + i, device=device) * 2.0  # spread scores so every mistake shows
        k = randn(*lead, tk, d, seed=310 + i, device=device)
        v = randn(*lead, tk, dv, seed=320 + i, device=device)
        if kind is None:
            mask = None
        elif kind == "random":
            mask = _random_mask((tq, tk), 330 + i, device)
        elif kind == "causal":
            mask = torch.ones(tq, tk, dtype=torch.bool, device=device).tril()
        elif kind == "keys":
            mask = torch.tensor([True, False, True, True, False], device=device)
        elif kind == "padding":
            lengths = torch.tensor([5, 3], device=device)  # the second sequence has two padding keys
            mask = (torch.arange(tk, device=device) < lengths[:, None])[:, None, None, :]  # (2, 1, 1, tk)
        else:
            mask = _random_mask((*lead, tq, tk), 330 + i, device)
            mask[0, 1] = False  # query 1 of the first batch element may attend to nothing
            mask[1, 3] = False
        shape = "×".join(map(str, q.shape))
        what = "no mask" if mask is None else f"mask of shape {tuple(mask.shape)} ({kind})"
        cases.append((q, k, v, mask, f"queries {shape}, keys {'×'.join(map(str, k.shape))}, values "
                                     f"{'×'.join(map(str, v.shape))}, {what}"))
    return cases


def sdpa_matches_oracle(fn: Callable, device: torch.device | str = "cpu") -> None:
    """Random shapes (1-3 leading dimensions, tq != tk, dv != d) and masks against F.scaled_dot_product_attention."""
    __tracebackhide__ = True
    for q, k, v, mask, case in _oracle_cases(device):
        _check_sdpa(fn, q, k, v, mask, device, case)


def sdpa_weights_are_a_distribution(fn: Callable, device: torch.device | str = "cpu") -> None:
    """Every row of weights with something allowed sums to 1 and is 0 where the mask is False."""
    __tracebackhide__ = True
    q, k, v, mask, case = _oracle_cases(device)[1]
    _, weights = _call_sdpa(fn, q, k, v, mask, device, case)
    sums = weights.sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        fail(f"The rows of the weights of {SDPA_NAME} do not sum to 1. Softmax over the keys (dim=-1), after "
             "masking the scores with −∞.", torch.ones_like(sums), sums, case=case)
    leaked = weights.masked_select(~mask.expand_as(weights)).abs().max()
    if float(leaked) > 1e-6:
        fail(f"{SDPA_NAME} gives weight up to {float(leaked):.3g} to keys the mask forbids (mask False). "
             "True means allowed: fill the scores where the mask is False with −∞ before the softmax.")


def sdpa_passes_gradients(fn: Callable, device: torch.device | str = "cpu") -> None:
    """Gradients reach queries, keys and values and stay finite, even with a query that may attend to nothing."""
    __tracebackhide__ = True
    q, k, v, mask, case = _oracle_cases(device)[-1]
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    result = run(fn, q, k, v, mask=mask, what=SDPA_NAME, hint=_SDPA_HINT)
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"{SDPA_NAME} should return a pair (output, weights).")
    out, weights = result
    if not out.requires_grad:
        fail(f"The output of {SDPA_NAME} is cut off from autograd: avoid .detach(), .data or torch.no_grad() in it.")
    loss = (out * randn(*out.shape, seed=390, device=device)).sum()
    if weights.requires_grad:
        loss = loss + (weights * randn(*weights.shape, seed=391, device=device)).sum()
    loss.backward()
    for name, t in (("queries", q), ("keys", k), ("values", v)):
        if t.grad is None or float(t.grad.abs().sum()) == 0.0:
            fail(f"The {name} receive no gradient through {SDPA_NAME}. Are they used, and is nothing detached?")
        if not bool(torch.isfinite(t.grad).all()):
            fail(f"NaN gradients reach the {name} from a query that may attend to nothing. The forward pass can "
                 "hide a NaN that the backward pass still sees: adding −∞ to the scores (scores + where(mask, 0, "
                 "−inf)) and repairing the NaN weights afterwards sends NaN back through the addition. Use "
                 "scores.masked_fill(~mask, float('-inf')), whose gradient is zero at masked positions.")


# ---------------------------------------------------------------- ScaledSelfAttention

def _projection(module: nn.Module, name: str, k: int) -> nn.Linear:
    __tracebackhide__ = True
    return expect_linear(module, MODULE_NAME, name, k, k, False, "nn.Linear(k, k, bias=False)",
                         "The projections are plain matrices")


def _make(cls: Callable, k: int, device: torch.device | str, seed: int) -> nn.Module:
    """The student's module with distinct, well-spread weights, so that each mistake shows."""
    __tracebackhide__ = True
    torch.manual_seed(seed)
    module = run(cls, k, what=f"{MODULE_NAME}({k})")
    if not isinstance(module, nn.Module):
        fail(f"{MODULE_NAME}({k}) should create an nn.Module, but gave a {type(module).__name__}.")
    for name in ("to_queries", "to_keys", "to_values"):
        _projection(module, name, k)
    module = module.to(device)
    with torch.no_grad():
        for j, layer in enumerate((module.to_queries, module.to_keys, module.to_values)):
            layer.weight.copy_(randn(k, k, seed=seed + 1 + j, device=device) * (1.5 if j == 0 else 1.0) / math.sqrt(k))
    return module


def module_structure(cls: Callable, k: int = 6) -> None:
    """Three separate bias-free k×k projections, registered as parameters: 3k² in all."""
    __tracebackhide__ = True
    module = _make(cls, k, "cpu", 400)
    layers = [module.to_queries, module.to_keys, module.to_values]
    if len({id(layer) for layer in layers}) < 3:
        fail("Two of to_queries, to_keys, to_values are the same layer. Each role needs its own weights: "
             "create three separate nn.Linear modules.")
    count = sum(p.numel() for p in module.parameters())
    if count != 3 * k * k:
        fail(f"{MODULE_NAME}({k}) has {count} parameters; three k×k matrices make 3k² = {3 * k * k}. "
             "Are extra layers or biases registered, or some projection kept outside the module?")


def _module_oracle(module: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """nn.MultiheadAttention with one head and the student's weights: it scales by √k itself."""
    b, t, k = x.shape
    mha = nn.MultiheadAttention(k, num_heads=1, bias=False, batch_first=True).to(x.device)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([module.to_queries.weight, module.to_keys.weight, module.to_values.weight]))
        mha.out_proj.weight.copy_(torch.eye(k, device=x.device))
        # MultiheadAttention's boolean mask means True = NOT allowed, the opposite of ours.
        attn_mask = None if mask is None else ~mask.expand(b, t, t)
        y, _ = mha(x, x, x, attn_mask=attn_mask, need_weights=False)
    return y


def _module_mistakes(module: nn.Module, x: torch.Tensor, mask: torch.Tensor | None) -> dict[str, torch.Tensor]:
    q, k, v = module.to_queries(x), module.to_keys(x), module.to_values(x)
    found = _output_variants(q, k, v, mask)
    found["the values are the raw inputs x; they should go through to_values first."] = _attend(
        q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), x, mask)[0]
    return found


def _module_cases(device: torch.device | str) -> list[tuple[int, torch.Tensor, torch.Tensor | None, str]]:
    cases = []
    for i, (b, t, k, kind) in enumerate([(3, 5, 4, None), (2, 7, 6, "causal"), (2, 6, 8, "padding"), (1, 1, 3, None)]):
        x = randn(b, t, k, seed=420 + i, device=device)
        if kind == "causal":
            mask = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (t, t)
        elif kind == "padding":
            mask = (torch.arange(t, device=device) < torch.tensor([6, 4], device=device)[:, None])[:, None, :]  # (b, 1, t)
        else:
            mask = None
        cases.append((k, x, mask, f"x of shape {(b, t, k)}, " + ("no mask" if mask is None else
                                                                  f"{kind} mask of shape {tuple(mask.shape)}")))
    return cases


def module_matches_oracle(cls: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights, inputs and masks against nn.MultiheadAttention (one head) with the student's weights copied in."""
    __tracebackhide__ = True
    for i, (k, x, mask, case) in enumerate(_module_cases(device)):
        module = _make(cls, k, device, 440 + 10 * i)
        with torch.no_grad():
            y = run(module, x.clone(), what=f"{MODULE_NAME}.forward(x)") if mask is None else \
                run(module, x.clone(), mask=mask, what=f"{MODULE_NAME}.forward(x, mask)",
                    hint="forward takes the mask as a keyword argument: def forward(self, x, mask=None).")
            expected = _module_oracle(module, x, mask)
            mistakes = _module_mistakes(module, x, mask)
        expect_tensor(y, what=f"{MODULE_NAME}.forward", shape=tuple(x.shape), device=device)
        expect_close(y, expected, what=f"{MODULE_NAME}.forward", mistakes=mistakes, case=case,
                     otherwise="forward should return the output of scaled_dot_product_attention(to_queries(x), "
                               "to_keys(x), to_values(x), mask).")


def module_is_causal_with_a_causal_mask(cls: Callable, device: torch.device | str = "cpu") -> None:
    """With a lower-triangular mask, changing a later input changes no earlier output; without a mask it does."""
    __tracebackhide__ = True
    t, k = 6, 4
    module = _make(cls, k, device, 480)
    x = randn(2, t, k, seed=481, device=device)
    x_changed = x.clone()
    x_changed[:, 4] += 3.0  # change position 4 only
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (t, t): query i sees keys 0..i
    with torch.no_grad():
        y = run(module, x, mask=causal, what=f"{MODULE_NAME}.forward(x, mask)",
                hint="forward takes the mask as a keyword argument: def forward(self, x, mask=None).")
        y_changed = run(module, x_changed, mask=causal, what=f"{MODULE_NAME}.forward(x, mask)")
        y_free = run(module, x, what=f"{MODULE_NAME}.forward(x)", hint="mask must default to None.")
        y_free_changed = run(module, x_changed, what=f"{MODULE_NAME}.forward(x)")
    for value in (y, y_changed, y_free):
        expect_tensor(value, what=f"{MODULE_NAME}.forward", shape=(2, t, k), device=device)
    expect_close(y_changed[:, :4], y[:, :4], what=f"{MODULE_NAME}.forward with a causal mask, outputs 0-3",
                 case="position 4 of the input changed",
                 otherwise="Changing input 4 changed an earlier output: later positions leak through the mask. Is "
                           "the mask passed on to scaled_dot_product_attention, and is True 'allowed'?")
    if torch.allclose(y_free_changed[:, :4], y_free[:, :4]):
        fail(f"Without a mask, {MODULE_NAME} should let every position see every other one, but changing input 4 "
             "changed no earlier output. Does forward use a mask when none is given?")
