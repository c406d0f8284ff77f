"""Neutralise tampering in a submission's own code cells before nbgrader runs them.

Test cells and other locked cells are restored by nbgrader from the gradebook, so a student can only act
through the cells they write. Honest code for this course never needs to reach into other modules' attributes,
Python's import machinery or IPython itself; tampering always does. Each statement that does is replaced by a
`pass` with a comment saying why, so the rest of the student's code runs and earns what it honestly earns.
"""

import ast
from dataclasses import dataclass

#: names whose mere use lets code rewrite other modules or the kernel
FORBIDDEN_NAMES = {
    "setattr", "delattr", "vars", "globals", "locals", "exec", "eval", "compile", "__import__", "breakpoint",
    "get_ipython", "__builtins__", "_ih", "_oh", "In", "Out", "exit", "quit",
}
#: modules that reach the interpreter, the import system or the process
FORBIDDEN_MODULES = {
    "builtins", "sys", "importlib", "ctypes", "gc", "inspect", "types", "os", "subprocess", "signal", "socket",
    "marshal", "runpy", "code", "codeop", "pkgutil", "threading", "multiprocessing", "concurrent", "asyncio", "pty", "unittest", "pytest",
    "IPython", "ipykernel", "nbgrader", "shutil", "pathlib", "io", "atexit", "weakref", "copyreg", "dis",
    "course.checks", "autograder", "torch.library", "torch.overrides", "torch.utils._python_dispatch",
    "torch._C", "torch._ops", "torch.ops", "numpy.testing", "torch.testing",
}
#: the course's reference modules that hold an assignment's own answers, or later ones built on them: importing
#: them in an answer would hand in the reference instead of the student's work
OWN_REFERENCES = {
    "01_self_attention": ("course.attention", "course.multi_head", "course.blocks", "course.seq2seq"),
    "02_qkv": ("course.attention", "course.multi_head", "course.blocks", "course.seq2seq"),
    "03_scaling": ("course.attention", "course.multi_head", "course.blocks", "course.seq2seq"),
    "04_multi_head": ("course.multi_head", "course.blocks", "course.seq2seq"),
    "05_transformer_block": ("course.blocks", "course.seq2seq"),
    "06_positional_encoding": ("course.positional", "course.seq2seq"),
    "07_seq2seq": ("course.seq2seq",),
}
#: the name the notebooks' locked setup cell gives their checks module; answers have no reason to touch it
CHECKS_NAME = "check"
#: torch attributes that replace what its operators compute
FORBIDDEN_ATTRIBUTES = {"library", "overrides", "ops", "_python_dispatch", "TorchFunctionMode", "TorchDispatchMode"}
#: dunder attributes an honest answer uses
ALLOWED_DUNDERS = {"__init__", "__name__", "__class__"}


@dataclass
class Finding:
    line: int
    reason: str


class _Sanitiser(ast.NodeTransformer):
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
            if isinstance(sub, ast.Attribute) and sub.attr.startswith("_") and _root(sub) != "self" \
                    and sub.attr not in ALLOWED_DUNDERS:
                kind = "internal" if sub.attr.startswith("__") else "private"
                return f"reaches the {kind} attribute {sub.attr}"
            if isinstance(sub, ast.Attribute) and sub.attr in FORBIDDEN_ATTRIBUTES:
                return f"reaches {sub.attr}, which can replace what PyTorch computes"
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "getattr":
                name = sub.args[1] if len(sub.args) > 1 else None
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and not name.value.startswith("__")):
                    return "uses getattr with a computed or internal name"
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


def sanitise(source: str, assignment: str = "") -> tuple[str, list[Finding]]:
    """The cell's code with tampering statements replaced by `pass`, and what was found (line, reason).

    assignment: whose answers these are; the course's reference modules holding them are off limits.

    Code that does not parse is returned unchanged: it raises a SyntaxError when run, which is honest.
    Magics and shell escapes (% and !) are tampering too: IPython would run them.
    """
    lines = source.splitlines()
    findings = [Finding(i + 1, "uses an IPython magic or shell command") for i, line in enumerate(lines)
                if line.lstrip().startswith(("%", "!"))]
    if findings:
        lines = [("pass  # removed by the grader" if line.lstrip().startswith(("%", "!")) else line) for line in lines]
        source = "\n".join(lines)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, findings
    sanitiser = _Sanitiser(OWN_REFERENCES.get(assignment, ()))
    sanitiser.generic_visit(tree)
    if not sanitiser.findings:
        return source, findings
    findings += sanitiser.findings
    note = "\n".join(f"# line {f.line} removed by the grader: it {f.reason}" for f in sanitiser.findings)
    return note + "\n" + ast.unparse(tree), findings
