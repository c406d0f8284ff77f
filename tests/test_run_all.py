"""Run All on a fresh release notebook: the first failure a student meets is one of the course's own messages.

JupyterLab's Run All stops at the first cell that fails. In an untouched release notebook that is a demo cell
calling a stub, or a test cell: either way it must say in the course's words which exercise is not implemented
yet, never show a raw traceback through code the student has not written (course/unfinished.py, checks).
"""

import matplotlib.pyplot as plt
import nbformat
import pytest
from conftest import ASSIGNMENTS, release_notebook, source_answers
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder import course_dir
from autograder.notebooks import filled

NOTEBOOKS = [(a, n) for a in ASSIGNMENTS for n in course_dir.notebooks(a)]
#: what IPython prints in a raw traceback and the course's messages never contain
RAW_TRACEBACK = ("Traceback (most recent call last)", "----> ", "Cell In[")


def _failures(nb: nbformat.NotebookNode, skip_tests: bool = False, first: bool = False) -> list[tuple[int, str]]:
    """Run the code cells in one in-process IPython shell: (index, what it printed) for every cell that failed.
    first: stop at the first failure, as JupyterLab's Run All does; otherwise go on, as a student who runs each
    cell does. Test cells are left out when skip_tests."""
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(colors="nocolor")
    failed = []
    try:
        for index, cell in enumerate(nb.cells):
            graded = cell.get("metadata", {}).get("nbgrader", {}).get("grade")
            if cell.cell_type != "code" or (skip_tests and graded):
                continue
            with capture_output() as shown:
                result = shell.run_cell(cell.source, store_history=True)
            plt.close("all")  # a kernel shows and forgets its figures; pyplot here would keep every one open
            if not result.success:
                failed.append((index, shown.stdout + shown.stderr))
                if first:
                    break
    finally:
        InteractiveShell.clear_instance()
    return failed


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS)
def test_run_all_stops_first_at_a_course_message(assignment, notebook):
    nb = release_notebook(assignment, notebook)
    failed = _failures(nb, first=True)
    assert failed, "every cell of the untouched release notebook ran without an error"
    index, shown = failed[0]
    where = f"cell {index} ({nb.cells[index].get('metadata', {}).get('nbgrader', {}).get('grade_id')})"
    assert "is not implemented yet" in " ".join(shown.split()), f"{where} failed with:\n{shown[-2000:]}"
    assert not any(marker in shown for marker in RAW_TRACEBACK), f"{where} shows a raw traceback:\n{shown[-2000:]}"


def test_a_real_kernel_shows_the_unfinished_demo_as_one_message(tmp_path):
    """The same in a Jupyter kernel, as JupyterLab runs it: the error output carries only the course's lines."""
    assignment = ASSIGNMENTS[0]
    notebook = course_dir.notebooks(assignment)[0]
    nb = release_notebook(assignment, notebook)
    client = NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError):
        client.execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.output_type == "error"]
    assert len(errors) == 1
    text = "\n".join(errors[0].traceback)
    assert "is not implemented yet" in " ".join(text.split())
    assert not any(marker in text for marker in RAW_TRACEBACK), text


#: (assignment, notebook, answer cells left unfinished): the demo cells after them train, decode or generate
UNFINISHED = (("07_seq2seq", "seq2seq.ipynb", ("teacher_forcing_loss", "greedy_decode")),
              ("07_seq2seq", "seq2seq.ipynb", ("seq2seq_model",)),
              ("08_language_model", "language_model.ipynb", ("language_model",)),
              ("08_language_model", "language_model.ipynb", ("next_token_loss",)),
              ("08_language_model", "language_model.ipynb",
               ("sample_next_token", "generate", "cached_language_model", "generate_cached")),
              ("09_modern_decoder", "modern_decoder.ipynb", ("modern_language_model",)),
              ("09_modern_decoder", "modern_decoder.ipynb", ("grouped_query_attention", "modern_language_model")))


@pytest.mark.parametrize("assignment,notebook,unfinished", UNFINISHED,
                         ids=[f"{a}:{'+'.join(u)}" for a, _, u in UNFINISHED])
def test_cells_that_train_or_generate_with_unfinished_parts_end_in_a_course_message(assignment, notebook, unfinished,
                                                                                    monkeypatch):
    """The exercises before them done, the ones named here not: every later demo cell that fails (training,
    translating or generating, reading the trained model) says in one sentence which exercise it waits for."""
    if assignment not in ASSIGNMENTS:
        pytest.skip(f"{assignment} is not among the assignments tested")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")  # a short training, should a cell get that far
    answers = {cell: code for cell, code in source_answers(assignment, notebook).items() if cell not in unfinished}
    nb = filled(release_notebook(assignment, notebook), answers)
    failed = _failures(nb, skip_tests=True)
    assert failed, "no cell failed, though exercises are unfinished"
    for index, shown in failed:
        where = f"cell {index} ({nb.cells[index].get('metadata', {}).get('nbgrader', {}).get('grade_id')})"
        assert "is not implemented yet" in " ".join(shown.split()), f"{where} failed with:\n{shown[-2000:]}"
        assert not any(marker in shown for marker in RAW_TRACEBACK), f"{where} shows a raw traceback:\n{shown[-2000:]}"
