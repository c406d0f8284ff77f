"""Benchmark: seconds per submission and submissions per hour, sequential and with worker processes.

    .venv/bin/python benchmarks/grading.py [--submissions 12] [--workers 1 2] [--no-sandbox]

Builds a class of solved, untouched and mistaken submissions of assignments 01 and 02 (a few seconds each to
grade), grades it once per worker count into a fresh output folder, and prints the figures. Not a test:
timings depend on the machine and on what else runs on it.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder import course_dir, sandbox
from autograder.catalogue import mistakes
from autograder.grade import grade
from autograder.notebooks import answer_cells, filled

ASSIGNMENTS = ["01_self_attention", "02_qkv"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    use_sandbox = not args.no_sandbox and sandbox.available() is None
    print(f"machine: {os.cpu_count()} cores; sandbox: {sandbox.describe() if use_sandbox else 'off'}; "
          f"{args.submissions} submissions of {', '.join(ASSIGNMENTS)}")
    with tempfile.TemporaryDirectory() as tmp:
        batch = Path(tmp) / "class"
        build_class(batch, args.submissions)
        for workers in args.workers:
            out = Path(tmp) / f"out-{workers}"
            started = time.perf_counter()
            rows = grade(batch, out, ASSIGNMENTS, workers=workers, sandbox=use_sandbox, progress=False)
            elapsed = time.perf_counter() - started
            graded = sum(r.status == "graded" for r in rows)
            print(f"workers={workers}: {elapsed:6.1f} s for {args.submissions} submissions ({graded} graded rows of "
                  f"{len(rows)}) = {elapsed / args.submissions:5.2f} s per submission, "
                  f"{3600 * args.submissions / elapsed:6.0f} submissions per hour", flush=True)
            shutil.rmtree(out)


if __name__ == "__main__":
    sys.exit(main())
