"""Run student code in a bubblewrap sandbox while nbgrader grades it.

Use: build the nbgrader config, call ``configure(config, work, Limits())`` and only then create the
``NbGraderAPI`` from that config. Every kernel nbgrader then starts (autograde, in-process) is started by
this file run as a script (the *launcher*, outside the sandbox), which execs::

    bwrap --unshare-net --unshare-pid --unshare-ipc --die-with-parent --new-session \\
          --ro-bind /usr /usr --symlink usr/bin /bin ... --ro-bind <a few /etc files> --dev /dev --proc /proc \\
          --tmpfs /tmp --ro-bind <python, venv, course package> --ro-bind <stubs> <judges, answers> \\
          --bind <kernel cwd> /tmp/submission/<assignment> --bind <its socket folder> --remount-ro / --clearenv ... \\
          setpriv --reuid=U --regid=U --clear-groups ... python -c KERNEL_START -f <connection file>

What the student's code then can and cannot do:

- no network at all (own network namespace with only a loopback); the kernel talks to nbgrader over
  unix sockets (``KernelManager.transport = "ipc"``) in a folder of its own, ``work/.sandbox/ipc/<random>``
  (made by autograder.execute.GradingKernelManager, the kernel uid's, removed with the kernel); ``ipc`` itself
  can be passed through by kernels, not listed or written, so no folder on disk is shared between kernels;
- the file system is an allow-list: bwrap's root is an empty tmpfs (read-only once built), and only this is bound
  into it, read-only: the system's runtime (ROOT_RUNTIME: /usr, and /bin, /lib... as they are on the host, symlinks
  as symlinks), the few files of /etc that the loader, glibc, mimetypes and matplotlib's font search read (ETC:
  no passwd, shadow, ssh, ssl, hosts), the font cache and the CPUs' topology (HOST_READS; SYSFS_GPU besides, and the
  NVIDIA device nodes, on a GPU machine), the Python installation and the virtual environment, and of the course
  repository only ``course/``, less ``course/judges`` (the judges, oracles and simulated mistakes: a stub package
  that refuses to be imported) and the reference modules of the assignment graded (stubs too) and their compiled
  copies. Nothing else of the host is there: not the grading folder ``work`` (gradebook.db, source/, submitted/,
  other students), not the rest of the repository (catalogue/, autograder/, source/, solutions/, .git), not /home,
  /root (but the way to a Python installed there), /opt, /var/tmp, /run or /srv, so no other checkout or course on
  the machine. The grader's packages (autograder, catalogue), the repository, the grading folder and configure's
  ``hide`` are hidden even where they lie inside a bound folder (an empty tmpfs, or an empty file);
- writable: only the kernel's working folder (``work/autograded/<student>/<assignment>``, or a warm kernel's own
  folder, autograder/kernels.py; inside always ``/tmp/submission/<assignment>``), a private ``/tmp`` and
  ``/dev/shm`` (tmpfs, size-limited), and its own socket folder;
- a fresh environment (``--clearenv``): HOME=/tmp, MPLCONFIGDIR=/tmp/matplotlib, JPY_PARENT_PID=1, no
  CI secrets; NBGRADER_EXECUTION, COURSE_*, LANG/LC_*, TZ and thread-count variables are passed through;
- a pid namespace with --die-with-parent: when jupyter_client kills the kernel, everything started inside dies;
- a memory cgroup per kernel where the host allows it (see Memory below);
- rlimits: RLIMIT_DATA (memory, so CUDA's huge virtual reservations still work), RLIMIT_NPROC (processes
  and threads), RLIMIT_FSIZE, no core files; nbgrader's per-cell timeout interrupts by message
  (``interrupt_mode: message``), because a signal to the launcher would not reach into the sandbox;
- stdout/stderr/display output past ``Limits.output_mb`` per notebook is dropped by nbgrader's side
  (``autograder.execute.GradingExecute``) with one note;
- disk: what the kernel writes in its folder and its socket folder (the only writable places on disk) is measured
  by ``GradingExecute`` every 0.05 s; past ``Limits.disk_mb`` or ``Limits.disk_files`` the kernel is killed and
  what it wrote removed (it may overshoot by what it writes in 0.05 s, at most ``file_mb`` per file);
- after the kernel, ``GradingExecute`` (through ``reclaim``) removes symlinks, fifos and sockets from the kernel's
  folder and gives its files back to the grader, so nbgrader's writing of the graded notebook cannot be redirected.

Uid: when the grader runs as root (CI), the kernel runs as uid ``uid + <the launcher's pid>`` (unique among
running kernels, also across grading worker processes, so RLIMIT_NPROC, which root ignores, applies per
kernel, and one kernel cannot connect to another's sockets: they are created with umask 077). The launcher
chowns the kernel's working folder to that uid. When the grader is not root (a teacher's laptop) it cannot switch
uid: the kernel runs as the grader's own uid inside an unprivileged user namespace, which still gives the
network, file system, pid and memory/file-size isolation, but RLIMIT_NPROC then counts all processes of the
grader's user, and concurrent kernels could reach each other's sockets. ``describe()`` says which mode is in force.

Forked kernels: where the grader is root, a warm kernel (autograder/kernels.py) is not started by bwrap but forked
from the worker's *fork server* (autograder/forkserver.py): one process per worker in this same sandbox, started
with the same plan, limits and environment, that has imported torch, numpy, matplotlib.pyplot and ipykernel once.
The launcher (this file) hands it the kernel's request over a unix socket only the grader can reach; each kernel
gets its own mount, pid, network, IPC and UTS namespaces, its own /tmp, /dev/shm and /proc, its folder at the same
place, the answers of its assignment hidden, and its own uid (the grading folder, which the server sees, is
unmounted before the kernel drops every privilege). The kernel is ready in 0.4 s instead of 1.7 s, for 0.2 s of
CPU instead of 1.6 (2-core machine). Anything the server cannot do is done the cold way: the launcher falls back
to bwrap.

Memory: where the grader may make cgroups (autograder/cgroups.py: root with the v1 memory controller, or a v2 group
that delegates memory), each kernel has a memory group of ``memory_mb`` for everything it and its children hold
(memfds, shared mappings and tmpfs pages too), no swap, and ``pids.max``: the launcher makes it, joins it before
exec'ing bwrap (a forked kernel's guardian is moved in before it forks the kernel), and a reaper removes it after.
Elsewhere memory is per process only (RLIMIT_DATA, which shared mappings and memfds escape, and up to ``processes``
children could each use ``memory_mb``); ``describe()`` says which.
A hostile kernel can still send nbgrader one huge message (the output limit is applied after receiving it).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from autograder import cgroups

KERNEL_NAME = "autograder-sandbox"
MB = 1024 * 1024
#: The top-level folders of the system's runtime, bound read-only as they are on the host (on a merged-/usr system,
#: Debian's and this machine's, all but usr are symlinks into it, and stay symlinks).
ROOT_RUNTIME = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: The only files of /etc a kernel sees: what the dynamic loader, glibc (time zone), mimetypes, matplotlib's font
#: search (fc-list) read, measured with strace on a kernel importing every notebook's modules and drawing a figure,
#: and the alternatives' symlinks some of /usr/bin points through. No passwd, shadow, ssh, ssl, hosts or machine-id.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "mime.types", "fonts", "alternatives")
#: Also read, measured: fontconfig's cache (else fc-list scans every font), the CPUs' topology (glibc, OpenMP).
HOST_READS = ("/var/cache/fontconfig", "/sys/devices/system/cpu")
#: What a GPU process may read of /sys (PCI topology, NUMA nodes): bound only where /dev/nvidia* exists, as flatpak
#: does for GPU access. Not measured here (no GPU on the machines this was written on).
SYSFS_GPU = ("/sys/bus", "/sys/class", "/sys/dev", "/sys/devices")
#: What a folder of installed packages is called: those on the grader's sys.path are bound wherever they are.
SITE_FOLDERS = ("site-packages", "dist-packages")
#: The grader's packages besides this one, hidden wherever they are installed.
GRADER_PACKAGES = ("catalogue",)
#: Environment variables passed into the sandbox (all others are cleared).
PASS_ENV = {"NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES"}
PASS_ENV_PREFIXES = ("LC_", "COURSE_")
REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(__file__).resolve().parent
#: Where the kernel finds its connection file inside the sandbox (a read-only copy).
CONNECTION = "/tmp/.connection.json"
#: How the kernel starts: as ``python -m ipykernel_launcher``, with torch imported first (into sys.modules, not into
#: the notebook's namespace), so that a kernel started ahead (autograder/kernels.py) has that second behind it too.
KERNEL_START = """import sys
if sys.path[0] == "":
    del sys.path[0]
