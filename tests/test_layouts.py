"""The grader works wherever its Python lives: whichever checkout or wheel the Python installed, the kernel imports
the course folder being graded, and nothing else of the course.

Each layout is built cheaply, as an instructor might have it: a copy of this course folder (its tracked files as they
are now); venvs under /tmp whose site-packages reach this checkout's .venv through a .pth (as a shared or conda-like
environment reaches a folder outside its prefix), one with the copy installed editable (another checkout of the same
course), one with the copy installed as a wheel (non-editable: course/, its judges and answers in site-packages).
In each, one honest 01 submission is graded by ``python -m autograder grade`` in the sandbox, its kernels forked from
the fork server, and a kernel is started cold (bwrap's own start) by the grader's GradingExecute."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import course_dir, sandbox
from autograder.execute import FAILED_AT_START, startup_exception
from autograder.workspace import cause, transient

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"sandbox unavailable: {sandbox.available()}")

ROOT = course_dir.ROOT
FIRST = course_dir.assignments()[0]
SITE = Path(next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)))


def _copy(target: Path) -> Path:
    """This course folder's tracked files, as they are in the working tree now."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    target.mkdir(parents=True)
    subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], input=files, cwd=ROOT, check=True,
                   stdout=open(target / ".tar", "wb"))  # noqa: SIM115 - closed by the subprocess's end
    subprocess.run(["tar", "xf", ".tar"], cwd=target, check=True)
    (target / ".tar").unlink()
    return target


def _venv(folder: Path, install: Path, editable: bool) -> Path:
    """A venv under folder whose site-packages reach this .venv's by a .pth, with install's packages installed."""
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    (site / "shared.pth").write_text(f"{SITE}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-build-isolation", *(["-e"] if editable else []), str(install)],
                   check=True, capture_output=True)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    copy = _copy(root / "copy")
    batch = root / "batch" / "alice"
    batch.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(ROOT / "samples" / "sample-complete" / FIRST), str(batch)], check=True)
    return {"root": root, "copy": copy, "batch": root / "batch",
            "shared": _venv(root / "shared-venv", copy, editable=True),
            "wheel": _venv(root / "wheel-venv", copy, editable=False)}


