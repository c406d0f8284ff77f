"""A grading worker that dies mid-batch costs only the submission it was grading (autograder/grade.py's pool).

Before: with 2 workers every unfinished row of the batch became `error` once a pool broke three times; with 1 worker
the batch ran in the main process, so a dead worker left no grades.csv, report or state, and a copy of every
student's notebook in /tmp. Here the test kills, with SIGKILL (what the kernel's out-of-memory killer sends), the
worker grading a submission that sleeps, and checks what the instructor is left with.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import complete_submission, use_sandbox, write_submission

from autograder import course_dir
from autograder.grade import RUN_LOCK, STATE_FILE, WORKER_DEATHS, _context, _scratch, grade

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]


def _sleeper():
    """A complete notebook whose first answer cell sleeps for five minutes first."""
    nb = complete_submission(A, NB)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    cell.source = "import time\ntime.sleep(300)\n" + cell.source
    return nb


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _forked_by_multiprocessing(pid: int) -> bool:
    """Whether pid is multiprocessing's fork server, which forks the grading workers (autograder/grade.py)."""
    try:
        return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _worker_grading(student: str) -> int | None:
    """The pid of the grading worker (this process's child, or its fork server's) under which a kernel runs in the
    student's folder."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if f"/autograded/{student}/" not in cwd + "/":
            continue
        chain = [int(proc.name)]
        while chain[-1] > 1:
            parent = _parent(chain[-1])
            if parent == os.getpid():
                return chain[-2] if _forked_by_multiprocessing(chain[-1]) and len(chain) > 1 else chain[-1]
            chain.append(parent)
    return None


def _gone(group: int, seconds: float = 30) -> None:
    """Wait until no process of the group is still running (a killed one has closed its files, its lock's too, even
    while it waits, a zombie, to be reaped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(pgrp) == group and state != "Z":
                alive.append(stat.parent.name)
        if not alive:
            return
        time.sleep(0.1)


@pytest.fixture
def private_tmp(monkeypatch):
    """A temporary folder of the test's own, for this process and the workers it spawns: what grading leaves there is
    what it leaves. Short, as /tmp is: a kernel's socket path must fit in 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="dw-", dir="/tmp"))
    multiprocessing.util.get_temp_dir()  # multiprocessing's own folder (its fork server listens there) stays outside
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_killed_mid_batch_costs_only_its_submission(tmp_path, private_tmp, workers):
    batch, out = tmp_path / "batch", tmp_path / "out"
    write_submission(batch, "ada", A, NB, complete_submission(A, NB))  # the row that must survive sam's worker
    write_submission(batch, "sam", A, NB, _sleeper())
    found: dict[str, object] = {}

    def run():
        try:
            found["rows"] = grade(batch, out, [A], workers=workers, sandbox=use_sandbox(), progress=False,
                                  warm=False)
        except BaseException as error:  # noqa: BLE001 - shown by the assertion below
            found["error"] = error

    grading = threading.Thread(target=run, daemon=True)
    grading.start()
    killed: list[int] = []
    for _ in range(WORKER_DEATHS):  # a worker that dies once may be the machine's doing: sam is graded again
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and grading.is_alive() and (
                (pid := _worker_grading("sam")) is None or pid in killed):
            time.sleep(0.2)
        assert pid is not None and pid not in killed, f"no new worker was seen grading sam after {killed}"
        os.kill(pid, signal.SIGKILL)  # its kernel runs in sam's folder: the worker dies grading sam
        killed.append(pid)
    grading.join(300)
    assert not grading.is_alive() and "error" not in found, found.get("error")
    rows = {row.student: row for row in found["rows"]}
    assert rows["ada"].status == "graded" and rows["ada"].score == rows["ada"].max_score, rows
    assert rows["sam"].status == "error" and "died each of the 2 times" in rows["sam"].message, rows["sam"]
    assert "SIGKILL" in (out / "logs" / "sam" / f"{A}.log").read_text()
    state = json.loads((out / STATE_FILE).read_text())
    assert sorted(state) == [f"{s}/{A}" for s in ("ada", "sam")]
    assert len((out / "grades.csv").read_text().splitlines()) == 1 + 2, "a header and a row per student"
    assert not list(private_tmp.glob("autograder-*")), "the batch's scratch copy was left behind"


def test_scratch_a_dead_run_left_is_removed_and_a_running_ones_is_not(private_tmp):
    dead, running = private_tmp / "autograder-dead", private_tmp / "autograder-running"
    for folder in (dead, running):
        folder.mkdir()
        (folder / RUN_LOCK).touch()
        (folder / "ada.ipynb").write_text("a student's notebook")
    other = private_tmp / "autograder-not-ours"
    other.mkdir()
    with (running / RUN_LOCK).open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with _scratch() as mine:  # what a grading run does first
            assert mine.is_dir() and (mine / RUN_LOCK).is_file()
        assert not mine.exists(), "a run's own scratch folder stays after it"
    assert not dead.exists(), "a dead run's copy of the students' notebooks stays in /tmp"
    assert (running / "ada.ipynb").is_file() and other.is_dir()


def test_a_killed_run_keeps_the_rows_it_graded_and_the_rerun_grades_only_the_rest(tmp_path, private_tmp, capsys):
    batch, out = tmp_path / "batch", tmp_path / "out"
    write_submission(batch, "ada", A, NB, complete_submission(A, NB))
    write_submission(batch, "sam", A, NB, _sleeper())
    run = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; from autograder.grade import "
                            f"grade; grade(Path(sys.argv[1]), Path(sys.argv[2]), [{A!r}], progress=False)",
                            str(batch), str(out)], env={**os.environ, "TMPDIR": str(private_tmp)},
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:  # until ada's row is kept and sam's is graded
            state = json.loads((out / STATE_FILE).read_text()) if (out / STATE_FILE).exists() else {}
            if f"ada/{A}" in state:
                break
            time.sleep(0.2)
        assert run.poll() is None, "the run ended before it could be killed"
    finally:  # the run and its worker, as a killed command goes: a worker still alive would hold the scratch's lock
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        _gone(run.pid)
    state = json.loads((out / STATE_FILE).read_text())
    assert set(state) == {f"ada/{A}"} and state[f"ada/{A}"]["grade"]["status"] == "graded"
    assert list(private_tmp.glob("autograder-*")), "the killed run left no scratch copy (nothing to test)"
    # the rerun reuses ada's row, grades sam's (a short notebook budget stops its sleep) and removes the copy
    rows = {row.student: row for row in grade(batch, out, [A], progress=True, notebook_seconds=5,
                                              sandbox=use_sandbox())}
    said = capsys.readouterr().err
    assert "graded 1 submission(s)" in said and "reused 1 unchanged" in said, said[-500:]
    assert rows["ada"].score == rows["ada"].max_score and rows["sam"].score < rows["sam"].max_score, rows
    assert not list(private_tmp.glob("autograder-*")), "the killed run's copy of the batch is still there"


def test_workers_come_from_the_fork_server_until_the_grading_code_changes_on_disk(monkeypatch):
    """A worker forked from multiprocessing's fork server runs the code the server imported; once the code on disk is
    no longer what the grader imported (a long-running `serve` after an update), workers are spawned, each importing
    the code as it is now, so that no worker judges with older judges than its kernels probe with."""
    assert _context().get_start_method() == "forkserver"
    monkeypatch.setattr("autograder.grade._IMPORTED_CODE", "the code as it was before an update")
    assert _context().get_start_method() == "spawn"