try:
    import torch
except ImportError:
    pass
import os
root = os.environ.get("PYTHONPATH", "")
try:
    import course
except BaseException:
    print(f"autograder sandbox: the kernel cannot import the course being graded from {root}/course", file=sys.stderr)
    raise
if os.path.dirname(os.path.dirname(course.__file__)) != root:
    sys.exit(f"autograder sandbox: the kernel imported course from {course.__file__}, not from {root}/course")
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""
#: The first words of the probe's report of a layout problem (available()), and the probe: in the sandbox, the kernel's
#: Python must import ipykernel and find the course graded (PYTHONPATH) before any installed copy.
LAYOUT = "layout: "
PROBE = """import importlib.util, os, sys
try:
    import ipykernel
except ImportError as error:
    sys.exit(f"layout: {sys.executable} cannot import ipykernel ({type(error).__name__}: {error}; sys.path {sys.path})")
spec = importlib.util.find_spec("course")
found = os.path.dirname(spec.origin) if spec and spec.origin else None
wanted = os.path.join(os.environ.get("PYTHONPATH", ""), "course")
if found != wanted:
    sys.exit(f"layout: the kernel finds the course at {found}, not at {wanted}")
"""
#: Set (by autograder/kernels.py) in the launcher's environment to the socket of this worker's fork server for the
#: assignment: the launcher asks it for the kernel instead of starting bwrap (autograder/forkserver.py)
FORK_SERVER_ENV = "AUTOGRADER_FORK_SERVER"
#: where the fork server sees the grading folder (autograder/forkserver.py, which cannot import this file)
STAGING = "/run/.forkserver"
#: what the fork server keeps of root's capabilities (each kernel drops them all): namespaces and mounts, the uid
#: switch, the bounding set, and passing through the kernel folder, which is the kernel uid's
SERVER_CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_OVERRIDE",
                       "CAP_DAC_READ_SEARCH", "CAP_FOWNER")
