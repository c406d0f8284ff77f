"""Benchmark: how long a sandboxed kernel takes to start, cold (bwrap) and forked (the fork server).

    .venv/bin/python benchmarks/kernel_start.py [--kernels 5]

Starts kernels from the kernelspec autograder.sandbox.configure writes, in a grading folder under /tmp, and times
each from start_kernel until it answers kernel_info (jupyter_client's wait_for_ready): `cold` is bwrap starting a
fresh Python that imports torch and ipykernel; `forked` asks this process's fork server (autograder/forkserver.py,
started and warmed once before the timing; only where the grader is root). Prints the median, the fastest and the
slowest of each. Not a test: timings depend on the machine and on what else runs on it.
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from traitlets.config import Config

from autograder import sandbox
from autograder.kernels import close_servers, fork_server


def start_once(work: Path, server: str | None) -> float:
    """Seconds from start_kernel to the kernel's first kernel_info reply."""
    cwd = Path(tempfile.mkdtemp(dir=work / "autograded", prefix="k-")) / "01_self_attention"
    cwd.mkdir()
    specs = KernelSpecManager(kernel_dirs=[str(work / ".sandbox" / "kernels")])
    km = KernelManager(kernel_name=sandbox.KERNEL_NAME, kernel_spec_manager=specs, transport="ipc",
                       ip=str(work / ".sandbox" / "ipc" / "kernel"))
    env = {**os.environ, sandbox.FORK_SERVER_ENV: server} if server else None
    started = time.perf_counter()
    km.start_kernel(cwd=str(cwd), **({"env": env} if env else {}))
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        return time.perf_counter() - started
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=5, help="kernels started each way")
    args = parser.parse_args()
    if sandbox.available():
        raise SystemExit(f"no sandbox here: {sandbox.available()}")
    print(sandbox.describe())
    with tempfile.TemporaryDirectory(prefix="kernel-start-") as tmp:
        work = Path(tmp) / "course"
        (work / "autograded").mkdir(parents=True)
        sandbox.configure(Config(), work, sandbox.Limits())
        ways = {"cold": None}
        if sandbox.switches_uid():
            ways["forked"] = fork_server(str(work / ".sandbox" / "plan.json"), {})
            start_once(work, ways["forked"])  # the server imports torch etc. once, before the first fork
        try:
            for way, server in ways.items():
                times = [start_once(work, server) for _ in range(args.kernels)]
                print(f"{way:>6}: median {statistics.median(times):.2f} s, fastest {min(times):.2f} s, slowest "
                      f"{max(times):.2f} s ({args.kernels} kernels, {os.cpu_count()} cores)")
        finally:
            close_servers(work)


if __name__ == "__main__":
    main()
