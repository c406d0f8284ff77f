"""Student code graded in the bubblewrap sandbox: it still computes with torch and the course package, but
reaches no network, reads no secrets, writes only its own folder and /tmp, and is held to its limits.

Real kernels, started from the kernelspec that autograder.sandbox.configure writes: two notebooks (one for
isolation with the default limits, one with tiny limits) run through GradingExecute, nbgrader's Execute step as the
course configures it (autograder/execute.py), and one tiny assignment goes through NbGraderAPI.autograde in-process.
"""

import importlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from jupyter_core.paths import jupyter_runtime_dir
from nbformat.v4 import new_code_cell, new_notebook
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder import cgroups, sandbox
from autograder.execute import GradingExecute
from autograder.kernels import close_servers, pool

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"sandbox unavailable: {sandbox.available()}")

REPO = Path(__file__).resolve().parents[1]
MARK = "987654321"  # argument of the sleepers that must not outlive their kernel


def make_work(root: Path) -> tuple[Path, Path]:
    """A grading folder like grade.py's, with secrets the kernel must not see; returns (work, kernel cwd)."""
    work = root / "course"
    cwd = work / "autograded" / "alice" / "a1"
    cwd.mkdir(parents=True)
    (work / "gradebook.db").write_text("hidden tests")
    for folder in ["source/a1", "submitted/alice/a1", "autograded/bob/a1"]:
        (work / folder).mkdir(parents=True, exist_ok=True)
        (work / folder / "secret.txt").write_text("secret")
    return work, cwd


#: how a kernel is started: by bwrap when its notebook starts (cold), or forked from the fork server of the sandbox
#: (autograder/forkserver.py), which GradingExecute uses for warm kernels where the grader is root
STARTS = ["cold", "forked"]


def run(work: Path, cwd: Path, limits: sandbox.Limits, cells: dict[str, str], hide=(), start: str = "cold"
        ) -> dict[str, str]:
    """Execute the cells in one sandboxed kernel; each cell's outputs as text, and the seconds it all took."""
    if start == "forked" and not sandbox.switches_uid():
        pytest.skip("kernels are forked only where the grader is root")
    config = Config()
    sandbox.configure(config, work, limits, hide=hide)
    if start == "forked":
        config.GradingExecute.kernel_folders = str(work / ".kernels")
    code = ["import sys; print('matplotlib.pyplot' in sys.modules)", *cells.values()]  # imported by the server
    nb = new_notebook(cells=[new_code_cell(c) for c in code])
    started = time.perf_counter()
    try:
        nb, _ = GradingExecute(config=config).preprocess(nb, {"metadata": {"path": str(cwd)}})
    finally:
        pool().close_under(work)
        close_servers(work)
    out = {"seconds": time.perf_counter() - started}
    preloaded = "".join(o.get("text", "") for o in nb.cells.pop(0).outputs).strip()
    assert preloaded == str(start == "forked"), f"asked for a {start} kernel; pyplot preloaded: {preloaded}"
    for name, cell in zip(cells, nb.cells, strict=True):
        texts = []
        for output in cell.outputs:
            if output.output_type == "stream":
                texts.append(output.text)
            elif output.output_type == "error":
                texts.append(f"{output.ename}: {output.evalue}")
            else:
                texts.append(str(output.get("data", {}).get("text/plain", "")))
        out[name] = "".join(texts)
    return out


