"""Judges for assignment 09 (probes in course/checks/modern_decoder.py): oracles made of PyTorch's pieces with the
check's weights (F.rms_norm, F.silu, complex multiplication, F.scaled_dot_product_attention(enable_gqa=True), their
composition), one declaration per check.

The typical mistakes are written once, beside each part's oracle, as edits of the reference answers in
course/modern_decoder.py with the message a student reads (course/judges/variants.py): the judges name a mistake by
running its variant on the case's inputs with the check's weights; catalogue/modern_decoder.py grades the same
variants. When two variants match, the first declared is named. Mistakes named by what the probe recorded (a dtype,
a shape, a stored attribute, a raised error) are declared with WRITTEN.mistake; catalogue/ writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import torch
import torch.nn.functional as F

from course.checks import compare, modules
from course.checks import modern_decoder as probes
from course.checks.compare import Mistake, OnGpus, expect_close, expect_close_batch, fail, matches_any, output
from course.checks.evidence import Evidence, fact_key, item_key
from course.checks.kinds import Built, Case, ModelRun
from course.checks.modern_decoder import ATTENTION_NAME, MODEL_NAME, AttentionCase, ModernCase
from course.judges import judge
from course.judges.kinds import (
    Advice,
    ForwardOracle,
    Oracle,
    against,
    against_forward,
    block_call,
    each_case,
    expect_forward_gradients,
    expect_linear_layers,
)
from course.judges.models import (
    ModelMistakes,
    ModelOracle,
    expect_blocks,
    expect_model,
    expect_model_gradients,
    expect_model_steps,
    variant,
)
from course.judges.oracles import dense
from course.judges.variants import Variants, simulators

DEFAULT_EPS = 1e-6
DEFAULT_BASE = 10000.0
WRITTEN = Variants(__name__, reference="course.modern_decoder")
edit = WRITTEN.edit


def _bias_free(ev: Evidence, key: str, what: str, owner: str, layers: Mapping[str, tuple[int, int, str]], seed: int,
               bias: Mistake) -> dict[str, torch.Tensor]:
    """The weights of the separate bias-free nn.Linear layers, name: (n_in, n_out, how), the module under key holds."""
    __tracebackhide__ = True
    linear = {name: (i, o, False, how, bias) for name, (i, o, how) in layers.items()}
    w = expect_linear_layers(ev, key, what, owner, linear, f"{', '.join(layers)}: each needs its own nn.Linear.", seed)
    modules.expect_parameter_count(ev, key, what, sum(i * o for i, o, _ in layers.values()), "its layers' weights",
                                   "Are extra layers or biases registered?")
    return w


# ---------------------------------------------------------------- RMSNorm
# Edits change the reference RMSNorm of course/modern_decoder.py:
#     def __init__(self, k: int, eps: float = 1e-6): ... self.gain = nn.Parameter(torch.ones(k))
#     forward: return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.gain
# A gain or eps under another name, and a bias, are structure: catalogue/modern_decoder.py writes them.

RMS_ROOT = "torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)"
RMS_RETURN = f"return x * {RMS_ROOT} * self.gain"

edit("rms-eps-outside-the-root", "RMSNorm", (RMS_ROOT, "1 / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + self.eps)"),
     mistake="rms-eps-outside-root",
     says="eps is added outside the square root, x / (sqrt(mean(x²)) + eps); it belongs inside: x / sqrt(mean(x²) + "
          "eps), so that it still protects inputs near 0.")
edit("rms-subtracts-the-mean", "RMSNorm",
     (RMS_RETURN, "x = x - x.mean(dim=-1, keepdim=True)\n        " + RMS_RETURN), mistake="rms-mean-subtracted",
     says="the mean is subtracted, as LayerNorm does. RMSNorm only divides by the root mean square: x / sqrt(mean(x²) "
          "+ eps) · gain, the mean kept.")
edit("rms-sum-of-squares", "RMSNorm", (".mean(dim=-1, keepdim=True)", ".sum(dim=-1, keepdim=True)"),
     mistake="rms-sum-not-mean", says="the squares are summed, not averaged: x.pow(2).mean(dim=-1, keepdim=True).")
edit("rms-forgets-the-gain", "RMSNorm", (" * self.gain", ""), mistake="rms-no-gain",
     says="the gain is not applied: multiply the normalised x by self.gain.")
edit("rms-over-positions", "RMSNorm", ("mean(dim=-1, keepdim=True)", "mean(dim=1, keepdim=True)"),
     mistake="rms-wrong-dim",
     says="the mean square is taken over the wrong dimension: each position's k features are normalised together, "
          "mean(dim=-1, keepdim=True).")
edit("rms-over-everything", "RMSNorm", ("mean(dim=-1, keepdim=True)", "mean()"), mistake="rms-wrong-dim")
edit("rms-layernorm-eps", "RMSNorm", ("eps: float = 1e-6", "eps: float = 1e-5"), mistake="rms-default-eps",
     says="the default eps is not 1e-6: __init__(self, k, eps=1e-6).")
edit("rms-adam-eps", "RMSNorm", ("eps: float = 1e-6", "eps: float = 1e-8"), mistake="rms-default-eps")
RMS_EPS_NOT_STORED = WRITTEN.mistake(
    "rms-eps-not-stored", says="the exercise asks RMSNorm to store the eps it is given as self.eps (the default 1e-6), "
                               "where anyone reading the module finds it.")
RMS_GAIN_NOT_ONES = WRITTEN.mistake(
    "rms-gain-not-ones", says="the gain does not start at ones: a new RMSNorm should only rescale its input (a gain of "
                              "zeros outputs zeros and passes no gradient back to x). Create it as self.gain = "
                              "nn.Parameter(torch.ones(k)).")


def _rms_norm(w: Mapping[str, torch.Tensor], k: int, eps: float = DEFAULT_EPS, x: torch.Tensor | None = None, *,
              prefix: str = "") -> torch.Tensor:
    """F.rms_norm with the gain in w (after prefix) and eps."""
    return F.rms_norm(x, (k,), w[f"{prefix}gain"], eps)


_RMS_MISTAKES = simulators(WRITTEN, "RMSNorm")


def _norm_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """The norm holds one parameter, gain (k,), and nothing else; the values the probe loaded."""
    __tracebackhide__ = True
    k, what = built.args[0], block_call(built, probes.NORM_NAME)
    modules.built(ev, built.key, what)
    w = modules.expect_parameters(ev, built.key, what, {"gain": (k,)}, built.seed,
                                  hint="Register it in __init__: self.gain = nn.Parameter(torch.ones(k)).")
    modules.expect_parameter_count(ev, built.key, what, k, "one gain per feature, k", "RMSNorm has no bias.")
    return w


_RMS_HINT = "forward should compute x / sqrt(mean(x², dim=-1, keepdim=True) + eps) · gain, over any leading dimensions."
RMS = ForwardOracle(probes.NORM_NAME, "RMS normalisation", _norm_weights, _rms_norm, "F.rms_norm with your gain",
                    simulators=lambda *_, **__: _RMS_MISTAKES, advice=Advice(otherwise=_RMS_HINT, hint=_RMS_HINT))


def _expect_as_built(ev: Evidence) -> None:
    """Each RMSNorm built starts with a gain of ones, as the exercise prescribes (recorded before the check's
    weights replaced it), and stores the eps it was given as self.eps."""
    __tracebackhide__ = True
    for item in probes.rms_norm_oracle.runs:
        built = item.module
        if ev.facts.get(fact_key(built.key, "is_module")) is not True:
            continue
        eps, stored = (*built.args[1:], DEFAULT_EPS)[0], ev.facts.get(fact_key(built.key, "eps"))
        if stored != eps:
            fail(f"{block_call(built, probes.NORM_NAME)} stores self.eps = {stored} (None: no such number), not "
                 f"{eps:g}. {RMS_EPS_NOT_STORED.explanation}", mistake=RMS_EPS_NOT_STORED)
        k, found = built.args[0], ev.facts.get(fact_key(built.key, "initial_gain"))
        if found != [1.0] * k:
            shown = torch.tensor(found) if isinstance(found, list) and all(
                isinstance(v, float | int) for v in found) else found
            fail(f"{block_call(built, probes.NORM_NAME)}: {RMS_GAIN_NOT_ONES.explanation}", torch.ones(k), shown,
                 case=f"the gain as {block_call(built, probes.NORM_NAME)} builds it", mistake=RMS_GAIN_NOT_ONES)


against_forward(probes.rms_norm_oracle, RMS, then=_expect_as_built, gradients=expect_forward_gradients,
                passed="Off-centre, 100 times larger, tiny, eps=0.1 and 4-D inputs: nn.RMSNorm; gradients too; a gain "
                       "that starts at ones, self.eps as given.")
against_forward(probes.rms_norm_hidden, RMS, gradients=expect_forward_gradients,
                passed="Inputs times 1e-4 (where eps matters) and 1e4, the default eps 1e-6, gradients.")


# ---------------------------------------------------------------- rotary_tables
# Edits change the reference rotary_tables of course/modern_decoder.py:
#     theta = base ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)
#     angles = torch.arange(t, dtype=torch.float64).unsqueeze(1) * theta
#     return angles.cos().float().to(device), angles.sin().float().to(device)
# Float64 tables, full-width tables and the device are named by what the tables are (dtype, shape, the stand-in
# GPUs), not by their values: catalogue/modern_decoder.py writes those mistakes.

THETA = "base ** (-torch.arange(0, s, 2, dtype=torch.float64) / s)"
TABLES_RETURN = "return angles.cos().float().to(device), angles.sin().float().to(device)"

edit("tables-exponent-i-over-s", "rotary_tables", ("torch.arange(0, s, 2, dtype", "torch.arange(0, s // 2, dtype"),
     mistake="rotary-exponent-i",
     says="the frequencies are base^(−i/s); they are θ_i = base^(−2i/s) for i = 0 .. s/2 − 1, i.e. base ** "
          "(-torch.arange(0, s, 2) / s).")
edit("tables-positions-from-one", "rotary_tables", ("torch.arange(t, dtype", "torch.arange(1, t + 1, dtype"),
     mistake="rotary-positions-from-one",
     says="the positions start at 1; they are 0 .. t − 1 (torch.arange(t)), so position 0 is not rotated.")
edit("tables-growing-frequencies", "rotary_tables", ("base ** (-torch.arange", "base ** (torch.arange"),
     mistake="rotary-positive-exponent",
     says="the frequencies are base^(+2i/s), which grow with i; they shrink: θ_i = base^(−2i/s).")
edit("tables-base-hard-coded", "rotary_tables", ("theta = base **", "theta = 10000.0 **"),
     mistake="rotary-base-ignored", says="the base is fixed at 10000 instead of taken from the `base` argument.")
edit("tables-angles-in-float32", "rotary_tables",
     (THETA, "base ** (-torch.arange(0, s, 2, dtype=torch.float32) / s)"),
     ("torch.arange(t, dtype=torch.float64)", "torch.arange(t, dtype=torch.float32)"), mistake="rotary-angles-float32",
     says="the angles are computed in float32, which keeps about seven significant digits: at position 2,047 an angle "
          "is off by up to 7e-5 radians. Compute theta and the positions in torch.float64 on the CPU, and convert the "
          "tables with .float() only at the end.")
edit("tables-sin-first", "rotary_tables",
     (TABLES_RETURN, "return angles.sin().float().to(device), angles.cos().float().to(device)"),
     mistake="rotary-tables-swapped", says="cos and sin are swapped: return (cos, sin), in that order.")
TABLES_FLOAT64 = WRITTEN.mistake(
    "rotary-tables-float64",
    says="the tables are float64: compute the angles in float64 on the CPU for precision, then return cos and sin as "
         "float32 on the device (.float().to(device)): Apple's GPU has no float64.")
TABLES_FULL_WIDTH = WRITTEN.mistake(
    "rotary-tables-full-width",
    says="the tables are (t, s): the angles repeated for both halves. Each pair (x_i, x_{i+s/2}) shares one angle, "
         "so the tables are (t, s // 2).")
TABLES_DEVICE_IGNORED = WRITTEN.mistake(
    "rotary-tables-device-ignored",
    says="the tables are not on the device asked for: move them there with .to(device) at the end (a CPU grader "
         "passes them, the student's GPU then refuses to mix them with the queries and keys).")
TABLES_FLOAT64_ON_MPS = WRITTEN.mistake(
    "rotary-tables-float64-on-mps",
    says="float64 was computed on the device: compute the angles in float64 on the CPU (no device= on the aranges), "
         "then .float().to(device), as Apple's GPU (MPS) has no float64.")


def _tables(t: int, s: int, base: float) -> torch.Tensor:
    """cos and sin (t, s // 2) float32 of position · base^(−2i/s), computed in float64, stacked (2, t, s // 2)."""
    theta = base ** (-2.0 * torch.arange(s // 2, dtype=torch.float64) / s)  # (s/2,)
    angles = torch.arange(t, dtype=torch.float64)[:, None] * theta  # (t, s/2)
    return torch.stack([angles.cos(), angles.sin()]).float()


def _tables_mistakes(t: int, s: int, base: float) -> list[tuple[Mistake, torch.Tensor]]:
    """What each written mistake of rotary_tables returns, (cos, sin) stacked as _tables stacks them."""
    with torch.no_grad():
        return [(w.mistake, torch.stack(w.run(t, s, base)).float()) for w in WRITTEN.of("rotary_tables")]


_TABLES_HINT = ("Return (cos, sin), each (t, s // 2) float32: cos and sin of position · θ_i, positions 0 .. t − 1 as "
                "rows, θ_i = base^(−2i/s) for i = 0 .. s/2 − 1 as columns, computed in float64 on the CPU, then "
                ".float().to(device).")


def _expect_tables(ev: Evidence, case: Case) -> None:
    """The pair (cos, sin) recorded for the case: float32 tables (t, s // 2) of the formula's angles."""
    __tracebackhide__ = True
    inputs = dict(case.inputs())
    t, s, base = inputs["t"], inputs["s"], inputs.get("base", DEFAULT_BASE)
    what = f"rotary_tables({t}, {s}, base={base:g})"
    compare.expect_tuple(ev, case.key, what, f"{what} should return a pair. {_TABLES_HINT}", 2, compare.NOT_A_TENSOR)
    if any(getattr(compare.tensor(ev, item_key(case.key, i)), "dtype", None) == torch.float64 for i in range(2)):
        fail(f"{what}: {TABLES_FLOAT64.explanation}", mistake=TABLES_FLOAT64)
    found = [output(ev, f"{case.key}.{i}", what=f"The {name} table of {what}", shape=(t, s // 2), dtype=torch.float32,
                    hint=_TABLES_HINT, shape_hints={(t, s): TABLES_FULL_WIDTH})
             for i, name in enumerate(("cos", "sin"))]
    # the CPU's tolerance on every grader: the exercise computes the tables in float64 on the CPU whatever the device,
    # so a GPU grader must still tell float32 angles (7e-5 rad off at position 2,047) from right ones
    expect_close(torch.stack(found), _tables(t, s, base), what=f"{what}, (cos, sin) stacked,", device="cpu",
                 mistakes=_tables_mistakes(t, s, base), otherwise=_TABLES_HINT)


each_case(probes.rotary_tables, _expect_tables,
          passed="cos and sin of position · base^(−2i/s), float32 (t, s // 2), for two bases; on a stand-in CUDA and "
                 "MPS the tables are made on the device asked for, with no float64 there.",
          then=partial(compare.expect_on_gpus, seen_on=OnGpus(
              "tables", "rotary_tables({}, {}, device=...)".format(*probes.TABLES_ON_GPU), TABLES_DEVICE_IGNORED,
              TABLES_FLOAT64_ON_MPS)))
each_case(probes.rotary_tables_hidden, _expect_tables,
          passed="More sizes (64 positions, one position, another base), on the notebook's device.")


# ---------------------------------------------------------------- apply_rotary
# Edits change the reference apply_rotary of course/modern_decoder.py:
#     cos, sin = cos[offset : offset + t], sin[offset : offset + t]
#     first, second = x[..., :half], x[..., half:]
#     return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)

ROTATED = "first * cos - second * sin, first * sin + second * cos"
HALVES = "first, second = x[..., :half], x[..., half:]"
EVEN_ODD = "first, second = x[..., 0::2], x[..., 1::2]"

# GPT-J's convention: even and odd features paired, the output interleaved again
edit("rotary-interleaved-as-gpt-j", "apply_rotary", (HALVES, EVEN_ODD),
     (f"torch.cat([{ROTATED}], dim=-1)", f"torch.stack([{ROTATED}], dim=-1).flatten(-2)"), mistake="rotary-interleaved",
     says="the pairs are interleaved, (x_{2i}, x_{2i+1}); this course rotates halves: feature i with feature i + s/2, "
          "x[..., :s//2] with x[..., s//2:].")
edit("rotary-interleaved-pairs", "apply_rotary", (HALVES, EVEN_ODD), mistake="rotary-interleaved")
edit("rotary-turns-backwards", "apply_rotary", (ROTATED, "first * cos + second * sin, -first * sin + second * cos"),
     mistake="rotary-backwards",
     says="the rotation goes backwards (the sign of sin is flipped): the first half becomes x1·cos − x2·sin and the "
          "second x1·sin + x2·cos.")
edit("rotary-halves-swapped", "apply_rotary", (ROTATED, "first * sin + second * cos, first * cos - second * sin"),
     mistake="rotary-halves-swapped",
     says="the two halves of the output are swapped: torch.cat([x1·cos − x2·sin, x1·sin + x2·cos], dim=-1), the first "
          "half first.")
# with offset 0 it is right; named only where an offset is given
edit("rotary-offset-ignored", "apply_rotary",
     ("cos[offset : offset + t], sin[offset : offset + t]", "cos[:t], sin[:t]"), mistake="rotary-offset-ignored",
     says="the offset is ignored: x holds positions offset .. offset + t − 1, so use rows cos[offset : offset + t] "
          "and sin[offset : offset + t].")


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """The oracle: (x1 + i·x2) · (cos + i·sin) on the halves of x (..., t, s), table rows offset .. offset + t − 1;
    [real, imag] concatenated (..., t, s)."""
    t, half = x.shape[-2], x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:]) * torch.complex(cos[offset:offset + t], sin[offset:offset + t])
    return torch.cat([z.real, z.imag], dim=-1)  # (..., t, s)


_ROTARY_HINT = ("Take rows offset .. offset + t − 1 of cos and sin (one angle per pair (x_i, x_{i+s/2})) and return "
                "torch.cat([x1·cos − x2·sin, x1·sin + x2·cos], dim=-1), x1 = x[..., :s//2], x2 = x[..., s//2:].")

ROTARY = Oracle("apply_rotary(x, cos, sin, offset)", rotate, "rotation as complex multiplication",
                shape=lambda x, **_: tuple(x.shape), advice=Advice(otherwise=_ROTARY_HINT, hint=_ROTARY_HINT),
                mistakes=lambda **inputs: WRITTEN.outputs("apply_rotary", **inputs))

against(probes.apply_rotary_oracle, ROTARY,
        passed="3-D and 4-D x, random angles, offsets 0 and 4: each pair (x_i, x_{i+s/2}) rotated.")
against(probes.apply_rotary_hidden, ROTARY,
        passed="More shapes (5-D, a single position, 2-D), offsets up to 20 and tables longer than needed.")


@judge(probes.apply_rotary_offset.name)
def _expect_relative(ev: Evidence) -> None:
    """Lengths kept; offset=2 rotates rows 2-4 as positions 2-4; q·k depends on the distance alone."""
    __tracebackhide__ = True
    given = {case.key: dict(case.inputs()) for case in probes.apply_rotary_offset.cases}
    got = {key: output(ev, key, what=f"apply_rotary(x of shape {tuple(x['x'].shape)}, cos, sin, offset="
                       f"{x.get('offset', 0)})", shape=tuple(x["x"].shape), hint=_ROTARY_HINT)
           for key, x in given.items()}
    keys_in, cos, sin = given["keys"].values()
    first, last, start = given["q2"]["offset"], given["q5"]["offset"], given["rows"]["offset"]
    end, keys = start + given["rows"]["x"].shape[-2], got["keys"]
    ignored = [(WRITTEN["rotary-offset-ignored"], rotate(keys_in[..., start:end, :], cos, sin, 0))]
    for found, want, what, wrong in (
            (keys.norm(dim=-1), keys_in.norm(dim=-1), "The lengths of the rotated keys", []),
            (got["rows"], keys[..., start:end, :], f"Rows {start} .. {end - 1} of the keys rotated with offset={start}",
             ignored),
            ((got[f"q{last}"] * got["keys_shifted"]).sum(-1), (got[f"q{first}"] * keys).sum(-1),
             f"q·k with the query moved from position {first} to {last} and every key by {last - first}", [])):
        expect_close(found, want, what=what, device=ev.device, mistakes=wrong, otherwise="A rotation keeps lengths, "
                     "and with rows offset .. offset + t − 1 of cos and sin, q·k depends only on the distance.")
    right = rotate(keys_in, cos, sin)
    if not matches_any(keys, [right, *(out for _, out in WRITTEN.outputs("apply_rotary", x=keys_in, cos=cos, sin=sin))],
                       ev.device):
        fail("apply_rotary keeps lengths and is relative, but it is not a rotation of pairs by the tables' angles: "
             + _ROTARY_HINT, right, keys, case="the keys")


# ---------------------------------------------------------------- SwiGLU
# Edits change the reference SwiGLU of course/modern_decoder.py:
#     forward: return self.down(F.silu(self.gate(x)) * self.up(x))
# Biases are structure: catalogue/modern_decoder.py writes them.

SWIGLU_RETURN = "return self.down(F.silu(self.gate(x)) * self.up(x))"

edit("swiglu-silu-on-up", "SwiGLU", (SWIGLU_RETURN, "return self.down(F.silu(self.up(x)) * self.gate(x))"),
     mistake="swiglu-gate-swapped",
     says="silu is applied to the wrong branch: silu(gate(x)) * up(x), the gate through silu, not up.")
edit("swiglu-relu", "SwiGLU", ("F.silu(", "F.relu("), mistake="swiglu-relu",
     says="a ReLU is used where SwiGLU uses silu (x · sigmoid(x), F.silu).")
edit("swiglu-sigmoid-as-glu", "SwiGLU", ("F.silu(", "torch.sigmoid("), mistake="swiglu-sigmoid",
     says="a sigmoid is used (the original GLU); SwiGLU uses silu(x) = x · sigmoid(x).")
edit("swiglu-gate-without-up", "SwiGLU", (SWIGLU_RETURN, "return self.down(F.silu(self.gate(x)))"),
     mistake="swiglu-no-gate",
     says="there is no gating product: SwiGLU multiplies silu(gate(x)) with up(x) before down.")
edit("swiglu-without-the-product", "SwiGLU", (SWIGLU_RETURN, "return self.down(F.silu(self.up(x)))"),
     mistake="swiglu-no-gate")
SWIGLU_BIAS = WRITTEN.mistake("swiglu-bias", says="the layers have biases: create them with bias=False.")


def _swiglu(w: Mapping[str, torch.Tensor], k: int, hidden: int, x: torch.Tensor | None = None, *, prefix: str = ""
            ) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) with the weights in w (after prefix)."""
    return dense(w, f"{prefix}down", F.silu(dense(w, f"{prefix}gate", x)) * dense(w, f"{prefix}up", x))


_SWIGLU_MISTAKES = simulators(WRITTEN, "SwiGLU")


def _swiglu_weights(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """gate and up nn.Linear(k, hidden, bias=False), down nn.Linear(hidden, k, bias=False), nothing else."""
    k, hidden = built.args
    into = (k, hidden, "nn.Linear(k, hidden, bias=False)")
    layers = {"gate": into, "up": into, "down": (hidden, k, "nn.Linear(hidden, k, bias=False)")}
    return _bias_free(ev, built.key, block_call(built, probes.SWIGLU_NAME), probes.SWIGLU_NAME, layers, built.seed,
                      SWIGLU_BIAS)


_SWIGLU_HINT = "forward should compute self.down(F.silu(self.gate(x)) * self.up(x))."
SWIGLU = ForwardOracle(probes.SWIGLU_NAME, "SwiGLU", _swiglu_weights, _swiglu, "F.linear and F.silu with your weights",
                       simulators=lambda *_, **__: _SWIGLU_MISTAKES,
                       advice=Advice(otherwise=_SWIGLU_HINT, hint=_SWIGLU_HINT))

against_forward(probes.swiglu_oracle, SWIGLU, gradients=expect_forward_gradients,
                passed="down(silu(gate(x)) · up(x)) on 3-D and 4-D inputs; gradients reach x and every weight.")
against_forward(probes.swiglu_hidden, SWIGLU, gradients=expect_forward_gradients,
                passed="More sizes (hidden below k, 8k/3), on the notebook's device, with gradients.")


# ---------------------------------------------------------------- grouped-query attention
# Edits change the reference GroupedQueryAttention.forward of course/modern_decoder.py:
#     offset = 0 if past is None else past[0].shape[2]
#     queries = apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)  (keys the same, g heads)
#     values = split_heads(self.to_values(x), self.kv_heads); past's keys and values concatenated before them
#     out = F.scaled_dot_product_attention(queries, keys.repeat_interleave(group, dim=1),
#                                          values.repeat_interleave(group, dim=1), attn_mask=mask)
# Each runs with the check's weights on the case's inputs, and the oracle's cache as past. A cache of every query
# head is named by its shape; biases, sizes not checked, head counts not stored are structure: catalogue/ writes them.

QUERIES = "queries = apply_rotary(split_heads(self.to_queries(x), self.heads), cos, sin, offset)"
KEYS = "keys = apply_rotary(split_heads(self.to_keys(x), self.kv_heads), cos, sin, offset)"
VALUES = "values = split_heads(self.to_values(x), self.kv_heads)"
REPEATED_KEYS = "queries, keys.repeat_interleave(group, dim=1),"
REPEATED_VALUES = "values.repeat_interleave(group, dim=1), attn_mask=mask)"

# first: its output is right where no cache is given, and its keys are those of the unrotated keys below
edit("gqa-caches-unrotated-keys", "GroupedQueryAttention",
     (KEYS, "keys = split_heads(self.to_keys(x), self.kv_heads)  # rotated below"),
     (REPEATED_KEYS, "queries, apply_rotary(keys, cos, sin).repeat_interleave(group, dim=1),"),
     mistake="gqa-cache-unrotated",
     says="the cache holds the keys before their rotation; cache the rotated keys, so that a later call rotates only "
          "its new keys.")
edit("gqa-offset-ignored", "GroupedQueryAttention", ("offset = 0 if past is None else past[0].shape[2]", "offset = 0"),
     mistake="gqa-cache-offset-ignored",
     says="with a cache of t_past positions, the new queries and keys are rotated from position 0: they sit at "
          "positions t_past .. t_past + t − 1, so rotate with offset = past[0].shape[2].")
edit("gqa-repeat-tiles-heads", "GroupedQueryAttention", (REPEATED_KEYS, "queries, keys.repeat(1, group, 1, 1),"),
     (REPEATED_VALUES, "values.repeat(1, group, 1, 1), attn_mask=mask)"), mistake="gqa-repeat-order",
     says="the key/value heads are repeated in the wrong order (.repeat tiles them, so query head j reads kv head j % "
          "kv_heads). Each kv head serves a run of heads/kv_heads consecutive query heads: repeat_interleave(heads // "
          "kv_heads, dim=1).")
edit("gqa-rotates-values", "GroupedQueryAttention",
     (VALUES, "values = apply_rotary(split_heads(self.to_values(x), self.kv_heads), cos, sin, offset)"),
     mistake="gqa-values-rotated",
     says="the values are rotated too: rotation encodes positions in the queries and keys, whose dot products it "
          "makes relative; the values are not rotated.")
edit("gqa-keys-not-rotated", "GroupedQueryAttention", (KEYS, "keys = split_heads(self.to_keys(x), self.kv_heads)"),
     mistake="gqa-not-rotated",
     says="the queries or the keys are not rotated: apply_rotary to both, at the positions they hold.")
edit("gqa-queries-not-rotated", "GroupedQueryAttention",
     (QUERIES, "queries = split_heads(self.to_queries(x), self.heads)"), mistake="gqa-not-rotated")
edit("gqa-nothing-rotated", "GroupedQueryAttention", (QUERIES, "queries = split_heads(self.to_queries(x), self.heads)"),
     (KEYS, "keys = split_heads(self.to_keys(x), self.kv_heads)"), mistake="gqa-not-rotated")
edit("gqa-mask-ignored", "GroupedQueryAttention", (", attn_mask=mask)", ")"), mistake="gqa-mask-ignored",
     says="the mask is ignored: pass it on, attn_mask=mask.")
edit("gqa-scaled-by-model-size", "GroupedQueryAttention",
     (REPEATED_VALUES, REPEATED_VALUES[:-1] + ",\n" + " " * 45 + "scale=1 / math.sqrt(x.shape[-1]))"),
     mistake="gqa-scaled-by-model-size",
     says="the scores are divided by √k, the model size; each head's dot products are over s = k // heads features: "
          "divide by √s (the default of F.scaled_dot_product_attention).")
GQA_CACHE_REPEATED = WRITTEN.mistake(
    "gqa-cache-repeated",
    says="the cache holds the keys and values after they were repeated for every query head, (b, heads, t, s); "
         "grouped-query attention caches only the kv_heads heads, (b, kv_heads, t, s): that is the memory it saves. "
         "Repeat them after caching.")
GQA_BIAS = WRITTEN.mistake("gqa-bias", says="the projections have biases: create them with bias=False.")
GQA_NO_DIVISIBILITY_CHECK = WRITTEN.mistake(
    "gqa-no-divisibility-check",
    says="the constructor accepts sizes that do not divide: raise a ValueError unless heads divides k and kv_heads "
         "divides heads.")
GQA_HEADS_NOT_STORED = WRITTEN.mistake(
    "gqa-heads-not-stored",
    says="the exercise asks the layer to store the numbers it was built with, as integers: self.heads = heads and "
         "self.kv_heads = kv_heads (a model, and anyone reading the layer, finds its sizes there).")
_GQA_MISTAKES = simulators(WRITTEN, "GroupedQueryAttention")


def gqa(w: Mapping[str, torch.Tensor], heads: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
        mask: torch.Tensor, past: tuple | None = None, *, prefix: str = ""
        ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Rotated queries and keys, then F.scaled_dot_product_attention(enable_gqa=True): (out (b, t, k), (keys, values)
    (b, kv_heads, T, s)), kv_heads as many as the weights of to_keys (after prefix) make."""
    start, s = 0 if past is None else past[0].shape[2], x.shape[-1] // heads

    def project(name: str) -> torch.Tensor:
        y = dense(w, prefix + name, x)  # (b, t, n·s)
        return y.view(*y.shape[:2], -1, s).transpose(1, 2)  # (b, n, t, s)

    q, keys, values = rotate(project("to_queries"), cos, sin, start), rotate(project("to_keys"), cos, sin, start), \
        project("to_values")
    if past is not None:
        keys, values = torch.cat([past[0], keys], dim=2), torch.cat([past[1], values], dim=2)  # (b, g, T, s)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)  # (b, h, t, s)
    return dense(w, f"{prefix}unify_heads", out.transpose(1, 2).flatten(2)), (keys, values)  # (b, t, k)


def _gqa_mistakes(w: Mapping[str, torch.Tensor], case: AttentionCase, **inputs: object
                  ) -> list[tuple[Mistake, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]]:
    """(mistake, out, (keys, values)) of each written mistake, built as the case builds the layer, run on inputs."""
    with torch.no_grad():
        return [(m, *run(w, case.layer.k, case.layer.heads, case.layer.kv_heads, **inputs)) for m, run in _GQA_MISTAKES]


_GQA_HINT = ("forward(x, cos, sin, mask, past=None): rotate queries and keys at offset t_past, cache (keys, values) "
             "of kv_heads heads, repeat_interleave them to `heads`, sdpa(attn_mask=mask), unify_heads; return both.")


def _expect_gqa_case(ev: Evidence, case: AttentionCase | str, structure: bool = False) -> None:
    """The structure; each call (x; with a prefix, x[:, :prefix], then the rest with its cache): out (b, t, k) against
    the oracle (structure: or a typical mistake's), the cache (keys, values) (b, kv_heads, t_past + t, s) against the
    oracle's; the gradients. "indivisible": sizes that do not divide raise a ValueError."""
    __tracebackhide__ = True
    if case == "indivisible":
        for key, sizes in (("indivisible_k", "10, heads=4, kv_heads=2"), ("indivisible_heads", "12, 4, 3")):
            compare.expect_value_error(ev, key, f"{ATTENTION_NAME}({sizes})", GQA_NO_DIVISIBILITY_CHECK)
        return
    k, heads, g = case.layer.k, case.layer.heads, case.layer.kv_heads
    into = (k, k, "nn.Linear(k, k, bias=False)")
    kv = (k, g * (k // heads), "nn.Linear(k, kv_heads * s, bias=False), s = k // heads")
    w = _bias_free(ev, fact_key(case.key, "module"), case.call, ATTENTION_NAME,
                   {"to_queries": into, "to_keys": kv, "to_values": kv, "unify_heads": into}, case.seed, GQA_BIAS)
    stored = {name: ev.facts.get(fact_key(fact_key(case.key, "module"), name)) for name in ("heads", "kv_heads")}
    if structure and stored != {"heads": heads, "kv_heads": g}:
        fail(f"{case.call} stores self.heads = {stored['heads']} and self.kv_heads = {stored['kv_heads']} (None: no "
             f"such integer attribute). {GQA_HEADS_NOT_STORED.explanation}", mistake=GQA_HEADS_NOT_STORED)
    x, cos, sin, mask = case.inputs().values()
    right, p = None, case.prefix
    calls = (("full", slice(None), "x"), ("first", slice(p), f"x[:, :{p}]"), ("second", slice(p, None), f"x[:, {p}:]"))
    for name, rows, shown in calls[:3 if p else 1]:
        past = right if name == "second" else None
        inputs = {"x": x[:, rows], "cos": cos, "sin": sin, "mask": mask[rows, :rows.stop], "past": past}
        key, label = fact_key(case.key, name), f"x {tuple(inputs['x'].shape)}, {case.mask} mask"
        what = f"{case.call}.forward({shown}, cos, sin, mask{f', past=(the cache of x[:, :{p}])' if past else ''})"
        compare.expect_tuple(ev, key, what, f"{what} should return (out, (keys, values)). {_GQA_HINT}", 2)
        compare.expect_tuple(ev, item_key(key, 1), what, f"Its cache should be (keys, values). {_GQA_HINT}", 2)
        out = output(ev, item_key(key, 0), what=what, shape=tuple(inputs["x"].shape), hint=_GQA_HINT)
        shape = (x.shape[0], g, out.shape[1] + (0 if past is None else past[0].shape[2]), k // heads)
        repeated = {(x.shape[0], heads, *shape[2:]): GQA_CACHE_REPEATED} if heads != g else {}
        cache = [output(ev, f"{key}.1.{i}", what=f"The cached {part} of {what}", shape=shape, hint=_GQA_HINT,
                        shape_hints=repeated) for i, part in enumerate(("keys", "values"))]
        with torch.no_grad():
            want, right = gqa(w, heads, **inputs)
        fits = all(matches_any(got, [expected], ev.device)
                   for got, expected in zip((out, *cache), (want, *right), strict=True))
        wrong = [] if fits else _gqa_mistakes(w, case, **inputs)  # the variants run only for a wrong output or cache
        if structure and matches_any(out, [want, *(found for _, found, _ in wrong)], ev.device):
            continue  # the structure's check: a typical mistake's output will do, another check names it
        expect_close_batch(out, want, what=what, device=ev.device, mistakes=[(m, found) for m, found, _ in wrong],
                           case=label, otherwise=_GQA_HINT)
        for i, (got, expected, part) in enumerate(zip(cache, right, ("key", "value"), strict=True)):
            named = [(m, cached[i]) for m, _, cached in wrong] if past is None else []
            expect_close(got, expected, what=f"The {part} cache of {what}", device=ev.device, case=label,
                         mistakes=named, otherwise=_GQA_HINT)
    if case.upstream:
        modules.expect_attached(ev, f"{case.key}.full.0", f"{case.call}.forward")
        grads = modules.autograd(lambda leaves, x: gqa(leaves, heads, x, cos, sin, mask)[0], w, {"x": x},
                                 case.upstream_gradient())
        modules.expect_gradients(ev, grads, owner=ATTENTION_NAME, case=f"{case.call}, x {tuple(x.shape)}",
                                 oracle="F.scaled_dot_product_attention(enable_gqa=True) with your weights")


each_case(probes.gqa_structure, partial(_expect_gqa_case, structure=True),
          passed="Four bias-free projections of the grouped sizes, a cache (b, kv_heads, t, s), ValueErrors.")
each_case(probes.gqa_oracle, _expect_gqa_case,
          passed="2, 3, 1 and `heads` kv heads, causal and random masks: sdpa(enable_gqa=True); gradients too.")
each_case(probes.gqa_cache, _expect_gqa_case,
          passed="A prefix, then the rest with past=(keys, values): the outputs and cache of one call.")
each_case(probes.gqa_hidden, _expect_gqa_case,
          passed="Multi-query attention (one kv head), kv_heads = heads, more shapes, gradients to every parameter.")


# ---------------------------------------------------------------- ModernLanguageModel
# Edits change the reference ModernBlock and ModernLanguageModel of course/modern_decoder.py (the notebook's answer
# cell holds both):
#     ModernBlock.forward: attended, keys_values = self.attention(self.norm1(x), cos, sin, mask, past)
#                          x = x + attended; return x + self.ff(self.norm2(x)), keys_values
#     ModernLanguageModel: rotary_tables(max_len, k // heads, base) as buffers; mask = torch.ones(t, past + t, ...)
#                          .tril(diagonal=past); logits = self.to_logits(self.norm(x))
# A model variant is built on the CPU (its constructor computes its rotary tables) and run with the check's weights
# and its own cache, as the reference model calling the block variant where one is named (_variant, models.variant). The
# tables' kind and shape, the length checks, the mask's device and a cache that differs are named by what the probe
# recorded: catalogue/modern_decoder.py writes those mistakes.

BLOCK_RETURN = "return x + self.ff(self.norm2(x)), keys_values"
ATTENDED = "x = x + attended  # (b, t, k)"
MASK = ".tril(diagonal=past)"

edit("modern-post-norm", "ModernBlock",
     ("attended, keys_values = self.attention(self.norm1(x), cos, sin, mask, past)",
      "attended, keys_values = self.attention(x, cos, sin, mask, past)"),
     (ATTENDED, "x = self.norm1(x + attended)"), (BLOCK_RETURN, "return self.norm2(x + self.ff(x)), keys_values"),
     mistake="modern-post-norm",
     says="the blocks are post-norm, x = norm(x + sublayer(x)); this model is pre-norm: x = x + attention(norm1(x)), "
          "then x = x + ff(norm2(x)), and the final norm after the last block.")
edit("modern-no-residual", "ModernBlock", (ATTENDED, "x = attended"),
     (BLOCK_RETURN, "return self.ff(self.norm2(x)), keys_values"), mistake="modern-no-residual",
     says="the residual connections are missing: x = x + attention(norm1(x)), then x = x + ff(norm2(x)).")
edit("modern-no-final-norm", "ModernLanguageModel", ("self.to_logits(self.norm(x))", "self.to_logits(x)"),
     mistake="modern-no-final-norm", says="the final RMSNorm is missing: apply self.norm before to_logits.")
edit("modern-no-causal-mask", "ModernLanguageModel", (MASK, ""), mistake="modern-no-causal-mask",
     says="nothing is masked: every position reads the tokens after it. Build the causal mask, True where key j <= "
          "query i (shifted by the cache).")
edit("modern-base-not-passed-on", "ModernLanguageModel",
     ("rotary_tables(max_len, k // heads, base)", "rotary_tables(max_len, k // heads)"), mistake="modern-base-ignored",
     says="the rotary tables are built with the base 10000 whatever the model is given: pass the constructor's base "
          "on, rotary_tables(max_len, k // heads, base).")
edit("modern-mask-not-offset", "ModernLanguageModel", (MASK, ".tril()"), mistake="modern-cache-mask-not-offset",
     says="the causal mask is not shifted by the cache: query i of the new tokens is position t_past + i, so it may "
          "read keys j <= t_past + i: torch.ones(t, t_past + t).tril(diagonal=t_past).")
TABLES_HEAD_SIZE = WRITTEN.mistake(
    "modern-tables-head-size",
    says="the rotary tables are made for the model size k; the rotation acts on each head, so they are "
         "rotary_tables(max_len, k // heads).")
TABLES_PERSISTENT = WRITTEN.mistake(
    "modern-tables-persistent",
    says="the rotary tables are saved in the state_dict: they are computed from the sizes, so register them with "
         "persistent=False.")
TABLES_NOT_BUFFERS = WRITTEN.mistake(
    "modern-tables-not-buffers",
    says="cos and sin are not buffers: register them with self.register_buffer(\"cos\", cos, persistent=False) (a "
         "parameter would be trained, a plain attribute would not follow .to(device)).")
NO_LENGTH_CHECK = WRITTEN.mistake(
    "modern-no-length-check",
    says="past max_len positions the model does not raise a ValueError: the tables hold max_len positions, so check "
         "t_past + t first.")
CACHE_LENGTH_UNCHECKED = WRITTEN.mistake(
    "modern-cache-length-unchecked",
    says="the length check leaves the cache out: the new tokens sit at positions t_past .. t_past + t - 1, so raise "
         "the ValueError when t_past + t exceeds max_len, not only when t does.")
READS_FUTURE = WRITTEN.mistake(
    "modern-reads-future",
    says="the model reads the future. The mask must be causal, True where key j <= query i: torch.ones(t, t_past + "
         "t).tril(diagonal=t_past).")
CACHE_DIFFERS = WRITTEN.mistake(
    "modern-cache-differs", says="a call with the cache does not give what one call on all the tokens gives.")
MASK_ON_THE_CPU = WRITTEN.mistake(
    "mask-on-the-cpu",
    says="the causal mask is made on the CPU (torch.ones with no device=): make it where the tokens are, "
         "torch.ones(t, past + t, dtype=torch.bool, device=tokens.device).tril(diagonal=past). A CPU grader would "
         "pass it; on a GPU the attention refuses to mix it with the scores.")


def _variant(mistake: str, model: str = "", block: str = "") -> tuple[Mistake, Callable]:
    """(the mistake, the compute of its model, as modern_lm's with the same weights): ModernLanguageModel as the
    variant `model` writes it ("": the reference's), calling the ModernBlock the variant `block` writes (or the
    reference's)."""
    return variant(WRITTEN, mistake, MODEL_NAME, model, (block, "ModernBlock") if block else None)


# when they differ only there: a post-norm or residual-free block with the final norm left out too, as the original
# post-norm transformer leaves it out, is named after the block
_MODERN_MISTAKES = (_variant("modern-post-norm", "modern-no-final-norm", "modern-post-norm"),
                    _variant("modern-post-norm", block="modern-post-norm"),
                    _variant("modern-no-final-norm", "modern-no-final-norm"),
                    _variant("modern-no-residual", block="modern-no-residual"),
                    _variant("modern-no-residual", "modern-no-final-norm", "modern-no-residual"),
                    _variant("modern-no-causal-mask", "modern-no-causal-mask"),
                    _variant("modern-base-ignored", "modern-base-not-passed-on"))


def _modern_weights(ev: Evidence, run: ModelRun) -> dict[str, torch.Tensor]:
    """The notebook's parts, registered, of the right sizes; cos and sin non-persistent buffers (max_len, s/2); the
    weights the probe loaded."""
    __tracebackhide__ = True
    key, case = run.model, run.case
    k, kv, hidden = case.k, case.kv_heads * (case.k // case.heads), round(8 * case.k / 3)
    modules.built(ev, key, case.call)
    modules.expect_part(ev, key, MODEL_NAME, "token_embedding", "Embedding", "nn.Embedding(vocab_size, k)")
    hows = ("RMSNorm(k)", "GroupedQueryAttention(k, heads, kv_heads)", "RMSNorm(k)", "SwiGLU(k, swiglu_hidden(k))")
    expect_blocks(ev, key, MODEL_NAME, case.depth, [(name, how.split("(")[0], how)
                                                   for name, how in zip(probes.BLOCK_PARTS, hows, strict=True)])
    modules.expect_part(ev, key, MODEL_NAME, "norm", "RMSNorm", "RMSNorm(k), the final norm")
    modules.expect_part(ev, key, MODEL_NAME, "to_logits", "Linear", "nn.Linear(k, vocab_size, bias=False)")
    found = ev.facts.get(fact_key(key, "buffers"))
    found = {e[0]: e[1:] for e in found if isinstance(e, list) and len(e) == 3} if isinstance(found, list) else {}
    for name in ("cos", "sin"):
        got, persistent = found.get(name, (None, None))
        head = TABLES_HEAD_SIZE if got == [case.max_len, k // 2] and case.heads > 1 else None
        for wrong, mistake in ((name not in found, TABLES_NOT_BUFFERS),
                               (got != [case.max_len, k // case.heads // 2], head),
                               (persistent is not False, TABLES_PERSISTENT)):
            if wrong:
                seen = f"a buffer of shape {got}, persistent={persistent}" if name in found else "not a buffer"
                fail(f"{MODEL_NAME}.{name} is {seen} for {case.call}: "
                     + (mistake.explanation if mistake else "expected (max_len, k // heads // 2)."), mistake=mistake)
    block = {"norm1.gain": (k,), "attention.to_queries.weight": (k, k), "attention.to_keys.weight": (kv, k),
             "attention.to_values.weight": (kv, k), "attention.unify_heads.weight": (k, k), "norm2.gain": (k,),
             "ff.gate.weight": (hidden, k), "ff.up.weight": (hidden, k), "ff.down.weight": (k, hidden)}
    shapes = {"token_embedding.weight": (case.vocab, k),
              **{f"blocks.{i}.{name}": shape for i in range(case.depth) for name, shape in block.items()},
              "norm.gain": (k,), "to_logits.weight": (case.vocab, k)}  # hidden: the notebook's swiglu_hidden(k)
    w = modules.expect_parameters(ev, key, case.call, shapes, run.seed, hint=modules.PARTS_HINT)
    modules.expect_parameter_count(ev, key, case.call, sum(v.numel() for v in w.values()),
                                   f"the embedding, {case.depth} blocks, the final norm and to_logits (no biases)",
                                   "Is an extra layer or a bias registered?")
    return w


def modern_lm(w: Mapping[str, torch.Tensor], case: ModernCase, tokens: torch.Tensor, cache: list | None = None
              ) -> tuple[torch.Tensor, list]:
    """The model composed of the oracles above, pre-norm: (logits (b, t, vocab), the new cache) of tokens after cache
    (None: nothing cached)."""
    t, k = tokens.shape[1], case.k
    past = 0 if cache is None else cache[0][0].shape[2]
    cos, sin = _tables(case.max_len, k // case.heads, case.base)
    mask = torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past)  # (t, past + t)
    x, kept = F.embedding(tokens, w["token_embedding.weight"]), []  # (b, t, k)
    for i in range(case.depth):
        h = _rms_norm(w, k, x=x, prefix=f"blocks.{i}.norm1.")
        out, pair = gqa(w, case.heads, h, cos, sin, mask, None if cache is None else cache[i],
                        prefix=f"blocks.{i}.attention.")
        kept.append(pair)
        x = out + x
        x = _swiglu(w, k, 0, _rms_norm(w, k, x=x, prefix=f"blocks.{i}.norm2."), prefix=f"blocks.{i}.ff.") + x
    return dense(w, "to_logits", _rms_norm(w, k, x=x, prefix="norm.")), kept


_MODERN_HINT = ("x = token_embedding(tokens); each block: x = x + attention(norm1(x), cos, sin, mask, past), then "
                "x = x + ff(norm2(x)); finally to_logits(norm(x)); the mask is causal, (t, t_past + t), "
                "tril(diagonal=t_past).")


MODERN = ModelOracle(MODEL_NAME, _modern_weights, modern_lm, "the composition of PyTorch's pieces with your weights",
                     _MODERN_HINT, "The " + READS_FUTURE.explanation[4:], ModelMistakes(_MODERN_MISTAKES, (
                         _variant("modern-cache-mask-not-offset", "modern-mask-not-offset"),), READS_FUTURE,
                         cache_differs=CACHE_DIFFERS))


def _expect_with_cache(ev: Evidence, run: ModelRun) -> None:
    """The model kind's checks, then its chunks fed with the cache."""
    __tracebackhide__ = True
    w, logits, _ = expect_model(ev, run, MODERN, exact=True)
    expect_model_steps(ev, run, MODERN, w, logits, run.case.kv_heads, caches=False)


def _expect_hidden(ev: Evidence, run: ModelRun) -> None:
    """expect_model_gradients, then the chunks fed with the cache where run.chunks; where run.too_long, a ValueError
    past max_len positions, without a cache and after one of max_len positions (probes._probe_modern_hidden)."""
    __tracebackhide__ = True
    w, logits = expect_model_gradients(ev, run, MODERN, exact=True)
    if run.chunks:
        expect_model_steps(ev, run, MODERN, w, logits, run.case.kv_heads, caches=False)
    if run.too_long:
        n, forward = run.case.max_len, f"{MODEL_NAME}.forward on"
        compare.expect_value_error(ev, fact_key(run.model, "too_long"), f"{forward} {n + 1} tokens with max_len={n}",
                                   NO_LENGTH_CHECK)
        compare.expect_value_error(ev, fact_key(run.model, "past_too_long"), f"{forward} 1 token with a cache of {n} "
                                   f"positions, max_len={n}", CACHE_LENGTH_UNCHECKED)


each_case(probes.modern_lm_structure, partial(expect_model, oracle=MODERN),
          then=partial(compare.expect_on_gpus, seen_on=OnGpus("model", probes.MODERN_ON_GPU, MASK_ON_THE_CPU)),
          passed="The named parts without biases, cos and sin non-persistent buffers, logits (b, t, vocab_size); on a "
                 "stand-in CUDA and MPS, the tables follow .to() and the mask is made on the tokens' device.")
each_case(probes.modern_lm_oracle, partial(expect_model, oracle=MODERN, exact=True),
          passed="The logits of PyTorch's pieces composed pre-norm and causal, with your weights.")
each_case(probes.modern_lm_cache, _expect_with_cache,
          passed="3 tokens, then 2, 1 and 2 with the cache: the logits of one call; later tokens change nothing.")
each_case(probes.modern_lm_hidden, _expect_hidden,
          passed="Depth 3, one kv head, gradients to every parameter, a ValueError past max_len (with a cache too), "
                 "base=100.")