#: Where the kernel's folder is inside the sandbox (``INSIDE/<assignment>``), wherever it is outside: the submission's
#: folder of nbgrader, or a warm kernel's own (autograder/kernels.py), look the same to the code being graded.
INSIDE = "/tmp/submission"


@dataclass(frozen=True)
class Limits:
    cell_seconds: int = 120  # per-cell wall time (nbgrader's Execute.timeout, interrupt on timeout)
    memory_mb: int = 4096  # per kernel: its memory cgroup where there is one; per process: RLIMIT_DATA (not RLIMIT_AS)
    processes: int = 256  # RLIMIT_NPROC for the kernel's uid (threads count too: torch + ipykernel use ~20)
    output_mb: int = 20  # total stdout/stderr/display text per notebook; past it output is dropped with one note
    file_mb: int = 100  # RLIMIT_FSIZE
    disk_mb: int = 256  # what the kernel may write in its folder on disk (GradingExecute's watchdog kills it past)
    disk_files: int = 4096  # files and folders it may create there

    @property
    def tmp_mb(self) -> int:
        """Size of the private /tmp and /dev/shm (tmpfs, so RAM): 10 files' worth, at most memory_mb."""
        return max(64, min(self.memory_mb, 10 * self.file_mb))


def switches_uid() -> bool:
    """True where kernels can run as a uid of their own (the grader is root and has setpriv)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def describe() -> str:
    """One line: how kernels are isolated on this machine."""
    reason = available()
    if reason:
        return f"no sandbox: {reason}"
    memory = cgroups.describe(*memory_groups())
    memory += f"; kernels import the course graded, {REPO / 'course'}, whatever {sys.executable} installed"
    if switches_uid():
        return ("bwrap sandbox, kernel runs as its own uid (grader is root), warm kernels forked from a fork server; "
                f"{memory}")
    return ("bwrap sandbox without uid switch (grader is not root): the process limit counts all of the "
            f"grader user's processes, and concurrent kernels are not isolated from each other; {memory}")


@lru_cache(maxsize=1)
def memory_groups() -> tuple[dict | None, str]:
    """(where each kernel's memory group is made, or None; why): autograder/cgroups.py, checked by making one."""
    where, reason = cgroups.locate()
    failed = cgroups.probe(where) if where is not None else None
    return (None, failed) if failed else (where, reason)


@lru_cache(maxsize=1)
def available() -> str | None:
    """None when the sandbox works here, else a one-line reason."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox needs Linux (bubblewrap), this is {sys.platform}: pass --no-sandbox on a trusted machine"
    if shutil.which("bwrap") is None:
        return "bwrap is not installed: apt-get install bubblewrap, or pass --no-sandbox on a trusted machine"
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as probe:
        os.chmod(probe, 0o777)
        plan = _plan(Path(probe), Limits(), 61000)
        command = [os.path.abspath(sys.executable), "-c", PROBE]
        argv = bwrap_argv(plan, cwd=Path(probe), ipc=None, kernel_uid=61000 if switches_uid() else None,
                           conn_fd=None, command=command)
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                    preexec_fn=lambda: set_rlimits(plan["limits"]))
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bwrap does not run here ({type(error).__name__}: {error}): pass --no-sandbox on a trusted machine"
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
        layout = [line for line in lines if line.startswith(LAYOUT)]
        if layout:  # bwrap runs, but not the grader's Python or course: turning the sandbox off is no fix
            return (f"the sandbox runs, but in it {layout[-1][len(LAYOUT):]}; the grader's Python is {sys.executable}, "
                    f"the course graded {REPO / 'course'}: a folder it needs is outside what the sandbox binds "
                    "(autograder/sandbox.py, _plan)")
        detail = lines[-1] if lines else f"exit status {result.returncode}"
        return f"bwrap cannot start a sandbox here ({detail[:200]}): pass --no-sandbox on a trusted machine"
    return None


def configure(config, work: Path, limits: Limits = Limits(), uid: int = 61000, hide: Iterable[Path] = ()) -> None:
    """Make nbgrader, run in-process with this config, start every kernel in the sandbox.

    hide: further folders or files the kernel must not see: the batch of submissions (folder or zip), the output
    folder (grades.csv, everyone's feedback) and the parent of work (other workers' course folders). Outside the
    allow-list they are not there anyway; one inside a folder the kernel sees is shown empty (an empty file).

    Writes the kernelspec and launcher plan under work/.sandbox/ and configures the grading steps
    (autograder/execute.py) to use them: GradingKernelManager.kernel_dirs finds the kernelspec,
    Execute.kernel_name/timeout/interrupt_on_timeout, KernelManager.transport = "ipc" with an absolute socket
    prefix, and GradingExecute.output_limit_bytes. The autograde steps must run kernels with GradingExecute
    (nbgrader_config.py names it): plain nbgrader Execute would not find the kernelspec. Changes nothing outside
    config and work.
    """
    work = Path(work).resolve()
    base = work / ".sandbox"
    ipc = base / "ipc"
    ipc.mkdir(parents=True, exist_ok=True)
    # Each kernel's sockets go in a folder of its own in ipc (autograder.execute.GradingKernelManager), handed to the
    # kernel's uid by the launcher: kernels may pass through ipc to their own, never list or write ipc itself.
    os.chmod(ipc, 0o711 if switches_uid() else 0o700)
    plan = _plan(work, limits, uid, hide)
    plan["ipc"] = str(ipc)
    plan["answers"] = _answer_stubs(base / "stubs")
    plan["judges"] = _judges_stub(base / "judges")
    plan["cgroup"], _ = memory_groups()  # None: memory is bounded per process only (RLIMIT_DATA)
    plan["memory_log"] = str(base / "memory.log")
    if plan["cgroup"]:
        cgroups.remove_stale(plan["cgroup"])  # of kernels whose launcher and reaper were killed
    if not os.path.exists(plan["empty"]):
        Path(plan["empty"]).write_bytes(b"")  # bound over hidden files (/dev/null would be unreadable: nodev)
        os.chmod(plan["empty"], 0o444)
    (base / "plan.json").write_text(json.dumps(plan, indent=1))
    spec = base / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, str(Path(__file__).resolve()), str(base / "plan.json"), "{connection_file}"],
        "display_name": "Python 3 (autograder sandbox)",
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {"debugger": False},
    }, indent=1))
    config.GradingKernelManager.kernel_dirs = [str(base / "kernels")]
    config.GradingExecute.sandbox_plan = str(base / "plan.json")

    config.Execute.kernel_name = KERNEL_NAME
    config.Execute.timeout = limits.cell_seconds
    config.Execute.interrupt_on_timeout = True
    config.KernelManager.transport = "ipc"
    config.KernelManager.ip = str(ipc / "kernel")
    config.GradingExecute.output_limit_bytes = limits.output_mb * MB
    config.GradingExecute.disk_limit_bytes = limits.disk_mb * MB
    config.GradingExecute.disk_limit_files = limits.disk_files


# --------------------------------------------------------------------------------------------------------------
# The plan: which folders to hide and bind back, computed in the grader's process (it knows its Python).


def _answer_stubs(folder: Path) -> dict[str, list[list[str]]]:
    """assignment -> [[stub, reference file], ...]: the course modules holding that assignment's answers (and
    those built on them), each to be replaced in the kernel's view by a stub that refuses to be imported."""
    from autograder import course_dir  # noqa: PLC0415 - the launcher (this file as a script) imports nothing of ours

    folder.mkdir(parents=True, exist_ok=True)
    package = REPO / "course"
    plan = {}
    for assignment in course_dir.assignments():
        pairs = []
        for module in course_dir.answer_modules(assignment):
            stub = folder / f"{module}.py"
            stub.write_text(f"raise ImportError('course.{module} holds the answers of an assignment being graded, "
                            "so it is hidden from the code being graded: write the answer yourself.')\n")
            pairs.append([str(stub), str(package / f"{module}.py")])
        plan[assignment] = pairs
    return plan


