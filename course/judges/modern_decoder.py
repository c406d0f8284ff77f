"""Judges for assignment 09 (probes in course/checks/modern_decoder.py): the mistakes they name; the oracles, PyTorch's
own pieces carrying the check's weights (nn.RMSNorm, F.silu, the rotation as complex multiplication,
F.scaled_dot_product_attention(enable_gqa=True) and their composition into the model) with switches that turn on the
typical mistakes; then one declaration per check. Properties (the rotation is relative, the cache equals the full
call, causality) are anchored to outputs the judge recomputes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from course.checks import compare, modules
from course.checks import modern_decoder as probes
from course.checks.compare import Mistake, expect_close, expect_close_batch, fail, matches_any, output, raised
from course.checks.evidence import Evidence
from course.checks.kinds import Built
from course.checks.modern_decoder import ATTENTION_NAME, MODEL_NAME, AttentionCase, ModelCase, ModelRun, RelativeCase
from course.judges import mistakes
from course.judges.kinds import ForwardOracle, Oracle, against, against_forward, each_case, expect_linear_layers

DEFAULT_EPS = 1e-6
DEFAULT_BASE = 10000.0
M = mistakes(__name__)  # id -> Mistake, from course/judges/mistakes/modern_decoder.txt


def said(mistake: Mistake) -> str:
    """The mistake's explanation as a sentence of its own."""
    return mistake.explanation[0].upper() + mistake.explanation[1:]


# ---------------------------------------------------------------- RMSNorm

def _rms_oracle(w: Mapping[str, torch.Tensor], k: int, eps: float = DEFAULT_EPS, x: torch.Tensor | None = None
                ) -> torch.Tensor:
    """nn.RMSNorm(k, eps) with the check's gain copied in."""
    return functional_call(nn.RMSNorm(k, eps=eps), {"weight": w["gain"]}, (x,))


def _rms_variant(w: Mapping[str, torch.Tensor], k: int, eps: float = DEFAULT_EPS, x: torch.Tensor | None = None, *,
                 how: str, default: float | None = None) -> torch.Tensor:
    """A typical mistake of RMSNorm: eps outside the root, the mean subtracted, else x / sqrt(m + eps) · gain with the
    mean square m summed or over the wrong dimensions, without the gain, or with another default eps."""
    eps = eps if default is None else default
    if how == "eps-outside":
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w["gain"]
    if how == "mean":
        return F.layer_norm(x, (k,), w["gain"], None, eps)
    dim = {"all": tuple(range(x.dim())), "dim0": 0, "dim-2": -2}.get(how, -1)
    square = x.pow(2).sum(dim, keepdim=True) if how == "sum" else x.pow(2).mean(dim, keepdim=True)
    return x * torch.rsqrt(square + eps) * (1.0 if how == "no-gain" else w["gain"])


def _rms_simulators(k: int, eps: float | None = None, x: torch.Tensor | None = None
                    ) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    """The typical mistakes as variants of RMSNorm; another default eps only where the module was built with it."""
    hows = [(M["rms-eps-outside-root"], "eps-outside"), (M["rms-mean-subtracted"], "mean"),
            (M["rms-sum-not-mean"], "sum"), (M["rms-no-gain"], "no-gain"), (M["rms-wrong-dim"], "all"),
            (M["rms-wrong-dim"], "dim0"), (M["rms-wrong-dim"], "dim-2")]
    found = [(mistake, partial(_rms_variant, how=how)) for mistake, how in hows]
    if eps is None:  # built with the default eps
        found += [(M["rms-default-eps"], partial(_rms_variant, how="right", default=other))
                  for other in (1e-5, 1e-8, 0.0, torch.finfo(torch.float32).eps)]
    return found


