"""The fork server: one sandboxed process imports torch and ipykernel once, then forks each kernel from it.

Run inside the bubblewrap sandbox (``python -c <this file's text>``: the autograder package itself is hidden there),
started by a grading worker for one assignment (autograder/kernels.py, :func:`autograder.kernels.fork_server`), as
root with the capabilities it needs to build each kernel's own sandbox (the grader must be root: without it,
kernels start as before, autograder/sandbox.py). It never runs a student's code and never reads a submission: it
only forks. Per kernel:

1. the sandbox's launcher (kernel.json's argv, autograder/sandbox.py, outside the sandbox) connects to the listening
   socket the worker handed this process, and sends one request: the kernel's connection info, its folder (relative
   to the grading folder ``work``, which only this process sees, at :data:`STAGING`), its uid, environment and
   arguments, with its stdin/stdout/stderr as passed file descriptors;
2. a *guardian* is forked for it. It enters new mount, pid, network, IPC, UTS and cgroup namespaces and forks the
   namespaces' init (pid 1: when it dies, everything in them dies). The guardian stays: when the launcher goes
   (jupyter_client killed it), it kills the init; when the init exits, it tells the launcher the exit status;
3. the init builds the view a cold kernel gets from bwrap: a fresh /tmp, /dev/shm and /proc, the kernel's folder
   at ``/tmp/submission/<assignment>``, the grading folder unmounted and /run an empty read-only tmpfs again, the
   connection file read-only at /tmp/.connection.json, loopback up, a new session; then it drops to the kernel's
   uid (no groups, no capabilities, not even in the bounding set, no new privileges) and checks in
   /proc/self/status that nothing is left;
4. the init forks the kernel (pid 2, as under bwrap), which takes the kernel's environment and arguments and runs
   ipykernel as a cold kernel does; the init reaps what the kernel leaves and exits with it.

No kernel ever runs two students' code: each is a fresh fork of a process that ran none. What it inherits from the
server is what a cold kernel would have imported itself (torch, numpy, ipykernel), before any of them started a
thread (the server runs no computation: a forked child may only inherit a thread pool that was never started).
"""

import ctypes
import json
import os
import re
import select
import signal
import socket
import struct
import sys

#: where the grading folder is bound in the server's sandbox (unmounted in every kernel before it drops to its uid)
STAGING = "/run/.forkserver"
#: the environment variables a library reads when it is imported: a kernel asking for other values than the
#: server was started with is refused (and started cold)
IMPORT_TIME_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                   "PYTHONHASHSEED")
#: what the server imports for every kernel: what each notebook imports first, and ipykernel. Never the course
#: (some of its modules hold the answers of the assignment graded), nor matplotlib's inline backend (it hooks
#: itself into IPython when it is imported, so it must be imported in the kernel)
PRELOADED = ("torch", "numpy", "ipykernel.kernelapp", "ipykernel.ipkernel", "matplotlib.pyplot")
#: what the kernel process looks like to the code it runs, as a cold kernel (autograder.sandbox.KERNEL_START)
ARGV0 = "-c"

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 38, 47, 4
CAPABILITIES = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int = 0) -> None:
    _call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{name}{args!r}: {os.strerror(error)}")


def _mount(source, target, kind, flags, data=None) -> None:
    _call("mount", source and source.encode(), target.encode(), kind and kind.encode(), ctypes.c_ulong(flags),
          data and data.encode())


def _tmpfs(path: str, size: int, mode: str) -> None:
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size={size}")


def _read_only(path: str) -> None:
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mount_points(under: str) -> list[str]:
    """The mount points strictly under a folder, outermost first (from /proc/self/mountinfo)."""
    points = []
    for line in open("/proc/self/mountinfo").read().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point.startswith(under.rstrip("/") + "/"):
            points.append(point)
    return sorted(set(points), key=lambda p: (p.count("/"), p))


