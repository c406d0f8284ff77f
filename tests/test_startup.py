"""autograder/startup.py: the start-up costs the grader cuts change nothing it computes."""

import os
import subprocess
import sys
from pathlib import Path

import nbgrader.api

from autograder import startup


def test_the_in_process_alembic_head_is_the_one_nbgrader_asks_alembic_for(tmp_path):
    # nbgrader's own way, a subprocess running the alembic command of this environment
    bin_folder = str(Path(sys.executable).parent)
    code = "from nbgrader.api import get_alembic_version as v; print(v())"
    env = {**os.environ, "PATH": f"{bin_folder}:{os.environ.get('PATH', '')}"}
    theirs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                            cwd=tmp_path).stdout.strip()
    assert theirs and startup.alembic_head() == theirs


def test_a_gradebook_made_by_the_grader_carries_the_head_and_no_subprocess_runs(tmp_path, monkeypatch):
    startup.fast_gradebooks()

    def refuse(*args, **kwargs):
        raise AssertionError(f"a subprocess ran: {args}")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", refuse)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with nbgrader.api.Gradebook(url) as gradebook:
        version = gradebook.db.execute(nbgrader.api.text("SELECT version_num FROM alembic_version")).scalar()
    assert version == startup.alembic_head()


def test_the_iri_grammar_is_not_imported_by_the_grader():
    code = ("import autograder, nbformat, jsonschema, sys\n"
            "print('rfc3987_syntax' in sys.modules and sys.modules['rfc3987_syntax'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
