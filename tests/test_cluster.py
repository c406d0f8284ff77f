"""`grade --scheduler`: a real local Dask cluster (a scheduler and worker processes) grades exactly as local worker
processes do, and a worker killed in the middle of the batch costs nothing but time."""

import threading
import time

import servers
from conftest import SMALL_CLASS, use_sandbox

from autograder.grade import grade


def _busy_worker(address: str) -> str | None:
    """The address of a worker that is running a task right now, if any."""
    from distributed import Client

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
    import os

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
