"""Snapshot every verdict the checks give, to prove that a change of the check machinery changed none.

    .venv/bin/python benchmarks/verdicts.py [--assignment 01_self_attention ...] --out new.json [--compare old.json]

Replays in this process (tests/replay.py, as tests/test_catalogue.py does) each notebook's solution and untouched
release, and every catalogue mistake and correct alternative, under the fixed seeds a student works with and under
one grading seed (a fixed one per variant, as the catalogue's tests draw it), and writes
{"<assignment>:<variant>@<seed>": {test cell: [passed, mistake id]}} to --out, sorted. With --compare, prints every
(variant, test cell) whose (passed, mistake id) differs from the older snapshot, and the variants only one of them
has, and exits 1 when any differ. Messages are not compared: they may improve. Minutes for the whole course (07
and 08 train small models); seconds for 01.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tests/replay.py: the in-process grading the catalogue's tests use

import nbformat  # noqa: E402
from replay import grade  # noqa: E402

from autograder import course_dir  # noqa: E402
from autograder.notebooks import answer_cells, cleared  # noqa: E402
from catalogue import variants  # noqa: E402


def _seed(assignment: str, name: str) -> int:
    return zlib.crc32(f"{assignment}/{name}".encode())  # as tests/test_catalogue.py draws a variant's grading seed


def _row(result) -> dict[str, list]:
    return {gid: [v.passed, v.mistake if not v.passed else None] for gid, v in sorted(result.verdicts.items())}


def snapshot(assignments: list[str]) -> dict[str, dict[str, list]]:
    """{"<assignment>:<variant>@<fixed|grading>": {test cell: [passed, mistake id]}} for every replayed variant."""
    found: dict[str, dict[str, list]] = {}
    for assignment in assignments:
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            stubs = {cell: cleared(code) for cell, code in answer_cells(nb).items()}
            for name, answers in (("solution", {}), ("untouched-release", stubs)):
                key = f"{assignment}:{notebook}:{name}"
                found[f"{key}@fixed"] = _row(grade(assignment, answers, notebook=notebook))
                found[f"{key}@grading"] = _row(grade(assignment, answers, notebook=notebook,
                                                     seed=_seed(assignment, name)))
        for v in (v for v in variants() if v.assignment == assignment):
            key = f"{assignment}:{v.name}"
            expected = v.mistake or "alternative"
            found[f"{key}@fixed"] = {"expected": expected,
                                     **_row(grade(assignment, {v.cell: v.code}, from_cell=v.cell))}
            found[f"{key}@grading"] = {"expected": expected, **_row(grade(
                assignment, {v.cell: v.code}, seed=_seed(v.assignment, v.name), from_cell=v.cell))}
    return dict(sorted(found.items()))


def differences(old: dict, new: dict) -> list[str]:
    """One line per variant only one snapshot has, and per (variant, test cell) whose verdict differs."""
    lines = [f"only in the old snapshot: {key}" for key in sorted(set(old) - set(new))]
    lines += [f"only in the new snapshot: {key}" for key in sorted(set(new) - set(old))]
    for key in sorted(set(old) & set(new)):
        for cell in sorted(set(old[key]) | set(new[key])):
            if old[key].get(cell) != new[key].get(cell):
                lines.append(f"{key} {cell}: {old[key].get(cell)} -> {new[key].get(cell)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assignment", action="append", help="only these (repeatable; default: every assignment)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the snapshot (JSON)")
    parser.add_argument("--compare", type=Path, help="an older snapshot: print what differs, exit 1 if anything does")
    args = parser.parse_args()
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # what the notebooks' cells print
        taken = snapshot(args.assignment or course_dir.assignments())
    args.out.write_text(json.dumps(taken, indent=1) + "\n")
    cells = sum(len(row) for row in taken.values())
    print(f"{len(taken)} replays, {cells} verdicts, in {time.monotonic() - started:.0f} s: {args.out}")
    if args.compare:
        old = json.loads(args.compare.read_text())
        if args.assignment:  # an older snapshot of the whole course: compare only what was replayed
            old = {k: v for k, v in old.items() if k.split(":", 1)[0] in args.assignment}
        changed = differences(old, taken)
        print("\n".join(changed) or f"no verdict differs from {args.compare}")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
