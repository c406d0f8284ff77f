"""Finding and reading the submissions in a batch, however they arrive.

A batch is a folder laid out like nbgrader's submitted/ (<student>/<assignment>/<notebook>.ipynb), a zip of one,
or the flat zip a learning-management system exports, whose file names carry the student id and a timestamp
(nbgrader zip_collect's convention, parsed by a named regular expression).
"""

import json
import os
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
from nbgrader.utils import parse_utc

from autograder import GradingError, handin
from autograder.notebooks import drop_grader_metadata

#: the file in which nbgrader records when a submission was handed in
TIMESTAMP = "timestamp.txt"
#: files nbgrader's submit and collect leave beside the notebooks (the secret names the student's feedback)
NBGRADER_FILES = (TIMESTAMP, "submission_secret.txt")
#: what a student may not upload under these names (the hand-in time's record, autograder/handin.py, besides)
RESERVED = (*NBGRADER_FILES, handin.RECORD)
#: an LMS export's file names: <prefix>_<student>_attempt_<timestamp>_<file>, where the LMS writes everything up to
#: the first "_attempt_<timestamp>_" and the student chose only <file>, so the name is read at that first one
#: (nbgrader's documented example, r".+_(?P<student_id>\w+)_attempt_...", reads it at the last, which a student's
#: own file name could then move onto another student)
MB = 1024 * 1024
DEFAULT_NAMED_REGEXP = r".+?_(?P<student_id>[^\W_]+)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>.+)"
#: a file name that, past the first attempt marker, holds another: it could be read as another student's or attempt
SECOND_ATTEMPT = re.compile(r"(?:^|_)[^\W_]+_attempt_[0-9\-]+_")
#: where laying out an LMS export leaves the files it refused, for find() to report: student -> [reasons]
REFUSED = ".autograder-refused.json"
#: the largest notebook the grader reads. The course's largest honest notebook, executed with every figure
#: (solutions/07), is 0.3 MB; a student's with big printed tensors or extra figures can reach a few MB. Above this a
#: notebook is refused, by its size on disk, before a byte of it is parsed: parsing, grading and rendering a 100 MB
#: notebook took 1.36 GB of memory and wrote a 105 MB feedback page.
NOTEBOOK_MB = 20
#: the most a student's submission folder may hold in all, counted before any file of it is read or copied, on every
#: route (a folder, a zip, an LMS export, the exchange). The grader reads a submission's notebooks (one per
#: assignment in this course, 0.3 MB at most executed; at most NOTEBOOK_MB each) and nothing else: 100 MB leaves room
#: for a notebook at that cap, its checkpoint copy and the student's own files several times over
SUBMISSION_MB = 100
#: the most files and folders a submission folder may hold (an honest one: a notebook, nbgrader's two files, a
#: checkpoint folder); the count stops at the first one past it, so a folder of a million empty files costs a
#: thousand listings, not a million
SUBMISSION_FILES = 1000
#: the most entries a zip may hold in all, refused before anything is written (a class of 1,000 students at 100 files)
ZIP_TOTAL_FILES = 100_000
#: the most a zip may expand to in all (every entry is also cut at NOTEBOOK_MB + 1 byte while it is extracted, so a
#: zip bomb's entries cost at most that much each)
ZIP_TOTAL_MB = 4096


@dataclass
class Submission:
    """What one student handed in for one assignment: notebook name -> file, and notes for the instructor."""

    student: str
    assignment: str
    notebooks: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    status: str = ""  # empty when it can be graded; else missing | missing-notebook | invalid-notebook
    message: str = ""
    nbgrader_files: dict[str, str] = field(default_factory=dict)  # timestamp.txt (the time believed), the secret
    handed_in: tuple[datetime, str] | None = None  # when, and from what (handin.SOURCES): the time believed
    refused: list[str] = field(default_factory=list)  # what collecting refused of this student's other submissions

    @property
    def timestamp(self) -> str | None:
        return self.nbgrader_files.get(TIMESTAMP)


