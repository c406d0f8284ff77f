"""Typical mistakes written once, as the code a student writes: the judge names them by running them, the catalogue
proves each is caught by grading it.

A judges module declares its mistakes beside its oracle, each with its id and the message a student reads::

    WRITTEN = Variants("course.judges.self_attention", reference="course.self_attention")
    WRITTEN.edit("weights-softmax-dim1", "attention_weights", ("dim=-1", "dim=1"), mistake="softmax-over-columns",
                 says="each column sums to 1 instead of each row. Take the softmax over the last dimension ...")

    @WRITTEN.rewrite("attention_weights", "normalised-without-exp", says="rows are divided by their sum ...")
    def weights_sum_normalised(x):
        raw = x @ x.transpose(1, 2)
        return raw / raw.sum(-1, keepdim=True)

An edit changes the reference answer (the function or class of that name in course/<assignment>.py): each (old, new)
replaces text that occurs exactly once there. A rewrite is a whole answer, for a mistake that is no small change of
the reference. Either way the variant's code is one answer cell, as a student writes it.

The judge names a mistake by running these variants (:meth:`Variants.outputs`) on the case's inputs and comparing
their outputs with the student's, in declaration order; catalogue/<assignment>.py turns the same variants into
catalogue entries (catalogue.written), which tests/test_catalogue.py grades one by one, expecting their ids. So every
id a judge can name by output is produced by its own code, and the message sits beside the code that makes it.

Decisions, and why:

- Where the definitions live: in the judges module (course/judges/<assignment>.py), which the grading sandbox replaces
  by a stub that refuses to be imported (autograder/sandbox.py _judges_stub; tests/test_sandbox.py): they are run in
  the grader's own process, where course.judges is imported by autograder/judging.py, and never where the student's
  code runs under grading. While a student works, a test cell judges in the student's kernel, as it did already.
- What text the edits apply to: the reference in course/<assignment>.py, not the solved cell of source/. source/ is
  only in a course folder; the course installed as a wheel (tests/test_wheel.py: a hub, a laptop without a checkout)
  has course/ but no source/, and its judges must still name mistakes. The reference is hidden in the sandbox while
  its assignment is graded (course_dir.answer_modules), and read here only in the grader's process.
- How a variant runs: its code is executed as a notebook cell would be, in a namespace holding the notebook's imports
  (math, torch, F, nn) and the reference module's names, so a later answer calls the reference's earlier ones (a
  mistake in basic_self_attention uses a correct attention_weights). Without autograd, on the inputs the case
  regenerates from its seed (as the oracle does). A module's variants (simulators(): a ForwardOracle's) are
  built with the recorded constructor arguments and run with the student's recorded weights (module_output); a module
  that calls an earlier answer (02's SelfAttentionQKV calls attention) is also run calling each variant named of it
  (calling()), and each of its own variants calling each (together()): two mistakes together, named with both
  messages.
  The catalogue grades only the pairs it lists (02's module-fused-scaled-raw-values); the judge knows every pair.
  A module's variant is not skipped when it raises: built from the recorded weights, it fits every case, or is wrong.
- A variant that raises on a case's inputs (x.T on a batch, a shape that no longer fits) matches nothing there: it
  is skipped. Variants run lazily, only once the student's output has missed the oracle, and stop at the first
  match: a right answer never runs them. They are the course's code on a check's small inputs, not the student's,
  so they get no time limit; tests/test_catalogue.py grades each one and would show a slow one.
- When two variants match, the first declared is named, within the device's tolerance (compare.tolerance), as the
  simulated mistakes were: declare the more specific mistake first.
- Mistakes that the shared checks name (wrong shape, raised, not a tensor, detached) keep their shared ids and stay in
  catalogue/<assignment>.py, written as functions: no judge runs them, so they are not declared here.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import textwrap
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from course.checks.compare import Mistake

#: what a notebook's setup cell imports, for the variants' code (the names a student's cell may use)
NOTEBOOK_NAMES = {"math": math, "torch": torch, "F": F, "nn": nn}


@dataclass(frozen=True)
class Written:
    """One typical mistake, written as the answer cell a student writes."""

    name: str  # the catalogue's name for it, e.g. "weights-softmax-dim1"
    answer: str  # the function or class it replaces, e.g. "attention_weights"
    mistake: Mistake  # the id the judge names and the message a student reads
    code: str  # the whole answer, as a student would write it
    reference: str  # the module of the reference answers, whose names the code may use (earlier answers)

    @property
    def run(self) -> Callable:
        """The variant's function or class, defined as the notebook defines an answer."""
        return defined(self.code, self.answer, self.reference)


