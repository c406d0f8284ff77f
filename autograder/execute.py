"""nbgrader's Execute step as the course grades with it: bounded output, and a kernel death costs one cell.

:class:`GradingExecute` replaces ``nbgrader.preprocessors.Execute`` in the autograde steps (nbgrader_config.py):

- output past ``output_limit_bytes`` per notebook is dropped, with one note (a flood of prints cannot fill the
  feedback or the grader's memory);
- when the kernel dies during a cell (a crash in compiled code, a memory or process limit, a timeout it does
  not survive), that cell is replaced by a line that raises, and the notebook runs again from the top in a new
  kernel, so that cell scores 0 and the rest is graded; the cells stopped are noted in the notebook's metadata;
- after every run, what the kernel left in its folder that nbgrader (maybe as root) must not follow or open is
  removed, and the rest given back to the grader (autograder.sandbox.reclaim).

Its kernels are started by :class:`GradingKernelManager`, which finds kernelspecs in folders the configuration
names (the sandbox's) and gives the kernel environment variables of its own (its thread count), so grading never
changes the grader's own process environment.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from nbgrader.preprocessors.execute import UnresponsiveKernelError
from traitlets import Dict, Integer, List, Unicode, default

from autograder.notebooks import add_note, grade_id
from autograder.sandbox import reclaim
from course.checks.evidence import FOLDER

MB = 1024 * 1024
#: what a cell that killed the kernel is replaced with when the notebook runs again
STUB = ("raise RuntimeError('The grader stopped this cell: the Python kernel died while it ran "
        "(a crash, or a limit of memory, processes or time). It scores 0; the rest was graded.')")
#: how a run can end because the kernel did not survive a cell
KERNEL_LOST = (DeadKernelError, CellTimeoutError, UnresponsiveKernelError, TimeoutError)


class GradingKernelManager(AsyncKernelManager):
    """A kernel manager that searches the configured kernelspec folders first and adds environment variables."""

    kernel_dirs = List(Unicode(), help="kernelspec folders searched before Jupyter's own").tag(config=True)
    kernel_env = Dict(Unicode(), help="environment variables the kernel gets on top of the grader's").tag(config=True)

    @default("kernel_spec_manager")
    def _kernel_spec_manager_default(self) -> KernelSpecManager:
        specs = KernelSpecManager(data_dir=self.data_dir)
        specs.kernel_dirs = [*self.kernel_dirs, *specs.kernel_dirs]
        return specs

    async def _async_pre_start_kernel(self, **kw):
        kw["env"] = {**kw.get("env", os.environ), **self.kernel_env}
        return await super()._async_pre_start_kernel(**kw)


class GradingExecute(Execute):
    """nbgrader's Execute with an output limit, and a rerun without the cell whenever the kernel dies."""

    output_limit_bytes = Integer(20 * MB, help="total output text kept per notebook").tag(config=True)
    max_stopped_cells = Integer(8, help="kernel-killing cells stopped before grading gives up").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", GradingKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        original = copy.deepcopy(nb)
        stopped: list[int] = []
        folder = ((resources or {}).get("metadata") or {}).get("path")
        while True:
            attempt = copy.deepcopy(original)
            for index in stopped:
                attempt.cells[index].source = STUB
            self._output_bytes, self._output_noted, self._running = 0, False, None
            try:
                nb, resources = super().preprocess(attempt, resources, km=km)
                break
            except KERNEL_LOST:
                if self._running is None or self._running in stopped or len(stopped) >= self.max_stopped_cells:
                    raise
                stopped.append(self._running)
                if folder:  # records of the run that died are not this run's
                    shutil.rmtree(Path(folder) / FOLDER, ignore_errors=True)
            finally:  # the kernel and everything in its pid namespace are gone now
                if folder:
                    reclaim(Path(folder))
        for index in stopped:
            cell = nb.cells[index]
            add_note(nb, "stopped", f"{(resources or {}).get('nbgrader', {}).get('notebook', 'notebook')}.ipynb "
                                    f"cell {grade_id(cell) or index}")
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        self._running = index
        return super().preprocess_cell(cell, resources, index)

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        size = len(content.get("text", "") or "")
        size += sum(len(str(v)) for v in (content.get("data") or {}).values())
        size += sum(len(line) for line in (content.get("traceback") or []))
        self._output_bytes = getattr(self, "_output_bytes", 0) + size
        if self._output_bytes > self.output_limit_bytes and msg["msg_type"] != "error":
            if not getattr(self, "_output_noted", False):
                self._output_noted = True
                note = (f"\n[autograder: output limit of {self.output_limit_bytes // MB} MB reached;"
                        " further output of this notebook was dropped]\n")
                outs.append(new_output("stream", name="stdout", text=note))
            return None
        return super().output(outs, msg, display_id, cell_index)
