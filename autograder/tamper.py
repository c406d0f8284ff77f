"""Flag code in a submission's own cells that reaches into the tests, the kernel or other modules.

This is defence in depth and a note for the instructor, never what a grade rests on: the score of every test
is the judge's verdict, reached outside the student's process from the evidence the probe recorded
(autograder/judging.py), so code that rewrites the checks, PyTorch or the kernel cannot raise it. Flagged
lines are not removed: the submission runs as written and earns what its code computes. Honest code for this
course never needs what is flagged here; tampering usually does.
"""

import ast
from dataclasses import dataclass

from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.course_dir import answer_modules
from autograder.notebooks import add_note

#: names whose mere use lets code rewrite other modules or the kernel
FORBIDDEN_NAMES = {
    "setattr", "delattr", "vars", "globals", "locals", "exec", "eval", "compile", "__import__", "breakpoint",
    "get_ipython", "__builtins__", "_ih", "_oh", "In", "Out", "exit", "quit",
}
#: modules that reach the interpreter, the import system or the process
FORBIDDEN_MODULES = {
    "builtins", "sys", "importlib", "ctypes", "gc", "inspect", "types", "os", "subprocess", "signal", "socket",
    "marshal", "runpy", "code", "codeop", "pkgutil", "threading", "multiprocessing", "concurrent", "asyncio", "pty",
    "unittest", "pytest",
    "IPython", "ipykernel", "nbgrader", "shutil", "pathlib", "io", "atexit", "weakref", "copyreg", "dis",
    "course.checks", "course.judges", "autograder", "catalogue", "operator",
    "torch.library", "torch.overrides", "torch.utils._python_dispatch",
    "torch._C", "torch._ops", "torch.ops", "numpy.testing", "torch.testing",
}
#: the name the notebooks' locked setup cell gives their checks module; answers have no reason to touch it
CHECKS_NAME = "check"
#: the course's packages of tests, reached as attributes (course.checks, getattr(course, "judges"), ...)
TEST_PACKAGES = {"checks", "judges"}
TEST_PATHS = ("course.checks", "course.judges", "course/checks", "course/judges")
#: torch attributes that replace what its operators compute
FORBIDDEN_ATTRIBUTES = {"library", "overrides", "ops", "_python_dispatch", "TorchFunctionMode", "TorchDispatchMode"}
#: dunder attributes an honest answer uses
ALLOWED_DUNDERS = {"__init__", "__name__", "__class__"}


@dataclass
class Finding:
    line: int
    reason: str


