"""No folder on disk is shared between kernels: each kernel's unix sockets live in a folder of its own.

Before, kernels shared one world-writable socket folder per worker, bound into every kernel and counted against
every kernel's file quota: a submission that filled it scored its own marks and zeroed every student graded after it
on that worker, and a file left there reached the next student's kernel. Graded by real nbgrader in the sandbox, one
worker, so the students run one after another on the same worker, with forked kernels and with kernels started by
bwrap.
"""

import pytest
from conftest import complete_submission, feedback_text, use_sandbox, write_submission
from nbformat.v4 import new_code_cell

from autograder.grade import grade

A, NB = "01_self_attention", "self_attention.ipynb"
#: the kernel's own socket folder, from its connection file (a read-only copy inside the sandbox)
FOLDER = "import json, os\n_own = os.path.dirname(json.load(open('/tmp/.connection.json'))['ip'])\n"
#: 5,000 sockets in the socket folder (past the 4,096-file quota), and one named for the next kernel to find
#: (sockets: the grader used to keep them when it cleaned the folder, since the next kernel's were there too)
FILLER = FOLDER + ("import socket\n_kept = []\n"
                   "for _name in [f'junk-{_i}' for _i in range(5000)] + ['carried-answer']:\n"
                   "    _s = socket.socket(socket.AF_UNIX)\n    _s.bind(os.path.join(_own, _name))\n"
                   "    _kept.append(_s)\n")
#: what the next kernels can see of socket folders: their own, and the folder above it
LOOKER = FOLDER + ("def _names(path):\n    try:\n        return sorted(os.listdir(path))\n"
                   "    except OSError as error:\n        return type(error).__name__\n"
                   "print('OWN', [n for n in _names(_own) if not n.startswith('k')] if isinstance(_names(_own), list)"
                   " else _names(_own), 'ABOVE', _names(os.path.dirname(_own)))\n")


def _with_cell(source: str):
    nb = complete_submission(A, NB)
    nb.cells.append(new_code_cell(source))
    return nb


@pytest.mark.slow
@pytest.mark.skipif(not use_sandbox(), reason="socket folders are the sandbox's (transport ipc)")
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "bwrap"])
def test_a_kernel_filling_its_socket_folder_costs_no_other_student_anything(tmp_path, fork):
    batch = tmp_path / "batch"
    write_submission(batch, "a-filler", A, NB, _with_cell(FILLER))
    write_submission(batch, "b-next", A, NB, complete_submission(A, NB))
    write_submission(batch, "c-looker", A, NB, _with_cell(LOOKER))
    rows = {g.student: g for g in grade(batch, tmp_path / "out", [A], workers=1, sandbox=True, progress=False,
                                        fork=fork)}
    for student in ("b-next", "c-looker"):
        assert rows[student].score == rows[student].max_score, rows[student]
        assert "quota" not in rows[student].message, rows[student].message
    page = feedback_text(tmp_path / "out", "c-looker", A)
    assert "OWN" in page, "the looker's cell did not run"
    assert "carried-answer" not in page and "junk-" not in page, page[page.index("OWN"):][:400]