def _judges_stub(folder: Path) -> list[str]:
    """[stub folder, course/judges]: the judges (oracles, simulated mistakes, reference computations) are hidden
    from every kernel under grading, whatever the assignment, by a package that refuses to be imported."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("raise ImportError('course.judges decides the grades, outside the code being "
                                        "graded; it is hidden here: write the answer yourself.')\n")
    return [str(folder), str(REPO / "course" / "judges")]


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def within(path: str, folder: str) -> bool:
    """True when path is folder or lies under it (as strings: nothing is resolved)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _system() -> list[list[str]]:
    """[bwrap option, source, destination] for what every kernel needs of the host's system, read-only: the
    ROOT_RUNTIME folders as they are here (symlinks stay symlinks), the files of ETC, HOST_READS, and SYSFS_GPU where
    the machine has an NVIDIA GPU."""
    entries = []
    for name in ROOT_RUNTIME:
        path = f"/{name}"
        if os.path.islink(path):
            entries.append(["--symlink", os.readlink(path), path])
        elif os.path.isdir(path):
            entries.append(["--ro-bind", path, path])
    gpu = SYSFS_GPU if any(Path("/dev").glob("nvidia*")) else ()
    for path in [*(f"/etc/{name}" for name in ETC), *HOST_READS, *gpu]:
        if os.path.islink(path) and within(_real(path), "/usr"):  # /etc/localtime -> /usr/share/zoneinfo/...
            entries.append(["--symlink", os.readlink(path), path])
        elif os.path.exists(path):
            entries.append(["--ro-bind", _real(path), path])
    return entries


