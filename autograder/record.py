"""The instructor's record: the nbgrader gradebook, read as the one truth, and what the grader adds to it.

Every number a user sees — grades.csv, report.md, the LMS exports — is read from the gradebook after grading, so
what nbgrader keeps there counts: manual scores and extra credit given in Formgrader, and late penalties computed by
nbgrader's `AssignLatePenalties` from the assignment's due date and the submission's timestamp. The grader writes
into the gradebook only what nbgrader's autograde cannot: the flag on a submission whose code reaches into the tests,
and a submission scoring 0, with the reason as a comment, for a student whose notebooks could not be graded at all.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from autograder import GradingError
from autograder.results import GRADED, Grade
from autograder.workspace import quiet_gradebook

#: statuses of a submission that was handed in but could not be graded: the gradebook gets a 0 with the reason
UNGRADABLE = ("missing-notebook", "invalid-notebook", "error")
#: how the comment of a submission recorded by mark() begins
NOT_GRADED = "Not graded "


@dataclass(frozen=True)
class Student:
    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""


@dataclass(frozen=True)
class Entry:
    """One submission as the gradebook holds it. score = max(0, raw_score - penalty), as `nbgrader export` has it."""

    student: str
    assignment: str
    raw_score: float
    penalty: float
    max_score: float
    timestamp: datetime | None
    seconds_late: float
    flagged: bool
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (score, max_score)
    note: str = ""  # the reason mark() recorded for a submission that could not be graded, if it made this one

    @property
    def score(self) -> float:
        return max(0.0, self.raw_score - self.penalty)

    @property
    def late(self) -> str:
        """How late, and the penalty nbgrader applied: '' for work handed in on time (or with no due date)."""
        if self.seconds_late <= 0:
            return ""
        hours = self.seconds_late / 3600
        when = f"{hours:.1f} h late" if hours < 48 else f"{hours / 24:.1f} days late"
        return f"{when}, penalty {self.penalty:g}"


@dataclass(frozen=True)
class Record:
    """What a gradebook holds: its students, its assignments' points, and every submission."""

    students: dict[str, Student]
    max_scores: dict[str, float]
    entries: dict[tuple[str, str], Entry]


def read(db_url: str) -> Record:
    """Everything the exports and grades.csv need, read from the gradebook at db_url."""
    students, maxima, entries = {}, {}, {}
    with quiet_gradebook(), Gradebook(db_url) as gradebook:
        for student in gradebook.students:
            students[student.id] = Student(student.id, student.first_name or "", student.last_name or "",
                                           student.email or "")
        for assignment in gradebook.assignments:
            maxima[assignment.name] = float(assignment.max_score)
            for submission in assignment.submissions:
                cells, flagged, note = {}, False, ""
                for notebook in submission.notebooks:
                    flagged = flagged or bool(notebook.flagged)
                    note = note or next((c.auto_comment for c in notebook.comments
                                         if (c.auto_comment or "").startswith(NOT_GRADED)), "")
                    for grade in notebook.grades:
                        if grade.max_score > 0:
                            cells[grade.name] = (float(grade.score), float(grade.max_score))
                entries[submission.student.id, assignment.name] = Entry(
                    submission.student.id, assignment.name, float(submission.score),
                    float(submission.late_submission_penalty or 0.0), float(submission.max_score),
                    submission.timestamp, float(submission.total_seconds_late or 0.0), flagged, cells, note)
    return Record(students, maxima, entries)