class _Finder(ast.NodeTransformer):
    """Walks a cell statement by statement and records why each flagged one is flagged."""

    def __init__(self, references: tuple[str, ...] = ()) -> None:
        self.findings: list[Finding] = []
        self.forbidden_modules = FORBIDDEN_MODULES | set(references)
        self.forbidden_course = {module.split(".", 1)[1] for module in references}

    def _problem(self, node: ast.AST) -> str | None:
        """Why a statement is tampering, or None."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in FORBIDDEN_NAMES:
                return f"uses {sub.id}"
            if isinstance(sub, ast.Name) and sub.id == CHECKS_NAME:
                return f"uses the tests' module `{CHECKS_NAME}`"
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "course" \
                    and sub.attr in self.forbidden_course:
                return f"uses the course's reference course.{sub.attr}, which holds this assignment's answers"
            if isinstance(sub, ast.Attribute) and sub.attr in TEST_PACKAGES:
                return f"reaches the course's tests ({sub.attr})"
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                    and any(p in sub.value for p in TEST_PATHS):
                return "names the course's tests in a string"
            if isinstance(sub, ast.Attribute) and sub.attr.startswith("_") and _root(sub) != "self" \
                    and sub.attr not in ALLOWED_DUNDERS:
                kind = "internal" if sub.attr.startswith("__") else "private"
                return f"reaches the {kind} attribute {sub.attr}"
            if isinstance(sub, ast.Attribute) and sub.attr in FORBIDDEN_ATTRIBUTES:
                return f"reaches {sub.attr}, which can replace what PyTorch computes"
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "getattr":
                name = sub.args[1] if len(sub.args) > 1 else None
                plain = isinstance(name, ast.Constant) and isinstance(name.value, str)
                if not (plain and not name.value.startswith("__")):
                    return "uses getattr with a computed or internal name"
                if name.value in TEST_PACKAGES | self.forbidden_course:
                    return f"reaches {name.value} with getattr"
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                for module in _imported(sub):
                    if any(module == m or module.startswith(m + ".") for m in self.forbidden_modules):
                        return f"imports {module}"
            if isinstance(sub, (ast.Global, ast.Nonlocal)):
                return "rebinds names outside the function (global/nonlocal)"
        for target in _targets(node):
            root = _root(target)
            if isinstance(target, ast.Attribute) and root != "self":
                return f"assigns to {ast.unparse(target)}, an attribute of an object it does not own"
            if isinstance(target, ast.Subscript) and root in {"self", None}:
                continue
        return None

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, field, [self._statement(stmt) for stmt in value])
        return node

    def _statement(self, stmt: ast.stmt) -> ast.stmt:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            problem = next((self._problem(d) for d in stmt.decorator_list if self._problem(d)), None)
            problem = problem or self._problem_in_header(stmt)
            if problem is None:
                return self.generic_visit(stmt)
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
            problem = self._problem_in_header(stmt)
            if problem is None:
                return self.generic_visit(stmt)
        else:
            problem = self._problem(stmt)
            if problem is None:
                return stmt
        self.findings.append(Finding(stmt.lineno, problem))
        return ast.copy_location(ast.Pass(), stmt)

    def _problem_in_header(self, stmt: ast.stmt) -> str | None:
        """Check a compound statement's own expressions (test, iterator, defaults...), not its body."""
        shallow = []
        for field, value in ast.iter_fields(stmt):
            if field in {"body", "orelse", "finalbody", "handlers", "decorator_list"}:
                continue
            shallow += value if isinstance(value, list) else [value]
        for handler in getattr(stmt, "handlers", []):
            if handler.type is not None:
                shallow.append(handler.type)
        for node in shallow:
            if isinstance(node, ast.AST):
                problem = self._problem(ast.Expr(node) if isinstance(node, ast.expr) else node)
                if problem:
                    return problem
        return None


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    else:
        return []
    flat: list[ast.expr] = []
    while targets:
        t = targets.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            targets.extend(t.elts)
        elif isinstance(t, ast.Starred):
            targets.append(t.value)
        else:
            flat.append(t)
    return flat


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def flags(source: str, assignment: str = "") -> list[Finding]:
    """Lines of a cell that reach into the tests, the kernel or other modules: (line, reason) each.

    assignment: whose answers these are; importing the course's reference modules that hold them is flagged
    (the grader's sandbox hides them anyway). Code that does not parse is not flagged: it raises a SyntaxError
    when run, which is honest. Magics and shell escapes (% and !) are flagged too: IPython would run them.
    """
    findings = [Finding(i + 1, "uses an IPython magic or shell command") for i, line in enumerate(source.splitlines())
                if line.lstrip().startswith(("%", "!"))]
    if findings:
        source = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return findings
    finder = _Finder(tuple(f"course.{m}" for m in answer_modules(assignment)) if assignment else ())
    finder.generic_visit(tree)
    return sorted(findings + finder.findings, key=lambda f: f.line)


class FlagTampering(NbGraderPreprocessor):
    """Note, for the instructor, every flagged line of the cells nbgrader does not restore from the gradebook
    (answers, the student's own cells); the cells are left exactly as submitted."""

    def preprocess(self, nb, resources):
        assignment = resources["nbgrader"]["assignment"]
        name = f"{resources['nbgrader']['notebook']}.ipynb"
        for index, cell in enumerate(nb.cells):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or meta.get("locked") or meta.get("grade"):
                continue
            for finding in flags(cell.source, assignment):
                add_note(nb, "flags", f"{name} cell {meta.get('grade_id') or index} line {finding.line} "
                                      f"{finding.reason}")
        return nb, resources
