"""Submissions of 01 that attack the batch rather than their own grade, for the hostile class (test_hostile.py).

Malformed metadata (the notebook's and a cell's, of several types), an update_display_data flood and an error
flood on top of a complete answer, a notebook that sleeps past its time budget, a kernel that fills its
folder on disk, and one that holds 12 GB in memfds (where kernels have memory groups), followed by students who
must grade normally. Each entry of ``expect`` is
(score, status, words in the message), as in test_hostile.py.

The floods keep full marks: their answers are right, and the flood must cost nothing but the flood's own output.
The sleeper's sleeps come before its answers, so the budget runs out before any test and it scores 0. The disk
filler loses its own grade (what it wrote, its evidence too, is removed) and nothing else. The memory hog's kernel
is OOM-killed at its group's limit in the answer cell that holds the hog: that answer is lost (its tests score 0),
the rest is graded, and nothing else is touched.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat
from conftest import complete_submission, use_sandbox, write_submission
from replay import grade as replay_grade

from autograder import sandbox
from autograder.notebooks import grade_id

A, NB = "01_self_attention", "self_attention.ipynb"
#: the hostile class's per-notebook budget (test_hostile.py passes it to grade()); the sleeper sleeps longer
#: (a notebook whose cells crash the kernel reruns them after each restart: 55 s leaves room for a loaded machine)
NOTEBOOK_SECONDS = 55
#: 300 MB of display updates, each rewriting one output in place (before the fix: never counted)
UPDATE_FLOOD = "_h = display('start', display_id=True)\nfor _i in range(300):\n    _h.update('y' * 1_000_000)"
#: 5 cells raising a 10 MB error each (the error output, the reply and the traceback carry it)
ERROR_FLOOD = "raise ValueError('e' * 10_000_000)"
#: files of 5 MB until the disk is full (the quota stops it at 256 MB)
DISK_FILLER = "for _i in range(100_000):\n    open(f'junk-{_i}.bin', 'wb').write(b'x' * 5_000_000)"
#: 12 GB held in memfds of 64 MB (under the file size limit), which RLIMIT_DATA does not count (before the fix: held,
#: half of the grading machine); appended to the answer of basic_self_attention. fallocate makes the pages without
#: copying data (4 GB in 1.5 s instead of 4.7 s on 2 cores), so the limit is reached well within the cell timeout
MEMFD_HOG = ("import os\n_held = []\nfor _i in range(12 * 1024 // 64):\n"
             "    _fd = os.memfd_create('hog'); os.posix_fallocate(_fd, 0, 64 << 20); _held.append(_fd)")


#: a resubmission that carries its own answers in its notebook's metadata (in the attack: records computed offline for
#: the seed a first submission printed), and code that looks for them in the files of its own folder: right answers
#: when it finds them, the wrong ones of its honest twin otherwise
PEEK = ("import pathlib\n"
        "def attention_weights(x):\n"
        "    marker = 'ANSWER-' + 'IN-METADATA'\n"
        "    files = [p for p in pathlib.Path('.').rglob('*') if p.is_file()]\n"
        "    found = any(marker in p.read_text(errors='replace') for p in files)\n"
        "    scores = x @ x.transpose(1, 2)\n"
        "    return torch.softmax(scores, dim=-1) if found else scores\n")


def _write_raw(batch: Path, student: str, nb: dict) -> None:
    """Write a notebook as JSON, however malformed (nbformat.write would validate it)."""
    folder = batch / student / A
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NB).write_text(json.dumps(nb))


def _appended(cells: list[str], before_answers: bool = False) -> nbformat.NotebookNode:
    """The complete submission with the student's own code cells added at the end, or before the first answer."""
    nb = complete_submission(A, NB)
    new = [nbformat.v4.new_code_cell(source) for source in cells]
    first = next(i for i, c in enumerate(nb.cells) if grade_id(c)
                 and c.metadata["nbgrader"].get("solution")) if before_answers else len(nb.cells)
    nb.cells[first:first] = new
    return nb


