#!/usr/bin/env bash
# Set up the course on a fresh machine: the pinned Python environment in .venv, and bubblewrap, the sandbox
# the grader runs student code in (Debian/Ubuntu package; installed when this runs as root and it is missing).
set -euo pipefail
cd "$(dirname "$0")"
# First, before anything is installed: a Python the pinned environment runs on (pyproject.toml's requires-python
# says why 3.11.5). PYTHON=/path/to/python3 bash setup.sh picks another interpreter.
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11, 5))'; then
    echo "error: $PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); the course needs 3.11.5 or later." >&2
    echo "       (Before 3.11.5 Python's re module mis-matches patterns the pinned soupsieve uses; Debian 12 ships 3.11.2.)" >&2
    echo "       Install a newer Python (python3.12, pyenv, uv, conda) and run: PYTHON=/path/to/python3 bash setup.sh" >&2
    [ -x .venv/bin/python ] && echo "       Remove the .venv made with it first." >&2
    exit 1
fi
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    else
        echo "note: bubblewrap (bwrap) is not installed, so grading will refuse to run student code unsandboxed." >&2
        echo "      Install it (sudo apt-get install bubblewrap), or grade with --no-sandbox on a trusted machine." >&2
    fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
echo "environment ready: .venv ($(.venv/bin/python --version))"
