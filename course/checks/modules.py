"""A student's nn.Module on both sides of a check: built and filled by the probe, read back by the judge.

The probe (:func:`build`) constructs the student's class and records what it is made of (every submodule's type
and sizes, which named layers are one object) and the names and shapes of the check's weights it loads into every
parameter (course/checks/weights.py); :func:`backward` keeps the gradients a loss on the output leaves.

The judge reads those facts back (:func:`built`, :func:`expect_layers`, :func:`expect_part`), recreates the weights
the probe loaded (:func:`expect_parameters`) and compares recorded gradients with autograd's through the oracle
(:func:`expect_gradients`). Nothing here calls student code on the judge's side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from course.checks import weights
from course.checks.compare import (
    Mistake,
    close,
    expect_close,
    fail,
    raised,
    recorded,
    requires_grad,
    tensor,
    tolerance,
)
from course.checks.evidence import Evidence, Recorder, fact_key, gradient_key

# the structure and gradient failures every assignment shares (each message says it in the exercise's words)
_mistake = partial(Mistake, declared_in=__name__)  # a Mistake this module declares (its constants below)
NOT_A_MODULE = _mistake("not-a-module", "the class does not create an nn.Module: does it derive from nn.Module?")
MISSING_LAYER = _mistake("missing-layer", "a layer the exercise names is missing: create it in __init__.")
WRONG_LAYER_TYPE = _mistake("wrong-layer-type", "a layer the exercise names is not an nn.Linear.")
WRONG_LAYER_SIZE = _mistake("wrong-layer-size", "a linear layer maps the wrong numbers of features.")
SHARED_LAYER = _mistake("shared-layer", "two of the layers are one object: each role needs its own weights.")
MISSING_PARAMETER = _mistake("missing-parameter", "a parameter the exercise needs is not registered: make each layer "
                             "an attribute of the module.")
PARAMETER_COUNT = _mistake("parameter-count", "the module registers more or fewer parameter values than the layers "
                           "the exercise asks for hold.")
NO_GRADIENT = _mistake("no-gradient", "an input or a parameter receives no gradient: is it used in forward?")
DETACHED = _mistake("detached", "the output is cut off from autograd: avoid .detach(), .data or torch.no_grad() "
                    "inside it.")
MISSING_PART = _mistake("missing-part", "a part the exercise names is missing: create it in __init__.")
WRONG_PART_TYPE = _mistake("wrong-part-type", "a part the exercise names is of the wrong kind.")

#: how to register the parts of a model built from the course's classes (a hint of :func:`expect_parameters`)
PARTS_HINT = "Register the parts as attributes of the module (self.name = ...), built from the course's classes."


# ------------------------------------------------------------------------------------------- the probe's side

def kind(obj: Any, kinds: Iterable[tuple[str, type]]) -> str:
    """The name of the first (name, class) of kinds that obj is an instance of, else its type's name."""
    return next((name for name, cls in kinds if isinstance(obj, cls)), type(obj).__name__[:60])


def _shared(names: tuple[str, ...], module: nn.Module) -> dict[str, list]:
    found = part_facts(module, names, ()).items()
    return {"shared": [[name, fact["same_as"]] for name, fact in found if fact["same_as"]]}


def sharing(names: Iterable[str]) -> Callable[[nn.Module], dict[str, list]]:
    """The facts of :func:`build` that say which of the layers `names` are one object: key.shared, [[name, the
    earlier name it is], ...] (what :func:`expect_layers` reads)."""
    return partial(_shared, tuple(names))


def part_facts(module: Any, names: Iterable[str], kinds: Iterable[tuple[str, type]]) -> dict[str, dict]:
    """For each attribute of module in names: what it is (its kind, or "missing"), which earlier attribute it is
    the same object as (same_as), and its number of heads if it has one. kinds: (name, class), most specific
    first (the course's classes before nn.Module's)."""
    facts, seen = {}, []
    kinds = tuple(kinds)
    for name in names:
        value = getattr(module, name, None)
        fact: dict = {"kind": "missing" if value is None else kind(value, kinds),
                      "same_as": next((other for other, obj in seen if value is not None and obj is value), None)}
        heads = getattr(value, "heads", None)
        if isinstance(heads, int) and not isinstance(heads, bool):
            fact["heads"] = heads
        facts[name] = fact
        seen.append((name, value))
    return facts


