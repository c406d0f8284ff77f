"""The instructor's path, step by step, with the documented commands: what worked and how long it took.

    .venv/bin/python benchmarks/instructor_path.py [--students 8] [--no-sandbox]

In a course directory of its own (the course's nbgrader_config.py and source/, a SQLite gradebook, an exchange),
as docs/instructors.md's "A class step by step" describes: import a roster, set a due date and a late policy ("zero"),
grade a class of 01 (solved, untouched and mistaken notebooks, handed in on time through the exchange and
collected with `python -m autograder collect`), grade late work from an LMS
zip into the same results, change a score through Formgrader's own HTTP API in a running JupyterLab, refresh
grades.csv, export for Canvas, and release feedback through nbgrader's exchange. Each step checks its outcome
(e.g. the late student scores 0 in grades.csv, `nbgrader export` and the Canvas file alike) and prints
"step | worked | time". Not a test: the times depend on the machine.
"""

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from autograder import course_dir, sandbox
from autograder.notebooks import answer_cells, filled

sys.path.insert(0, str(course_dir.ROOT / "tests"))
import servers  # noqa: E402 - the tests' real JupyterLab
from conftest import instructor_course  # noqa: E402

from catalogue import mistakes  # noqa: E402

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
#: due tomorrow: the class hands in through the exchange now, on time; the LMS's late attempts are 33.5 h after it
DUE_AT = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
DUE = DUE_AT.strftime("%Y-%m-%d %H:%M:%S UTC")


