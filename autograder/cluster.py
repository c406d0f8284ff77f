"""Grading on a Dask cluster: every submission is a task, graded on whichever worker runs it.

Each node needs the course checked out (the same commit) and ``setup.sh`` run; a worker refuses jobs of a batch
started with another version of the course. Every worker thread keeps one :class:`~autograder.workspace.Workspace`
(a private nbgrader course directory, with the sandbox when asked) for all the jobs it runs. A task carries the
submission's files and returns its row, feedback and autograded notebooks as bytes, so nodes need no shared
folder; with a gradebook, nodes write it themselves, so it must be a database server they all reach.

When a worker dies mid-batch, Dask runs its tasks again on another worker: grading a job twice writes the same
files and, in a gradebook, updates the same rows (nbgrader's autograde replaces a student's earlier results). A
submission that kills every worker it lands on is given up after Dask's allowed-failures and becomes its own error
row; the others are graded.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from autograder.workspace import Job, Options, Result, Workspace, failure

_local = threading.local()


def grade_on_node(item: Job, options: Options) -> Result:
    """The task a worker runs: grade one job in this thread's workspace (made on first use)."""
    workspaces = getattr(_local, "workspaces", None)
    if workspaces is None:
        workspaces = _local.workspaces = {}
    if options not in workspaces:
        workspaces[options] = Workspace(Path(tempfile.mkdtemp(prefix="autograder-node-")), options)
    return workspaces[options].grade(item)


def on_cluster(jobs: list[Job], options: Options, scheduler: str) -> Iterator[tuple[Job, Result | None, str]]:
    """(job, result, error) for every job, as the cluster's workers finish them."""
    from distributed import Client, as_completed  # noqa: PLC0415 - only the main process needs a client

    with Client(scheduler, timeout=30) as client:
        futures = {}
        for index, item in enumerate(jobs):
            future = client.submit(grade_on_node, item, options, key=f"grade-{index}-{item.student}-{item.assignment}",
                                   pure=False)
            futures[future] = item
        for future in as_completed(futures):
            try:
                yield futures[future], future.result(), ""
            except Exception as error:  # noqa: BLE001 - one failed task is one error row, not a stopped batch
                yield futures[future], None, _plain(error)


def _plain(error: Exception) -> str:
    """The log of a failed task; a task that took down every worker it ran on (Dask gives up on it after
    distributed.scheduler.allowed-failures deaths, 3 by default, and raises KilledWorker for it alone) said so in
    plain words on its last line, the row's message."""
    log = failure(error)
    if type(error).__name__ == "KilledWorker":
        log += ("\nthe grading worker died each time it graded this submission (Dask retried it on other workers, "
                "then gave up); the machine may have run out of memory")
    return log