def build(rec: Recorder, key: str, cls: Callable, *args: Any, seed: int | None = None,
          gains: Mapping[str, float] | None = None, facts: Callable[[nn.Module], Mapping[str, Any]] | None = None,
          train: bool | None = None, **kwargs: Any) -> nn.Module | None:
    """cls(*args, **kwargs) on the device, its structure recorded under key and, with a seed, the check's weights
    loaded; None (recorded as such) when it raised, is not an nn.Module, or cannot be inspected or moved.

    facts: further structure facts (key.<name>) read from the module (e.g. :func:`sharing`'s); train: put it in
    training (True) or evaluation (False) mode."""
    module = rec.call(key, cls, *args, **kwargs)
    is_module = isinstance(module, nn.Module)
    rec.fact(fact_key(key, "is_module"), is_module)
    if not is_module:
        return None
    try:
        for name, value in (facts(module) if facts else {}).items():
            rec.fact(fact_key(key, name), value)
        rec.fact(fact_key(key, "modules"), weights.describe(module))
        module = module.to(rec.device)
        if train is not None:
            module.train(train)
        if seed is not None:
            rec.fact(fact_key(key, "params"), weights.fill(module, seed, gains))
    except Exception as error:  # noqa: BLE001 - a module that cannot be inspected or moved is evidence too
        rec.raised(key, error)
        return None
    return module


def training_mode(module: nn.Module) -> None:
    """Training mode, where a dropout of 1.0 zeroes all it is given (a Runs' setup: the checks' modules run in
    evaluation mode)."""
    module.train()


def record_gradients(rec: Recorder, module: nn.Module) -> None:
    """Keep the gradient every parameter of module received (None where it received none)."""
    for name, p in module.named_parameters():
        rec.tensor(gradient_key(name), p.grad)


def backward(rec: Recorder, y: Any, upstream: torch.Tensor, inputs: Mapping[str, torch.Tensor],
             module: nn.Module | None = None, key: str | None = None) -> bool:
    """After the student's code gave y: backpropagate sum(y * upstream) and keep the gradients the inputs
    (grad.<name>) and the module's parameters received. Nothing is kept when y is not a tensor of upstream's
    shape in an autograd graph; the judge then says why from the recorded output. True when the pass ran. key: the
    output's key, under which (key.backward) an error in the backward pass is recorded; without one it is raised."""
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(upstream.shape):
        return False
    return _backpropagate(rec, key, y, lambda out: (out * upstream.to(out.device)).sum(), inputs, module)


def record_backward(rec: Recorder, key: str, module: Callable, *args: Any, loss: Callable[[torch.Tensor], torch.Tensor],
                    inputs: Mapping[str, torch.Tensor] | None = None, **kwargs: Any) -> bool:
    """Record module(*args, **kwargs) under key with autograd on and, if it is part of a graph, backpropagate
    loss(output) as :func:`backward` does; an error in the backward pass is recorded under key.backward. True when
    the backward pass ran."""
    with torch.enable_grad():
        y = rec.call(key, module, *args, **kwargs)
        return _backpropagate(rec, key, y, loss, inputs or {}, module if isinstance(module, nn.Module) else None)


def _backpropagate(rec: Recorder, key: str | None, y: Any, loss: Callable[[torch.Tensor], torch.Tensor],
                   inputs: Mapping[str, torch.Tensor], module: nn.Module | None) -> bool:
    """Backpropagate loss(y) if y is part of an autograd graph and keep the gradients of inputs and module. An
    error in the backward pass is recorded under key.backward (raised when key is None)."""
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        return False
    try:
        loss(y).backward()
    except Exception as error:  # noqa: BLE001 - a backward pass that breaks is evidence too
        if key is None:
            raise
        rec.raised(fact_key(key, "backward"), error)
        return False
    for name, value in inputs.items():
        rec.tensor(gradient_key(name), value.grad)
    if module is not None:
        record_gradients(rec, module)
    return True


