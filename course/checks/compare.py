"""The judge's side: reading a probe's evidence, comparing it with an oracle, naming the mistake it matches.

Nothing here calls the student's code. A judge recomputes its inputs and oracles from the same seeds the probe
used, with PyTorch's own functions and modules, and compares them with the recorded outputs.
"""

from __future__ import annotations

import itertools
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass
from functools import partial
from types import MappingProxyType
from typing import Any, Literal, NoReturn

import torch

from course import device as course_device
from course.checks.evidence import Evidence
from course.checks.seeds import salted

#: lines of a message are wrapped to this width: `nbgrader validate` indents each line by 4 and cuts it after
#: Validator.width - 3 = 87 characters, and the Validate dialog should need no horizontal scrolling
WIDTH = 83


@dataclass(frozen=True)
class Mistake:
    """A typical mistake a judge can recognise: a stable id (what tests and the class report count) and the
    explanation a student reads. Declared where it is written, so importing the judges lists every id they can name
    (see declared()): beside the code that makes it (course/judges/variants.py) or as a module-level
    ``Mistake(id, explanation, declared_in=__name__)``; one explanation per module. One made without declared_in (a
    message composed for one failure) must reuse a declared id."""

    id: str
    explanation: str
    declared_in: InitVar[str | None] = None  # the module that declares it; not a field: equal mistakes stay equal

    def __post_init__(self, declared_in: str | None) -> None:
        if declared_in is None:
            if self.id not in _DECLARED:
                raise ValueError(f"the mistake {self.id!r} is declared nowhere: declare it beside its judge's variants "
                                 "or as a module-level Mistake(id, explanation, declared_in=__name__)")
            return
        known = _DECLARED.setdefault(self.id, {}).setdefault(declared_in, self)
        if known.explanation != self.explanation:
            raise ValueError(f"{declared_in} declares the mistake {self.id!r} twice, with different explanations")


#: every declared mistake: id -> {the module that declared it: the Mistake} (read it with declared())
_DECLARED: dict[str, dict[str, Mistake]] = {}


def declared() -> Mapping[str, Mapping[str, Mistake]]:
    """Every mistake declared so far (import the judges first to have them all), read-only."""
    return MappingProxyType({key: MappingProxyType(dict(value)) for key, value in _DECLARED.items()})


# what every check can name, whatever the exercise (its message says it in the exercise's words)
_mistake = partial(Mistake, declared_in=__name__)  # a Mistake this module declares (its constants below)
NOT_IMPLEMENTED = _mistake("not-implemented", "the answer still raises NotImplementedError(): replace it with code.")
RAISED = _mistake("raised", "the code raised an exception when the test called it.")
NOT_A_TENSOR = _mistake("not-a-tensor", "a torch.Tensor should be returned, but something else was (None, a tuple...).")
WRONG_SHAPE = _mistake("wrong-shape", "the result has the wrong shape.")
BATCH_T = _mistake("t-on-a-batch", "x.T reverses ALL the dimensions of a tensor: on a batch (b, t, k) it gives "
                   "(k, t, b), not the transpose of each matrix. Transpose the last two dimensions: x.transpose(1, 2), "
                   "x.transpose(-2, -1) or x.mT.")

#: a line of the student's code that uses .T (not .mT): the likely cause when it raised on a batch of matrices
_USES_T = re.compile(r"\.T\b")