def _fresh_tmp(size: int) -> None:
    """An empty tmpfs on /tmp, with what the sandbox bound under /tmp (the Python, a checkout, the sockets' folder:
    bwrap binds them on the server's /tmp) bound again, in folders of the same modes; /dev/shm holds the old /tmp
    meanwhile (it gets its own fresh tmpfs next)."""
    _mount("/tmp", "/dev/shm", None, MS_BIND | MS_REC)
    _tmpfs("/tmp", size, "1777")
    done: list[str] = []
    for point in _mount_points("/dev/shm"):
        if any(point.startswith(d + "/") for d in done):
            continue  # came along with an outer one
        done.append(point)
        relative = point[len("/dev/shm/"):]
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            target = os.path.join("/tmp", *parts[:depth])
            if not os.path.exists(target):
                source = os.path.join("/dev/shm", *parts[:depth])
                if os.path.isdir(source):
                    os.mkdir(target)
                    os.chmod(target, os.stat(source).st_mode & 0o7777)
                else:
                    open(target, "w").close()
        _mount(point, os.path.join("/tmp", relative), None, MS_BIND | MS_REC)
    _call("umount2", b"/dev/shm", MNT_DETACH)


def _loopback_up() -> None:
    import fcntl  # noqa: PLC0415 - only the kernel needs it

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))


def _drop_privileges(uid: int) -> None:
    """Become uid with no groups and no capabilities at all, for good; fail unless /proc/self/status agrees."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _call("prctl", PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0), ctypes.c_ulong(0),
          ctypes.c_ulong(0))
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from root to another uid: the permitted and effective capabilities are cleared
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _call("capset", header, bytes(24))  # and the inheritable ones too
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    kept = {k: status[k].strip() for k in ("Uid", "Gid", "Groups", "NoNewPrivs", *CAPABILITIES)}
    if (any(int(kept[k], 16) for k in CAPABILITIES) or {int(v) for k in ("Uid", "Gid") for v in kept[k].split()}
            != {uid} or kept["Groups"] or kept["NoNewPrivs"] != "1"):
        raise RuntimeError(f"privileges left after dropping them: {kept}")


def _sandbox(request: dict) -> None:
    """As pid 1 of the new namespaces: build the kernel's view, then drop to the kernel's uid."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the server's mounts
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this pid namespace's processes only
    _fresh_tmp(request["tmp_bytes"])
    _tmpfs("/dev/shm", request["tmp_bytes"], "1777")
    for path in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"):  # as bwrap leaves them
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _read_only(path)
    for stub, reference in request["stubs"]:  # the course modules holding this assignment's answers
        _mount(_staged(stub), reference, None, MS_BIND)
        _read_only(reference)
    if request["cache"]:  # and their compiled copies
        _tmpfs(request["cache"], request["cache_bytes"], "755")
    inside = f"{request['inside']}/{request['assignment']}"
    os.makedirs(inside, mode=0o755)
    os.chmod(os.path.dirname(inside), 0o755)
    _mount(_staged(request["folder"]), inside, None, MS_BIND)
    _call("umount2", STAGING.encode(), MNT_DETACH)
    _tmpfs("/run", 1 << 20, "755")  # as the sandbox leaves it: empty, read-only
    _read_only("/run")
    with open(request["connection_path"], "w") as f:
        f.write(json.dumps(request["connection"]))
    os.chmod(request["connection_path"], 0o444)
    _loopback_up()
    os.setsid()
    os.closerange(3, 1 << 16)
    os.umask(0o077)
    os.chdir(inside)
    _drop_privileges(request["uid"])
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it


def _staged(relative: str) -> str:
    """Where the server sees a path of the grading folder; refused outside it."""
    path = os.path.normpath(os.path.join(STAGING, relative))
    if os.path.commonpath([path, STAGING]) != STAGING or path == STAGING:
        raise RuntimeError(f"not in the grading folder: {relative!r}")
    return path


def _run_kernel(request: dict) -> None:
    """The kernel (pid 2, as under bwrap): its environment and arguments, then ipykernel (never returns)."""
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        import numpy  # noqa: PLC0415 - its global generator would be the server's in every kernel

        numpy.random.seed()
    except ImportError:
        pass
    course = sorted(m for m in sys.modules if m.split(".")[0] == "course")
    if course:
        raise RuntimeError(f"the fork server imported course modules, which may hold answers: {course}")
    root = request["env"].get("PYTHONPATH", "")  # the course being graded (autograder.sandbox.KERNEL_START)
    try:
        import course  # noqa: PLC0415 - in the kernel only, never in the server
    except BaseException:
        print(f"autograder sandbox: the kernel cannot import the course being graded from {root}/course",
              file=sys.stderr)
        raise
    if os.path.dirname(os.path.dirname(course.__file__)) != root:
        raise RuntimeError(f"the kernel imported course from {course.__file__}, not from {root}/course")
    sys.argv = [ARGV0, *request["argv"]]
    from ipykernel import kernelapp  # noqa: PLC0415 - imported by the server already

    kernelapp.launch_new_instance()
    os._exit(0)