def sandbox_processes(work: Path) -> set[str]:
    """'pid: command line' of this machine's processes that are the sleepers or mention the grading folder."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if (f"sleep {MARK}" in cmdline or str(work) in cmdline) and proc.name.isdigit():
            found.add(f"{proc.name}: {cmdline[:200]}")
    return found


# ------------------------------------------------------------------------------------------------ isolation

@pytest.fixture(scope="module", params=STARTS)
def isolated(tmp_path_factory, request):
    work, cwd = make_work(tmp_path_factory.mktemp("isolation"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=2):  # reachable from outside the sandbox
        pass
    home_files = [p for p in Path.home().glob("*") if p.is_file() and os.access(p, os.R_OK)]
    secrets = [work / "gradebook.db", work / "source/a1/secret.txt", work / "submitted/alice/a1/secret.txt",
               work / "autograded/bob/a1/secret.txt",
               REPO / ".git/HEAD" if (REPO / ".git").is_dir() else REPO / ".git",  # a worktree: .git is a file
               next((REPO / "source").rglob("*.ipynb")), *home_files[:1]]
    # Folders given to configure(hide=...), outside the places hidden anyway: the batch, the output folder.
    outside = Path(tempfile.mkdtemp(dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else Path.home()))
    request.addfinalizer(lambda: shutil.rmtree(outside, ignore_errors=True))
    (outside / "out").mkdir()
    (outside / "out" / "grades.csv").write_text("alice,10")
    (outside / "batch.zip").write_text("everyone's notebooks")
    for path in [outside, outside / "out", outside / "out" / "grades.csv", outside / "batch.zip"]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # another checkout of the course on the same host, outside /tmp, readable by everyone (its answers are in it)
    other = outside / "other-course"
    shutil.copytree(REPO / "course", other / "course", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [other, *other.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    secrets += [outside / "out" / "grades.csv"]
    for path in secrets:
        assert path.read_bytes() is not None  # readable here, so a failure inside means the sandbox
    cells = {
        "whoami": "import os, socket; print(socket.gethostname(), os.getuid(), os.getcwd())",
        "privileges": "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
                      "print({k: status[k].strip() for k in ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',"
                      " 'NoNewPrivs', 'Groups']}, os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()]))",
        "compute": "import torch, numpy, matplotlib.pyplot as plt, course\n"
                   "x = torch.arange(6.).reshape(2, 3)\n"
                   "print('torch', (x @ x.T).sum().item(), 'numpy', numpy.arange(4).sum(), 'course', course.__name__)",
        "network": "import socket\n"
                   f"for address in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
                   "    s = socket.socket(); s.settimeout(3)\n"
                   "    try:\n        s.connect(address); print('CONNECTED', address)\n"
                   "    except OSError as e:\n        print('blocked', address, type(e).__name__)\n"
                   "try:\n    socket.getaddrinfo('pypi.org', 443); print('RESOLVED')\n"
                   "except OSError as e:\n    print('no dns', type(e).__name__)",
        "write": "import os\n"
                 f"for path in ['mine.txt', '/tmp/mine.txt', {str(REPO / 'evil.txt')!r},"
                 f" {str(REPO / 'course/evil.py')!r},"
                 f" {str(work / 'source/a1/evil.txt')!r}, {str(work / 'evil.txt')!r}, '/usr/evil.txt']:\n"
                 "    try:\n        open(path, 'w').write('x'); print('wrote', path)\n"
                 "    except OSError as e:\n        print('refused', path, type(e).__name__)",
        "read": f"for path in {[str(p) for p in secrets]!r}:\n"
                "    try:\n        open(path).read(); print('READ', path)\n"
                "    except OSError as e:\n        print('unreadable', path, type(e).__name__)\n"
                f"import os\nprint('runtime', os.listdir({jupyter_runtime_dir()!r})"
                f" if os.path.isdir({jupyter_runtime_dir()!r}) else 'absent')\n"
                f"print('root', os.listdir('/root'))\n"
                f"print('zip', os.path.exists({str(outside / 'batch.zip')!r}))\n"
                f"print('autograded', os.path.exists({str(work / 'autograded')!r}))",
        "elsewhere": f"import os\nprint('var/tmp', os.path.exists({str(outside)!r}))\n"
                     f"for path in [{str(other / 'course/multi_head.py')!r}, {str(REPO / 'catalogue/multi_head.py')!r},"
                     f" {str(REPO / 'autograder/sandbox.py')!r}, {str(REPO / 'README.md')!r}]:\n"
                     "    try:\n        open(path).read(); print('READ', path)\n"
                     "    except OSError as e:\n        print('unreadable', path, type(e).__name__)\n"
                     "for name in ['catalogue', 'catalogue.multi_head', 'autograder', 'autograder.sandbox']:\n"
                     "    try:\n        __import__(name); print('IMPORTED', name)\n"
                     "    except ImportError as e:\n        print('refused', name)",
        "inventory": "import json, os, sys\n"
                     "def names(path):\n"
                     "    return sorted(os.listdir(path)) if os.path.isdir(path) else None\n"
                     f"repo = {str(REPO)!r}\n"
                     "files = sorted(os.path.relpath(os.path.join(root, f), repo) for root, dirs, fs in os.walk(repo)"
                     " if '__pycache__' not in root.split(os.sep) for f in fs)\n"
                     "print(json.dumps({'/': names('/'), **{p: names(p) for p in ['/etc', '/var', '/sys', '/run',"
                     " '/home', '/root', '/opt', '/var/tmp', '/srv', '/mnt', os.path.join(sys.prefix, 'share')]},"
                     f" 'ways': {{p: names(p) for p in {sorted(_ways())!r}}},"
                     " 'shadow': [p for p in ['/etc/shadow', '/etc/gshadow', '/etc/ssh', '/etc/ssl/private',"
                     " '/etc/sudoers'] if os.path.lexists(p)], 'repo': files}))",
        "traps": "import os\n"
                 f"os.symlink({str(REPO / 'README.md')!r}, 'trap.ipynb'); os.symlink('/etc', 'trapdir');"
                 " os.mkfifo('fifo')\n"
                 "print('traps set')",
        "leave": "import subprocess\n"
                 f"subprocess.Popen(['sleep', '{MARK}'], start_new_session=True)\n"
                 f"subprocess.Popen(['sh', '-c', '(sleep {MARK} &) ; exit 0'], start_new_session=True).wait()\n"
                 "print('left sleepers')",
    }
    before = sandbox_processes(work)  # leftovers of earlier runs are not this kernel's
    try:
        # and one inside a folder the kernel sees (the venv's share/, which no kernel reads), as a grader's package
        # installed in site-packages would be
        inner = [Path(sys.prefix) / "share"] if (Path(sys.prefix) / "share").is_dir() else []
        result = run(work, cwd, sandbox.Limits(cell_seconds=60), cells,
                     hide=[outside / "out", outside / "batch.zip", *inner], start=request.param)
    finally:
        listener.close()
    deadline = time.monotonic() + 10
    while sandbox_processes(work) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    result["survivors"] = sorted(sandbox_processes(work) - before)
    result["cwd"] = cwd
    result["work"] = work
    return result


def test_kernel_runs_in_the_sandbox(isolated):
    host, uid, cwd = isolated["whoami"].split()
    assert host == "sandbox", isolated["whoami"]
    assert cwd == f"{sandbox.INSIDE}/a1"  # wherever the folder is outside
    if os.geteuid() == 0:
        assert int(uid) != 0, "the kernel must not run as root"


def test_the_kernel_has_no_privileges_and_sees_only_its_own_processes(isolated):
    """No capability at all (not even in the bounding set, which setpriv and forkserver.py empty), no new privileges
    (no setuid program can give any back), no groups; pid 2 under its namespace's init, and the two of them alone."""
    text = isolated["privileges"]
    caps = {k: "0000000000000000" for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]}
    if os.geteuid() == 0:
        assert text.startswith(repr({**caps, "NoNewPrivs": "1", "Groups": ""})), text
    assert text.split("}")[1].split() == ["2", "2"], text


