"""nbgrader's Execute step as the course grades with it: bounded output, time and disk, and a kernel death costs one
cell.

:class:`GradingExecute` replaces ``nbgrader.preprocessors.Execute`` in the autograde steps (nbgrader_config.py):

- output past ``output_limit_bytes`` per notebook is dropped, with one note (a flood of prints cannot fill the
  feedback or the grader's memory). Every kind of output counts, as it arrives: stream, display_data,
  update_display_data (which rewrites an earlier output in place), execute_result and error; clearing output does
  not give the budget back. An error past the limit is kept, cut short, once per cell (so a failing cell still
  shows that it failed);
- ``notebook_timeout`` bounds the wall time of the whole notebook (reruns included): a cell runs at most until the
  budget ends, and the cells after it are not run (their tests find no evidence and score 0), with a note;
- ``disk_limit_bytes`` and ``disk_limit_files`` bound what the kernel writes in its folder (and in the sandbox's
  socket folder, the only other place on disk it can write): a watchdog thread measures both every
  ``disk_poll_seconds`` (0.05 s), and past either limit kills the kernel (and, in the sandbox, everything it started),
  removes everything the kernel wrote (its evidence too: the notebook scores 0), and notes why;
- when the kernel dies during a cell (a crash in compiled code, a memory or process limit, a timeout it does
  not survive), that cell is replaced by a line that raises, and the notebook runs again from the top in a new
  kernel, so that cell scores 0 and the rest is graded; the cells stopped are noted in the notebook's metadata;
- while the kernel runs, its folder holds nothing the student wrote: the submitted notebook (its metadata and
  outputs too) and nbgrader's files beside it wait in a folder outside every kernel's view, and come back after
  (the kernel reads only the code nbgrader sends it, so a resubmission cannot carry answers for its seed in a file);
- after every run, what the kernel left in its folder that nbgrader (maybe as root) must not follow or open is
  removed, and the rest given back to the grader (autograder.sandbox.reclaim).

Its kernels are started by :class:`GradingKernelManager`, which finds kernelspecs in folders the configuration
names (the sandbox's) and gives the kernel environment variables of its own (its thread count), so grading never
changes the grader's own process environment.
"""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from nbgrader.preprocessors.execute import UnresponsiveKernelError
from traitlets import Dict, Float, Integer, List, Unicode, default

from autograder.kernels import SEED_CODE, UNKNOWN, Warm, fork_server, move_entries, pool, remove_slot, stop
from autograder.notebooks import add_note, grade_id, merge_streams
from autograder.sandbox import FORK_SERVER_ENV, reclaim
from autograder.secret import notebook_seed
from course.checks import seeds
from course.checks.evidence import FOLDER

MB = 1024 * 1024
#: what a cell that killed the kernel is replaced with when the notebook runs again
STUB = ("raise RuntimeError('The grader stopped this cell: the Python kernel died while it ran "
        "(a crash, or a limit of memory, processes or time). It scores 0; the rest was graded.')")
#: how a run can end because the kernel did not survive a cell
KERNEL_LOST = (DeadKernelError, CellTimeoutError, UnresponsiveKernelError, TimeoutError)
#: how a row and a log say that the kernel raised a Python exception before it answered (its course does not
#: import, its Python lacks a module): the same on every try, so grading tries once (autograder/workspace.py)
FAILED_AT_START = "the kernel raised an exception at start, which another try would repeat"
#: the last line of a Python traceback on the kernel's stderr, or the fork server's one-line report of one
#: ("autograder fork server, run_kernel: ImportError: ...")
STARTUP_EXCEPTION = re.compile(r"^(?:autograder fork server, [\w ]+: )?([A-Za-z_][\w.]*(?:Error|Exception)\b.*)$")
#: the kernel messages that become outputs of the notebook, all counted against the output limit
OUTPUT_MESSAGES = {"stream", "display_data", "update_display_data", "execute_result", "error"}
#: what an error past the output limit keeps: its name, the start of its value, the end of its traceback
ERROR_KEPT = {"ename": 200, "evalue": 1000, "traceback": 2000}


