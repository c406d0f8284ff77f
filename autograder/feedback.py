"""What a student sees of a graded notebook: results and diagnoses, not the hidden tests' code."""

import re
from pathlib import Path

import nbformat

from autograder.judging import METADATA_KEY
from autograder.notebooks import grade_id, hidden_tests_removed

HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.DOTALL)

HIDDEN_NOTE = "# Hidden tests ran here; what they found is shown below."


def hidden_test_cells(source: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the visible part of every source cell that holds hidden tests."""
    return {grade_id(cell): hidden_tests_removed(cell.source) for cell in source.cells
            if cell.cell_type == "code" and "BEGIN HIDDEN TESTS" in cell.source}


def _hidden_lines(source: nbformat.NotebookNode) -> list[str]:
    """The code lines of the hidden tests (inside the markers), as they could be quoted in an output."""
    lines = []
    for cell in source.cells:
        for block in HIDDEN_BLOCK.findall(cell.source if cell.cell_type == "code" else ""):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 8]
    return lines


def _scrub(text: str, lines: list[str]) -> str:
    for line in lines:
        text = text.replace(line, "[hidden test]")
    return text


def hide_hidden_tests(autograded: Path, source: nbformat.NotebookNode) -> None:
    """Rewrite an autograded notebook so its feedback shows hidden tests' results but not their code.

    Test cells' outputs are the judge's verdicts already (autograder/judging.py). Any other output that quotes a
    line of a hidden test (code in a student's cell can read the kernel's history and print it) has that line
    replaced, and tracebacks of hidden test cells are cut to their last line.
    """
    hidden = hidden_test_cells(source)
    lines = _hidden_lines(source)
    nb = nbformat.read(autograded, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output.text = _scrub(output.text, lines)
            for mime, value in (output.get("data") or {}).items():
                if isinstance(value, str) and mime.startswith("text/"):
                    output.data[mime] = _scrub(value, lines)
            if output.get("output_type") == "error":
                output.evalue = _scrub(output.evalue, lines)
                output.traceback = [_scrub(line, lines) for line in output.traceback]
    for cell in nb.cells:
        if grade_id(cell) not in hidden:
            continue
        visible = hidden[grade_id(cell)]
        cell.source = f"{visible}\n{HIDDEN_NOTE}" if visible else HIDDEN_NOTE
        for output in cell.get("outputs", []):
            if output.output_type == "error" and output.ename != "CheckFailed":
                output.traceback = [f"{output.ename}: {output.evalue}"]
    nbformat.write(nb, autograded)


def diagnoses(autograded: Path) -> list[tuple[str, str]]:
    """(grade_id, first paragraph of the failure) for every failed test cell of an autograded notebook."""
    nb = nbformat.read(autograded, as_version=4)
    found = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                text = output.evalue.split("\n\n")[0].strip() if output.ename == "CheckFailed" else f"{output.ename}: {output.evalue}"
                found.append((meta["grade_id"], " ".join(text.split())[:200] if text else output.ename))
                break
    return found


def mistakes(autograded: Path) -> list[tuple[str, str]]:
    """(grade_id, mistake id) for every test cell whose judge named a catalogued mistake."""
    nb = nbformat.read(autograded, as_version=4)
    found = []
    for cell in nb.cells:
        verdict = cell.get("metadata", {}).get(METADATA_KEY) or {}
        if verdict.get("mistake") and not verdict.get("passed"):
            found.append((grade_id(cell), str(verdict["mistake"])))
    return found