def unpack(path: Path, scratch: Path, known: set[str], assignments: list[str], named_regexp: str,
           secret: str = "") -> Path:
    """The folder whose children are student folders: path itself, its unzipped content, or an LMS export laid
    out anew (each student's attempt time signed with the course secret, handin.py)."""
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise GradingError(f"{path} is neither a folder nor a zip file.")
        target = scratch / "unzipped"
        _extract(path, target)
        path = target
    if not path.is_dir():
        raise GradingError(f"{path} does not exist.")
    root = _layout_root(path, known)
    if any(sub.name in known for child in visible_dirs(root) for sub in visible_dirs(child)):
        return root
    flat = [p for p in path.rglob("*") if p.is_file() and re.fullmatch(named_regexp, p.name)]
    if flat:
        if len(assignments) != 1:
            raise GradingError("This looks like a learning-management-system export (one flat list of files): "
                             "name its assignment with --assignment NAME.")
        return _lay_out_export(flat, scratch / "collected", assignments[0], named_regexp, secret)
    return root


def _extract(archive_path: Path, target: Path) -> None:
    """Extract a zip as plain files and folders, never trusting its declared sizes: each entry is copied up to
    NOTEBOOK_MB + 1 bytes (a file cut there is refused as too large when its submission is read, by its size) and
    the whole up to ZIP_TOTAL_MB. Absolute paths and '..' parts are dropped, and nothing but plain files and folders
    is made (a link entry becomes a file holding its target's name)."""
    written, cap = 0, NOTEBOOK_MB * MB + 1
    with zipfile.ZipFile(archive_path) as archive:
        if len(archive.infolist()) > ZIP_TOTAL_FILES:
            raise GradingError(f"{archive_path} holds {len(archive.infolist())} entries; a batch may hold at most "
                               f"{ZIP_TOTAL_FILES} (each submission at most {SUBMISSION_FILES}): grade it in parts. "
                               "Nothing was written.")
        for entry in archive.infolist():
            name = entry.filename
            destination = target.joinpath(*[part for part in Path(name.replace("\\", "/")).parts
                                            if part not in ("", ".", "..", "/")])
            if not destination.resolve().is_relative_to(target.resolve()) or destination == target:
                continue
            if entry.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(entry) as source, destination.open("wb") as sink:
                left = cap
                while left > 0 and (chunk := source.read(min(left, MB))):
                    sink.write(chunk)
                    left -= len(chunk)
                    written += len(chunk)
                    if written > ZIP_TOTAL_MB * MB:
                        raise GradingError(f"{archive_path} expands to more than {ZIP_TOTAL_MB} MB (its entries "
                                           f"declare {sum(e.file_size for e in archive.infolist()) / MB:.0f} MB); "
                                           "grade it in parts. Nothing was written.")


def oversize(folder: Path) -> str:
    """Why a student's submission folder is too large to read, or '': its files and folders counted and their sizes
    (as listed, a link never followed) added up, the listing stopped at the first entry past SUBMISSION_FILES or
    SUBMISSION_MB, before any file of it is opened."""
    entries, size, pending = 0, 0, [folder]
    while pending:
        try:
            listing = os.scandir(pending.pop())
        except OSError:
            continue  # a folder that cannot be listed cannot be read either: what is found in it is refused later
        with listing:
            for entry in listing:
                entries += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        size += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                if entries > SUBMISSION_FILES:
                    return (f"its folder holds more than {SUBMISSION_FILES} files and folders (counting stopped "
                            f"there); a submission needs only its notebook: remove the other files and resubmit")
                if size > SUBMISSION_MB * MB:
                    return (f"its folder holds more than {SUBMISSION_MB} MB (counting stopped at {size / MB:.0f} "
                            f"MB, in {entries} files and folders); a submission needs only its notebook, at most "
                            f"{NOTEBOOK_MB} MB: remove the other files and resubmit")
    return ""


def _layout_root(folder: Path, known: set[str]) -> Path:
    """Descend through single wrapping folders (a zip of 'submitted/', say) to the student folders."""
    children = visible_dirs(folder)
    if any(sub.name in known for child in children for sub in visible_dirs(child)):
        return folder
    if len(children) == 1:
        return _layout_root(children[0], known)
    return folder