def derive(rows: list[Grade], record: Record) -> list[Grade]:
    """The rows with every number the gradebook's: a graded row takes its submission's score after the late
    penalty (manual scores and extra credit included), its per-test scores, and a `late` text."""
    derived = []
    for row in rows:
        entry = record.entries.get((row.student, row.assignment))
        if entry is not None and row.status in UNGRADABLE and entry.note == "":
            row = Grade(**{**row.__dict__, "score": entry.score, "max_score": entry.max_score, "late": entry.late,
                           "message": f"{row.message}; the gradebook keeps the score of an earlier submission"})
        if entry is not None and row.status in GRADED:
            order = list(row.cells) + [name for name in entry.cells if name not in row.cells]
            row = Grade(**{**row.__dict__, "score": entry.score, "max_score": entry.max_score, "late": entry.late,
                           "cells": {name: entry.cells[name] for name in order if name in entry.cells}})
        derived.append(row)
    return derived


def held_rows(rows: list[Grade], record: Record, assignments: tuple[str, ...]) -> list[Grade]:
    """A row for every submission of the assignments that the gradebook holds and rows lack (graded into another
    results folder, or by plain `nbgrader autograde`): the gradebook's score, no diagnoses."""
    have = {(row.student, row.assignment) for row in rows}
    return [Grade(entry.student, entry.assignment, entry.score, entry.max_score,
                  "flagged" if entry.flagged else "graded", "score from the gradebook (not graded into this folder)",
                  cells=dict(entry.cells), late=entry.late)
            for key, entry in sorted(record.entries.items()) if key[1] in assignments and key not in have]


def read_roster(path: Path) -> list[Student]:
    """Students of a CSV in the format of `nbgrader db student import`: a header with `id`, and optionally
    `first_name`, `last_name` and `email`. Refused with what was found when it has no `id` column."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            if "id" not in header:
                raise GradingError(f"the roster {path} needs a header with an `id` column (as `nbgrader db student "
                                   f"import` reads it: id,first_name,last_name,email); its header is {header}")
            students = [Student(row["id"].strip(), (row.get("first_name") or "").strip(),
                                (row.get("last_name") or "").strip(), (row.get("email") or "").strip())
                        for row in reader if (row.get("id") or "").strip()]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise GradingError(f"cannot read the roster {path}: {error}") from None
    if not students:
        raise GradingError(f"the roster {path} lists no student (a header with `id`, then one row per student)")
    return students


def missing_rows(rows: list[Grade], students: list[str], assignments: tuple[str, ...],
                 maxima: dict[str, float]) -> list[Grade]:
    """A `missing` row for every student of the roster with no row for one of the assignments."""
    have = {(row.student, row.assignment) for row in rows}
    return [Grade(student, assignment, 0.0, maxima[assignment], "missing", "no submission graded for this student")
            for student in students for assignment in assignments if (student, assignment) not in have]


def mark(db_url: str, rows: list[Grade], timestamps: dict[tuple[str, str], datetime | None]) -> None:
    """Write into the gradebook what nbgrader's autograde cannot: each flagged submission's notebooks flagged (as a
    grader flags them in Formgrader; a flag is never cleared here, since a person may have set it), and for a
    submission that could not be graded, the student, a submission scoring 0 and the reason as a comment. A
    submission the gradebook already holds (an earlier one graded, manual scores) is left as it is: derive() then
    shows its score."""
    with quiet_gradebook(), Gradebook(db_url) as gradebook:
        for row in rows:
            if row.status == "flagged":
                try:
                    submission = gradebook.find_submission(row.assignment, row.student)
                except MissingEntry:
                    continue
                for notebook in submission.notebooks:
                    notebook.flagged = True
            elif row.status in UNGRADABLE:
                try:
                    gradebook.find_submission(row.assignment, row.student)
                    continue  # an earlier submission's scores stay: removing a result is never a side effect
                except MissingEntry:
                    gradebook.update_or_create_student(row.student)
                    submission = gradebook.add_submission(row.assignment, row.student,
                                                          timestamp=timestamps.get((row.student, row.assignment)))
                reason = f"{NOT_GRADED}({row.status}): {row.message}"[:2000]
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        grade.auto_score, grade.needs_manual_grade = 0.0, False
                    for comment in notebook.comments:
                        comment.auto_comment = reason
            gradebook.db.commit()
