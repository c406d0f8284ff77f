"""Benchmark: the course's grader against plain nbgrader on the same batch, in the same run.

    .venv/bin/python benchmarks/grading.py [--submissions 12] [--workers 1 2] [--no-sandbox]

Builds a class of solved, untouched and mistaken submissions of assignments 01 and 02, then times
1. plain nbgrader: `nbgrader autograde` + `nbgrader generate_feedback` for each assignment, in a copy of the
   course directory (its nbgrader_config.py included, so the judge step runs there too; no sandbox, one
   process) — the baseline;
2. `python -m autograder grade` (restores, flags, sandbox, judges, feedback, report) once per worker count.
Prints seconds per submission, submissions per hour and each run's time as a ratio to the baseline. Not a test:
timings depend on the machine and on what else runs on it, so compare ratios taken in one run.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder import course_dir, sandbox
from autograder.grade import grade
from autograder.notebooks import answer_cells, filled

ASSIGNMENTS = ["01_self_attention", "02_qkv"]


def _mistakes(assignment: str) -> list:
    sys.path.insert(0, str(course_dir.ROOT / "tests"))
    from catalogue import mistakes

    return mistakes(assignment)


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
            mistake = _mistakes(assignment)[0]
            answers = {**answers, mistake.cell: mistake.code}
        target = folder / f"student-{i // len(ASSIGNMENTS):03d}" / assignment
        target.mkdir(parents=True, exist_ok=True)
        nbformat.write(filled(release, answers), target / notebook)


def plain_nbgrader(batch: Path, work: Path) -> float:
    """Seconds for nbgrader's own autograde + generate_feedback of the batch (assignments generated first)."""
    shutil.copytree(course_dir.source_dir(), work / "source")
    shutil.copy(course_dir.ROOT / "nbgrader_config.py", work / "nbgrader_config.py")
    shutil.copytree(batch, work / "submitted")
    scripts = os.path.dirname(os.path.abspath(sys.executable))
    env = {**os.environ, "PATH": scripts + os.pathsep + os.environ.get("PATH", "")}

    def nbgrader(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=ERROR"], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL)

    for assignment in ASSIGNMENTS:
        nbgrader("generate_assignment", assignment, "--force")
    started = time.perf_counter()
    for assignment in ASSIGNMENTS:
        nbgrader("autograde", assignment)
        nbgrader("generate_feedback", assignment)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    use_sandbox = not args.no_sandbox and sandbox.available() is None
    n = args.submissions
    print(f"machine: {os.cpu_count()} cores; sandbox: {sandbox.describe() if use_sandbox else 'off'}; "
          f"{n} submissions of {', '.join(ASSIGNMENTS)}")

    def report(label: str, seconds: float, baseline: float | None) -> None:
        ratio = f"  {seconds / baseline:4.2f}x plain nbgrader" if baseline else ""
        print(f"{label:<34} {seconds:6.1f} s = {seconds / n:5.2f} s per submission, "
              f"{3600 * n / seconds:6.0f} per hour{ratio}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "class"
        build_class(batch, n)
        baseline = plain_nbgrader(batch, Path(tmp) / "plain")
        report("plain nbgrader (1 process)", baseline, None)
        for workers in args.workers:
            out = Path(tmp) / f"out-{workers}"
            started = time.perf_counter()
            rows = grade(batch, out, ASSIGNMENTS, workers=workers, sandbox=use_sandbox, progress=False)
            elapsed = time.perf_counter() - started
            assert sum(r.status == "graded" for r in rows) == n, [(r.student, r.status, r.message) for r in rows]
            report(f"python -m autograder, {workers} worker(s)", elapsed, baseline)
            shutil.rmtree(out)


if __name__ == "__main__":
    sys.exit(main())
