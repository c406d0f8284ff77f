"""The course secret, and the grading seed each submission's probes and judges draw their inputs from.

The secret is 32 random bytes kept outside the repository, like the gradebook: the file ``.grading-secret`` in the
course directory (created on first use, readable by its owner only, ignored by git, hidden from the sandbox), or
the environment variable ``AUTOGRADER_SECRET`` (hex) on a machine that must share one with others. A submission's
seed is an HMAC of the secret, the student, the assignment and the notebook's cells: a regrade of the same
submission draws the same inputs; two students, or one student's next submission, draw others (inputs a student
printed during one grading are no use to the next); nobody without the secret can know them in advance.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from autograder import course_dir

FILE = ".grading-secret"
ENV = "AUTOGRADER_SECRET"  # not COURSE_*: the sandbox passes COURSE_* variables into the kernel


def course_secret(root: Path = course_dir.ROOT) -> str:
    """The course secret as hex: $AUTOGRADER_SECRET, else root/.grading-secret (made on first use)."""
    given = os.environ.get(ENV, "").strip()
    if given:
        return given
    path = root / FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if not text:
        text = os.urandom(32).hex()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    return text


def submission_seed(secret: str, student: str, assignment: str, content: str = "") -> int:
    """The grading seed of one submission: the same for every regrade, secret without the course secret.
    content: what identifies the submission's code (cells_digest of its notebook)."""
    message = f"{assignment}\0{student}\0{content}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") % (1 << 62)


def cells_digest(nb) -> str:
    """A hash of a notebook's cells (type and source), which running it does not change."""
    digest = hashlib.sha256()
    for cell in nb.get("cells", []):
        digest.update(f"{cell.get('cell_type')}\0{cell.get('source')}\0".encode(errors="replace"))
    return digest.hexdigest()


#: where the grader keeps a notebook's seed between its autograde steps (nbgrader's resources, in its own process)
RESOURCE = "autograder_seed"


def notebook_seed(secret: str, resources: dict, nb) -> int | None:
    """The seed of the notebook being autograded: the one an earlier step put in resources, else made from the
    student, the assignment and the cells; None outside nbgrader's autograde (no student)."""
    if isinstance(resources.get(RESOURCE), int):
        return resources[RESOURCE]
    info = resources.get("nbgrader") or {}
    if not (info.get("student") and info.get("assignment")):
        return None
    seed = submission_seed(secret or course_secret(), str(info["student"]), str(info["assignment"]), cells_digest(nb))
    resources[RESOURCE] = seed
    return seed


def fingerprint(secret: str) -> str:
    """What a grading state may record of the secret: a hash that changes with it and reveals nothing."""
    return hashlib.sha256(b"course-secret\0" + secret.encode()).hexdigest()[:16]
