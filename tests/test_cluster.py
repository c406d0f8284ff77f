"""`grade --scheduler`: a real local Dask cluster (a scheduler and worker processes) grades exactly as local worker
processes do, and a worker killed in the middle of the batch costs nothing but time — on the cluster and among
local worker processes alike."""

import os
import threading
import time

import psutil
import servers
from conftest import SMALL_CLASS, use_sandbox
from distributed import Client

from autograder.grade import grade


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
        for worker in psutil.Process().children():  # the pool's workers; a kernel below one means it is grading
            if "multiprocessing" in " ".join(worker.cmdline()) and worker.children(recursive=True):
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
