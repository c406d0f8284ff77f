"""Grade a batch of submissions with nbgrader: grades.csv, feedback HTML, a class report, a printed table.

Every submission is graded in a :class:`~autograder.workspace.Workspace`, a private nbgrader course directory,
one per worker: worker processes on this machine (the default), or the workers of a Dask cluster
(``scheduler``), each node with the course checked out. Results go to the output folder and, with ``gradebook``,
into the instructor's own nbgrader gradebook and course directory, exactly as ``nbgrader autograde`` leaves them.
A broken submission gives one row with a status and never stops the batch. Rerunning into the same output folder
regrades only what changed (the submission or the grader), and never loses a result: rows of students and
assignments not in this batch stay (``prune`` removes them, an explicit act).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from multiprocessing import get_context
from multiprocessing.connection import wait
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from tqdm import tqdm
from traitlets.config.loader import PyFileConfigLoader

from autograder import GradingError, course_dir, exchange, handin, record, report
from autograder.results import GRADED, Grade, write_csv
from autograder.sandbox import available as sandbox_available
from autograder.secret import course_secret, fingerprint
from autograder.submissions import DEFAULT_NAMED_REGEXP, Submission, find, unpack
from autograder.workspace import (
    Job,
    Options,
    Result,
    Workspace,
    ensure_assignments,
    failure,
    grader_version,
    late_policy,
)

STATE_FILE = ".grading-state.json"


@dataclass(frozen=True)
class Course:
    """An instructor's nbgrader course directory and the gradebook its nbgrader_config.py names."""

    root: Path
    db_url: str


def instructor_course(root: Path = course_dir.ROOT) -> Course:
    """The course at root: its gradebook is nbgrader_config.py's CourseDirectory.db_url, or gradebook.db there."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    return Course(root, CourseDirectory(config=config).db_url)


# ----------------------------------------------------------------------------------------------- jobs

def job(sub: Submission) -> Job:
    """The submission as data: its notebooks, and for nbgrader the timestamp.txt of the time believed (handin.py)
    and its submission secret."""
    extras = {name: text.encode() for name, text in sub.nbgrader_files.items()}
    return Job(sub.student, sub.assignment, {name: path.read_bytes() for name, path in sub.notebooks.items()},
               list(sub.notes), extras)


def _fingerprint(sub: Submission, version: str) -> str:
    digest = hashlib.sha256(version.encode())
    for name, path in sorted(sub.notebooks.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps([sub.notes, sub.nbgrader_files], sort_keys=True).encode())
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------- where jobs run

#: where grading workers come from: forked from multiprocessing's fork server, one process per grader that imported
#: the grading code (nbgrader, torch for the judges, the course's checks) once, instead of each worker importing it
#: afresh as a spawned process does: 3-7 s of a core per worker on the 2-core machine, paid again by every batch and
#: by every worker that replaces one that died (measured: a batch of two submissions on two workers, 24-31 s spawned,
#: 10-11 s forked). The server runs no grading (no thread, no kernel), so a worker forked from it is as fresh as a
#: spawned one; it takes the grader's environment of the moment (_serve's environment), not the server's.
WORKER_START = "forkserver"
#: what the fork server imports before it forks any worker
WORKER_PRELOAD = ["autograder.grade"]
#: the packages whose code a worker runs (the judges are in course/): a fork server holds them as they were
CODE = ("autograder", "course")


def _code_version() -> str:
    """A hash of the grading code on disk: CODE's Python files where this process imports them from."""
    digest = hashlib.sha256()
    for package in CODE:
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            for path in sorted(Path(folder).rglob("*.py")):
                digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_IMPORTED_CODE = _code_version()  # what this process imported (a fork server it starts imports the same, later)


def _context():
    """Workers forked from the fork server while the code on disk is the code this process imported; spawned ones
    (each importing the code anew) once it changed under a long-running grader (``serve`` after an update), so that no
    worker judges with code older than what its kernels import."""
    if WORKER_START != "forkserver" or _code_version() != _IMPORTED_CODE:
        return get_context("spawn")
    context = get_context("forkserver")
    context.set_forkserver_preload(WORKER_PRELOAD)
    return context