# ------------------------------------------------------------------------------------------- the judge's side

def built(ev: Evidence, key: str, what: str, hint: str = "") -> None:
    """Fail in plain words unless the constructor recorded under key ran and gave an nn.Module."""
    __tracebackhide__ = True
    raised(ev, key, what)
    fact = ev.facts.get(key)
    if not isinstance(fact, dict):
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    if ev.facts.get(fact_key(key, "is_module")) is not True:
        kind = "None" if fact.get("kind") == "none" else str(fact.get("type", "None"))[:60]
        fail(f"{what} should create an nn.Module, but gave a {kind}. "
             f"{hint or 'Does the class derive from nn.Module?'}", mistake=NOT_A_MODULE)


def expect_part(ev: Evidence, key: str, owner: str, name: str, kinds: str | tuple[str, ...], how: str) -> dict:
    """The facts :func:`part_facts` recorded (under key.parts) for the attribute `name` of owner, which must be of
    this kind (or one of these kinds); how: the code that creates it."""
    __tracebackhide__ = True
    parts = recorded(ev, fact_key(key, "parts"), f"the parts of {owner}")
    fact = parts.get(name) if isinstance(parts, dict) else None
    if not isinstance(fact, dict) or fact.get("kind") == "missing":
        fail(f"{owner} has no attribute `{name}`. Create it in __init__: self.{name} = {how}.", mistake=MISSING_PART)
    if fact.get("kind") not in ((kinds,) if isinstance(kinds, str) else kinds):
        fail(f"{owner}.{name} is a {str(fact.get('kind'))[:60]}; it should be {how}.", mistake=WRONG_PART_TYPE)
    return fact


def described(ev: Evidence, key: str) -> dict[str, dict]:
    """Qualified submodule name -> its recorded facts (type, sizes)."""
    found = ev.facts.get(fact_key(key, "modules"))
    return {m.get("name"): m for m in found if isinstance(m, dict)} if isinstance(found, list) else {}


def expect_layers(ev: Evidence, key: str, what: str, owner: str,
                  layers: Mapping[str, tuple[int, int, bool, str, Mistake | str]], shared: str) -> None:
    """The constructor recorded under key gave an nn.Module (what: how it was called) whose layers are separate
    objects (shared: the message otherwise), each name in layers an nn.Linear(n_in, n_out) with a bias or without
    as (n_in, n_out, bias, spec, bias_mistake) says; bias_mistake: the mistake a wrong bias is."""
    __tracebackhide__ = True
    built(ev, key, what)
    sharing = ev.facts.get(fact_key(key, "shared"))
    if not isinstance(sharing, list):
        fail("The test recorded nothing about the module's layers: the check did not run to the end.")
    if sharing:
        fail(shared, mistake=SHARED_LAYER)
    for name, (n_in, n_out, bias, spec, bias_mistake) in layers.items():
        layer = described(ev, key).get(name)
        if not isinstance(layer, dict):
            fail(f"{owner} has no layer `{name}`. Create it in __init__: self.{name} = {spec}.", mistake=MISSING_LAYER)
        if "in_features" not in layer:
            fail(f"{owner}.{name} is a {str(layer.get('type'))[:60]}; it should be {spec}.", mistake=WRONG_LAYER_TYPE)
        if (layer.get("in_features"), layer.get("out_features")) != (n_in, n_out):
            fail(f"{owner}.{name} maps {layer.get('in_features')} -> {layer.get('out_features')} features; here it "
                 f"should map {n_in} -> {n_out}: {spec}.", mistake=WRONG_LAYER_SIZE)
        if layer.get("bias") is not bias:
            fail(f"{owner}.{name} {'has no' if bias else 'has a'} bias; it should be {spec}.",
                 mistake=bias_mistake)


