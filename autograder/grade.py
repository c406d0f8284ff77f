"""Grade a batch of submissions with nbgrader: grades.csv, feedback HTML, a class report, a printed table.

Grading happens in throw-away nbgrader course directories (one per worker process), so the repository's own
gradebook and folders are never touched. A broken submission gives one row with a status and never stops the
batch. Rerunning into the same output folder regrades only what changed (the submission or the grader).
"""

import csv
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

import nbformat
from sqlalchemy.exc import SAWarning
from tqdm import tqdm

from autograder import GradingError, course_dir, feedback, report
from autograder.submissions import (
    DEFAULT_NAMED_REGEXP,
    Submission,
    find,
    read_notebook,
    unpack,
)
from autograder.tamper import flags

# nbgrader's gradebook code trips SQLAlchemy's autoflush warnings; they say nothing about the grades.
warnings.filterwarnings("ignore", category=SAWarning)

COLUMNS = ["student", "assignment", "score", "max_score", "status", "message"]
STATE_FILE = ".grading-state.json"
#: what a cell that killed the kernel is replaced with when the submission is graded again
STUB = ("raise RuntimeError('The grader stopped this cell: the Python kernel died while it ran "
        "(a crash, or a limit of memory, processes or time). It scores 0; the rest was graded.')")
#: how many kernel-killing cells one submission may have stopped before it is reported as an error
MAX_SALVAGES = 8
#: statuses whose rows carry a real score and feedback
GRADED = ("graded", "flagged", "crashed")


@dataclass
class Grade:
    """One row of grades.csv, plus per-test results for the class report."""

    student: str
    assignment: str
    score: float
    max_score: float
    status: str  # graded | flagged | crashed | missing | missing-notebook | invalid-notebook | error
    message: str = ""
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (score, max_score)
    diagnoses: list[tuple[str, str]] = field(default_factory=list)  # (grade_id, diagnosis) of failed tests
    mistakes: list[tuple[str, str]] = field(default_factory=list)  # (grade_id, mistake id) the judges named


@dataclass(frozen=True)
class Options:
    """How to grade: which assignments, and with what protection."""

    assignments: tuple[str, ...]
    sandbox: bool = False
    cell_seconds: int = 120
    hidden: tuple[str, ...] = ()  # folders student code must not see: the batch, the output, the scratch space


# ----------------------------------------------------------------------------------------------- one worker

