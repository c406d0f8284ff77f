"""Where each kernel's memory group is made (autograder/cgroups.py), and how stale groups go.

The choice of hierarchy is tested in-process against a fake /sys/fs/cgroup in a temporary folder (cgroup v1 as on
these machines, cgroup v2 with and without the memory controller delegated, no controller at all), since a host
boots one or the other. Making, limiting, joining and removing a group is tested for real on this host's cgroups
(kernels OOM-killed in the real sandbox: tests/test_sandbox.py).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder import cgroups, sandbox

MOUNTS_V1 = """\
31 23 0:28 / {root} rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / {root}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
MEMBERSHIP_V1 = "9:name=systemd:/\n8:pids:/\n4:memory:/grading/worker\n0::/\n"
MOUNTS_V2 = "29 23 0:26 / {root} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
MEMBERSHIP_V2 = "0::/system.slice/grader.service\n"


def fake_tree(tmp_path: Path, groups: dict[str, dict[str, str]]) -> Path:
    """A fake cgroup file system: group folder -> {file: content}."""
    root = tmp_path / "cgroup"
    for folder, files in groups.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (root / folder / name).write_text(content)
    return root


def test_cgroup_v1_groups_go_under_the_graders_own_memory_and_pids_groups(tmp_path):
    root = fake_tree(tmp_path, {"memory/grading/worker": {}, "pids": {}, "unified": {}})
    where, reason = cgroups.locate(MOUNTS_V1.format(root=root), MEMBERSHIP_V1)
    assert where == {"version": 1, "memory": str(root / "memory/grading/worker"), "pids": str(root / "pids")}
    assert reason.startswith("cgroup v1")


def test_cgroup_v2_groups_go_under_the_graders_group_when_it_delegates_memory(tmp_path):
    own = "system.slice/grader.service"
    root = fake_tree(tmp_path, {own: {"cgroup.controllers": "cpu io memory pids\n",
                                      "cgroup.subtree_control": "memory pids\n"}})
    where, _ = cgroups.locate(MOUNTS_V2.format(root=root), MEMBERSHIP_V2, chosen="")
    assert where == {"version": 2, "memory": str(root / own), "pids": str(root / own)}
    assert cgroups.folders(where, "autograder-kernel-1-2") == [str(root / own / "autograder-kernel-1-2")]


@pytest.mark.parametrize("controllers, words", [("cpu io memory pids", "not in its cgroup.subtree_control"),
                                                ("cpu io", "not even available in")])
def test_cgroup_v2_without_delegated_memory_says_how_to_delegate_it(tmp_path, controllers, words):
    own = "system.slice/grader.service"
    root = fake_tree(tmp_path, {own: {"cgroup.controllers": controllers, "cgroup.subtree_control": "cpu\n"}})
    where, reason = cgroups.locate(MOUNTS_V2.format(root=root), MEMBERSHIP_V2, chosen="")
    assert where is None
    assert words in reason and "AUTOGRADER_CGROUP" in reason, reason
    assert "memory bounded per process only" in cgroups.describe(where, reason)


def test_cgroup_v2_groups_go_in_the_group_the_administrator_made_for_kernels(tmp_path):
    """cgroup v2 lets no group that holds processes (the grader's) delegate memory: the administrator makes one."""
    own, made = "system.slice/grader.service", "grading"
    root = fake_tree(tmp_path, {own: {"cgroup.controllers": "memory pids", "cgroup.subtree_control": ""},
                                made: {"cgroup.controllers": "memory pids", "cgroup.subtree_control": "memory\n"}})
    where, reason = cgroups.locate(MOUNTS_V2.format(root=root), MEMBERSHIP_V2, chosen=str(root / made))
    assert where == {"version": 2, "memory": str(root / made), "pids": None}, reason
    (root / made / "cgroup.subtree_control").write_text("pids\n")
    where, reason = cgroups.locate(MOUNTS_V2.format(root=root), MEMBERSHIP_V2, chosen=str(root / made))
    assert where is None and "does not delegate the memory controller" in reason


