"""Where the course's folders are, and which assignments and notebooks it has."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_dir(root: Path = ROOT) -> Path:
    return root / "source"


def assignments(root: Path = ROOT) -> list[str]:
    """Assignment names (the folders of source/), in course order. Refused, with where the grader and the course
    were found, when root is no course folder (the autograder installed as a wheel and run outside the course)."""
    if not source_dir(root).is_dir():
        from autograder import GradingError  # noqa: PLC0415 - the package imports this module

        raise GradingError(f"{root} is not a course folder (it has no source/): python -m autograder grades the course "
                           f"folder it is imported from, and this autograder was imported from {Path(__file__).parent}"
                           " (installed, not a checkout); run it from your course folder (cd into it first), where "
                           "its own autograder and course are found first")
    return sorted(p.name for p in source_dir(root).iterdir() if p.is_dir() and p.name[:2].isdigit())


def module_name(assignment: str) -> str:
    """The name of an assignment's modules: 'multi_head' for 04_multi_head (course/multi_head.py, its reference
    answers; course/checks/multi_head.py, its probes; course/judges/multi_head.py; catalogue/multi_head.py)."""
    return assignment.split("_", 1)[1]


def notebooks(assignment: str, root: Path = ROOT) -> list[str]:
    """Notebook file names of one assignment, e.g. ['self_attention.ipynb']."""
    return sorted(p.name for p in (source_dir(root) / assignment).glob("*.ipynb"))


def course_imports(path: Path) -> set[str]:
    """The course modules a file imports (course.X, from course import X): X, e.g. 'checks' or 'seq2seq'."""
    info = path.stat()
    return set(_course_imports(str(path), info.st_mtime_ns, info.st_size))


@functools.lru_cache(maxsize=512)
def _course_imports(path: str, mtime_ns: int, size: int) -> frozenset[str]:  # parsed again when the file changes
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("course.")}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "course":
                found |= {a.name for a in node.names}
            elif node.module.startswith("course."):
                found.add(node.module.split(".")[1])
    return frozenset(found)


def answer_modules(assignment: str, root: Path = ROOT) -> list[str]:
    """The course's reference modules that hold this assignment's answers, and every course module built on them.

    The answers of assignment NN_name live in course/name.py (course/multi_head.py for 04_multi_head). While an
    assignment is graded, these modules are hidden from the student's kernel: an answer that imports them would
    hand in the reference instead of the student's work.
    """
    package = root / "course"
    imports = {p.stem: course_imports(p) for p in package.glob("*.py")}
    own = module_name(assignment)
    hidden = {own} if own in imports else set()
    grew = True
    while grew:
        grew = False
        for module, uses in imports.items():
            if module not in hidden and uses & hidden:
                hidden.add(module)
                grew = True
    return sorted(hidden)
