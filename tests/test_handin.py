"""When a submission was handed in, and what is collected from nbgrader's exchange: only from what the student
cannot write (autograder/handin.py, autograder/collect.py).

Before: a student's own timestamp.txt was believed (a late submission graded on time: 8/8 against 0/8), and
nbgrader collect followed a link in the exchange's inbound to the instructor's source notebook (graded 8/8, the
solutions in the student's feedback).
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest
from conftest import complete_submission, instructor_course, use_sandbox, write_submission
from test_gradebook import nbgrader

from autograder import course_dir, handin
from autograder.collect import collect, exchange_inbound
from autograder.exchange import SECRET as SECRET_FILE
from autograder.grade import grade
from autograder.submissions import find

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
SECRET = "5e" * 32
ON_TIME = datetime(2026, 11, 20, 14, 5, 9, tzinfo=timezone.utc)
COMPLETE = nbformat.writes(complete_submission(A, NB)).encode()


def _handed_in(sub) -> str:
    when, source = sub.handed_in
    return f"{when:%Y-%m-%d %H:%M:%S} {source}"


# ----------------------------------------------------------------------------------------------- the record

def test_a_record_is_believed_only_as_signed_for_that_student_assignment_and_notebooks():
    record = handin.sign(SECRET, "ada", A, ON_TIME, "exchange", {NB: COMPLETE})
    held = handin.read(record, SECRET, "ada", A)
    assert held["handed_in"] == ON_TIME and held["source"] == "exchange"
    assert handin.covers(held, {NB: COMPLETE})
    assert not handin.covers(held, {NB: COMPLETE + b" "}), "a record covers the notebooks it was made for only"
    assert handin.read(record, "ab" * 32, "ada", A) is None, "another course's secret"
    assert handin.read(record, SECRET, "bob", A) is None, "moved to another student"
    assert handin.read(record, SECRET, "ada", "02_queries_keys_values") is None, "moved to another assignment"
    forged = record.replace(b"2026-11-20 14:05:09", b"2026-11-19 14:05:09")
    assert forged != record and handin.read(forged, SECRET, "ada", A) is None, "an earlier time written in"
    assert handin.read(b"x" * (handin.MAX_RECORD_BYTES + 1), SECRET, "ada", A) is None


def test_a_students_own_timestamp_is_not_believed_in_a_folder(tmp_path):
    batch = tmp_path / "batch"
    write_submission(batch, "ada", A, NB, complete_submission(A, NB))
    (batch / "ada" / A / "timestamp.txt").write_text("2020-01-01 00:00:00.000000 UTC")
    os.utime(batch / "ada" / A / NB, (1, 1))  # a modification time is the student's to set as well
    before = time.time()
    sub = find(batch, [A], {A: [NB]}, SECRET)[0]
    when, source = sub.handed_in
    assert source == "arrived" and when.timestamp() >= before - 5, "the time the notebook arrived on this machine"
    assert sub.nbgrader_files["timestamp.txt"] == handin.nbgrader_time(when), "nbgrader is given the time believed"
    assert any("timestamp.txt ('2020-01-01" in note and "not believed" in note for note in sub.notes), sub.notes


def test_a_signed_record_in_the_folder_is_believed_and_a_forged_or_stale_one_is_not(tmp_path):
    batch = tmp_path / "batch"
    write_submission(batch, "ada", A, NB, complete_submission(A, NB))
    folder = batch / "ada" / A
    (folder / handin.RECORD).write_bytes(handin.sign(SECRET, "ada", A, ON_TIME, "exchange",
                                                     {NB: (folder / NB).read_bytes()}))
    assert _handed_in(find(batch, [A], {A: [NB]}, SECRET)[0]) == "2026-11-20 14:05:09 exchange"
    (folder / NB).write_bytes((folder / NB).read_bytes() + b"\n")  # the notebook changed after the record
    sub = find(batch, [A], {A: [NB]}, SECRET)[0]
    assert sub.handed_in[1] == "arrived" and any("not one this course signed" in n for n in sub.notes), sub.notes
    (folder / handin.RECORD).write_bytes(handin.sign("ab" * 32, "ada", A, ON_TIME, "exchange",
                                                     {NB: (folder / NB).read_bytes()}))
    assert find(batch, [A], {A: [NB]}, SECRET)[0].handed_in[1] == "arrived", "signed with another secret"


# ----------------------------------------------------------------------------------------------- collect

def _course(tmp_path: Path):
    course = instructor_course(tmp_path / "course", f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}")
    inbound, _ = exchange_inbound(course.root)
    inbound.mkdir(parents=True)
    return course, inbound


def _submit(inbound: Path, student: str, data: bytes = COMPLETE, claimed: str = "2026-11-20 14:05:09.123456 UTC",
            tail: str = "x1") -> Path:
    """What nbgrader submit leaves in the exchange, its timestamp.txt saying whatever the student likes."""
    folder = inbound / f"{student}+{A}+{claimed}+{tail}"
    folder.mkdir()
    (folder / NB).write_bytes(data)
    (folder / "timestamp.txt").write_text(claimed)
    (folder / SECRET_FILE).write_text("5ec7e7" * 20)
    return folder


def test_collect_takes_the_time_from_the_exchange_not_from_the_students_files(tmp_path):
    course, inbound = _course(tmp_path)
    _submit(inbound, "ada", claimed="2020-01-01 00:00:00.000000 UTC")
    before = time.time()
    [outcome] = collect(A, course.root, check_owner=False, secret=SECRET)
    assert outcome.outcome == "collected", outcome
    kept = course.root / "submitted" / "ada" / A
    assert (kept / NB).read_bytes() == COMPLETE and (kept / SECRET_FILE).read_text() == "5ec7e7" * 20
    sub = find(course.root / "submitted", [A], {A: [NB]}, SECRET)[0]
    assert sub.handed_in[1] == "exchange" and sub.handed_in[0].timestamp() >= before - 5
    assert (kept / "timestamp.txt").read_text() == handin.nbgrader_time(sub.handed_in[0]), "for plain nbgrader too"
    # the same submission again changes nothing; a newer one replaces it
    assert collect(A, course.root, check_owner=False, secret=SECRET)[0].outcome == "unchanged"
    time.sleep(0.05)
    _submit(inbound, "ada", data=COMPLETE + b"\n", claimed="2019-01-01 00:00:00.000000 UTC", tail="x2")
    assert collect(A, course.root, check_owner=False, secret=SECRET)[0].outcome == "collected"
    assert (kept / NB).read_bytes() == COMPLETE + b"\n", "the latest by the exchange's clock, not by its name"


@pytest.mark.parametrize("attack", ["link-to-source", "hard-link", "fifo", "folder-is-a-link", "link-in-subfolder"])
def test_collect_refuses_what_is_not_a_plain_file_with_the_reason_for_that_student(tmp_path, attack):
    course, inbound = _course(tmp_path)
    source = course.root / "source" / A / NB
    _submit(inbound, "ada")
    folder = inbound / f"eve+{A}+2026-11-20 14:05:09.123456 UTC+x1"
    if attack == "folder-is-a-link":
        folder.symlink_to(course.root / "source" / A)
    else:
        folder.mkdir()
        target = folder / NB if attack != "link-in-subfolder" else folder / "data" / NB
        target.parent.mkdir(exist_ok=True)
        {"link-to-source": lambda: target.symlink_to(source), "hard-link": lambda: os.link(source, target),
         "fifo": lambda: os.mkfifo(target), "link-in-subfolder": lambda: target.symlink_to(source)}[attack]()
        if attack == "link-in-subfolder":
            (folder / NB).write_bytes(COMPLETE)
    outcomes = {o.student: o for o in collect(A, course.root, check_owner=False, secret=SECRET)}
    assert outcomes["ada"].outcome == "collected"
    assert outcomes["eve"].outcome == "refused", outcomes["eve"]
    kind = {"link-to-source": "symbolic link", "hard-link": "hard link", "fifo": "fifo",
            "folder-is-a-link": "symbolic link", "link-in-subfolder": "symbolic link"}[attack]
    assert kind in outcomes["eve"].reasons[0], outcomes["eve"].reasons
    subs = {s.student: s for s in find(course.root / "submitted", [A], {A: [NB]}, SECRET)}
    assert subs["eve"].status == "missing-notebook" and kind in subs["eve"].message, subs["eve"].message
    assert not list((course.root / "submitted" / "eve").rglob("*.ipynb")), "nothing of the instructor's collected"


def test_a_refused_resubmission_keeps_the_earlier_one_and_tells_why(tmp_path):
    course, inbound = _course(tmp_path)
    _submit(inbound, "ada")
    collect(A, course.root, check_owner=False, secret=SECRET)
    later = inbound / f"ada+{A}+2026-11-22 00:00:00.000000 UTC+x2"
    later.mkdir()
    (later / NB).symlink_to(course.root / "source" / A / NB)
    assert collect(A, course.root, check_owner=False, secret=SECRET)[0].outcome == "refused"
    sub = find(course.root / "submitted", [A], {A: [NB]}, SECRET)[0]
    assert sub.status == "" and sub.handed_in[1] == "exchange", "the earlier submission is still graded"
    assert any("symbolic link" in note for note in sub.notes), sub.notes


def test_collect_hands_in_a_folder_only_as_the_user_who_owns_it(tmp_path):
    course, inbound = _course(tmp_path)
    daemon = pwd.getpwnam("daemon").pw_uid
    for student in ("daemon", "bin"):  # system users: both exist on every Debian machine
        os.chown(_submit(inbound, student), daemon, daemon)
    outcomes = {o.student: o for o in collect(A, course.root, secret=SECRET)}
    assert outcomes["daemon"].outcome == "collected"
    assert outcomes["bin"].outcome == "refused" and "belongs to daemon, not to bin" in outcomes["bin"].reasons[0]


def test_on_a_hub_whose_students_share_one_uid_the_folder_name_is_the_only_claim(tmp_path):
    """Every single-user server runs as one user (here daemon, as jovyan in containers): the owner check refuses
    everyone, naming --no-check-owner; with it, a folder is handed in under the name it bears, so a folder named
    for bob and written by ada (the same uid: nothing tells them apart) replaces bob's own. README tells instructors
    so; a hub with one uid per student keeps the check."""
    course, inbound = _course(tmp_path)
    shared = pwd.getpwnam("daemon").pw_uid
    for student in ("ada", "bob"):
        os.chown(_submit(inbound, student), shared, shared)
    refused = collect(A, course.root, secret=SECRET)
    assert all(o.outcome == "refused" and "--no-check-owner" in o.reasons[0] for o in refused), refused
    assert {o.outcome for o in collect(A, course.root, check_owner=False, secret=SECRET)} == {"collected"}
    time.sleep(0.05)
    os.chown(_submit(inbound, "bob", data=COMPLETE + b" ", tail="by-ada"), shared, shared)
    outcomes = {o.student: o.outcome for o in collect(A, course.root, check_owner=False, secret=SECRET)}
    assert outcomes == {"ada": "unchanged", "bob": "collected"}, outcomes
    assert (course.root / "submitted" / "bob" / A / NB).read_bytes() == COMPLETE + b" "


def test_a_late_submission_through_the_exchange_is_late_whatever_its_timestamp_says(tmp_path):
    """Due yesterday, penalty zero: a complete notebook handed in now with timestamp.txt saying last week scores 0
    and is marked late; a link to the instructor's source is refused, its solutions never graded nor shown."""
    course, inbound = _course(tmp_path)
    with (course.root / "nbgrader_config.py").open("a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    due = datetime.fromtimestamp(time.time() - 86400, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    nbgrader(course, "db", "assignment", "add", A, f"--duedate={due}")
    _submit(inbound, "late", claimed="2020-01-01 00:00:00.000000 UTC")
    thief = inbound / f"thief+{A}+2020-01-01 00:00:00.000000 UTC+x1"
    thief.mkdir()
    (thief / NB).symlink_to(course.root / "source" / A / NB)
    collect(A, course.root, check_owner=False)
    rows = {row.student: row for row in grade(course.root / "submitted", tmp_path / "out", [A],
                                              sandbox=use_sandbox(), progress=False, gradebook=course)}
    assert rows["late"].status == "graded" and rows["late"].score == 0, rows["late"]
    assert rows["late"].late and "h" in rows["late"].late, rows["late"]
    assert rows["thief"].status == "missing-notebook" and "symbolic link" in rows["thief"].message, rows["thief"]
    assert not (tmp_path / "out" / "feedback" / "thief").exists()


def test_the_collect_command_says_what_it_did_for_each_student(tmp_path):
    course, inbound = _course(tmp_path)
    _submit(inbound, "ada")
    os.symlink(course.root / "source" / A, inbound / f"eve+{A}+2026-11-20 14:05:09.123456 UTC+x1")
    done = subprocess.run([sys.executable, "-m", "autograder", "collect", A, "--course", str(course.root),
                           "--no-check-owner"], capture_output=True, text=True, cwd=course_dir.ROOT)
    assert done.returncode == 0, done.stderr
    assert "ada: collected, handed in 20" in done.stdout, done.stdout
    assert "eve: refused" in done.stdout and "is a symbolic link, not a folder" in done.stdout, done.stdout
    assert "a folder's name in the exchange is the only claim to whose it is" in done.stderr, done.stderr
    missing = subprocess.run([sys.executable, "-m", "autograder", "collect", A, "--course", str(tmp_path / "none")],
                             capture_output=True, text=True, cwd=course_dir.ROOT)
    assert missing.returncode == 2 and "no nbgrader_config.py" in missing.stderr, missing.stderr
