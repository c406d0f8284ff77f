"""autograder/forkserver.py's protocol, against a real fork server in the real sandbox: what it refuses, and a
kernel folder outside the grading folder, which it never binds. The kernels it forks are tested as kernels in
tests/test_sandbox.py (isolation and limits, cold and forked) and tests/test_warm_kernels.py (grading)."""

import json
import os
import socket

import pytest
from traitlets.config import Config

from autograder import sandbox
from autograder.kernels import close_servers, fork_server

pytestmark = pytest.mark.skipif(sandbox.available() is not None or not sandbox.switches_uid(),
                                reason="kernels are forked only in the sandbox, where the grader is root")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("forkserver") / "course"
    (work / "autograded" / "alice" / "a1").mkdir(parents=True)
    sandbox.configure(Config(), work)
    plan_file = work / ".sandbox" / "plan.json"
    path = fork_server(str(plan_file), {"OMP_NUM_THREADS": "1"})
    yield path, json.loads(plan_file.read_text())
    close_servers(work)


def _ask(path: str, request: dict) -> tuple[list[str], str]:
    """Send one request with a pipe as the kernel's stderr; (the server's replies, what the kernel wrote there)."""
    read, write = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(60)
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, write, write])
        os.close(write)
        replies = conn.makefile("rb").read().decode().splitlines()
    with os.fdopen(read) as stderr:
        return replies, stderr.read()


def _request(plan: dict, folder: str, **changes) -> dict:
    env = sandbox.kernel_environment(plan, {**os.environ, "OMP_NUM_THREADS": "1"})
    return {"connection": {}, "connection_path": sandbox.CONNECTION, "folder": folder, "assignment": "a1",
            "stubs": [], "cache": None, "cache_bytes": 1 << 20, "inside": sandbox.INSIDE, "uid": 61000 + os.getpid(),
            "env": env, "argv": [], "tmp_bytes": 64 << 20, **changes}


def test_a_kernel_asking_for_other_thread_counts_than_the_server_imported_with_is_refused(server):
    path, plan = server
    request = _request(plan, "autograded/alice/a1")
    request["env"]["OMP_NUM_THREADS"] = "2"
    replies, _ = _ask(path, request)
    assert replies == ["refused RuntimeError: environment differs from the fork server's in ['OMP_NUM_THREADS']"]


@pytest.mark.parametrize("folder", ["../../etc", "/etc", "."])
def test_a_kernel_folder_outside_the_grading_folder_is_never_bound(server, folder):
    path, plan = server
    replies, stderr = _ask(path, _request(plan, folder))
    assert replies == ["started", "exit 111"], (replies, stderr)
    assert f"not in the grading folder: {folder!r}" in stderr, stderr