Simulator = Callable[..., torch.Tensor]  # simulator(w, *args, **inputs), as course/judges/kinds.py's ForwardOracle


class Variants:
    """The written mistakes of one judges module, in declaration order."""

    def __init__(self, module: str, reference: str):
        self.module = module  # e.g. "course.judges.self_attention": the mistakes are declared under it
        self.reference = reference  # e.g. "course.self_attention": the module whose answers the edits change
        self.written: list[Written] = []
        self._mistakes: dict[str, Mistake] = {}

    def __getitem__(self, mistake_id: str) -> Mistake:
        return self._mistakes[mistake_id]

    def _declared(self, mistake_id: str, says: str | None) -> Mistake:
        """The Mistake of this id: declared here with says the first time, reused after (says left out)."""
        if mistake_id in self._mistakes:
            if says is not None:
                raise ValueError(f"{self.module}: the mistake {mistake_id!r} is explained already; leave out says")
            return self._mistakes[mistake_id]
        if not says:
            raise ValueError(f"{self.module}: say what {mistake_id!r} means the first time it is written")
        self._mistakes[mistake_id] = Mistake(mistake_id, says, declared_in=self.module)
        return self._mistakes[mistake_id]

    def _add(self, name: str, answer: str, mistake: Mistake, code: str) -> None:
        if any(w.name == name for w in self.written):
            raise ValueError(f"{self.module}: two variants named {name!r}")
        self.written.append(Written(name, answer, mistake, code, self.reference))

    def edit(self, name: str, answer: str, *changes: tuple[str, str], mistake: str, says: str | None = None) -> None:
        """The reference answer `answer` with each (old, new) applied, named mistake (says: its message, the first
        time the id is written)."""
        if not changes or any(len(change) != 2 for change in changes):
            raise ValueError(f"{self.module}: edit {name!r}: give (old, new) pairs")
        code = edited(reference_source(self.reference, answer), changes, name)
        self._add(name, answer, self._declared(mistake, says), code)

    def rewrite(self, answer: str, mistake: str, says: str | None = None) -> Callable[[Callable], Callable]:
        """Decorate a whole answer written differently from the reference: the answer `answer`, named mistake. Its
        name with dashes is its catalogue name; its source, renamed to answer, is the variant's code."""

        def register(fn: Callable) -> Callable:
            self._add(fn.__name__.replace("_", "-").lower(), answer, self._declared(mistake, says),
                      cell_source(fn, answer))
            return fn

        return register

    def mistake(self, mistake_id: str, says: str) -> Mistake:
        """A mistake no variant here produces by output (a structure one, such as a bias), declared beside them."""
        return self._declared(mistake_id, says)

    def of(self, answer: str) -> list[Written]:
        return [w for w in self.written if w.answer == answer]

    def outputs(self, answer: str, **inputs: torch.Tensor) -> Iterator[tuple[Mistake, torch.Tensor]]:
        """(mistake, what its variant returns) for each variant of answer that runs on these inputs, lazily, in
        declaration order, without autograd; a variant that raises is skipped (it cannot be what the student got)."""
        for written in self.of(answer):
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # x.T on a batch warns before it raises
                    out = written.run(**inputs)
            except Exception:  # noqa: BLE001 - a variant that cannot run on these inputs matches nothing
                continue
            if isinstance(out, torch.Tensor):
                yield written.mistake, out


def simulators(variants: Variants, answer: str) -> list[tuple[Mistake, Simulator]]:
    """The module answer's typical mistakes as ForwardOracle's simulators: each variant of answer, in order."""
    return [(w.mistake, partial(module_output, w.code, answer, variants.reference, ())) for w in variants.of(answer)]


def calling(variants: Variants, answer: str, names: tuple[str, ...]) -> list[tuple[Mistake, Simulator]]:
    """Simulators of the reference module answer calling each variant named in names (a mistake in the earlier
    answer it calls, e.g. attention), named as that variant."""
    called = [w for w in variants.written if w.name in names]
    if len(called) != len(names):
        raise ValueError(f"{variants.module}: no variants named {sorted(set(names) - {w.name for w in called})}")
    right = reference_source(variants.reference, answer)
    return [(c.mistake, partial(module_output, right, answer, variants.reference, ((c.code, c.answer),)))
            for c in called]


