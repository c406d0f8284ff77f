"""The README's grading command on the bundled samples, given as a zip, with a broken notebook among them.

The first two assignments stand for all: every assignment's complete, untouched and mistaken submissions are graded
end to end in test_grading.py."""

import csv
import shutil
import subprocess
import sys

from conftest import use_sandbox

from autograder import course_dir

ROOT = course_dir.ROOT
FIRST, SECOND = course_dir.assignments()[:2]


def test_grading_the_sample_batch_zip_gives_the_expected_rows(tmp_path):
    archive = shutil.make_archive(str(tmp_path / "submissions"), "zip", root_dir=ROOT, base_dir="samples")
    out = tmp_path / "graded"
    flags = ["--workers", "2", "--assignment", FIRST, "--assignment", SECOND]
    flags += [] if use_sandbox() else ["--no-sandbox"]
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", archive, "--out", str(out), *flags],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    with (out / "grades.csv").open() as f:
        rows = {(r["student"], r["assignment"]): r for r in csv.DictReader(f)}
    assert {assignment for _, assignment in rows} == {FIRST, SECOND}
    for assignment in (FIRST, SECOND):
        assert rows["sample-complete", assignment]["score"] == rows["sample-complete", assignment]["max_score"]
        assert rows["sample-untouched", assignment]["score"] == "0"
        mistakes = rows["sample-mistakes", assignment]
        assert mistakes["status"] == "graded" and 0 < float(mistakes["score"]) < float(mistakes["max_score"])
        assert (out / "feedback" / "sample-mistakes" / assignment).is_dir()
    broken = rows["sample-broken", FIRST]
    assert broken["status"] == "invalid-notebook" and "not valid JSON" in broken["message"]
    assert rows["sample-broken", SECOND]["status"] == "missing"
    assert "Class report" in (out / "report.md").read_text()
    assert "sample-complete" in done.stdout and "invalid-notebook" in done.stdout  # the printed table


def test_unknown_assignment_is_refused_with_a_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", str(ROOT / "samples"), "--out", str(tmp_path),
                           "--assignment", "99_nonexistent"], capture_output=True, text=True)
    assert done.returncode != 0 and "unknown assignment" in done.stderr
