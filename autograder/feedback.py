"""What a student sees of a graded notebook: results and diagnoses, not the hidden tests' code."""

import re

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.judging import METADATA_KEY
from autograder.notebooks import grade_id, hidden_tests_removed

HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", re.DOTALL)

HIDDEN_NOTE = "# Hidden tests ran here; what they found is shown below."


def _hidden_lines(nb: nbformat.NotebookNode) -> list[str]:
    """The code lines of the hidden tests (inside the markers), as they could be quoted in an output."""
    lines = []
    for cell in nb.cells:
        for block in HIDDEN_BLOCK.findall(cell.source if cell.cell_type == "code" else ""):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 8]
    return lines


def _scrub(text: str, lines: list[str]) -> str:
    for line in lines:
        text = text.replace(line, "[hidden test]")
    return text


def hide_hidden_tests(nb: nbformat.NotebookNode) -> None:
    """Make a graded notebook show its hidden tests' results but not their code.

    Test cells' outputs are the judge's verdicts already (autograder/judging.py). The hidden part of every test
    cell is replaced by a note; any other output that quotes a line of a hidden test (code in a student's cell
    can read the kernel's history and print it) has that line replaced; tracebacks of hidden test cells are cut
    to their last line.
    """
    lines = _hidden_lines(nb)
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
        if cell.cell_type != "code" or "BEGIN HIDDEN TESTS" not in cell.source:
            continue
        visible = hidden_tests_removed(cell.source)
        cell.source = f"{visible}\n{HIDDEN_NOTE}" if visible else HIDDEN_NOTE
        for output in cell.get("outputs", []):
            if output.output_type == "error" and output.ename != "CheckFailed":
                output.traceback = [f"{output.ename}: {output.evalue}"]


class HideHiddenTests(NbGraderPreprocessor):
    """A feedback step (nbgrader_config.py's GenerateFeedback preprocessors): hidden tests' results, not code."""

    def preprocess(self, nb, resources):
        hide_hidden_tests(nb)
        return nb, resources


def diagnoses(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(grade_id, first paragraph of the failure) for every failed test cell of an autograded notebook."""
    found = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                failed = output.ename == "CheckFailed"
                text = output.evalue.split("\n\n")[0].strip() if failed else f"{output.ename}: {output.evalue}"
                found.append((meta["grade_id"], " ".join(text.split())[:200] if text else output.ename))
                break
    return found


def mistakes(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(grade_id, mistake id) for every test cell whose judge named a catalogued mistake."""
    found = []
    for cell in nb.cells:
        verdict = cell.get("metadata", {}).get(METADATA_KEY) or {}
        if verdict.get("mistake") and not verdict.get("passed"):
            found.append((grade_id(cell), str(verdict["mistake"])))
    return found
