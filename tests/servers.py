"""Real servers for the tests, started on this machine and stopped afterwards: PostgreSQL, a Dask cluster,
JupyterLab. Each lives in a folder of the test's own, listens on a Unix socket or on loopback only, and is found
from what `.ci/run` installs (Debian's postgresql package; dask and jupyterlab in the course environment)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SCRIPTS = Path(sys.executable).parent


def _under_ci() -> bool:
    return bool(os.environ.get("CI"))


def _wait(condition, seconds: float, what: str, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}")
        if condition():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} did not happen within {seconds} s")


def _stop(process: subprocess.Popen, seconds: float = 20) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):  # an unclosed pipe warns when collected
        if stream is not None:
            stream.close()


# ------------------------------------------------------------------------------------------------ PostgreSQL

def postgres_binaries() -> Path | None:
    """The folder of Debian's PostgreSQL server programs (initdb, postgres), the newest version installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


@contextlib.contextmanager
def postgresql() -> Iterator[str]:
    """A PostgreSQL server with its own data directory in a fresh temporary folder, reachable only through a Unix
    socket there; yields the SQLAlchemy URL of an empty database `gradebook`; removes it all afterwards. Runs as
    the `postgres` user when we are root (PostgreSQL refuses to run as root), so the folder sits directly in the
    system's temporary folder, where that user can reach it."""
    binaries = postgres_binaries()
    if binaries is None:
        if _under_ci():
            pytest.fail("PostgreSQL is not installed: .ci/run installs Debian's postgresql package")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    with tempfile.TemporaryDirectory(prefix="course-postgres-") as tmp:
        yield from _postgresql(binaries, Path(tmp))


def _postgresql(binaries: Path, folder: Path) -> Iterator[str]:
    data, sockets = folder / "data", folder / "socket"
    sockets.mkdir(parents=True)
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        for path in (folder, sockets):
            shutil.chown(path, "postgres", "postgres")
    subprocess.run([*as_user, str(binaries / "initdb"), "-D", str(data), "-U", "grader", "--auth=trust",
                    "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
    server = subprocess.Popen([*as_user, str(binaries / "postgres"), "-D", str(data), "-k", str(sockets),
                               "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=50"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ready = [str(binaries / "pg_isready"), "-q", "-h", str(sockets), "-U", "grader"]
        _wait(lambda: subprocess.run(ready).returncode == 0, 60, "PostgreSQL accepting connections", server)
        subprocess.run([str(binaries / "createdb"), "-h", str(sockets), "-U", "grader", "gradebook"], check=True)
        yield f"postgresql+psycopg://grader@/gradebook?host={sockets}"
    finally:
        _stop(server)


# ------------------------------------------------------------------------------------------------ Dask

@dataclass
class DaskCluster:
    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)


@contextlib.contextmanager
def dask_cluster(folder: Path, workers: int) -> Iterator[DaskCluster]:
    """A Dask scheduler and `workers` worker processes (one thread each, no nanny: a killed worker stays dead), on
    loopback, started with the course environment's `dask` command; stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    address_file = folder / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    scheduler = subprocess.Popen([str(SCRIPTS / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--dashboard-address", ":0", "--no-show", "--scheduler-file", str(address_file)],
                                 cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cluster = DaskCluster("", scheduler)
    try:
        _wait(address_file.exists, 60, "the Dask scheduler writing its address", scheduler)
        cluster.address = json.loads(address_file.read_text())["address"]
        for _ in range(workers):
            cluster.workers.append(subprocess.Popen(
                [str(SCRIPTS / "dask"), "worker", cluster.address, "--nthreads", "1", "--no-nanny",
                 "--host", "127.0.0.1", "--dashboard-address", ":0", "--local-directory", str(folder)],
                cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client  # noqa: PLC0415 - heavy; only dask_cluster needs it, not the other servers

        with Client(cluster.address, timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
        yield cluster
    finally:
        for process in cluster.workers:
            _stop(process)
        _stop(scheduler)


# ------------------------------------------------------------------------------------------------ JupyterLab

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    url: str
    token: str
    process: subprocess.Popen

    def get(self, path: str, timeout: float = 60) -> tuple[int, str]:
        request = urllib.request.Request(f"{self.url}{path}", headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode(errors="replace")


@contextlib.contextmanager
def jupyter_lab(root: Path, folder: Path, notebook_dir: str | None = None) -> Iterator[Lab]:
    """JupyterLab started as docs/ says (`.venv/bin/jupyter lab [DIR]` from the course root, the environment not
    activated: its scripts folder is not on PATH), on a loopback port, with its own runtime and config folders."""
    port, token = free_port(), "course-test-token"
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != SCRIPTS)
    env = {**os.environ, "PATH": path or "/usr/bin:/bin", "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
           "JUPYTER_CONFIG_DIR": str(folder / "config"), "HOME": str(folder / "home")}
    (folder / "home").mkdir(parents=True, exist_ok=True)
    argv = [str(SCRIPTS / "jupyter"), "lab", *([notebook_dir] if notebook_dir else []), "--no-browser",
            f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}", "--ServerApp.allow_root=True"]
    log = (folder / "jupyter-lab.log").open("wb")  # a pipe nobody reads would fill up and stall the server
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    lab = Lab(f"http://127.0.0.1:{port}", token, process)

    def answering() -> bool:
        try:
            return lab.get("/api/status", timeout=2)[0] == 200
        except OSError:
            return False
    try:
        _wait(answering, 90, "JupyterLab answering", process)
        yield lab
    finally:
        _stop(process)
