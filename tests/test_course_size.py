"""What a maintainer adding next year's assignment must find: checks that stay small because they are declared
(course/checks/kinds.py, course/judges/kinds.py), and shared helpers that live once."""

import ast
from collections import defaultdict

import nbformat

from autograder import course_dir

#: lines of Python under course/ (references, data, both sides of the checks) per graded test cell of source/: a
#: ratchet, lowered whenever checks move to declarations. Raised once, from 76 to 78 (issue 36): the device clauses
#: of the exercises' specifications (a `device` honoured, masks made on the input's device) are graded on a CPU
#: through course/checks/device.py's stand-in GPU (110 lines, moved from tests/) and course/device.py's table of
#: tolerances, inside test cells that already existed (issue 40 retired line counts as the measure of size). Raised
#: to 79 (issue 41): the clauses no test reached (a model's `base`, scores in the hundreds, where dropout sits) as
#: hidden cases of existing cells, and course/demo_size.py, which took the grading branches out of the notebooks.
#: Raised to 81 (issue 40): course/judges/variants.py (191 lines, a third of them the decisions), which runs the
#: mistakes written as code; 01's simulators went, and its messages moved from a table this count skips into code.
#: And by one more (issue 40, reading closure): case tables with keyword arguments (ModernCase(b=3, t=7, ...)), and
#: what frame inspection and string keys hid, written out (a check's module, the evidence keys' functions).
#: And by one more (issue 36): every exercise that makes or holds tensors has its device clause graded on the stand-in
#: GPU (07's model and greedy_decode, 08's two models and sample_next_token, 09's model), a call and its mistake per
#: check, inside visible test cells that already existed.
#: And more (issue 41, the clause-by-clause pass): the clauses no test reached, each judged inside a test cell that
#: already existed (no new cells): initial values and stored attributes recorded as facts, a model's and a decoder
#: block's dropout=1.0 in training mode with the computation it implies written out, a length check with a full
#: cache, run_block called on its own with a one-block oracle, and generation's torch.no_grad().
#: Raised to 87 (issue 40, 05 moved): 05's 46 messages left a table this count skips (152 lines) for the code that
#: names them (+171 lines of course/judges/transformer_block.py, its simulators replaced by the variants' runners).
LINES_PER_TEST_CELL = 87


def _graded_test_cells() -> int:
    count = 0
    for assignment in course_dir.assignments():
        for notebook in course_dir.notebooks(assignment):
            nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
            count += sum(1 for cell in nb.cells if cell.metadata.get("nbgrader", {}).get("grade")
                         and not cell.metadata["nbgrader"].get("solution"))
    return count


def test_course_code_fits_its_budget_of_lines_per_graded_test_cell():
    lines = {path.relative_to(course_dir.ROOT): len(path.read_text(encoding="utf-8").splitlines())
             for path in (course_dir.ROOT / "course").rglob("*.py")}
    total, cells = sum(lines.values()), _graded_test_cells()
    assert cells > 0
    largest = [f"{path} {n}" for path, n in sorted(lines.items(), key=lambda item: -item[1])[:5]]
    assert total <= LINES_PER_TEST_CELL * cells, (
        f"course/ holds {total} lines of Python for {cells} graded test cells: {total / cells:.1f} per cell, over the "
        f"budget of {LINES_PER_TEST_CELL}. Declare checks with the kinds instead of writing them out. Largest: "
        f"{largest}")


def test_no_private_helper_is_defined_in_two_modules():
    where = defaultdict(list)
    for path in sorted((course_dir.ROOT / "course").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith("_") \
                    and not node.name.startswith("__"):
                where[node.name].append(str(path.relative_to(course_dir.ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"private helpers defined in more than one module (make one shared helper): {twice}"
