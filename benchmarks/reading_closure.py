"""Reading closure: what a reader must open to understand one test, and the functions that take too many arguments.

    .venv/bin/python benchmarks/reading_closure.py [--assignment 04_multi_head] [--quiet]
    .venv/bin/python benchmarks/reading_closure.py --check 08:lm_cache    # what to read to review one check

A test cell ``test_NAME`` of an assignment calls the check ``NAME`` of course/checks/<module>.py; its judge is in
course/judges/<module>.py. Its *reading closure* is every definition reachable from the two, found from the source
alone (the AST; nothing is imported but the notebooks' cell list):

- **Units.** A unit is one top-level statement of a Python file under course/ or catalogue/: a function (with its
  decorators), a class (with all its methods), an assignment, or a bare call such as ``against(probes.x, ...)``. Its
  lines are its first to its last line.
- **Start.** The check's declaration (the statements of course/checks/<module>.py that assign NAME); the judge (the
  function of course/judges/<module>.py decorated ``@judge("NAME")``, and every top-level statement there that
  names the check: ``against(probes.NAME, ...)``); and the catalogue entries of the answer cell the test cell tests
  (the nearest answer cell above it in the notebook: each ``@mistake``/``@alternative`` function or ``edit(...)``),
  and the mistakes of that answer written in the judges module (``edit(...)``, ``@rewrite(...)``, and any other
  top-level call passed the answer's name, such as 04's ``forward_mistake``), the cell named by a string or by a
  module-level name bound to one (``LM = "language_model"``).
- **Followed.** From a reached unit, every name it uses (``ast.Name``) that its module defines at top level or
  imports (anywhere in the file, even inside a function) from a module under course/ or catalogue/, and every
  ``module.attribute`` whose module is such an import; re-exports are followed to the defining statement.
- **Not followed.** torch, the standard library, autograder/ and every other package; attributes of values
  (``check.cases``, ``self.x``), which a reader finds in a class already counted; locals that happen to share a
  module-level name are followed anyway (a small over-count).

Per check it prints the files and lines of its closure, and the lines that belong to that check alone (reached by
no other check); then the median and the worst, the three examples issue 40 names, the check machinery's lines
per graded test cell, and every function or dataclass under course/checks, course/judges and catalogue/ with more
than 8 parameters (self and cls not counted, *args and **kwargs counted) or fields.
"""

from __future__ import annotations

import argparse
import ast
import signal
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course", "catalogue")
MACHINERY = ("course/checks", "course/judges", "catalogue")
EXAMPLES = (("01_self_attention", "attention_weights_by_hand"), ("04_multi_head", "multi_head_vs_pytorch"),
            ("09_modern_decoder", "modern_lm_oracle"))
MOST_PARAMETERS = 8


@dataclass(frozen=True)
class Unit:
    """One top-level statement of a file: what a reader reads as one piece."""

    path: str  # relative to the repository, e.g. "course/checks/kinds.py"
    start: int
    end: int
    name: str  # what it defines, or its first words

    @property
    def lines(self) -> int:
        return self.end - self.start + 1


@dataclass
class Module:
    """A parsed module under course/ or catalogue/: its units, what each top-level name is, and its imports."""

    dotted: str
    path: str
    tree: ast.Module
    units: list[tuple[ast.stmt, Unit]] = field(default_factory=list)
    defines: dict[str, Unit] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # alias -> (module, name or None)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@cache
def _dotted_path(dotted: str) -> Path | None:
    """The file of an importable module under course/ or catalogue/, or None."""
    if dotted.split(".")[0] not in PACKAGES:
        return None
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    names = []
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    for target in targets:
        for sub in ast.walk(target) if target is not None else ():
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


@cache
def module(dotted: str) -> Module | None:
    path = _dotted_path(dotted)
    if path is None:
        return None
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    lines = text.splitlines()
    found = Module(dotted, _rel(path), tree)
    package = dotted if path.name == "__init__.py" else dotted.rsplit(".", 1)[0]
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        names = _targets(node)
        label = names[0] if names else lines[node.lineno - 1].strip()[:40]
        unit = Unit(found.path, first, node.end_lineno or node.lineno, label)
        found.units.append((node, unit))
        for name in names:
            found.defines[name] = unit
    for node in ast.walk(tree):  # imports anywhere: a function may import the judges lazily
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.imports[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname
                                                                           else alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [source])
            for alias in node.names:
                found.imports[alias.asname or alias.name] = (source.strip("."), alias.name)
    return found