def test_torch_numpy_matplotlib_and_course_import_and_compute(isolated):
    assert "torch 83.0 numpy 6 course course" in isolated["compute"], isolated["compute"]


def test_no_network_not_even_the_graders_loopback(isolated):
    text = isolated["network"]
    assert "CONNECTED" not in text and "RESOLVED" not in text, text
    assert text.count("blocked") == 3 and "no dns" in text, text


def test_writes_only_to_its_folder_and_tmp(isolated):
    text = isolated["write"]
    assert "wrote mine.txt" in text and "wrote /tmp/mine.txt" in text, text
    assert "wrote /" not in text.replace("wrote /tmp/mine.txt", ""), text
    assert text.count("refused") == 5, text
    assert (isolated["cwd"] / "mine.txt").read_text() == "x"
    assert not (REPO / "evil.txt").exists() and not (isolated["work"] / "evil.txt").exists()


def test_reads_no_gradebook_sources_other_students_repo_or_home(isolated):
    text = isolated["read"]
    assert "READ" not in text, text
    # Not there at all (hidden), rather than refused by file permissions that another setup may not have.
    assert text.count("FileNotFoundError") == text.count("unreadable") >= 6, text
    assert "autograded False\n" in text, text  # no student's graded folder is there, not even alice's own path
    assert "zip False\n" in text, text  # nothing outside the allow-list is there at all
    runtime = text.split("runtime ", 1)[1].splitlines()[0]
    assert ".json" not in runtime, f"connection files visible: {runtime}"


