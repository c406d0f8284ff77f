"""The files a submission needs for nbgrader's feedback release, and the student's cache entry that lets nbgrader's
fetch_feedback find it (autograder/exchange.py). In-process and fast: tests/test_feedback_delivery.py runs nbgrader's
release_feedback and fetch_feedback on a graded folder submission."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from autograder import course_dir
from autograder.exchange import SECRET, TIMESTAMP, feedback_name, make_releasable, release_files, write_student_cache

A, NB = "01_self_attention", "self_attention.ipynb"
SUBMITTED_SECRET = "5ec7e7" * 20


def _kept(course, kind: str, student: str = "zoe", files: dict[str, str] | None = None):
    folder = course / kind / student / A
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return folder


def test_a_submission_from_the_exchange_keeps_the_secret_it_came_with(tmp_path):
    assert release_files(tmp_path, "ada", A, {SECRET: SUBMITTED_SECRET.encode(), TIMESTAMP: b"x"}) == {}


def test_a_folder_submission_gets_a_secret_once_and_the_same_on_every_regrade(tmp_path):
    first = release_files(tmp_path, "zoe", A, {TIMESTAMP: b"2026-11-20 14:05:09.123456 UTC"})[SECRET].decode()
    assert len(first) == 128 and int(first, 16) >= 0, "a secret as nbgrader's submit makes them (token_hex(64))"
    assert release_files(tmp_path, "yan", A, {})[SECRET].decode() != first, "every submission has its own"
    _kept(tmp_path, "submitted", files={SECRET: first})
    assert release_files(tmp_path, "zoe", A, {})[SECRET].decode() == first
    (tmp_path / "submitted").rename(tmp_path / "gone")
    _kept(tmp_path, "feedback", files={SECRET: first})  # submitted/ cleared: the feedback's copy still counts
    assert release_files(tmp_path, "zoe", A, {})[SECRET].decode() == first


def test_a_file_that_is_no_secret_is_not_reused(tmp_path):
    _kept(tmp_path, "submitted", files={SECRET: "../../etc/passwd"})
    made = release_files(tmp_path, "zoe", A, {})[SECRET].decode()
    assert made != "../../etc/passwd" and len(made) == 128


def test_an_id_that_is_not_a_folder_name_reads_nothing_outside_the_course(tmp_path):
    _kept(tmp_path, "x", files={SECRET: SUBMITTED_SECRET})  # what submitted/../x/<assignment>/ would reach
    for student in ("../x", "..", "a/b"):
        made = release_files(tmp_path / "course", student, A, {})[SECRET].decode()
        assert made != SUBMITTED_SECRET and len(made) == 128, student


@pytest.mark.parametrize("student", ["a+b", "../x", "a/b", "*", ".."])
def test_ids_nbgraders_exchange_cannot_hold_get_no_cache_entry(tmp_path, student):
    with pytest.raises(ValueError, match="exchange cannot hold"):
        write_student_cache(tmp_path, "course", student, A, {NB: b"{}"},
                            {SECRET: SUBMITTED_SECRET.encode(), TIMESTAMP: b"2026-11-20 14:05:09 UTC"})


def test_a_course_graded_earlier_is_made_releasable_with_the_secret_it_has(tmp_path):
    _kept(tmp_path, "submitted", "ada", {SECRET: SUBMITTED_SECRET, NB: "{}"})
    _kept(tmp_path, "autograded", "ada", {NB: "{}"})
    _kept(tmp_path, "feedback", "ada", {"self_attention.html": "<html>"})
    for kind in ("submitted", "autograded", "feedback"):
        _kept(tmp_path, kind, "zoe", {TIMESTAMP: "2026-11-20 14:05:09.123456 UTC"})
    assert make_releasable(tmp_path, A) == ["ada", "zoe"]
    for kind in ("autograded", "feedback"):
        assert (tmp_path / kind / "ada" / A / SECRET).read_text() == SUBMITTED_SECRET
    zoe = {(tmp_path / kind / "zoe" / A / SECRET).read_text() for kind in ("submitted", "autograded", "feedback")}
    assert len(zoe) == 1 and len(zoe.pop()) == 128
    assert make_releasable(tmp_path, A) == [], "a second run changes nothing"
    assert make_releasable(tmp_path, "02_qkv") == []


def test_the_students_cache_entry_is_what_nbgraders_submit_leaves(tmp_path):
    extras = {SECRET: SUBMITTED_SECRET.encode(), TIMESTAMP: b"2026-11-20T15:05:09+01:00"}
    entry = write_student_cache(tmp_path, "course", "zoe", A, {NB: b"{}"}, extras)
    assert entry == tmp_path / "course" / f"zoe+{A}+2026-11-20 14:05:09.000000 UTC"
    assert sorted(p.name for p in entry.iterdir()) == sorted([NB, SECRET, TIMESTAMP])
    assert (entry / TIMESTAMP).read_text() == "2026-11-20 14:05:09.000000 UTC"
    (entry / "old.ipynb").write_text("{}")
    write_student_cache(tmp_path, "course", "zoe", A, {NB: b"{}"}, extras)
    assert not (entry / "old.ipynb").exists(), "a rewritten entry holds this submission's notebooks only"
    with pytest.raises(ValueError, match="no submission_secret"):
        write_student_cache(tmp_path, "course", "zoe", A, {NB: b"{}"}, {TIMESTAMP: extras[TIMESTAMP]})


def test_the_feedback_name_is_nbgraders_hash_of_secret_and_notebook():
    expected = hashlib.md5((SUBMITTED_SECRET + "self_attention").encode()).hexdigest() + ".html"  # noqa: S324
    assert feedback_name(SUBMITTED_SECRET, NB) == expected


def test_the_course_uses_the_exchange_a_hubs_nbgrader_config_names_else_its_own(tmp_path):
    """On a JupyterHub the machine-wide nbgrader_config.py (deploy/) names one exchange for every user; the
    course's own config must not send the instructor to a private one beside the course."""
    shared = tmp_path / "etc"
    shared.mkdir()
    (shared / "nbgrader_config.py").write_text('c = get_config()\nc.Exchange.root = "/srv/nbgrader/exchange"\n')
    load = ("from traitlets.config.loader import PyFileConfigLoader as L; "
            f"print(L('nbgrader_config.py', path={str(course_dir.ROOT)!r}).load_config().Exchange.root)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_")}
    on_hub = subprocess.run([sys.executable, "-c", load], env={**env, "JUPYTER_CONFIG_PATH": str(shared)},
                            capture_output=True, text=True, check=True)
    assert on_hub.stdout.strip() == "/srv/nbgrader/exchange", on_hub.stderr
    alone = subprocess.run([sys.executable, "-c", load], env={**env, "JUPYTER_CONFIG_DIR": str(tmp_path / "none")},
                           capture_output=True, text=True, check=True)
    assert alone.stdout.strip() == str(course_dir.ROOT / "exchange"), alone.stderr
