"""One submission cannot break the batch or another student's grading: malformed metadata, output floods of every
kind, a notebook that runs too long, a kernel that fills its disk, an LMS file name that names another student.

In process and fast: the reader of submissions, GradingExecute's counting on synthetic kernel messages, and small
notebooks run in a plain kernel (no torch). tests/hostile_containment.py grades the same attacks with real nbgrader
in the sandbox (wired into test_hostile.py).
"""

import copy
import json
import os
import time
import warnings
import zipfile

import nbformat
import pytest
from conftest import complete_submission, use_sandbox
from traitlets.config import Config

from autograder import GradingError, submissions
from autograder.execute import GradingExecute, folder_usage, message_size
from autograder.grade import grade
from autograder.judging import METADATA_KEY
from autograder.notebooks import GRADER_CELL_KEYS, NOTES_KEY, add_note, grade_id, grading_notes
from autograder.submissions import DEFAULT_NAMED_REGEXP, NOTEBOOK_MB, find, read_notebook, unpack

SECRET = "0f" * 32  # a course secret of the tests' own

A, NB = "01_self_attention", "self_attention.ipynb"
COMPLETE = json.loads(nbformat.writes(complete_submission(A, NB)))
ANSWER = next(i for i, c in enumerate(COMPLETE["cells"]) if c["metadata"].get("nbgrader", {}).get("solution")
              and c["cell_type"] == "code")
TEST = next(i for i, c in enumerate(COMPLETE["cells"]) if c["metadata"].get("nbgrader", {}).get("grade"))


def _bytes(change) -> bytes:
    nb = copy.deepcopy(COMPLETE)
    change(nb)
    return json.dumps(nb).encode()


# ------------------------------------------------------------------------------------------ 1. metadata

MALFORMED = {
    "notebook metadata a string": (lambda nb: nb.update(metadata="boom"), "notebook's metadata is a string"),
    "notebook metadata a list": (lambda nb: nb.update(metadata=[]), "notebook's metadata is a list"),
    "cell metadata a number": (lambda nb: nb["cells"][ANSWER].update(metadata=5),
                               f"cell {ANSWER + 1}'s metadata is a number"),
    "nbgrader metadata a list": (lambda nb: nb["cells"][ANSWER]["metadata"].update(nbgrader=[]),
                                 f"cell {ANSWER + 1}'s nbgrader metadata is a list"),
    "nbgrader metadata a string": (lambda nb: nb["cells"][TEST]["metadata"].update(nbgrader="x"),
                                   f"cell {TEST + 1}'s nbgrader metadata is a string"),
    "grade_id a list": (lambda nb: nb["cells"][ANSWER]["metadata"]["nbgrader"].update(grade_id=["a"]),
                        "grade_id is a list"),
    "cells a mapping": (lambda nb: nb.update(cells={}), "cells are a mapping"),
    "a cell a string": (lambda nb: nb["cells"].__setitem__(3, "boom"), "cell 4 is a string"),
    "unknown cell type": (lambda nb: nb["cells"][3].update(cell_type="evil"), "cell 4 has the cell type 'evil'"),
    "kernelspec a string": (lambda nb: nb["metadata"].update(kernelspec="boom"), "metadata/kernelspec"),
    "tags a number": (lambda nb: nb["cells"][ANSWER]["metadata"].update(tags=7), f"cell {ANSWER + 1}/metadata/tags"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_metadata_is_a_plain_invalid_notebook(case):
    change, words = MALFORMED[case]
    nb, message = read_notebook(NB, _bytes(change))
    assert nb is None, f"{case} was accepted: nbgrader or the grader would trip over it later"
    assert words in message and message.startswith(NB), message


def test_malformed_metadata_of_an_older_format_is_refused_after_conversion():
    with warnings.catch_warnings():  # format 3 has no cell ids; nbformat warns while downgrading
        warnings.simplefilter("ignore")
        old = json.loads(nbformat.writes(nbformat.convert(complete_submission(A, NB), 3), version=3))
    old["worksheets"][0]["cells"][ANSWER]["metadata"]["nbgrader"] = ["solution"]
    nb, message = read_notebook(NB, json.dumps(old).encode())
    assert nb is None and "nbgrader metadata is a list" in message, message


@pytest.mark.parametrize("value", ["boom", 5, [], {"notes": "x", "flags": 5}, {"notes": ["FAKE: all fine"]}])
def test_the_graders_notes_cannot_be_prefilled(value):
    nb, message = read_notebook(NB, _bytes(lambda nb: nb["metadata"].update({NOTES_KEY: value})))
    assert nb is not None and message == ""
    assert NOTES_KEY not in nb.metadata and grading_notes(nb) == {}


@pytest.mark.parametrize("key", GRADER_CELL_KEYS)
def test_the_graders_cell_verdicts_cannot_be_prefilled(key):
    def change(nb):
        for cell in nb["cells"]:
            cell["metadata"][key] = "boom" if cell is nb["cells"][0] else {"passed": False, "mistake": "fake"}
    nb, _ = read_notebook(NB, _bytes(change))
    assert nb is not None and not any(key in cell.metadata for cell in nb.cells)
    assert METADATA_KEY in GRADER_CELL_KEYS


def test_grading_notes_and_grade_ids_read_any_metadata_safely():
    nb = nbformat.v4.new_notebook()
    for value in ("boom", 5, [], {"notes": "x", "flags": 5}):
        nb.metadata[NOTES_KEY] = value
        assert grading_notes(nb) == {}
        add_note(nb, "notes", "a note")
        assert grading_notes(nb)["notes"][-1] == "a note"
    for metadata in (5, "x", {"nbgrader": []}, {"nbgrader": {"grade_id": ["a"]}}, {"nbgrader": "x"}):
        assert grade_id({"metadata": metadata}) is None


# ------------------------------------------------------------------------------------------ 2. output

LIMIT = 10_000


def _executor(**config) -> GradingExecute:
    c = Config()
    c.GradingExecute.output_limit_bytes = LIMIT
    for key, value in config.items():
        setattr(c.GradingExecute, key, value)
    ex = GradingExecute(config=c)
    ex.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False  # as nbclient sets it before each cell
    return ex


def _msg(kind: str, **content) -> dict:
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "run"}, "content": content}