def ambiguous(name: str, file_id: str) -> str:
    """Why an LMS file name in the default convention could be read two ways, or '' when it cannot."""
    second = SECOND_ATTEMPT.search(file_id)
    if not second:
        return ""
    return (f"refused the file {name!r}: its own name ({file_id!r}) holds a second '_attempt_<time>_' "
            f"({second.group(0).strip('_')!r}), so it could be read as another student's or another attempt's; "
            "grade it by hand")


def _attempt_time(stamp: str) -> datetime | None:
    """An attempt time in nbgrader zip_collect's convention, e.g. 2026-11-20-14-05-09 (UTC), as a time: compared as
    text, '2025-5-31' would come after '2025-06-02'."""
    try:
        return datetime.strptime(stamp, "%Y-%m-%d-%H-%M-%S")
    except ValueError:
        return None


def _lay_out_export(files: list[Path], target: Path, assignment: str, named_regexp: str, secret: str = "") -> Path:
    """Copy an LMS export into <student>/<assignment>/<file>, keeping the latest attempt of every file, with a
    record of the student's latest attempt time signed with the course secret (handin.py). In the default convention
    a name that could be read two ways is refused (noted for its student by find())."""
    latest: dict[tuple[str, str], tuple[datetime | None, str, Path]] = {}
    refused: dict[str, list[str]] = {}
    for path in files:
        match = re.fullmatch(named_regexp, path.name)
        student, file_id = match["student_id"], match["file_id"]
        stamp = match.groupdict().get("timestamp") or ""
        if not student or student.startswith(".") or "/" in student or "/" in file_id:
            continue
        reason = ambiguous(path.name, file_id) if named_regexp == DEFAULT_NAMED_REGEXP else ""
        if file_id in RESERVED:  # the hand-in time is the LMS's attempt time, never a file the student uploaded
            reason = (f"refused the file {path.name!r}: a student's own {file_id!r} is not believed (the hand-in "
                      "time is the LMS's attempt time)")
        if reason:
            refused.setdefault(student, []).append(reason)
            continue
        when = _attempt_time(stamp)
        held = latest.get((student, file_id))
        if held is None or (when or datetime.min, stamp) > (held[0] or datetime.min, held[1]):
            latest[student, file_id] = (when, stamp, path)
    for student in {student for student, _ in latest}:  # a student's files counted before any is read or copied
        kept = [path for (who, _), (_, _, path) in latest.items() if who == student]
        size = sum(path.lstat().st_size for path in kept)
        if len(kept) > SUBMISSION_FILES or size > SUBMISSION_MB * MB:
            refused.setdefault(student, []).append(
                f"refused this student's {len(kept)} files ({size / MB:.0f} MB): a submission may hold at most "
                f"{SUBMISSION_FILES} files and {SUBMISSION_MB} MB, and needs only its notebook, at most {NOTEBOOK_MB} "
                "MB; nothing of it was graded")
            latest = {key: value for key, value in latest.items() if key[0] != student}
    handed_in: dict[str, datetime] = {}
    copied: dict[str, dict[str, bytes]] = {}
    for (student, file_id), (when, _, path) in latest.items():
        folder = target / student / assignment
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / file_id)
        copied.setdefault(student, {})[file_id] = path.read_bytes()
        if when is not None and (student not in handed_in or when > handed_in[student]):
            handed_in[student] = when
    for student, when in handed_in.items():
        record = handin.sign(secret, student, assignment, when, "lms", copied[student]) if secret else b""
        (target / student / assignment / handin.RECORD).write_bytes(record)
    target.mkdir(parents=True, exist_ok=True)
    if refused:
        (target / REFUSED).write_text(json.dumps(refused))
    return target


def visible_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__")))


def _normalised(name: str) -> str:
    """'Copy of Self_Attention (1).ipynb' and 'self_attention-Copy1.ipynb' -> 'self_attention'."""
    stem = name[: -len(".ipynb")] if name.lower().endswith(".ipynb") else name
    stem = stem.lower().strip()
    stem = re.sub(r"^copy of ", "", stem)
    stem = re.sub(r"(\s*\(\d+\)|-copy\d*|\s+copy(\s*\d+)?)$", "", stem)
    return re.sub(r"[\s\-]+", "_", stem)