def _norm_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The norm was built and holds one parameter, gain (k,), and nothing else; the values the probe loaded."""
    __tracebackhide__ = True
    k = built.args[0]
    what = f"{probes.NORM_NAME}({', '.join(map(repr, built.args))})"
    modules.built(ev, built.key, what)
    w = modules.expect_parameters(ev, built.key, what, {"gain": (k,)}, built.seed,
                                  hint="Register it in __init__: self.gain = nn.Parameter(torch.ones(k)).")
    modules.expect_parameter_count(ev, built.key, what, k, "one gain per feature, k",
                                   "RMSNorm has a gain and nothing else: no bias.")
    return w


RMS = ForwardOracle(
    probes.NORM_NAME, "RMS normalisation", _norm_weights, _rms_oracle, "nn.RMSNorm with your gain",
    simulators=_rms_simulators,
    hint=lambda **_: ("forward should compute x / sqrt(mean(x², dim=-1, keepdim=True) + eps) · gain, for any number "
                      "of leading dimensions."),
    otherwise="It differs from nn.RMSNorm(k, eps) with your gain: x / sqrt(mean(x², dim=-1, keepdim=True) + eps) · "
              "gain.")

against_forward(probes.rms_norm_oracle, RMS,
                passed="Inputs with a mean far from 0, 100 times larger (the same output), tiny, eps=0.1, and 4-D: "
                       "nn.RMSNorm with your gain; gradients reach x and gain.")
against_forward(probes.rms_norm_hidden, RMS,
                passed="Inputs times 1e-4 (where eps matters) and 1e4, the default eps of 1e-6, more shapes and "
                       "gradients.")


# ---------------------------------------------------------------- rotary_tables

def _tables(t: int, s: int, base: float, *, exponent: float = 2.0, first: int = 0, sign: float = -1.0
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (t, s // 2) float32 of position · base^(sign · exponent · i / s), computed in float64: the formula
    (with the defaults) or a typical mistake."""
    theta = base ** (sign * exponent * torch.arange(s // 2, dtype=torch.float64) / s)  # (s/2,)
    angles = torch.arange(first, first + t, dtype=torch.float64)[:, None] * theta  # (t, s/2)
    return angles.cos().float(), angles.sin().float()


def _expect_tables(ev: Evidence, spec: probes.TableCase | Callable[[], probes.TableCase]) -> None:
    """The pair (cos, sin) recorded for the case: float32 tables (t, s // 2) of the formula's angles."""
    __tracebackhide__ = True
    for case in probes.drawn_tables((spec,)):
        t, s, what = case.t, case.s, case.call
        base = DEFAULT_BASE if case.base is None else case.base
        hint = "Return (cos, sin), each (t, s // 2): cos and sin of position · θ_i, θ_i = base^(−2i/s)."
        raised(ev, case.key, what, hint)
        fact = ev.facts.get(case.key)
        if compare.value_kind(ev, case.key) != "tuple" or not isinstance(fact, dict) or fact.get("length") != 2:
            fail(f"{what} should return the pair (cos, sin) of two tensors.", mistake=compare.NOT_A_TENSOR)
        found = []
        for i, name in enumerate(("cos", "sin")):
            got = compare.tensor(ev, f"{case.key}.{i}")
            if got is not None and got.dtype == torch.float64:
                fail(f"{what} returns its {name} table in float64: compute the angles in float64 for precision, "
                     "then return cos and sin as float32 (.float()).", mistake=M["rotary-tables-float64"])
            found.append(output(ev, f"{case.key}.{i}", what=f"the {name} table of {what}", shape=(t, s // 2),
                                dtype=torch.float32, hint=hint, shape_hints={
                                    (t, s): M["rotary-tables-full-width"],
                                    (s // 2, t): "That is the table transposed: one row per position, one column per "
                                                 "frequency."}))
        wrong = [(M["rotary-exponent-i"], _tables(t, s, base, exponent=1.0)),
                 (M["rotary-positions-from-one"], _tables(t, s, base, first=1)),
                 (M["rotary-positive-exponent"], _tables(t, s, base, sign=1.0))]
        if base != DEFAULT_BASE:
            wrong.append((M["rotary-base-ignored"], _tables(t, s, DEFAULT_BASE)))
        right = _tables(t, s, base)
        wrong.append((M["rotary-tables-swapped"], right[::-1]))
        expect_close(torch.stack(found), torch.stack(right), what=f"{what}, (cos, sin) stacked,", device=ev.device,
                     mistakes=[(m, torch.stack(pair)) for m, pair in wrong], case=f"t={t}, s={s}, base={base:g}",
                     otherwise="cos and sin of the angle position · θ_i, positions 0 .. t − 1 as rows, θ_i = "
                               "base^(−2i/s) for i = 0 .. s/2 − 1 as columns; compute them in float64, then .float().")


each_case(probes.rotary_tables, _expect_tables,
          passed="cos and sin of position · base^(−2i/s): two float32 tables (t, s // 2), with the default base and "
                 "another.")
each_case(probes.rotary_tables_hidden, _expect_tables,
          passed="More sizes (64 positions, one position, another base), on the notebook's device.")


# ---------------------------------------------------------------- apply_rotary

def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """The oracle: (x_i + i·x_{i+s/2}) · (cos + i·sin) for the rows offset .. offset + t − 1 of the tables, as complex
    multiplication. x (..., t, s) -> (..., t, s)."""
    t, half = x.shape[-2], x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:]) * torch.complex(cos[offset:offset + t], sin[offset:offset + t])
    return torch.cat([z.real, z.imag], dim=-1)


def _rotary_mistakes(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0
                     ) -> list[tuple[Mistake, torch.Tensor]]:
    """The rotation of interleaved pairs (x_2i, x_2i+1) (kept interleaved, or as halves), backwards, with the halves
    of the output swapped, and (for an offset) from row 0."""
    t, half = x.shape[-2], x.shape[-1] // 2
    c, s = cos[offset:offset + t], sin[offset:offset + t]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    a, b = x1 * c - x2 * s, x1 * s + x2 * c
    x1, x2 = x[..., :half], x[..., half:]
    found = [(M["rotary-interleaved"], torch.stack([a, b], dim=-1).flatten(-2)),
             (M["rotary-interleaved"], torch.cat([a, b], dim=-1)),
             (M["rotary-backwards"], torch.cat([x1 * c + x2 * s, -x1 * s + x2 * c], dim=-1)),
             (M["rotary-halves-swapped"], torch.cat([x1 * s + x2 * c, x1 * c - x2 * s], dim=-1))]
    if offset:
        found.append((M["rotary-offset-ignored"], rotate(x, cos, sin, 0)))
    return found


_ROTARY_HINT = ("cos and sin are (rows, s/2), one angle per pair (x_i, x_{i+s/2}): take rows offset .. offset + t − 1 "
                "(shape (t, s/2)), split x into halves x1 = x[..., :s//2], x2 = x[..., s//2:], and return "
                "torch.cat([x1·cos − x2·sin, x1·sin + x2·cos], dim=-1).")

ROTARY = Oracle("apply_rotary(x, cos, sin, offset)", rotate, "rotation as complex multiplication",
                shape=lambda x, **_: tuple(x.shape), mistakes=_rotary_mistakes, otherwise=_ROTARY_HINT,
                hint=_ROTARY_HINT)

against(probes.apply_rotary_oracle, ROTARY,
        passed="x of 3 and 4 dimensions, tables of random angles, offsets 0 and 4: the rotation of each pair (x_i, "
               "x_{i+s/2}) as complex multiplication.")
against(probes.apply_rotary_hidden, ROTARY,
        passed="More shapes (5-D, a single position, 2-D), offsets up to 20 and tables longer than needed.")


def _expect_relative(ev: Evidence, case: RelativeCase) -> None:
    """Lengths are kept; offset picks the rows of the tables; q·k after rotation depends only on the distance of the
    positions; and the rotation is the oracle's (or a typical mistake's)."""
    __tracebackhide__ = True
    cos, sin = case.tables()
    keys_in = case.keys()
    b, h, t, s = case.shape
    (first, last), shift, start, length = case.offsets, case.shift, case.start, case.length
    keys = output(ev, "keys", what="apply_rotary(keys, cos, sin)", shape=(b, h, t, s), hint=_ROTARY_HINT)
    if not matches_any(keys.norm(dim=-1), [keys_in.norm(dim=-1)], ev.device):
        fail("apply_rotary changes the lengths of the vectors: a rotation keeps them. Each pair (x_i, x_{i+s/2}) "
             "becomes (x_i·cos − x_{i+s/2}·sin, x_i·sin + x_{i+s/2}·cos).", keys_in.norm(dim=-1)[0, 0],
             keys.norm(dim=-1)[0, 0], case="the length of every key, sequence 0, head 0")
    rows = output(ev, "rows", what=f"apply_rotary(keys[..., {start}:{start + length}, :], cos, sin, offset={start})",
                  shape=(b, h, length, s), hint=_ROTARY_HINT)
    if not matches_any(rows, [keys[..., start:start + length, :]], ev.device):
        ignored = matches_any(rows, [rotate(keys_in[..., start:start + length, :], cos, sin, 0)], ev.device)
        fail(f"apply_rotary(x, cos, sin, offset={start}) on rows {start} .. {start + length - 1} of the keys should "
             "give those rows of the keys rotated from position 0. "
             + (M["rotary-offset-ignored"].explanation if ignored
                else "Use the rows offset .. offset + t − 1 of cos and sin."),
             keys[0, 0, start:start + length], rows[0, 0], case="sequence 0, head 0",
             mistake=M["rotary-offset-ignored"] if ignored else None)
    shifted = output(ev, "keys_shifted", what=f"apply_rotary(keys, cos, sin, offset={shift})", shape=(b, h, t, s),
                     hint=_ROTARY_HINT)
    queries = {o: output(ev, f"q{o}", what=f"apply_rotary(query, cos, sin, offset={o})", shape=(b, h, 1, s),
                         hint=_ROTARY_HINT) for o in case.offsets}
    near = (queries[first] * keys).sum(-1)  # (b, h, t): the query at `first`, the keys at 0 .. t - 1
    far = (queries[last] * shifted).sum(-1)  # the same vectors, every position moved by `shift`
    if not matches_any(far, [near], ev.device):
        fail(f"q·k after the rotation should depend only on how far apart the two positions are: moving the query "
             f"from position {first} to {last} and every key by {shift} as well should change no dot product. Are "
             "the rows offset .. offset + t − 1 of cos and sin used?", near[0, 0], far[0, 0],
             case=f"the query's dot products with the keys, sequence 0, head 0, shift {shift}")
    right = rotate(keys_in, cos, sin)
    if not matches_any(keys, [right, *(out for _, out in _rotary_mistakes(keys_in, cos, sin))], ev.device):
        fail("apply_rotary keeps lengths and is relative, but it is not a rotation of pairs by the tables' angles: "
             + _ROTARY_HINT, right[0, 0], keys[0, 0], case="the keys, sequence 0, head 0")


each_case(probes.apply_rotary_offset, _expect_relative,
          passed="Lengths are kept; offset=2 rotates rows 2-4 as positions 2-4; q·k depends only on the distance "
                 "of the positions (the query at 2 or 5, the keys moved by 3 too).")


# ---------------------------------------------------------------- SwiGLU

def _swiglu(w: Mapping[str, torch.Tensor], k: int, hidden: int, x: torch.Tensor | None = None, *,
            act: Callable[[torch.Tensor], torch.Tensor] = F.silu, swapped: bool = False, gated: str = "both"
            ) -> torch.Tensor:
    """down(act(gate(x)) * up(x)) with the check's weights (F.linear, F.silu); switches for the typical mistakes."""
    gate, up = F.linear(x, w["gate.weight"]), F.linear(x, w["up.weight"])
    if swapped:
        gate, up = up, gate
    inner = act(gate) * up if gated == "both" else act(gate if gated == "gate" else up)
    return F.linear(inner, w["down.weight"])


def _swiglu_simulators(k: int, hidden: int, x: torch.Tensor | None = None
                       ) -> list[tuple[Mistake, Callable[..., torch.Tensor]]]:
    return [(M["swiglu-gate-swapped"], partial(_swiglu, swapped=True)),
            (M["swiglu-relu"], partial(_swiglu, act=F.relu)),
            (M["swiglu-sigmoid"], partial(_swiglu, act=torch.sigmoid)),
            (M["swiglu-no-gate"], partial(_swiglu, gated="gate")), (M["swiglu-no-gate"], partial(_swiglu, gated="up"))]


def _swiglu_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """gate and up nn.Linear(k, hidden, bias=False), down nn.Linear(hidden, k, bias=False), nothing else."""
    __tracebackhide__ = True
    k, hidden = built.args
    what = f"{probes.SWIGLU_NAME}({k}, {hidden})"
    into = (k, hidden, False, "nn.Linear(k, hidden, bias=False)")
    layers = {"gate": into, "up": into, "down": (hidden, k, False, "nn.Linear(hidden, k, bias=False)")}
    w = expect_linear_layers(ev, built.key, what, probes.SWIGLU_NAME, layers, "Two of SwiGLU's layers are one object: "
                             "gate, up and down each need their own nn.Linear.",
                             dict.fromkeys(layers, M["swiglu-bias"]), built.seed)
    modules.expect_parameter_count(ev, built.key, what, 3 * k * hidden, "three k × hidden matrices, 3·k·hidden",
                                   "SwiGLU holds gate, up and down, without biases.")
    return w


SWIGLU = ForwardOracle(
    probes.SWIGLU_NAME, "SwiGLU", _swiglu_weights, _swiglu, "F.linear and F.silu with your weights",
    simulators=_swiglu_simulators, hint=lambda **_: "forward should compute down(silu(gate(x)) * up(x)).",
    otherwise="forward should compute self.down(F.silu(self.gate(x)) * self.up(x)).")

against_forward(probes.swiglu_oracle, SWIGLU,
                passed="down(silu(gate(x)) · up(x)) with your weights, F.linear and F.silu, on 3-D and 4-D inputs; "
                       "gradients reach x and every weight.")
against_forward(probes.swiglu_hidden, SWIGLU,
                passed="More sizes (a hidden size below k, one of 8k/3), on the notebook's device, with gradients.")


# ---------------------------------------------------------------- grouped-query attention

def gqa(w: Mapping[str, torch.Tensor], k: int, heads: int, kv_heads: int, x: torch.Tensor, cos: torch.Tensor,
        sin: torch.Tensor, mask: torch.Tensor, past: tuple | None = None, *, prefix: str = "",
        repeat: str = "interleave", rotated: str = "qk", scale: float | None = None, use_mask: bool = True,
        offset: bool = True, cache_rotated: bool = True) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Grouped-query attention with the check's weights: the judge's rotation on queries and keys, then
    F.scaled_dot_product_attention(enable_gqa=True); (out (b, t, k), (keys, values) (b, kv_heads, T, s)). The
    keywords switch on the typical mistakes (rotated: which of q, k, v are; the cache it returns is the one each
    mistake keeps)."""
    start = past[0].shape[2] if past is not None and offset else 0

    def project(name: str, n: int, rotate_it: bool) -> torch.Tensor:
        y = F.linear(x, w[f"{prefix}{name}.weight"])  # (b, t, n·s)
        y = y.view(*y.shape[:2], n, -1).transpose(1, 2)  # (b, n, t, s)
        return rotate(y, cos, sin, start) if rotate_it else y

    q, raw, values = project("to_queries", heads, "q" in rotated), project("to_keys", kv_heads, False), \
        project("to_values", kv_heads, "v" in rotated)
    keys = rotate(raw, cos, sin, start) if "k" in rotated else raw
    if past is not None:
        keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)  # (b, g, T, s)
        raw = torch.cat([past[0], raw], dim=2)
    group = 1 if repeat == "interleave" else heads // kv_heads  # .repeat: query head j reads kv head j % kv_heads
    out = F.scaled_dot_product_attention(q, keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1),
                                         attn_mask=mask if use_mask else None, scale=scale, enable_gqa=True)
    out = F.linear(out.transpose(1, 2).flatten(2), w[f"{prefix}unify_heads.weight"])  # (b, t, k)
    return out, ((keys if cache_rotated else raw), values)


def _gqa_switches(k: int) -> tuple[tuple[Mistake, Mapping[str, Any]], ...]:
    """The typical mistakes of one call without a cache, as switches of gqa."""
    return ((M["gqa-repeat-order"], {"repeat": "tile"}), (M["gqa-values-rotated"], {"rotated": "qkv"}),
            (M["gqa-not-rotated"], {"rotated": "q"}), (M["gqa-not-rotated"], {"rotated": "k"}),
            (M["gqa-not-rotated"], {"rotated": ""}), (M["gqa-scaled-by-model-size"], {"scale": 1 / math.sqrt(k)}),
            (M["gqa-mask-ignored"], {"use_mask": False}))


def _gqa_weights(ev: Evidence, case: AttentionCase) -> dict[str, torch.Tensor]:
    """The four projections, separate nn.Linear without biases of the grouped sizes; the values the probe loaded."""
    __tracebackhide__ = True
    k, g, s = case.k, case.kv_heads, case.s
    square = (k, k, False, "nn.Linear(k, k, bias=False)")
    grouped = (k, g * s, False, "nn.Linear(k, kv_heads * s, bias=False), s = k // heads")
    layers = {"to_queries": square, "to_keys": grouped, "to_values": grouped, "unify_heads": square}
    key = f"{case.key}.module"
    w = expect_linear_layers(ev, key, case.call, ATTENTION_NAME, layers, f"Two of {ATTENTION_NAME}'s layers are one "
                             "object: queries, keys, values and unify_heads each need their own nn.Linear.",
                             dict.fromkeys(layers, M["gqa-bias"]), case.seed)
    modules.expect_parameter_count(ev, key, case.call, 2 * k * k + 2 * k * g * s, "2k² + 2·k·kv_heads·s",
                                   "Are extra layers registered?")
    return w


_GQA_HINT = ("forward(x, cos, sin, mask, past=None): project, split into heads (queries: heads, keys and values: "
             "kv_heads), rotate queries and keys with apply_rotary at offset t_past, append them to the cache, "
             "repeat_interleave the keys and values to `heads` heads, F.scaled_dot_product_attention with "
             "attn_mask=mask, merge, unify_heads; return (out, (keys, values)).")


def _gqa_pair(ev: Evidence, key: str, case: AttentionCase, t: int, positions: int, what: str
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """out (b, t, k) and the cached keys and values (b, kv_heads, positions, s) a call recorded under key."""
    __tracebackhide__ = True
    raised(ev, key, what, _GQA_HINT)
    fact = ev.facts.get(key)
    if compare.value_kind(ev, key) != "tuple" or not isinstance(fact, dict) or fact.get("length") != 2 \
            or compare.value_kind(ev, f"{key}.1") != "tuple" or ev.facts.get(f"{key}.1", {}).get("length") != 2:
        fail(f"{what} should return the pair (out, (keys, values)): the output and the cache for the next call.")
    out = output(ev, f"{key}.0", what=what, shape=(case.b, t, case.k), hint=_GQA_HINT)
    shape = (case.b, case.kv_heads, positions, case.s)
    cached = []
    for i, name in enumerate(("keys", "values")):
        value = compare.tensor(ev, f"{key}.1.{i}")
        if value is None:
            fail(f"The cached {name} {what} returned are not a tensor.")
        if tuple(value.shape) != shape:
            if value.dim() == 4 and value.shape[1] == case.heads != case.kv_heads:
                fail(f"The cached {name} {what} returned have shape {tuple(value.shape)}, expected (b, kv_heads, t, "
                     f"s) = {shape}: {M['gqa-cache-repeated'].explanation}", mistake=M["gqa-cache-repeated"])
            fail(f"The cached {name} {what} returned have shape {tuple(value.shape)}; expected (b, kv_heads, t_past "
                 f"+ t, s) = {shape}, all positions so far, before the heads are repeated.")
        cached.append(value)
    return out, cached[0], cached[1]


def _expect_gqa_call(ev: Evidence, case: AttentionCase, w: Mapping[str, torch.Tensor], key: str, what: str,
                     label: str, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                     past: tuple | None = None, structure: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The call forward(x, cos, sin, mask, past) recorded under key against the oracle: out, naming the typical mistake
    it matches, then the cache (the rotated keys and the values of all positions so far); returns the oracle's.
    structure: out need only be the oracle's or a typical mistake's, and the cache only of the right shapes."""
    __tracebackhide__ = True
    out, keys, values = _gqa_pair(ev, key, case, x.shape[1], x.shape[1] + (0 if past is None else past[0].shape[2]),
                                  what)
    args = (case.k, case.heads, case.kv_heads, x, cos, sin, mask, past)
    extra = () if past is None else ((M["gqa-cache-offset-ignored"], {"offset": False}),)
    with torch.no_grad():
        want, right = gqa(w, *args)
        wrong = [(m, gqa(w, *args, **sw)[0]) for m, sw in (*extra, *_gqa_switches(case.k))]
        unrotated, rotated_values = gqa(w, *args, cache_rotated=False)[1][0], gqa(w, *args, rotated="qkv")[1][1]
    if structure:
        if not matches_any(out, [want, *(found for _, found in wrong)], ev.device):
            fail(f"{ATTENTION_NAME} has the right layers and shapes, but its output is not grouped-query attention "
                 f"with its weights, right or typically wrong. {_GQA_HINT}", want[0], out[0],
                 case=label + ", sequence 0")
        return right
    expect_close_batch(out, want, what=what, device=ev.device, mistakes=wrong, case=label,
                       otherwise="It differs from F.scaled_dot_product_attention(enable_gqa=True) on your projections, "
                                 "rotated. " + _GQA_HINT)
    alone = past is None
    expect_close(keys, right[0], what=f"The key cache of {what}", device=ev.device, case=label,
                 mistakes=[(M["gqa-cache-unrotated"], unrotated)] if alone else [],
                 otherwise="Cache the rotated keys, kv_heads heads." if alone else "After the call, the cache holds "
                 "the rotated keys of all positions: the cached ones, then the new ones, torch.cat([past[0], keys], "
                 "dim=2).")
    expect_close(values, right[1], what=f"The value cache of {what}", device=ev.device, case=label,
                 mistakes=[(M["gqa-values-rotated"], rotated_values)] if alone else [],
                 otherwise="Cache the values, kv_heads heads." if alone else "After the call, the cache holds the "
                 "values of all positions, torch.cat([past[1], values], dim=2).")
    return right


def _expect_gqa_case(ev: Evidence, case: AttentionCase | str, structure: bool = False) -> None:
    """The module's structure; the full call against the oracle (its gradients too); the first `prefix` positions
    alone, then the rest with their cache: the outputs and caches of one call. "indivisible": the sizes that do not
    divide raise a ValueError."""
    __tracebackhide__ = True
    if case == "indivisible":
        _expect_indivisible(ev)
        return
    w = _gqa_weights(ev, case)
    x, cos, sin, mask = case.inputs().values()
    what = f"{case.call}.forward(x, cos, sin, mask)"
    _expect_gqa_call(ev, case, w, f"{case.key}.full", what, case.label, x, cos, sin, mask, structure=structure)
    if case.upstream:
        modules.expect_attached(ev, f"{case.key}.full.0", what)
        grads = modules.autograd(lambda leaves, x: gqa(leaves, case.k, case.heads, case.kv_heads, x, cos, sin, mask)[0],
                                 w, {"x": x}, case.upstream_gradient())
        modules.expect_gradients(ev, grads, owner=ATTENTION_NAME, case=case.label,
                                 oracle="F.scaled_dot_product_attention(enable_gqa=True) with your weights")
    if case.prefix:
        p, t, call = case.prefix, case.t, case.call
        past = _expect_gqa_call(ev, case, w, f"{case.key}.first", f"{call}.forward(x[:, :{p}], cos, sin, mask[:{p}, "
                                f":{p}])", f"{call}, the first {p} of {t} positions", x[:, :p], cos, sin, mask[:p, :p])
        _expect_gqa_call(ev, case, w, f"{case.key}.second", f"{call}.forward(x[:, {p}:], cos, sin, mask[{p}:], "
                         f"past=(keys, values) of {p} positions)", f"{call}, {t - p} new positions after a cache of "
                         f"{p}", x[:, p:], cos, sin, mask[p:], past)


def _expect_indivisible(ev: Evidence) -> None:
    """ValueError for sizes that do not divide."""
    __tracebackhide__ = True
    for key, call in (("indivisible_k", f"{ATTENTION_NAME}(10, heads=4, kv_heads=2)"),
                      ("indivisible_heads", f"{ATTENTION_NAME}(12, heads=4, kv_heads=3)")):
        fact = ev.facts.get(key)
        if not isinstance(fact, dict):
            fail(f"The test recorded nothing for {call}: the check did not run to the end.")
        if fact.get("not_implemented"):
            raised(ev, key, call)
        if fact.get("kind") != "raised":
            fail(f"{call} was created without complaint. {said(M['gqa-no-divisibility-check'])}",
                 mistake=M["gqa-no-divisibility-check"])
        if fact.get("type") != "ValueError":
            fail(f"{call} raised {str(fact.get('type'))[:60]}; raise a ValueError, the exception for an argument of "
                 "the right type and a wrong value.", mistake=M["gqa-no-divisibility-check"])


each_case(probes.gqa_structure, partial(_expect_gqa_case, structure=True),
          passed="to_queries and unify_heads nn.Linear(k, k), to_keys and to_values nn.Linear(k, kv_heads·s), no "
                 "biases; out (b, t, k) and a cache (b, kv_heads, t, s); a ValueError for k=10, heads=4 and for "
                 "heads=4, kv_heads=3.")
each_case(probes.gqa_oracle, _expect_gqa_case,
          passed="6 query heads on 2 or 3 kv heads, one kv head, and kv_heads = heads (plain multi-head attention), "
                 "causal and random masks: F.scaled_dot_product_attention(enable_gqa=True) on your rotated "
                 "projections; gradients reach x and every weight.")
each_case(probes.gqa_cache, _expect_gqa_case,
          passed="A prefix, then the rest with past=(keys, values): the same outputs as one call, rotated at offset "
                 "t_past, and a cache of the rotated keys and the values, kv_heads heads.")
each_case(probes.gqa_hidden, _expect_gqa_case,
          passed="Multi-query attention (one kv head), kv_heads = heads, more shapes, gradients to every parameter.")


# ---------------------------------------------------------------- ModernLanguageModel

def _modern_shapes(case: ModelCase) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape, in the model's order: the embedding, each block's, the final norm, to_logits."""
    vocab, k, kv = case.vocab, case.k, case.kv_heads * (case.k // case.heads)
    hidden = round(8 * k / 3)  # the notebook's swiglu_hidden(k)
    block = {"norm1.gain": (k,), "attention.to_queries.weight": (k, k), "attention.to_keys.weight": (kv, k),
             "attention.to_values.weight": (kv, k), "attention.unify_heads.weight": (k, k), "norm2.gain": (k,),
             "ff.gate.weight": (hidden, k), "ff.up.weight": (hidden, k), "ff.down.weight": (k, hidden)}
    return {"token_embedding.weight": (vocab, k),
            **{f"blocks.{i}.{name}": shape for i in range(case.depth) for name, shape in block.items()},
            "norm.gain": (k,), "to_logits.weight": (vocab, k)}


def _expect_tables_buffers(ev: Evidence, key: str, case: ModelCase) -> None:
    """cos and sin: buffers (max_len, s/2), not saved in the state_dict."""
    __tracebackhide__ = True
    found = ev.facts.get(f"{key}.buffers")
    found = {e[0]: e for e in found if isinstance(e, list) and len(e) == 3} if isinstance(found, list) else {}
    params = modules.parameter_names(ev, key)
    shape = [case.max_len, case.k // case.heads // 2]
    for name in ("cos", "sin"):
        if name not in found:
            where = "a parameter" if name in params else "not a registered buffer"
            fail(f"{MODEL_NAME}.{name} is {where}. {said(M['modern-tables-not-buffers'])}",
                 mistake=M["modern-tables-not-buffers"])
        got = found[name][1]
        if got == [case.max_len, case.k // 2] and case.heads > 1:
            fail(f"{MODEL_NAME}.{name} has shape {tuple(got)} for {case.call}; expected (max_len, s // 2) = "
                 f"{tuple(shape)}: {M['modern-tables-head-size'].explanation}", mistake=M["modern-tables-head-size"])
        if got != shape:
            fail(f"{MODEL_NAME}.{name} has shape {tuple(got) if isinstance(got, list) else got} for {case.call}; "
                 f"expected (max_len, s // 2) = {tuple(shape)}: rotary_tables(max_len, k // heads, base).")
        if found[name][2] is not False:
            fail(f"{MODEL_NAME}.{name} is saved in the state_dict: the tables are computed from the sizes, so "
                 "register them with persistent=False.", mistake=M["modern-tables-persistent"])


def _modern_weights(ev: Evidence, run: ModelRun) -> dict[str, torch.Tensor]:
    """The parts the notebook names, registered, of the right sizes; cos and sin non-persistent buffers; the
    weights the probe loaded."""
    __tracebackhide__ = True
    case, key = run.case, f"{run.key}.model"
    modules.built(ev, key, case.call)
    modules.expect_part(ev, key, MODEL_NAME, "token_embedding", "Embedding", "nn.Embedding(vocab_size, k)")
    blocks = modules.expect_part(ev, key, MODEL_NAME, "blocks", ("ModuleList", "Sequential", "list", "tuple"),
                                 "nn.ModuleList of `depth` ModernBlocks")
    if blocks.get("kind") in ("list", "tuple") or blocks.get("count") != case.depth \
            or blocks.get("distinct") != case.depth:
        fail(f"{MODEL_NAME}.blocks should be an nn.ModuleList of {case.depth} separate ModernBlocks for depth="
             f"{case.depth}.")
    for i in range(case.depth):
        for name, how in (("norm1", "RMSNorm(k)"), ("attention", "GroupedQueryAttention(k, heads, kv_heads)"),
                          ("norm2", "RMSNorm(k)"), ("ff", "SwiGLU(k, swiglu_hidden(k))")):
            modules.expect_part(ev, f"{key}.blocks.{i}", f"{MODEL_NAME}.blocks[{i}]", name, how.split("(", 1)[0], how)
    modules.expect_part(ev, key, MODEL_NAME, "norm", "RMSNorm", "RMSNorm(k), the final norm")
    modules.expect_part(ev, key, MODEL_NAME, "to_logits", "Linear", "nn.Linear(k, vocab_size, bias=False)")
    _expect_tables_buffers(ev, key, case)
    shapes = _modern_shapes(case)
    w = modules.expect_parameters(ev, key, MODEL_NAME, shapes, run.seed, hint=modules.PARTS_HINT)
    modules.expect_parameter_count(ev, key, case.call, sum(math.prod(s) for s in shapes.values()),
                                   f"the embedding, {case.depth} blocks, the final norm and to_logits (no biases)",
                                   "Is an extra layer or a bias registered?")
    return w


def modern_lm(w: Mapping[str, torch.Tensor], case: ModelCase, tokens: torch.Tensor, cache: list | None = None, *,
              layout: str = "pre", final_norm: bool = True, causal: bool = True, mask_offset: bool = True
              ) -> tuple[torch.Tensor, list]:
    """The model composed of the oracles (F.rms_norm, the rotation, sdpa with enable_gqa, F.silu): (logits (b, t,
    vocab), cache). The keywords switch on the typical mistakes."""
    t, k = tokens.shape[1], case.k
    past = 0 if cache is None else cache[0][0].shape[2]
    cos, sin = _tables(case.max_len, k // case.heads, DEFAULT_BASE)
    mask = torch.ones(t, past + t, dtype=torch.bool)
    mask = mask.tril(diagonal=past if mask_offset else 0) if causal else mask
    x = F.embedding(tokens, w["token_embedding.weight"])  # (b, t, k)
    new_cache = []
    for i in range(case.depth):
        p = f"blocks.{i}."
        norm1, norm2 = (partial(F.rms_norm, normalized_shape=(k,), weight=w[f"{p}{n}.gain"], eps=DEFAULT_EPS)
                        for n in ("norm1", "norm2"))
        ff = partial(_swiglu, {n: w[f"{p}ff.{n}"] for n in ("gate.weight", "up.weight", "down.weight")}, k, 0)
        attend = partial(gqa, w, k, case.heads, case.kv_heads, cos=cos, sin=sin, mask=mask,
                         past=None if cache is None else cache[i], prefix=f"{p}attention.")
        if layout == "post":
            out, kv = attend(x)
            x = norm1(x + out)
            x = norm2(x + ff(x))
        elif layout == "no-residual":
            out, kv = attend(norm1(x))
            x = ff(norm2(out))
        else:
            out, kv = attend(norm1(x))
            x = x + out
            x = x + ff(norm2(x))
        new_cache.append(kv)
    if final_norm:
        x = F.rms_norm(x, (k,), w["norm.gain"], DEFAULT_EPS)
    return F.linear(x, w["to_logits.weight"]), new_cache


_MODERN_MISTAKES = ((M["modern-post-norm"], {"layout": "post", "final_norm": False}),
                    (M["modern-post-norm"], {"layout": "post"}), (M["modern-no-final-norm"], {"final_norm": False}),
                    (M["modern-no-residual"], {"layout": "no-residual"}),
                    (M["modern-no-residual"], {"layout": "no-residual", "final_norm": False}),
                    (M["modern-no-causal-mask"], {"causal": False}))

_MODERN_HINT = ("x = token_embedding(tokens); each block: x = x + attention(norm1(x), cos, sin, mask, past), then "
                "x = x + ff(norm2(x)); finally to_logits(norm(x)); the mask is causal, (t, t_past + t), "
                "tril(diagonal=t_past).")


def _modern_mistakes(w: Mapping[str, torch.Tensor], case: ModelCase, tokens: torch.Tensor, cache: list | None = None
                     ) -> list[tuple[Mistake, torch.Tensor]]:
    """The logits of the typical mistakes (with a cache, also the mask not shifted by it)."""
    offset = (M["modern-cache-mask-not-offset"], {"mask_offset": False})
    with torch.no_grad():
        return [(m, modern_lm(w, case, tokens, cache, **sw)[0])
                for m, sw in ((*_MODERN_MISTAKES, offset) if cache else _MODERN_MISTAKES)]


def _modern_logits(ev: Evidence, key: str, case: ModelCase, what: str) -> torch.Tensor:
    """The logits (b, t, vocab) recorded under key: a tensor, not a tuple."""
    __tracebackhide__ = True
    if compare.value_kind(ev, key) == "tuple":
        fail(f"{what} returned a tuple; without use_cache=True it returns the logits alone.")
    return output(ev, key, what=what, shape=(case.b, case.t, case.vocab), hint=_MODERN_HINT)


def _expect_model(ev: Evidence, run: ModelRun, structure: bool = False) -> None:
    """Structure; logits against the composed oracle (structure: those of a decoder of its parts, right or typically
    wrong, are enough); causality; the cache; gradients; the length check."""
    __tracebackhide__ = True
    case, tokens = run.case, run.tokens()
    w = _modern_weights(ev, run)
    what = f"{MODEL_NAME}.forward(tokens)"
    label = f"{case.call}, tokens {tuple(tokens.shape)}"
    logits = _modern_logits(ev, f"{run.key}.logits", case, what)
    with torch.no_grad():
        want = modern_lm(w, case, tokens)[0]
    if structure:
        if not matches_any(logits, [want, *(out for _, out in _modern_mistakes(w, case, tokens))], ev.device):
            fail(f"{MODEL_NAME} has the right parts, but its logits are not those of a decoder of them with the "
                 f"check's weights: {_MODERN_HINT}", want[0], logits[0], case=f"{label}, sequence 0")
        return
    for j in run.changed:
        changed = _modern_logits(ev, f"{run.key}.changed{j}", case, what)
        if not matches_any(changed[:, :j], [logits[:, :j]], ev.device):
            named = next((m for m, out in _modern_mistakes(w, case, tokens) if matches_any(logits, [out], ev.device)),
                         M["modern-reads-future"])
            fail(f"{MODEL_NAME} is not causal: changing the tokens from position {j} on changed the logits at "
                 f"positions 0-{j - 1}: {named.explanation}", logits[0, :j, 0], changed[0, :j, 0],
                 case=f"first logit at positions 0-{j - 1}, sequence 0", mistake=named)
    expect_close_batch(logits, want, what=what, device=ev.device, mistakes=_modern_mistakes(w, case, tokens),
                       otherwise=_MODERN_HINT, case=label)
    if run.chunks:
        _expect_model_cache(ev, run, w, logits)
    if run.upstream:
        modules.expect_differentiable(ev, f"{run.key}.logits", what)
        grads = modules.autograd(lambda leaves: modern_lm(leaves, case, tokens)[0], w, {}, run.upstream_gradient())
        modules.expect_gradients(ev, grads, owner=MODEL_NAME, case=label,
                                 oracle="the composition of PyTorch's pieces with your weights")
    if run.too_long:
        call = f"{MODEL_NAME}.forward on {case.max_len + 1} tokens with max_len={case.max_len}"
        fact = ev.facts.get(f"{run.key}.too_long")
        if not isinstance(fact, dict) or fact.get("kind") != "raised" or fact.get("type") != "ValueError":
            got = "returned" if not isinstance(fact, dict) or fact.get("kind") != "raised" else \
                f"raised {str(fact.get('type'))[:60]}"
            fail(f"{call} {got}; it should raise a ValueError. {said(M['modern-no-length-check'])}",
                 mistake=M["modern-no-length-check"])


def _expect_model_cache(ev: Evidence, run: ModelRun, w: Mapping[str, torch.Tensor], logits: torch.Tensor) -> None:
    """Each chunk with the cache of the calls before: the logits of one call, and a cache per block of
    (b, kv_heads, positions so far, s)."""
    __tracebackhide__ = True
    case, tokens = run.case, run.tokens()
    cache, start = None, 0
    for i, size in enumerate(run.chunks):
        end, key = start + size, f"{run.key}.step{i}"
        what = (f"{MODEL_NAME}.forward(tokens[:, {start}:{end}], cache=..., use_cache=True)" if start else
                f"{MODEL_NAME}.forward(tokens[:, :{end}], use_cache=True)")
        raised(ev, key, what, _MODERN_HINT)
        fact = ev.facts.get(key)
        if compare.value_kind(ev, key) != "tuple" or not isinstance(fact, dict) or fact.get("length") != 2:
            fail(f"{what} should return the pair (logits, cache).")
        step = output(ev, f"{key}.0", what=what, shape=(case.b, size, case.vocab), hint=_MODERN_HINT)
        if not matches_any(step, [logits[:, start:end]], ev.device):
            named = next((m for m, out in _modern_mistakes(w, case, tokens[:, start:end], cache)
                          if matches_any(step, [out], ev.device)), M["modern-cache-differs"])
            fail(f"{what} does not give the logits one call on all the tokens gives at those positions: "
                 f"{named.explanation}", logits[0, start:end], step[0],
                 case=f"{case.call}, tokens {start}-{end - 1} after a cache of {start}, sequence 0", mistake=named)
        entries = ev.facts.get(f"{key}.1")
        if compare.value_kind(ev, f"{key}.1") != "tuple" or not isinstance(entries, dict) \
                or entries.get("length") != case.depth:
            fail(f"The cache {what} returned is not a list of {case.depth} (keys, values) pairs, one per block.")
        want = (case.b, case.kv_heads, end, case.k // case.heads)
        for block in range(case.depth):
            for j, name in enumerate(("keys", "values")):
                value = compare.tensor(ev, f"{key}.1.{block}.{j}")
                if value is None or tuple(value.shape) != want:
                    fail(f"The cached {name} of block {block} after {end} positions have shape "
                         f"{None if value is None else tuple(value.shape)}; expected (b, kv_heads, t, s) = {want}: "
                         "each block's (keys, values) as its attention returns them.")
        with torch.no_grad():
            cache = modern_lm(w, case, tokens[:, start:end], cache)[1]
        start = end


each_case(probes.modern_lm_structure, partial(_expect_model, structure=True),
          passed="token_embedding, blocks (ModernBlocks of norm1, attention, norm2, ff), norm and to_logits without "
                 "biases; cos and sin buffers (max_len, s/2) left out of the state_dict; logits (b, t, vocab_size).")
each_case(probes.modern_lm_oracle, _expect_model,
          passed="Your weights in a composition of nn.RMSNorm, the rotation, F.scaled_dot_product_attention("
                 "enable_gqa=True) and F.silu, pre-norm and causal: the same logits.")
each_case(probes.modern_lm_cache, _expect_model,
          passed="A prompt of 3 tokens, then 2, 1 and 2 with the cache: the logits of one call, caches of "
                 "(b, kv_heads, t, s) per block; changing later tokens changes no earlier logit.")
each_case(probes.modern_lm_hidden, _expect_model,
          passed="Depth 3 with one kv head, gradients to every parameter, a ValueError past max_len, and more "
                 "shapes with the cache.")
