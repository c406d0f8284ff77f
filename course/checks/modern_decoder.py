"""Probes for assignment 09 (RMSNorm, rotary_tables, apply_rotary, SwiGLU, GroupedQueryAttention,
ModernLanguageModel), judged by course/judges/modern_decoder.py from the record alone. apply_rotary and the attention
get tables of random angles, which any rotation must accept, so nothing here computes rotary_tables' answer.
"""

from collections.abc import Callable
from dataclasses import astuple, dataclass, replace
from functools import partial
from typing import Any

import torch
from torch import nn

from course.checks import device, modules, weights
from course.checks.check import when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder, fact_key
from course.checks.kinds import (
    Built,
    Case,
    ModelRun,
    RunKeys,
    Runs,
    builds_and_runs_backward,
    calls,
    drawn,
    model_backward,
    model_facts,
    probe_models,
    property_check,
)

NORM_NAME = "RMSNorm"
SWIGLU_NAME = "SwiGLU"
ATTENTION_NAME = "GroupedQueryAttention"
MODEL_NAME = "ModernLanguageModel"
#: rotary_tables' and ModernLanguageModel's default base
DEFAULT_BASE = 10000.0
LAYERS = ("to_queries", "to_keys", "to_values", "unify_heads")


# ---------------------------------------------------------------- RMSNorm and SwiGLU: modules run on x

def x_case(key: str, shape: tuple[int, ...], seed: int, *, scale: float = 1.0, shift: float = 0.0, label: str = "",
           upstream: int | None = None, secret: bool = False) -> Case:
    """x = scale · (randn(shape) + shift) drawn from seed; upstream: the seed of an upstream gradient of x's shape."""
    grad = None if upstream is None else partial(randn, *shape, seed=upstream)
    words = label or f"x of shape {shape}" + (f", mean {shift:g}" if shift else "") + \
        (f", times {scale:g}" if scale != 1.0 else "")
    return Case(key, lambda: {"x": scale * (randn(*shape, seed=seed) + shift)}, words, secret, grad)


def as_built(module: nn.Module) -> dict[str, Any]:
    """The gain as the constructor left it, before the check's weights replace it (its first 64 values, or None
    where there is no tensor `gain`), and self.eps (None where it is no number): the exercise prescribes ones and
    the eps given."""
    gain, eps = getattr(module, "gain", None), getattr(module, "eps", None)
    return {"initial_gain": gain.detach().flatten()[:64].tolist() if isinstance(gain, torch.Tensor) else None,
            "eps": float(eps) if type(eps) in (float, int) else None}


rms_norm_oracle = builds_and_runs_backward("rms_norm_oracle", (
    Runs(Built(key="module0", args=(12,), seed=6000), (
        x_case("y0", (3, 5, 12), 6001, shift=3.0, upstream=6002),
        x_case("y0_scaled", (3, 5, 12), 6001, shift=3.0, scale=100.0,
               label="100 times the same x: RMSNorm(100·x) = RMSNorm(x)"),
        x_case("y0_small", (2, 3, 12), 6003, shift=1.0, scale=1e-3))),
    Runs(Built(key="module1", args=(8, 0.1), seed=6010),
         (x_case("y1", (2, 4, 8), 6011, shift=0.5, scale=0.5, label="x of shape (2, 4, 8), eps=0.1"),)),
    Runs(Built(key="module2", args=(6,), seed=6020), (x_case("y2", (2, 3, 4, 6), 6021, shift=-2.0),))), facts=as_built)


rms_norm_hidden = builds_and_runs_backward("rms_norm_hidden", (
    Runs(Built(key="module0", args=(16,), seed=6100), (x_case("y0", (1, 7, 16), 6101, shift=1.0, scale=1e-4),
                                                       x_case("y0_large", (2, 3, 16), 6102, shift=1.0, scale=1e4))),
    Runs(Built(key="module1", args=(5, 1e-3), seed=6110), (x_case("y1", (3, 2, 4, 5), 6111, shift=0.3, scale=0.1),)),
    Runs(Built(key="module2", args=(10,), seed=6120),
         (x_case("y2", (2, 9, 10), 6121, shift=2.0, upstream=6122, secret=True),
          x_case("y2_small", (4, 10), 6123, scale=2e-4, secret=True)))))