def test_another_checkout_of_the_course_is_not_there(isolated):
    """A copy of course/ elsewhere on the host (here under /var/tmp, readable by all) holds every answer."""
    text = isolated["elsewhere"]
    assert "var/tmp False" in text, text
    assert "/other-course/course/multi_head.py FileNotFoundError" in text, text


def test_the_catalogue_and_the_autograder_are_neither_readable_nor_importable(isolated):
    """The catalogue holds correct alternatives and simulated mistakes; the autograder, the judges' callers."""
    text = isolated["elsewhere"]
    assert "\nREAD " not in f"\n{text}" and "IMPORTED" not in text, text
    for path in ["catalogue/multi_head.py", "autograder/sandbox.py", "README.md"]:
        assert f"{REPO / path} FileNotFoundError" in text, text
    assert text.count("refused") == 4, text


#: what a kernel sees at / besides the Python installation and the course package: the system's runtime (merged /usr
#: or not), a few files of /etc, the CPUs' topology in /sys, the font cache, fresh /dev, /proc and /tmp
SYSTEM = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "sys", "var", "dev", "proc", "tmp"}
#: of /etc, what Python, glibc, matplotlib (fontconfig) and ipykernel read (measured with strace: autograder/sandbox.py)
ETC = {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "mime.types", "fonts", "alternatives"}


def _inventory(isolated) -> dict:
    return json.loads(isolated["inventory"])


def test_the_root_holds_only_the_allow_list(isolated):
    seen = _inventory(isolated)
    own = {Path(p).parts[1] for p in [sys.base_prefix, sys.prefix, REPO, isolated["work"]]}
    assert set(seen["/"]) <= SYSTEM | own | {"run"}, seen["/"]
    assert seen.get("/run") in (None, []), "the fork server's /run must be empty in a kernel"
    assert set(seen["/etc"]) <= ETC, seen["/etc"]
    gpu = ["bus", "class", "dev", "devices"] if list(Path("/dev").glob("nvidia*")) else []  # sandbox.SYSFS_GPU
    assert seen["/var"] in (None, ["cache"]), seen["/var"]
    assert seen["/sys"] in (None, ["devices"], gpu), seen["/sys"]
    for folder in ["/opt", "/var/tmp", "/srv", "/mnt"]:
        assert seen[folder] is None, f"{folder} is there: {seen[folder]}"


def test_no_home_no_root_and_no_secrets_of_etc(isolated):
    """/home and /root are not there, or hold only the way to the Python installation (pyenv's, here), the virtual
    environment or the course package; every folder on those ways shows only them."""
    seen = _inventory(isolated)
    assert seen["shadow"] == [], seen["shadow"]
    for folder in ["/home", "/root"]:
        if folder not in _ways():
            assert seen[folder] is None, f"{folder} is there: {seen[folder]}"
    for folder, names in seen["ways"].items():
        assert names == _ways()[folder], f"{folder} shows {names}, not only {_ways()[folder]}"


def _ways() -> dict[str, list[str]]:
    """Each folder above what a kernel needs of the host (Python, venv, course package) outside /tmp, and the
    names in it that lead there: all it may show."""
    ways: dict[str, set[str]] = {}
    for place in {os.path.abspath(p) for p in [sys.base_prefix, sys.prefix, REPO / "course"]}:
        for parent in Path(place).parents:
            if str(parent) != "/" and not sandbox.within(str(parent), "/tmp"):
                ways.setdefault(str(parent), set()).add(Path(place).relative_to(parent).parts[0])
    return {folder: sorted(names) for folder, names in ways.items()}