def _serve(connection, scratch: str, options: Options, environment: dict[str, str] | None = None) -> None:
    """A grading worker process: set up one workspace, then grade each job the parent sends until it sends None.
    A set-up failure is kept and sent back for every job, so that each error row says why (e.g. the course changed
    after the batch started). environment: the grader's environment when it started this worker (TMPDIR, PATH, what
    kernels inherit), which a worker forked from the fork server takes instead of the one the server started with."""
    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)
        tempfile.tempdir = None  # found again from TMPDIR
    try:
        workspace, unready = Workspace(Path(tempfile.mkdtemp(prefix="worker-", dir=scratch)), options), None
    except Exception as error:  # noqa: BLE001 - reported with every job this worker is given
        workspace, unready = None, failure(error)
    try:
        while (message := connection.recv()) is not None:
            item, upcoming = message
            if unready:
                connection.send((None, unready))
                continue
            try:
                connection.send((workspace.grade(item, upcoming), ""))
            except Exception as error:  # noqa: BLE001 - a job that fails takes only this submission down
                connection.send((None, failure(error)))
    finally:
        if workspace is not None:
            workspace.close()


def _upcoming(jobs: list[Job], index: int, workers: int) -> str | None:
    """The assignment of the job the worker grading jobs[index] most likely grades next (workers take jobs in
    order), None at the end of the batch: its kernel is started while jobs[index] runs."""
    later = index + workers
    return jobs[later].assignment if later < len(jobs) else None


#: how many workers a submission may see die while they grade it before it is given up: one death may be the
#: machine's doing (an operator, the out-of-memory killer choosing the worker), two in a row are the submission's
WORKER_DEATHS = 2


def _death(process) -> str:
    """Why a worker process ended, in plain words, as the last line of the error row's log."""
    code = process.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"it was killed by {name}" + (" (the machine may have run out of memory)" if -code == signal.SIGKILL
                                            else "")
    else:
        how = f"it exited with status {code}"
    return (f"a grading worker died each of the {WORKER_DEATHS} times one graded this submission (the last, pid "
            f"{process.pid}: {how}); the other submissions were graded, and this one is not tried again")


@dataclass
class _Worker:
    process: object
    connection: object
    job: int | None = None  # the index of the job it is grading


