"""A memory cgroup per kernel: everything a submission's kernel and its children hold is bounded by the kernel.

RLIMIT_DATA bounds one process's private memory only: shared mappings, memfds and tmpfs pages (/tmp and /dev/shm
in the sandbox) escape it, and a kernel may start ``processes`` children. A memory cgroup charges all of them —
anonymous memory, page cache, tmpfs and memfd pages, shared mappings, kernel memory — to the kernel's own group, and
past ``Limits.memory_mb`` the kernel's OOM killer kills a process of that group alone (the grader, and every other
kernel, live on). No swap: the group's swap limit (v1 ``memory.memsw.limit_in_bytes``, v2 ``memory.swap.max``) is
set too where the host accounts swap. Where the pids controller is there, ``pids.max`` bounds the group's tasks
(threads too), which holds even where kernels share a uid.

Where the groups are made (:func:`locate`): under the grader's own group (``/proc/self/cgroup``), so a kernel never
leaves a limit the host put on the grader —

- cgroup v1 (a hierarchy with the ``memory`` controller mounted, as on these machines): a child of the grader's
  memory group, and a child of its pids group;
- cgroup v2 (the unified hierarchy): a child of the grader's group, when ``memory`` is in that group's
  ``cgroup.subtree_control`` (the root group; any other group holding processes cannot delegate memory), else of
  the group the administrator made for kernels and named in ``AUTOGRADER_CGROUP`` (:data:`CHOSEN`); that variable
  names such a group on v1 too;
- neither (not root, no memory controller, /sys read-only, a v2 group that does not delegate memory): no group, and
  :func:`autograder.sandbox.describe` says memory is bounded per process only.

One group per kernel, named ``autograder-kernel-<pid>-<start time>`` of the process it belongs to (the sandbox's
launcher, which is the kernel's lifetime: bwrap once it execs, the waiting end of a forked kernel). The launcher
makes it, and the kernel is in it before it runs anything: a cold kernel because the launcher joins it before
exec'ing bwrap, a forked one because the launcher moves the fork server's guardian in before letting it fork the
kernel (autograder/forkserver.py). A *reaper* (a double fork of the launcher, in the grader's group and its own
session, so that what kills the launcher does not kill it) waits for the launcher to end, then for the group to
empty (killing what is left after a few seconds), logs its peak and OOM kills, and removes it. A group whose owner
is gone (launcher and reaper killed with -9) is removed at the next kernel's start, or the next configure.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import sys
import time
from pathlib import Path

#: the name of every group this grader makes, before its owner's pid and start time
PREFIX = "autograder-kernel-"
#: the environment variable naming a group made for kernels, where the grader's own group cannot have children with
#: the memory controller (cgroup v2 allows none in a group that holds processes): as root, ``mkdir
#: /sys/fs/cgroup/grading && echo "+memory +pids" > /sys/fs/cgroup/grading/cgroup.subtree_control``, then
#: ``AUTOGRADER_CGROUP=/sys/fs/cgroup/grading``; kernel groups are made in it
CHOSEN = "AUTOGRADER_CGROUP"
#: seconds the reaper waits for an ended kernel's group to empty before it kills what is left
EMPTY_SECONDS = 5.0


# --------------------------------------------------------------------------------------------------------------
# Where: chosen from the mount table and this process's membership (a fake /sys in tests).


def locate(mountinfo: str | None = None, membership: str | None = None,
           chosen: str | None = None) -> tuple[dict | None, str]:
    """(where kernel groups are made, or None; one line on what bounds a kernel's memory here).

    where: {"version": 1 or 2, "memory": parent folder, "pids": parent folder or None}. The texts default to
    /proc/self/mountinfo and /proc/self/cgroup; chosen to the environment's AUTOGRADER_CGROUP (a group the
    administrator made for kernels, see :data:`CHOSEN`). Nothing is written."""
    chosen = os.environ.get(CHOSEN) if chosen is None else chosen
    if chosen:
        return _chosen(chosen)
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
        membership = Path("/proc/self/cgroup").read_text() if membership is None else membership
    except OSError:
        return None, "no cgroups on this host (no /proc/self/mountinfo or /proc/self/cgroup)"
    v1, v2 = {}, None  # controller -> (mount point, mount root); the unified mount
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        kind, options = after[0], (after[2].split(",") if len(after) > 2 else [])
        if kind == "cgroup":
            for controller in ("memory", "pids"):
                if controller in options:
                    v1.setdefault(controller, (_unescape(fields[4]), _unescape(fields[3])))
        elif kind == "cgroup2" and v2 is None:
            v2 = (_unescape(fields[4]), _unescape(fields[3]))
    groups = {}  # controller (v1) or "" (v2) -> this process's group path
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                groups[controller] = parts[2]
    if "memory" in v1 and "memory" in groups:
        memory = _folder(*v1["memory"], groups["memory"])
        pids = _folder(*v1["pids"], groups["pids"]) if "pids" in v1 and "pids" in groups else None
        return _checked({"version": 1, "memory": memory, "pids": pids if pids and _writable(pids) else None},
                        "cgroup v1")
    if v2 is not None and "" in groups:
        own = _folder(*v2, groups[""])
        delegated = _words(Path(own, "cgroup.subtree_control"))
        if "memory" not in delegated:
            available = "memory" in _words(Path(own, "cgroup.controllers"))
            return None, (f"cgroup v2, but the grader's group {own} does not delegate the memory controller to its "
                          f"children ({'not in' if available else 'not even available in'} its "
                          f"cgroup.subtree_control, which a group holding processes cannot have): set {CHOSEN} to "
                          "a group made for kernels, with memory in its cgroup.subtree_control, for a memory limit "
                          "per kernel")
        return _checked({"version": 2, "memory": own, "pids": own if "pids" in delegated else None}, "cgroup v2")
    return None, "no memory cgroup controller on this host"


def _chosen(folder: str) -> tuple[dict | None, str]:
    """The group the administrator named for kernels (v2: it must delegate memory; v1: a memory group)."""
    if os.path.exists(os.path.join(folder, "cgroup.subtree_control")):
        delegated = _words(Path(folder, "cgroup.subtree_control"))
        if "memory" not in delegated:
            return None, f"{CHOSEN}={folder} does not delegate the memory controller (its cgroup.subtree_control)"
        return _checked({"version": 2, "memory": folder, "pids": folder if "pids" in delegated else None},
                        f"cgroup v2 ({CHOSEN})")
    if os.path.exists(os.path.join(folder, "memory.limit_in_bytes")):
        return _checked({"version": 1, "memory": folder, "pids": None}, f"cgroup v1 ({CHOSEN})")
    return None, f"{CHOSEN}={folder} is not a memory cgroup"


def _checked(where: dict, what: str) -> tuple[dict | None, str]:
    if where["memory"] is None or not os.path.isdir(where["memory"]):
        return None, f"{what}: the grader's memory group is not visible under /sys/fs/cgroup"
    if not _writable(where["memory"]):
        return None, f"{what}: the grader may not make groups in {where['memory']} (not root, or /sys read-only)"
    return where, f"{what}: a memory group per kernel under {where['memory']}"


def _folder(mount: str, root: str, path: str) -> str:
    """The folder of group path in a hierarchy mounted at mount, which shows the hierarchy from root."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root):]
    # else the path is relative to this process's cgroup namespace, whose root is what the mount shows
    return os.path.normpath(mount + "/" + path.lstrip("/"))