def test_what_must_stay_hidden_inside_a_folder_the_kernel_sees_is_empty(isolated):
    """A grader's package installed in the venv, the repository inside a venv...: an empty folder in the kernel."""
    share = Path(sys.prefix) / "share"
    if not share.is_dir() or not any(share.iterdir()):
        pytest.skip("the venv has no share/ folder to hide")
    assert _inventory(isolated)[str(share)] == [], "a hidden folder inside the venv shows its files"


def test_the_graders_packages_are_planned_hidden_wherever_they_are_installed(tmp_path):
    """autograder and catalogue: hidden where they lie inside a bound folder (a venv's site-packages), absent else."""
    assert {str(REPO / "autograder"), str(REPO / "catalogue")} <= set(sandbox._package_folders())
    venv = Path(sys.prefix)
    plan = sandbox._plan(tmp_path, sandbox.Limits(), 61000, [venv / "bin", venv / "pyvenv.cfg", "/var/tmp"])
    assert str(venv / "bin") in plan["hide"] and str(venv / "pyvenv.cfg") in plan["blank"], plan
    assert "/var/tmp" not in plan["hide"] + plan["blank"], "outside the allow-list there is nothing to hide"


def test_a_shared_environment_is_bound_and_every_other_copy_of_the_course_hidden(tmp_path, monkeypatch):
    """A hub's layout: the Python imports from a shared environment outside its own prefix (a .pth names it), which
    holds the course and the grader installed as a wheel, while the instructor grades a checkout. The kernel gets the
    shared packages, but imports the course only from the checkout (whose judges and answers are stubbed): every
    other copy of course, autograder and catalogue is hidden, and the checkout comes first on its path."""
    shared = tmp_path / "shared" / "site-packages"
    for name in ("course", "autograder", "catalogue"):
        (shared / name / "judges").mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [*sys.path, str(shared)])
    plan = sandbox._plan(tmp_path / "work", sandbox.Limits(), 61000)
    assert str(shared) in plan["ro_bind"], "the shared packages are not in the kernel's view"
    assert {str(shared / n) for n in ("course", "autograder", "catalogue")} <= set(plan["hide"]), plan["hide"]
    assert str(REPO / "course") in plan["ro_bind"] and str(REPO / "course") not in plan["hide"]
    assert sandbox.kernel_environment(plan, {})["PYTHONPATH"] == str(REPO)


def test_of_the_repository_only_the_course_package_is_there(isolated):
    """Every file under the repository root, in the kernel: course/ less the judges (a stub that refuses to be
    imported), and the virtual environment where it lies in the checkout; never catalogue/, autograder/, source/,
    solutions/, .git or another file of the repository."""
    venv = Path(sys.prefix).resolve()
    seen = {p for p in _inventory(isolated)["repo"] if not sandbox.within(str(REPO / p), str(venv))}
    course = {str(p.relative_to(REPO)) for p in (REPO / "course").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and "judges" not in p.relative_to(REPO / "course").parts}
    assert seen == course | {"course/judges/__init__.py"}, (sorted(seen - course), sorted(course - seen))


def test_kernel_folder_is_given_back_without_links_or_fifos(isolated):
    assert "traps set" in isolated["traps"], isolated["traps"]
    left = list(isolated["cwd"].rglob("*"))
    assert [p.name for p in left if p.is_symlink() or not (p.is_file() or p.is_dir())] == []
    assert {p.lstat().st_uid for p in [isolated["cwd"], *left]} == {os.geteuid()}


def test_no_process_survives_the_kernel(isolated):
    assert "left sleepers" in isolated["leave"], isolated["leave"]
    assert isolated["survivors"] == []


# --------------------------------------------------------------------------------------------------- limits

