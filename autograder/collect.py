"""Collect submissions from nbgrader's exchange, every file in it hostile: ``python -m autograder collect ASSIGNMENT``.

``nbgrader collect`` copies each student's latest folder ``<student>+<assignment>+<timestamp>+<random>`` of the
exchange's ``inbound/`` into ``submitted/<student>/<assignment>/``. Every student can write in ``inbound/`` (it is
world-writable, sticky), so nbgrader collect believes what a student wrote: the student id and the time in the
folder's name, the ``timestamp.txt`` inside it (a late submission handed in "on time"), and it follows symbolic
links (a link to the instructor's source notebook is collected, graded and shown in the student's feedback). This
command collects the same folders into the same place, believing none of that:

- the folder, and everything in it, must be what nbgrader's submit makes: a folder, not a link, owned by the user
  whose name is the student id (``--no-check-owner`` where every student has the same uid, e.g. a hub spawning
  containers; then any student can hand in under another's name, as with nbgrader collect);
- it must hold only regular files each with one link (no symbolic link, hard link, fifo, socket or device), each
  at most ``NOTEBOOK_MB``, read without following a link; anything else refuses the folder, with the reason in that
  student's row of grades.csv;
- the hand-in time is the newest change time (ctime) of the folder and of everything in it, which the student
  cannot set back (autograder/handin.py); the latest folder by that time is collected; the time goes into
  ``timestamp.txt`` and into a record signed with the course secret (``handin.json``), which grading believes.

A newer submission replaces the one collected before; an older one or the same one changes nothing; a refused one
leaves the earlier one in place and its reason is added to that student's record.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from autograder import GradingError, course_dir, handin
from autograder.exchange import SECRET, SECRET_FORM
from autograder.secret import course_secret
from autograder.submissions import NOTEBOOK_MB, TIMESTAMP, oversize

#: files nbgrader's submit writes besides the notebooks, whose content is not taken from the student
SUBMIT_FILES = (TIMESTAMP, handin.RECORD)


@dataclass
class Collected:
    """What collecting did for one student: collected (at when), kept (nothing newer), or refused (why)."""

    student: str
    outcome: str  # collected | unchanged | refused
    when: str = ""
    reasons: list[str] = field(default_factory=list)


def exchange_inbound(course_root: Path) -> tuple[Path, str]:
    """The exchange's inbound folder of the course at course_root (its nbgrader_config.py's Exchange.root and
    CourseDirectory.course_id), and the course id."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course_root)).load_config()
    course_id = config.CourseDirectory.get("course_id", "")
    root = config.Exchange.get("root", "/srv/nbgrader/exchange")
    if not course_id:
        raise GradingError(f"{course_root / 'nbgrader_config.py'} names no c.CourseDirectory.course_id: the exchange "
                           "keeps submissions under it")
    return Path(root) / course_id / "inbound", course_id


def _owner_problem(student: str, uid: int) -> str:
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = f"uid {uid}"
    if owner == student:
        return ""
    return (f"its folder belongs to {owner}, not to {student}: only {student} can hand in as {student} (on a hub "
            "whose students share one uid, collect with --no-check-owner)")


def _read_folder(folder: Path, check_owner: bool, student: str) -> tuple[dict[str, bytes], float, list[str]]:
    """(file name -> content, newest change time, reasons to refuse) of one inbound folder, opened without ever
    following a link; nothing is read of a folder that is refused."""
    problems: list[str] = []
    try:
        top = os.lstat(folder)
    except OSError as error:
        return {}, 0.0, [f"its folder could not be read ({error.strerror})"]
    if not stat.S_ISDIR(top.st_mode):
        return {}, 0.0, [f"{folder.name!r} in the exchange is a {_kind(top.st_mode)}, not a folder"]
    if check_owner and (problem := _owner_problem(student, top.st_uid)):
        return {}, 0.0, [problem]
    if too_large := oversize(folder):  # counted before anything of it is read or copied (autograder/submissions.py)
        return {}, top.st_ctime, [too_large]
    newest = top.st_ctime
    entries: list[tuple[str, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            info = os.lstat(path)
            newest = max(newest, info.st_ctime)
            relative = str(path.relative_to(folder))
            if stat.S_ISDIR(info.st_mode):
                if name == ".ipynb_checkpoints":
                    dirnames.remove(name)
                continue
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{relative!r} is a {_kind(info.st_mode)}, not a file")
            elif info.st_nlink != 1:
                problems.append(f"{relative!r} is a hard link ({info.st_nlink} names for one file)")
            elif info.st_size > NOTEBOOK_MB * 1024 * 1024:
                problems.append(f"{relative!r} is {info.st_size / 2**20:.1f} MB; at most {NOTEBOOK_MB} MB is collected")
            elif dirpath == str(folder):
                entries.append((name, info))
    if problems:
        return {}, newest, problems
    files = {}
    for name, info in entries:
        if name in SUBMIT_FILES:
            continue  # the time is ours; nbgrader's submit wrote these on the student's side
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            now = os.fstat(f.fileno())
            if (now.st_ino, now.st_dev) != (info.st_ino, info.st_dev) or now.st_nlink != 1:
                return {}, newest, [f"{name!r} changed while it was collected"]
            files[name] = f.read(NOTEBOOK_MB * 1024 * 1024 + 1)
    if not any(name.endswith(".ipynb") for name in files):
        problems.append(f"no notebook in it (found {sorted(files) or 'nothing'})")
    secret = files.get(SECRET, b"").decode(errors="replace").strip()
    if SECRET in files and not SECRET_FORM.fullmatch(secret):
        del files[SECRET]  # a secret only names the student's feedback page; one not as nbgrader makes it is dropped
    return files, newest, problems


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISREG, "file")):
        if test(mode):
            return name
    return "special file"