class Workspace:
    """A private nbgrader course directory with the assignments generated into its gradebook."""

    def __init__(self, root: Path, options: Options):
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        self.root = root
        self.options = options
        self._patched: list[tuple] = []
        # nbgrader runs `alembic` from PATH: make this interpreter's scripts findable without an activated venv.
        scripts = str(Path(sys.executable).parent)
        if scripts not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
        for assignment in options.assignments:
            shutil.copytree(course_dir.source_dir() / assignment, root / "source" / assignment)
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir.ROOT)).load_config()
        config.CourseDirectory.root = str(root)
        config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
        config.Execute.timeout = options.cell_seconds
        config.Execute.interrupt_on_timeout = True
        if options.sandbox:
            from autograder import sandbox

            sandbox.configure(config, root, sandbox.Limits(cell_seconds=options.cell_seconds),
                              hide=[root.parent, *(Path(p) for p in options.hidden)])
        self.api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        self.sources = {}
        for assignment in options.assignments:
            result = self.api.generate_assignment(assignment)
            if not result["success"]:
                raise RuntimeError(f"nbgrader could not generate {assignment}:\n{result.get('error') or result.get('log')}")
            for notebook in course_dir.notebooks(assignment):
                self.sources[assignment, notebook] = nbformat.read(root / "source" / assignment / notebook, as_version=4)
        self.max_scores = {a: self._gradebook(lambda gb, a=a: gb.find_assignment(a).max_score) for a in options.assignments}

    def _gradebook(self, query):
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gradebook:
            return query(gradebook)

    def grade(self, sub: Submission, out: Path) -> Grade:
        """Stage, restore, autograde, judge and feed back one submission; never raises for a student's fault."""
        row = Grade(sub.student, sub.assignment, 0.0, float(self.max_scores[sub.assignment]), sub.status, sub.message)
        if sub.status:
            return row
        target = self.root / "submitted" / sub.student / sub.assignment
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        notes, flagged = list(sub.notes), []
        self._notes = notes
        for name, path in sub.notebooks.items():
            nb, note = read_notebook(path)
            if nb is None:
                row.status, row.message = "invalid-notebook", f"{note}."
                return row
            if note:
                notes.append(note)
            flagged += self._neutralise(nb, self.sources[sub.assignment, name], name, sub.assignment)
            nbformat.write(nb, target / name)
        result = self.api.autograde(sub.assignment, sub.student)
        stopped: list[str] = []
        try:
            while not result["success"] and len(stopped) < MAX_SALVAGES:
                # The kernel died (or nbgrader gave up) somewhere: find the cell, let it score 0, grade the rest.
                culprit = self._salvage(sub, target)
                if culprit is None:
                    break
                stopped.append(culprit)
                result = self.api.autograde(sub.assignment, sub.student)
        finally:
            self._restore_gradebook()
        if not result["success"]:
            row.status = "error"
            row.message = "nbgrader could not grade this submission: " + _last_line(result.get("error") or result.get("log"))
            return row
        if stopped:
            notes.insert(0, f"the kernel died in {len(stopped)} cell(s) ({', '.join(stopped)}): each was stopped "
                            "and scores 0; the rest was graded")
        self._read_results(row)
        for name in sub.notebooks:
            autograded = self.root / "autograded" / sub.student / sub.assignment / name
            row.diagnoses += feedback.diagnoses(autograded)
            row.mistakes += feedback.mistakes(autograded)
            feedback.hide_hidden_tests(autograded, self.sources[sub.assignment, name])
        done = self.api.generate_feedback(sub.assignment, sub.student)
        if done["success"]:
            destination = out / "feedback" / sub.student / sub.assignment
            if destination.exists():
                shutil.rmtree(destination)
            shutil.copytree(self.root / "feedback" / sub.student / sub.assignment, destination)
        else:
            notes.append("feedback could not be generated")
        row.status = "flagged" if flagged else ("crashed" if stopped else "graded")
        if flagged:
            flagged = ["code that reaches into the tests or the kernel (left in place; every score is the judge's "
                       "verdict on the recorded evidence): " + ", ".join(flagged)]
        row.message = "; ".join(flagged + notes)
        return row

    def _salvage(self, sub: Submission, target: Path) -> str | None:
        """Run the submission cell by cell, as nbgrader would, to find the cell during which the kernel dies;
        neutralise that cell (in the submission, or for this student's regrade in the gradebook) and name it."""
        from nbclient import NotebookClient
        from nbclient.exceptions import DeadKernelError

        for name in sub.notebooks:
            nb = nbformat.read(target / name, as_version=4)
            source = self.sources[sub.assignment, name]
            trusted = {feedback.grade_id(c): c.source for c in source.cells if feedback.grade_id(c)}
            run = nbformat.read(target / name, as_version=4)
            patched = {gid: STUB for (a, n, gid, _, _) in self._patched if (a, n) == (sub.assignment, name)}
            for cell in run.cells:  # run what nbgrader runs: locked cells as the gradebook holds them now
                gid = feedback.grade_id(cell)
                if gid in self._restorable() and gid in trusted:
                    cell.source = patched.get(gid, trusted[gid])
            cwd = self.root / "salvage" / sub.student
            shutil.rmtree(cwd, ignore_errors=True)
            cwd.mkdir(parents=True)
            client = NotebookClient(run, config=self.api.config, timeout=self.options.cell_seconds, allow_errors=True,
                                    interrupt_on_timeout=True, kernel_name=self.kernel_name,
                                    resources={"metadata": {"path": str(cwd)}})
            culprit = None
            try:
                with client.setup_kernel():
                    for index, cell in enumerate(run.cells):
                        if cell.cell_type != "code":
                            continue
                        try:
                            client.execute_cell(cell, index)
                        except DeadKernelError:
                            culprit = index
                            break
                        except Exception:  # a timeout the kernel did not survive counts as a death too
                            culprit = index
                            break
            except Exception:
                pass
            if culprit is None:
                continue
            cell = nb.cells[culprit]
            gid = feedback.grade_id(cell)
            label = f"{name} cell {gid or culprit}"
            if gid in trusted and gid in self._restorable():
                self._patch_gradebook(sub.assignment, name, gid, STUB)
            else:
                cell.source = STUB
                nbformat.write(nb, target / name)
            return label
        return None

    @property
    def kernel_name(self) -> str:
        return self.api.config.Execute.get("kernel_name", "python3") if "Execute" in self.api.config else "python3"

    def _restorable(self) -> set[str]:
        return {feedback.grade_id(c) for nb in self.sources.values() for c in nb.cells
                if c.get("metadata", {}).get("nbgrader", {}).get("locked") or c.get("metadata", {}).get("nbgrader", {}).get("grade")}

    def _patch_gradebook(self, assignment: str, notebook: str, gid: str, stub: str) -> None:
        """Replace a locked cell's stored source for this submission's regrade only (_restore_gradebook undoes it)."""
        from nbgrader.utils import compute_checksum

        original = next(c for c in self.sources[assignment, notebook].cells if feedback.grade_id(c) == gid)
        probe = nbformat.v4.new_code_cell(stub, metadata={"nbgrader": dict(original.metadata["nbgrader"])})

        def query(gradebook):
            cell = gradebook.find_source_cell(gid, notebook.removesuffix(".ipynb"), assignment)
            self._patched.append((assignment, notebook, gid, cell.source, cell.checksum))
            cell.source, cell.checksum = stub, compute_checksum(probe)
            gradebook.db.commit()
        self._gradebook(query)

    def _restore_gradebook(self) -> None:
        while self._patched:
            assignment, notebook, gid, source, checksum = self._patched.pop()

            def query(gradebook):
                cell = gradebook.find_source_cell(gid, notebook.removesuffix(".ipynb"), assignment)
                cell.source, cell.checksum = source, checksum
                gradebook.db.commit()
            self._gradebook(query)

    def _neutralise(self, nb: nbformat.NotebookNode, source: nbformat.NotebookNode, name: str, assignment: str) -> list[str]:
        """Put back the source's nbgrader metadata and deleted cells, then flag (without changing it) code in every
        cell nbgrader will not restore from the gradebook (answers, demos, added cells)."""
        metadata = {feedback.grade_id(c): c.metadata["nbgrader"] for c in source.cells if feedback.grade_id(c)}
        restored = {gid for gid, meta in metadata.items() if meta.get("locked") or meta.get("grade")}
        seen = set()
        for cell in nb.cells:
            gid = feedback.grade_id(cell)
            if gid is None:
                cell.get("metadata", {}).pop("nbgrader", None)
            elif gid not in metadata or gid in seen:  # invented or duplicated: an ordinary cell now
                del cell.metadata["nbgrader"]
            else:
                seen.add(gid)
                cell.metadata["nbgrader"] = dict(metadata[gid])  # points, roles and ids as the instructor set them
        found = []
        restored_cells = _restore_deleted(nb, source)
        if restored_cells:
            self._notes.append(f"{name}: put back {len(restored_cells)} deleted cell(s) ({', '.join(restored_cells)})")
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in restored:
                continue
            found += [f"{name} cell {gid or index} line {f.line} {f.reason}" for f in flags(cell.source, assignment)]
        return found

    def _read_results(self, row: Grade) -> None:
        def query(gradebook):
            submission = gradebook.find_submission(row.assignment, row.student)
            row.score, row.max_score = float(submission.score), float(submission.max_score)
            found = {}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.cell_type == "code" and grade.max_score > 0:
                        found[grade.name] = (float(grade.score), float(grade.max_score))
            order = [feedback.grade_id(c) for (a, _), nb in self.sources.items() if a == row.assignment for c in nb.cells]
            row.cells = {name: found[name] for name in order if name in found}
        self._gradebook(query)