class CheckFailed(AssertionError):
    """A test failed; the message says what is probably wrong and where to look.

    mistake: the id of the catalogued mistake the result matched, or None.
    """

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(wrap(message))  # a message composed of others' (a note added to a failure) wraps too
        self.mistake = mistake

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: the diagnosis, not the checker's code. The name stands on a line
        of its own, so that no line is longer than the wrapped message (nbgrader's Validate dialog shows them)."""
        return [f"{type(self).__name__}:", str(self)]


def wrap(text: str) -> str:
    """Wrap every paragraph line to WIDTH characters, keeping indented lines (tensors, code) as they are."""
    out = []
    for line in text.splitlines():
        if len(line) <= WIDTH or line.startswith(" "):
            out.append(line)
        else:
            out += textwrap.wrap(line, WIDTH, break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def fail(message: str, expected: Any = None, actual: Any = None, case: str = "",
         mistake: Mistake | str | None = None) -> NoReturn:
    """Raise CheckFailed with the message and, if given, expected vs actual on a small case; mistake: the declared
    Mistake the failure names (the message says it in its own words). A plain id is still accepted from judges that
    do not declare theirs yet."""
    __tracebackhide__ = True
    mistake_id = mistake.id if isinstance(mistake, Mistake) else mistake
    text = message.strip()
    if expected is not None or actual is not None:
        at = _first_difference(expected, actual)
        where = f"[{', '.join(map(str, at))}]" if any(at) else ""
        text += f"\n\nOn a small case{(' (' + case + ')') if case else ''}:"
        text += f"\n  expected{where}:\n{_show(expected, at)}\n  actual{where}:\n{_show(actual, at)}"
    raise CheckFailed(wrap(text), mistake_id) from None


class Rows:
    """Integer rows (masks as 0/1, token ids) shown as a small table where fail() shows expected and actual: the
    first `columns` entries of each row (a 1-d tensor is one row), then "..." where a row is longer."""

    def __init__(self, values: torch.Tensor, columns: int = 16):
        v = values.detach().to("cpu").long()
        self.rows = [row[:columns] + ["..."] * (len(row) > columns)
                     for row in (v.unsqueeze(0) if v.dim() == 1 else v).tolist()]

    def __repr__(self) -> str:
        return "\n    ".join(" ".join(f"{x:>3}" for x in row) for row in self.rows)


def _first_difference(expected: Any, actual: Any) -> tuple[int, ...]:
    """The leading index of the first matrix in which two batches of one shape differ (all zeros otherwise), so
    that a message never shows two equal matrices of batches that differ further on."""
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)) \
            or expected.shape != actual.shape or expected.dim() <= 2:
        return ()
    e, a = (t.detach().to("cpu", torch.float64) for t in (expected, actual))
    for at in itertools.product(*map(range, e.shape[:-2])):
        if not close(a[at], e[at], **tolerance("cpu")):  # the strictest: the first matrix that differs at all
            return at
    return ()


def _show(value: Any, at: tuple[int, ...] = ()) -> str:
    """value indented; a tensor as at most 4 rows of 6 numbers of its first matrix (of the one at `at`)."""
    if not isinstance(value, torch.Tensor):
        return f"    {value!r}"
    v = value.detach().to("cpu", torch.float64)
    v = v[at] if at else v
    while v.dim() > 2:  # show the first matrix of a batch
        v = v[0]
    if v.dim() == 0:
        return f"    {float(v):.4f}"
    rows = (v if v.dim() == 2 else v.unsqueeze(0))[:4, :6]
    return "\n".join("    [" + ", ".join(f"{float(x):8.4f}" for x in row) + "]" for row in rows)


