"""Put a submission's nbgrader cells back as the instructor made them, before nbgrader's own sanitising.

nbgrader restores a test or locked cell from the gradebook when it finds that cell's id in the submission
(OverwriteCells), but it trusts the submission's metadata to find it, and cannot put back a cell the student
deleted when a locked demo cell precedes it (its add_missing_cells assumes the cell before a test is an answer or
a test). :class:`RestoreCells` runs first: it gives every cell with a known id the source notebook's nbgrader
metadata (points, roles, locks), turns invented or duplicated ids into ordinary cells, and puts every deleted
nbgrader cell back where the source has it (an answer as the release shows it). What it did is noted in the
notebook's metadata for the instructor (autograder.notebooks.grading_notes).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.notebooks import add_note, cleared, drop_grader_metadata, grade_id


def source_notebook(preprocessor: NbGraderPreprocessor, resources: dict) -> nbformat.NotebookNode:
    """The instructor's source notebook of the notebook being graded, from the course directory in the config."""
    coursedir = CourseDirectory(parent=preprocessor)
    info = resources["nbgrader"]
    folder = Path(coursedir.format_path(coursedir.source_directory, ".", info["assignment"]))
    return nbformat.read(folder / f"{info['notebook']}.ipynb", as_version=4)


def reset_metadata(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> None:
    """Every cell with a source cell's id gets that cell's nbgrader metadata; invented and duplicated ids are
    dropped, so those cells count as the student's own."""
    metadata = {grade_id(c): c.metadata["nbgrader"] for c in source.cells if grade_id(c)}
    seen: set[str] = set()
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid is None:
            if isinstance(cell.get("metadata"), dict):
                cell.metadata.pop("nbgrader", None)
        elif gid not in metadata or gid in seen:
            del cell.metadata["nbgrader"]
        else:
            seen.add(gid)
            cell.metadata["nbgrader"] = copy.deepcopy(metadata[gid])


def restore_deleted(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> list[str]:
    """Put every nbgrader cell of the source that the submission lacks back after the nearest earlier source
    cell the submission has (answers as the release shows them); return their ids."""
    present = {grade_id(c) for c in nb.cells if grade_id(c)}
    restored = []
    for index, cell in enumerate(source.cells):
        gid = grade_id(cell)
        if gid is None or gid in present:
            continue
        anchor = next((grade_id(c) for c in reversed(source.cells[:index]) if grade_id(c) in present), None)
        position = 0 if anchor is None else 1 + next(i for i, c in enumerate(nb.cells) if grade_id(c) == anchor)
        back = copy.deepcopy(cell)
        if back.metadata["nbgrader"].get("solution"):
            back.source = cleared(back.source)
        back["id"] = f"restored-{gid}".replace("_", "-")[:64]
        nb.cells.insert(position, back)
        present.add(gid)
        restored.append(gid)
    return restored


class RestoreCells(NbGraderPreprocessor):
    """Reset nbgrader metadata from the source notebook and put deleted nbgrader cells back."""

    def preprocess(self, nb, resources):
        drop_grader_metadata(nb)  # under plain `nbgrader autograde` too: notes and verdicts are the grader's to write
        source = source_notebook(self, resources)
        reset_metadata(nb, source)
        restored = restore_deleted(nb, source)
        if restored:
            add_note(nb, "notes", f"{resources['nbgrader']['notebook']}.ipynb: put back {len(restored)} deleted "
                                  f"cell(s) ({', '.join(restored)})")
        return nb, resources
