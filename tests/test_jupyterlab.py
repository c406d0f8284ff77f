"""JupyterLab for instructors, started as the docs say (`.venv/bin/jupyter lab` from the course root, the environment
not activated): Formgrader's tables and the Assignment List answer, and the gradebook they create is complete."""

import json
import shutil
import sqlite3

import pytest
import servers
from conftest import ROOT


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A copy of the course (what an instructor's checkout holds that nbgrader reads) served by JupyterLab."""
    root = tmp_path_factory.mktemp("course")
    for name in ("nbgrader_config.py",):
        shutil.copy(ROOT / name, root / name)
    for folder in ("source", "release"):
        shutil.copytree(ROOT / folder, root / folder)
    with servers.jupyter_lab(root, tmp_path_factory.mktemp("lab")) as server:
        yield server, root


def test_formgrader_lists_the_assignments(lab):
    server, root = lab
    status, body = server.get("/formgrader/api/assignments")
    assert status == 200, body[-2000:]
    assert isinstance(json.loads(body), list)


def test_the_gradebook_formgrader_creates_has_its_version_record(lab):
    server, root = lab
    assert server.get("/formgrader/api/assignments")[0] == 200
    with sqlite3.connect(root / "gradebook.db") as db:
        versions = db.execute("SELECT version_num FROM alembic_version").fetchall()
    assert len(versions) == 1 and versions[0][0], versions


def test_the_assignment_list_finds_its_course_and_exchange(lab):
    server, root = lab
    status, body = server.get("/courses")
    assert status == 200, body[-2000:]
    answer = json.loads(body)
    assert answer.get("success") is True, answer
    status, body = server.get("/assignments?course_id=transformers-from-scratch")
    assert status == 200 and json.loads(body).get("success") is True, body[-2000:]
    assert (root / "exchange").is_dir()