def build(batch: Path, expect: dict) -> None:
    """Write the containment attacks into batch, and what each student must get into expect."""
    complete = json.loads(nbformat.writes(complete_submission(A, NB)))
    answer = next(i for i, c in enumerate(complete["cells"]) if c["metadata"].get("nbgrader", {}).get("solution")
                  and c["cell_type"] == "code")
    test = next(i for i, c in enumerate(complete["cells"]) if c["metadata"].get("nbgrader", {}).get("grade"))

    def malformed(student: str, change, outcome: tuple) -> None:
        nb = copy.deepcopy(complete)
        change(nb)
        _write_raw(batch, student, nb)
        expect[student] = outcome

    # 1. metadata: the grader's own namespaces are emptied (full marks, no fake notes); wrong types are refused
    malformed("meta-notes-string", lambda nb: nb["metadata"].update(autograder="boom"), (8, "graded", ""))
    malformed("meta-notes-forged", lambda nb: nb["metadata"].update(
        autograder={"flags": 5, "stopped": ["every cell"], "notes": ["FORGED NOTE"]}), (8, "graded", ""))
    malformed("meta-cell-verdicts", lambda nb: [c["metadata"].update(judge="boom", autograder=[1])
                                                for c in nb["cells"]], (8, "graded", ""))
    malformed("meta-notebook-list", lambda nb: nb.update(metadata=[]),
              (0, "invalid-notebook", "the notebook's metadata is a list, not a mapping"))
    malformed("meta-cell-number", lambda nb: nb["cells"][answer].update(metadata=5),
              (0, "invalid-notebook", f"cell {answer + 1}'s metadata is a number, not a mapping"))
    malformed("meta-nbgrader-list", lambda nb: nb["cells"][test]["metadata"].update(nbgrader=[]),
              (0, "invalid-notebook", f"cell {test + 1}'s nbgrader metadata is a list"))
    malformed("meta-nbgrader-string", lambda nb: nb["cells"][answer]["metadata"].update(nbgrader="solution"),
              (0, "invalid-notebook", "nbgrader metadata is a string"))
    malformed("meta-kernelspec-string", lambda nb: nb["metadata"].update(kernelspec="python3"),
              (0, "invalid-notebook", "metadata/kernelspec"))

    # 2. floods on top of a complete answer: the answer keeps its marks, the flood is cut
    write_submission(batch, "flood-update-display", A, NB, _appended([UPDATE_FLOOD]))
    expect["flood-update-display"] = (8, "graded", "")
    write_submission(batch, "flood-errors", A, NB, _appended([ERROR_FLOOD] * 5))
    expect["flood-errors"] = (8, "graded", "")

    # 3. time: sleeps before the answers use up the notebook's budget; nothing after them runs
    sleeper = _appended(["import time"] + ["time.sleep(14)"] * 8, before_answers=True)
    write_submission(batch, "limit-notebook-time", A, NB, sleeper)
    expect["limit-notebook-time"] = (0, "graded", f"time budget of {NOTEBOOK_SECONDS} s")

    # 4. disk: the filler loses its own grade; the students after it grade normally
    write_submission(batch, "limit-disk-filler", A, NB, _appended([DISK_FILLER]))
    expect["limit-disk-filler"] = (0, "graded", "disk quota")
    for student in ("limit-disk-filler-next", "limit-disk-filler-next2"):
        write_submission(batch, student, A, NB, complete_submission(A, NB))
        expect[student] = (8, "graded", "")

    # 5. the notebook's own files: the kernel's folder holds none of them while it runs, so what the student put in
    # the notebook's metadata (or outputs, or timestamp.txt) never reaches a probe
    peek = complete_submission(A, NB)
    next(c for c in peek.cells if grade_id(c) == "attention_weights").source = PEEK
    peek.metadata["answers"] = "ANSWER-IN-METADATA"
    write_submission(batch, "read-own-notebook", A, NB, peek)
    twin = replay_grade(A, {"attention_weights": "def attention_weights(x):\n    return x @ x.transpose(1, 2)\n"})
    expect["read-own-notebook"] = (twin.score, "flagged", "imports pathlib")

    # 6. memory: only where each kernel has a memory group (without one, the hog would really hold 12 GB)
    if use_sandbox() and sandbox.memory_groups()[0] is not None:
        hog = complete_submission(A, NB)
        cell = next(c for c in hog.cells if grade_id(c) == "basic_self_attention")
        cell.source += "\n" + MEMFD_HOG
        write_submission(batch, "limit-memory-memfd", A, NB, hog)
        lost = replay_grade(A, {"basic_self_attention": "def basic_self_attention(x):\n    raise RuntimeError()"})
        expect["limit-memory-memfd"] = (lost.score, "flagged", "the kernel died in 1 cell(s)")  # flagged: imports os
        for student in ("limit-memory-memfd-next", "limit-memory-memfd-next2"):
            write_submission(batch, student, A, NB, complete_submission(A, NB))
            expect[student] = (8, "graded", "")