def _unescape(field: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _writable(folder: str) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


# --------------------------------------------------------------------------------------------------------------
# One kernel's group.


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat): with the pid, names one process ever."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()[19]


def name_for(pid: int) -> str:
    return f"{PREFIX}{pid}-{start_time(pid)}"


def folders(where: dict, name: str) -> list[str]:
    """The group's folders: in the memory hierarchy, and in the pids one when it is another."""
    found = [os.path.join(where["memory"], name)]
    if where.get("pids") and where["pids"] != where["memory"]:
        found.append(os.path.join(where["pids"], name))
    return found


def create(where: dict, name: str, memory_bytes: int, tasks: int) -> list[str]:
    """Make the group (after removing stale ones) with its limits; its folders. Raises OSError when it cannot."""
    remove_stale(where)
    made = folders(where, name)
    for folder in made:
        if os.path.isdir(folder):  # a dead process's, whose pid and start time came back: impossible but harmless
            remove(folder)
        os.mkdir(folder, 0o755)
    memory = made[0]
    if where["version"] == 1:
        _write(memory, "memory.limit_in_bytes", memory_bytes)  # before memsw, which may not be below it
        _write(memory, "memory.memsw.limit_in_bytes", memory_bytes, optional=True)  # no swap (where accounted)
        _write(memory, "memory.move_charge_at_immigrate", 0, optional=True)
    else:
        _write(memory, "memory.max", memory_bytes)
        _write(memory, "memory.swap.max", 0, optional=True)
        _write(memory, "memory.oom.group", 1, optional=True)  # the whole kernel goes, not one child of it
    if where.get("pids"):
        _write(made[-1], "pids.max", tasks)
    return made


def join(made: list[str], pid: int) -> None:
    """Move process pid (its threads too, and what it starts after) into the group."""
    for folder in made:
        _write(folder, "cgroup.procs", pid)


def member(made: list[str], pid: int) -> bool:
    """True when process pid is in every folder of the group (/proc/<pid>/cgroup ends with the group's name)."""
    name = os.path.basename(made[0])
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return sum(line.endswith("/" + name) for line in lines) >= len(made)