@pytest.fixture(scope="module", params=STARTS)
def limited(tmp_path_factory, request):
    work, cwd = make_work(tmp_path_factory.mktemp("limits"))
    limits = sandbox.Limits(cell_seconds=3, memory_mb=1024, processes=64, output_mb=1, file_mb=5)
    cells = {
        "threads": "import threading\nstop = threading.Event(); started = []\n"
                   "try:\n    for _ in range(1000):\n"
                   "        t = threading.Thread(target=stop.wait); t.start(); started.append(t)\n"
                   "    print('STARTED', len(started))\n"
                   "except RuntimeError as e:\n    print('stopped at', len(started), e)\n"
                   "stop.set()\nfor t in started: t.join()",
        "fork": "import os, signal, time\nchildren = []\n"
                "try:\n    for _ in range(1000):\n        pid = os.fork()\n"
                "        if pid == 0:\n            time.sleep(30); os._exit(0)\n        children.append(pid)\n"
                "    print('FORKED', len(children))\n"
                "except OSError as e:\n    print('stopped at', len(children), e)\n"
                "for pid in children:\n    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)",
        "memory": "import numpy as np\n"
                  "try:\n    big = np.ones(10 * 1024**3, dtype=np.uint8); print('ALLOCATED', big.nbytes)\n"
                  "except MemoryError:\n    print('MemoryError')",
        "after_memory": "print('alive', sum(range(10)))",
        "file": "try:\n    open('big.bin', 'wb').write(b'x' * (10 * 1024**2)); print('WROTE')\n"
                "except OSError as e:\n    print('file limit', e.strerror)",
        "sleep": "import time; slept = time.monotonic(); time.sleep(1000)",
        "after_sleep": "print('alive after timeout', round(time.monotonic() - slept))",
        "flood": "for _ in range(100):\n    print('x' * 10**6)",
    }
    started = time.perf_counter()
    result = run(work, cwd, limits, cells, start=request.param)
    result["total"] = time.perf_counter() - started
    result["cwd"] = cwd
    return result


def test_threads_and_fork_bomb_stopped_by_process_limit(limited):
    for name in ["threads", "fork"]:
        text = limited[name]
        assert "stopped at" in text, f"{name}: {text}"
        assert int(text.split("stopped at ")[1].split()[0]) < 64, text


def test_allocating_10_gb_fails_and_the_kernel_lives_on(limited):
    assert "MemoryError" in limited["memory"] and "ALLOCATED" not in limited["memory"], limited["memory"]
    assert "alive 45" in limited["after_memory"]


def test_file_size_limit(limited):
    assert "file limit" in limited["file"], limited["file"]
    assert (limited["cwd"] / "big.bin").stat().st_size <= 5 * 1024**2


def test_cell_timeout_interrupts_sleep(limited):
    assert "CellTimeoutError" in limited["sleep"] or "KeyboardInterrupt" in limited["sleep"], limited["sleep"]
    assert "alive after timeout" in limited["after_sleep"], limited["after_sleep"]
    assert int(limited["after_sleep"].split()[-1]) < 3 + 10, "the 3 s timeout did not stop the cell in time"


def test_printing_100_mb_is_cut_to_the_output_limit(limited):
    text = limited["flood"]
    assert "output limit of 1 MB reached" in text, text[-300:]
    assert len(text) <= 1024**2 + 200, len(text)


# --------------------------------------------------------------------------------------- nbgrader, in-process

