#!/usr/bin/env bash
# Set up the course on a fresh machine: the pinned Python environment in .venv, and bubblewrap, the sandbox
# the grader runs student code in (Debian/Ubuntu package; installed when this runs as root and it is missing).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v bwrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    else
        echo "note: bubblewrap (bwrap) is not installed, so grading will refuse to run student code unsandboxed." >&2
        echo "      Install it (sudo apt-get install bubblewrap), or grade with --no-sandbox on a trusted machine." >&2
    fi
fi
PYTHON=$(command -v python3.11 || command -v python3)
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
echo "environment ready: .venv ($(.venv/bin/python --version))"
