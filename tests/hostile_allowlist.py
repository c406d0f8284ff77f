"""Submissions of 04 that look for answers on the grading host outside the course package, for the hostile class
(test_hostile.py).

A grading host may hold other checkouts of the course (another teacher's, last year's): one submission searches
the host for one and runs its ``course/multi_head.py``; another finds where the ``catalogue`` package lives (from the
editable install's finder, which every kernel imports at start-up) and runs its correct alternatives. Each is graded
beside its honest twin, the unanswered notebook, and may score no more: the kernel's view is an allow-list
(autograder/sandbox.py), so neither file is there. Before it, they scored 16/16 and 12/16.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import release_notebook, write_submission

from autograder.notebooks import grade_id

A, NB = "04_multi_head", "multi_head.ipynb"
REPO = Path(__file__).resolve().parents[1]
#: where the test puts the other checkout (outside /tmp, which is private in every kernel); the attack searches there
OTHER_PLACES = "/var/tmp"
#: runs another checkout's reference module, wherever on the host the search finds one
OTHER_CHECKOUT = f"""import glob as _glob
for _path in sorted(_glob.glob('{OTHER_PLACES}/*/course/multi_head.py') + _glob.glob('/opt/*/course/multi_head.py')):
    exec(open(_path).read())
    break
"""
#: runs the catalogue's correct alternatives, found where the editable install says the package is
CATALOGUE = """import sys as _sys
_finder = next(m for n, m in list(_sys.modules.items()) if n.startswith('__editable__') and hasattr(m, 'MAPPING'))
_text = open(_finder.MAPPING['catalogue'] + '/multi_head.py').read().replace('from catalogue import', '# ')
def alternative(*_a, **_k):
    return lambda f: f
mistake = alternative
def edit(*_a, **_k):
    pass
exec(_text)
split_heads, merge_heads, MultiHeadAttention = mh_split_unflatten, mh_merge_flatten, mh_fused_one_matrix
"""
#: the answer cells each attack replaces (the wide module's cell keeps its stub)
CELLS = ("split_heads", "merge_heads", "multi_head_attention")


def _attacked(code: str):
    nb = release_notebook(A, NB)
    for cell in nb.cells:
        if grade_id(cell) in CELLS:
            cell.source = code
    return nb


def build(batch: Path, expect: dict) -> None:
    """Write the twin and the two attacks into batch, and what each student must get into expect."""
    write_submission(batch, "twin-04-unanswered", A, NB, release_notebook(A, NB))
    expect["twin-04-unanswered"] = (0, "graded", "")
    write_submission(batch, "attack-04-other-checkout", A, NB, _attacked(OTHER_CHECKOUT))
    expect["attack-04-other-checkout"] = ("twin", "twin-04-unanswered", "")
    write_submission(batch, "attack-04-catalogue", A, NB, _attacked(CATALOGUE))
    expect["attack-04-catalogue"] = ("twin", "twin-04-unanswered", "")


@contextmanager
def other_checkout() -> Iterator[Path]:
    """Another checkout of the course, readable by everyone, in OTHER_PLACES while the batch is graded."""
    folder = Path(tempfile.mkdtemp(dir=OTHER_PLACES, prefix="other-checkout-"))
    try:
        shutil.copytree(REPO / "course", folder / "course", ignore=shutil.ignore_patterns("__pycache__"))
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield folder
        assert (folder / "course" / "multi_head.py").is_file(), "the other checkout went away while grading"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