def test_nbgrader_autograde_runs_the_submission_in_the_sandbox(tmp_path):
    work = tmp_path / "course"
    source = work / "source" / "a1"
    source.mkdir(parents=True)
    answer = new_code_cell("### BEGIN SOLUTION\nanswer = 42\n### END SOLUTION", metadata={"nbgrader": {
        "grade": False, "solution": True, "locked": False, "task": False, "grade_id": "answer", "schema_version": 3}})
    check = new_code_cell(
        "import os, pathlib\n"
        "assert answer == 42\n"
        f"assert os.environ['NBGRADER_EXECUTION'] == 'autograde'\n"
        f"assert str(pathlib.Path.cwd()) == {sandbox.INSIDE + '/a1'!r}, os.getcwd()\n"
        f"assert sorted(os.listdir({str(work)!r})) == ['.sandbox'], 'grading folder not hidden'\n"
        f"for secret in [{str(work / 'gradebook.db')!r}, {str(source / 'a1.ipynb')!r}]:\n"
        "    try:\n        open(secret).read()\n    except OSError:\n        pass\n"
        "    else:\n        raise AssertionError('read ' + secret)",
        metadata={"nbgrader": {"grade": True, "solution": False, "locked": True, "task": False,
                               "grade_id": "check", "points": 2, "schema_version": 3}})
    nbformat.write(new_notebook(cells=[answer, check]), source / "a1.ipynb")

    scripts = str(Path(sys.executable).parent)  # nbgrader runs alembic from PATH
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    config = Config()
    config.CourseDirectory.root = str(work)
    config.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
    config.Autograde.autograde_preprocessors = ["autograder.execute.GradingExecute",
                                                "nbgrader.preprocessors.SaveAutoGrades"]
    sandbox.configure(config, work, sandbox.Limits(cell_seconds=60))
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    assert api.generate_assignment("a1")["success"]
    submitted = work / "submitted" / "alice" / "a1"
    submitted.mkdir(parents=True)
    shutil.copy(work / "release" / "a1" / "a1.ipynb", submitted / "a1.ipynb")
    solved = nbformat.read(submitted / "a1.ipynb", as_version=4)
    solved.cells[0].source = "answer = 42"
    nbformat.write(solved, submitted / "a1.ipynb")

    result = api.autograde("a1", "alice")
    assert result["success"], result.get("log")
    graded = nbformat.read(work / "autograded" / "alice" / "a1" / "a1.ipynb", as_version=4)
    errors = [o for o in graded.cells[1].outputs if o.output_type == "error"]
    assert not errors, errors
    with Gradebook(config.CourseDirectory.db_url) as gradebook:
        assert gradebook.find_submission("a1", "alice").score == 2


@pytest.mark.parametrize("start", STARTS)
def test_references_holding_the_graded_answers_are_hidden(tmp_path, start):
    """Grading 04: course.multi_head (its answers) and what imports it are stubs; earlier references work; the judges
    (oracles, simulated mistakes) cannot be imported, read or listed, while the probes can."""
    importlib.import_module("course.multi_head")  # leaves a compiled copy in course/__pycache__, if writable
    importlib.import_module("course.judges.self_attention")  # and of the judges in course/judges/__pycache__
    work = tmp_path / "course"
    cwd = work / "autograded" / "alice" / "04_multi_head"
    cwd.mkdir(parents=True)
    reference = REPO / "course" / "multi_head.py"
    out = run(work, cwd, sandbox.Limits(cell_seconds=60), {
        "own": "try:\n    from course.multi_head import MultiHeadAttention\n    print('IMPORTED')\n"
               "except ImportError as e:\n    print('refused:', e)",
        "later": "try:\n    import course.transformer_block\n    print('IMPORTED')\n"
                 "except ImportError as e:\n    print('refused')",
        "earlier": "from course.scaling import scaled_dot_product_attention\nprint('earlier ok')",
        "read": f"print('class MultiHeadAttention' in open({str(reference)!r}).read())",
        "judges": "try:\n    import course.judges.self_attention\n    print('IMPORTED')\n"
                  "except ImportError as e:\n    print('refused:', e)\n"
                  f"import os\nprint('listed', sorted(os.listdir({str(REPO / 'course' / 'judges')!r})))\n"
                  "import course.checks.self_attention as probes\nprint('probes', probes.hand_x().shape)",
        "catalogue": "try:\n    import catalogue.self_attention\n    print('IMPORTED')\n"
                     "except ImportError:\n    print('refused')",
        "cache": f"import os\nd = {str(REPO / 'course' / '__pycache__')!r}\n"
                 "print('compiled', [f for f in os.listdir(d) if 'multi_head' in f] if os.path.isdir(d) else [])",
    }, start=start)
    assert "refused: course.multi_head holds the answers" in out["own"]
    assert out["later"].strip() == "refused"
    assert "earlier ok" in out["earlier"]
    assert out["read"].strip() == "False"
    assert out["cache"].strip() == "compiled []"
    assert out["catalogue"].strip() == "refused", "the catalogue's correct alternatives are answers"
    assert "refused: course.judges decides the grades" in out["judges"], out["judges"]
    assert "listed ['__init__.py']" in out["judges"], out["judges"]
    assert "probes torch.Size([1, 3, 2])" in out["judges"], out["judges"]