def _init(request: dict, fds: list[int]) -> None:
    """pid 1 of the kernel's namespaces: build its sandbox, fork the kernel, reap what it leaves, exit with it."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the guardian's death is the kernel's (set again after the uid change)
    for target, fd in enumerate(fds[:3]):  # the launcher's stdin, stdout and stderr: what goes wrong is seen there
        os.dup2(fd, target)
    _sandbox(request)
    kernel = os.fork()
    if kernel == 0:
        _only_child(_run_kernel, request)
    while True:
        pid, status = os.wait()
        if pid == kernel:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _only_child(run, *args) -> None:
    """Run a forked child's work; whatever happens, the child ends here (it never returns into its parent's code)."""
    try:
        run(*args)
    except BaseException as error:  # noqa: BLE001 - reported on the stderr the child has (the kernel's, the worker's)
        os.write(2, f"autograder fork server, {run.__name__.strip('_')}: {type(error).__name__}: {error}\n".encode())
    finally:
        os._exit(111)


def _guardian(conn: socket.socket, server_pid: int) -> None:
    """One kernel's guardian (a fork of the server): start the kernel's init, then wait for it or for the launcher to
    go. The init is killed whenever the guardian ends, however it ends."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:
        return
    fds: list[int] = []
    try:
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not message.endswith(b"\n"):  # one line of JSON, maybe in several pieces
            more = conn.recv(1 << 16)
            if not more:
                raise RuntimeError("the request ended before its end of line")
            message += more
        request = json.loads(message)
        mismatch = {k for k in IMPORT_TIME_ENV if request["env"].get(k) != os.environ.get(k)}
        if len(fds) != 3 or mismatch:
            raise RuntimeError(f"environment differs from the fork server's in {sorted(mismatch)}" if mismatch
                               else "stdin, stdout and stderr not passed")
        if request.get("cgroup"):
            _join_group(conn, request["cgroup"], request["cgroup_count"])
        _call("unshare", CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)
    except Exception as error:  # noqa: BLE001 - the launcher starts the kernel cold instead
        conn.sendall(f"refused {type(error).__name__}: {error}\n".encode())
        return
    init = os.fork()
    if init == 0:
        conn.close()
        _only_child(_init, request, fds)
    try:
        for fd in fds:
            os.close(fd)
        conn.sendall(b"started\n")
        watch = os.pidfd_open(init)
        while True:
            ready, _, _ = select.select([conn, watch], [], [])
            if watch in ready:
                _, status = os.waitpid(init, 0)
                init = 0
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                return
            if not conn.recv(1):  # the launcher is gone: so is its kernel
                return
    finally:
        if init:
            os.kill(init, signal.SIGKILL)
            os.waitpid(init, 0)


def _join_group(conn: socket.socket, name: str, count: int) -> None:
    """Have the launcher move this guardian into the kernel's memory group (autograder/cgroups.py: the server cannot
    write /sys), and check it did, before anything of the kernel exists: all it forks then stays in that group."""
    conn.sendall(b"join\n")
    answer = b""
    while not answer.endswith(b"\n") and len(answer) < 16:
        more = conn.recv(16)
        if not more:
            break
        answer += more
    if answer != b"go\n":
        raise RuntimeError(f"the launcher did not put the kernel in its memory group ({answer!r})")
    lines = open("/proc/self/cgroup").read().splitlines()
    if sum(line.endswith("/" + name) for line in lines) < count:
        raise RuntimeError(f"not in the kernel's memory group {name}: {lines}")


def serve(listen_fd: int) -> None:
    """Import what every kernel imports, then fork a guardian per connection, for as long as the worker lives."""
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    for module in PRELOADED:
        try:
            __import__(module)
        except ImportError:
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # guardians are reaped by the system
    listener = socket.socket(fileno=listen_fd)
    me = os.getpid()
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _only_child(_guardian, conn, me)
        conn.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
