"""The gradebook is the one truth: a class with a due date and a late policy, a roster, a flagged submission and a
broken one, graded by real nbgrader into a real SQLite gradebook; grades.csv, report.md, `nbgrader export` and the
LMS exports all read their numbers from it, manual grades included, and nothing outside a regrade changes.

(One module, so that pytest-xdist grades the class once; its tests run in order, the adjustments last.)"""

import csv
import sqlite3
import threading
import time

import nbformat
import pytest
from conftest import (
    SMALL_CLASS,
    collected_at,
    complete_submission,
    instructor_course,
    release_notebook,
    use_sandbox,
    write_submission,
)
from nbgrader.api import Gradebook
from test_gradebook import nbgrader

from autograder import GradingError, course_dir, lms, record
from autograder.grade import grade, refresh
from autograder.workspace import Job, Options, Workspace, cause, transient

A = SMALL_CLASS
NB = course_dir.notebooks(A)[0]
DUE = "2026-11-21 00:00:00 UTC"
ROSTER = "id,first_name,last_name,email\nada,Ada,Lovelace,ada@uni.test\nlate,Lee,Tardy,lee@uni.test\n" \
         "flag,Fay,Flagg,fay@uni.test\nbroken,Bo,Ken,bo@uni.test\neve,Eve,Absent,eve@uni.test\n"


def _stamp(batch, student: str, when: str) -> None:
    collected_at(batch / student / A, when)


