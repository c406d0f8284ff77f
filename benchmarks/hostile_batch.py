"""A batch of 20 submissions of 01 of which 3 never finish, graded with the documented command's defaults.

Two loop forever and swallow every KeyboardInterrupt (so the cell timeout's interrupt cannot stop them), one sleeps
forever; the other 17 are complete, untouched or a catalogued mistake. Each assignment's notebook budget
(autograder/budgets.py) bounds what the three cost. Prints the batch's seconds, the seconds of the same batch without
the three (the baseline, in the same run), and what each hostile submission scored. On 2 cores, in the sandbox:
`python benchmarks/hostile_batch.py [--workers N]`.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from autograder import course_dir, sandbox
from autograder.budgets import budget
from autograder.grade import grade
from autograder.notebooks import answer_cells, filled
from catalogue import mistakes

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
HOSTILE = {"loop-a": "while True:\n    try:\n        sum(range(10**7))\n    except KeyboardInterrupt:\n        pass",
           "loop-b": "import time\nwhile True:\n    try:\n        time.sleep(1000)\n"
                     "    except BaseException:\n        pass",
           "sleeper": "import time\ntime.sleep(10**6)"}


def build(folder: Path, hostile: bool) -> None:
    release = nbformat.read(course_dir.ROOT / "release" / A / NB, as_version=4)
    answers = answer_cells(nbformat.read(course_dir.source_dir() / A / NB, as_version=4))
    mistake = mistakes(A)[0]
    kinds = [answers, {}, {**answers, mistake.cell: mistake.code}]
    for i in range(17):
        target = folder / f"student-{i:02d}" / A
        target.mkdir(parents=True)
        nbformat.write(filled(release, kinds[i % 3]), target / NB)
    if hostile:
        for name, code in HOSTILE.items():
            nb = filled(release, answers)
            nb.cells.insert(3, new_code_cell(code))
            (folder / name / A).mkdir(parents=True)
            nbformat.write(nb, folder / name / A / NB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    use = sandbox.available() is None
    print(f"sandbox: {sandbox.describe() if use else 'none'}; budget of {A}: {budget(A, 120)} s; "
          f"workers: {args.workers}")
    for hostile in (False, True):
        scratch = Path(tempfile.mkdtemp(prefix="hostile-batch-"))
        try:
            build(scratch / "batch", hostile)
            begun = time.monotonic()
            rows = grade(scratch / "batch", scratch / "out", [A], workers=args.workers, sandbox=use, progress=False)
            took = time.monotonic() - begun
            count = sum(r.status != "missing" for r in rows)
            print(f"{'with the 3 hostile' if hostile else 'baseline, 17 honest'}: {count} submissions in {took:.0f} s "
                  f"({took / count:.1f} s each)", flush=True)
            for row in rows:
                if row.student in HOSTILE:
                    print(f"  {row.student}: {row.score}/{row.max_score} {row.status}: {row.message[:110]}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
