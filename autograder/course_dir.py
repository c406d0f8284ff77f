"""Where the course's folders are, and which assignments and notebooks it has."""

import ast
import functools
import hashlib
import sys
import tomllib
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


def version(root: Path = ROOT) -> str:
    """The course folder's version, from its pyproject.toml."""
    with (root / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["version"]


def _installed_version(course: Path) -> str:
    """A copy of course/'s version: its checkout's pyproject.toml, or the wheel's metadata beside it."""
    if (course.parent / "pyproject.toml").is_file():
        return version(course.parent)
    for record in course.parent.glob("transformers_course-*.dist-info"):
        return record.name.removesuffix(".dist-info").split("-")[1]
    return "unknown"


def installed_copies(root: Path = ROOT) -> list[tuple[Path, str]]:
    """The course packages this Python would import outside root (a wheel's in site-packages, another checkout on
    sys.path, an editable install's), other than root's own: (their course/ folder, their version)."""
    found = {(Path(entry or ".").resolve() / "course") for entry in sys.path}
    for finder in sys.meta_path:  # setuptools' editable installs map the package to their checkout here
        if getattr(finder, "__module__", "").startswith("__editable__"):
            spec = finder.find_spec("course", None)
            if spec is not None and spec.origin:
                found.add(Path(spec.origin).resolve().parent)
    ours = (root / "course").resolve()
    return [(folder, _installed_version(folder)) for folder in sorted(found)
            if folder != ours and (folder / "__init__.py").is_file()]


def _digests(folder: Path) -> dict[str, str]:
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in folder.rglob("*.py") if path.is_file()}


def installed_course_note(root: Path = ROOT) -> str | None:
    """A plain note, before grading, when this Python has installed a course other than the folder being graded:
    both folders, both versions and how many files differ. Not a refusal: kernels import the course folder's own
    course/ (the installed copies are hidden from them), but students whose kernels use an installed copy that
    differs ran other checks than the ones that grade them."""
    copies = installed_copies(root)
    if not copies:
        return None
    ours, here = _digests(root / "course"), f"{root / 'course'} (version {version(root)})"
    lines = [f"note: grading with the course folder's course, {here}; this Python also has the course installed at:"]
    for folder, installed in copies:
        theirs = _digests(folder)
        differ = sum(ours.get(name) != theirs.get(name) for name in ours.keys() | theirs.keys())
        lines.append(f"  {folder} (version {installed}): " + (
            "the same files" if not differ else f"{differ} file(s) differ from the course folder's; kernels that "
            "import it (students' on a hub) run other checks than those that grade them: install this folder's "
            f"course there (pip install {root})"))
    return "\n".join(lines)