def loaded(ev: Evidence, key: str, seed: int, gains: Mapping[str, float] | None = None) -> dict[str, torch.Tensor]:
    """name -> the value the probe loaded into that parameter (recreated from the seed, never read)."""
    return weights.recreate(ev.facts.get(fact_key(key, "params")), seed, gains)


def expect_parameters(ev: Evidence, key: str, what: str, shapes: Mapping[str, tuple[int, ...]], seed: int,
                      gains: Mapping[str, float] | None = None,
                      hint: str = "Register the layers as attributes of the module (self.name = nn.Linear(...)).",
                      resized: Mistake | None = None) -> dict[str, torch.Tensor]:
    """name -> the value the probe loaded, for every parameter in shapes; fails when one was not registered (hint:
    how to register it), or, given `resized`, names that mistake when one is registered with another shape (whether
    others are registered besides them: :func:`expect_parameter_count` on the values returned)."""
    __tracebackhide__ = True
    found = loaded(ev, key, seed, gains)
    for name, shape in shapes.items():
        if resized is not None and name in found and tuple(found[name].shape) != tuple(shape):
            fail(f"{what}: {name} has the shape {tuple(found[name].shape)}; it should be {tuple(shape)}.",
                 mistake=resized)
        if name not in found or tuple(found[name].shape) != tuple(shape):
            fail(f"{what} has no registered parameter {name} of shape {tuple(shape)}. {hint}",
                 mistake=MISSING_PARAMETER)
    return {name: found[name] for name in shapes}


def attention_shapes(prefix: str, k: int) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the course's MultiHeadAttention(k, heads) named prefix + ..."""
    return {**{f"{prefix}{n}.weight": (k, k) for n in ("to_queries", "to_keys", "to_values", "unify_heads")},
            f"{prefix}unify_heads.bias": (k,)}


