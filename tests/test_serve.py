"""The grading service (autograder/serve.py, ``python -m autograder serve``): a submission that reaches the exchange is
graded into the gradebook and its feedback released to the exchange, where the Assignment List fetches it, without
the instructor; every folder in the exchange is hostile input; a restart loses nothing and grades nothing twice.

One real grading run carries the first test's assertions (about 20 s); the policies (hold, limits) are decided from
the service's state and the gradebook, and are tested without another grading run.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
from conftest import complete_submission, instructor_course, use_sandbox
from nbgrader.api import Gradebook

from autograder import course_dir
from autograder.collect import exchange_inbound
from autograder.exchange import SECRET as SECRET_FILE
from autograder.exchange import feedback_name
from autograder.serve import LOG_FILE, STATE_FILE, Policy, Service

A = "01_self_attention"
NB = course_dir.notebooks(A)[0]
COMPLETE = nbformat.writes(complete_submission(A, NB)).encode()


def _course(tmp_path: Path):
    course = instructor_course(tmp_path / "course", f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}")
    inbound, _ = exchange_inbound(course.root)
    inbound.mkdir(parents=True)
    return course, inbound


def _submit(inbound: Path, student: str, data: bytes = COMPLETE, tail: str = "x1") -> str:
    """What nbgrader submit leaves in the exchange; returns the submission's secret."""
    folder = inbound / f"{student}+{A}+2026-11-20 14:05:09.123456 UTC+{tail}"
    folder.mkdir()
    (folder / NB).write_bytes(data)
    (folder / "timestamp.txt").write_text("2026-11-20 14:05:09.123456 UTC")
    secret = secrets.token_hex(64)
    (folder / SECRET_FILE).write_text(secret)
    return secret


def _released(inbound: Path, secret: str) -> Path:
    return inbound.parent / "feedback" / feedback_name(secret, NB)


def _service(course, out: Path, clock=time.time, **policy) -> Service:
    return Service(course, out, Policy((A,), check_owner=False, sandbox=use_sandbox(), **policy), clock=clock)


def test_a_submission_is_graded_and_released_and_strangers_files_are_refused_with_a_reason(tmp_path):
    course, inbound = _course(tmp_path)
    out = tmp_path / "results"
    ada = _submit(inbound, "ada")
    bob = _submit(inbound, "bob", data=b"{not a notebook")
    (inbound / "readme.txt").write_text("not a submission")
    (inbound / f"eve+{A}+2026-11-20 14:05:09.123456 UTC+x1").symlink_to(course.root / "source" / A)

    done = _service(course, out).step()

    eve = f"eve+{A}+2026-11-20 14:05:09.123456 UTC+x1"
    assert done[eve] == "refused" and done["readme.txt"] == "ignored", done
    log = (out / LOG_FILE).read_text()
    assert "symbolic link" in log and "readme.txt" in log and "not named as nbgrader submit names" in log, log
    page = _released(inbound, ada)
    assert page.is_file(), f"ada's feedback is in the exchange for her Assignment List: {done}"
    assert "Graded" in page.read_text() and "after you submitted" in page.read_text()
    with (out / "grades.csv").open() as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert float(rows["ada"]["score"]) == float(rows["ada"]["max_score"]) > 0, rows
    assert rows["bob"]["status"] == "invalid-notebook", "a broken submission is its student's row; the service goes on"
    assert not _released(inbound, bob).exists()
    with Gradebook(course.db_url) as gradebook:
        assert gradebook.find_submission(A, "ada").score == float(rows["ada"]["max_score"]), "the gradebook's entry"

    # stopped and started again: nothing is graded twice; what arrived meanwhile is graded
    before = page.stat().st_mtime_ns
    assert _service(course, out).step() == {}
    assert page.stat().st_mtime_ns == before
    again = _submit(inbound, "ada", data=COMPLETE + b"\n", tail="x2")
    done = _service(course, out).step()
    assert sorted(done.values()) == ["released"], done
    assert _released(inbound, again).is_file()


def test_over_the_limit_a_submission_is_kept_and_the_student_told_when_it_will_be_graded(tmp_path):
    course, inbound = _course(tmp_path)
    out = tmp_path / "results"
    now = time.time()
    service = _service(course, out, clock=lambda: now, per_hour=1)
    service.arrivals["ada-earlier"] = {"student": "ada", "assignment": A, "arrived": now - 900, "graded": now - 600,
                                       "status": "released"}
    secret = _submit(inbound, "ada")
    assert set(service.step().values()) == {"deferred"}
    state = json.loads((out / STATE_FILE).read_text())["arrivals"]
    [waiting] = [item for name, item in state.items() if name != "ada-earlier"]
    assert waiting["status"] == "deferred" and waiting["until"] == now - 600 + 3600
    page = _released(inbound, secret).read_text()
    assert "limit of graded submissions (1 an hour)" in page and "will be graded at" in page, page
    assert not (out / "grades.csv").exists(), "nothing graded while over the limit"
    assert service.step() == {}, "told once"


def test_held_feedback_is_released_only_after_the_due_date(tmp_path):
    course, inbound = _course(tmp_path)
    out = tmp_path / "results"
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    with Gradebook(course.db_url) as gradebook:
        gradebook.update_or_create_assignment(A, duedate=due.replace(tzinfo=None))
    folder = course.root / "feedback" / "ada" / A
    folder.mkdir(parents=True)
    secret = secrets.token_hex(64)
    (folder / SECRET_FILE).write_text(secret)
    (folder / "timestamp.txt").write_text("2026-11-20 14:05:09.123456 UTC")
    (folder / NB.replace(".ipynb", ".html")).write_text("<html><body><h1>feedback</h1></body></html>")
    clock = [time.time()]
    service = _service(course, out, clock=lambda: clock[0], hold=True)
    service.arrivals["ada+x"] = {"student": "ada", "assignment": A, "arrived": clock[0] - 60, "graded": clock[0],
                                 "status": "graded"}
    assert service.step() == {"ada+x": "held"}
    assert not _released(inbound, secret).exists(), "held until the due date"
    clock[0] = due.timestamp() + 1
    assert service.step() == {"ada+x": "released"}
    page = _released(inbound, secret).read_text()
    assert "released at the due date" in page and "<h1>feedback</h1>" in page, page


def test_the_command_refuses_a_second_service_on_the_same_folder(tmp_path):
    course, inbound = _course(tmp_path)
    out = tmp_path / "results"
    out.mkdir()
    command = [sys.executable, "-m", "autograder", "serve", "--out", str(out), "--assignment", A,
               "--course", str(course.root), "--poll", "0.2", "--no-sandbox"]
    first = subprocess.Popen(command, cwd=course_dir.ROOT, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            if (out / LOG_FILE).is_file() and "serving" in (out / LOG_FILE).read_text():
                break
            time.sleep(0.2)
        second = subprocess.run(command + ["--once"], cwd=course_dir.ROOT, capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2 and "another service is already writing" in second.stderr, second.stderr
    finally:
        first.terminate()
        assert first.wait(timeout=60) == 0, first.stderr.read()
    assert "stopped" in (out / LOG_FILE).read_text(), "SIGTERM finishes the step under way and stops cleanly"
    assert os.path.isfile(out / STATE_FILE)
