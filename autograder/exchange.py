"""Feedback through nbgrader's exchange for every submission, also one that never came through it.

How nbgrader 0.9.6's exchange finds a student's feedback (nbgrader/exchange/default/):

- ``nbgrader submit`` (the student) writes the notebooks, ``timestamp.txt`` and a random ``submission_secret.txt``
  into the exchange's ``inbound/<student>+<assignment>+<timestamp>+<random>/`` and the same into the student's own
  cache, ``Exchange.cache/<course>/<student>+<assignment>+<timestamp>/`` (``$JUPYTER_DATA_DIR/nbgrader_cache``);
  ``nbgrader collect`` copies the inbound copy into ``submitted/``.
- ``nbgrader release_feedback`` (the instructor) reads ``timestamp.txt`` and ``submission_secret.txt`` from
  ``feedback/<student>/<assignment>/`` (``generate_feedback`` copies them there from ``autograded/``, which autograde
  copies from ``submitted/``) and copies each page to ``<exchange>/<course>/feedback/<md5(secret + notebook)>.html``.
  With no secret it stops with a traceback at the first such submission, and releases nothing after it.
- ``nbgrader fetch_feedback`` and the Assignment List (the student) look only in the student's own cache: for every
  submission there, the secret names the page to fetch. They never read the exchange's inbound.

So a submission the grader took from a folder or an LMS export gets a secret (:func:`release_files`), made once and
kept on every regrade, which travels with it into ``submitted/``, ``autograded/`` and ``feedback/`` as nbgrader's own
does: ``release_feedback`` then releases everyone's feedback, also after ``generate_feedback --force``.
:func:`make_releasable` gives one to submissions graded before this existed. For the student to fetch the page with
nbgrader, their cache needs the entry submit would have left (:func:`write_student_cache`), written where the
instructor can write it (one machine; a JupyterHub admin writing a student's home); otherwise the page in the
grader's ``DIR/feedback`` is the way to hand it over. Nothing is put into the exchange's inbound: fetch_feedback does
not need it, and ``nbgrader collect --update`` would take it for a submission and replace ``submitted/`` with it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from nbgrader.utils import notebook_hash, parse_utc

SECRET = "submission_secret.txt"
TIMESTAMP = "timestamp.txt"
#: the folders of a course directory where nbgrader keeps a submission's files, in the order a secret is looked for
KEPT_IN = ("submitted", "autograded", "feedback")
#: a secret nbgrader's submit (secrets.token_hex(64)) or this module made; anything else is not reused
SECRET_FORM = re.compile(r"[0-9a-f]{32,256}")
#: a name that is one folder, nothing more
_FOLDER_NAME = re.compile(r"[^/\\\x00]+")
#: what nbgrader's exchange can keep in a cache entry's name: its fields are separated by '+'
_EXCHANGE_NAME = re.compile(r"[^+*/\\\x00]+")


def _is_folder_name(value: str) -> bool:
    return bool(_FOLDER_NAME.fullmatch(value)) and value not in (".", "..")


def _check_id(kind: str, value: str) -> None:
    if not _EXCHANGE_NAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"a {kind} nbgrader's exchange cannot hold: {value!r}")


def existing_secret(course_root: Path, student: str, assignment: str) -> str | None:
    """The submission secret the course already keeps for this student and assignment, if any."""
    if not (_is_folder_name(student) and _is_folder_name(assignment)):
        return None
    for kind in KEPT_IN:
        path = course_root / kind / student / assignment / SECRET
        try:
            text = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if SECRET_FORM.fullmatch(text):
            return text
    return None


def release_files(course_root: Path, student: str, assignment: str, extras: Mapping[str, bytes]) -> dict[str, bytes]:
    """The files to add to a submission's extras (before it is graded into the course at course_root) so that nbgrader's
    release_feedback can release its feedback: {} when it has a submission_secret.txt (it came through the exchange),
    else {'submission_secret.txt': ...}, the one the course already keeps for this student and assignment or a new
    random one like nbgrader's submit makes. Never raises: a batch goes on whatever its ids."""
    if extras.get(SECRET, b"").strip():
        return {}
    return {SECRET: (existing_secret(course_root, student, assignment) or secrets.token_hex(64)).encode()}


def make_releasable(course_root: Path, assignment: str) -> list[str]:
    """Give every submission of the assignment graded into course_root whose files lack a submission secret one (in
    submitted/, autograded/ and feedback/, where nbgrader keeps them; a secret already there is kept and reused); the
    students whose files changed."""
    fixed = []
    feedback = course_root / "feedback"
    for folder in sorted(feedback.glob(f"*/{assignment}")) if feedback.is_dir() else []:
        student = folder.parent.name
        secret = release_files(course_root, student, assignment, {})[SECRET]
        missing = [course_root / kind / student / assignment for kind in KEPT_IN]
        missing = [target for target in missing if target.is_dir() and not (target / SECRET).is_file()]
        for target in missing:
            (target / SECRET).write_bytes(secret)
        if missing:
            fixed.append(student)
    return fixed


def exchange_timestamp(text: str) -> str:
    """A submission's timestamp as nbgrader's exchange writes it in names ('2026-11-20 14:05:09.123456 UTC')."""
    moment = parse_utc(text.strip())
    if not isinstance(moment, datetime):
        raise ValueError(f"not a timestamp: {text!r}")
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"


def feedback_name(secret: str, notebook: str) -> str:
    """The file name release_feedback gives a notebook's feedback page in the exchange."""
    return notebook_hash(secret=secret, notebook_id=Path(notebook).stem) + ".html"


def write_student_cache(cache_root: Path, course_id: str, student: str, assignment: str,
                        notebooks: Mapping[str, bytes], extras: Mapping[str, bytes]) -> Path:
    """Write what nbgrader's submit leaves in the student's own cache (cache_root is their Exchange.cache,
    $JUPYTER_DATA_DIR/nbgrader_cache by default): the notebooks, timestamp.txt and submission_secret.txt, in
    <course_id>/<student>+<assignment>+<timestamp>/. Their fetch_feedback and Assignment List then find the feedback
    release_feedback puts into the exchange. Returns that folder (replaced if it was there)."""
    for kind, value in (("course id", course_id), ("student id", student), ("assignment", assignment),
                        *(("notebook name", name) for name in notebooks)):
        _check_id(kind, value)
    secret = extras.get(SECRET, b"").decode().strip()
    if not SECRET_FORM.fullmatch(secret):
        raise ValueError("the submission has no submission_secret.txt: call release_files before grading it")
    stamp = exchange_timestamp(extras.get(TIMESTAMP, b"").decode())
    folder = cache_root / course_id / f"{student}+{assignment}+{stamp}"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
    for name, data in notebooks.items():
        (folder / name).write_bytes(data)
    (folder / TIMESTAMP).write_text(stamp)
    (folder / SECRET).write_text(secret)
    return folder