# --------------------------------------------------------------------------------------- memory, per kernel

#: the memory limit of these tests: small, so that twice it does not stress a shared machine
MEMORY_MB = 512
#: code that holds twice the limit in memory no per-process limit sees (RLIMIT_DATA counts private mappings only);
#: each prints HELD if it got it all. Files stay under file_mb (RLIMIT_FSIZE applies to memfds and tmpfs too)
HOGS = {
    "memfd": "import os\nheld = []\nfor _ in range(2 * {mb} // 64):\n"
             "    fd = os.memfd_create('hog'); os.write(fd, b'x' * (64 << 20)); held.append(fd)\nprint('HELD')",
    "shared-mapping": "import mmap\nheld = []\nfor _ in range(2 * {mb} // 64):\n"
                      "    m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_SHARED); m.write(b'x' * (64 << 20)); "
                      "held.append(m)\nprint('HELD')",
    "tmpfs": "held = 0\nfor folder in ['/dev/shm', '/tmp']:\n    for i in range({mb} // 64):\n"
             "        try:\n            open(f'{{folder}}/hog{{i}}', 'wb').write(b'x' * (64 << 20)); held += 64\n"
             "        except OSError:\n            break\n"
             "print('HELD' if held >= 2 * {mb} - 128 else f'FULL at {{held}} MB')",
}


def memory_log(work: Path) -> list[dict]:
    """The reaper's lines in work/.sandbox/memory.log (autograder/cgroups.py): one per kernel group removed."""
    path = work / ".sandbox" / "memory.log"
    deadline = time.monotonic() + 10  # the last kernel's reaper writes after that kernel is gone
    lines = []
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        groups = [line.split()[1] for line in lines]
        if groups and not any(Path(p, g).exists() for g in groups for p in _group_parents()):
            break
        time.sleep(0.1)
    return [{"group": f[1], "peak": int(f[3]), "oom_kills": int(f[5])} for f in (line.split() for line in lines)]


def _group_parents() -> list[str]:
    where, _ = cgroups.locate()
    return [where["memory"], *([where["pids"]] if where.get("pids") else [])] if where else []


needs_cgroup = pytest.mark.skipif(cgroups.locate()[0] is None, reason=f"no memory cgroup: {cgroups.locate()[1]}")


@needs_cgroup
@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("hog", sorted(HOGS))
def test_a_kernel_holding_twice_its_memory_is_killed_alone_near_the_limit(tmp_path, hog, start):
    """Memfds, shared mappings and tmpfs pages escape RLIMIT_DATA; the kernel's memory group counts them: the kernel
    is OOM-killed near memory_mb, that cell scores 0 (its message says memory), the next cell runs in a new kernel,
    and the group is removed once the kernel is gone."""
    work, cwd = make_work(tmp_path)
    limits = sandbox.Limits(cell_seconds=60, memory_mb=MEMORY_MB)
    out = run(work, cwd, limits, {"hog": HOGS[hog].format(mb=MEMORY_MB), "after": "print('alive', 6 * 7)"},
              start=start)
    assert "HELD" not in out["hog"], f"the kernel held {2 * MEMORY_MB} MB with a limit of {MEMORY_MB} MB: {out}"
    assert "The grader stopped this cell" in out["hog"] and "memory" in out["hog"], out["hog"]
    assert "alive 42" in out["after"], out["after"]
    groups = memory_log(work)
    killed = [g for g in groups if g["oom_kills"]]
    assert killed, f"no kernel group saw an OOM kill: {groups}"
    peak = max(g["peak"] for g in killed)
    print(f"{hog}, {start}: peak {peak / sandbox.MB:.0f} MB of {MEMORY_MB} MB")  # -s shows the measured peaks
    assert 0.8 * MEMORY_MB * sandbox.MB <= peak <= MEMORY_MB * sandbox.MB, peak
    left = [g["group"] for g in groups for p in _group_parents() if Path(p, g["group"]).exists()]
    assert left == [], f"kernel groups left behind: {left}"


@needs_cgroup
def test_describe_says_memory_is_bounded_per_kernel():
    assert "memory bounded per kernel by a cgroup" in sandbox.describe(), sandbox.describe()