def norm_shapes(prefix: str, k: int, names: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the nn.LayerNorm(k) attributes `names` of the module named prefix."""
    return {f"{prefix}{n}.{w}": (k,) for n in names for w in ("weight", "bias")}


def feed_forward_shapes(prefix: str, k: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of the course's FeedForward(k, hidden) attribute `ff` of the module named prefix."""
    return {f"{prefix}ff.net.0.weight": (hidden, k), f"{prefix}ff.net.0.bias": (hidden,),
            f"{prefix}ff.net.2.weight": (k, hidden), f"{prefix}ff.net.2.bias": (k,)}


def block_shapes(prefix: str, k: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of a block named prefix made of the course's parts as TransformerBlock names them:
    attention (MultiHeadAttention(k, heads)), norm1 and norm2 (nn.LayerNorm(k)), ff (FeedForward(k, hidden))."""
    return {**attention_shapes(f"{prefix}attention.", k), **norm_shapes(prefix, k, ("norm1", "norm2")),
            **feed_forward_shapes(prefix, k, hidden)}


def parameter_count(ev: Evidence, key: str, prefix: str = "") -> int:
    """The number of values in the parameters the probe filled (those whose names start with prefix)."""
    return sum(math.prod(entry[1]) for entry in ev.facts.get(fact_key(key, "params")) or []
               if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
               and entry[0].startswith(prefix) and isinstance(entry[1], list)
               and all(isinstance(n, int) and not isinstance(n, bool) for n in entry[1]))


def expect_parameter_count(ev: Evidence, key: str, what: str, expected: int, formula: str, hint: str) -> None:
    """The parameters the probe filled hold `expected` values (formula: how they add up, in words)."""
    __tracebackhide__ = True
    count = parameter_count(ev, key)
    if count != expected:
        fail(f"{what} has {count} registered parameters; {formula} = {expected}. {hint}", mistake=PARAMETER_COUNT)


def parameter_names(ev: Evidence, key: str) -> list[str]:
    """The names of the parameters the probe filled."""
    params = ev.facts.get(fact_key(key, "params"))
    return [e[0] for e in params if isinstance(e, list) and e and isinstance(e[0], str)] if isinstance(params, list) \
        else []


def expect_attached(ev: Evidence, key: str, what: str) -> None:
    """The recorded output is part of an autograd graph (nothing detached it)."""
    __tracebackhide__ = True
    if not requires_grad(ev, key):
        fail(f"{what} is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.",
             mistake=DETACHED)


def expect_differentiable(ev: Evidence, key: str, what: str) -> None:
    """The output recorded under key is part of an autograd graph, and the backward pass through it
    (:func:`record_backward`) ran without an error."""
    __tracebackhide__ = True
    expect_attached(ev, key, what)
    raised(ev, fact_key(key, "backward"), f"backward() through {what}")


def autograd(forward: Callable[..., torch.Tensor], leaves: Mapping[str, torch.Tensor],
             inputs: Mapping[str, torch.Tensor],
             upstream: torch.Tensor | Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """Gradients of sum(forward(leaves, **inputs) * upstream) with respect to every leaf and floating input;
    upstream may instead be a loss function of the output."""
    leaves = {name: value.clone().requires_grad_(True) for name, value in leaves.items()}
    given = {name: value.clone().requires_grad_(value.is_floating_point()) for name, value in inputs.items()}
    out = forward(leaves, **given)
    (upstream(out) if callable(upstream) else (out * upstream).sum()).backward()
    return {**{name: leaf.grad for name, leaf in leaves.items()},
            **{name: value.grad for name, value in given.items() if value.is_floating_point()}}


def expect_gradients(ev: Evidence, expected: Mapping[str, torch.Tensor | None], *, owner: str, case: str,
                     oracle: str, hints: Mapping[str, str] | None = None, because: Mistake | None = None) -> None:
    """Every name in expected received a gradient (recorded as grad.<name>) equal to autograd's through the oracle.

    Names with a dot are parameters, the others inputs. because: the typical mistake the output already showed,
    named when it leaves a parameter without a gradient."""
    __tracebackhide__ = True
    for name, value in expected.items():
        kind = "parameter" if "." in name else "input"
        got = tensor(ev, gradient_key(name), shape=None if value is None else tuple(value.shape))
        if got is None or value is None or (kind == "parameter" and not bool(got.abs().sum() > 0)):
            _no_gradient(name, kind, owner, hints, because)
        # a gradient sums many float32 products, so its small entries carry the rounding error of its large ones
        # (seen: an entry of 1e-3 off by 2e-5 in a correct model's gradient): atol scales with the largest entry
        tol = tolerance(ev.device)
        scale = float(value.detach().abs().max()) if value.numel() else 0.0
        if close(got, value, tol["rtol"], max(tol["atol"], tol["rtol"] * scale)):
            continue
        expect_close(got, value, what=f"The gradient of a loss on {owner}'s output with respect to {name}",
                     device=ev.device, case=case,
                     otherwise=f"Compare with autograd through {oracle}: build the output only from differentiable "
                               "torch operations.")


def expect_some_gradient(ev: Evidence, names: Iterable[str], owner: str) -> None:
    """Every parameter in names received some gradient (recorded as grad.<name>), which the judge does not
    recompute (e.g. parameters its oracle does not compute with)."""
    __tracebackhide__ = True
    for name in names:
        got = tensor(ev, gradient_key(name))
        if got is None or not bool(got.abs().sum() > 0):
            _no_gradient(name, "parameter", owner, None, None)


def _no_gradient(name: str, kind: str, owner: str, hints: Mapping[str, str] | None, because: Mistake | None) -> None:
    __tracebackhide__ = True
    if because is not None:
        fail(f"The {kind} {name} of {owner} receives no gradient. Your {owner} is not what was asked: "
             f"{because.explanation}", mistake=because.id)
    fail(f"The {kind} {name} of {owner} receives no gradient"
         + (", so it would never learn. Is it used in forward?" if kind == "parameter" else ".")
         + (" " + hints[name] if hints and name in hints else ""), mistake=NO_GRADIENT)