def find(batch: Path, assignments: list[str], expected: dict[str, list[str]], secret: str = "",
         arrived: float | None = None) -> list[Submission]:
    """One Submission per student folder and assignment; a student's folders that differ only in case are one
    student. Each is handed in at the time its record signed with secret says, else when it arrived: arrived (the
    zip's change time, for a zip), else its notebooks' newest change time (handin.py)."""
    by_student: dict[str, list[Path]] = {}
    for folder in visible_dirs(batch):
        by_student.setdefault(folder.name.strip().lower(), []).append(folder)
    found = []
    for folders in by_student.values():
        if len(folders) > 1:  # which of a student's folders to grade: never by listing an oversized one
            folders.sort(key=lambda folder: _newest_notebook(folder, assignments), reverse=True)
        chosen = folders[0]
        ignored = [f.name for f in folders[1:]]
        for assignment in assignments:
            sub = _find_one(chosen.name, chosen / assignment, assignment, expected[assignment], secret, arrived)
            if ignored:
                sub.notes.append(f"also submitted as {ignored}; graded the newest, {chosen.name}")
            found.append(sub)
    _report_refused(batch, assignments, found)
    return sorted(found, key=lambda s: (s.student, s.assignment))


def _report_refused(batch: Path, assignments: list[str], found: list[Submission]) -> None:
    """The files an LMS export's layout refused, each told to the student it names first (laid out by
    _lay_out_export, which the batch's own students cannot write to: it sits beside their folders)."""
    path = batch / REFUSED
    if not path.is_file() or len(assignments) != 1:
        return
    try:
        refused = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    by_student = {sub.student: sub for sub in found if sub.assignment == assignments[0]}
    for student, reasons in (refused.items() if isinstance(refused, dict) else []):
        text = "; ".join(str(r) for r in reasons) if isinstance(reasons, list) else str(reasons)
        sub = by_student.get(student)
        if sub is None:
            found.append(Submission(str(student), assignments[0], status="missing-notebook", message=text))
        elif sub.status:
            sub.message = f"{sub.message}; {text}" if sub.message else text
        else:
            sub.notes.append(text)


def _newest_notebook(folder: Path, assignments: list[str]) -> float:
    """The newest change of a notebook in the student folder's assignments, of those not too large to read."""
    return max((p.lstat().st_mtime for a in assignments if (folder / a).is_dir() and not oversize(folder / a)
                for p in (folder / a).rglob("*.ipynb")), default=0.0)


def _find_one(student: str, folder: Path, assignment: str, expected: list[str], secret: str = "",
              arrived: float | None = None) -> Submission:
    sub = Submission(student, assignment)
    if not folder.is_dir():
        sub.status, sub.message = "missing", "no folder for this assignment"
        return sub
    too_large = oversize(folder)
    if too_large:  # refused before any of it is read (nothing of a folder route is copied)
        sub.status, sub.message = "invalid-notebook", too_large
        return sub
    present = sorted(p for p in folder.rglob("*") if not p.is_dir() and ".ipynb_checkpoints" not in p.parts)
    record = b""
    for name in RESERVED:  # what nbgrader's collect, autograder's collect or an LMS layout left beside the notebooks
        path = folder / name
        if path in present:
            present.remove(path)
            if _not_plain(path) or path.lstat().st_size > handin.MAX_RECORD_BYTES:
                sub.notes.append(f"ignored its {name}: {_not_plain(path) or 'too large'}")
                continue
            if name == handin.RECORD:
                record = path.read_bytes()
                continue
            text = path.read_text(errors="replace").strip()
            if text and text.isprintable() and len(text) <= 256:
                sub.nbgrader_files[name] = text
    held = handin.read(record, secret, student, assignment) if record and secret else None
    refusals = [str(reason) for reason in (held or {}).get("refused", [])]
    odd = {p: _not_plain(p) for p in present}
    notebooks = [p for p in present if p.suffix.lower() == ".ipynb"]
    for name in expected:
        exact = folder / name
        matches = [p for p in notebooks if _normalised(p.name) == _normalised(name)]
        if exact.is_file():
            chosen = exact
        elif len(matches) == 1:
            chosen = matches[0]
        elif not matches and len(notebooks) == 1 and len(expected) == 1:
            chosen = notebooks[0]
        else:
            sub.status = "missing-notebook"
            listed = [p.name for p in notebooks] or "no notebooks"
            sub.message = "; ".join([f"expected {name}, found {listed}" if not matches else
                                     f"expected {name}, found several versions {[p.name for p in matches]}: keep one",
                                     *refusals])
            return sub
        if odd.get(chosen) or chosen.lstat().st_size > NOTEBOOK_MB * MB:
            sub.status = "invalid-notebook"
            sub.message = odd.get(chosen) or (
                f"{chosen.name} is larger than {NOTEBOOK_MB} MB, the most the grader reads of a notebook: clear "
                "large outputs (Edit > Clear Outputs of All Cells) and resubmit")
            return sub
        if chosen.name != name:
            sub.notes.append(f"graded {chosen.name!r} as {name}")
        others = [p.name for p in matches if p != chosen]
        if others:
            sub.notes.append(f"ignored other versions {others}")
        sub.notebooks[name] = chosen
    extra = [str(p.relative_to(folder)) for p in present
             if p not in sub.notebooks.values() and p.suffix.lower() != ".ipynb"]
    if extra:
        more = " ..." if len(extra) > 5 else ""
        sub.notes.append(f"ignored {len(extra)} extra file(s): {', '.join(extra[:5])}{more}")
    _settle_time(sub, held, bool(record), arrived)
    sub.refused = refusals
    sub.notes.extend(refusals)
    return sub


