"""What every grading process pays when it starts, cut where nothing the grader computes depends on it.

Measured on the 2-core machine, per process (a local worker, a Dask worker's workspace, the command itself):
- ``import nbformat`` imports jsonschema, whose format checkers import ``rfc3987_syntax``, which builds a Lark grammar:
  1.05 s. The grader never checks a JSON "iri" format (nbformat validates notebooks without format checkers), so
  that module is marked absent before anything imports jsonschema (:func:`skip_iri_grammar`, called by
  ``autograder/__init__.py``); jsonschema then leaves the two IRI checkers out, as it does where the module is not
  installed.
- a new gradebook asks ``alembic heads`` for the schema version it stamps, in a subprocess: 2.6 s.
  :func:`alembic_head` reads the same head from nbgrader's migration scripts in this process (0.08 s, once), and
  :func:`fast_gradebooks` makes nbgrader use it. tests/test_startup.py checks both give the same version.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache


def skip_iri_grammar() -> None:
    """Mark rfc3987_syntax absent, unless something imported it already."""
    sys.modules.setdefault("rfc3987_syntax", None)


@lru_cache(maxsize=1)
def alembic_head() -> str:
    """The newest revision of nbgrader's gradebook schema, read from its alembic scripts in this process."""
    import nbgrader  # noqa: PLC0415 - heavy: only where gradebooks are made
    from alembic.config import Config  # noqa: PLC0415
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", os.path.join(os.path.dirname(nbgrader.__file__), "alembic"))
    return ScriptDirectory.from_config(config).get_current_head()


def fast_gradebooks() -> None:
    """Make nbgrader stamp new gradebooks with alembic_head() instead of running ``alembic heads``."""
    import nbgrader.api  # noqa: PLC0415

    nbgrader.api.get_alembic_version = alembic_head
