"""Seconds to make a feedback page from a notebook whose markdown a student wrote, by hostile shape and size.

Prints one line per (shape, size): the time the course's feedback steps take (SanitiseStudentContent, then the
FeedbackExporter nbgrader's GenerateFeedback uses, with nbgrader_config.py's settings) for 30, 90 and 270 kB of
markdown in cells of 9.9 kB (just under the sanitising step's limit, so they are parsed), and for one cell of one
100 kB line; then the largest honest notebook, solutions/07. Growth from 90 to 270 kB near 3x is linear; near 9x
is quadratic. --unbounded lifts the limits (autograder/sanitise.py's MARKDOWN_CELL_LIMIT and
MARKDOWN_TOTAL_LIMIT), to see what they prevent.

    python benchmarks/feedback_markdown.py [--sizes 30 90 270] [--unbounded] [--profile SHAPE]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell, new_notebook
from nbgrader.converters import GenerateFeedback
from nbgrader.coursedir import CourseDirectory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import sanitise as sanitising  # noqa: E402
from autograder.workspace import course_config  # noqa: E402

#: a unit of each shape a student's markdown could repeat; each is repeated up to the size asked for
SHAPES = {
    "dollars": "$a$ $$b ",
    "stars": "*_*_ **a _b ",
    "brackets": "[[[[[[[[",
    "backticks": "``````` `` ",
    "open_angle": "< a <b <c ",
    "begin": "\\begin{a} x ",
    "link_refs": "[a][b] [c]: ",
    "emphasis_runs": "*a **b ***c ",
    "plain_words": "words of honest text. ",
}


def hostile_notebook(unit: str, kilobytes: int, cell_kb: float = 9.9, line_kb: int | None = 1
                     ) -> nbformat.NotebookNode:
    """Markdown cells of cell_kb kB (lines of line_kb kB, or one line per cell) repeating unit, kilobytes in all."""
    nb = new_notebook()
    per_cell = int(cell_kb * 1000)
    for _ in range(max(1, round(kilobytes / cell_kb))):
        text = (unit * (per_cell // len(unit) + 1))[:per_cell]
        if line_kb:
            step = line_kb * 1000
            text = "\n".join(text[i:i + step - 1] for i in range(0, len(text), step - 1))[:per_cell]
        nb.cells.append(new_markdown_cell(text))
    return nb


def exporter():
    config = course_config(ROOT, "sqlite://")
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    return converter.exporter_class(parent=converter, config=converter.config)


def feedback_seconds(nb: nbformat.NotebookNode, export) -> float:
    resources = {"nbgrader": {"notebook": "n", "score": 0.0, "max_score": 0.0, "late_penalty": 0.0}}
    start = time.perf_counter()
    export.from_notebook_node(sanitising.sanitise(nb), resources=resources)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 90, 270])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--profile", help="print cProfile's top functions for this shape at the largest size")
    parser.add_argument("--unbounded", action="store_true", help="lift the sanitising step's markdown limits")
    args = parser.parse_args()
    if args.unbounded:
        sanitising.MARKDOWN_CELL_LIMIT = sanitising.MARKDOWN_TOTAL_LIMIT = 10**12
    export = exporter()
    if args.profile:
        nb = hostile_notebook(SHAPES[args.profile], max(args.sizes))
        profiler = cProfile.Profile()
        profiler.runcall(feedback_seconds, nb, export)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return
    print(f"{'shape':<14} " + " ".join(f"{s:>7} kB" for s in args.sizes) + "   (seconds; cells of 9.9 kB, 1 kB lines)"
          + (", limits lifted" if args.unbounded else ""))
    for shape in args.shapes:
        times = [feedback_seconds(hostile_notebook(SHAPES[shape], size), export) for size in args.sizes]
        print(f"{shape:<14} " + " ".join(f"{t:>10.2f}" for t in times), flush=True)
    for shape in args.shapes:
        seconds = feedback_seconds(hostile_notebook(SHAPES[shape], 100, cell_kb=100, line_kb=None), export)
        print(f"{shape:<14} one cell, one line of 100 kB: {seconds:.2f} s", flush=True)
    path = ROOT / "solutions" / "07_seq2seq" / "seq2seq.ipynb"
    nb = nbformat.read(path, as_version=4)
    size = sum(len(c.source) for c in nb.cells if c.cell_type == "markdown") / 1000
    print(f"honest: {path.relative_to(ROOT)} ({size:.0f} kB of markdown): {feedback_seconds(nb, export):.2f} s")


if __name__ == "__main__":
    main()
