"""Warm kernels (autograder/kernels.py): each worker starts the next submission's kernel while the current one runs.

Real kernels, in the sandbox when it works here, graded in-process by a Workspace as a worker grades: warm and cold
grading give byte-identical grades, feedback and reports; a kernel handed to one student carries nothing of
another's; a waiting kernel that died or hangs is replaced and the batch goes on.
"""

import filecmp
import os
import signal
import time

import nbformat
import pytest
from conftest import complete_submission, use_sandbox
from nbformat.v4 import new_code_cell

from autograder import sandbox
from autograder.grade import grade
from autograder.kernels import _servers, pool
from autograder.notebooks import filled
from autograder.workspace import Job, Options, Workspace
from catalogue import mistakes

pytestmark = pytest.mark.slow

A = "01_self_attention"
NOTEBOOK = "self_attention.ipynb"
#: what the first student leaves behind, in every place a kernel could carry it to the next
LEAVE = ("import os, sys, pathlib\n"
         "pathlib.Path('left.txt').write_text('x'); pathlib.Path('/tmp/left.txt').write_text('x')\n"
         "os.environ['LEFT_BY_ANN'] = '1'; sys.modules['os'].left_by_ann = 1\n"
         "print('left', os.getpid())")
LOOK = ("import os, sys, pathlib\n"
        "print('traces', pathlib.Path('left.txt').exists(), pathlib.Path('/tmp/left.txt').exists(),\n"
        "      'LEFT_BY_ANN' in os.environ, hasattr(sys.modules['os'], 'left_by_ann'), sorted(os.listdir('.')),\n"
        "      'matplotlib.pyplot' in sys.modules)")  # imported before the notebook: by a fork server


def _submission(first_cell: str | None = None) -> bytes:
    nb = complete_submission(A, NOTEBOOK)
    if first_cell:
        nb.cells.insert(0, new_code_cell(first_cell))
    return nbformat.writes(nb).encode()


