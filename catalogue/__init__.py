"""Typical mistakes and correct alternatives for every answer cell, written as real Python.

Each module holds one assignment's variants: ordinary functions and classes, decorated with ``@mistake(id,
cell)`` (the judge must name that mistake id) or ``@alternative(cell)`` (correct, written differently: full
marks). A variant's cell text is its source with the decorator dropped and its name changed to the answer's
name (``attention_weights``, ``MultiHeadAttention``...). Names a variant uses but does not define (``torch``,
``F``, earlier answers) come from the notebook, as in a student's cell. ``helpers`` adds other functions'
source before it, for answer cells that hold more than one definition.

The mistakes a judge names by running them are written once, in its judges module (course/judges/variants.py), and
taken here with ``written(WRITTEN, cells=...)``. The others (those a shared check names: a wrong shape, an error; those
named from a structure) change a line or two of the solution, and are written as that change (with
``edit = edits(__name__)`` once, at the top of the module)::

    edit("lm-no-final-norm", LM, ("self.to_logits(self.norm(x))", "self.to_logits(x)"), mistake="lm-no-final-norm")

Each (old, new) pair replaces text that must occur exactly once in the solved cell, so an edit that no longer applies
to the solution fails loudly instead of testing something else.

The suite replays every variant in-process (tests/test_catalogue.py) and grades a few end to end with real
nbgrader. The sample batch (samples/sample-mistakes) takes the variants named in each module's SAMPLE_MISTAKES.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import nbformat

from autograder import course_dir
from autograder.notebooks import answer_cells
from course.judges.variants import Variants, cell_source, edited


@dataclass(frozen=True)
class Variant:
    """One way of filling in one answer cell."""

    assignment: str  # e.g. "01_self_attention"
    name: str  # slug: the Python name with dashes; the student id when graded end to end
    cell: str  # grade_id of the answer cell it replaces
    code: str  # the whole cell, as a student would write it
    mistake: str | None = None  # id the judge must name; None for a correct alternative

    @property
    def is_mistake(self) -> bool:
        return self.mistake is not None


@dataclass(frozen=True)
class _Entry:
    module: str  # the catalogue module that declared it
    name: str
    cell: str
    mistake: str | None
    obj: Callable | None = None  # written out: its source is the cell
    helpers: tuple = ()
    changes: tuple[tuple[str, str], ...] = ()  # or an edit of the solved cell
    code: str = ""  # or the code of a mistake a judges module wrote (course/judges/variants.py)


_REGISTRY: list[_Entry] = []


def _slug(obj: Callable) -> str:
    return obj.__name__.replace("_", "-").lower()


def _register(cell: str, mistake_id: str | None, helpers: tuple) -> Callable:
    def decorate(obj: Callable) -> Callable:
        _REGISTRY.append(_Entry(obj.__module__, _slug(obj), cell, mistake_id, obj, helpers))
        return obj
    return decorate


def edits(module: str) -> Callable[..., None]:
    """``edit`` for the catalogue module `module`, which binds it once: ``edit = edits(__name__)``."""

    def edit(name: str, cell: str, *changes: tuple[str, str], mistake: str | None = None) -> None:
        """A variant of `cell` as what it changes in the solution: each (old, new) replaces old, which must occur
        exactly once in the solved cell. mistake: the id the judge must name; None for a correct alternative."""
        if not changes or any(len(change) != 2 for change in changes):
            raise ValueError(f"edit {name!r}: give (old, new) pairs")
        _REGISTRY.append(_Entry(module, name, cell, mistake, changes=tuple(changes)))
    return edit


def written(variants: Variants, cells: Mapping[str, str] | None = None) -> None:
    """The mistakes a judges module wrote as code (course/judges/variants.py), each expected to be named by its id:
    the judge names them by running the same code, so the catalogue proves what the judge knows. cells: the grade id
    of the answer cell of a class, e.g. {"SelfAttentionQKV": "self_attention_qkv"} (a function's cell is its name)."""
    module = f"{__name__}.{variants.reference.rsplit('.', 1)[1]}"  # course.self_attention -> catalogue.self_attention
    for w in variants.written:
        _REGISTRY.append(_Entry(module, w.name, (cells or {}).get(w.answer, w.answer), w.mistake.id, code=w.code))




def mistake(mistake_id: str, cell: str, helpers: tuple = ()) -> Callable:
    """A typical mistake in the answer cell `cell`; the judge must diagnose it as mistake_id."""
    return _register(cell, mistake_id, helpers)


def alternative(cell: str, helpers: tuple = ()) -> Callable:
    """A correct answer for `cell`, written differently from the solution: it must score full marks."""
    return _register(cell, None, helpers)




def defined_name(source: str) -> str | None:
    """The first top-level function or class an answer cell defines."""
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            return node.name
    return None


def _in_cell(solved: str, code: str) -> str:
    """A written mistake's code as its answer cell holds it: where the solved cell defines other functions or classes
    too (09's swiglu cell holds swiglu_hidden, its model cell ModernBlock), code replaces only the definition it
    makes, and the others stay as solved."""
    tree, name = ast.parse(solved or "pass"), defined_name(code)
    defined = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    if len(defined) < 2 or name not in {node.name for node in defined}:
        return code
    node = next(node for node in defined if node.name == name)
    lines, start = solved.splitlines(), min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    return "\n".join([*lines[:start], code.rstrip("\n"), *lines[node.end_lineno:]]) + "\n"


@cache
def _solved() -> dict[tuple[str, str], str]:
    """(assignment, grade_id) -> the solved source of every answer cell."""
    cells = {}
    for assignment in course_dir.assignments():
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            cells.update({(assignment, cell): source for cell, source in answer_cells(nb).items()})
    return cells


def _answer_name(assignment: str, cell: str) -> str | None:
    source = _solved().get((assignment, cell))
    return None if source is None else defined_name(source)


@cache
def _modules() -> dict[str, ModuleType]:
    """Every catalogue module, imported (which registers its variants), by name."""
    modules = sorted(m.name for m in pkgutil.iter_modules(__path__))
    return {name: importlib.import_module(f"{__name__}.{name}") for name in modules}


def _assignment(module_name: str) -> str:
    return _modules()[module_name.rsplit(".", 1)[1]].ASSIGNMENT


def _cell(entry: _Entry, assignment: str) -> str:
    """The grade_id of the answer cell the entry replaces: a written mistake knows the answer's name (the function or
    class), which its solved cell defines."""
    if not entry.code:
        return entry.cell
    cells = (cell for (a, cell), source in _solved().items() if a == assignment and defined_name(source) == entry.cell)
    return next(cells, entry.cell)


def _code(entry: _Entry, assignment: str) -> str:
    if entry.code:
        return _in_cell(_solved().get((assignment, _cell(entry, assignment)), ""), entry.code)
    if entry.obj is None:
        return edited(_solved()[assignment, entry.cell], entry.changes, entry.name)
    code = "".join(cell_source(h) + "\n\n" for h in entry.helpers)
    return code + cell_source(entry.obj, _answer_name(assignment, entry.cell))


@cache
def variants() -> tuple[Variant, ...]:
    """Every variant of every catalogue module, in module order."""
    _modules()
    found = []
    for entry in _REGISTRY:
        assignment = _assignment(entry.module)
        found.append(Variant(assignment, entry.name, _cell(entry, assignment), _code(entry, assignment), entry.mistake))
    return tuple(found)


def expected_mistakes() -> list[tuple[str, str, str]]:
    """(assignment, variant name, mistake id) of every catalogued mistake, without reading the variants' source
    (which takes seconds)."""
    _modules()
    return [(_assignment(entry.module), entry.name, entry.mistake) for entry in _REGISTRY if entry.mistake is not None]


def mistakes(assignment: str | None = None) -> list[Variant]:
    return [v for v in variants() if v.is_mistake and assignment in (None, v.assignment)]


def alternatives(assignment: str | None = None) -> list[Variant]:
    return [v for v in variants() if not v.is_mistake and assignment in (None, v.assignment)]


def sample_mistakes(assignment: str) -> list[Variant]:
    """The mistakes of the sample batch's 'sample-mistakes' submission: one per answer cell, none cancelling another."""
    module = importlib.import_module(f"{__name__}.{course_dir.module_name(assignment)}")
    names = set(getattr(module, "SAMPLE_MISTAKES", ()))
    return [v for v in mistakes(assignment) if v.name in names]