def tolerance(device: torch.device | str, looser: Mapping[str, float] | None = None) -> dict[str, float]:
    """rtol and atol for float32 results computed on this device (loose enough for GPU kernels); looser: a check's
    own tolerance, used where it is looser than the device's."""
    tol = course_device.tolerance(device)
    return {name: max(value, (looser or {}).get(name, value)) for name, value in tol.items()}


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    """True when both have one shape and agree elementwise within the tolerances (NaN never agrees)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(e).all()):
        return bool(((a == e) | (a.isnan() & e.isnan())).all())
    return bool((torch.abs(a - e) <= atol + rtol * torch.abs(e)).all())


# ------------------------------------------------------------------------------------------- reading evidence

def raised(ev: Evidence, key: str, what: str, hint: str = "") -> None:
    """Fail in plain words if the student's code raised while the probe recorded key."""
    __tracebackhide__ = True
    fact = ev.facts.get(key)
    if not isinstance(fact, dict) or fact.get("kind") != "raised":
        return
    if fact.get("not_implemented"):
        fail(f"{what} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             mistake=NOT_IMPLEMENTED)
    trace = str(fact.get("trace") or "")
    where = f"\n\nYour code raised it here:\n{trace}" if trace else ""
    last = trace.rstrip().rsplit("\n", 1)[-1]  # the line of the student's code that raised
    if fact.get("type") == "RuntimeError" and _USES_T.search(last):
        hint, mistake = f"{BATCH_T.explanation} {hint}".strip(), BATCH_T
    else:
        mistake = RAISED
    fail(f"{what} raised {str(fact.get('type'))[:80]}: {str(fact.get('message'))[:600]}{where}\n\n{hint}".rstrip(),
         mistake=mistake)


def expect_value_error(ev: Evidence, key: str, call: str, accepted: Mistake, wrong: Mistake | None = None) -> None:
    """The call recorded under key raised a ValueError: else fail naming accepted (it raised nothing) or wrong (it
    raised something else; accepted if not given)."""
    __tracebackhide__ = True
    fact = recorded(ev, key, call)
    if not isinstance(fact, dict) or fact.get("kind") != "raised":
        fail(f"{call} should raise a ValueError, but it raised nothing: {accepted.explanation}", mistake=accepted)
    if fact.get("not_implemented"):
        fail(f"{call} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             mistake=NOT_IMPLEMENTED)
    if fact.get("type") != "ValueError":
        wrong = wrong or accepted
        fail(f"{call} raised {str(fact.get('type'))[:80]}: {str(fact.get('message'))[:300]}. {wrong.explanation}",
             mistake=wrong)


def recorded(ev: Evidence, key: str, what: str) -> Any:
    """A JSON fact the probe must have recorded; fails plainly if it is missing."""
    __tracebackhide__ = True
    if key not in ev.facts:
        fail(f"The test recorded nothing about {what}: the check did not run to the end.")
    return ev.facts[key]


def value_kind(ev: Evidence, key: str) -> str:
    """'tensor', 'tuple', 'none', 'other', 'raised', or 'missing'."""
    fact = ev.facts.get(key)
    kind = fact.get("kind") if isinstance(fact, dict) else None
    return kind if kind in ("tensor", "tuple", "none", "other", "raised") else "missing"


def output(ev: Evidence, key: str, *, what: str, shape: tuple[int, ...] | None = None,
           shape_hints: Mapping[tuple[int, ...], str | Mistake] | None = None, hint: str = "",
           dtype: torch.dtype | Literal["floating", "any"] = "floating", device: bool = True) -> torch.Tensor:
    """The tensor the student's code returned under key, after checking it is a plain tensor of the right
    shape, dtype (that one, any floating-point one, or "any": a mask, token ids) and device; fails in plain words
    otherwise (not implemented, raised, wrong type...). shape_hints: what a wrong shape suggests, by shape; a Mistake
    there is named as the failure's mistake."""
    __tracebackhide__ = True
    raised(ev, key, what, hint)
    kind = value_kind(ev, key)
    fact = ev.facts.get(key) if kind != "missing" else {}
    if kind == "missing":
        fail(f"The test recorded nothing for {what}: the check did not run to the end.")
    if kind == "tuple":
        fail(f"{what} should return a torch.Tensor, but returned a tuple of {fact.get('length')} values.",
             mistake=NOT_A_TENSOR)
    if kind != "tensor" or fact.get("type") != "Tensor" or key not in ev.tensors:
        shown = "None" if kind == "none" else str(fact.get("type"))[:60]
        fail(f"{what} should return a torch.Tensor, but returned {shown}.", mistake=NOT_A_TENSOR)
    tensor = ev.tensors[key]
    if list(tensor.shape) != list(fact.get("shape", [])):
        fail(f"The test's record of {what} is inconsistent (its shape).")
    if isinstance(dtype, torch.dtype) and tensor.dtype != dtype:
        fail(f"{what} returned a tensor of dtype {tensor.dtype}; {dtype} is expected.")
    if dtype == "floating" and not tensor.is_floating_point():
        fail(f"{what} returned a tensor of dtype {tensor.dtype}; a floating-point tensor is expected.")
    if shape is not None and tuple(tensor.shape) != tuple(shape):
        extra = (shape_hints or {}).get(tuple(tensor.shape), "")
        named = extra if isinstance(extra, Mistake) else WRONG_SHAPE
        advice = extra.explanation[0].upper() + extra.explanation[1:] if isinstance(extra, Mistake) else extra
        fail(f"{what} returned shape {tuple(tensor.shape)}, expected {tuple(shape)}. {advice}".strip(), mistake=named)
    if device and fact.get("device") != ev.device:
        fail(f"{what} returned a tensor on {fact.get('device')}, but its input was on {ev.device}. "
             "Create new tensors with device=x.device (or use torch.*_like) so the code runs on any device.")
    return tensor


def requires_grad(ev: Evidence, key: str) -> bool:
    fact = ev.facts.get(key)
    return bool(isinstance(fact, dict) and fact.get("requires_grad") is True)


def tensor(ev: Evidence, key: str, *, shape: tuple[int, ...] | None = None) -> torch.Tensor | None:
    """A tensor the probe recorded (a gradient, say), or None when it was not there or has the wrong shape."""
    fact = ev.facts.get(key)
    if not isinstance(fact, dict) or fact.get("kind") != "tensor" or key not in ev.tensors:
        return None
    value = ev.tensors[key]
    if shape is not None and tuple(value.shape) != tuple(shape):
        return None
    return value


# ------------------------------------------------------------------------------------------- comparing

def expect_close(actual: torch.Tensor, expected: torch.Tensor, *, what: str, device: str = "cpu",
                 mistakes: Iterable[tuple[Mistake, torch.Tensor]] = (), otherwise: str, case: str = "",
                 looser: Mapping[str, float] | None = None) -> None:
    """Fail unless actual matches expected; name the first typical mistake that actual matches instead. looser: a
    tolerance used where it is looser than the device's (:func:`tolerance`)."""
    __tracebackhide__ = True
    tol = tolerance(device, looser)
    if close(actual, expected, **tol):
        return
    for mistake, candidate in mistakes:
        if close(actual, candidate, **tol):
            fail(f"{what} is not what was asked: {mistake.explanation}", expected, actual, case, mistake.id)
    if not bool(torch.isfinite(actual.detach()).all()):
        fail(f"{what} contains NaN or infinite values. {otherwise}", expected, actual, case)
    fail(f"{what} does not match the reference. {otherwise}", expected, actual, case)


def expect_equal(actual: torch.Tensor, expected: torch.Tensor | Sequence[torch.Tensor], *, what: str, otherwise: str,
                 case: str = "", mistakes: Iterable[tuple[Mistake, torch.Tensor]] = (),
                 differs: str = "does not match the reference") -> None:
    """Fail unless actual equals expected (or one of several right answers) exactly, as masks and token ids must;
    name the first typical mistake that actual equals instead. Both are shown as rows of integers (Rows)."""
    __tracebackhide__ = True
    right = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    if any(torch.equal(actual, r) for r in right):
        return
    for mistake, candidate in mistakes:
        if torch.equal(actual, candidate):
            fail(f"{what} is not what was asked: {mistake.explanation}", Rows(right[0]), Rows(actual), case,
                 mistake.id)
    fail(f"{what} {differs}. {otherwise}", Rows(right[0]), Rows(actual), case)


def expect_close_batch(actual: torch.Tensor, expected: torch.Tensor, *, what: str, device: str, otherwise: str,
                       case: str, mistakes: Iterable[tuple[Mistake, torch.Tensor]] = ()) -> None:
    """expect_close on a batch (b, ...), whose message shows the sequence that differs most, not sequence 0."""
    __tracebackhide__ = True
    if matches_any(actual, [expected], device):
        return
    i = 0
    if actual.shape == expected.shape and actual.dim() >= 3:
        diff = (actual - expected).abs().nan_to_num(float("inf")).flatten(1).amax(dim=1)  # (b,)
        i = int(diff.argmax())
    shown = f"{case}; sequence {i} of the batch shown"
    for mistake, candidate in mistakes:
        if matches_any(actual, [candidate], device):
            fail(f"{what} is not what was asked: {mistake.explanation}", expected[i], actual[i], shown, mistake.id)
    fail(f"{what} does not match the reference. {otherwise}", expected[i], actual[i], shown)


def matches_any(actual: torch.Tensor, candidates: Iterable[torch.Tensor], device: str = "cpu",
                looser: Mapping[str, float] | None = None) -> bool:
    """True when actual equals one of the candidates (the oracle or a catalogued mistake) within tolerance (looser:
    as :func:`tolerance`). Property and structure judges use it as an anchor: they award nothing for outputs that no
    real computation of the exercise, right or typically wrong, would give."""
    tol = tolerance(device, looser)
    return any(close(actual, candidate, **tol) for candidate in candidates)


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded with seeds.salted(seed): the same inputs every time a check runs while a student works,
    inputs nobody can know in advance under grading."""
    return torch.Generator(device).manual_seed(salted(seed))


def randn(*shape: int, seed: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Standard-normal float32 values drawn on the CPU (the same on every machine), then moved."""
    return torch.randn(*shape, generator=generator(seed)).to(device)


def expect_tuple(ev: Evidence, key: str, what: str, message: str, length: int,
                 mistake: Mistake | str | None = None) -> None:
    """Fail unless the student's code (what) returned under key a tuple or list of `length` values (recorded under
    key.0, key.1, ...): in plain words if it raised, else with message, naming mistake."""
    __tracebackhide__ = True
    raised(ev, key, what)
    fact = ev.facts.get(key)
    if value_kind(ev, key) != "tuple" or not isinstance(fact, dict) or fact.get("length") != length:
        fail(message, mistake=mistake)


# ------------------------------------------------------------------------------------------- on a stand-in GPU

@dataclass(frozen=True)
class OnGpus:
    """What a check ran on the stand-in GPUs of course/checks/device.py (device.on_gpus recorded it as the facts
    "<key>_on_<gpu>"): call, as the student reads it; left: the mistake of an output left on the CPU, or of a CPU
    tensor mixed in; float64: the mistake of float64 made on mps (None: no float64 mistake is likely); named: (phrase,
    mistake) pairs, the mistake named instead of left when the phrase is in what the stand-in saw (e.g. the operation
    that refused a CPU tensor: "aten.embedding" reads positions, where a model also makes a mask)."""

    key: str
    call: str
    left: Mistake
    float64: Mistake | None = None
    named: tuple[tuple[str, Mistake], ...] = ()


def expect_on_gpus(ev: Evidence, seen_on: OnGpus) -> None:
    """On each stand-in GPU the call kept its outputs on the device and broke no rule of it. A verdict of "unknown"
    (it raised on the data-less stand-in, e.g. at .item()) is not held against it: the cases judge the values."""
    __tracebackhide__ = True
    for gpu in ("cuda", "mps"):
        seen = ev.facts.get(f"{seen_on.key}_on_{gpu}")
        if not isinstance(seen, dict) or seen.get("verdict") not in ("kept", "left", "broke", "unknown"):
            fail(f"{seen_on.call} on a stand-in {gpu} left no record of what it did: run the test again.")
        detail = str(seen.get("detail", ""))
        if seen["verdict"] == "left":
            fail(f"{seen_on.call} returned {detail} when asked for {gpu}: {seen_on.left.explanation}",
                 mistake=seen_on.left)
        if seen["verdict"] == "broke":
            mistake = next((m for phrase, m in seen_on.named if phrase in detail), seen_on.left)
            mistake = seen_on.float64 if "has no 64-bit float" in detail else mistake
            fail(f"{seen_on.call} cannot run on {gpu}: {mistake.explanation} What the stand-in {gpu} saw: {detail}",
                 mistake=mistake)
