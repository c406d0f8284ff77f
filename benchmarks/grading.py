"""Benchmark: the course's grader against plain nbgrader on the same batch, in the same run.

    .venv/bin/python benchmarks/grading.py [--submissions 12] [--runs plain local1 local2 dask2 ...] [--no-sandbox]

Builds a class of solved, untouched and mistaken submissions of assignments 01 and 02, then times, each on the
same batch:
- `plain`: nbgrader's own `autograde` + `generate_feedback` for each assignment in a copy of the course directory
  (its nbgrader_config.py included, so the course's grading steps run there too; no sandbox, one process; each
  kernel shut down as nbgrader's Execute does, gracefully) — the baseline every other run is a ratio of;
- `plain-immediate`: the same with the course's immediate kernel shutdown (the last cell has run: the grader kills
  the kernel instead of asking it to exit and waiting), to show what that step alone gains;
- `cold1`, `cold2`: `python -m autograder grade --cold-kernels` with 1 and 2 local worker processes: each kernel
  starts when its notebook does, as nbgrader's do;
- `bwrap1`, `bwrap2`: `python -m autograder grade --no-fork-server` with 1 and 2 local worker processes, each
  starting the next kernel with bwrap while the current submission runs (warm kernels, autograder/kernels.py);
- `local1`, `local2`: `python -m autograder grade` with 1 and 2 local worker processes: warm kernels too, forked
  from each worker's fork server where the grader is root (autograder/forkserver.py), else as bwrap1/bwrap2;
- `where`: one worker in this process under cProfile: where a submission's time goes (waiting for the kernel,
  running cells, judging, feedback pages, the rest of nbgrader);
- `dask2`: on a local Dask cluster of 2 worker processes (started here, on loopback);
- `dask2-kill`: the same, with one worker killed while it grades: the cost of a dead worker;
- `sqlite2`, `postgres2`: 2 local workers recording into an instructor's gradebook (`--gradebook`), a SQLite
  file, and a PostgreSQL server started here (Debian's postgresql package).
Prints seconds, seconds per submission, submissions per hour and the ratio to plain nbgrader. Not a test: timings
depend on the machine and on what else runs on it, so compare ratios taken in one run.
"""

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from distributed import Client

from autograder import course_dir, sandbox
from autograder.grade import grade
from autograder.notebooks import answer_cells, filled

sys.path.insert(0, str(course_dir.ROOT / "tests"))
import servers  # noqa: E402 - the tests' real servers: PostgreSQL and a Dask cluster
from conftest import instructor_course  # noqa: E402

from catalogue import mistakes  # noqa: E402

ASSIGNMENTS = ["01_self_attention", "02_qkv"]
RUNS = ("plain", "plain-immediate", "cold1", "bwrap1", "local1", "cold2", "bwrap2", "local2", "where", "dask2",
        "dask2-kill", "sqlite2", "postgres2")
#: where a submission's time goes: label -> the functions whose cumulative time it is (in-process, one worker)
PARTS = {"waiting for a started kernel": ["nbclient/client.py:setup_kernel"],
         "running the notebook's cells": ["autograder/execute.py:preprocess_cell"],
         "judging the evidence": ["autograder/judging.py:preprocess"],
         "feedback pages (nbgrader)": ["nbgrader/apps/api.py:generate_feedback"]}


def build_class(folder: Path, count: int) -> None:
    """count submissions, alternating assignments and solved / untouched / first catalogued mistake."""
    for i in range(count):
        assignment = ASSIGNMENTS[i % len(ASSIGNMENTS)]
        notebook = course_dir.notebooks(assignment)[0]
        release = nbformat.read(course_dir.ROOT / "release" / assignment / notebook, as_version=4)
        answers = answer_cells(nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4))
        kind = i // len(ASSIGNMENTS) % 3
        if kind == 1:
            answers = {}
        elif kind == 2:
            mistake = mistakes(assignment)[0]
            answers = {**answers, mistake.cell: mistake.code}
        target = folder / f"student-{i // len(ASSIGNMENTS):03d}" / assignment
        target.mkdir(parents=True, exist_ok=True)
        nbformat.write(filled(release, answers), target / notebook)


def plain_nbgrader(batch: Path, work: Path, shutdown: str = "graceful") -> float:
    """Seconds for nbgrader's own autograde + generate_feedback of the batch (assignments generated first), its
    kernels shut down as nbgrader's Execute does (graceful: a shutdown request, then waiting for the kernel to exit)
    or as the course's grading step does (immediate)."""
    shutil.copytree(course_dir.source_dir(), work / "source")
    shutil.copy(course_dir.ROOT / "nbgrader_config.py", work / "nbgrader_config.py")
    shutil.copytree(batch, work / "submitted")

    def nbgrader(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR",
                        f"--GradingExecute.shutdown_kernel={shutdown}"], cwd=work, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    for assignment in ASSIGNMENTS:
        nbgrader("generate_assignment", assignment, "--force")
    started = time.perf_counter()
    for assignment in ASSIGNMENTS:
        nbgrader("autograde", assignment)
        nbgrader("generate_feedback", assignment)
    return time.perf_counter() - started