def _package_folders() -> list[str]:
    """Where the grader's own packages are installed (this one; the catalogue of correct alternatives and simulated
    mistakes), wherever that is: never visible to a kernel, not even inside a bound virtual environment."""
    import importlib.util  # noqa: PLC0415 - the launcher needs none of this

    found = [str(PACKAGE)]
    for name in GRADER_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)  # a top-level package is found without being imported
        except (ImportError, ValueError):
            continue
        found.extend((spec.submodule_search_locations or []) if spec else [])
    return found


def _import_folders() -> list[str]:
    """The folders of the grader's sys.path, wherever they are (a .pth may point outside the prefixes; _plan binds the
    site folders among them, _installed_copies looks in them), less the current folder, what lies in the course
    folder but a site folder (a venv's there is bound; pytest's tests/ on the path is not the kernel's) and any
    checkout of a course (a folder with nbgrader_config.py: its solutions and judges stay out of view)."""
    found = []
    for entry in sys.path:
        path = _real(entry or os.getcwd())
        inside = within(path, _real(REPO)) and os.path.basename(path) not in SITE_FOLDERS
        if (not os.path.isdir(path) or inside or path == _real(os.getcwd())
                or os.path.exists(os.path.join(path, "nbgrader_config.py"))):
            continue
        found.append(path)
    return found


def _installed_copies() -> list[str]:
    """Every copy of the grader's packages and of the course on the grader's sys.path other than the course being
    graded (REPO/course): another checkout's, a wheel's in site-packages. The kernel imports the course from REPO
    (PYTHONPATH); another copy would hold real judges and answers, so each is hidden wherever it is."""
    found = []
    for path in _import_folders():
        for name in ("course", "autograder", *GRADER_PACKAGES):
            copy = os.path.join(path, name)
            if os.path.isdir(copy) and _real(copy) != _real(REPO / "course"):
                found.append(copy)
    return found


def _plan(work: Path, limits: Limits, uid: int, extra: Iterable[Path] = ()) -> dict:
    """What a kernel sees: the allow-list (system, Python, the course package) bound read-only into bwrap's empty
    root; and what must stay hidden although it lies inside one of those (the repository, the grading folder, the
    grader's packages, configure's hide): an empty tmpfs on a folder, an empty file on a file."""
    work = _real(work)
    system = _system()
    bound = [destination for option, _, destination in system if option == "--ro-bind"]
    binds: list[str] = []
    python = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.dirname(_real(sys.executable)))]
    for path in python:
        for form in sorted({os.path.abspath(path), _real(path)}):
            if os.path.isdir(form) and not any(within(form, b) for b in [*bound, *binds]):
                binds = [b for b in binds if not within(b, form)] + [form]
    for path in _import_folders():  # site folders outside the prefixes (a .pth to a shared site-packages, conda-like)
        # only site folders: a PYTHONPATH entry (a home folder, say) is not the kernel's to see
        if os.path.basename(path) in SITE_FOLDERS and not any(within(path, b) for b in [*bound, *binds]):
            binds = [b for b in binds if not within(b, path)] + [path]
    binds.append(str(REPO / "course"))  # its judges and the graded assignment's answers are stubs (bwrap_argv)
    hides: list[str] = []
    blanks: list[str] = []
    for path in sorted({_real(p) for p in [REPO, work, *_package_folders(), *_installed_copies(), *extra]}, key=len):
        covered = any(within(path, b) and path != b for b in [*bound, *binds])
        if not covered or any(within(path, h) for h in hides):
            continue
        if os.path.isdir(path):
            hides.append(path)
        elif os.path.isfile(path):
            blanks.append(path)
    return {"work": work, "system": system, "hide": hides, "blank": blanks,
            "empty": os.path.join(work, ".sandbox", "empty"), "ro_bind": sorted(binds, key=len),
            "limits": asdict(limits), "uid": uid, "course_root": str(REPO),
            "python": os.path.abspath(sys.executable), "venv_bin": os.path.dirname(os.path.abspath(sys.executable))}