def _held(target: Path, secret: str, student: str, assignment: str) -> dict | None:
    try:
        return handin.read((target / handin.RECORD).read_bytes(), secret, student, assignment)
    except OSError:
        return None


def collect(assignment: str, course_root: Path = course_dir.ROOT, *, check_owner: bool = True,
            secret: str | None = None) -> list[Collected]:
    """Collect every student's latest submission of the assignment from the exchange's inbound into course_root's
    submitted/ (see the module's docstring); what happened, per student."""
    inbound, _ = exchange_inbound(course_root)
    if not inbound.is_dir():
        raise GradingError(f"no exchange inbound folder at {inbound}: nothing has been submitted to this course yet "
                           "(or nbgrader_config.py's c.Exchange.root is another folder)")
    secret = secret or course_secret()
    candidates: dict[str, list[tuple[float, dict[str, bytes], list[str], str]]] = {}
    for entry in sorted(os.scandir(inbound), key=lambda e: e.name):
        parts = entry.name.rsplit("+", 3)  # <student>+<assignment>+<timestamp>[+<random>], as nbgrader reads it
        if len(parts) < 3 or parts[1] != assignment:
            continue
        student = parts[0]
        if not student or student.startswith(".") or "/" in student:
            continue
        files, when, problems = _read_folder(Path(entry.path), check_owner, student)
        candidates.setdefault(student, []).append((when, files, problems, entry.name))
    outcomes = []
    for student, found in sorted(candidates.items()):
        target = course_root / "submitted" / student / assignment
        held = _held(target, secret, student, assignment)
        good = [c for c in found if not c[2]]
        refused = [f"refused the submission {name!r} from the exchange: {'; '.join(problems)}"
                   for _, _, problems, name in found if problems]
        latest = max(good, key=lambda c: c[0], default=None)
        earlier = list(held.get("refused", [])) if held else []
        reasons = list(dict.fromkeys(earlier + refused))
        if latest is not None and (held is None or handin.utc(latest[0]) > held["handed_in"]):
            _write(target, secret, student, assignment, handin.utc(latest[0]), latest[1], reasons)
            outcomes.append(Collected(student, "collected", handin.nbgrader_time(handin.utc(latest[0])), refused))
        elif refused and reasons != earlier:
            if held is not None:
                notebooks = {p.name: p.read_bytes() for p in target.glob("*.ipynb")}
                record = handin.sign(secret, student, assignment, held["handed_in"], held["source"], notebooks, reasons)
                (target / handin.RECORD).write_bytes(record)
            else:
                _write(target, secret, student, assignment, None, {}, reasons)
            outcomes.append(Collected(student, "refused", "", refused))
        else:
            kept = held is not None and held.get("notebooks")
            outcomes.append(Collected(student, "unchanged", handin.nbgrader_time(held["handed_in"]) if kept else "",
                                      refused))
    return outcomes


def _write(target: Path, secret: str, student: str, assignment: str, when, files: dict[str, bytes],
           reasons: list[str]) -> None:
    """Replace target with these files, the timestamp.txt of `when` and the signed record (of only the refusals
    when nothing was collected), all written first beside it and then moved into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{assignment}-", dir=target.parent))
    for name, data in files.items():
        (staging / name).write_bytes(data)
    notebooks = {name: data for name, data in files.items() if name.endswith(".ipynb")}
    if when is not None:
        (staging / TIMESTAMP).write_text(handin.nbgrader_time(when))
        (staging / handin.RECORD).write_bytes(handin.sign(secret, student, assignment, when, "exchange", notebooks,
                                                          reasons))
    else:  # nothing collected: a record of the refusals alone, which no notebook matches
        (staging / handin.RECORD).write_bytes(handin.sign(secret, student, assignment, handin.utc(0), "exchange",
                                                          {}, reasons))
    staging.chmod(0o755)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