def where(batch: Path, work: Path, n: int, use_sandbox: bool) -> None:
    """Grade the batch with one warm worker in this process under cProfile; print seconds per submission by part."""
    from autograder.grade import job  # noqa: PLC0415
    from autograder.submissions import find  # noqa: PLC0415
    from autograder.workspace import Options, Workspace  # noqa: PLC0415

    jobs = [job(s) for s in find(batch, ASSIGNMENTS, {a: course_dir.notebooks(a) for a in ASSIGNMENTS})]
    jobs.sort(key=lambda j: (j.assignment, j.student))
    workspace = Workspace(work, Options(tuple(ASSIGNMENTS), sandbox=use_sandbox, kernel_threads=os.cpu_count()))
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    try:
        for item in jobs:
            workspace.grade(item)
    finally:
        profile.disable()
        workspace.close()
    total = time.perf_counter() - started
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (calls, primitive, own, cumulative, callers)
    print(f"where a submission's time goes (1 warm worker in-process, {total / len(jobs):.2f} s per submission):")
    accounted = 0.0
    for label, names in PARTS.items():
        seconds = sum(row[3] for (file, _, name), row in stats.items()
                      if any(file.endswith(n.split(":")[0]) and name == n.split(":")[1] for n in names))
        accounted += seconds
        print(f"  {label:<40} {seconds / len(jobs):5.2f} s")
    print(f"  {'the rest (nbgrader, gradebook, files)':<40} {(total - accounted) / len(jobs):5.2f} s", flush=True)


def kill_a_busy_worker(cluster: servers.DaskCluster, done: threading.Event) -> None:
    """Wait until a worker is grading, then kill its process."""

    with Client(cluster.address, timeout=30) as client:
        while not done.is_set():
            busy = [w for w, tasks in client.processing().items() if tasks]
            if busy:
                pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, 9)
                print(f"  killed the worker at {busy[0]} (pid {pid}) while it graded", flush=True)
                return
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS)
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    use_sandbox = not args.no_sandbox and sandbox.available() is None
    n = args.submissions
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; sandbox: "
          f"{sandbox.describe() if use_sandbox else 'off'}; {n} submissions of {', '.join(ASSIGNMENTS)}")
    baseline: float | None = None

    def report(label: str, seconds: float) -> None:
        ratio = f"  {seconds / baseline:4.2f}x plain nbgrader" if baseline else ""
        print(f"{label:<45} {seconds:6.1f} s = {seconds / n:5.2f} s per submission, "
              f"{3600 * n / seconds:6.0f} per hour{ratio}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        batch = root / "class"
        build_class(batch, n)
        if "plain" in args.runs:
            baseline = plain_nbgrader(batch, root / "plain")
            report("plain nbgrader (1 process)", baseline)
        if "plain-immediate" in args.runs:
            report("plain nbgrader, immediate shutdown", plain_nbgrader(batch, root / "plain-now", "immediate"))

        def timed(label: str, **kwargs) -> None:
            out = root / f"out-{label}"
            started = time.perf_counter()
            rows = grade(batch, out, ASSIGNMENTS, sandbox=use_sandbox, progress=False, **kwargs)
            elapsed = time.perf_counter() - started
            assert sum(r.status == "graded" for r in rows) == n, [(r.student, r.status, r.message) for r in rows]
            report(label, elapsed)
            shutil.rmtree(out)

        for workers in (1, 2):
            if f"cold{workers}" in args.runs:
                timed(f"autograder, {workers} local worker(s), cold kernels", workers=workers, warm=False)
            if f"bwrap{workers}" in args.runs:
                timed(f"autograder, {workers} local worker(s), warm, bwrap", workers=workers, fork=False)
            if f"local{workers}" in args.runs:
                timed(f"autograder, {workers} local worker(s), warm, forked", workers=workers)
        if "where" in args.runs:
            where(batch, root / "where", n, use_sandbox)
        for run in ("dask2", "dask2-kill"):
            if run in args.runs:
                with servers.dask_cluster(root / run, workers=2) as cluster:
                    done = threading.Event()
                    killer = threading.Thread(target=kill_a_busy_worker, args=(cluster, done))
                    if run.endswith("kill"):
                        killer.start()
                    timed(f"autograder, 2 Dask workers{', one killed' if run.endswith('kill') else ''}",
                          scheduler=cluster.address)
                    done.set()
        if "sqlite2" in args.runs:
            course = instructor_course(root / "course-sqlite", f"sqlite:///{root / 'course-sqlite' / 'gradebook.db'}")
            timed("autograder, 2 workers, SQLite gradebook", workers=2, gradebook=course)
        if "postgres2" in args.runs:
            with servers.postgresql() as url:
                course = instructor_course(root / "course-postgres", url)
                timed("autograder, 2 workers, PostgreSQL gradebook", workers=2, gradebook=course)


if __name__ == "__main__":
    sys.exit(main())