# --------------------------------------------------------------------------------------------------------------
# The launcher: kernel.json's argv, run by jupyter_client outside the sandbox with the kernel's cwd.


def set_rlimits(limits: dict) -> None:
    """Lower this process's resource limits to the plan's (never above a hard limit already set)."""

    def cap(which: int, value: int) -> None:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_DATA, limits["memory_mb"] * MB)
    cap(resource.RLIMIT_NPROC, limits["processes"])
    cap(resource.RLIMIT_FSIZE, limits["file_mb"] * MB)
    cap(resource.RLIMIT_CORE, 0)


def kernel_environment(plan: dict, source: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's whole environment, from the grader's (source, default os.environ): only PASS_ENV passes."""
    source = os.environ if source is None else source
    env = {k: v for k, v in source.items() if k in PASS_ENV or k.startswith(PASS_ENV_PREFIXES)}
    env.update({
        "PATH": f"{plan['venv_bin']}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp", "TMPDIR": "/tmp", "USER": "student", "LOGNAME": "student",
        "MPLCONFIGDIR": "/tmp/matplotlib", "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "IPYTHONDIR": "/tmp/.ipython", "XDG_CACHE_HOME": "/tmp/.cache", "PYTHONNOUSERSITE": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        # ipykernel polls for its parent's exit unless JPY_PARENT_PID is 1; in the pid namespace its parent is
        # bwrap's init, so the grader's pid would look dead. --die-with-parent does that job instead.
        "JPY_PARENT_PID": "1",
    })
    env.setdefault("LANG", "C.UTF-8")
    # the course being graded, found (a PathFinder entry) before any course installed in the Python: whatever the
    # layout (a venv of another checkout, a wheel), the kernel imports the course the grader grades
    env["PYTHONPATH"] = plan.get("course_root", str(REPO))
    return env


def bwrap_argv(plan: dict, cwd: Path, ipc: Path | None, kernel_uid: int | None, conn_fd: int | None,
                command: list[str], server: dict[str, str] | None = None) -> list[str]:
    """bwrap's arguments for a kernel in folder cwd (the assignment is its name) or, with server (its environment),
    for the fork server of the assignment cwd.name: the grading folder at forkserver.STAGING instead of the
    kernel's folder, root with the capabilities it needs to build each kernel's namespaces, no uid switch."""
    tmp_size = str(Limits(**plan["limits"]).tmp_mb * MB)
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    # bwrap's own root is an empty tmpfs: nothing of the host is there but what is bound below (read-only at the end)
    made: set[str] = set()
    mounts: list[tuple[str, str]] = []  # (destination, bwrap option), in order: the last one over a path decides

    def place(*options: str) -> None:
        """Add a mount (or symlink) whose destination is last, first creating its parents that are not there (on the
        root or on a tmpfs) readable by all: bwrap would make them 0700, where the kernel's uid could not pass."""
        destination = options[-1]
        for parent in reversed(Path(destination).parents):
            folder = str(parent)
            below = [option for path, option in mounts if within(folder, path) and folder != path]
            on_top = any(folder == path for path, _ in mounts)
            if folder != "/" and folder not in made and not on_top and (not below or below[-1] == "--tmpfs"):
                made.add(folder)
                argv.extend(["--perms", "0755", "--dir", folder])
        argv.extend(options)
        mounts.append((destination, "--tmpfs" if "--tmpfs" in options else options[0]))

    for option, source, destination in plan.get("system", []):
        place(option, source, destination)
    place("--dev", "/dev")
    place("--proc", "/proc")
    for path in ("/tmp", "/dev/shm"):
        place("--perms", "1777", "--size", tmp_size, "--tmpfs", path)
    for device in sorted(Path("/dev").glob("nvidia*")):  # CUDA, when the machine has a GPU
        argv += ["--dev-bind-try", str(device), str(device)]
    # Outermost first: a secret inside a bound folder (a checkout in a venv, say) is hidden by an empty tmpfs (or,
    # a file, an empty file), and what is bound inside that secret (its course package) is bound after it.
    layers = [(path, 0) for path in plan["ro_bind"]] + [(path, 1) for path in plan["hide"]]
    layers += [(path, 2) for path in plan.get("blank", [])]
    for path, kind in sorted(layers, key=lambda layer: (len(layer[0]), layer[1])):
        place(*[("--ro-bind", path), ("--size", str(MB), "--tmpfs"), ("--ro-bind", plan["empty"])][kind], path)
    inside = f"{INSIDE}/{cwd.name}"
    place(*(("--bind", plan["work"], STAGING) if server else ("--bind", str(cwd), inside)))
    if ipc is not None:
        place("--bind", str(ipc), str(ipc))
    stubs, cache = ([], None) if server else hidden_answers(plan, cwd.name)  # a forked kernel hides them itself
    for stub, reference in stubs:
        argv += ["--ro-bind", stub, reference]
    if plan.get("judges"):
        argv += ["--ro-bind", *plan["judges"]]
    if cache:
        argv += ["--size", str(MB), "--tmpfs", cache]
    if conn_fd is not None:
        argv += ["--perms", "0444", "--ro-bind-data", str(conn_fd), CONNECTION]
    for path in plan["hide"]:
        argv += ["--remount-ro", path]
    argv += ["--remount-ro", "/", "--chdir", "/" if server else inside, "--clearenv"]
    for key, value in sorted((server or kernel_environment(plan)).items()):
        argv += ["--setenv", key, value]
    if server:
        for capability in SERVER_CAPABILITIES:
            argv += ["--cap-add", capability]
    elif kernel_uid is not None:
        argv += ["--", "setpriv", f"--reuid={kernel_uid}", f"--regid={kernel_uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all"]
    return [*argv, "--", *command]


def hidden_answers(plan: dict, assignment: str) -> tuple[list[tuple[str, str]], str | None]:
    """What the kernel of an assignment must not see: [(stub, reference)] for each course module holding its answers
    (the stub, which refuses to be imported, is bound over it), and, when there are any, the course's __pycache__
    (their compiled copies: an empty tmpfs is mounted over it)."""
    pairs = [(stub, reference) for stub, reference in plan.get("answers", {}).get(assignment, [])]
    cache = REPO / "course" / "__pycache__"
    return pairs, (str(cache) if pairs and cache.is_dir() else None)


def chown_tree(folder: Path, uid: int) -> None:
    """Hand folder (or a file) and everything under it to uid, without following links."""
    os.lchown(folder, uid, uid)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, uid)