def resolve(mod: Module, name: str, seen: frozenset = frozenset()) -> Unit | str | None:
    """What name means in mod: a unit (its definition, re-exports followed), a module's dotted name, or None."""
    if name in mod.defines:
        return mod.defines[name]
    if name not in mod.imports or (mod.dotted, name) in seen:
        return None
    source, attribute = mod.imports[name]
    if attribute is None:
        return source if _dotted_path(source) else None
    if _dotted_path(f"{source}.{attribute}"):
        return f"{source}.{attribute}"  # from package import submodule
    target = module(source)
    return None if target is None else resolve(target, attribute, seen | {(mod.dotted, name)})


def _uses(mod: Module, node: ast.AST) -> set[Unit]:
    """The units node uses directly: its names and module.attribute chains."""
    reached: set[Unit] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            target = resolve(mod, sub.value.id)
            if isinstance(target, str) and (other := module(target)) is not None:
                found = resolve(other, sub.attr)
                if isinstance(found, Unit):
                    reached.add(found)
        elif isinstance(sub, ast.Name):
            target = resolve(mod, sub.id)
            if isinstance(target, Unit):
                reached.add(target)
    return reached


@cache
def _uses_of(unit: Unit) -> frozenset[Unit]:
    """The units a Python unit uses directly (computed once per unit)."""
    mod = module(unit.path.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
    node = next(node for node, found in mod.units if found == unit)
    return frozenset(_uses(mod, node))


def closure(starts: set[Unit]) -> set[Unit]:
    """Every unit reachable from starts."""
    reached, todo = set(), list(starts)
    while todo:
        unit = todo.pop()
        if unit in reached:
            continue
        reached.add(unit)
        todo.extend(_uses_of(unit) - reached)
    return reached


# ------------------------------------------------------------------------------------------- where a check starts


def _names_check(node: ast.stmt, check: str, probes: set[str]) -> bool:
    """node registers a judge for check: @judge("check"), or it names probes.check (or the check itself)."""
    for decorator in getattr(node, "decorator_list", ()):
        if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "judge" and decorator.args
                and isinstance(decorator.args[0], ast.Constant) and decorator.args[0].value == check):
            return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return False  # a helper that merely reads another check's cases is reached through what uses it
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == check and getattr(sub.value, "id", None) in probes:
            return True
        if isinstance(sub, ast.Name) and sub.id == check:
            return True
    return False


def _constants(mod: Module) -> dict[str, str]:
    """The module's top-level names bound to strings (``LM = "language_model"``, ``MHA, WIDE = "...", "..."``)."""
    found = {}
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            pairs = (zip(target.elts, value.elts, strict=False) if isinstance(target, ast.Tuple)
                     and isinstance(value, ast.Tuple) else [(target, value)])
            found.update({t.id: v.value for t, v in pairs if isinstance(t, ast.Name) and isinstance(v, ast.Constant)
                          and isinstance(v.value, str)})
    return found


def _catalogue_cells(node: ast.stmt, constants: dict[str, str]) -> set[str]:
    """The answer cell a catalogue entry (@mistake(id, cell), @alternative(cell), edit(name, cell, ...)) or a mistake
    written in a judges module (WRITTEN.edit(name, answer, ...), @WRITTEN.rewrite(answer, ...)) replaces, written
    as a string or as a name the module binds to one (constants); for any other top-level call that declares
    mistakes (04's ``forward_mistake("scale", NARROW_NAME, ...)``), every string it is passed."""

    def text(value: ast.expr | None) -> str | None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        return constants.get(value.id) if isinstance(value, ast.Name) else None

    calls = [d for d in getattr(node, "decorator_list", ()) if isinstance(d, ast.Call)]
    bare = isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
    if bare:
        calls.append(node.value)
    found = set()
    for call in calls:
        kind = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
        position = {"mistake": 1, "edit": 1, "alternative": 0, "rewrite": 0}.get(kind)
        keyword = {k.arg: k.value for k in call.keywords}
        if position is not None:
            found.add(text(keyword.get("cell", call.args[position] if len(call.args) > position else None)))
        elif bare and call is node.value:
            found.update(text(arg) for arg in call.args)
    return found - {None}


def _defined_names(source: str) -> frozenset[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef))