def _settle_time(sub: Submission, held: dict | None, had_record: bool, arrived: float | None) -> None:
    """Set when the submission was handed in (sub.handed_in, and the timestamp.txt nbgrader is given): its signed
    record's time when the record covers exactly the notebooks graded, else when it arrived (handin.py). A
    timestamp.txt the student's side wrote is never believed: the note says so when it claimed another time."""
    notebooks = {path.name: path.read_bytes() for path in sub.notebooks.values()}
    claimed = sub.nbgrader_files.pop(TIMESTAMP, None)
    if held is not None and handin.covers(held, notebooks):
        when, source = held["handed_in"], held["source"]
    else:
        if had_record:
            sub.notes.append(f"its {handin.RECORD} is not one this course signed for these notebooks: the time they "
                             "arrived on this machine counts")
        when = handin.utc(arrived if arrived is not None else
                          max(path.lstat().st_ctime for path in sub.notebooks.values()))
        source = "arrived"
    sub.handed_in = (when, source)
    sub.nbgrader_files[TIMESTAMP] = handin.nbgrader_time(when)
    if claimed and _claims_other_time(claimed, when):
        how = {"lms": "the LMS's attempt time", "exchange": "when its exchange folder last changed (python -m "
               "autograder collect)", "arrived": "when its files arrived on this machine"}[source]
        sub.notes.append(f"its own timestamp.txt ({claimed[:40]!r}) is not believed: nbgrader's submit writes it on "
                         f"the student's side; handed in {when:%Y-%m-%d %H:%M:%S} UTC, {how}")


def _claims_other_time(claimed: str, when: datetime) -> bool:
    try:
        other = parse_utc(claimed)  # nbgrader's own reading of timestamp.txt
    except (ValueError, OverflowError, TypeError):
        return True
    return abs((other.replace(tzinfo=None) - when.replace(tzinfo=None)).total_seconds()) >= 1


