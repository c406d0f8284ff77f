"""A course directory nbgrader grades in: one per worker process, on this machine or on a cluster node.

A :class:`Workspace` is a private nbgrader course directory: the course's source/ copied in, the grading steps of
nbgrader_config.py (restore cells, flag, run the kernel in the sandbox, judge, feedback without hidden tests), and
a gradebook: a SQLite file of its own, or, with ``Options.db_url``, the instructor's gradebook, which then receives
every result exactly as ``nbgrader autograde`` writes it (it is nbgrader's own autograde that writes it).

It grades one :class:`Job` at a time and returns a :class:`Result`: the row for grades.csv, the feedback pages and
the autograded notebooks, as bytes, so the caller may sit on another machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import time
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.exc import SAWarning
from traitlets.config.loader import Config, PyFileConfigLoader

from autograder import GradingError, budgets, course_dir, feedback, sandbox, startup
from autograder.execute import FAILED_AT_START
from autograder.kernels import UNKNOWN, close_servers, pool
from autograder.notebooks import grade_id, grading_notes
from autograder.results import Grade
from autograder.submissions import read_notebook

startup.fast_gradebooks()  # every gradebook this process makes: 2.6 s less each (autograder/startup.py)


@dataclass(frozen=True)
class Options:
    """How to grade: which assignments, with what protection, into which gradebook."""

    assignments: tuple[str, ...]
    sandbox: bool = False
    cell_seconds: int = 120
    notebook_seconds: int | None = None  # wall time per notebook, reruns included; None: 10 x cell_seconds
    hidden: tuple[str, ...] = ()  # folders student code must not see: the batch, the output, the scratch space
    kernel_threads: int = 1  # torch/OpenMP threads of each kernel
    warm: bool = True  # start each next kernel while the current submission runs (autograder/kernels.py)
    fork: bool = True  # fork warm kernels from a fork server where the grader can (autograder/forkserver.py)
    db_url: str | None = None  # the instructor's gradebook (--gradebook); None: a private one per workspace
    version: str = ""  # grader_version() where the batch was started: a node with another course refuses
    secret: str = ""  # the course secret (hex) the grading seeds come from; empty: this node's own (secret.py)
    policy: tuple[tuple[str, str, object], ...] = ()  # the instructor's late policy: (section, trait, value) settings


@dataclass
class Job:
    """One student's submission of one assignment, as data: notebook name -> file content, and the files nbgrader
    keeps beside the notebooks (timestamp.txt, submission_secret.txt) -> content."""

    student: str
    assignment: str
    files: dict[str, bytes]
    notes: list[str] = field(default_factory=list)
    extras: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Result:
    """What grading one job gives back: its row, its feedback pages, and (for a shared gradebook) the autograded
    notebooks, each as relative path -> bytes."""

    grade: Grade
    feedback: dict[str, bytes] = field(default_factory=dict)
    autograded: dict[str, bytes] = field(default_factory=dict)
    log: str = ""  # for an error row: nbgrader's whole log and traceback, which the grader saves for the instructor


@contextlib.contextmanager
def quiet_gradebook() -> Iterator[None]:
    """nbgrader's gradebook code trips SQLAlchemy's autoflush warnings, which say nothing about grades."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        yield


