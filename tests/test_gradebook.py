"""An instructor's small class (conftest's small_class), graded once into a gradebook and then graded again on a
cluster and with a worker killed, each compared with that first grading.

`grade --gradebook`: results land in the instructor's own nbgrader gradebook and course folders, as
`nbgrader autograde` leaves them, so nbgrader's own tools see them — on SQLite, and on a real PostgreSQL server
with several workers writing at once.

`grade --scheduler`: a real local Dask cluster (a scheduler and worker processes) grades exactly as local worker
processes do, and a worker killed in the middle of the batch costs nothing but time — on the cluster and among
local worker processes alike.

(One module, so that pytest-xdist grades the small class once: it runs a module's tests on one worker.)"""

import csv
import os
import subprocess
import sys
import threading
import time

import nbformat
import psutil
import pytest
import servers
from conftest import SMALL_CLASS, complete_submission, instructor_course, use_sandbox
from distributed import Client
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

from autograder import GradingError, course_dir
from autograder.grade import grade

NOTEBOOK = course_dir.notebooks(SMALL_CLASS)[0]


def nbgrader(course, *args: str) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course directory, as an instructor would (environment not activated)."""
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course.root, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
    return done


def exported(course) -> dict[str, float]:
    """student -> score, from `nbgrader export` of the course's gradebook."""
    nbgrader(course, "export", "--to", "export.csv")
    with (course.root / "export.csv").open() as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f) if row["assignment"] == SMALL_CLASS}


def test_nbgrader_export_gives_the_scores_of_grades_csv(small_class):
    _, rows, course, _ = small_class
    assert exported(course) == {student: row.score for student, row in rows.items()}
    assert rows["ada"].score == 8 and rows["bob"].score == 0 and 0 < rows["cy"].score < 8


def test_submissions_timestamps_and_autograded_notebooks_are_where_nbgrader_keeps_them(small_class):
    _, rows, course, _ = small_class
    with Gradebook(course.db_url) as gradebook:
        submission = gradebook.find_submission(SMALL_CLASS, "ada")
        assert submission.timestamp.strftime("%Y-%m-%d %H:%M:%S") == "2026-11-20 14:05:09"
        assert {s.id for s in gradebook.students} == set(rows)
    for student in rows:
        graded = nbformat.read(course.root / "autograded" / student / SMALL_CLASS / NOTEBOOK, as_version=4)
        assert any(cell.get("metadata", {}).get("judge") for cell in graded.cells), student
        assert (course.root / "submitted" / student / SMALL_CLASS / NOTEBOOK).is_file()


def test_formgrader_lists_every_submission_for_manual_review(small_class):
    """The API behind Formgrader's tables sees the autograded submissions and their scores."""
    _, rows, course, _ = small_class
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course.root)).load_config()
    config.CourseDirectory.root = str(course.root)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    listed = {s["student"]: s for s in api.get_submissions(SMALL_CLASS)}
    assert set(listed) == set(rows)
    for student, row in rows.items():
        assert listed[student]["autograded"], student
        assert listed[student]["score"] == row.score
    notebooks = api.get_notebook_submissions(SMALL_CLASS, NOTEBOOK.removesuffix(".ipynb"))
    assert {n["student"] for n in notebooks} == set(rows)


def test_nbgrader_generates_and_releases_feedback_from_them(small_class):
    """Feedback goes back through the exchange for every submission: ada's carries the secret nbgrader's submit
    made, the others one the grader made; nbgrader's own generate_feedback hides the hidden tests as the grader
    does."""
    _, rows, course, _ = small_class
    nbgrader(course, "generate_feedback", SMALL_CLASS, "--force")
    page = (course.root / "feedback" / "cy" / SMALL_CLASS / NOTEBOOK.replace(".ipynb", ".html")).read_text()
    assert "BEGIN HIDDEN TESTS" not in page and "check.attention_weights_oracle" not in page
    assert "the softmax is missing" in page or "not what was asked" in page
    nbgrader(course, "release_feedback", SMALL_CLASS)  # ada came through the exchange; the others from a folder
    released = list((course.root / "exchange").rglob("*.html"))
    assert len(released) == len(rows), released


def test_regrading_replaces_stale_scores_and_never_duplicates_students(small_class, tmp_path):
    batch, rows, course, _ = small_class
    fixed = tmp_path / "batch"
    (fixed / "bob" / SMALL_CLASS).mkdir(parents=True)
    nbformat.write(complete_submission(SMALL_CLASS, NOTEBOOK), fixed / "bob" / SMALL_CLASS / NOTEBOOK)
    (fixed / "Ada" / SMALL_CLASS).mkdir(parents=True)  # the same student, written otherwise, is not a new one
    (fixed / "Ada" / SMALL_CLASS / NOTEBOOK).write_bytes((batch / "ada" / SMALL_CLASS / NOTEBOOK).read_bytes())
    again = grade(fixed, tmp_path / "out", [SMALL_CLASS], sandbox=use_sandbox(), progress=False, gradebook=course)
    assert {r.student: r.score for r in again if r.student in ("Ada", "bob")} == {"Ada": 8, "bob": 8}
    held = {r.student: r for r in again if r.student not in ("Ada", "bob")}  # graded into another folder
    assert {s: (r.score, r.status) for s, r in held.items()} == {s: (rows[s].score, rows[s].status) for s in held}
    assert set(held) == set(rows) - {"bob"} and all("from the gradebook" in r.message for r in held.values())
    scores = exported(course)
    assert scores["bob"] == 8, "the stale score of the untouched release was kept"
    with Gradebook(course.db_url) as gradebook:
        assert sorted(s.id for s in gradebook.students) == sorted({*rows, "Ada"})
        assert len(gradebook.find_assignment(SMALL_CLASS).submissions) == len(rows) + 1