def message_size(content) -> int:
    """Characters of text in a message's content (keys, strings, numbers), counted without copying it."""
    size, stack = 0, [content]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, dict):
            size += sum(len(k) if isinstance(k, str) else 8 for k in item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            size += 1
            stack.extend(item)
        else:
            size += 8
    return size


def cut_error(content: dict, note: str) -> dict:
    """An error output's content cut to a few kilobytes: name, start of the value, end of the traceback."""
    lines, kept = [], 0
    for line in reversed([str(x) for x in content.get("traceback") or [] if isinstance(x, str)]):
        if kept + len(line) > ERROR_KEPT["traceback"]:
            break
        lines.insert(0, line)
        kept += len(line)
    return {"ename": str(content.get("ename", "Error"))[:ERROR_KEPT["ename"]],
            "evalue": str(content.get("evalue", ""))[:ERROR_KEPT["evalue"]], "traceback": [note, *lines]}


def folder_usage(folders: list[Path], max_bytes: int, max_files: int) -> tuple[int, int]:
    """(bytes, files and folders) under the folders, without following links; stops counting once past a limit."""
    size = count = 0
    stack = [str(f) for f in folders if f.is_dir()]
    while stack and size <= max_bytes and count <= max_files:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                count += 1
                if size > max_bytes or count > max_files:
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                else:  # apparent size, or the blocks of a file whose holes were filled in
                    size += max(info.st_size, getattr(info, "st_blocks", 0) * 512)
    return size, count


def entries_under(folder: Path) -> set[str]:
    """Relative paths of everything under folder (not following links)."""
    found = set()
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            found.add(os.path.relpath(os.path.join(root, name), folder))
    return found


def remove_new(folder: Path, keep: set[str]) -> None:
    """Remove everything under folder whose relative path is not in keep (what the kernel wrote)."""
    for root, dirs, files in os.walk(folder, topdown=True):
        for name in list(dirs):
            path = os.path.join(root, name)
            if os.path.relpath(path, folder) not in keep:
                dirs.remove(name)
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
        for name in files:
            path = os.path.join(root, name)
            if os.path.relpath(path, folder) not in keep:
                try:
                    os.unlink(path)
                except OSError:
                    pass


class DiskWatchdog:
    """A thread that measures the kernel's folders every interval and calls kill() once they pass a limit."""

    def __init__(self, folders, max_bytes: int, max_files: int, interval: float, kill):
        self.folders, self.max_bytes, self.max_files, self.interval, self.kill = folders, max_bytes, max_files, \
            interval, kill
        self.breach = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            size, count = folder_usage(self.folders(), self.max_bytes, self.max_files)
            if size > self.max_bytes or count > self.max_files:
                what = f"{self.max_bytes // MB} MB" if size > self.max_bytes else f"{self.max_files} files"
                self.breach = f"the kernel wrote more than its disk quota of {what} in its folder"
                self.kill()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class KernelStartError(RuntimeError):
    """The kernel died before it answered, having raised a Python exception (its stderr says which)."""


def startup_exception(stderr: str) -> str:
    """The exception a kernel raised before it answered, as its stderr's last traceback line states it ("ImportError:
    ..."); empty when its stderr holds none (it was killed, timed out, or bwrap failed: maybe not for good)."""
    found = [m.group(1) for m in map(STARTUP_EXCEPTION.match, (line.strip() for line in stderr.splitlines())) if m]
    return found[-1][:300] if found else ""


class GradingKernelManager(AsyncKernelManager):
    """A kernel manager that searches the configured kernelspec folders first and adds environment variables."""

    kernel_dirs = List(Unicode(), help="kernelspec folders searched before Jupyter's own").tag(config=True)
    kernel_env = Dict(Unicode(), help="environment variables the kernel gets on top of the grader's").tag(config=True)

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self) -> KernelSpecManager:
        specs = KernelSpecManager(data_dir=self.data_dir)
        specs.kernel_dirs = [*self.kernel_dirs, *specs.kernel_dirs]
        return specs

    #: this kernel's own socket folder (transport ipc, the sandbox's), made when it starts, removed with it
    own_sockets: Path | None = None

    #: what the kernel's process writes on its stderr before ipykernel captures it (the launcher, bwrap, the fork
    #: server's messages, a kernel dying at start): an unlinked file, read by :meth:`stderr_tail` when it died
    stderr_file = None

    async def _async_pre_start_kernel(self, **kw):
        kw["env"] = {**kw.get("env", os.environ), **self.kernel_env}
        if self.stderr_file is None:
            self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115 - kept for the manager's life, closed by GC
        kw.setdefault("stderr", self.stderr_file)
        if self.transport == "ipc" and self.ip and self.own_sockets is None:
            # a folder of its own in the sandbox's socket folder (which kernels may pass through, not list or write):
            # nothing one kernel makes there is seen by, or counted against, another; the launcher hands it to the
            # kernel's uid (autograder/sandbox.py). A short name: a socket's path must fit in 107 bytes.
            self.own_sockets = Path(tempfile.mkdtemp(prefix="", dir=Path(self.ip).parent))
            self.ip = str(self.own_sockets / "k")
        return await super()._async_pre_start_kernel(**kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if self.own_sockets is not None and not restart:
            shutil.rmtree(self.own_sockets, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources  # as AsyncKernelManager's: awaited

    def stderr_tail(self, limit: int = 8000) -> str:
        """The end of what the kernel wrote on its stderr (read without moving the offset it writes at)."""
        if self.stderr_file is None:
            return ""
        size = os.fstat(self.stderr_file.fileno()).st_size
        start = max(0, size - limit)
        return os.pread(self.stderr_file.fileno(), size - start, start).decode(errors="replace")


class GradingExecute(Execute):
    """nbgrader's Execute with limits on output, time and disk, and a rerun without the cell whenever the kernel
    dies."""

    output_limit_bytes = Integer(20 * MB, help="total output text kept per notebook").tag(config=True)
    max_stopped_cells = Integer(8, help="kernel-killing cells stopped before grading gives up").tag(config=True)
    notebook_timeout = Integer(0, help="wall time in seconds the whole notebook may run, reruns included; past it "
                                       "the remaining cells are not run (0: no limit)").tag(config=True)
    disk_limit_bytes = Integer(256 * MB, help="bytes the kernel may write in its folder (0: no limit)").tag(config=True)
    disk_limit_files = Integer(4096, help="files and folders the kernel may create in its folder (0: no limit)"
                               ).tag(config=True)
    disk_poll_seconds = Float(0.05, help="how often the kernel's folder is measured").tag(config=True)
    secret = Unicode("", help="the course secret (hex); empty: autograder.secret.course_secret()").tag(config=True)
    sandbox_plan = Unicode("", help="the sandbox's plan.json (autograder.sandbox.configure): warm kernels are forked "
                                    "from a fork server in that sandbox where the grader can (autograder/kernels.py)"
                            ).tag(config=True)
    kernel_folders = Unicode("", help="where kernels are started ahead, each in an empty folder of its own (warm "
                                      "kernels, autograder/kernels.py); empty: each kernel starts when its notebook "
                                      "does, in the notebook's folder").tag(config=True)

    @default("shutdown_kernel")
    def _shutdown_immediately(self) -> str:
        """The last cell has run and its records are on disk: nothing the kernel could still do counts, so it is
        killed rather than asked to exit (nbgrader's graceful shutdown waits up to a second for it)."""
        return "immediate"

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", GradingKernelManager)
        super().__init__(*args, **kwargs)
        self._output_bytes, self._output_noted, self._running, self._skipped = 0, False, None, []
        self._cut_errors: set[int] = set()
        self._deadline: float | None = None
        self._seed: int | None = None
        self._kernel: Warm | None = None  # the warm kernel of the current run

    def preprocess(self, nb, resources=None, km=None):
        original = copy.deepcopy(nb)
        # the seed comes from the notebook as submitted, before any cell is stopped, and stays for the judge
        self._seed = notebook_seed(self.secret, resources, original) if resources is not None else None
        folder = ((resources or {}).get("metadata") or {}).get("path")
        name = f"{(resources or {}).get('nbgrader', {}).get('notebook', 'notebook')}.ipynb"
        self._deadline = time.monotonic() + self.notebook_timeout if self.notebook_timeout > 0 else None
        before = entries_under(Path(folder)) if folder else set()
        aside = _set_aside(Path(folder)) if folder else None
        try:
            return self._run_all(nb, resources, km, original, folder, name, before)
        finally:
            if aside is not None:
                _put_back(aside, Path(folder))

    def _run_all(self, nb, resources, km, original, folder, name, before):
        """preprocess's runs (a new kernel after each that died in a cell), with the folder holding only what the
        kernel writes."""
        breach = ""
        stopped: list[int] = []
        warm = bool(self.kernel_folders and folder and km is None)
        cold = False  # a warm kernel that never became ready is replaced by one started now
        while True:
            attempt = copy.deepcopy(original)
            for index in stopped:
                attempt.cells[index].source = STUB
            self._output_bytes, self._output_noted, self._running, self._skipped = 0, False, None, []
            self._cut_errors: set[int] = set()
            running_in, waited = folder, False
            if warm:  # the kernel's folder: what it writes goes back to the submission's folder after the run
                waited = self._hand_out(original, Path(folder).name, cold)
                move_entries(Path(folder), self._kernel.slot, _owner(self._kernel.slot))
                running_in = str(self._kernel.slot)
            watchdog = self._watch(Path(running_in)) if running_in else None
            try:
                nb, resources = super().preprocess(attempt, resources, km=km)
                break
            except Exception as error:
                if watchdog is not None and watchdog.breach:
                    nb = attempt
                    break
                if waited and self._running is None and not cold:
                    cold = True  # the waiting kernel failed before any cell ran: once more with a fresh one
                    continue
                if (not isinstance(error, KERNEL_LOST) or self._running is None or self._running in stopped
                        or len(stopped) >= self.max_stopped_cells):
                    raise
                stopped.append(self._running)
                if running_in:  # records of the run that died are not this run's
                    shutil.rmtree(Path(running_in) / FOLDER, ignore_errors=True)
            finally:  # the kernel and everything in its pid namespace are gone now
                if watchdog is not None:
                    watchdog.stop()
                    breach = watchdog.breach
                if warm:  # nbclient shut it down, unless its start failed half-way
                    stop(self._kernel.km)
                if running_in:
                    reclaim(Path(running_in))
                if warm:
                    move_entries(self._kernel.slot, Path(folder))
                    remove_slot(self._kernel.slot)
                    self._kernel = None
                self._clean_sockets()
        if breach:
            remove_new(Path(folder), before)
            add_note(nb, "notes", f"{name}: {breach}; it was stopped and everything it wrote removed, so this "
                                  "notebook's tests found no evidence and score 0")
        elif self._deadline is not None and time.monotonic() >= self._deadline:
            skipped = f": {len(self._skipped)} cell(s) were not run and score 0" if self._skipped else ""
            add_note(nb, "notes", f"{name}: the notebook ran out of its time budget of {self.notebook_timeout} s"
                                  f"{skipped}")
        for index in stopped:
            add_note(nb, "stopped", f"{name} cell {grade_id(nb.cells[index]) or index}")
        if self._seed is not None:  # for the instructor's records and tests; the judge takes it from resources
            add_note(nb, "seed", str(self._seed))
        return nb, resources

    # ------------------------------------------------------------------------------------------- kernels

    def create_kernel_manager(self):
        """The warm kernel handed out for this run (already started: nbclient starts no other), else nbclient's
        own manager, whose kernel starts in the notebook's folder."""
        if self._kernel is not None:
            self.km = self._kernel.km
            return self.km
        return super().create_kernel_manager()

    async def async_start_new_kernel_client(self):
        """nbclient's client, once the kernel is ready; then the kernel gets this submission's secret grading seed,
        silently (the probes draw every input from it; the judge derives the same seed itself,
        autograder/judging.py). Warm and cold kernels get it alike."""
        km = self.km  # nbclient forgets it when the start fails
        try:
            kc = await super().async_start_new_kernel_client()
        except RuntimeError as error:  # "Kernel died before replying to kernel_info": say why, from the kernel itself
            tail = km.stderr_tail().strip() if hasattr(km, "stderr_tail") else ""
            if not tail:
                raise
            raised = startup_exception(tail)
            if raised:  # no kernel will start until the course or the Python is mended: grading tries once
                raise KernelStartError(f"{FAILED_AT_START}: {raised}\nthe kernel's own stderr:\n{tail}") from error
            raise RuntimeError(f"{error}; the kernel's own stderr:\n{tail}") from error
        if self._seed is not None:
            code = SEED_CODE.format(name=seeds.ENV, value=str(self._seed))
            reply = await self.async_wait_for_reply(kc.execute(code, silent=True, store_history=False,
                                                               allow_stdin=False))
            if not reply or reply["content"].get("status") != "ok":
                raise RuntimeError(f"the kernel did not take the grading seed: {reply and reply['content']}")
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)  # what Execute's setup_kernel calls

    def _kernel_key(self, nb, assignment: str) -> tuple:
        """What a kernel is started with: a waiting kernel is handed out only for the same."""
        name = self.kernel_name or nb.metadata.get("kernelspec", {}).get("name") or ""
        env = self.config.get("GradingKernelManager", {}).get("kernel_env", {})
        return (self.kernel_folders, name, assignment, tuple(self._kernel_arguments(name)),
                tuple(sorted(dict(env).items())),
                os.environ.get("NBGRADER_EXECUTION"), os.environ.get("NBGRADER_VALIDATING"))

    def _kernel_arguments(self, name: str) -> list[str]:
        """The arguments nbclient would start the kernel with (async_start_new_kernel)."""
        arguments = list(self.extra_arguments)
        if (name in {"python", "python2", "python3"} and self.ipython_hist_file
                and not any(a.startswith("--HistoryManager.hist_file") for a in arguments)):
            arguments.append(f"--HistoryManager.hist_file={self.ipython_hist_file}")
        return arguments

    def _start_kernel(self, name: str, assignment: str) -> Warm:
        slot = pool().slot(Path(self.kernel_folders), assignment)
        km = self.kernel_manager_class(kernel_name=name, config=self.config) if name else \
            self.kernel_manager_class(config=self.config)
        server = fork_server(self.sandbox_plan, km.kernel_env) if self.sandbox_plan else None
        env = {"env": {**os.environ, FORK_SERVER_ENV: server}} if server else {}
        try:
            run_sync(km.start_kernel)(extra_arguments=self._kernel_arguments(name), cwd=str(slot), **env)
        except BaseException:
            remove_slot(slot)
            raise
        return Warm(km, slot)

    def _hand_out(self, nb, assignment: str, cold: bool) -> bool:
        """Take this run's kernel (the waiting one unless cold) and start the next one; True when it was waiting."""
        key = self._kernel_key(nb, assignment)
        name = key[1]
        if cold:
            pool().handed["replaced"] += 1
            self._kernel, waited = self._start_kernel(name, assignment), False
        else:
            self._kernel, waited = pool().take(key, lambda: self._start_kernel(name, assignment))
        upcoming = assignment if pool().upcoming == UNKNOWN else pool().upcoming
        if upcoming:  # the next submission's kernel starts now, while this one runs
            pool().prepare(self._kernel_key(nb, upcoming), lambda: self._start_kernel(name, upcoming))
        return waited


    # ------------------------------------------------------------------------------------------- time

    def preprocess_cell(self, cell, resources, index):
        self._running = index
        if cell.cell_type == "code" and self._deadline is not None and time.monotonic() >= self._deadline:
            self._skipped.append(index)
            cell.outputs = [new_output("error", ename="NotRun", evalue="the notebook's time budget ran out",
                                       traceback=[f"[autograder: not run: the notebook's time budget of "
                                                  f"{self.notebook_timeout} s ran out before this cell]"])]
            return cell, resources
        cell, resources = super().preprocess_cell(cell, resources, index)
        if cell.cell_type == "code":
            merge_streams(cell)  # identical feedback however the kernel's messages were split
        return cell, resources

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, math.ceil(self._deadline - time.monotonic()))
        return left if timeout is None else min(timeout, left)

    # ------------------------------------------------------------------------------------------- disk

    def _watch(self, folder: Path) -> DiskWatchdog | None:
        if self.disk_limit_bytes <= 0 and self.disk_limit_files <= 0:
            return None
        max_bytes = self.disk_limit_bytes if self.disk_limit_bytes > 0 else 1 << 62
        max_files = self.disk_limit_files if self.disk_limit_files > 0 else 1 << 62
        return DiskWatchdog(lambda: [folder, *self._socket_folder()], max_bytes, max_files, self.disk_poll_seconds,
                            self._kill_kernel)

    def _socket_folder(self) -> list[Path]:
        """The running kernel's own folder of unix sockets (transport ipc, the sandbox's): writable by the kernel."""
        own = getattr(getattr(self, "km", None), "own_sockets", None)
        return [own] if own is not None else []

    def _clean_sockets(self) -> None:
        """Remove the finished kernel's socket folder with all it holds (jupyter_client's clean-up removes it too,
        when it runs)."""
        for folder in self._socket_folder():
            shutil.rmtree(folder, ignore_errors=True)

    def _kill_kernel(self) -> None:
        """Kill the kernel's process now (in the sandbox: bwrap, and with it the kernel's whole pid namespace)."""
        km = getattr(self, "km", None)
        process = getattr(getattr(km, "provisioner", None), "process", None)
        if process is not None:
            try:
                process.send_signal(signal.SIGKILL)
            except (OSError, ValueError):
                pass

    # ------------------------------------------------------------------------------------------- output

    def process_message(self, msg, cell, cell_index):
        kind = msg.get("msg_type") or (msg.get("header") or {}).get("msg_type")
        if kind in OUTPUT_MESSAGES:
            content = msg.get("content") or {}
            size = message_size(content)
            if self._output_bytes + size > self.output_limit_bytes:
                if kind != "error" or cell_index in self._cut_errors:
                    self._note_limit(cell.outputs)
                    return None
                self._cut_errors.add(cell_index)
                msg["content"] = content = cut_error(content, self._limit_note("this error was cut short"))
                size = message_size(content)
            self._output_bytes += size
        return super().process_message(msg, cell, cell_index)

    def on_cell_executed(self, **kwargs):
        """nbgrader adds the reply's error to the cell when no output showed it: that one counts too."""
        cell, index = kwargs["cell"], kwargs.get("cell_index")
        before = len(cell.outputs)
        super().on_cell_executed(**kwargs)
        for position in range(before, len(cell.outputs)):
            output = cell.outputs[position]
            size = message_size(dict(output))
            if self._output_bytes + size > self.output_limit_bytes:
                if index in self._cut_errors:
                    del cell.outputs[position:]
                    break
                self._cut_errors.add(index)
                output = NotebookNode({"output_type": "error",
                                       **cut_error(output, self._limit_note("this error was cut short"))})
                cell.outputs[position] = output
                size = message_size(dict(output))
            self._output_bytes += size

    def _limit_note(self, what: str) -> str:
        return f"[autograder: output limit of {self.output_limit_bytes // MB} MB reached; {what}]"

    def _note_limit(self, outs: list) -> None:
        if not self._output_noted:
            self._output_noted = True
            outs.append(new_output("stream", name="stdout",
                                   text=f"\n{self._limit_note('further output of this notebook was dropped')}\n"))


def _set_aside(folder: Path) -> Path:
    """Move everything in the kernel's folder (the submitted notebook with its metadata and outputs, nbgrader's
    timestamp.txt and submission_secret.txt) to a folder beside it, outside every kernel's view, for as long as the
    kernel runs: the kernel reads nothing the student wrote but the code nbgrader sends it, so nothing the student
    put in a file (records computed for a seed a first submission printed, say) can reach a probe."""
    aside = folder.parent / f".{folder.name}.aside"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(mode=0o700)
    move_entries(folder, aside)
    return aside


def _put_back(aside: Path, folder: Path) -> None:
    """After the kernel: the set-aside files back in the folder, over anything the kernel wrote under their names."""
    for entry in os.listdir(aside):
        target = folder / entry
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        elif target.exists() or target.is_symlink():
            target.unlink()
    move_entries(aside, folder)
    aside.rmdir()


def _owner(folder: Path) -> int | None:
    """The uid the kernel runs as, to hand it the files moved into its folder: only a root grader switches uid."""
    return folder.stat().st_uid if os.geteuid() == 0 else None