def grader_version(assignments: tuple[str, ...], root: Path = course_dir.ROOT) -> str:
    """A hash of everything that decides a grade besides the submission: sources, checks, grader, config."""
    digest = hashlib.sha256()
    files = [root / "nbgrader_config.py"]
    for assignment in assignments:
        files += sorted((course_dir.source_dir(root) / assignment).glob("*.ipynb"))
    for package in ("course", "autograder"):
        files += sorted((root / package).rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


#: the configuration sections of an instructor's late-submission policy, which grading applies as nbgrader does
POLICY_SECTIONS = ("LateSubmissionPlugin", "AssignLatePenalties")


def late_policy(root: Path) -> tuple[tuple[str, str, object], ...]:
    """The late-submission settings of the nbgrader_config.py at root (e.g. LateSubmissionPlugin.penalty_method =
    "zero", or AssignLatePenalties.plugin_class naming a plugin of your own), as plain data a worker applies."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return tuple((section, trait, value) for section in POLICY_SECTIONS if section in config
                 for trait, value in sorted(config[section].items()))


def course_config(root: Path, db_url: str) -> Config:
    """nbgrader_config.py of the course, pointed at the course directory root and the gradebook db_url."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_dir.ROOT)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = db_url
    return config


def ensure_assignments(db_url: str, assignments: tuple[str, ...], scratch: Path) -> None:
    """Put the assignments' notebooks, cells and points into the gradebook at db_url (nbgrader's own
    generate_assignment, run in a scratch course directory so the course's release/ is left alone)."""
    for assignment in assignments:
        shutil.copytree(course_dir.source_dir() / assignment, scratch / "source" / assignment, dirs_exist_ok=True)
    config = course_config(scratch, db_url)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for assignment in assignments:
        with quiet_gradebook():
            result = api.generate_assignment(assignment)
        if not result["success"]:
            raise GradingError(f"nbgrader could not put {assignment} into the gradebook {db_url}:\n"
                               f"{result.get('error') or result.get('log')}")


def notebook_budget(options: Options, assignment: str) -> int:
    """Seconds one notebook of assignment may run in all: Options.notebook_seconds, by default the assignment's
    budget from its reference solution's measured run (autograder/budgets.py)."""
    if options.notebook_seconds is not None:
        return options.notebook_seconds
    return budgets.budget(assignment, options.cell_seconds)


class Workspace:
    """A private nbgrader course directory, ready to grade the given assignments."""

    def __init__(self, root: Path, options: Options):
        if options.version and options.version != grader_version(options.assignments):
            raise GradingError(f"the course at {course_dir.ROOT} differs from the one the batch was started with "
                               "(another version of source/, course/ or autograder/): update this node")
        self.root = root
        self.options = options
        for assignment in options.assignments:
            shutil.copytree(course_dir.source_dir() / assignment, root / "source" / assignment)
        self.db_url = options.db_url or f"sqlite:///{root / 'gradebook.db'}"
        config = course_config(root, self.db_url)
        config.Execute.timeout = options.cell_seconds
        config.Execute.interrupt_on_timeout = True
        threads = str(max(1, options.kernel_threads))
        config.GradingKernelManager.kernel_env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        config.GradingExecute.secret = config.JudgeEvidence.secret = options.secret
        if options.warm:
            config.GradingExecute.kernel_folders = str(root / ".kernels")
        for section, trait, value in options.policy:
            config[section][trait] = value
        if options.sandbox:
            reason = sandbox.available()
            if reason:
                raise GradingError(f"cannot sandbox student code here: {reason}")
            sandbox.configure(config, root, sandbox.Limits(cell_seconds=options.cell_seconds),
                              hide=[root.parent, *(Path(p) for p in options.hidden)])
            if not options.fork:
                config.GradingExecute.sandbox_plan = ""
        self.api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        if options.db_url is None:
            for assignment in options.assignments:
                with quiet_gradebook():
                    result = self.api.generate_assignment(assignment)
                if not result["success"]:
                    raise GradingError(f"nbgrader could not generate {assignment}:\n"
                                       f"{result.get('error') or result.get('log')}")
        self.sources = {(assignment, notebook): nbformat.read(root / "source" / assignment / notebook, as_version=4)
                        for assignment in options.assignments for notebook in course_dir.notebooks(assignment)}
        with self._gradebook() as gradebook:
            self.max_scores = {a: float(gradebook.find_assignment(a).max_score) for a in options.assignments}

    def close(self) -> None:
        """Shut down the kernel this workspace started for a next submission (warm kernels)."""
        pool().close_under(self.root)
        close_servers(self.root)

    def _gradebook(self) -> Gradebook:
        return Gradebook(self.db_url, self.api.coursedir.course_id)

    def _folder(self, kind: str, job: Job) -> Path:
        return self.root / kind / job.student / job.assignment

    def grade(self, job: Job, upcoming: str | None = UNKNOWN) -> Result:
        """Stage, autograde (restore, flag, execute, judge) and feed back one job; never raises for a student's
        fault: a broken submission gives a row with a status. upcoming: the assignment of the job this workspace
        grades next, if known (None: none), whose kernel is started while this one runs."""
        pool().upcoming = upcoming
        row = Grade(job.student, job.assignment, 0.0, self.max_scores[job.assignment], "", "")
        for kind in ("submitted", "autograded", "feedback"):
            shutil.rmtree(self._folder(kind, job), ignore_errors=True)
        target = self._folder("submitted", job)
        target.mkdir(parents=True)
        notes = list(job.notes)
        for name, data in job.files.items():
            nb, note = read_notebook(name, data)
            if nb is None:
                row.status, row.message = "invalid-notebook", f"{note}."
                return Result(row)
            if note:
                notes.append(note)
            nbformat.write(nb, target / name)
        for name, data in job.extras.items():
            (target / name).write_bytes(data)
        logs = []
        self.api.config.GradingExecute.notebook_timeout = notebook_budget(self.options, job.assignment)
        for attempt in range(1, ATTEMPTS + 1):
            with quiet_gradebook():
                done = self.api.autograde(job.assignment, job.student)
            if done["success"]:
                break
            logs.append(f"--- attempt {attempt} of {ATTEMPTS}\n"
                        + "\n\n".join(str(done.get(k) or "") for k in ("error", "log")).strip())
            if not transient(logs[-1]) or attempt == ATTEMPTS:
                row.status = "error"
                row.message = "nbgrader could not grade this submission: " + cause(logs[-1]) + (
                    f" (after {attempt} attempts)" if attempt > 1 else "")
                return Result(row, log="\n\n".join(logs))
            time.sleep(RETRY_SECONDS * attempt)
        graded = {name: nbformat.read(self._folder("autograded", job) / name, as_version=4) for name in job.files}
        _keep_only(self._folder("autograded", job), {*job.files, *job.extras})
        self._read_scores(row)
        flags, stopped = [], []
        for nb in graded.values():
            noted = grading_notes(nb)
            notes += noted.get("notes", [])
            flags += noted.get("flags", [])
            stopped += noted.get("stopped", [])
            row.seed = next((int(s) for s in noted.get("seed", []) if s.isdigit()), row.seed)
            row.diagnoses += feedback.diagnoses(nb)
            row.mistakes += feedback.mistakes(nb)
        if stopped:
            notes.insert(0, f"the kernel died in {len(stopped)} cell(s) ({', '.join(stopped)}): each was stopped "
                            "and scores 0; the rest was graded")
        pages: dict[str, bytes] = {}
        with quiet_gradebook():
            fed_back = self.api.generate_feedback(job.assignment, job.student)["success"]
        if fed_back:
            folder = self._folder("feedback", job)
            pages = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        else:
            notes.append("feedback could not be generated")
        row.status = "flagged" if flags else ("crashed" if stopped else "graded")
        if flags:
            flags = ["code that reaches into the tests or the kernel (left in place; every score is the judge's "
                     "verdict on the recorded evidence): " + ", ".join(flags)]
        row.message = "; ".join(flags + notes)
        autograded = {}
        if self.options.db_url is not None:  # the instructor's course directory gets them as nbgrader would
            folder = self._folder("autograded", job)
            autograded = {name: (folder / name).read_bytes() for name in [*job.files, *job.extras]
                          if (folder / name).is_file()}
        return Result(row, pages, autograded)

    def _read_scores(self, row: Grade) -> None:
        with quiet_gradebook(), self._gradebook() as gradebook:
            submission = gradebook.find_submission(row.assignment, row.student)
            row.score, row.max_score = float(submission.score), float(submission.max_score)
            found = {}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.cell_type == "code" and grade.max_score > 0:
                        found[grade.name] = (float(grade.score), float(grade.max_score))
        order = [grade_id(c) for (a, _), nb in self.sources.items() if a == row.assignment for c in nb.cells]
        row.cells = {name: found[name] for name in order if name in found}


def _keep_only(folder: Path, names: set[str]) -> None:
    """Remove what the kernel left in its folder (evidence records, files it wrote) besides the graded notebooks and
    nbgrader's own files: nbgrader's feedback would copy all of it to the student, and it would fill the disk."""
    for path in folder.iterdir():
        if path.name in names and path.is_file() and not path.is_symlink():
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def failure(error: BaseException) -> str:
    """An exception with its whole traceback (a worker process's included), for the error row's log."""
    return "".join(traceback.format_exception(error))


#: how often a submission is tried when nbgrader fails for a reason that passes (a locked or busy gradebook, a
#: kernel that did not start in time), and how long to wait before the next try (this, then twice this)
ATTEMPTS = 3
RETRY_SECONDS = 2.0
#: what nbgrader's log says of failures that pass: the gradebook (SQLite locked, a server connection lost or a
#: transaction that lost a race) or a kernel that did not start
TRANSIENT = ("database is locked", "OperationalError", "could not serialize access", "deadlock detected",
             "server closed the connection", "Kernel didn't respond", "Kernel died before replying to kernel_info",
             "kernel_info_reply")
#: nbgrader's guesses at a cause, which it prints without having checked it (e.g. "run `nbgrader db upgrade`" after
#: any database error): never passed on as the reason
UNCHECKED = ("nbgrader db upgrade", "Please see the above traceback", "see the error above", "BACK UP your database",
             "may occur if you recently upgraded", "Please see the error")
#: a traceback's last line: the exception's type and message
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)|[A-Za-z_][\w.]*\.\w+Error)\b.*")


def transient(log: str) -> bool:
    """Whether nbgrader failed for a reason that passes, so that another attempt may succeed: not when the kernel
    raised an exception at start, which every attempt would repeat (a kernel that did not answer in time may)."""
    return FAILED_AT_START not in log and any(marker in log for marker in TRANSIENT)


def cause(log: str) -> str:
    """What went wrong, as the log states it: the exception a kernel raised at start, else the last exception line of
    its tracebacks (e.g. "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"), else its
    last line that is not one of nbgrader's unchecked guesses."""
    lines = [line.strip() for line in (log or "").splitlines() if line.strip()]
    lines = [line for line in lines if not any(guess in line for guess in UNCHECKED) and not line.startswith("---")]
    started = [line[line.index(FAILED_AT_START):] for line in lines if FAILED_AT_START in line]
    stated = started or [line for line in lines if EXCEPTION.match(line)]
    chosen = stated[-1] if stated else (lines[-1] if lines else "no reason was logged")
    return chosen[:300]
