"""Typical wrong implementations, and correct ones written differently, for every graded answer cell.

The test suite grades each with real nbgrader: a mistake must score below full marks with its diagnosis in
the feedback, an alternative must score full marks. The sample batch borrows some of them.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    """One way of filling in one answer cell."""

    assignment: str  # e.g. "01_self_attention"
    name: str  # short slug, used as the student id when graded
    cell: str  # grade_id of the answer cell it replaces
    code: str  # the whole cell, as a student would write it
    diagnosis: str | None = None  # words the feedback must contain; None for a correct alternative


def _modules() -> list:
    """Every module of this package; each holds VARIANTS and SAMPLE_MISTAKES for one assignment."""
    import importlib
    import pkgutil

    return [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)]


def _variants() -> list[Variant]:
    return [variant for module in _modules() for variant in module.VARIANTS]


def sample_mistakes(assignment: str) -> list[Variant]:
    """The mistakes put in the sample batch's 'sample-mistakes' submission: one per answer cell, none cancelling another."""
    names = {name for module in _modules() for name in getattr(module, "SAMPLE_MISTAKES", [])}
    return [v for v in mistakes(assignment) if v.name in names]


def mistakes(assignment: str | None = None) -> list[Variant]:
    return [v for v in _variants() if v.diagnosis is not None and assignment in (None, v.assignment)]


def alternatives(assignment: str | None = None) -> list[Variant]:
    return [v for v in _variants() if v.diagnosis is None and assignment in (None, v.assignment)]