def _restore_deleted(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> list[str]:
    """Put every nbgrader cell of the source that the submission lacks back where it belongs (after the nearest
    earlier source cell the submission has); answer cells come back as the release shows them. nbgrader's own
    add_missing_cells assumes the cell before a test is an answer or a test, which locked demo cells are not."""
    import copy

    from autograder.notebooks import cleared

    present = {feedback.grade_id(c) for c in nb.cells if feedback.grade_id(c)}
    restored = []
    for index, cell in enumerate(source.cells):
        gid = feedback.grade_id(cell)
        if gid is None or gid in present:
            continue
        anchor = next((feedback.grade_id(c) for c in reversed(source.cells[:index]) if feedback.grade_id(c) in present), None)
        position = 0 if anchor is None else 1 + next(i for i, c in enumerate(nb.cells) if feedback.grade_id(c) == anchor)
        back = copy.deepcopy(cell)
        if back.metadata["nbgrader"].get("solution"):
            back.source = cleared(back.source)
        back["id"] = f"restored-{gid}".replace("_", "-")[:64]
        nb.cells.insert(position, back)
        present.add(gid)
        restored.append(gid)
    return restored


_workspace: Workspace | None = None


def _start_worker(scratch: str, options: Options) -> None:
    global _workspace
    warnings.filterwarnings("ignore", category=SAWarning)
    _workspace = Workspace(Path(tempfile.mkdtemp(prefix="worker-", dir=scratch)), options)


def _grade_in_worker(sub: Submission, out: Path) -> Grade:
    return _workspace.grade(sub, out)


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ----------------------------------------------------------------------------------------------- the batch

def grader_version(assignments: tuple[str, ...]) -> str:
    """A hash of everything that decides a grade besides the submission: sources, checks, grader, config."""
    digest = hashlib.sha256()
    files = [course_dir.ROOT / "nbgrader_config.py"]
    for assignment in assignments:
        files += sorted((course_dir.source_dir() / assignment).glob("*.ipynb"))
    for package in ("course", "autograder"):
        files += sorted((course_dir.ROOT / package).rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(course_dir.ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _fingerprint(sub: Submission, version: str) -> str:
    digest = hashlib.sha256(version.encode())
    for name, path in sorted(sub.notebooks.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps(sub.notes).encode())
    return digest.hexdigest()


def grade(path: Path, out: Path, assignments: list[str] | None = None, *, workers: int = 1, sandbox: bool = False,
          named_regexp: str = DEFAULT_NAMED_REGEXP, progress: bool = True, cell_seconds: int = 120) -> list[Grade]:
    """Grade every student of the batch at path for the given assignments (default: all of the course)."""
    known = course_dir.assignments()
    chosen = tuple(assignments or known)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise GradingError(f"unknown assignment(s) {unknown}; this course has {known}")
    if sandbox:
        from autograder import sandbox as sandbox_module

        reason = sandbox_module.available()
        if reason:
            raise GradingError(f"cannot sandbox student code: {reason}")
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:  # kernels side by side share the cores, not oversubscribe
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    options = Options(chosen, sandbox=sandbox, cell_seconds=cell_seconds,
                      hidden=(str(Path(path).resolve()), str(Path(out).resolve())))
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / STATE_FILE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    version = grader_version(chosen)
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        batch = unpack(path, Path(tmp), set(known), list(chosen), named_regexp)
        subs = find(batch, list(chosen), {a: course_dir.notebooks(a) for a in chosen})
        grades: dict[tuple[str, str], Grade] = {}
        fingerprints = {(sub.student, sub.assignment): _fingerprint(sub, version) for sub in subs if not sub.status}
        todo = []
        for sub in subs:
            key = (sub.student, sub.assignment)
            cached = state.get(f"{sub.student}/{sub.assignment}")
            if key in fingerprints and cached and cached["fingerprint"] == fingerprints[key] \
                    and (out / "feedback" / sub.student / sub.assignment).is_dir():
                grades[key] = _grade_from_json(cached["grade"])
            else:
                todo.append(sub)
        reused = len(grades)
        started = time.perf_counter()
        for row in _run(todo, out, options, workers, Path(tmp), progress):
            grades[row.student, row.assignment] = row
            if row.status not in GRADED:
                shutil.rmtree(out / "feedback" / row.student / row.assignment, ignore_errors=True)
        new_state = {f"{student}/{assignment}": {"fingerprint": fingerprints[student, assignment], "grade": asdict(row)}
                     for (student, assignment), row in grades.items() if row.status in GRADED}
    _remove_stale_feedback(out, set(grades))
    ordered = [grades[key] for key in sorted(grades)]
    write_csv(ordered, out / "grades.csv")
    report.write(ordered, out / "report.md")
    state_path.write_text(json.dumps(new_state, indent=1))
    if progress:
        elapsed = time.perf_counter() - started
        print(f"graded {len(todo)} submission(s) in {elapsed:.1f} s with {workers} worker(s); "
              f"reused {reused} unchanged grade(s)", file=sys.stderr)
    return ordered


def _run(todo: list[Submission], out: Path, options: Options, workers: int, scratch: Path, progress: bool) -> list[Grade]:
    """Grade the submissions, in this process or in worker processes, each with its own nbgrader workspace."""
    maxima = _max_scores(options.assignments)
    rows = [Grade(s.student, s.assignment, 0.0, maxima[s.assignment], s.status, s.message) for s in todo if s.status]
    gradable = [s for s in todo if not s.status]
    if not gradable:
        return rows
    bar = tqdm(total=len(gradable), desc="grading", unit="submission", disable=not progress, file=sys.stderr)
    if workers <= 1:
        workspace = Workspace(scratch / "worker", options)
        for sub in gradable:
            rows.append(workspace.grade(sub, out))
            bar.update(1)
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=_start_worker,
                                 initargs=(str(scratch), options)) as pool:
            futures = {pool.submit(_grade_in_worker, sub, out): sub for sub in gradable}
            for future in as_completed(futures):
                sub = futures[future]
                try:
                    rows.append(future.result())
                except Exception as error:  # a worker that crashed takes only this submission down
                    rows.append(Grade(sub.student, sub.assignment, 0.0, maxima[sub.assignment], "error",
                                      f"grader failure: {type(error).__name__}: {error}"))
                bar.update(1)
    bar.close()
    return rows


def _grade_from_json(data: dict) -> Grade:
    return Grade(**{**data, "cells": {k: tuple(v) for k, v in data["cells"].items()},
                    "diagnoses": [tuple(d) for d in data["diagnoses"]],
                    "mistakes": [tuple(m) for m in data.get("mistakes", [])]})


def _max_scores(assignments: tuple[str, ...]) -> dict[str, float]:
    """Points per assignment, read from the source notebooks' test cells."""
    maxima = {}
    for assignment in assignments:
        total = 0.0
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            total += sum(float(c.metadata.get("nbgrader", {}).get("points", 0)) for c in nb.cells
                         if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
        maxima[assignment] = total
    return maxima


def _remove_stale_feedback(out: Path, current: set[tuple[str, str]]) -> None:
    """Feedback of students or assignments no longer in the batch would be stale: remove it."""
    root = out / "feedback"
    if not root.is_dir():
        return
    for student in root.iterdir():
        for assignment in (student.iterdir() if student.is_dir() else []):
            if (student.name, assignment.name) not in current:
                shutil.rmtree(assignment)
        if student.is_dir() and not any(student.iterdir()):
            student.rmdir()


def write_csv(grades: list[Grade], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
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