@pytest.fixture(scope="module")
def late_class(tmp_path_factory):
    """(course, out, rows by student): due date 2026-11-21, penalty 'zero' for late work, five students on the
    roster, four handing in: on time, 36 h late, flagged (on time), a notebook that is not JSON."""
    root = tmp_path_factory.mktemp("late-class")
    course = instructor_course(root / "course", f"sqlite:///{root / 'course' / 'gradebook.db'}")
    with (course.root / "nbgrader_config.py").open("a") as f:
        f.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    nbgrader(course, "db", "assignment", "add", A, f"--duedate={DUE}")
    (course.root / "roster.csv").write_text(ROSTER)
    nbgrader(course, "db", "student", "import", "roster.csv")
    batch = root / "batch"
    complete = complete_submission(A, NB)
    for student in ("ada", "late", "flag"):
        write_submission(batch, student, A, NB, complete)
    flagged = nbformat.read(batch / "flag" / A / NB, as_version=4)
    answer = next(c for c in flagged.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution"))
    answer.source = "import gc\n" + answer.source
    nbformat.write(flagged, batch / "flag" / A / NB)
    _stamp(batch, "ada", "2026-11-20 10:00:00.000000 UTC")
    _stamp(batch, "late", "2026-11-22 12:00:00.000000 UTC")
    _stamp(batch, "flag", "2026-11-20 11:00:00.000000 UTC")
    (batch / "broken" / A).mkdir(parents=True)
    (batch / "broken" / A / NB).write_text("{ not json")
    _stamp(batch, "broken", "2026-11-20 12:00:00.000000 UTC")
    out = root / "out"
    rows = grade(batch, out, [A], workers=2, sandbox=use_sandbox(), progress=False, gradebook=course)
    return course, out, batch, {row.student: row for row in rows}


def _csv(path) -> dict[str, dict]:
    with path.open() as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def _export(course) -> dict[str, dict]:
    nbgrader(course, "export", "--to", "export.csv")
    with (course.root / "export.csv").open() as f:
        return {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == A}


def _lms(course, form: str) -> dict[str, float]:
    """student id -> score of A in an LMS export."""
    rows = lms.table(record.read(course.db_url), form, [A])
    header, body = rows[0], rows[1:]
    key = {"canvas": "SIS Login ID", "moodle": "ID number", "wide": "student_id"}[form]
    return {r[header.index(key)]: float(r[header.index(A)]) for r in body if r[header.index(key)] != "(points)"
            and r[0] != "    Points Possible"}


def test_late_work_scores_the_same_in_grades_csv_nbgrader_export_and_every_lms_export(late_class):
    course, out, _, rows = late_class
    assert rows["late"].status == "graded" and rows["late"].score == 0
    assert rows["late"].late == "36.0 h late, penalty 8", rows["late"].late
    assert rows["ada"].score == 8 and rows["ada"].late == ""
    written = _csv(out / "grades.csv")
    assert written["late"]["score"] == "0" and written["late"]["late"].startswith("36.0 h late")
    exported = _export(course)
    assert float(exported["late"]["score"]) == 0 and float(exported["late"]["raw_score"]) == 8
    for form in lms.FORMATS:
        scores = _lms(course, form)
        assert scores == {s: float(written[s]["score"]) for s in scores}, form
        assert scores["late"] == 0 and scores["ada"] == 8 and scores["eve"] == 0, form


def test_a_flagged_submission_is_flagged_where_formgrader_shows_it(late_class):
    course, _, _, rows = late_class
    assert rows["flag"].status == "flagged" and "gc" in rows["flag"].message
    with Gradebook(course.db_url) as gradebook:
        assert all(nb.flagged for nb in gradebook.find_submission(A, "flag").notebooks)
        assert not any(nb.flagged for nb in gradebook.find_submission(A, "ada").notebooks)


def test_a_student_whose_notebook_could_not_be_graded_is_in_the_gradebook_with_the_reason(late_class):
    course, _, _, rows = late_class
    assert rows["broken"].status == "invalid-notebook"
    with Gradebook(course.db_url) as gradebook:
        submission = gradebook.find_submission(A, "broken")
        assert submission.score == 0 and not submission.needs_manual_grade
        comments = [c.auto_comment for nb in submission.notebooks for c in nb.comments]
        assert comments and all("invalid-notebook" in c and "JSON" in c for c in comments), comments
    assert float(_export(course)["broken"]["score"]) == 0


def test_a_roster_student_with_no_submission_is_a_missing_row(late_class):
    _, out, _, rows = late_class
    assert rows["eve"].status == "missing" and rows["eve"].score == 0
    assert _csv(out / "grades.csv")["eve"]["status"] == "missing"
    assert set(rows) == {"ada", "late", "flag", "broken", "eve"}


def test_the_lms_exports_have_each_formats_columns(late_class):
    course, *_ = late_class
    held = record.read(course.db_url)
    canvas = lms.table(held, "canvas", [A])
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[1][0].strip() == "Points Possible" and canvas[1][5] == "8"
    assert ["Lovelace, Ada", "", "ada", "ada", "", "8"] in canvas
    moodle = lms.table(held, "moodle", [A])
    assert moodle[0] == ["ID number", "First name", "Last name", "Email address", A]
    assert ["ada", "Ada", "Lovelace", "ada@uni.test", "8"] in moodle
    wide = lms.table(held, "wide", [A])
    assert wide[0][-2:] == ["total", "max_total"] and ["ada", "Ada", "Lovelace", "ada@uni.test", "8", "8", "8"] in wide
    with pytest.raises(GradingError, match="no assignment 02_qkv"):
        lms.table(held, "wide", ["02_qkv"])


def test_a_manual_grade_from_formgrader_reaches_grades_csv_and_every_export(late_class):
    course, out, _, _ = late_class
    with Gradebook(course.db_url) as gradebook:  # what Formgrader's API writes when a grader changes a score
        cell = next(g for nb in gradebook.find_submission(A, "flag").notebooks for g in nb.grades if g.max_score >= 1)
        cell.manual_score = cell.max_score - 0.5
        gradebook.db.commit()
    rows = {row.student: row for row in refresh(out, course)}
    assert rows["flag"].score == 7.5 and rows["flag"].status == "flagged"
    assert _csv(out / "grades.csv")["flag"]["score"] == "7.5"
    assert float(_export(course)["flag"]["score"]) == 7.5
    assert all(_lms(course, form)["flag"] == 7.5 for form in lms.FORMATS)
    assert "3 graded of 5; mean 5.17 / 8" in (out / "report.md").read_text()  # (8 + 0 + 7.5) / 3: ada, late, flag


def test_regrading_one_student_changes_nothing_else(late_class, tmp_path):
    course, out, batch, _ = late_class
    before = _csv(out / "grades.csv")
    write_submission(batch, "ada", A, NB, release_notebook(A, NB))  # ada's resubmission: the untouched release
    with pytest.raises(GradingError, match="no student zed"):
        grade(batch, out, [A], students=["zed"], sandbox=use_sandbox(), progress=False, gradebook=course)
    assert _csv(out / "grades.csv") == before, "a refused run wrote something"
    rows = {r.student: r for r in grade(batch, out, [A], students=["ada"], sandbox=use_sandbox(), progress=False,
                                        gradebook=course)}
    after = _csv(out / "grades.csv")
    assert rows["ada"].score == 0 and after["ada"]["score"] == "0"
    assert {s: r for s, r in after.items() if s != "ada"} == {s: r for s, r in before.items() if s != "ada"}
    (batch / "flag" / A / NB).write_text("{ not json")  # a broken resubmission loses nothing the gradebook holds
    rows = {r.student: r for r in grade(batch, out, [A], students=["flag"], sandbox=use_sandbox(), progress=False,
                                        gradebook=course)}
    assert rows["flag"].status == "invalid-notebook" and rows["flag"].score == 7.5, rows["flag"]
    assert "earlier submission" in rows["flag"].message and float(_export(course)["flag"]["score"]) == 7.5


# ------------------------------------------------------------------------------------------- transient failures

def test_nbgrader_messages_never_pass_on_a_cause_nobody_checked():
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
           "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n"
           "[AutogradeApp | ERROR] There was an error accessing the nbgrader database. This may occur if you recently "
           "upgraded nbgrader. To resolve the issue, first BACK UP your database and then run the command "
           "`nbgrader db upgrade`.")
    assert cause(log) == "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked"
    assert transient(log) and not transient("ValueError: the notebook has no cell 7")