def grade(python: Path, cwd: Path, batch: Path, out: Path, fork: bool) -> tuple[dict, subprocess.CompletedProcess]:
    flags = [] if fork else ["--no-fork-server"]
    done = subprocess.run([str(python), "-m", "autograder", "grade", str(batch), "--out", str(out), "--workers", "1",
                           "--assignment", FIRST, *flags], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with (out / "grades.csv").open() as f:
        return next(csv.DictReader(f)), done


def _wheel_site(lay) -> Path:
    return next((lay["root"] / "wheel-venv").glob("lib/python*/site-packages"))


LAYOUTS = {  # (the Python, the course folder graded, the other course that Python has installed)
    # a copy of the course graded with the venv of the checkout it was copied from (editable: this checkout)
    "copy-with-origin-venv": lambda lay: (ROOT / ".venv" / "bin" / "python", lay["copy"], ROOT / "course"),
    # a shared venv under /tmp that installed another checkout (the copy), grading this one
    "shared-venv-other-checkout": lambda lay: (lay["shared"], ROOT, lay["copy"] / "course"),
    # a wheel (non-editable install of the copy) in a venv under /tmp, grading the copy
    "wheel": lambda lay: (lay["wheel"], lay["copy"], _wheel_site(lay) / "course"),
}


#: a real kernel of the layout's, started cold (no fork server) by the grader's GradingExecute in the sandbox,
#: running one cell (argv[2]) of a notebook in work (argv[1]); prints the cell's output
KERNEL_SCRIPT = '''import sys
from pathlib import Path
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config
from autograder import sandbox
from autograder.execute import GradingExecute
work = Path(sys.argv[1])
cwd = work / "autograded" / "alice" / "01_self_attention"
cwd.mkdir(parents=True)
config = Config()
sandbox.configure(config, work, sandbox.Limits())
nb = new_notebook(cells=[new_code_cell(sys.argv[2])])
nb, _ = GradingExecute(config=config).preprocess(nb, {"metadata": {"path": str(cwd)}})
print("".join(o.get("text", "") for o in nb.cells[0].outputs))
'''


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_honest_submission_gets_its_full_score_in_every_layout(layouts, layout, tmp_path):
    """Graded end to end by the grade command, its kernels forked from the fork server (what a root grader does);
    the cold start, bwrap's own, is the next test's, in the same layouts. Before grading, a note names the course
    folder graded and the other course that Python installed."""
    python, cwd, installed = LAYOUTS[layout](layouts)
    row, done = grade(python, cwd, layouts["batch"], tmp_path / "out", fork=True)
    assert row["status"] == "graded" and row["score"] == row["max_score"], (row, done.stderr[-3000:])
    assert f"note: grading with the course folder's course, {cwd / 'course'} (version" in done.stderr, done.stderr
    assert f"\n  {installed.resolve()} (version {course_dir.version()}): " in done.stderr, done.stderr


def test_an_installed_course_that_differs_from_the_folder_is_named_with_both_versions(tmp_path, monkeypatch):
    """Another copy of the course on this Python's path, one file changed and an older version: the note before
    grading names both folders and versions, counts the file, and says how to make them agree."""
    other = tmp_path / "other-checkout"
    other.mkdir()
    subprocess.run(["cp", "-r", str(ROOT / "course"), str(other / "course")], check=True)
    (other / "course" / "seeding.py").write_text("# changed\n" + (ROOT / "course" / "seeding.py").read_text())
    (other / "pyproject.toml").write_text('[project]\nname = "transformers-course"\nversion = "0.0.9"\n')
    monkeypatch.syspath_prepend(str(other))
    note = course_dir.installed_course_note()
    assert note.startswith(f"note: grading with the course folder's course, {ROOT / 'course'} "
                           f"(version {course_dir.version()})"), note
    assert f"{other / 'course'} (version 0.0.9): 1 file(s) differ" in note and f"pip install {ROOT}" in note, note
    assert f"\n  {ROOT / 'course'} " not in note, note


def test_setup_refuses_a_python_older_than_the_bound_before_installing_anything(tmp_path):
    """Debian 12's own Python (3.11.2) mis-matches the regular expressions of the pinned soupsieve: setup.sh says so
    in plain words and makes no .venv."""
    candidates = ["/usr/bin/python3", *map(str, sorted(Path("/root/.pyenv/versions").glob("3.1[01].*/bin/python3")))]
    older = "import sys; sys.exit(sys.version_info < (3, 11, 5))"
    old = next((p for p in candidates if Path(p).exists() and subprocess.run([p, "-c", older]).returncode), None)
    if old is None:
        pytest.skip("no Python older than 3.11.5 on this machine")
    (tmp_path / "setup.sh").write_text((ROOT / "setup.sh").read_text())
    done = subprocess.run(["bash", "setup.sh"], cwd=tmp_path, env={**os.environ, "PYTHON": old}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "the course needs 3.11.5 or later" in done.stderr, done.stderr
    assert old in done.stderr and "PYTHON=/path/to/python3 bash setup.sh" in done.stderr, done.stderr
    assert not (tmp_path / ".venv").exists()


def test_requires_python_is_the_bound_every_pinned_package_and_setup_agree_on():
    """pyproject.toml's requires-python, setup.sh's check and the pinned packages' own Requires-Python agree: the
    lowest Python the course allows installs every pin."""
    import importlib.metadata  # noqa: PLC0415
    import tomllib  # noqa: PLC0415

    from packaging.specifiers import SpecifierSet  # noqa: PLC0415

    with (ROOT / "pyproject.toml").open("rb") as f:
        bound = tomllib.load(f)["project"]["requires-python"]
    assert bound.startswith(">="), bound
    lowest = bound[2:]
    assert f"sys.version_info < ({lowest.replace('.', ', ')})" in (ROOT / "setup.sh").read_text()
    refusing = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name = line.split("==")[0].split("[")[0].strip()
            needs = importlib.metadata.metadata(name).get("Requires-Python")
            if needs and lowest not in SpecifierSet(needs):
                refusing[name] = needs
    assert not refusing, f"requires-python {bound} allows a Python these pins refuse: {refusing}"


@pytest.mark.parametrize("layout", [layout for layout in LAYOUTS if layout != "wheel"])
def test_a_cold_kernel_imports_the_course_being_graded_and_its_probes_in_every_layout(layouts, layout, tmp_path):
    """A kernel started cold by bwrap (no fork server), in each layout, through the grader's own GradingExecute: it
    imports course and 01's probes from the course folder graded (what failed before: the kernel had no module
    course, and every notebook scored 0). One kernel, not a second whole grading of each layout; the wheel's cold
    kernel is test_in_the_wheel_layout_the_kernel_reads_no_installed_judges_or_answers's."""
    python, cwd, _ = LAYOUTS[layout](layouts)
    code = ("import course\nfrom course.checks import self_attention as check\nprint('course from', course.__file__)\n"
            "print('probes from', check.__file__)\n")
    done = subprocess.run([str(python), "-c", KERNEL_SCRIPT, str(tmp_path / "work"), code], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"course from {cwd / 'course' / '__init__.py'}" in done.stdout, done.stdout
    assert f"probes from {cwd / 'course' / 'checks' / 'self_attention.py'}" in done.stdout, done.stdout


def test_a_wheel_s_judges_and_answers_are_hidden_from_the_kernel(layouts):
    """Installed as a wheel, course/ (real judges, every answer) is in the venv's site-packages, which the kernel's
    Python needs: that copy of course, and the wheel's autograder and catalogue, are hidden; the course folder graded
    is what the kernel imports."""
    site = next((layouts["root"] / "wheel-venv").glob("lib/python*/site-packages"))
    code = ("import json\nfrom pathlib import Path\nfrom autograder import sandbox\n"
            "plan = sandbox._plan(Path('work'), sandbox.Limits(), 61000)\n"
            "print(json.dumps({'hide': plan['hide'], 'env': sandbox.kernel_environment(plan)}))")
    (layouts["copy"] / "work").mkdir(exist_ok=True)
    done = subprocess.run([str(layouts["wheel"]), "-c", code], cwd=layouts["copy"], capture_output=True, text=True,
                          check=True)
    import json  # noqa: PLC0415

    plan = json.loads(done.stdout)
    for name in ("course", "autograder", "catalogue"):
        assert str(site / name) in plan["hide"], (name, plan["hide"])
    assert plan["env"]["PYTHONPATH"] == str(layouts["copy"])


def _broken(tmp_path: Path) -> Path:
    """A copy of the course whose package does not import in the kernel (on purpose, only inside the sandbox)."""
    broken = _copy(tmp_path / "broken")
    init = broken / "course" / "__init__.py"
    init.write_text("import os\nif os.path.isdir('/tmp/submission'):\n"
                    "    raise ImportError('BROKEN-ON-PURPOSE: this course does not import in the kernel')\n"
                    + init.read_text())
    return broken


def test_a_kernel_that_cannot_import_the_course_fails_once_with_its_cause_in_the_row_and_the_log(layouts, tmp_path):
    """A course whose package does not import in the kernel: every kernel dies at start with a Python exception, which
    no retry mends. Graded by the grade command (its kernels forked): the row is an error, not a silent 0, tried once
    (no "after 3 attempts", no waits), and names the exception; its log holds the kernel's own stderr with the cause.
    A cold kernel's death is told the same way (GradingExecute, below: no second whole grading)."""
    broken = _broken(tmp_path)
    out = tmp_path / "out"
    row, done = grade(ROOT / ".venv" / "bin" / "python", broken, layouts["batch"], out, fork=True)
    assert row["status"] == "error", row
    assert "BROKEN-ON-PURPOSE" in row["message"] and "attempts" not in row["message"], row
    log = (out / "logs" / "alice" / f"{FIRST}.log").read_text()
    assert "attempt 1 of" in log and "attempt 2 of" not in log, log[-3000:]
    assert "BROKEN-ON-PURPOSE" in log and "cannot import the course being graded" in log, log[-3000:]
    cold = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c", KERNEL_SCRIPT, str(tmp_path / "work"), "1"],
                          cwd=broken, capture_output=True, text=True, timeout=300)
    assert cold.returncode != 0, cold.stdout[-2000:]
    assert f"KernelStartError: {FAILED_AT_START}: ImportError: BROKEN-ON-PURPOSE" in cold.stderr, cold.stderr[-3000:]
    assert "cannot import the course being graded" in cold.stderr and "Traceback" in cold.stderr, cold.stderr[-3000:]


def test_only_a_kernel_that_raised_at_start_is_not_tried_again():
    """What the kernel's stderr holds decides: a Python exception at start (a cold kernel's traceback, or the fork
    server's one-line report) is permanent and named; a kernel killed or silent before it answered may be tried
    again."""
    cold = ("autograder sandbox: the kernel cannot import the course being graded from /c/course\n"
            "Traceback (most recent call last):\n  File \"<string>\", line 11, in <module>\n"
            "ModuleNotFoundError: No module named 'course'\n")
    forked = "autograder fork server, run_kernel: ImportError: cannot import name 'checks' from 'course'\n"
    assert startup_exception(cold) == "ModuleNotFoundError: No module named 'course'"
    assert startup_exception(forked) == "ImportError: cannot import name 'checks' from 'course'"
    assert startup_exception("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n") == ""
    assert startup_exception("") == ""
    died = "RuntimeError: Kernel died before replying to kernel_info"
    assert transient(died) and transient("RuntimeError: Kernel didn't respond in 60 seconds")
    permanent = (f"[ERROR] {died}\n    autograder.execute.KernelStartError: {FAILED_AT_START}: ImportError: "
                 "cannot import name 'checks'\n    the kernel's own stderr:\n"
                 "    ImportError: cannot import name 'checks'")
    assert not transient(permanent)
    assert cause(permanent) == f"{FAILED_AT_START}: ImportError: cannot import name 'checks'"


def _available(python: Path, cwd: Path, patch: str) -> str:
    code = f"from autograder import sandbox\n{patch}\nprint(sandbox.available())"
    return subprocess.run([str(python), "-c", code], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_a_python_the_sandbox_cannot_run_is_named_with_its_cause_not_met_by_turning_the_sandbox_off(layouts):
    """A site folder left out of the sandbox (as the shared venv's .pth target was before it was bound): the reason
    names the Python, the import that failed and the sys.path it searched, and does not advise --no-sandbox."""
    reason = _available(layouts["shared"], ROOT, "sandbox._import_folders = lambda: []")
    assert "cannot import ipykernel" in reason and "ModuleNotFoundError" in reason and "sys.path" in reason, reason
    assert str(layouts["shared"]) in reason and "--no-sandbox" not in reason, reason


def test_a_kernel_that_would_import_an_installed_course_is_refused_before_grading_with_both_paths(layouts):
    """Were the course graded not first on the kernel's path and the wheel's copy not hidden (both undone here on
    purpose), the wheel's course would be imported: the probe refuses before grading and names both."""
    patch = ("sandbox._installed_copies = lambda: []\nkernel_environment = sandbox.kernel_environment\n"
             "sandbox.kernel_environment = lambda plan, source=None: "
             "{k: v for k, v in kernel_environment(plan, source).items() if k != 'PYTHONPATH'}")
    reason = _available(layouts["wheel"], layouts["copy"], patch)
    site = next((layouts["root"] / "wheel-venv").glob("lib/python*/site-packages"))
    assert f"finds the course at {site / 'course'}" in reason and str(layouts["copy"] / "course") in reason, reason
    assert "--no-sandbox" not in reason, reason


def test_in_the_wheel_layout_the_kernel_reads_no_installed_judges_or_answers(layouts, tmp_path):
    """A real kernel of the wheel layout grading 01: course comes from the course folder; the wheel's judges, answers
    and grader are not there at all, and the graded answers refuse to import."""
    site = next((layouts["root"] / "wheel-venv").glob("lib/python*/site-packages"))
    secrets = [site / "course" / "judges" / "__init__.py", site / "course" / "self_attention.py",
               site / "autograder" / "sandbox.py", site / "catalogue" / "__init__.py"]
    code = ("import course\nprint('course from', course.__file__)\n"
            "from course.checks import self_attention as check\nprint('probes from', check.__file__)\n"
            f"for path in {[str(p) for p in secrets]!r}:\n"
            "    try:\n        print(path, 'READ', len(open(path).read()))\n"
            "    except OSError as error:\n        print(path, type(error).__name__)\n"
            "try:\n    import course.self_attention\n    print('answers IMPORTED')\n"
            "except ImportError:\n    print('answers refused')\n")
    done = subprocess.run([str(layouts["wheel"]), "-c", KERNEL_SCRIPT, str(tmp_path / "work"), code],
                          cwd=layouts["copy"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"course from {layouts['copy'] / 'course' / '__init__.py'}" in out, out
    assert f"probes from {layouts['copy'] / 'course' / 'checks' / 'self_attention.py'}" in out, out
    assert "READ" not in out and "answers refused" in out and "IMPORTED" not in out, out
    assert all(f"{path} FileNotFoundError" in out for path in secrets), out


def test_a_wheel_run_outside_a_course_folder_is_refused_with_where_it_looked(layouts, tmp_path):
    """The wheel's autograder, run where no course folder is: refused before grading, naming where it looked and what
    to do, with nothing written."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run([str(layouts["wheel"]), "-m", "autograder", "grade", str(layouts["batch"]), "--out",
                           str(tmp_path / "out"), "--assignment", FIRST], cwd=elsewhere, capture_output=True, text=True,
                          timeout=300)
    site = next((layouts["root"] / "wheel-venv").glob("lib/python*/site-packages"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{site} is not a course folder (it has no source/)" in done.stderr, done.stderr[-2000:]
    assert "run it from your course folder" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