def test_no_memory_controller_means_memory_per_process_only(tmp_path):
    root = fake_tree(tmp_path, {"pids": {}})
    mounts = f"39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids\n"
    where, reason = cgroups.locate(mounts, "8:pids:/\n")
    assert where is None and reason == "no memory cgroup controller on this host"
    assert cgroups.describe(where, reason).startswith("memory bounded per process only (RLIMIT_DATA")


def test_a_group_the_grader_may_not_write_is_not_used():
    """Unwritable (a grader that is not root, /sys read-only): checked as the grader, here a non-root child."""
    top = Path(tempfile.mkdtemp())  # not under pytest's 0700 folders: the child must reach it
    root = fake_tree(top, {"memory/grading/worker": {}, "pids": {}})
    for folder in [top, root, *root.rglob("*")]:
        folder.chmod(0o755)
    code = ("import sys, os; from autograder import cgroups\n"
            "os.setgid(65534); os.setuid(65534)\n" if os.geteuid() == 0 else "from autograder import cgroups\n")
    code += f"print(cgroups.locate({MOUNTS_V1.format(root=root)!r}, {MEMBERSHIP_V1!r}))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(top)
    assert out.startswith("(None, 'cgroup v1: the grader may not make groups in"), out


# ------------------------------------------------------------------------------------------- this host, for real

where, reason = sandbox.memory_groups()
needs_cgroup = pytest.mark.skipif(where is None, reason=f"no memory cgroup here: {reason}")


@needs_cgroup
def test_a_group_whose_owner_was_killed_is_removed_with_what_is_left_in_it():
    """A launcher and its reaper killed with -9 leave a group behind: the next kernel's start (remove_stale) kills
    what is still in it and removes it; a group whose owner lives is left alone."""
    owner = subprocess.Popen(["sleep", "60"])
    orphan = subprocess.Popen(["sleep", "60"])
    alive = subprocess.Popen(["sleep", "60"])
    stale = cgroups.create(where, cgroups.name_for(owner.pid), 64 * sandbox.MB, 16)
    kept = cgroups.create(where, cgroups.name_for(alive.pid), 64 * sandbox.MB, 16)
    try:
        cgroups.join(stale, orphan.pid)
        assert cgroups.member(stale, orphan.pid)
        owner.kill()
        owner.wait()
        removed = cgroups.remove_stale(where)
        assert set(stale) <= set(removed), removed
        assert not any(os.path.exists(folder) for folder in stale)
        assert orphan.wait(timeout=5) == -9, "what was left in a stale group must not outlive it"
        assert all(os.path.isdir(folder) for folder in kept)
    finally:
        for process in (owner, orphan, alive):
            process.kill()
            process.wait()
        for folder in kept:
            cgroups.remove(folder, wait=2)


@needs_cgroup
def test_the_reaper_removes_the_group_and_logs_its_peak_once_its_owner_ends(tmp_path):
    # the owner allocates only once it is in the group (v1 does not move what a process held before it joined)
    owner = subprocess.Popen([sys.executable, "-c", "import sys, time\nsys.stdin.readline()\n"
                              "held = bytearray(8 << 20)\nprint('held', flush=True)\ntime.sleep(60)"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    made = cgroups.create(where, cgroups.name_for(owner.pid), 64 * sandbox.MB, 16)
    cgroups.join(made, owner.pid)
    log = tmp_path / "memory.log"
    cgroups.reap_after(made, owner.pid, str(log))
    assert all(os.path.isdir(folder) for folder in made)
    owner.stdin.write("go\n")
    owner.stdin.flush()
    assert owner.stdout.readline() == "held\n"
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10
    while any(os.path.exists(folder) for folder in made) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(folder) for folder in made)
    name, peak = log.read_text().split()[1:4:2]
    assert name == os.path.basename(made[0]) and int(peak) > 0