def together(variants: Variants, answer: str, names: tuple[str, ...], several: Mistake
             ) -> list[tuple[Mistake, Simulator]]:
    """Simulators of each variant of the module answer calling each variant named in names (as calling's, which
    checks they exist): two mistakes together, named several, its message both of theirs."""
    return [(both(several, w.mistake, c.mistake),
             partial(module_output, w.code, answer, variants.reference, ((c.code, c.answer),)))
            for w in variants.of(answer) for c in variants.written if c.name in names]


def module_output(code: str, answer: str, reference: str, calls: tuple[tuple[str, str], ...],
                  w: Mapping[str, torch.Tensor], *args: object, **inputs: torch.Tensor) -> torch.Tensor:
    """The module code defines as answer (after the cells in calls), built with the constructor arguments args on
    the meta device (no weights drawn: the global generator untouched), run on inputs with the weights w (the
    student's, as modules.expect_parameters reads them) as its parameters, strictly (w names each, no more; a bias in w
    is given to a bias-free nn.Linear), by torch.func.functional_call: gradients reach w as through the student's."""
    module = _built_once(code, answer, reference, calls, args, tuple(sorted(w)))
    return torch.func.functional_call(module, dict(w), kwargs=inputs, strict=True)


@lru_cache(maxsize=512)
def _built_once(code: str, answer: str, reference: str, calls: tuple[tuple[str, str], ...], args: tuple,
           names: tuple[str, ...]) -> nn.Module:
    """module_output's module, built once for these constructor arguments and weight names: building is most of a
    small module's cost (a check runs every variant on every case), and functional_call only lends it w for a call."""
    with torch.device("meta"):
        module = defined(code, answer, reference, calls)(*args)
        for name in names:  # the student's layers have a bias where their weights do (a property keeps credit for one)
            owner, _, leaf = name.rpartition(".")
            layer = module.get_submodule(owner)
            if leaf == "bias" and isinstance(layer, nn.Linear) and layer.bias is None:
                layer.bias = nn.Parameter(torch.empty(layer.out_features))
    return module


def both(several: Mistake, *parts: Mistake) -> Mistake:
    """The mistake id several, its message each of parts' in turn."""
    return Mistake(several.id, "several things at once. " + " ".join(
        f"({i}) {m.explanation[0].upper()}{m.explanation[1:]}" for i, m in enumerate(parts, 1)))


def edited(solved: str, changes: tuple[tuple[str, str], ...], name: str) -> str:
    """The answer with each change applied; an old text that does not occur exactly once is an error."""
    for old, new in changes:
        found = solved.count(old)
        if found != 1:
            raise ValueError(f"edit {name!r}: {old!r} occurs {found} times in the answer, not once")
        solved = solved.replace(old, new)
    return solved


def reference_source(module: str, answer: str) -> str:
    """The source of the reference answer `answer` of module (e.g. course.self_attention), as a cell holds it."""
    return cell_source(getattr(importlib.import_module(module), answer), answer)


def cell_source(obj: Callable, rename_to: str | None = None) -> str:
    """The source of a function or class as an answer cell holds it: dedented, decorators dropped, and with
    rename_to, defining that name."""
    text = textwrap.dedent(inspect.getsource(obj))
    node = ast.parse(text).body[0]
    body = text.splitlines()[node.lineno - 1:]  # after the decorators
    if rename_to:
        keyword = "class" if isinstance(node, ast.ClassDef) else "def"
        body[0] = body[0].replace(f"{keyword} {node.name}", f"{keyword} {rename_to}", 1)
    return "\n".join(body) + "\n"


@cache
def _names(reference: str) -> Mapping[str, object]:
    module: ModuleType = importlib.import_module(reference)
    return {**NOTEBOOK_NAMES, **vars(module)}


@cache
def defined(code: str, answer: str, reference: str, calls: tuple[tuple[str, str], ...] = ()) -> Callable:
    """What code defines under the name answer, run as a notebook cell after the reference's answers and the cells in
    calls, (code, answer) each; also for a judge that runs a variant its own way (09's language model is built on the
    CPU, its rotary tables computed by its constructor, and run with a cache)."""
    namespace = dict(_names(reference))
    for earlier, name in calls:
        namespace[name] = defined(earlier, name, reference)
    exec(compile(code, f"<variant of {answer}>", "exec"), namespace)  # noqa: S102 - the course's own variants
    return namespace[answer]
