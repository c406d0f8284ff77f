"""Shared fixtures: one batch of submissions graded by real nbgrader, reused by every grading test."""

import html
import os
import re
import shutil
from datetime import timezone
from pathlib import Path

import nbformat
import pytest
import torch
from nbgrader.utils import parse_utc

os.environ.setdefault("MPLBACKEND", "Agg")  # replays run setup cells that import pyplot

from autograder import course_dir, handin, sandbox
from autograder.grade import Course, grade
from autograder.notebooks import answer_cells, filled
from autograder.results import Grade
from autograder.secret import course_secret
from catalogue import mistakes

# pytest-xdist runs four workers on CI's two cores; each worker's PyTorch would start a thread per core for matrices of
# a few dozen entries, and the threads wait on each other. One thread per worker process (the kernels it starts keep
# their own settings).
torch.set_num_threads(1)

ROOT = course_dir.ROOT
#: Developer convenience: COURSE_TEST_ASSIGNMENTS=03_scaling,04_multi_head grades only those in the batch.
ASSIGNMENTS = [a for a in os.environ.get("COURSE_TEST_ASSIGNMENTS", "").split(",") if a] or course_dir.assignments()


#: the modules that grade real classes, longest first: they start first, so that pytest-xdist's workers (pyproject.toml)
#: fill the rest of the time with the short modules instead of waiting on one long module at the end
LONGEST_FIRST = ("test_grading.py", "test_catalogue.py", "test_catalogue_seeded.py", "test_hostile.py",
                 "test_gradebook.py", "test_layouts.py", "test_build.py", "test_dead_worker.py",
                 "test_instructor_record.py", "test_inert_content.py", "test_hub.py", "test_serve.py",
                 "test_site.py", "test_wheel.py", "test_cli.py", "test_browser.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the longest modules first; every module's tests stay together and in their order."""
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)


def use_sandbox() -> bool:
    """Grade in the sandbox when it works here; COURSE_TEST_SANDBOX=on (the default under CI) insists on it,
    =off skips it."""
    wanted = os.environ.get("COURSE_TEST_SANDBOX", "on" if os.environ.get("CI") else "auto")
    if wanted == "on" and sandbox.available() is not None:
        pytest.fail(f"COURSE_TEST_SANDBOX=on but the sandbox does not work here: {sandbox.available()}")
    return wanted == "on" or (wanted == "auto" and sandbox.available() is None)


def release_notebook(assignment: str, notebook: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "release" / assignment / notebook, as_version=4)


def source_answers(assignment: str, notebook: str) -> dict[str, str]:
    return answer_cells(nbformat.read(ROOT / "source" / assignment / notebook, as_version=4))


