"""Seconds from Submit to feedback in the Assignment List, with ``python -m autograder serve``, beside a batch.

    .venv/bin/python benchmarks/serve_latency.py [--students 1 30] [--workers N] [--no-sandbox]

For each class size, in a course directory of its own with its own exchange: that many students of 01 submit at
once (complete, untouched and mistaken notebooks, as nbgrader submit leaves them in inbound/); the service, started
as the documented command, runs until every student's feedback page is in the exchange. Each student's wait is the
time from their folder's arrival to their page's appearance. The same submissions are then graded as one batch
(``python -m autograder grade submitted --gradebook``) for comparison. Prints "students | median | worst | batch".
Not a test: the times depend on the machine and what else runs on it.
"""

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder import course_dir
from autograder.collect import exchange_inbound
from autograder.exchange import SECRET, feedback_name

sys.path.insert(0, str(course_dir.ROOT / "tests"))
from conftest import complete_submission, instructor_course  # noqa: E402

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]


def _class(inbound: Path, students: int) -> dict[str, Path]:
    """Every student's submission, as nbgrader submit leaves it; returns the page each student's feedback becomes."""
    complete = complete_submission(A, NB)
    untouched = nbformat.read(course_dir.ROOT / "release" / A / NB, as_version=4)
    pages = {}
    for i in range(students):
        student = f"s{i:03d}"
        folder = inbound / f"{student}+{A}+2026-11-20 14:05:09.123456 UTC+{secrets.token_hex(4)}"
        folder.mkdir()
        nbformat.write(complete if i % 2 == 0 else untouched, folder / NB)
        secret = secrets.token_hex(64)
        (folder / SECRET).write_text(secret)
        (folder / "timestamp.txt").write_text("2026-11-20 14:05:09.123456 UTC")
        pages[student] = inbound.parent / "feedback" / feedback_name(secret, NB)
    return pages


def measure(students: int, workers: int, sandbox: bool) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as tmp:
        root = Path(tmp)
        course = instructor_course(root / "course", f"sqlite:///{root / 'course' / 'gradebook.db'}")
        inbound, _ = exchange_inbound(course.root)
        inbound.mkdir(parents=True)
        flags = ["--workers", str(workers), "--no-check-owner"] + ([] if sandbox else ["--no-sandbox"])
        service = subprocess.Popen([sys.executable, "-m", "autograder", "serve", "--out", str(root / "results"),
                                    "--assignment", A, "--course", str(course.root), "--poll", "0.5", *flags],
                                   cwd=course_dir.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(3)  # the service is up and has looked once at an empty exchange
            pages = _class(inbound, students)
            arrived = {s: os.lstat(next(inbound.glob(f"{s}+*"))).st_ctime for s in pages}
            seen: dict[str, float] = {}
            deadline = time.time() + 60 * 60
            while len(seen) < len(pages) and time.time() < deadline:
                for student, page in pages.items():
                    if student not in seen and page.is_file():
                        seen[student] = time.time()
                time.sleep(0.1)
        finally:
            service.terminate()
            service.wait(timeout=120)
        if len(seen) < len(pages):
            raise SystemExit(f"only {len(seen)} of {len(pages)} pages appeared within an hour: see "
                             f"{root / 'results' / 'serve.log'}")
        waits = [seen[s] - arrived[s] for s in pages]
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "autograder", "grade", str(course.root / "submitted"), "--assignment", A,
                        "--gradebook", "--course", str(course.root), "--out", str(root / "batch"), "--workers",
                        str(workers)] + ([] if sandbox else ["--no-sandbox"]), cwd=course_dir.ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return statistics.median(waits), max(waits), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, nargs="+", default=[1, 30])
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--no-sandbox", action="store_true")
    args = parser.parse_args()
    print(f"| students | submit to feedback, median | worst | the same as one batch (grade) |  ({os.cpu_count()} "
          f"cores, {args.workers} worker(s))\n|---|---|---|---|")
    for students in args.students:
        median, worst, batch = measure(students, args.workers, not args.no_sandbox)
        print(f"| {students} | {median:.1f} s | {worst:.1f} s | {batch:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