def _locally(jobs: list[Job], options: Options, workers: int,
             scratch: Path) -> Iterator[tuple[Job, Result | None, str]]:
    """(job, result, error) for every job, graded in worker processes, one job at a time each (also with one worker,
    so that this process outlives a worker that dies). A worker that dies costs only the job it held: a fresh
    worker takes its place, the job is graded again at the end of the batch, and when its worker dies again it
    gets an error row saying so; every other job is graded."""
    scratch.mkdir(parents=True, exist_ok=True)
    context = _context()
    pending = list(range(len(jobs)))
    pending.reverse()  # popped from the end: jobs go out in order
    pool: list[_Worker] = []
    deaths: dict[int, int] = {}

    def start() -> _Worker:
        parent, child = context.Pipe()
        process = context.Process(target=_serve, args=(child, str(scratch), options, dict(os.environ)), daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def give(worker: _Worker) -> None:
        """Send the worker the next job; one it cannot take (it died after its last answer) stays pending."""
        worker.job = pending.pop() if pending else None
        if worker.job is None:
            return
        try:
            worker.connection.send((jobs[worker.job], _upcoming(jobs, worker.job, workers)))
        except OSError:
            pending.append(worker.job)
            worker.job = None
            worker.process.join()
            worker.connection.close()
            pool[pool.index(worker)] = replacement = start()
            give(replacement)

    try:
        for _ in range(min(max(1, workers), len(jobs))):
            pool.append(start())
            give(pool[-1])
        while any(worker.job is not None for worker in pool):
            busy = [worker for worker in pool if worker.job is not None]
            ready = wait([w.connection for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                if worker.connection not in ready and worker.process.sentinel not in ready:
                    continue
                try:
                    answer = worker.connection.recv() if worker.connection.poll() else None
                except (EOFError, OSError):  # it died: its end of the pipe is closed
                    answer = None
                if answer is not None:
                    item = jobs[worker.job]
                    give(worker)
                    yield item, *answer
                else:
                    worker.process.join(timeout=5)
                    if worker.process.exitcode is None:
                        continue  # its pipe closed but it has not ended yet: seen again next time round
                    held = worker.job
                    deaths[held] = deaths.get(held, 0) + 1
                    if deaths[held] < WORKER_DEATHS:
                        pending.insert(0, held)  # graded again, last
                    worker.connection.close()
                    replacement = start()
                    pool[pool.index(worker)] = replacement
                    give(replacement)
                    if deaths[held] >= WORKER_DEATHS:
                        yield jobs[held], None, _death(worker.process)
    finally:
        for worker in pool:
            try:
                worker.connection.send(None)
            except (OSError, ValueError):
                pass
        for worker in pool:
            worker.process.join(timeout=30)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()


# ----------------------------------------------------------------------------------------------- results

def _keep(result: Result, out: Path, course: Course | None, item: Job, record: bytes = b"") -> None:
    """Write a result's feedback into out/feedback and, for a gradebook, the submission (with the signed record of
    its hand-in time, so that a regrade from submitted/ keeps it), the autograded notebooks and the feedback into the
    instructor's course directory, where nbgrader keeps them."""
    destinations = [out / "feedback" / item.student / item.assignment]
    if course is not None and result.autograded:
        destinations.append(course.root / "feedback" / item.student / item.assignment)
        submitted = course.root / "submitted" / item.student / item.assignment
        shutil.rmtree(submitted, ignore_errors=True)
        submitted.mkdir(parents=True)
        for name, data in {**item.files, **item.extras}.items():
            (submitted / name).write_bytes(data)
        if record:
            (submitted / handin.RECORD).write_bytes(record)
        autograded = course.root / "autograded" / item.student / item.assignment
        shutil.rmtree(autograded, ignore_errors=True)
        autograded.mkdir(parents=True)
        for name, data in result.autograded.items():
            (autograded / name).write_bytes(data)
    for folder in destinations:
        shutil.rmtree(folder, ignore_errors=True)
        for name, data in result.feedback.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)


def _save_log(out: Path, row: Grade, log: str) -> None:
    """Keep what went wrong in out/logs/<student>/<assignment>.log and point the row's message at it."""
    path = out / "logs" / row.student / f"{row.assignment}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(log or "(no log was produced)")
    row.message = f"{row.message} (the whole log: {path.relative_to(out)})"


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


def _only(subs: list[Submission], students: list[str], path: Path) -> list[Submission]:
    """The submissions of the named students (their case as the batch spells it); an unknown name is refused."""
    wanted = {name.casefold() for name in students}
    found = {sub.student.casefold() for sub in subs}
    unknown = sorted(name for name in students if name.casefold() not in found)
    if unknown:
        raise GradingError(f"no student {', '.join(unknown)} in {path}; it holds {', '.join(sorted(found)) or 'none'}."
                           " Nothing was written.")
    return [sub for sub in subs if sub.student.casefold() in wanted]


def _stamp(sub: Submission) -> datetime | None:
    """When the submission was handed in, as nbgrader's gradebook keeps it (naive UTC)."""
    return sub.handed_in[0].astimezone(timezone.utc).replace(tzinfo=None) if sub.handed_in else None


def _record(sub: Submission, secret: str) -> bytes:
    """The signed record of the time the submission is believed handed in, for submitted/ (handin.py)."""
    when, source = sub.handed_in
    return handin.sign(secret, sub.student, sub.assignment, when, source,
                       {path.name: path.read_bytes() for path in sub.notebooks.values()}, sub.refused)


def write_results(out: Path, rows: list[Grade], gradebook: Course | None, roster: list[str] = (),
                  assignments: tuple[str, ...] = (), maxima: dict[str, float] | None = None) -> list[Grade]:
    """Write out/grades.csv and out/report.md: the grader's rows (status, message, diagnoses) with every number read
    from the gradebook when there is one, plus a `missing` row for each student of the roster or the gradebook
    with no result for one of the assignments. Returns the rows written."""
    students = list(roster)
    if gradebook is not None:
        held = record.read(gradebook.db_url)
        rows = record.derive(rows, held)
        rows += record.held_rows(rows, held, assignments)
        students += list(held.students)
        maxima = {**held.max_scores, **(maxima or {})}
    if students and assignments:
        rows = rows + record.missing_rows(rows, list(dict.fromkeys(students)), assignments, maxima or {})
    rows = sorted(rows, key=lambda row: (row.student, row.assignment))
    write_csv(rows, out / "grades.csv")
    report.write(rows, out / "report.md")
    return rows


def refresh(out: Path, gradebook: Course, roster: Path | None = None) -> list[Grade]:
    """Rewrite out/grades.csv and out/report.md from the gradebook, grading nothing: after manual grading in
    Formgrader, extra credit, or a late penalty. Every row out holds stays."""
    state = _read_state(out / STATE_FILE)
    if not state:
        raise GradingError(f"{out} holds no grading results ({STATE_FILE} is missing): grade into it first")
    rows = [Grade.from_json(entry["grade"]) for entry in state.values()]
    listed = [s.id for s in record.read_roster(roster)] if roster else []
    assignments = tuple(sorted({row.assignment for row in rows}))
    return write_results(out, rows, gradebook, listed, assignments, _max_scores(assignments))


# ----------------------------------------------------------------------------------------------- the batch

def _read_state(path: Path) -> dict[str, dict]:
    """student/assignment -> {"fingerprint", "grade"} of every result the output folder holds (the rows of
    grades.csv, with what they were graded from); {} for a new folder."""
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text())
    except ValueError as error:
        raise GradingError(f"{path} is not the JSON a grading run writes ({error}); move it away to start afresh "
                           "(the results it held are in grades.csv beside it)") from None
    return {key: entry for key, entry in state.items()
            if isinstance(entry, dict) and isinstance(entry.get("grade"), dict) and "/" in key}


#: held (flock) by a running batch in its scratch folder: a folder whose lock is free was left by a run that died
RUN_LOCK = ".autograder-run.lock"


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    """A scratch folder for one batch (unpacked submissions, the workers' course folders), removed afterwards; the
    ones runs that died left behind (with every student's notebooks) are removed first. Only folders this grader
    made, named autograder-*, holding a lock no running batch holds."""
    base = Path(tempfile.gettempdir())
    for folder in base.glob("autograder-*"):
        lock = folder / RUN_LOCK
        try:  # another user's (a shared machine: another instructor's) is neither ours to judge nor to remove
            if folder.is_symlink() or folder.lstat().st_uid != os.geteuid() or not lock.is_file():
                continue
            with lock.open("rb") as held:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a batch running now
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue
    folder = Path(tempfile.mkdtemp(prefix="autograder-", dir=base))
    with (folder / RUN_LOCK).open("wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _write_state(path: Path, state: dict) -> None:
    """Replace the state file whole (written beside it, then renamed): a run killed while writing keeps the last."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(state, indent=1))
    os.replace(partial, path)


def _nothing_found(path: Path, batch: Path, assignments: tuple[str, ...]) -> str:
    """What grading expected to find at path and what it found instead, for a batch with no submission at all."""
    folders = sorted(p.name for p in batch.iterdir() if p.is_dir()) if batch.is_dir() else []
    files = sorted(str(p.relative_to(batch)) for p in batch.rglob("*") if p.is_file()) if batch.is_dir() else []
    inside = sorted({str(p.relative_to(batch)) for f in folders for p in (batch / f).iterdir()})[:6] if folders else []
    shown = ", ".join(files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    return (f"found no submission in {path}: expected a folder per student holding a folder per assignment "
            f"(<student>/<assignment>/<notebook>.ipynb, assignments {', '.join(assignments)}), a zip of that, or an "
            "LMS export whose file names match --named-regexp (the default is <prefix>_<student>_attempt_<time>_"
            f"<file>). Found {len(folders)} folder(s) and {len(files)} file(s)"
            + (f": {shown}" if files else "") + (f"; inside the folders: {', '.join(inside)}" if inside else "")
            + ". Nothing was written.")


def grade(path: Path, out: Path, assignments: list[str] | None = None, *, workers: int = 1, sandbox: bool = False,
          named_regexp: str = DEFAULT_NAMED_REGEXP, progress: bool = True, cell_seconds: int = 120,
          gradebook: Course | None = None, scheduler: str | None = None,
          kernel_threads: int | None = None, notebook_seconds: int | None = None, prune: bool = False,
          students: list[str] | None = None, roster: Path | None = None, warm: bool = True,
          fork: bool = True) -> list[Grade]:
    """Grade every student of the batch at path for the given assignments (default: all of the course).

    gradebook: also record the results in this course's gradebook and folders. scheduler: the address of a Dask
    scheduler whose workers grade (workers is then ignored). kernel_threads: torch threads per kernel (default:
    this machine's cores shared among the workers; 1 on a cluster). notebook_seconds: wall time one notebook may
    run in all (default: 10 x cell_seconds); the cells left when it runs out are not run and score 0.

    The results already in out stay: this run adds or replaces only the rows of the submissions it grades (a student
    with no folder for an assignment in this batch keeps an earlier result of it). prune: instead, keep only this
    batch's rows and remove the feedback of everyone else. A batch with no submission at all raises GradingError
    before anything is written. students: grade only these students' submissions (the rest of out stays as it was).
    roster: a CSV as `nbgrader db student import` reads it; each of its students (and, with a gradebook, each student
    the gradebook knows) with no result for an assignment gets a `missing` row. warm: each worker starts the next
    kernel while the current submission runs (autograder/kernels.py: a fresh kernel per submission still, the same
    results); False starts each kernel when its notebook does, as nbgrader does. fork: where the grader is root and
    sandboxes, warm kernels are forked from each worker's fork server (autograder/forkserver.py: the same sandbox,
    the same results, torch imported once); False starts them with bwrap, as cold ones.

    With a gradebook, grades.csv and report.md are derived from it after the run (record.py): late penalties, manual
    scores and extra credit count, flagged submissions are flagged there, and a submission that could not be graded
    is recorded with 0 and the reason. Returns every row of out/grades.csv."""
    known = course_dir.assignments()
    chosen = tuple(assignments or known)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise GradingError(f"unknown assignment(s) {unknown}; this course has {known}")
    if sandbox and scheduler is None:
        reason = sandbox_available()
        if reason:
            raise GradingError(f"cannot sandbox student code: {reason}")
    if scheduler and gradebook and gradebook.db_url.startswith("sqlite"):
        raise GradingError("grading on a cluster into a gradebook needs a database server every node reaches "
                           "(set c.CourseDirectory.db_url in nbgrader_config.py to a postgresql:// URL); "
                           f"{gradebook.db_url} is a file on this machine")
    version = grader_version(chosen)
    secret = course_secret()
    threads = kernel_threads or (1 if scheduler else max(1, (os.cpu_count() or 1) // max(1, workers)))
    options = Options(chosen, sandbox=sandbox, cell_seconds=cell_seconds, notebook_seconds=notebook_seconds,
                      hidden=(str(Path(path).resolve()), str(Path(out).resolve())), kernel_threads=threads,
                      db_url=gradebook.db_url if gradebook else None, version=version, secret=secret,
                      policy=late_policy(gradebook.root) if gradebook else (), warm=warm, fork=fork)
    state_path = out / STATE_FILE
    state = _read_state(state_path)
    version_here = version + (gradebook.db_url if gradebook else "") + fingerprint(secret) + repr(options.policy)
    maxima = _max_scores(chosen)
    with _scratch() as scratch:
        batch = unpack(path, scratch, set(known), list(chosen), named_regexp, secret)
        arrived = Path(path).stat().st_ctime if Path(path).is_file() else None  # a zip: when it came to this machine
        subs = find(batch, list(chosen), {a: course_dir.notebooks(a) for a in chosen}, secret, arrived)
        if all(sub.status == "missing" for sub in subs):
            raise GradingError(_nothing_found(Path(path), batch, chosen))
        if students:
            subs = _only(subs, students, Path(path))
        listed = [s.id for s in record.read_roster(roster)] if roster else []
        out.mkdir(parents=True, exist_ok=True)
        grades: dict[tuple[str, str], Grade] = {}
        fingerprints = {(s.student, s.assignment): _fingerprint(s, version_here) for s in subs if not s.status}
        todo = []
        for sub in subs:
            key = (sub.student, sub.assignment)
            cached = state.get(f"{sub.student}/{sub.assignment}")
            if sub.status == "missing" and cached and not prune:
                continue  # no folder for it in this batch: an earlier result stays, never replaced by "missing"
            if sub.status:
                grades[key] = Grade(sub.student, sub.assignment, 0.0, maxima[sub.assignment], sub.status, sub.message)
            elif cached and cached.get("fingerprint") == fingerprints[key] and cached["grade"]["status"] in GRADED \
                    and (out / "feedback" / sub.student / sub.assignment).is_dir():
                grades[key] = Grade.from_json(cached["grade"])
            else:
                todo.append(sub)
        reused = len(grades) - sum(1 for s in subs if s.status)
        if todo and gradebook is not None:
            ensure_assignments(gradebook.db_url, chosen, scratch / "gradebook")
        started = time.perf_counter()
        # by assignment: a worker's next submission then mostly finds its kernel started (one per assignment)
        jobs = [job(sub) for sub in sorted(todo, key=lambda s: (s.assignment, s.student))]
        records = {(s.student, s.assignment): _record(s, secret) for s in todo} if gradebook is not None else {}
        if gradebook is not None:  # a secret for release_feedback, kept on a regrade (before _keep replaces them)
            for item in jobs:
                item.extras.update(exchange.release_files(gradebook.root, item.student, item.assignment, item.extras))
        if scheduler:
            from autograder.cluster import on_cluster  # noqa: PLC0415 - Dask is a heavy import only a cluster needs

            results = on_cluster(jobs, options, scheduler)
        else:
            results = _locally(jobs, options, workers, scratch / "workers")
        bar = tqdm(total=len(jobs), desc="grading", unit="submission", disable=not progress, file=sys.stderr)
        so_far = dict(state)  # the state as rows arrive: a run stopped mid-batch keeps what it graded
        for item, result, error in results:
            if result is None:
                row = Grade(item.student, item.assignment, 0.0, maxima[item.assignment], "error",
                            f"grader failure: {error.strip().splitlines()[-1][:300] if error.strip() else 'unknown'}")
                _save_log(out, row, error)
            else:
                row = result.grade
                _keep(result, out, gradebook, item, records.get((item.student, item.assignment), b""))
                if row.status == "error":
                    _save_log(out, row, result.log)
            grades[item.student, item.assignment] = row
            if row.status not in GRADED:
                shutil.rmtree(out / "feedback" / item.student / item.assignment, ignore_errors=True)
            key = f"{item.student}/{item.assignment}"
            so_far[key] = {"fingerprint": fingerprints[item.student, item.assignment] if row.status in GRADED
                           else state.get(key, {}).get("fingerprint"), "grade": row.to_json()}
            _write_state(state_path, so_far)
            bar.update(1)
        bar.close()
        this_batch = set(grades)
        if gradebook is not None:
            stamps = {(s.student, s.assignment): _stamp(s) for s in subs}
            record.mark(gradebook.db_url, [grades[key] for key in this_batch], stamps)
            for assignment in chosen:  # submissions graded before secrets were given, and reused ones
                exchange.make_releasable(gradebook.root, assignment)
        if not prune:  # every earlier result of a student or assignment not graded now stays as it was
            for key, entry in state.items():
                student, _, assignment = key.partition("/")
                grades.setdefault((student, assignment), Grade.from_json(entry["grade"]))
        new_state = {f"{student}/{assignment}": {"fingerprint": fingerprints.get((student, assignment))
                                                  if (student, assignment) in this_batch and row.status in GRADED
                                                  else state.get(f"{student}/{assignment}", {}).get("fingerprint"),
                                                  "grade": row.to_json()}
                     for (student, assignment), row in grades.items()}
    if prune:
        _remove_stale_feedback(out, set(grades))
    _write_state(state_path, new_state)
    ordered = write_results(out, [grades[key] for key in sorted(grades)], gradebook, listed, chosen, maxima)
    if progress:
        elapsed = time.perf_counter() - started
        where = f"on the cluster at {scheduler}" if scheduler else f"with {workers} worker(s)"
        print(f"graded {len(todo)} submission(s) in {elapsed:.1f} s {where}; reused {reused} unchanged grade(s)",
              file=sys.stderr)
    return ordered
