"""What a student sees of a graded notebook: results and diagnoses, not the hidden tests' code."""

from pathlib import Path

import nbformat

from autograder.notebooks import grade_id, hidden_tests_removed

HIDDEN_NOTE = "# Hidden tests ran here; what they found is shown below."


def hidden_test_cells(source: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> the visible part of every source cell that holds hidden tests."""
    return {grade_id(cell): hidden_tests_removed(cell.source) for cell in source.cells
            if cell.cell_type == "code" and "BEGIN HIDDEN TESTS" in cell.source}


def hide_hidden_tests(autograded: Path, source: nbformat.NotebookNode) -> None:
    """Rewrite an autograded notebook so its feedback shows hidden tests' results but not their code.

    Tracebacks of hidden test cells are cut to their last line: a traceback quotes the code around the error.
    The course's own CheckFailed renders only the diagnosis, so it is kept whole.
    """
    hidden = hidden_test_cells(source)
    nb = nbformat.read(autograded, as_version=4)
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
                found.append((meta["grade_id"], text.splitlines()[0][:200] if text else output.ename))
                break
    return found
