"""When a submission was handed in, taken only from what its student cannot write.

A student writes every file of their submission, and can set a file's modification time to anything (``touch
-d``); nbgrader's ``timestamp.txt`` is written by ``nbgrader submit`` on the student's side of the exchange. None of
these is believed. A hand-in time comes from a *record* signed with the course secret (HMAC-SHA256,
autograder/secret.py), made where the student cannot reach:

- ``"lms"``: a learning-management system's export, whose file names carry the attempt time the LMS wrote
  (autograder/submissions.py lays the export out and signs each student's latest attempt);
- ``"exchange"``: ``python -m autograder collect`` (autograder/collect.py), which takes the newest change time
  (``ctime``) of the student's folder in the exchange's inbound and of everything in it. The kernel sets a change
  time to the current time at every change (content, name, mode, owner, links), and no call sets it back, so a
  student can only make their submission later;
- ``"arrived"``: otherwise, the newest change time of the submission's notebooks on the grading machine, or of
  the zip the batch came in: when they arrived there, as the instructor copied or downloaded them. Grading with
  ``--gradebook`` keeps this record in ``submitted/`` beside the notebooks, so a later regrade from there keeps it.

A record names its student, assignment and the SHA-256 of every notebook it was made for: it is believed only for
exactly those notebooks of that student's submission of that assignment.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

#: the record's file name beside the notebooks (in submitted/<student>/<assignment>/, or a laid-out LMS export)
RECORD = "handin.json"
#: how nbgrader writes a time in timestamp.txt (nbgrader.utils.parse_utc reads it)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"
SOURCES = ("lms", "exchange", "arrived")
#: a record is a few hundred bytes; anything much larger is not one
MAX_RECORD_BYTES = 64 * 1024


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mac(secret: str, body: Mapping) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    return hmac.new(secret.encode(), b"handin\0" + text, hashlib.sha256).hexdigest()


def utc(seconds: float) -> datetime:
    """A POSIX time (st_ctime) as an aware UTC time."""
    return datetime.fromtimestamp(seconds, timezone.utc)


def sign(secret: str, student: str, assignment: str, when: datetime, source: str,
         notebooks: Mapping[str, bytes], refused: Iterable[str] = ()) -> bytes:
    """A record that this student handed in these notebooks of this assignment at `when` (aware, or naive UTC),
    as `source` tells it; refused: what collecting refused of their later or other submissions, for their row."""
    if source not in SOURCES:
        raise ValueError(f"a hand-in time comes from one of {SOURCES}, not {source!r}")
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    body = {"student": student, "assignment": assignment, "handed_in": when.strftime(TIME_FORMAT),
            "source": source, "notebooks": {name: digest(data) for name, data in sorted(notebooks.items())},
            "refused": list(refused)}
    return (json.dumps({**body, "mac": _mac(secret, body)}, indent=1, sort_keys=True) + "\n").encode()


def read(data: bytes, secret: str, student: str, assignment: str) -> dict | None:
    """The record's content if it is one this course's secret signed for this student and assignment, else None."""
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("mac"), str):
        return None
    body = {key: value for key, value in record.items() if key != "mac"}
    if not hmac.compare_digest(record["mac"], _mac(secret, body)):
        return None
    if body.get("student") != student or body.get("assignment") != assignment:
        return None
    try:
        body["handed_in"] = datetime.strptime(body["handed_in"], TIME_FORMAT).replace(tzinfo=timezone.utc)
    except (KeyError, TypeError, ValueError):
        return None
    return body


def covers(record: Mapping, notebooks: Mapping[str, bytes]) -> bool:
    """Whether the record was made for exactly these notebooks (each one graded, by content)."""
    held = record.get("notebooks")
    return isinstance(held, dict) and bool(notebooks) and all(
        held.get(name) == digest(data) for name, data in notebooks.items())


def nbgrader_time(when: datetime) -> str:
    """The time as nbgrader's timestamp.txt holds it."""
    return when.astimezone(timezone.utc).strftime(TIME_FORMAT)