def reclaim(folder: Path) -> None:
    """After the kernel: remove what it left in its folder that nbgrader (maybe root) must not follow or open
    (symlinks, fifos, sockets, devices: writing the graded notebook through a symlink would write outside the
    sandbox with the grader's rights), and give the rest back to the grader's uid."""
    me, group = os.geteuid(), os.getegid()
    for root, dirs, files in os.walk(folder):  # never follows symlinks
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                    os.unlink(path)
                elif info.st_uid != me and me == 0:
                    os.lchown(path, me, group)
            except OSError:
                continue
    if me == 0:
        os.lchown(folder, me, group)


def launch(plan_file: str, connection_file: str, extra: list[str]) -> None:
    """Replace this process by bwrap running ipykernel in the sandbox (never returns)."""
    plan = json.loads(Path(plan_file).read_text())
    info = json.loads(Path(connection_file).read_text())
    cwd = Path(os.getcwd()).resolve()
    if info.get("transport") != "ipc":
        raise SystemExit("autograder sandbox: the kernel must use KernelManager.transport = 'ipc'")
    ipc = Path(info["ip"]).parent.resolve()
    kernel_uid = None
    if switches_uid():
        # Unique among running kernels (this pid is bwrap's until the kernel is gone), so RLIMIT_NPROC and
        # socket permissions separate concurrent kernels, even those of different grading processes.
        kernel_uid = plan["uid"] + os.getpid()
        if kernel_uid in (65534, 65535):  # nobody, and the old (uid16) "no uid"
            kernel_uid += 1 << 22  # above the largest pid
        chown_tree(cwd, kernel_uid)
        if ipc != Path(plan["ipc"]).resolve():  # the kernel's own socket folder (autograder/execute.py)
            os.chown(ipc, kernel_uid, kernel_uid)
    group = _memory_group(plan)
    server = os.environ.get(FORK_SERVER_ENV)
    if server and kernel_uid is not None:
        status = _forked(server, plan, info, cwd, kernel_uid, extra, group)
        if status is not None:
            os._exit(status)
    read, write = os.pipe()
    os.write(write, json.dumps(info).encode())  # a few hundred bytes: fits in the pipe
    os.close(write)
    os.set_inheritable(read, True)
    os.umask(0o077)  # the kernel's sockets and files: its own uid only (root, the grader, still reads them)
    set_rlimits(plan["limits"])
    command = [plan["python"], "-c", KERNEL_START, "-f", CONNECTION, *extra]
    argv = bwrap_argv(plan, cwd, ipc, kernel_uid, read, command)
    if group:  # bwrap and all it starts are in the kernel's group from their first instruction
        cgroups.join(group, os.getpid())
    os.execvp(argv[0], argv)