def _notebook(kind: int) -> nbformat.NotebookNode:
    release = nbformat.read(course_dir.ROOT / "release" / A / NB, as_version=4)
    answers = answer_cells(nbformat.read(course_dir.source_dir() / A / NB, as_version=4))
    if kind == 1:
        answers = {}
    elif kind == 2:
        variant = mistakes(A)[0]
        answers = {**answers, variant.cell: variant.code}
    return filled(release, answers)


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def _grades(out: Path) -> dict[str, dict]:
    """student -> their row of A in out/grades.csv."""
    with (out / "grades.csv").open() as f:
        return {row["student"]: row for row in csv.DictReader(f) if row["assignment"] == A}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--no-sandbox", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR", help="work in DIR (new) and keep it")
    args = parser.parse_args()
    python = sys.executable
    grader = [python, "-m", "autograder"]
    safety = ["--no-sandbox"] if args.no_sandbox or sandbox.available() else []
    steps: list[tuple[str, bool, float, str]] = []

    def step(name: str, action: Callable[[], str]) -> None:
        started = time.perf_counter()
        try:
            detail, worked = action(), True
        except Exception as error:  # noqa: BLE001 - a failed step is reported, and the path goes on
            detail, worked = f"{type(error).__name__}: {str(error)[:300]}", False
        steps.append((name, worked, time.perf_counter() - started, detail))
        print(f"{name}: {'worked' if worked else 'FAILED'} in {steps[-1][2]:.1f} s — {detail}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        course = instructor_course(root / "course", f"sqlite:///{root / 'course' / 'gradebook.db'}")
        with (course.root / "nbgrader_config.py").open("a") as f:
            f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
        on_time = [f"student-{i:02d}" for i in range(args.students)]
        late = ["late01", "late02"]  # an LMS file name's student id has no '-' or '_'
        roster = "id,first_name,last_name,email\n" + "".join(
            f"{s},First{i},Last{i},{s}@uni.test\n" for i, s in enumerate([*on_time, *late]))
        (course.root / "roster.csv").write_text(roster)
        out = root / "results"
        inbound = course.root / "exchange" / "transformers-from-scratch" / "inbound"
        for i, student in enumerate(on_time):  # as nbgrader submit leaves it, its timestamp.txt the student's own
            handed = inbound / f"{student}+{A}+2026-11-20 18:00:00.000000 UTC+r{i}"
            handed.mkdir(parents=True)
            nbformat.write(_notebook(i % 3), handed / NB)
            (handed / "timestamp.txt").write_text("2026-11-20 18:00:00.000000 UTC")
        batch = course.root / "submitted"
        late_at = (DUE_AT + timedelta(hours=33.5)).strftime("%Y-%m-%d-%H-%M-%S")
        lms_zip = root / "late.zip"
        with zipfile.ZipFile(lms_zip, "w") as z:
            for student in late:
                z.writestr(f"{A}_{student}_attempt_{late_at}_{NB}",
                           nbformat.writes(_notebook(0)))

        def roster_and_policy() -> str:
            _run([python, "-m", "nbgrader", "db", "student", "import", "roster.csv"], course.root)
            _run([python, "-m", "nbgrader", "db", "assignment", "add", A, f"--duedate={DUE}"], course.root)
            with Gradebook(course.db_url) as gradebook:
                assert len(gradebook.students) == len(on_time) + len(late)
            return f"{len(on_time) + len(late)} students imported, due {DUE}, penalty 'zero'"
        step("import the roster, set a due date and a late policy", roster_and_policy)

        def collect() -> str:
            # every exchange folder here is root's: on a hub each would be its student's, and collect checks that
            _run([*grader, "collect", A, "--course", str(course.root), "--no-check-owner"], course_dir.ROOT)
            collected = sorted(p.parent.parent.name for p in batch.glob(f"*/{A}/handin.json"))
            assert collected == sorted(on_time), collected
            return f"{len(collected)} submissions collected from the exchange, each with the time it was handed in"
        step("collect from the exchange (python -m autograder collect)", collect)

        def grade_class() -> str:
            _run([*grader, "grade", str(batch), "--assignment", A, "--out", str(out), "--gradebook", "--course",
                  str(course.root), "--workers", "2", *safety], course_dir.ROOT)
            rows = _grades(out)
            assert all(rows[s]["status"] == "graded" and not rows[s]["late"] for s in on_time), rows
            assert {rows[s]["status"] for s in late} == {"missing"}, "the roster's students with no submission"
            return f"{len(on_time)} graded; mean {sum(float(rows[s]['score']) for s in on_time) / len(on_time):.2f}"
        step("grade a class (--gradebook)", grade_class)

        def late_work() -> str:
            before = _grades(out)
            _run([*grader, "grade", str(lms_zip), "--assignment", A, "--out", str(out), "--gradebook", "--course",
                  str(course.root), "--workers", "2", *safety], course_dir.ROOT)
            rows = _grades(out)
            assert all(rows[s] == before[s] for s in on_time), "an on-time row changed"
            assert all(rows[s]["score"] == "0" and rows[s]["late"].startswith("33.5 h late") for s in late), rows
            return f"2 late submissions graded 8/8, recorded as {rows[late[0]]['late']!r}: score 0; others unchanged"
        step("add late work from an LMS zip", late_work)

        def formgrader() -> str:
            with Gradebook(course.db_url) as gradebook:
                grade = next(g for nb in gradebook.find_submission(A, on_time[0]).notebooks for g in nb.grades
                             if g.max_score >= 1)
                grade_id, target = grade.id, grade.max_score - 0.5
            with servers.jupyter_lab(course.root, root / "lab") as lab:
                request = urllib.request.Request(f"{lab.url}/formgrader/api/grade/{grade_id}", method="PUT",
                                                 data=json.dumps({"manual_score": target}).encode(),
                                                 headers={"Authorization": f"token {lab.token}"})
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert json.load(answer)["manual_score"] == target
            _run([*grader, "refresh", str(out), "--course", str(course.root)], course_dir.ROOT)
            rows = _grades(out)
            assert rows[on_time[0]]["score"] == "7.5", rows[on_time[0]]
            return f"{on_time[0]}: 8 -> 7.5 through Formgrader's API; grades.csv refreshed from the gradebook"
        step("adjust a score in Formgrader, refresh grades.csv", formgrader)

        def canvas() -> str:
            target = root / "canvas.csv"
            _run([*grader, "export", "canvas", "--out", str(target), "--course", str(course.root)], course_dir.ROOT)
            _run([python, "-m", "nbgrader", "export", "--to", str(root / "nbgrader.csv")], course.root)
            with target.open() as f:
                rows = list(csv.reader(f))
            scores = {r[3]: float(r[5]) for r in rows[2:]}
            with (root / "nbgrader.csv").open() as f:
                theirs = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
            ours = {s: float(r["score"]) for s, r in _grades(out).items()}
            assert scores == theirs == ours, (scores, theirs, ours)
            return f"{len(scores)} students; Canvas = nbgrader export = grades.csv"
        step("export to Canvas", canvas)

        def release() -> str:
            _run([python, "-m", "nbgrader", "release_feedback", A], course.root)
            pages = list((course.root / "exchange").rglob("feedback/*.html"))
            assert len(pages) == len(on_time) + len(late), pages
            return f"{len(pages)} feedback pages in the exchange"
        step("release feedback (nbgrader release_feedback)", release)

    print("\n| step | worked | time |\n|---|---|---|")
    for name, worked, seconds, _ in steps:
        print(f"| {name} | {'yes' if worked else 'no'} | {seconds:.0f} s |")
    sys.exit(0 if all(worked for _, worked, _, _ in steps) else 1)


if __name__ == "__main__":
    main()