def _written_cells(catalogue: Module | None) -> dict[str, str]:
    """The answer cell of each class whose mistakes a judges module writes, from the catalogue's
    ``written(WRITTEN, cells={"DecoderBlock": "decoder_block"})``: a written mistake names the class, the notebook
    the cell's grade id (where the cell does not define the class itself: 09's ModernBlock, in the model's cell)."""
    for node in ast.walk(catalogue.tree) if catalogue is not None else ():
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "written":
            for keyword in node.keywords:
                if keyword.arg == "cells" and isinstance(keyword.value, ast.Dict):
                    return {k.value: v.value for k, v in zip(keyword.value.keys, keyword.value.values, strict=True)
                            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {}


@dataclass(frozen=True)
class TestCell:
    assignment: str
    module: str  # course/checks/<module>.py
    check: str
    answer: str | None  # the grade_id of the answer cell above it
    defines: frozenset[str] = frozenset()  # the functions and classes its solved answer cell defines


def test_cells() -> list[TestCell]:
    """Every graded test cell of the course, with the answer cell it tests (the nearest one above it)."""
    from autograder import course_dir  # noqa: PLC0415 - only for the list of notebooks

    found = []
    for assignment in course_dir.assignments():
        name = course_dir.module_name(assignment)
        for notebook in course_dir.notebooks(assignment):
            answer, defines = None, frozenset()
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            for cell in nb.cells:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if meta.get("solution") and not meta.get("grade"):
                    answer, defines = meta.get("grade_id"), _defined_names(cell.source)
                elif meta.get("grade"):
                    found.append(TestCell(assignment, name, meta["grade_id"].removeprefix("test_"), answer, defines))
    return found


def starts(cell: TestCell) -> set[Unit]:
    """The check's declaration, its judge, and the catalogue entries of the answer cell it tests."""
    probe = module(f"course.checks.{cell.module}")
    found = {unit for node, unit in probe.units if cell.check in _targets(node)}
    judges = module(f"course.judges.{cell.module}")
    catalogue = module(f"catalogue.{cell.module}")
    if judges is not None:
        aliases = {alias for alias, (source, name) in judges.imports.items()
                   if (name is None and source == f"course.checks.{cell.module}")
                   or (source == "course.checks" and name == cell.module)}
        cells, constants = _written_cells(catalogue), _constants(judges)
        for node, unit in judges.units:
            answers = _catalogue_cells(node, constants)  # a function's cell is its name; a class's is found in cells
            of_cell = any(cells.get(a, a) == cell.answer or a in cell.defines for a in answers)
            if _names_check(node, cell.check, aliases) or of_cell:
                found.add(unit)
    if catalogue is not None and cell.answer is not None:
        constants = _constants(catalogue)
        found |= {unit for node, unit in catalogue.units
                  if _catalogue_cells(node, constants) & {cell.answer, *cell.defines}}
    return found


# ------------------------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class Closure:
    cell: TestCell
    units: frozenset[Unit]

    @property
    def files(self) -> int:
        return len({unit.path for unit in self.units})

    @property
    def lines(self) -> int:
        return sum(unit.lines for unit in self.units)


def closures() -> list[Closure]:
    return [Closure(cell, frozenset(closure(starts(cell)))) for cell in test_cells()]


def own_lines(found: list[Closure]) -> dict[tuple[str, str], int]:
    """(assignment, check) -> the lines of the units no other check reaches."""
    counts = Counter(unit for item in found for unit in item.units)
    return {(c.cell.assignment, c.cell.check): sum(u.lines for u in c.units if counts[u] == 1) for c in found}


def shared_core(found: list[Closure]) -> frozenset[Unit]:
    """The units at least half of the checks reach (compare.py's `output`, `Check`, `Recorder`, ...): a library
    a reader learns once, like torch's, not again for every check. Printed apart so that both views are seen."""
    counts = Counter(unit for item in found for unit in item.units)
    return frozenset(unit for unit, n in counts.items() if 2 * n >= len(found))


def machinery_lines() -> int:
    """Lines of the Python of course/checks, course/judges and catalogue/."""
    files = [p for folder in MACHINERY for p in (ROOT / folder).rglob("*.py")]
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)


def wide_definitions() -> list[tuple[str, str, int]]:
    """(file:line, name, count) of every function with more than MOST_PARAMETERS parameters and every dataclass or
    NamedTuple with more than MOST_PARAMETERS fields, under course/checks, course/judges and catalogue/."""
    found = []
    for folder in MACHINERY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = node.args
                    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
                    count = len(names) + (a.vararg is not None) + (a.kwarg is not None)
                elif isinstance(node, ast.ClassDef) and _is_record(node):
                    count = sum(isinstance(s, ast.AnnAssign) and "ClassVar" not in ast.unparse(s.annotation)
                                for s in node.body)
                else:
                    continue
                if count > MOST_PARAMETERS:
                    found.append((f"{_rel(path)}:{node.lineno}", node.name, count))
    return found


def _is_record(node: ast.ClassDef) -> bool:
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    return decorated or any("NamedTuple" in ast.unparse(b) for b in node.bases)