def _tree(pid: int) -> list[int]:
    """pid and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _kernel_processes(warm) -> list[int]:
    """A started kernel's processes: its launcher's process tree and, where the kernel runs as a uid of its own
    (a root grader), every process of that uid (a forked kernel is the fork server's child, not the launcher's)."""
    found = _tree(warm.km.provisioner.process.pid)
    uid = warm.slot.stat().st_uid
    if uid != os.geteuid():
        found += [int(e) for e in os.listdir("/proc") if e.isdigit() and _owner(int(e)) == uid]
    return sorted(set(found))


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _printed(workspace: Workspace, student: str, marker: str) -> str:
    nb = nbformat.read(workspace.root / "autograded" / student / A / NOTEBOOK, as_version=4)
    texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    return next(t for t in texts if t.startswith(marker))


def test_a_warm_kernel_carries_nothing_of_the_student_before_and_a_dead_or_hung_one_is_replaced(tmp_path):
    workspace = Workspace(tmp_path / "worker", Options((A,), sandbox=use_sandbox()))
    handed = dict(pool().handed)
    ann = workspace.grade(Job("ann", A, {NOTEBOOK: _submission(LEAVE)}, [], {}))
    bob = workspace.grade(Job("bob", A, {NOTEBOOK: _submission(LOOK)}, [], {}))
    assert pool().handed["waiting"] == handed["waiting"] + 1, "bob's kernel was not the one started during ann's"
    assert ann.grade.score == bob.grade.score == ann.grade.max_score, (ann.grade, bob.grade)
    assert "left" in _printed(workspace, "ann", "left")
    forked = use_sandbox() and sandbox.switches_uid()  # where the grader can, kernels are forked (forkserver.py)
    # bob's folder is empty while his kernel runs: ann's files are gone, and his own notebook waits outside its view
    assert _printed(workspace, "bob", "traces") == f"traces False False False False [] {forked}\n"

    waiting = [w for w in pool().waiting() if workspace.root.resolve() in w.slot.resolve().parents]
    assert len(waiting) == 1, waiting
    os.kill(waiting[0].km.provisioner.process.pid, signal.SIGKILL)  # the kernel waiting for the next submission dies
    started = pool().handed["started"]
    cid = workspace.grade(Job("cid", A, {NOTEBOOK: _submission()}, [], {}))
    assert cid.grade.score == cid.grade.max_score and cid.grade.status == "graded", cid.grade
    assert pool().handed["started"] == started + 1  # a new kernel, started when the dead one was found

    waiting = [w for w in pool().waiting() if workspace.root.resolve() in w.slot.resolve().parents]
    assert len(waiting) == 1, waiting
    hung = _kernel_processes(waiting[0])
    for pid in hung:  # the kernel waiting for the next submission hangs: it never answers
        os.kill(pid, signal.SIGSTOP)
    workspace.api.config.Execute.startup_timeout = 5  # nbclient's wait for a kernel to answer (60 s by default)
    replaced, begun = pool().handed["replaced"], time.monotonic()
    dan = workspace.grade(Job("dan", A, {NOTEBOOK: _submission()}, [], {}))
    assert dan.grade.score == dan.grade.max_score and dan.grade.status == "graded", dan.grade
    assert pool().handed["replaced"] == replaced + 1  # a cold kernel, started when the hung one timed out
    assert time.monotonic() - begun < 60, "the hung kernel was waited for longer than the startup timeout"
    assert not any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in hung), "the hung kernel lives"

    if forked:  # the fork server dies (and with it the kernel it forked for the next submission): a new one serves
        mine = workspace.root.resolve()  # this process may hold other tests' servers too
        servers = {id(server): server for server in _servers().values() if server.alive() and server.work == mine}
        assert len(servers) == 1, servers
        for server in servers.values():
            server.process.kill()
            server.process.wait()
        eve = workspace.grade(Job("eve", A, {NOTEBOOK: _submission(LOOK)}, [], {}))
        assert eve.grade.score == eve.grade.max_score, eve.grade
        assert _printed(workspace, "eve", "traces").endswith(" True\n"), "eve's kernel was not forked"
        assert [id(s) for s in _servers().values() if s.alive() and s.work == mine] not in ([], list(servers))
    workspace.close()
    assert not [s for s in _servers().values() if s.work == workspace.root.resolve()], "a fork server outlived it"
    assert not [w for w in pool().waiting() if workspace.root.resolve() in w.slot.resolve().parents]


def test_warm_and_cold_grading_give_identical_grades_feedback_and_report(tmp_path):
    batch = tmp_path / "batch"
    mistake = mistakes(A)[0]
    for student, nb in {"ann": complete_submission(A, NOTEBOOK),
                        "bob": filled(complete_submission(A, NOTEBOOK), {mistake.cell: mistake.code})}.items():
        (batch / student / A).mkdir(parents=True)
        nbformat.write(nb, batch / student / A / NOTEBOOK)
    rows = {}
    for warm in (True, False):
        rows[warm] = grade(batch, tmp_path / f"out-{warm}", [A], sandbox=use_sandbox(), progress=False, warm=warm)
    assert rows[True] == rows[False]
    assert [r.score < r.max_score for r in rows[True]] == [False, True], rows[True]
    compared = filecmp.dircmp(tmp_path / "out-True", tmp_path / "out-False")
    different = []

    def walk(cmp: filecmp.dircmp) -> None:
        different.extend(cmp.diff_files + cmp.left_only + cmp.right_only)
        for sub in cmp.subdirs.values():
            walk(sub)

    walk(compared)
    assert not different, different
    files = sorted(p.relative_to(tmp_path / "out-True") for p in (tmp_path / "out-True").rglob("*") if p.is_file())
    assert {"grades.csv", "report.md"} <= {str(f) for f in files} and any(f.suffix == ".html" for f in files), files