def _stored(cell) -> int:
    return sum(message_size(dict(output)) for output in cell.outputs)


def test_update_display_data_counts_against_the_output_limit():
    ex = _executor()
    cell = ex.nb.cells[0]
    ex.process_message(_msg("display_data", data={"text/plain": "x"}, metadata={},
                            transient={"display_id": "d"}), cell, 0)
    for i in range(100):  # each update rewrites the first output: 100 kB sent, never appended
        ex.process_message(_msg("update_display_data", data={"text/plain": f"{i:04d}" + "y" * 996}, metadata={},
                                transient={"display_id": "d"}), cell, 0)
    assert ex._output_bytes <= LIMIT < 100_000
    assert cell.outputs[0].data["text/plain"].startswith("0008"), "updates past the limit still rewrote the output"
    assert "output limit" in cell.outputs[-1].text


def test_clearing_output_does_not_give_the_limit_back():
    ex = _executor()
    cell = ex.nb.cells[0]
    shown = 0
    for _ in range(100):
        ex.process_message(_msg("clear_output", wait=False), cell, 0)
        ex.process_message(_msg("display_data", data={"text/plain": "z" * 1000}, metadata={}), cell, 0)
        shown += any(o.get("output_type") == "display_data" for o in cell.outputs)
    assert shown < 12, f"{shown} of 100 redisplays were kept: clearing reset the limit"


def test_error_outputs_count_and_are_cut_short_past_the_limit():
    ex = _executor()
    cell = ex.nb.cells[0]
    for _ in range(20):  # an error flood: showtraceback() in a loop
        ex.process_message(_msg("error", ename="ValueError", evalue="e" * 5000, traceback=["t" * 5000]), cell, 0)
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert 1 <= len(errors) <= 2, f"{len(errors)} errors kept"
    assert errors[-1].ename == "ValueError", "the cell no longer shows that it failed"
    assert _stored(cell) < LIMIT + 4000