def report(assignment: str | None = None, quiet: bool = False) -> dict:
    """Print the figures (all of them, or the per-check table of one assignment) and return them."""
    found = closures()
    own = own_lines(found)
    core = shared_core(found)
    shown = [c for c in found if assignment in (None, c.cell.assignment)]
    if not quiet:
        print(f"{'assignment':<22} {'check':<44} {'files':>5} {'lines':>6} {'alone':>6} {'beyond core':>11}")
        for c in shown:
            key = (c.cell.assignment, c.cell.check)
            beyond = sum(u.lines for u in c.units - core)
            print(f"{c.cell.assignment:<22} {c.cell.check:<44} {c.files:>5} {c.lines:>6} {own[key]:>6} {beyond:>11}")
    files = [c.files for c in found]
    lines = [c.lines for c in found]
    worst = max(found, key=lambda c: c.lines)
    machinery = machinery_lines()
    figures = {"checks": len(found), "median_files": statistics.median(files), "median_lines": statistics.median(lines),
               "worst_files": max(files), "worst_lines": worst.lines,
               "worst": (worst.cell.assignment, worst.cell.check), "machinery_lines": machinery,
               "examples": {}, "wide": wide_definitions()}
    for a, check in EXAMPLES:
        item = next((c for c in found if (c.cell.assignment, c.cell.check) == (a, check)), None)
        if item is not None:
            figures["examples"][a, check] = (item.files, item.lines, own[a, check])
    print(f"\n{len(found)} graded test cells. Reading closure: median {figures['median_files']:g} files and "
          f"{figures['median_lines']:g} lines; worst {figures['worst_files']} files, {worst.lines} lines "
          f"({worst.cell.assignment} {worst.cell.check}).")
    for (a, check), (f, n, alone) in figures["examples"].items():
        print(f"  {a} {check}: {f} files, {n} lines, {alone} of them its own")
    beyond = [sum(u.lines for u in c.units - core) for c in found]
    figures.update(core_lines=sum(u.lines for u in core), core_files=len({u.path for u in core}),
                   beyond_median=statistics.median(beyond), beyond_worst=max(beyond))
    print(f"Shared core (reached by at least half of the checks): {figures['core_lines']} lines in "
          f"{figures['core_files']} files. Beyond it, a check reads: median {figures['beyond_median']:g} lines, "
          f"worst {figures['beyond_worst']}.")
    print(f"Check machinery (course/checks, course/judges, catalogue/): {machinery} lines, "
          f"{machinery / len(found):.0f} per graded test cell.")
    print(f"\n{len(figures['wide'])} functions or dataclasses with more than {MOST_PARAMETERS} parameters or fields:")
    for where, name, count in figures["wide"]:
        print(f"  {where:<42} {name:<32} {count}")
    return figures


def reading_list(wanted: str) -> list[tuple[str, list[Unit]]]:
    """What to read, in order, to review one check (``NAME`` or ``ASSIGNMENT:NAME``, e.g. ``08:lm_cache``): where
    it starts (its declaration, its judge, its mistakes), then what it reaches beyond the shared core, then the
    core, each by file in the file's order, as (heading, units)."""
    assignment, _, name = wanted.rpartition(":")
    found = closures()
    matching = [c for c in found if c.cell.check == name and c.cell.assignment.startswith(assignment)]
    if len(matching) != 1:
        places = sorted(f"{c.cell.assignment}:{c.cell.check}" for c in matching)
        raise SystemExit(f"--check {wanted}: expected one graded check of that name, found "
                         f"{len(matching)}{': ' + ', '.join(places) if places else ''}")
    (item,) = matching
    start = frozenset(starts(item.cell))
    core = shared_core(found) - start
    beyond = item.units - start - core
    return [("where it starts: its declaration, its judge and its mistakes", _in_file_order(start)),
            ("what it reaches beyond the shared core", _in_file_order(beyond)),
            ("the shared core, read once for every check", _in_file_order(item.units & core))]


def _in_file_order(units: frozenset[Unit]) -> list[Unit]:
    return sorted(units, key=lambda u: (u.path, u.start))


def print_reading_list(wanted: str) -> None:
    for heading, units in reading_list(wanted):
        print(f"\n## {heading}: {sum(u.lines for u in units)} lines")
        path = None
        for unit in units:
            if unit.path != path:
                path = unit.path
                print(path)
            print(f"  {unit.start:>5}-{unit.end:<5} {unit.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", help="show the per-check table of this assignment only, e.g. 04_multi_head")
    parser.add_argument("--check", help="print what to read to review one check, in order, e.g. 08:lm_cache")
    parser.add_argument("--quiet", action="store_true", help="the summary only, without the per-check table")
    args = parser.parse_args()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head or less: stop quietly when the reader does
    if args.check:
        print_reading_list(args.check)
    else:
        report(args.assignment, args.quiet)


if __name__ == "__main__":
    main()
