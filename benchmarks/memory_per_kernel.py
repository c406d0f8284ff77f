"""Benchmark: what a kernel's memory group (autograder/cgroups.py) costs, and how fast a hog meets its limit.

    .venv/bin/python benchmarks/memory_per_kernel.py [--limit-mb 512] [--groups 50]

Prints, on this host's cgroups (root, cgroup v1 memory controller or a v2 group that delegates memory):
- the milliseconds to make a group with its limits, move a process in, and remove it (what each kernel start adds,
  besides the reaper's fork);
- for each way of holding memory RLIMIT_DATA does not see (memfd written, memfd fallocated, a shared anonymous
  mapping, a file in /dev/shm), a plain process trying to hold twice the limit inside a group of --limit-mb: the
  seconds until the OOM killer stopped it, the peak the group reached and its OOM kills.
Not a test: timings depend on the machine and on what else runs on it.
"""

import argparse
import os
import subprocess
import sys
import time

from autograder import cgroups, sandbox

#: each hog tries to hold mb * 2 megabytes in 64 MB pieces; {shm} is a file prefix in /dev/shm
HOGS = {
    "memfd write": "fd = os.memfd_create('h'); os.write(fd, b'x' * (64 << 20)); held.append(fd)",
    "memfd fallocate": "fd = os.memfd_create('h'); os.posix_fallocate(fd, 0, 64 << 20); held.append(fd)",
    "shared mapping": "m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_SHARED); m.write(b'x' * (64 << 20)); held.append(m)",
    "/dev/shm file": "open('{shm}' + str(i), 'wb').write(b'x' * (64 << 20))",
}


def group_cost(where: dict, count: int) -> float:
    """Milliseconds to make, join and remove one group (a sleeping child joins it)."""
    started = time.perf_counter()
    for _ in range(count):
        child = subprocess.Popen(["sleep", "30"])
        made = cgroups.create(where, cgroups.name_for(child.pid), 256 * sandbox.MB, 64)
        cgroups.join(made, child.pid)
        child.kill()
        child.wait()
        for folder in made:
            cgroups.remove(folder, wait=1)
    return (time.perf_counter() - started) / count * 1000


def hog(where: dict, name: str, limit_mb: int) -> tuple[float, dict, int]:
    """(seconds until it ended, the group's usage, exit status) of a process holding twice the limit."""
    shm = f"/dev/shm/memory-benchmark-{os.getpid()}-"
    code = (f"import os, mmap\nheld = []\nfor i in range(2 * {limit_mb} // 64):\n"
            f"    {HOGS[name].format(shm=shm)}\nprint('HELD')")
    read, write = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", f"import os; os.read({read}, 1)\n{code}"], pass_fds=[read],
                             stdout=subprocess.PIPE, text=True)
    os.close(read)
    made = cgroups.create(where, cgroups.name_for(child.pid), limit_mb * sandbox.MB, 64)
    cgroups.join(made, child.pid)
    started = time.perf_counter()
    os.write(write, b"x")  # now it is in its group: go
    os.close(write)
    out, _ = child.communicate()
    seconds = time.perf_counter() - started
    seen = cgroups.usage(made[0])
    for file in [f for f in os.listdir("/dev/shm") if f.startswith(os.path.basename(shm))]:
        os.unlink(os.path.join("/dev/shm", file))  # tmpfs pages stay charged until the file goes
    for folder in made:
        cgroups.remove(folder, wait=2)
    return seconds, {**seen, "held": "HELD" in out}, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit-mb", type=int, default=512)
    parser.add_argument("--groups", type=int, default=50)
    args = parser.parse_args()
    where, reason = sandbox.memory_groups()
    print(cgroups.describe(where, reason))
    if where is None:
        return
    print(f"make, join and remove a group: {group_cost(where, args.groups):.1f} ms (mean of {args.groups})")
    print(f"{'holding ' + str(2 * args.limit_mb) + ' MB through':<28} {'seconds':>8} {'peak MB':>8} {'OOM kills':>9}"
          f" {'held it':>8} {'exit':>5}")
    for name in HOGS:
        seconds, seen, status = hog(where, name, args.limit_mb)
        print(f"{name:<28} {seconds:8.2f} {seen['peak'] / sandbox.MB:8.0f} {seen['oom_kills']:9d} "
              f"{seen['held']!s:>8} {status:5d}")


if __name__ == "__main__":
    main()