def complete_submission(assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The release notebook with every answer cell solved as in source/."""
    return filled(release_notebook(assignment, notebook), source_answers(assignment, notebook))


def variant_submission(variant) -> tuple[str, nbformat.NotebookNode]:
    """The complete submission with one answer cell replaced by the variant."""
    for notebook in course_dir.notebooks(variant.assignment):
        if variant.cell in source_answers(variant.assignment, notebook):
            answers = {**source_answers(variant.assignment, notebook), variant.cell: variant.code}
            return notebook, filled(release_notebook(variant.assignment, notebook), answers)
    raise KeyError(f"{variant.assignment} has no answer cell {variant.cell}")


def write_submission(batch: Path, student: str, assignment: str, notebook: str, nb: nbformat.NotebookNode) -> None:
    folder = batch / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / notebook)


def feedback_text(out: Path, student: str, assignment: str) -> str:
    """The feedback HTML of one submission as plain text."""
    pages = sorted((out / "feedback" / student / assignment).glob("*.html"))
    text = " ".join(re.sub(r"<[^>]+>", " ", page.read_text()) for page in pages)
    return re.sub(r"\s+", " ", html.unescape(text))


class GradedBatch:
    def __init__(self, out: Path, grades: list[Grade], batch: Path | None = None):
        self.out = out
        self.batch = batch
        self.grades = {(g.student, g.assignment): g for g in grades}

    def __getitem__(self, key: tuple[str, str]) -> Grade:
        return self.grades[key]


def end_to_end_variants(assignment: str) -> list:
    """The catalogue's representative graded end to end: its first mistake (every alternative and every other
    mistake is graded in-process, tests/test_catalogue.py, through the same records and judges; one per assignment
    keeps the real-nbgrader slice within the suite's time)."""
    return mistakes(assignment)[:1]


@pytest.fixture(scope="session")
def graded_batch(tmp_path_factory: pytest.TempPathFactory) -> GradedBatch:
    """A representative slice graded by real nbgrader in the sandbox, with one worker (warm kernels keep both cores
    of the 2-core machine busy; test_gradebook.py grades with several): per assignment the
    complete solution, the untouched release and one catalogued mistake.

    Student ids: 'complete', 'untouched', and each variant's name. Every other catalogued variant is graded in
    this process through the same evidence records and judges (test_catalogue.py); test_grading.py shows the two
    agree on every submission here.
    """
    batch = tmp_path_factory.mktemp("batch")
    for assignment in ASSIGNMENTS:
        for notebook in course_dir.notebooks(assignment):
            write_submission(batch, "complete", assignment, notebook, complete_submission(assignment, notebook))
            write_submission(batch, "untouched", assignment, notebook, release_notebook(assignment, notebook))
        for variant in end_to_end_variants(assignment):
            notebook, nb = variant_submission(variant)
            write_submission(batch, variant.name, variant.assignment, notebook, nb)
    out = tmp_path_factory.mktemp("graded")
    return GradedBatch(out, grade(batch, out, ASSIGNMENTS, sandbox=use_sandbox(), progress=False), batch)


def instructor_course(folder: Path, db_url: str):
    """An nbgrader course directory for an instructor: the course's nbgrader_config.py and source/, with this
    gradebook and an exchange folder of its own."""
    folder.mkdir(parents=True)
    shutil.copytree(ROOT / "source", folder / "source")
    config = (ROOT / "nbgrader_config.py").read_text()
    config += f"\nc.CourseDirectory.db_url = {db_url!r}\nc.Exchange.root = {str(folder / 'exchange')!r}\n"
    (folder / "nbgrader_config.py").write_text(config)
    return Course(folder, db_url)


SMALL_CLASS = "01_self_attention"


def collected_at(folder: Path, when: str) -> None:
    """Leave what `python -m autograder collect` leaves beside a submission's notebooks collected at `when`: the
    timestamp.txt and the hand-in record signed with the course secret (autograder/handin.py)."""
    moment = parse_utc(when).replace(tzinfo=timezone.utc)
    notebooks = {p.name: p.read_bytes() for p in folder.glob("*.ipynb")}
    (folder / "timestamp.txt").write_text(handin.nbgrader_time(moment))
    student, assignment = folder.parent.name, folder.name
    (folder / handin.RECORD).write_bytes(handin.sign(course_secret(), student, assignment, moment, "exchange",
                                                     notebooks))


def small_class_batch(folder: Path) -> Path:
    """Four students handing in 01: one solved, collected through nbgrader's exchange (with the timestamp.txt and
    submission_secret.txt that nbgrader's submit leaves), one untouched, two with a catalogued mistake each."""
    notebook = course_dir.notebooks(SMALL_CLASS)[0]
    write_submission(folder, "ada", SMALL_CLASS, notebook, complete_submission(SMALL_CLASS, notebook))
    collected_at(folder / "ada" / SMALL_CLASS, "2026-11-20 14:05:09.123456 UTC")
    (folder / "ada" / SMALL_CLASS / "submission_secret.txt").write_text("5ec7e7" * 20)
    write_submission(folder, "bob", SMALL_CLASS, notebook, release_notebook(SMALL_CLASS, notebook))
    for student, variant in zip(("cy", "dee"), mistakes(SMALL_CLASS)[:2], strict=True):
        notebook, nb = variant_submission(variant)
        write_submission(folder, student, SMALL_CLASS, notebook, nb)
    return folder


@pytest.fixture(scope="session")
def small_class(tmp_path_factory: pytest.TempPathFactory):
    """The small class graded with two local workers into an instructor's SQLite gradebook:
    (batch, rows by student, the course, the output folder)."""
    root = tmp_path_factory.mktemp("small-class")
    batch = small_class_batch(root / "batch")
    course = instructor_course(root / "course", f"sqlite:///{root / 'course' / 'gradebook.db'}")
    rows = grade(batch, root / "out", [SMALL_CLASS], workers=2, sandbox=use_sandbox(), progress=False,
                 gradebook=course)
    return batch, {row.student: row for row in rows}, course, root / "out"
