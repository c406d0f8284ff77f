"""Warm kernels: each grading process keeps the next kernel started while the current submission runs.

A cold kernel costs every submission the start of Python, ipykernel and (in the sandbox) ``import torch``: about
2 s of a 01 submission's 6 on the 2-core machine. :class:`KernelPool` starts the next kernel as soon as one is handed
out, so that start overlaps the current notebook's execution; the next submission finds its kernel ready.

What a warm kernel is, and is not:

- started for one submission and shut down after it, exactly like a cold one: no kernel ever runs two students' code
  (nor two runs of one notebook: a rerun after a kernel death takes a new kernel);
- started with the same command, sandbox, limits and environment as a cold one; only the grading seed, which is not
  known before the submission, is given afterwards (:data:`SEED_CODE`, run silently: no output, no history, no
  execution count), and it is given the same way to a cold kernel;
- started in a folder of its own (its *slot*, ``<folders>/<n>/<assignment>``), empty and never used before; the
  submission's files are moved in when it is handed out and moved back to nbgrader's folder after it is gone. In the
  sandbox the slot is bound at the same path as a cold kernel's folder (``autograder.sandbox.INSIDE``), so nothing
  the student's code can observe tells the two apart;
- checked before it is handed out: a kernel that died while it waited is discarded and another started (one that
  hangs on start is replaced by a cold one, autograder/execute.py).

Where the grader is root and grades in the sandbox, a warm kernel is forked from this thread's fork server
(:func:`fork_server`, autograder/forkserver.py) rather than started by bwrap: the server has imported torch and
ipykernel once, so a kernel costs 0.2 s of CPU instead of 1.6, which a worker grading on a busy machine needs more
than the overlap. The server is started with the first warm kernel, restarted if it died, and stopped with the
workspace.

At most :data:`WAITING` kernels wait per grading thread (one per assignment and workspace, the least recently used
goes first); they are shut down when their workspace is closed or the process exits (and in the sandbox, bwrap's
--die-with-parent kills them with it).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync

from autograder import forkserver, sandbox
from autograder.sandbox import chown_tree

#: kernels waiting per grading process at most
WAITING = 2
#: fork servers a grading thread restarts after they died, before it starts its kernels with bwrap instead
SERVER_RESTARTS = 3
#: KernelPool.upcoming when the grader cannot tell what comes next: a kernel like the current one is started
UNKNOWN = "?"
#: what a kernel runs, silently, before the notebook: the submission's grading seed (course/checks/seeds.py)
SEED_CODE = "__import__('os').environ[{name!r}] = {value!r}"


@dataclass
class Warm:
    """A started kernel and the folder it runs in."""

    km: AsyncKernelManager
    slot: Path


class KernelPool:
    """Started kernels waiting to be handed out, by key (what the kernel was started with)."""

    def __init__(self) -> None:
        self._waiting: OrderedDict[tuple, Warm] = OrderedDict()
        self._numbers = itertools.count()
        # how the kernels handed out came (waiting, started on the spot, or started to replace a waiting one that
        # never answered): for tests and benchmarks
        self.handed = {"waiting": 0, "started": 0, "replaced": 0}
        # the assignment of the submission this thread grades next (None: nothing follows, so nothing is started
        # ahead), set by the workspace before each submission
        self.upcoming: str | None = UNKNOWN
        atexit.register(self.close)

    def slot(self, folders: Path, assignment: str) -> Path:
        """A fresh, empty folder for one kernel: folders/<n>/<assignment> (the sandbox reads the assignment from
        its name)."""
        while True:
            parent = folders / f"{os.getpid()}-{next(self._numbers)}"
            if not parent.exists():
                break
        slot = parent / assignment
        slot.mkdir(parents=True)
        return slot

    def take(self, key: tuple, start: Callable[[], Warm]) -> tuple[Warm, bool]:
        """(a started kernel, whether it was waiting): the waiting one for key if it is still alive, else one started
        now."""
        warm = self._waiting.pop(key, None)
        if warm is not None:
            if _alive(warm.km):
                self.handed["waiting"] += 1
                return warm, True
            discard(warm)
        self.handed["started"] += 1
        return start(), False

    def prepare(self, key: tuple, start: Callable[[], Warm]) -> None:
        """Start the kernel the next submission with this key will take (unless one waits already)."""
        if key in self._waiting:
            self._waiting.move_to_end(key)
            return
        while len(self._waiting) >= WAITING:
            discard(self._waiting.popitem(last=False)[1])
        self._waiting[key] = start()

    def waiting(self) -> list[Warm]:
        """The kernels waiting now."""
        return list(self._waiting.values())

    def close_under(self, folders: Path) -> None:
        """Shut down the waiting kernels whose folders are under folders (a workspace that is done)."""
        for key, warm in list(self._waiting.items()):
            if Path(folders).resolve() in warm.slot.resolve().parents:
                del self._waiting[key]
                discard(warm)

    def close(self) -> None:
        """Shut down every waiting kernel."""
        while self._waiting:
            discard(self._waiting.popitem()[1])


def _alive(km: AsyncKernelManager) -> bool:
    try:
        return bool(run_sync(km.is_alive)())
    except Exception:  # noqa: BLE001 - a manager that cannot tell is not handed out
        return False


def stop(km: AsyncKernelManager) -> None:
    """Make sure a kernel is gone and its connection files removed (nothing to do when nbclient did it already)."""
    try:
        if _alive(km):
            run_sync(km.shutdown_kernel)(now=True)
        run_sync(km.cleanup_resources)()
    except Exception:  # noqa: BLE001, S110 - already gone; its process dies with ours at the latest
        pass


def discard(warm: Warm) -> None:
    """Kill a kernel that will never run a notebook, and remove its slot."""
    stop(warm.km)
    remove_slot(warm.slot)


def remove_slot(slot: Path) -> None:
    shutil.rmtree(slot.parent, ignore_errors=True)


def move_entries(source: Path, target: Path, owner: int | None = None) -> None:
    """Move everything in source into target (a rename: same file system), optionally handing it to uid owner."""
    for entry in sorted(os.listdir(source)):
        destination = target / entry
        if destination.is_dir() and not destination.is_symlink():
            shutil.rmtree(destination)
        os.replace(source / entry, destination)
        if owner is not None:
            chown_tree(destination, owner)


class ForkServer:
    """A fork server (autograder/forkserver.py) started by this thread: its bwrap process and its socket."""

    def __init__(self, plan: dict, env: dict[str, str]):
        self.work = Path(plan["work"])
        self.folder = Path(tempfile.mkdtemp(prefix="forkserver-"))  # 0700, outside every sandbox's view
        self.socket = str(self.folder / "s")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.socket)
            listener.listen(64)
            command = [plan["python"], "-c", Path(forkserver.__file__).read_text(), str(listener.fileno())]
            # the same bwrap sandbox as a kernel's (each kernel adds its folder and hides its assignment's answers)
            argv = sandbox.bwrap_argv(plan, Path(plan["work"]), Path(plan["ipc"]), None, None, command, server=env)
            self.process = subprocess.Popen(argv, pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL,
                                            preexec_fn=lambda: sandbox.set_rlimits(plan["limits"]))
        finally:
            listener.close()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.alive():
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def fork_server(plan_file: str, kernel_env: dict[str, str]) -> str | None:
    """The socket of this thread's fork server for the sandbox planned in plan_file (every assignment) and the
    environment kernels get (the grader's with kernel_env on top), started now unless it runs already; None where
    kernels are not forked: the grader is not root (it could not give each kernel its own uid), or the kernel's
    view needs something under /run, where the server sees the grading folder."""
    if not sandbox.switches_uid():
        return None
    plan = json.loads(Path(plan_file).read_text())
    if any(sandbox.within(path, "/run") for path in plan["ro_bind"]):
        return None
    env = sandbox.kernel_environment(plan, {**os.environ, **kernel_env})
    key = (str(plan_file), tuple(sorted(env.items())))
    servers = _servers()
    found = servers.get(key)
    if found is None or not found.alive():
        if found is not None:
            found.close()
            _local.restarts = getattr(_local, "restarts", 0) + 1
            if _local.restarts > SERVER_RESTARTS:  # it keeps dying: this machine starts kernels with bwrap
                return None
        found = servers[key] = ForkServer(plan, env)
    return found.socket


def close_servers(under: Path | None = None) -> None:
    """Stop this thread's fork servers (those of the grading folders under under, or all)."""
    servers = _servers()
    for key, found in list(servers.items()):
        if under is None or Path(under).resolve() in [found.work, *found.work.parents]:
            found.close()
            del servers[key]


def _servers() -> dict[tuple, ForkServer]:
    found = getattr(_local, "servers", None)
    if found is None:
        found = _local.servers = {}
        atexit.register(lambda: [server.close() for server in found.values()])
    return found


_local = threading.local()


def pool() -> KernelPool:
    """This thread's pool: a kernel is started and run on one thread's event loop (a Dask worker grades on several
    threads, each with a workspace of its own)."""
    found = getattr(_local, "pool", None)
    if found is None:
        found = _local.pool = KernelPool()
    return found
