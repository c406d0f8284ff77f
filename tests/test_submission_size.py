"""A submission's folder is bounded in size and in files before anything of it is read or copied, on every route a
submission arrives by: a folder given to `grade`, a zip, an LMS export, nbgrader's exchange.

Before: each notebook was capped at 20 MB, but a folder had no total: a student's folder of 114 MB (six files of
19 MB) was collected from the exchange (read into memory and copied), and a folder of a thousand and one files was
listed to the end and graded. Each case here sits beside an honest control in the same batch; all run in-process
(a refusal needs no nbgrader run; tests/hostile_content.py grades the folder cases with real nbgrader)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import complete_submission, write_submission
from test_handin import SECRET, _course, _submit

from autograder import GradingError, course_dir
from autograder.collect import collect
from autograder.submissions import DEFAULT_NAMED_REGEXP, MB, SUBMISSION_FILES, SUBMISSION_MB, find, unpack

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
COMPLETE = nbformat.writes(complete_submission(A, NB)).encode()
#: files under the 20 MB a file may have, over the 100 MB a folder may hold in all
BIG_FILES, BIG_FILE_BYTES = 6, 19 * MB


def _sparse(path: Path, size: int) -> None:
    """A file of this size that takes no disk (its bytes are zeros nobody wrote)."""
    with open(path, "wb") as f:
        f.truncate(size)


def _oversized(folder: Path, kind: str, over: int = 1) -> None:
    """An honest notebook, and beside it either too many bytes or too many files (over=0: just under the cap)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NB).write_bytes(COMPLETE)
    if kind == "bytes":
        for index in range(BIG_FILES - 1 + over):
            _sparse(folder / f"data{index}.bin", BIG_FILE_BYTES)
    else:
        (folder / "many").mkdir()
        for index in range(SUBMISSION_FILES + over - len(list(folder.iterdir()))):  # entries in all: the cap + over
            (folder / "many" / f"{index}.txt").touch()


EXPECTED = {"bytes": f"more than {SUBMISSION_MB} MB", "files": f"more than {SUBMISSION_FILES} files"}


def _find(batch: Path) -> dict:
    return {sub.student: sub for sub in find(batch, [A], {A: [NB]}, SECRET)}


@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_a_folder_over_the_cap_is_refused_with_what_it_holds_beside_an_honest_one(tmp_path, kind):
    batch = tmp_path / "batch"
    write_submission(batch, "ada", A, NB, complete_submission(A, NB))
    _oversized(batch / "eve" / A, kind)
    subs = _find(batch)
    assert subs["ada"].status == "" and subs["ada"].notebooks, subs["ada"]
    assert subs["eve"].status == "invalid-notebook" and not subs["eve"].notebooks, subs["eve"]
    assert EXPECTED[kind] in subs["eve"].message and "resubmit" in subs["eve"].message, subs["eve"].message


@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_a_folder_just_under_the_cap_is_read(tmp_path, kind):
    """The cap is a bound, not a guess at honest sizes: 95 MB, or 1,000 files and folders, are read."""
    _oversized(tmp_path / "batch" / "ada" / A, kind, over=0)
    subs = _find(tmp_path / "batch")
    assert subs["ada"].status == "" and subs["ada"].notebooks, subs["ada"]


