"""Grades for a learning-management system or a registrar, written from the gradebook (record.py).

canvas  Canvas's gradebook import: `Student, ID, SIS User ID, SIS Login ID, Section`, then one column per
        assignment, and a `Points Possible` row under the header. Canvas finds each student by one of the id
        columns: the nbgrader student id goes in `SIS User ID` and `SIS Login ID` (use the LMS login as the
        nbgrader id); `ID` (Canvas's own number) stays empty. A column whose name matches no Canvas assignment
        becomes a new assignment with those points.
moodle  Moodle's grade import from CSV: `ID number, First name, Last name, Email address`, then one column per
        assignment. On import, map `ID number` (or `Email address`) to the user and each assignment column to a
        grade item.
wide    one row per student, a column per assignment and the total, with names and email: for a registrar or a
        spreadsheet.

Every student of the gradebook appears; an assignment with no submission scores 0, as in `nbgrader export`.
Scores are after nbgrader's late penalty and include manual grades and extra credit. Text a student chose (an id,
a name) is written so that a spreadsheet cannot read it as a formula.
"""

from __future__ import annotations

import csv
from pathlib import Path

from autograder import GradingError
from autograder.record import Record, Student
from autograder.results import csv_text

FORMATS = ("canvas", "moodle", "wide")


def _score(record: Record, student: str, assignment: str) -> float:
    entry = record.entries.get((student, assignment))
    return entry.score if entry is not None else 0.0


def _number(value: float) -> str:
    return f"{value:g}"


def table(record: Record, form: str, assignments: list[str] | None = None) -> list[list[str]]:
    """The export as rows of text, the header first."""
    if form not in FORMATS:
        raise GradingError(f"unknown export format {form!r}; choose one of {', '.join(FORMATS)}")
    chosen = assignments or sorted(record.max_scores)
    unknown = sorted(set(chosen) - set(record.max_scores))
    if unknown:
        raise GradingError(f"the gradebook has no assignment {', '.join(unknown)}; it has "
                           f"{', '.join(sorted(record.max_scores)) or 'none (grade with --gradebook first)'}")
    students: list[Student] = sorted(record.students.values(), key=lambda s: (s.last_name, s.first_name, s.id))
    scores = {s.id: [_score(record, s.id, a) for a in chosen] for s in students}
    if form == "canvas":
        rows = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *chosen],
                ["    Points Possible", "", "", "", "", *(_number(record.max_scores[a]) for a in chosen)]]
        for s in students:
            name = f"{s.last_name}, {s.first_name}" if s.last_name or s.first_name else s.id
            rows.append([csv_text(name), "", csv_text(s.id), csv_text(s.id), "", *map(_number, scores[s.id])])
        return rows
    if form == "moodle":
        rows = [["ID number", "First name", "Last name", "Email address", *chosen]]
        rows += [[csv_text(s.id), csv_text(s.first_name), csv_text(s.last_name), csv_text(s.email),
                  *map(_number, scores[s.id])] for s in students]
        return rows
    total = sum(record.max_scores[a] for a in chosen)
    rows = [["student_id", "first_name", "last_name", "email", *chosen, "total", "max_total"],
            ["(points)", "", "", "", *(_number(record.max_scores[a]) for a in chosen), _number(total), ""]]
    rows += [[csv_text(s.id), csv_text(s.first_name), csv_text(s.last_name), csv_text(s.email),
              *map(_number, scores[s.id]), _number(sum(scores[s.id])), _number(total)] for s in students]
    return rows


def write(record: Record, form: str, path: Path, assignments: list[str] | None = None) -> int:
    """Write the export to path (UTF-8, comma-separated); returns the number of students in it."""
    rows = table(record, form, assignments)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return len(record.students)