def test_postgresql_with_several_workers_gives_the_grades_sqlite_gives(small_class, tmp_path):
    """The same class graded again, three workers writing one PostgreSQL gradebook at once: identical rows (the
    grading is deterministic), nothing lost, nobody twice."""
    batch, rows, _, _ = small_class
    with servers.postgresql() as url:
        course = instructor_course(tmp_path / "course", url)
        graded = grade(batch, tmp_path / "out", [SMALL_CLASS], workers=3, sandbox=use_sandbox(), progress=False,
                       gradebook=course)
        assert {r.student: (r.score, r.status, r.cells, r.mistakes, r.message) for r in graded} == \
               {s: (r.score, r.status, r.cells, r.mistakes, r.message) for s, r in rows.items()}
        assert exported(course) == {student: row.score for student, row in rows.items()}
        with Gradebook(url) as gradebook:
            assert len(gradebook.students) == len(rows)
            assert all(len(gradebook.find_submission(SMALL_CLASS, s).notebooks) == 1 for s in rows)


def test_a_cluster_cannot_share_a_sqlite_file(small_class, tmp_path):
    batch, _, course, _ = small_class
    with pytest.raises(GradingError, match="database server"):
        grade(batch, tmp_path / "out", [SMALL_CLASS], progress=False, gradebook=course, scheduler="tcp://127.0.0.1:1")


# ------------------------------------------------------------------------------------------- on a Dask cluster


def _busy_worker(address: str) -> str | None:
    """The address of a worker that is running a task right now, if any."""
    with Client(address, timeout=30) as client:
        return next((worker for worker, tasks in client.processing().items() if tasks), None)


def test_a_dask_cluster_grades_as_local_workers_even_when_a_worker_dies(small_class, tmp_path):
    batch, local, _, _ = small_class
    with servers.dask_cluster(tmp_path / "dask", workers=2) as cluster:
        results: dict = {}
        grading = threading.Thread(target=lambda: results.setdefault("rows", grade(
            batch, tmp_path / "out", [SMALL_CLASS], sandbox=use_sandbox(), progress=False,
            scheduler=cluster.address)))
        grading.start()
        deadline, victim = time.monotonic() + 120, None
        while victim is None and time.monotonic() < deadline and grading.is_alive():
            victim = _busy_worker(cluster.address)
            time.sleep(0.2)
        assert victim is not None, "no worker ever ran a task"
        port = victim.rsplit(":", 1)[1]
        killed = [w for w in cluster.workers if _listens_on(w.pid, port)]
        assert len(killed) == 1, f"cannot tell which process is the worker at {victim}"
        killed[0].kill()
        grading.join(600)
        assert not grading.is_alive(), "grading did not finish after a worker died"
    rows = results["rows"]
    assert sorted(r.student for r in rows) == sorted(local), "a submission was lost or graded twice"
    for row in rows:
        first = local[row.student]
        assert (row.score, row.status, row.cells, row.mistakes) == \
               (first.score, first.status, first.cells, first.mistakes), row.student
        assert row.message == first.message, row.student


def _listens_on(pid: int, port: str) -> bool:
    """True when the process has a listening TCP socket on this port (read from /proc, no tools needed)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == int(port) and fields[9] in inodes:
                return True
    return False


def test_a_local_worker_process_killed_mid_batch_costs_nothing_but_time(small_class, tmp_path):
    """Local worker processes too: when one dies (killed, out of memory), its unfinished jobs go to a new pool."""
    batch, local, _, _ = small_class
    results: dict = {}
    grading = threading.Thread(target=lambda: results.setdefault("rows", grade(
        batch, tmp_path / "out", [SMALL_CLASS], workers=2, sandbox=use_sandbox(), progress=False)))
    grading.start()
    deadline, killed = time.monotonic() + 180, None
    while killed is None and time.monotonic() < deadline and grading.is_alive():
        # the pool's workers (forked by multiprocessing's fork server); a kernel below one means it is grading
        forkers = [p for p in psutil.Process().children() if "multiprocessing.forkserver" in " ".join(p.cmdline())]
        for worker in [w for server in forkers for w in server.children()]:
            if worker.children(recursive=True):
                worker.kill()
                killed = worker.pid
                break
        time.sleep(0.2)
    grading.join(600)
    assert killed is not None, "no worker process was ever seen grading"
    rows = results["rows"]
    assert sorted(r.student for r in rows) == sorted(local), "a submission was lost or graded twice"
    for row in rows:
        assert (row.score, row.status, row.cells) == (local[row.student].score, local[row.student].status,
                                                      local[row.student].cells), row.student
