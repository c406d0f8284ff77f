"""What grading produces: one row per student and assignment, as grades.csv holds it and the table prints it."""

from __future__ import annotations

import csv
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

COLUMNS = ["student", "assignment", "score", "max_score", "status", "late", "message"]
#: statuses whose rows carry a real score and feedback
GRADED = ("graded", "flagged", "crashed")


@dataclass
class Grade:
    """One row of grades.csv, plus per-test results for the class report."""

    student: str
    assignment: str
    score: float
    max_score: float
    status: str  # graded | flagged | crashed | missing | missing-notebook | invalid-notebook | error
    message: str = ""
    cells: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (score, max_score)
    diagnoses: list[tuple[str, str]] = field(default_factory=list)  # (grade_id, diagnosis) of failed tests
    mistakes: list[tuple[str, str]] = field(default_factory=list)  # (grade_id, mistake id) the judges named
    seed: int | None = None  # the grading seed the probes drew their inputs from (autograder/secret.py)
    late: str = ""  # how late it was handed in and the penalty nbgrader applied, from the gradebook (record.py)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Grade:
        return cls(**{**data, "cells": {k: tuple(v) for k, v in data["cells"].items()},
                      "diagnoses": [tuple(d) for d in data["diagnoses"]],
                      "mistakes": [tuple(m) for m in data.get("mistakes", [])]})


#: what a spreadsheet reads as the start of a formula (OWASP, CSV injection)
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
#: control characters (a terminal's escape sequences among them) in text a student chose
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def csv_text(value: str) -> str:
    """A text cell a spreadsheet shows as text: one that could start a formula gets a leading quote."""
    return "'" + value if value.startswith(FORMULA_PREFIXES) else value


def write_csv(grades: list[Grade], path: Path) -> None:
    """grades.csv: scores as numbers, every text cell safe to open in a spreadsheet."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in grades:
            texts = {column: csv_text(str(getattr(row, column))) for column in COLUMNS
                     if column not in ("score", "max_score")}
            writer.writerow({**texts, "score": f"{row.score:g}", "max_score": f"{row.max_score:g}"})


def _printable(text: str) -> str:
    return CONTROL.sub("?", text.replace("\n", " ").replace("\t", " "))


def table(grades: list[Grade]) -> str:
    """The grades as a plain-text table."""
    rows = [("student", "assignment", "score", "status", "message")]
    rows += [(_printable(g.student), g.assignment, f"{g.score:g}/{g.max_score:g}", g.status,
              _printable("; ".join(filter(None, [g.late, g.message])))[:70]) for g in grades]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    lines.insert(1, "-" * min(120, len(lines[0]) + 10))
    return "\n".join(line.rstrip() for line in lines)