SWIGLU_LAYERS = ("gate", "up", "down")
swiglu_oracle = builds_and_runs_backward("swiglu_oracle", (
    Runs(Built(key="module0", args=(8, 12), seed=6300), (x_case("y0", (2, 5, 8), 6301, upstream=6302),
                                                         x_case("y0_4d", (2, 3, 4, 8), 6303))),
    Runs(Built(key="module1", args=(6, 16), seed=6310),
         (x_case("y1", (3, 4, 6), 6311, shift=0.5),))), facts=modules.sharing(SWIGLU_LAYERS))

swiglu_hidden = builds_and_runs_backward("swiglu_hidden", (
    Runs(Built(key="module0", args=(12, 32), seed=6400), (x_case("y0", (1, 9, 12), 6401, upstream=6402),)),
    Runs(Built(key="module1", args=(9, 4), seed=6410), (x_case("y1", (2, 2, 3, 9), 6411),)),
    Runs(Built(key="module2", args=(10, 27), seed=6420),
         (x_case("y2", (3, 5, 10), 6421, secret=True),))), facts=modules.sharing(SWIGLU_LAYERS))


# ---------------------------------------------------------------- rotary_tables

def _secret_table_sizes(seed: int) -> dict[str, Any]:
    """Secret sizes 3 <= t <= 40, an even 4 <= s <= 32 (t != s / 2) and a base between 50 and 20000."""
    g = generator(seed)
    t = int(torch.randint(3, 41, (), generator=g))
    s = 2 * int(torch.randint(2, 17, (), generator=g))
    return {"t": t + (1 if t == s // 2 else 0), "s": s, "base": float(torch.randint(50, 20001, (), generator=g))}


def table_case(key: str, t: int, s: int, base: float | None = None) -> Case:
    """rotary_tables(t, s[, base=base], device=...) recorded under key; base None: the default."""
    return Case(key, lambda: {"t": t, "s": s} | ({} if base is None else {"base": base}), f"t={t}, s={s}")


def _probe_tables(cases: tuple[Case, ...], rotary_tables: Callable, rec: Recorder) -> None:
    for case in drawn(cases):
        inputs = dict(case.inputs())
        rec.call(case.key, rotary_tables, inputs.pop("t"), inputs.pop("s"), **inputs, device=rec.device)


#: the call run on each stand-in GPU (course/checks/device.py): does rotary_tables honour `device`, with no float64?
TABLES_ON_GPU = (12, 8)
rotary_tables = property_check("rotary_tables", device.on_gpus(_probe_tables, "tables",
                                                               lambda f, d: f(*TABLES_ON_GPU, device=d)),
                               (table_case("tables0", 7, 8), table_case("tables1", 5, 12, 100.0)))
rotary_tables_hidden = property_check("rotary_tables_hidden", _probe_tables, (
    table_case("tables0", 64, 16), table_case("tables1", 1, 2, 500.0), table_case("tables2", 9, 6, 10.0),
    # positions to 2,047, where angles computed in float32 are off by up to 7e-5 radians: the float64 clause
    table_case("tables_long", 2048, 64),
    Case("tables_secret", partial(_secret_table_sizes, 6590), "secret sizes", secret=True)))


# ---------------------------------------------------------------- apply_rotary

def angle_tables(rows: int, half: int, seed: int, relative: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (rows, half) of random angles in (-π, π), which any rotation must accept; relative: of position ·
    ω_i with random frequencies ω_i, the tables of a rotary encoding."""
    if relative:
        angles = torch.arange(rows)[:, None] * (torch.rand(half, generator=generator(seed)) + 0.05)  # (rows, half)
    else:
        angles = (torch.rand(rows, half, generator=generator(seed)) * 2 - 1) * torch.pi  # (rows, half)
    return angles.cos(), angles.sin()


def _rotary_inputs(shape: tuple[int, ...], rows: int, offset: int | None, seed: int) -> dict[str, Any]:
    cos, sin = angle_tables(rows, shape[-1] // 2, seed + 1)
    return {"x": randn(*shape, seed=seed), "cos": cos, "sin": sin} | ({} if offset is None else {"offset": offset})


def rotary_case(key: str, shape: tuple[int, ...], seed: int, offset: int | None = None, extra: int = 2,
                secret: bool = False) -> Case:
    """apply_rotary(x, cos, sin[, offset]) on x of shape (..., t, s) and tables of random angles with
    offset + t + extra rows."""
    rows = (offset or 0) + shape[-2] + extra
    label = f"x of shape {shape}, tables of random angles ({rows}, {shape[-1] // 2})" + \
        ("" if offset is None else f", offset={offset}")
    return Case(key, partial(_rotary_inputs, tuple(shape), rows, offset, seed), label, secret)


apply_rotary_oracle = calls("apply_rotary_oracle", (
    rotary_case("y0", (2, 5, 8), 6200), rotary_case("y1", (2, 3, 4, 6), 6210),
    rotary_case("y2", (1, 2, 3, 8), 6220, offset=4)))
apply_rotary_hidden = calls("apply_rotary_hidden", (
    rotary_case("y0", (3, 1, 2, 7, 4), 6230, offset=0), rotary_case("y1", (9, 2), 6240, offset=11, extra=0),
    rotary_case("y2", (2, 4, 1, 16), 6250, offset=20, extra=5),
    rotary_case("y3", (2, 3, 6, 10), 6260, offset=3, secret=True)))


def _relative_inputs(x: str, offset: int | None, rows: slice) -> dict[str, Any]:
    cos, sin = angle_tables(12, 4, 6270, relative=True)
    x = randn(2, 2, 6, 8, seed=6271)[..., rows, :] if x == "keys" else randn(2, 2, 1, 8, seed=6272)  # (b, h, t, s)
    return {"x": x, "cos": cos, "sin": sin} | ({} if offset is None else {"offset": offset})


# keys K (2, 2, 6, 8) rotated from 0 and from 3; a query (2, 2, 1, 8) at positions 2 and 5; K's rows 2-4 from 2
apply_rotary_offset = calls("apply_rotary_offset", tuple(
    Case(key, partial(_relative_inputs, x, offset, rows), key)
    for key, x, offset, rows in (("keys", "keys", None, slice(None)), ("keys_shifted", "keys", 3, slice(None)),
                                 ("q2", "query", 2, slice(None)), ("q5", "query", 5, slice(None)),
                                 ("rows", "keys", 2, slice(2, 5)))))


# ---------------------------------------------------------------- GroupedQueryAttention

@dataclass(frozen=True)
class GQA:
    """GroupedQueryAttention(k, heads, kv_heads)'s arguments."""

    k: int
    heads: int
    kv_heads: int


@dataclass(frozen=True)
class AttentionCase:
    """The layer (<key>.module) on x (*shape, k), random angles, a causal or random mask: <key>.full; prefix:
    x[:, :prefix] (<key>.first), then the rest with its cache (<key>.second); upstream: grads."""

    key: str
    layer: GQA
    shape: tuple[int, int]
    seed: int
    mask: str = "causal"
    prefix: int = 0
    upstream: bool = False
    secret: bool = False

    @property
    def call(self) -> str:
        return f"{ATTENTION_NAME}({self.layer.k}, heads={self.layer.heads}, kv_heads={self.layer.kv_heads})"

    def inputs(self) -> dict[str, torch.Tensor]:
        (b, t), k = self.shape, self.layer.k
        cos, sin = angle_tables(t + 3, k // self.layer.heads // 2, self.seed + 2)
        mask = torch.ones(t, t, dtype=torch.bool).tril()  # (t, t)
        if self.mask == "random":
            drawn_mask = torch.rand(t, t, generator=generator(self.seed + 3)) < 0.5  # (t, t)
            mask = drawn_mask | torch.eye(t, dtype=torch.bool)  # every query may read itself
        return {"x": randn(b, t, k, seed=self.seed + 1), "cos": cos, "sin": sin, "mask": mask}

    def upstream_gradient(self) -> torch.Tensor:
        return randn(*self.shape, self.layer.k, seed=self.seed + 4)


def _is_pair(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2


def _attention_facts(module: nn.Module) -> dict[str, Any]:
    """Which of its layers are one object, and self.heads and self.kv_heads as the module stores them (None where it
    has no such integer)."""
    return modules.sharing(LAYERS)(module) | {name: value if type(value := getattr(module, name, None)) is int else None
                                              for name in ("heads", "kv_heads")}


def _probe_attention(cases: tuple[AttentionCase | str, ...], cls: Callable, rec: Recorder) -> None:
    for case in drawn(cases):
        if case == "indivisible":
            rec.call("indivisible_k", cls, 10, 4, 2)
            rec.call("indivisible_heads", cls, 12, 4, 3)
            continue
        module = modules.build(rec, fact_key(case.key, "module"), cls, *astuple(case.layer), seed=case.seed,
                               facts=_attention_facts)
        if module is None:
            continue
        x, cos, sin, mask = (value.to(rec.device) for value in case.inputs().values())
        with torch.set_grad_enabled(case.upstream):
            y = rec.call(fact_key(case.key, "full"), module, x.requires_grad_(case.upstream), cos, sin, mask)
            if case.upstream and _is_pair(y):
                modules.backward(rec, y[0], case.upstream_gradient(), {"x": x}, module)
        p = case.prefix
        with torch.no_grad():
            first = rec.call(fact_key(case.key, "first"), module, x[:, :p], cos, sin, mask[:p, :p]) if p else None
            if _is_pair(first) and _is_pair(first[1]):  # (out, (keys, values))
                rec.call(fact_key(case.key, "second"), module, x[:, p:], cos, sin, mask[p:], past=tuple(first[1]))


# k != heads · kv_heads, head size != k, kv_heads < heads, t_q != t_k in the cache cases, batch > 1, odd lengths
gqa_structure = property_check("gqa_structure", _probe_attention, (
    AttentionCase(key="a", layer=GQA(k=24, heads=6, kv_heads=2), shape=(2, 5), seed=7000), "indivisible"))
gqa_oracle = property_check("gqa_oracle", _probe_attention, (
    AttentionCase(key="a", layer=GQA(k=24, heads=6, kv_heads=2), shape=(2, 5), seed=7100, upstream=True),
    AttentionCase(key="b", layer=GQA(k=24, heads=6, kv_heads=3), shape=(3, 6), seed=7110, mask="random"),
    AttentionCase(key="c", layer=GQA(k=16, heads=4, kv_heads=4), shape=(2, 5), seed=7120),
    AttentionCase(key="d", layer=GQA(k=12, heads=3, kv_heads=1), shape=(2, 4), seed=7130, mask="random")))
gqa_cache = property_check("gqa_cache", _probe_attention, (
    AttentionCase(key="a", layer=GQA(k=24, heads=6, kv_heads=2), shape=(2, 7), seed=7200, prefix=4),
    AttentionCase(key="b", layer=GQA(k=16, heads=4, kv_heads=2), shape=(3, 6), seed=7210, prefix=5)))
gqa_hidden = property_check("gqa_hidden", _probe_attention, (
    AttentionCase(key="a", layer=GQA(k=20, heads=5, kv_heads=1), shape=(1, 9), seed=7300, mask="random", upstream=True),
    AttentionCase(key="b", layer=GQA(k=12, heads=2, kv_heads=2), shape=(4, 3), seed=7310),
    AttentionCase(key="c", layer=GQA(k=32, heads=8, kv_heads=4), shape=(2, 8), seed=7320, prefix=3, secret=True)))


# ---------------------------------------------------------------- ModernLanguageModel

@dataclass(frozen=True)
class ModernCase:
    """ModernLanguageModel(vocab, k, heads, kv_heads, depth, max_len) on tokens of shape (b, t) (a ModelRun's case)."""

    shape: tuple[int, int]
    vocab: int
    k: int
    heads: int
    kv_heads: int
    depth: int
    max_len: int
    base: float = DEFAULT_BASE  # passed by name, and only when it is not the default

    b = property(lambda self: self.shape[0])  # as course/checks/kinds.py's ModelRun reads them
    t = property(lambda self: self.shape[1])

    def constructor(self) -> tuple[tuple, dict]:
        """ModernLanguageModel's arguments: (vocab, k, heads, kv_heads, depth, max_len), and base= when not the
        default (a model that leaves the default alone is asked nothing about it)."""
        keywords = {} if self.base == DEFAULT_BASE else {"base": self.base}
        return (self.vocab, self.k, self.heads, self.kv_heads, self.depth, self.max_len), keywords

    @property
    def call(self) -> str:
        base = "" if self.base == DEFAULT_BASE else f", base={self.base:g}"
        return (f"{MODEL_NAME}({self.vocab}, k={self.k}, heads={self.heads}, kv_heads={self.kv_heads}, "
                f"depth={self.depth}, max_len={self.max_len}{base})")


MODEL_PARTS = ("token_embedding", "blocks", "norm", "to_logits")
BLOCK_PARTS = ("norm1", "attention", "norm2", "ff")
_MODERN_KINDS = (("Embedding", nn.Embedding), ("Linear", nn.Linear), ("ModuleList", nn.ModuleList),
                 ("Sequential", nn.Sequential), ("list", list), ("tuple", tuple))


def _model_facts(model: nn.Module) -> dict:
    """Its named parts, its blocks' parts (by type name), and its buffers (name, shape, persistent)."""
    return {**model_facts(model, MODEL_PARTS, BLOCK_PARTS, _MODERN_KINDS), "buffers": weights.buffers(model)}


_probe_modern = partial(probe_models, facts=_model_facts)

# head size != k, kv_heads < heads, batch > 1, odd lengths
STRUCTURE_CASE = ModernCase(shape=(2, 5), vocab=11, k=24, heads=6, kv_heads=2, depth=2, max_len=9)


def _modern_on_gpu(cls: Callable, d: torch.device) -> Any:
    """STRUCTURE_CASE's model, one block deep, moved to d: 3 tokens there with use_cache=True, then 2 with the cache."""
    (args, keywords), tokens = replace(STRUCTURE_CASE, depth=1).constructor(), torch.randint(11, (2, 5), device=d)
    model = cls(*args, **keywords).to(d)
    _, cache = model(tokens[:, :3], use_cache=True)
    return model(tokens[:, 3:], cache=cache, use_cache=True)


#: the call run on each stand-in GPU (course/checks/device.py): do the tables follow .to(), is the mask made there?
MODERN_ON_GPU = (f"{replace(STRUCTURE_CASE, depth=1).call}.to(device): 3 tokens on device with use_cache=True, then 2 "
                 "with the cache")
modern_lm_structure = property_check("modern_lm_structure", device.on_gpus(_probe_modern, "model", _modern_on_gpu),
                                     (ModelRun(case=STRUCTURE_CASE, seed=8000),))
modern_lm_oracle = property_check("modern_lm_oracle", _probe_modern, (
    ModelRun(case=ModernCase(shape=(3, 7), vocab=11, k=24, heads=6, kv_heads=3, depth=2, max_len=12), seed=8100,
             keys=RunKeys(model="model0", logits="logits0")),
    ModelRun(case=ModernCase(shape=(2, 5), vocab=13, k=16, heads=4, kv_heads=2, depth=1, max_len=5), seed=8200,
             keys=RunKeys(model="model1", logits="logits1"))))
modern_lm_cache = property_check("modern_lm_cache", _probe_modern, (
    ModelRun(case=ModernCase(shape=(2, 8), vocab=11, k=24, heads=6, kv_heads=2, depth=2, max_len=10), seed=8300,
             changed=(5, 2), chunks=(3, 2, 1, 2)),))


def _probe_modern_hidden(runs: tuple[ModelRun, ...], cls: Callable, rec: Recorder) -> None:
    """_probe_modern, then the model of the first run (too_long) given a cache of max_len positions and one more
    token: <model>.past_too_long must raise a ValueError, since t_past + t counts (weights left as built)."""
    _probe_modern(runs, cls, rec, backward=model_backward)
    run = runs[0]
    args, keywords = run.case.constructor()
    model = modules.build(rec, fact_key(run.model, "full"), cls, *args, **keywords)
    if model is None:
        return
    with torch.no_grad():
        filled = rec.call(fact_key(run.model, "fill"), model,
                          torch.zeros(1, run.case.max_len, dtype=torch.long, device=rec.device), use_cache=True)
        if _is_pair(filled):
            rec.call(fact_key(run.model, "past_too_long"), model,
                     torch.zeros(1, 1, dtype=torch.long, device=rec.device), cache=filled[1], use_cache=True)


modern_lm_hidden = property_check("modern_lm_hidden", _probe_modern_hidden, (
    ModelRun(case=ModernCase(shape=(1, 9), vocab=7, k=12, heads=3, kv_heads=1, depth=3, max_len=9), seed=8400,
             keys=RunKeys(model="model0", logits="logits0"), too_long=True),
    ModelRun(case=ModernCase(shape=(2, 6), vocab=9, k=16, heads=4, kv_heads=2, depth=2, max_len=8), seed=8500,
             keys=RunKeys(model="model1", logits="logits1"), upstream=8520),
    ModelRun(case=ModernCase(shape=(3, 6), vocab=13, k=20, heads=5, kv_heads=5, depth=2, max_len=12), seed=8600,
             keys=RunKeys(model="model2", logits="logits2"), chunks=(4, 1, 1), secret=True),
    ModelRun(case=ModernCase(shape=(2, 7), vocab=9, k=16, heads=4, kv_heads=2, depth=1, max_len=10, base=100.0),
             seed=8700, keys=RunKeys(model="model3", logits="logits3"))))