def _memory_group(plan: dict) -> list[str]:
    """This kernel's memory group (autograder/cgroups.py), made with the plan's limits, removed by a reaper once
    this process (the kernel's launcher) is gone; [] where the plan has none. Exits when it cannot be made: a
    kernel never runs outside its group."""
    if not plan.get("cgroup"):
        return []
    limits = plan["limits"]
    try:
        group = cgroups.create(plan["cgroup"], cgroups.name_for(os.getpid()), limits["memory_mb"] * MB,
                               limits["processes"])
    except OSError as error:
        raise SystemExit(f"autograder sandbox: cannot make the kernel's memory group ({error}); the kernel is not "
                         "started") from error
    cgroups.reap_after(group, os.getpid(), plan.get("memory_log"))
    return group


def _forked(server: str, plan: dict, info: dict, cwd: Path, kernel_uid: int, extra: list[str],
            group: list[str] = ()) -> int | None:
    """Have the worker's fork server (autograder/forkserver.py) start this kernel, with this process's stdin, stdout
    and stderr; wait for it to exit and return its exit status (0-255). None: it was not started, start it cold.
    When this process is killed, the fork server kills the kernel. With a memory group, the server's guardian of
    the kernel says "join" first; this process moves it (its pid from the credentials the kernel attaches to the
    message) into the group, and only then lets it fork the kernel."""
    try:
        folder = str(cwd.relative_to(plan["work"]))
    except ValueError:
        return None
    stubs, cache = hidden_answers(plan, cwd.name)
    try:
        stubs = [(str(Path(stub).relative_to(plan["work"])), reference) for stub, reference in stubs]
    except ValueError:
        return None
    request = {"connection": info, "connection_path": CONNECTION, "folder": folder, "assignment": cwd.name,
               "stubs": stubs, "cache": cache, "cache_bytes": MB,
               "inside": INSIDE, "uid": kernel_uid, "env": kernel_environment(plan), "argv": ["-f", CONNECTION, *extra],
               "tmp_bytes": Limits(**plan["limits"]).tmp_mb * MB,
               "cgroup": os.path.basename(group[0]) if group else None, "cgroup_count": len(group)}
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the guardian's pid, as this pid namespace sees it
        conn.connect(server)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        if group:
            line, pid = _line_with_sender(conn)
            if line != b"join\n" or not pid or pid < 0:  # 0: not visible here (and "0" would move this process)
                raise OSError(f"answered {line[:200]!r} instead of asking to join the kernel's memory group")
            cgroups.join(group, pid)
            if not cgroups.member(group, pid):
                raise OSError(f"its guardian (pid {pid}) is not in the kernel's memory group")
            conn.sendall(b"go\n")
        replies = conn.makefile("rb")
        first = replies.readline()
    except OSError as error:
        print(f"autograder sandbox: no fork server ({error}); starting the kernel cold", file=sys.stderr)
        return None
    if first != b"started\n":
        print(f"autograder sandbox: the fork server {first.decode(errors='replace').strip() or 'closed'}; starting "
              "the kernel cold", file=sys.stderr)
        return None
    last = replies.readline()  # until the kernel exits
    return int(last.split()[1]) & 0xFF if last.startswith(b"exit ") else 1


def _line_with_sender(conn: socket.socket) -> tuple[bytes, int | None]:
    """One line from conn, and the pid of the process that sent it (SCM_CREDENTIALS: checked by the kernel)."""
    line, pid = b"", None
    while not line.endswith(b"\n") and len(line) < 4096:
        data, ancillary, _, _ = conn.recvmsg(4096 - len(line), socket.CMSG_SPACE(12))
        if not data:
            break
        line += data
        for level, kind, value in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(value) >= 12:
                pid = int.from_bytes(value[:4], sys.byteorder)
    return line, pid


if __name__ == "__main__":
    launch(sys.argv[1], sys.argv[2], sys.argv[3:])