def test_the_reply_error_nbgrader_adds_is_cut_short_too():
    ex = _executor()
    cell = ex.nb.cells[0]
    ex.process_message(_msg("stream", name="stdout", text="s" * (LIMIT - 100)), cell, 0)
    reply = {"content": {"status": "error", "ename": "Huge", "evalue": "h" * 1_000_000, "traceback": ["h" * 1_000]}}
    ex.on_cell_executed(cell=cell, cell_index=0, execute_reply=reply)
    assert cell.outputs[-1].ename == "Huge" and _stored(cell) < LIMIT + 4000


def test_stream_text_past_the_limit_is_dropped_with_one_note():
    ex = _executor()
    cell = ex.nb.cells[0]
    for _ in range(50):
        ex.process_message(_msg("stream", name="stdout", text="p" * 1000), cell, 0)
    assert _stored(cell) <= LIMIT + 200
    assert sum("output limit" in o.get("text", "") for o in cell.outputs) == 1


# ------------------------------------------------------------------------------------------ 3. time, 4. disk


def _run(cells: list[str], tmp_path, **config):
    """A plain-Python notebook of these cells run by GradingExecute in tmp_path: (notebook, seconds)."""
    ex = _executor(**config)
    ex.kernel_name = "python3"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    started = time.monotonic()
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}, "nbgrader": {"notebook": "plain"}})
    return nb, time.monotonic() - started


def test_a_notebook_stops_at_its_time_budget(tmp_path):
    nb, seconds = _run(["import time"] + ["time.sleep(1)"] * 12 + ["print('reached')"], tmp_path,
                       notebook_timeout=3)
    assert seconds < 9, f"the notebook ran {seconds:.0f} s past a budget of 3 s"
    assert "time budget of 3 s" in " ".join(grading_notes(nb)["notes"])
    assert nb.cells[-1].outputs[0].ename == "NotRun", "a cell after the budget ran"


def test_the_last_cell_gets_only_what_is_left_of_the_budget():
    ex = _executor(notebook_timeout=100)
    ex.timeout = 60
    ex._deadline = time.monotonic() + 5
    assert ex._get_timeout(nbformat.v4.new_code_cell("x")) <= 5
    ex._deadline = None
    assert ex._get_timeout(nbformat.v4.new_code_cell("x")) == 60


def test_printed_text_is_kept_as_one_output_however_the_kernel_split_it(tmp_path):
    # the kernel sends each flush as its own message (a loaded machine splits one print the same way): kept
    # split, the feedback of one submission differed between two gradings (a CI run, warm against cold)
    cell = ("import sys, time\n"
            "out, err = sys.stdout, sys.stderr\n"
            "for text, stream in [('a\\n', out), ('b\\n', out), ('e\\n', err), ('c\\n', out)]:\n"
            "    stream.write(text); stream.flush(); time.sleep(0.3)")
    nb, _ = _run([cell], tmp_path)
    outputs = [(o.name, o.text) for o in nb.cells[0].outputs]
    assert outputs == [("stdout", "a\nb\n"), ("stderr", "e\n"), ("stdout", "c\n")], outputs


def test_folder_usage_counts_bytes_and_files_and_stops_early(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 1000)
    (tmp_path / "sub").mkdir()
    size, count = folder_usage([tmp_path], 1 << 30, 1 << 30)
    assert size >= 50_000 and count == 51  # bytes on disk: at least what was written
    assert folder_usage([tmp_path], 1 << 30, 10)[1] < 51