def _zip(archive: Path, entries: dict[str, bytes | int]) -> Path:
    """A zip of these entries: bytes, or a number of zero bytes (which deflate to almost nothing)."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            if isinstance(data, int):
                with z.open(name, "w", force_zip64=True) as sink:
                    for _ in range(data // MB):
                        sink.write(bytes(MB))
            else:
                z.writestr(name, data)
    return archive


#: a zip's entries are written out when it is extracted: the zip routes run with a cap of 2 MB, not 100 (the same code)
SMALL_CAP_MB = 2


@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_a_zipped_folder_over_the_cap_is_refused_beside_an_honest_one(tmp_path, kind, monkeypatch):
    monkeypatch.setattr("autograder.submissions.SUBMISSION_MB", SMALL_CAP_MB)
    entries: dict[str, bytes | int] = {f"submitted/ada/{A}/{NB}": COMPLETE, f"submitted/eve/{A}/{NB}": COMPLETE}
    if kind == "bytes":
        entries |= {f"submitted/eve/{A}/data{i}.bin": MB for i in range(SMALL_CAP_MB + 1)}
    else:
        entries |= {f"submitted/eve/{A}/many/{i}.txt": b"" for i in range(SUBMISSION_FILES + 1)}
    archive = _zip(tmp_path / "batch.zip", entries)
    batch = unpack(archive, tmp_path / "scratch", {A}, [A], r"^$", SECRET)
    subs = _find(batch)
    assert subs["ada"].status == "" and subs["eve"].status == "invalid-notebook", subs["eve"]
    words = f"more than {SMALL_CAP_MB} MB" if kind == "bytes" else EXPECTED[kind]
    assert words in subs["eve"].message, subs["eve"].message


def test_a_zip_of_more_entries_than_a_batch_may_hold_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr("autograder.submissions.ZIP_TOTAL_FILES", 50)
    archive = _zip(tmp_path / "batch.zip", {f"submitted/ada/{A}/{i}.txt": b"" for i in range(51)})
    with pytest.raises(GradingError, match="holds 51 entries; a batch may hold at most 50"):
        unpack(archive, tmp_path / "scratch", {A}, [A], r"^$", SECRET)
    assert not (tmp_path / "scratch").exists()


LMS = "Transformers A1_{student}_attempt_2026-11-03-09-30-00_{name}"


@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_an_lms_student_over_the_cap_is_refused_and_not_copied_beside_an_honest_one(tmp_path, kind, monkeypatch):
    monkeypatch.setattr("autograder.submissions.SUBMISSION_MB", SMALL_CAP_MB)
    entries: dict[str, bytes | int] = {LMS.format(student="ada", name=NB): COMPLETE,
                                       LMS.format(student="eve", name=NB): COMPLETE}
    if kind == "bytes":
        entries |= {LMS.format(student="eve", name=f"data{i}.bin"): MB for i in range(SMALL_CAP_MB + 1)}
    else:
        entries |= {LMS.format(student="eve", name=f"{i}.txt"): b"" for i in range(SUBMISSION_FILES + 1)}
    archive = _zip(tmp_path / "export.zip", entries)
    batch = unpack(archive, tmp_path / "scratch", {A}, [A], DEFAULT_NAMED_REGEXP, SECRET)
    assert not (batch / "eve").exists(), "the refused student's files were copied"
    subs = _find(batch)
    assert subs["ada"].status == "" and subs["ada"].notebooks, subs["ada"]
    assert subs["eve"].status == "missing-notebook" and not subs["eve"].notebooks, subs["eve"]
    words = f"{SMALL_CAP_MB} MB" if kind == "bytes" else f"{SUBMISSION_FILES} files"
    assert "refused this student's" in subs["eve"].message and words in subs["eve"].message, subs["eve"].message


@pytest.mark.parametrize("kind", ["bytes", "files"])
def test_an_exchange_folder_over_the_cap_is_refused_and_not_collected_beside_an_honest_one(tmp_path, kind):
    course, inbound = _course(tmp_path)
    _submit(inbound, "ada")
    _oversized(_submit(inbound, "eve"), kind)
    outcomes = {o.student: o for o in collect(A, course.root, check_owner=False, secret=SECRET)}
    assert outcomes["ada"].outcome == "collected", outcomes["ada"]
    assert outcomes["eve"].outcome == "refused" and EXPECTED[kind] in outcomes["eve"].reasons[0], outcomes["eve"]
    assert not list((course.root / "submitted" / "eve").rglob("*.ipynb")), "the refused folder was collected"
    subs = _find(course.root / "submitted")
    assert subs["eve"].status == "missing-notebook" and EXPECTED[kind] in subs["eve"].message, subs["eve"].message