def _write(folder: str, file: str, value: int, optional: bool = False) -> None:
    path = os.path.join(folder, file)
    if optional and not os.path.exists(path):
        return
    with open(path, "w") as f:
        f.write(str(value))


def tasks(folder: str) -> list[int]:
    try:
        return [int(line) for line in Path(folder, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def usage(folder: str) -> dict[str, int]:
    """The memory group's peak (bytes) and OOM kills so far (0 where the host does not say)."""
    peak = _number(folder, "memory.max_usage_in_bytes") or _number(folder, "memory.peak")
    kills = 0
    for file in ("memory.oom_control", "memory.events"):
        for line in _words_lines(Path(folder, file)):
            if line.startswith("oom_kill "):
                kills = int(line.split()[1])
    return {"peak": peak, "oom_kills": kills}


def _number(folder: str, file: str) -> int:
    try:
        return int(Path(folder, file).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _words_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def remove(folder: str, wait: float = 0.0) -> bool:
    """Remove a group once it is empty: wait up to wait seconds for it to empty, then kill what is left in it."""
    deadline, killed = time.monotonic() + wait, None
    while True:
        left = tasks(folder)
        if not left:
            try:
                os.rmdir(folder)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                pass  # a task still leaving: the next look finds it gone
        now = time.monotonic()
        if now >= deadline and killed is None:
            killed = now
            _write_ok(folder, "cgroup.kill", 1)  # v2: everything in it, at once
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        elif killed is not None and now - killed > 2.0:
            return False
        time.sleep(0.02)


def _write_ok(folder: str, file: str, value: int) -> bool:
    try:
        _write(folder, file, value, optional=True)
        return os.path.exists(os.path.join(folder, file))
    except OSError:
        return False


def _owner_alive(name: str) -> bool:
    """True while the process a group is named after lives (same pid and start time)."""
    try:
        pid, started = name[len(PREFIX):].split("-", 1)
        return start_time(int(pid)) == started
    except ValueError:
        return False


def remove_stale(where: dict) -> list[str]:
    """Remove the groups of this grader whose owner is gone (a launcher and its reaper killed with -9)."""
    removed = []
    for parent in {where["memory"], where.get("pids") or where["memory"]}:
        try:
            names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            if not _owner_alive(name) and not _reaped(os.path.join(parent, name)) \
                    and remove(os.path.join(parent, name), wait=0.0):
                removed.append(os.path.join(parent, name))
    return removed


def reap_after(made: list[str], owner: int, log: str | None) -> None:
    """Start the reaper of the group (a double fork, in the caller's group and its own session): when process owner
    has ended and the group is empty, it appends the group's peak and OOM kills to log and removes the group."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        os.setsid()  # a signal to the launcher's process group does not reach it
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, 1 << 16)
        _reap(made, owner, log)
    finally:
        os._exit(0)


def _reaped(folder: str) -> bool:
    """True while a reaper holds the group (its lock, taken in _reap): its owner has just ended, and the reaper
    will log and remove it; another grader's remove_stale must leave it alone."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _reap(made: list[str], owner: int, log: str | None) -> None:
    held = []
    for folder in made:  # released when this process exits; tells remove_stale the group is being reaped
        try:
            held.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY))
            fcntl.flock(held[-1], fcntl.LOCK_EX)
        except OSError:
            pass
    try:
        watch = os.pidfd_open(owner)
        select.select([watch], [], [])
    except OSError:  # gone already, or no pidfd here: look every 0.1 s
        while os.path.exists(f"/proc/{owner}"):
            time.sleep(0.1)
    deadline = time.monotonic() + EMPTY_SECONDS
    while any(tasks(f) for f in made) and time.monotonic() < deadline:
        time.sleep(0.02)
    seen = usage(made[0])
    if log:
        try:
            with open(log, "a") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {os.path.basename(made[0])} peak {seen['peak']} "
                        f"oom_kills {seen['oom_kills']}\n")
        except OSError:
            pass
    for folder in made:
        remove(folder, wait=0.0)


def probe(where: dict) -> str | None:
    """None when a kernel group can really be made here (made, limited and removed now), else why not."""
    name = name_for(os.getpid())
    try:
        made = create(where, name, 64 << 20, 16)
    except OSError as error:
        for folder in folders(where, name):
            remove(folder)
        return f"a group cannot be made in {where['memory']} ({error.strerror or error})"
    for folder in made:
        remove(folder)
    return None


def describe(where: dict | None, reason: str) -> str:
    """One phrase on how a kernel's memory is bounded here."""
    if where is None:
        return f"memory bounded per process only (RLIMIT_DATA; no cgroup: {reason})"
    pids = ", and its tasks by pids.max" if where.get("pids") else ""
    return f"memory bounded per kernel by a cgroup v{where['version']} memory group{pids}"


if __name__ == "__main__":  # where kernel groups would go on this host
    print(locate()[1], file=sys.stdout)
