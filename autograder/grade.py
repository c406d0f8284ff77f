"""Grade a batch of submissions with nbgrader: grades.csv, feedback HTML, and a printed table.

The batch is a folder laid out like nbgrader's submitted/ (<student>/<assignment>/<notebook>.ipynb) or a
zip of one. Grading happens in a throw-away nbgrader course directory, so the repository's own gradebook
and folders are never touched; one broken submission gives one row with a status and never stops the batch.
"""

import csv
import os
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.exc import SAWarning
from traitlets.config.loader import PyFileConfigLoader

from autograder import course_dir

# nbgrader's gradebook code trips SQLAlchemy's autoflush warnings; they say nothing about the grades.
warnings.filterwarnings("ignore", category=SAWarning)

COLUMNS = ["student", "assignment", "score", "max_score", "status", "message"]


@dataclass
class Grade:
    """One row of grades.csv."""

    student: str
    assignment: str
    score: float
    max_score: float
    status: str  # graded | missing | missing-notebook | invalid-notebook | error
    message: str = ""


def unpack(path: Path, scratch: Path) -> Path:
    """The folder whose children are student folders: path itself, or where its zip unpacks."""
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise SystemExit(f"{path} is neither a folder nor a zip file.")
        target = scratch / "unzipped"
        with zipfile.ZipFile(path) as archive:
            archive.extractall(target)  # zipfile drops absolute paths and '..' components
        path = target
    if not path.is_dir():
        raise SystemExit(f"{path} does not exist.")
    return _layout_root(path, set(course_dir.assignments()))


def _layout_root(folder: Path, known: set[str]) -> Path:
    """Descend through single wrapping folders (a zip of 'submitted/', say) to the student folders."""
    children = _visible_dirs(folder)
    if any(sub.name in known for child in children for sub in _visible_dirs(child)):
        return folder
    if len(children) == 1:
        return _layout_root(children[0], known)
    return folder


def _visible_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))


def _api(work: Path) -> NbGraderAPI:
    # nbgrader runs `alembic` from PATH: make this interpreter's scripts findable without an activated venv.
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir.ROOT)).load_config()
    config.CourseDirectory.root = str(work)
    config.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _stage(batch: Path, work: Path, student: str, assignment: str) -> Grade | None:
    """Copy one submission into the nbgrader workspace, or say why it cannot be graded."""
    folder = batch / student / assignment
    if not folder.is_dir():
        return Grade(student, assignment, 0.0, 0.0, "missing", "no folder for this assignment")
    target = work / "submitted" / student / assignment
    target.mkdir(parents=True, exist_ok=True)
    for notebook in course_dir.notebooks(assignment):
        path = folder / notebook
        if not path.is_file():
            found = sorted(p.name for p in folder.glob("*.ipynb"))
            return Grade(student, assignment, 0.0, 0.0, "missing-notebook",
                         f"expected {notebook}, found {found or 'no notebooks'}")
        try:
            nbformat.read(path, as_version=4)
        except Exception as error:  # invalid JSON, wrong encoding, not a notebook at all
            return Grade(student, assignment, 0.0, 0.0, "invalid-notebook",
                         f"{notebook} cannot be read as a notebook: {type(error).__name__}: {_last_line(str(error))}")
        shutil.copy(path, target / notebook)
    return None


def _score(work: Path, student: str, assignment: str) -> tuple[float, float]:
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gradebook:
        max_score = gradebook.find_assignment(assignment).max_score
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, max_score
        return float(submission.score), float(max_score)


def grade(path: Path, out: Path, assignments: list[str] | None = None) -> list[Grade]:
    """Grade every student of the batch at path for the given assignments (default: all of the course)."""
    known = course_dir.assignments()
    chosen = assignments or known
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SystemExit(f"unknown assignment(s) {unknown}; this course has {known}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        batch = unpack(path, Path(tmp))
        work = Path(tmp) / "course"
        for assignment in chosen:
            shutil.copytree(course_dir.source_dir() / assignment, work / "source" / assignment)
        api = _api(work)
        for assignment in chosen:
            result = api.generate_assignment(assignment)
            if not result["success"]:
                raise RuntimeError(f"nbgrader could not generate {assignment}:\n{result.get('error') or result.get('log')}")
        students = [p.name for p in _visible_dirs(batch)]
        grades = []
        total = len(students) * len(chosen)
        for student in students:
            for assignment in chosen:
                started = time.perf_counter()
                row = _stage(batch, work, student, assignment) or _autograde(api, work, out, student, assignment)
                if row.max_score == 0.0:
                    row.max_score = _score(work, "", assignment)[1]
                grades.append(row)
                print(f"[{len(grades)}/{total}] {student} / {assignment}: {row.score:g}/{row.max_score:g} {row.status}"
                      f" ({time.perf_counter() - started:.1f} s)", flush=True)
    write_csv(grades, out / "grades.csv")
    return grades


def _autograde(api: NbGraderAPI, work: Path, out: Path, student: str, assignment: str) -> Grade:
    result = api.autograde(assignment, student)
    score, max_score = _score(work, student, assignment)
    if not result["success"]:
        return Grade(student, assignment, score, max_score, "error",
                     "nbgrader could not grade this submission: " + _last_line(result.get("error") or result.get("log")))
    feedback = api.generate_feedback(assignment, student)
    if feedback["success"]:
        source = work / "feedback" / student / assignment
        target = out / "feedback" / student / assignment
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(source, target)
    return Grade(student, assignment, score, max_score, "graded")


def write_csv(grades: list[Grade], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in grades:
            writer.writerow({**asdict(row), "score": f"{row.score:g}", "max_score": f"{row.max_score:g}"})


def table(grades: list[Grade]) -> str:
    """The grades as a plain-text table."""
    rows = [("student", "assignment", "score", "status", "message")]
    rows += [(g.student, g.assignment, f"{g.score:g}/{g.max_score:g}", g.status, g.message[:70]) for g in grades]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    lines.insert(1, "-" * min(120, len(lines[0]) + 10))
    return "\n".join(line.rstrip() for line in lines)