def test_a_kernel_over_its_disk_quota_is_stopped_and_its_files_removed(tmp_path):
    (tmp_path / "given.txt").write_text("put there by nbgrader")
    nb, seconds = _run(["for i in range(100000):\n    open(f'junk{i}', 'wb').write(b'x' * 100_000)",
                        "print('still running')"], tmp_path, disk_limit_bytes=2_000_000, disk_limit_files=1000)
    assert "disk quota" in " ".join(grading_notes(nb)["notes"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["given.txt"], "what the kernel wrote is still there"
    assert not nb.cells[-1].outputs, "the kernel kept running after its quota"
    assert seconds < 30


def test_a_kernel_creating_too_many_files_is_stopped(tmp_path):
    nb, _ = _run(["import os\nos.mkdir('d')\nfor i in range(10**6):\n    open(f'd/{i}', 'w').close()"], tmp_path,
                 disk_limit_files=500)
    assert "disk quota" in " ".join(grading_notes(nb)["notes"])
    assert not any(tmp_path.iterdir())


def test_a_kernel_within_its_quota_keeps_its_files(tmp_path):
    nb, _ = _run(["open('model.bin', 'wb').write(b'x' * 1000)"], tmp_path, disk_limit_bytes=2_000_000)
    assert (tmp_path / "model.bin").exists() and not grading_notes(nb)


# ------------------------------------------------------------------------------------------ 5. LMS file names

BOB_AS_ALICE = f"A1_bob_attempt_2026-11-03-10-00-00_x_alice_attempt_2099-01-01-00-00-00_{NB}"


def _lay_out(tmp_path, names: list[str]):
    tmp_path.mkdir(exist_ok=True)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in names:
            z.writestr(name, name)
    root = unpack(archive, tmp_path / "scratch", {A}, [A], DEFAULT_NAMED_REGEXP, SECRET)
    return root, {s.student: s for s in find(root, [A], {A: [NB]}, SECRET)}


def _handed_in(sub) -> str:
    when, source = sub.handed_in
    return f"{when:%Y-%m-%d %H:%M:%S} {source}"


def test_a_file_name_cannot_move_a_submission_onto_another_student(tmp_path):
    root, subs = _lay_out(tmp_path, [f"A1_alice_attempt_2026-11-02-10-00-00_{NB}", BOB_AS_ALICE])
    alice = root / "alice" / A / NB
    assert alice.read_text() == f"A1_alice_attempt_2026-11-02-10-00-00_{NB}", "alice's notebook was replaced"
    assert _handed_in(subs["alice"]) == "2026-11-02 10:00:00 lms"
    assert subs["bob"].status == "missing-notebook" and "refused the file" in subs["bob"].message
    assert "alice" in subs["bob"].message and not subs["alice"].notes


def test_a_two_way_name_is_refused_but_the_students_other_attempts_count(tmp_path):
    root, subs = _lay_out(tmp_path, [f"A1_bob_attempt_2026-11-02-10-00-00_{NB}",
                                     f"A1_bob_attempt_2026-11-04-10-00-00_alice_attempt_2099-01-01-00-00-00_{NB}"])
    assert set(subs) == {"bob"} and subs["bob"].status == ""
    assert any("refused the file" in note for note in subs["bob"].notes)


def test_lms_names_are_read_at_the_first_attempt_marker(tmp_path):
    root, subs = _lay_out(tmp_path, [f"Transformers A1 (2026)_x_ada_attempt_2026-11-03-09-30-00_{NB}"])
    assert set(subs) == {"ada"} and (root / "ada" / A / NB).is_file()


def test_a_students_own_timestamp_in_an_lms_zip_is_refused_and_the_attempt_time_counts(tmp_path):
    # "2025-5-31" compared greater than "2025-06-02" as text: a 34-hour-late submission was graded on time
    root, subs = _lay_out(tmp_path, [f"A1_ada_attempt_2025-06-02-10-00-00_{NB}",
                                     "A1_ada_attempt_2025-06-02-10-00-00_timestamp.txt"])
    assert _handed_in(subs["ada"]) == "2025-06-02 10:00:00 lms"
    assert subs["ada"].nbgrader_files["timestamp.txt"] == "2025-06-02 10:00:00.000000 UTC"
    assert any("timestamp.txt" in note and "not believed" in note for note in subs["ada"].notes), subs["ada"].notes


def test_the_latest_attempt_is_the_latest_in_time_not_in_spelling(tmp_path):
    root, subs = _lay_out(tmp_path, [f"A1_ada_attempt_2025-5-31-10-00-00_{NB}".replace(NB, "a.ipynb"),
                                     f"A1_ada_attempt_2025-06-02-10-00-00_{NB}"])
    assert _handed_in(subs["ada"]) == "2025-06-02 10:00:00 lms"
    # and of two attempts at one file, the later in time is kept
    root, subs = _lay_out(tmp_path / "again", [f"A1_ada_attempt_2025-06-02-10-00-00_{NB}",
                                               f"A1_ada_attempt_2025-5-31-10-00-00_{NB}"])
    assert (root / "ada" / A / NB).read_text() == f"A1_ada_attempt_2025-06-02-10-00-00_{NB}"


# ------------------------------------------------------------------------------------------ 6. size and kind

def _huge_notebook(megabytes: int) -> bytes:
    """A notebook whose one output is `megabytes` MB of one character: a zip holds it in about a thousandth of that."""
    nb = copy.deepcopy(COMPLETE)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x" * (megabytes * 1024 * 1024)}]
    return json.dumps(nb).encode()


def test_a_zip_bomb_notebook_is_refused_by_its_size_and_nothing_over_the_cap_is_written(tmp_path):
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"class/ada/{A}/{NB}", json.dumps(COMPLETE))
        z.writestr(f"class/eve/{A}/{NB}", _huge_notebook(100))
    assert archive.stat().st_size < 300_000, "the 100 MB notebook travels in a small zip"
    root = unpack(archive, tmp_path / "scratch", {A}, [A], DEFAULT_NAMED_REGEXP, SECRET)
    written = root / "eve" / A / NB
    assert written.stat().st_size == NOTEBOOK_MB * 1024 * 1024 + 1, "extraction stops one byte past the cap"
    subs = {s.student: s for s in find(root, [A], {A: [NB]}, SECRET)}
    assert subs["ada"].status == "", subs["ada"].message
    assert subs["eve"].status == "invalid-notebook", subs["eve"]
    assert f"larger than {NOTEBOOK_MB} MB" in subs["eve"].message, subs["eve"]


def test_a_zip_that_expands_past_its_total_is_refused_before_grading(tmp_path, monkeypatch):
    monkeypatch.setattr(submissions, "ZIP_TOTAL_MB", 30)
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for student in ("a", "b"):
            z.writestr(f"{student}/{A}/{NB}", _huge_notebook(19))
    with pytest.raises(GradingError, match="expands to more than 30 MB"):
        unpack(archive, tmp_path / "scratch", {A}, [A], DEFAULT_NAMED_REGEXP, SECRET)


@pytest.mark.parametrize("kind", ["symbolic link", "hard link", "fifo", "too large"])
def test_a_notebook_that_is_not_a_plain_file_of_a_sane_size_is_refused_with_the_reason(tmp_path, kind):
    batch = tmp_path / "batch"
    for student in ("ada", "eve"):
        (batch / student / A).mkdir(parents=True)
    (batch / "ada" / A / NB).write_text(json.dumps(COMPLETE))
    secret_notebook = tmp_path / "instructor-source.ipynb"
    secret_notebook.write_text(json.dumps(COMPLETE))
    target = batch / "eve" / A / NB
    make = {"symbolic link": lambda: target.symlink_to(secret_notebook),
            "hard link": lambda: os.link(secret_notebook, target), "fifo": lambda: os.mkfifo(target),
            "too large": lambda: target.write_bytes(_huge_notebook(NOTEBOOK_MB + 1))}
    make[kind]()
    subs = {s.student: s for s in find(batch, [A], {A: [NB]}, SECRET)}
    assert subs["ada"].status == ""
    assert subs["eve"].status == "invalid-notebook", subs["eve"]
    said = kind if kind != "too large" else f"larger than {NOTEBOOK_MB} MB"
    assert said in subs["eve"].message, subs["eve"].message


def test_a_zip_bomb_in_an_lms_export_costs_its_student_alone(tmp_path):
    """Graded by real nbgrader: the honest student beside it scores full marks, the bomb's row says why it was
    refused, and no feedback page is written for it."""
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"A1_ada_attempt_2026-11-20-10-00-00_{NB}", json.dumps(COMPLETE))
        z.writestr(f"A1_eve_attempt_2026-11-20-10-00-00_{NB}", _huge_notebook(100))
    rows = {r.student: r for r in grade(archive, tmp_path / "out", [A], sandbox=use_sandbox(), progress=False)}
    assert rows["ada"].status == "graded" and rows["ada"].score == rows["ada"].max_score, rows["ada"]
    assert rows["eve"].status == "invalid-notebook", rows["eve"]
    assert f"larger than {NOTEBOOK_MB} MB" in rows["eve"].message, rows["eve"]
    assert not (tmp_path / "out" / "feedback" / "eve").exists()
