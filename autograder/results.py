"""What grading produces: one row per student and assignment, as grades.csv holds it and the table prints it."""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path

COLUMNS = ["student", "assignment", "score", "max_score", "status", "message"]
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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Grade:
        return cls(**{**data, "cells": {k: tuple(v) for k, v in data["cells"].items()},
                      "diagnoses": [tuple(d) for d in data["diagnoses"]],
                      "mistakes": [tuple(m) for m in data.get("mistakes", [])]})


def write_csv(grades: list[Grade], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in grades:
            writer.writerow({**asdict(row), "score": f"{row.score:g}", "max_score": f"{row.max_score:g}"})


def table(grades: list[Grade]) -> str:
    """The grades as a plain-text table."""
    rows = [("student", "assignment", "score", "status", "message")]
    rows += [(g.student, g.assignment, f"{g.score:g}/{g.max_score:g}", g.status, g.message[:70]) for g in grades]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    lines.insert(1, "-" * min(120, len(lines[0]) + 10))
    return "\n".join(line.rstrip() for line in lines)