def _not_plain(path: Path) -> str:
    """Why the grader does not read this file ('' when it is a plain file with one name): a symbolic link could point
    at any file of the grading machine (the instructor's source notebook), a hard link is another file's content
    under this name, and a fifo or a device could block or never end."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"{path.name} is a symbolic link; the grader reads only plain files"
    if not stat.S_ISREG(info.st_mode):
        return f"{path.name} is not a plain file (a fifo, a socket or a device); the grader reads only plain files"
    if info.st_nlink > 1:
        return f"{path.name} is a hard link ({info.st_nlink} names for one file); the grader reads only plain files"
    return ""


def read_notebook(name: str, data: bytes) -> tuple[nbformat.NotebookNode | None, str]:
    """The notebook file `name` with this content as nbformat 4, or None and a plain-words reason it cannot be read."""
    if not data.strip():
        return None, f"{name} is empty"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return None, f"{name} is not UTF-8 text (byte {error.start}); was it saved by another program?"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{name} is not valid JSON (line {error.lineno}): the file is damaged or was cut off"
    if isinstance(raw, dict) and raw.get("nbformat") == 4 and malformed(raw):  # before nbformat trips over it
        return None, f"{name} is not a well-formed notebook: {malformed(raw)}"
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as error:
        return None, f"{name} is JSON but not a Jupyter notebook ({type(error).__name__})"
    if not isinstance(raw, dict) or not isinstance(nb.get("cells"), list):
        return None, f"{name} is JSON but not a Jupyter notebook"
    problem = malformed(nb)
    if problem:
        return None, f"{name} is not a well-formed notebook: {problem}"
    drop_grader_metadata(nb)  # the grader's notes and verdicts are the grader's to write
    original = raw.get("nbformat")
    for index, cell in enumerate(nb.cells):  # notebooks older than format 4.5 have no cell ids
        cell.setdefault("id", f"cell-{index}")
    nb.nbformat_minor = max(nb.get("nbformat_minor", 0), 5)
    problem = schema_problem(nb)
    if problem:
        return None, f"{name} is not a valid notebook: {problem}"
    return nb, (f"converted from notebook format {original}" if original != 4 else "")


CELL_TYPES = ("code", "markdown", "raw")


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def malformed(nb) -> str:
    """What in a notebook's structure or metadata the grading steps could not read, in plain words, or ''."""
    if not isinstance(nb.get("metadata", {}), dict):
        return f"the notebook's metadata is {_kind(nb['metadata'])}, not a mapping"
    if not isinstance(nb.get("cells"), list):
        return f"its cells are {_kind(nb.get('cells'))}, not a list"
    for number, cell in enumerate(nb["cells"], 1):
        if not isinstance(cell, dict):
            return f"cell {number} is {_kind(cell)}, not a cell"
        if cell.get("cell_type") not in CELL_TYPES:
            return f"cell {number} has the cell type {str(cell.get('cell_type'))[:40]!r}, not one of {CELL_TYPES}"
        source = cell.get("source", "")
        if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(x, str) for x in source)):
            return f"cell {number}'s source is {_kind(source)}, not text"
        metadata = cell.get("metadata", {})
        if not isinstance(metadata, dict):
            return f"cell {number}'s metadata is {_kind(metadata)}, not a mapping"
        nbgrader = metadata.get("nbgrader", {})
        if not isinstance(nbgrader, dict):
            return f"cell {number}'s nbgrader metadata is {_kind(nbgrader)}, not a mapping"
        if not isinstance(nbgrader.get("grade_id", ""), str):
            return f"cell {number}'s nbgrader grade_id is {_kind(nbgrader['grade_id'])}, not text"
    return ""


def schema_problem(nb: nbformat.NotebookNode) -> str:
    """Where the notebook breaks Jupyter's notebook schema (nbgrader refuses to write such a notebook), outputs
    aside (grading clears them first), or ''."""
    cells = []
    for cell in nb.cells:
        shown = {**cell, "metadata": {k: v for k, v in cell.get("metadata", {}).items()
                                      if k not in ("collapsed", "scrolled")}}  # as nbgrader's ClearOutput leaves it
        if cell.get("cell_type") == "code":
            shown.update(outputs=[], execution_count=None)
        cells.append(shown)
    try:
        nbformat.validate({**nb, "cells": cells})
    except nbformat.ValidationError as error:
        where = "/".join(str(p) for p in getattr(error, "absolute_path", None) or getattr(error, "path", []) or [])
        message = " ".join(str(getattr(error, "message", error)).split())
        if where.startswith("cells/") and where.split("/")[1].isdigit():  # cells counted from 1, as above
            parts = where.split("/")
            where = f"cell {int(parts[1]) + 1}" + ("/" + "/".join(parts[2:]) if parts[2:] else "")
        return f"{where or 'the notebook'}: {message[:200]}"
    return ""
