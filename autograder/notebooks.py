"""Turning a source notebook into its other forms: a solution to read, a filled-in submission."""

import copy
import re

import nbformat

SOLUTION_MARKERS = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)
HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.MULTILINE | re.DOTALL)


def answer(source: str) -> str:
    """A source answer cell as a student who solved it would leave it: the solution markers removed."""
    return SOLUTION_MARKERS.sub("", source)


SOLUTION_REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[ \t]*\n.*?^[ \t]*### END SOLUTION[ \t]*$",
                             re.MULTILINE | re.DOTALL)


def cleared(source: str) -> str:
    """A source answer cell as the release shows it: each solution region replaced by the stub."""
    def stub(match: re.Match) -> str:
        return f"{match.group(1)}# YOUR CODE HERE\n{match.group(1)}raise NotImplementedError()"
    return SOLUTION_REGION.sub(stub, source)


def hidden_tests_removed(source: str) -> str:
    return HIDDEN_TESTS.sub("", source).rstrip()


def nbgrader_metadata(cell) -> dict:
    """A cell's nbgrader metadata, or {} when it has none or it is not a mapping."""
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    found = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def grade_id(cell: nbformat.NotebookNode) -> str | None:
    found = nbgrader_metadata(cell).get("grade_id")
    return found if isinstance(found, str) else None


def answer_cells(nb: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id -> solved source of every answer cell of a source notebook."""
    return {
        grade_id(cell): answer(cell.source)
        for cell in nb.cells
        if nbgrader_metadata(cell).get("solution")
    }


def filled(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of a release notebook with the named answer cells replaced, as a student would submit it."""
    nb = copy.deepcopy(release)
    unknown = set(answers) - {grade_id(cell) for cell in nb.cells}
    if unknown:
        raise KeyError(f"no answer cells named {sorted(unknown)}")
    for cell in nb.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return nb


#: what a solution notebook says of itself to a maintainer: in metadata, so that a reader's first cell is the course's
SOLUTION_NOTICE = (
    "Executed solution, generated: do not edit. Built from source/{assignment}/{notebook} by "
    "`python -m autograder build`; the exercises are in release/{assignment}/{notebook}."
)
#: the metadata key that holds SOLUTION_NOTICE, in the notebook's metadata and its first cell's (the file's first lines)
GENERATED_KEY = "generated"


def solution_skeleton(source: nbformat.NotebookNode, assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The source notebook as a self-learner reads it: solutions in, markers, hidden tests and nbgrader metadata out."""
    nb = copy.deepcopy(source)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.source = hidden_tests_removed(answer(cell.source))
            cell.outputs = []
            cell.execution_count = None
    notice = SOLUTION_NOTICE.format(assignment=assignment, notebook=notebook)
    nb.metadata[GENERATED_KEY] = notice
    if nb.cells:  # a cell's metadata is written before its source: the notice stands in the file's first lines
        nb.cells[0].metadata[GENERATED_KEY] = notice
    nb.metadata["generated_from"] = f"source/{assignment}/{notebook}"
    return nb


#: notebook metadata key under which the grading steps leave what the instructor should read
NOTES_KEY = "autograder"
#: cell metadata keys only the grader writes (autograder.judging.METADATA_KEY holds a test's verdict)
GRADER_CELL_KEYS = ("judge", NOTES_KEY)


def drop_grader_metadata(nb: nbformat.NotebookNode) -> None:
    """Remove what a submission brings in the grader's own metadata namespaces (notes, verdicts): only grading
    writes there."""
    if isinstance(nb.get("metadata"), dict):
        nb.metadata.pop(NOTES_KEY, None)
    for cell in nb.get("cells") or []:
        metadata = cell.get("metadata") if isinstance(cell, dict) else None
        if isinstance(metadata, dict):
            for key in GRADER_CELL_KEYS:
                metadata.pop(key, None)


def merge_streams(cell: nbformat.NotebookNode) -> None:
    """Merge a code cell's consecutive stream outputs of one stream: how the kernel splits printed text into
    messages depends on timing (a loaded machine splits one print in two), so what is kept must not."""
    outputs = []
    for output in cell.get("outputs", []):
        if (output.get("output_type") == "stream" and outputs and outputs[-1].get("output_type") == "stream"
                and outputs[-1].get("name") == output.get("name")):
            outputs[-1]["text"] += output.get("text", "")
        else:
            outputs.append(output)
    cell["outputs"] = outputs


def add_note(nb: nbformat.NotebookNode, kind: str, text: str) -> None:
    """Leave a line for the instructor in the graded notebook (kind: notes, flags or stopped)."""
    if not isinstance(nb.metadata.get(NOTES_KEY), dict):
        nb.metadata[NOTES_KEY] = {}
    notes = nb.metadata[NOTES_KEY]  # NotebookNode stores a copy of what is assigned: read it back
    if not isinstance(notes.get(kind), list):
        notes[kind] = []
    notes[kind].append(text)


def grading_notes(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """What the grading steps noted in a graded notebook: kind -> lines (anything not of that shape is ignored)."""
    metadata = nb.get("metadata")
    found = metadata.get(NOTES_KEY) if isinstance(metadata, dict) else None
    if not isinstance(found, dict):
        return {}
    return {kind: [str(line) for line in lines] for kind, lines in found.items() if isinstance(lines, list)}