def _lock(db: str, seconds: float, ready: threading.Event) -> None:
    connection = sqlite3.connect(db, isolation_level=None)
    connection.execute("BEGIN EXCLUSIVE")
    ready.set()
    time.sleep(seconds)
    connection.execute("COMMIT")
    connection.close()


def test_a_gradebook_locked_for_a_while_is_retried_and_the_error_names_the_lock(tmp_path, monkeypatch):
    """A real lock on the workspace's SQLite gradebook: graded on a later attempt; with a single attempt allowed,
    the error row says the database was locked, not that it needs `nbgrader db upgrade`."""
    workspace = Workspace(tmp_path / "ws", Options((A,), sandbox=use_sandbox()))
    job = Job("ada", A, {NB: nbformat.writes(complete_submission(A, NB)).encode()})
    db = str(tmp_path / "ws" / "gradebook.db")
    monkeypatch.setattr("autograder.workspace.RETRY_SECONDS", 0.5)  # the lock is released before the 2nd attempt
    try:
        for attempts, graded in ((1, False), (3, True)):
            monkeypatch.setattr("autograder.workspace.ATTEMPTS", attempts)
            ready = threading.Event()
            locker = threading.Thread(target=_lock, args=(db, 6.5, ready))  # SQLite gives up after 5 s
            locker.start()
            ready.wait()
            try:
                result = workspace.grade(job)
            finally:
                locker.join()
            if graded:
                assert result.grade.status == "graded" and result.grade.score == 8, result.grade.message
            else:
                assert result.grade.status == "error" and "database is locked" in result.grade.message
                assert "db upgrade" not in result.grade.message and "attempt 1 of 1" in result.log
    finally:
        workspace.close()  # its warm kernel and fork server
