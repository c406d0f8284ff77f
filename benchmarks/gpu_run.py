"""One prepared GPU run (issue 36): the suite's device tests, the nine solution notebooks executed on the device,
and the sample class graded there, summed up in one table. On a machine with a CUDA GPU, from the repository root:

    python benchmarks/gpu_run.py                       # --device cuda, everything, within --budget (540 s)
    .venv/bin/python benchmarks/gpu_run.py --device cpu --only 01_self_attention --no-grade   # a dry run here

It writes, under --out (default gpu-run/): table.txt (the table it prints), results.json (the same as data),
tests.log, grade.log, and logs/<notebook>.log with each notebook executed as logs/<notebook>.ipynb, all of them
packed as logs.tar.gz too (the device tool brings back at most 8 files). The notebooks run in parallel (--jobs, 9 by
default), each in its own process group, killed when the budget runs out.

What the table's columns mean:
- ran: "yes" when every cell ran without an error within the budget, else what stopped it (the error's last line,
  or "timed out after N s").
- seconds: the wall time of that notebook, a fresh kernel's start included.
- claims asserted: the `assert` statements and visible tests (`check.<name>(...)` calls) in the cells that ran
  without an error. A cell stops at the first claim that fails, so each one counted held on this device. For the
  grading row: how many of sample-complete's nine notebooks (the solutions) scored full marks.
- max difference against the CPU run: solutions/ holds the notebooks as `autograder build` executed them on a CPU.
  For each code cell (paired by cell id), the numbers it printed here and there (stdout and text results), in
  order, when both printed as many; the largest |here - there| / max(1, |there|), with its cell in the notebook's
  log. Left out, as they differ between any two runs: durations printed ("in 40 s"), the first cell (it names the
  device) and cells that time something (their source calls perf_counter, best_time or seconds_to_generate, or
  they print "ms", "faster" or "slower").
  "-" when no cell's numbers paired up. Trained models on a GPU follow other rounding, so their losses differ by
  more than the tolerance of a check: the checks compare on one device, this column says how far runs drift.

The device machine (/work/.library/device/README.md) has Python 3.12 with torch (CUDA) but none of the Jupyter
stack: carry the wheels of benchmarks/gpu_wheels.txt (`--fetch-wheels .whl` here downloads them) and install them
first; the grading step uses the sandbox where bwrap works, else --no-sandbox (the sample class is the course's own
work, so trusted).
"""

import argparse
import ast
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
TIMING = re.compile(r"perf_counter|best_time|seconds_to_generate")  # in a cell's source
TIMED = re.compile(r"\bms\b|\bfaster\b|\bslower\b")  # in what it printed: a timing or a speedup reported
#: a duration printed ("in 40 s of training", "12.5 ms"): left out, it differs between any two runs
DURATION = re.compile(r"-?\d+(?:\.\d+)?\s*(?:ms|µs|s|seconds?)\b")
WHEELS = ROOT / "benchmarks" / "gpu_wheels.txt"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")


def environment(device: str, **more: str) -> dict[str, str]:
    """The steps' environment: the device chosen, pyplot without a display, and the repository importable (on the
    device machine the course is not installed, only carried)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "COURSE_DEVICE": device, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", "PYTHONPATH": path,
            **more}


def notebooks(only: list[str]) -> list[Path]:
    found = sorted(ROOT.glob("solutions/*/*.ipynb"))
    return [p for p in found if not only or p.parent.name in only]


def execute_one(source: Path, executed: Path, cell_timeout: int) -> int:
    """(In a child process) run the notebook top to bottom in a fresh kernel; save it as it got, error or not."""
    import nbformat  # noqa: PLC0415 - the parent needs none of the Jupyter stack
    from nbclient import NotebookClient  # noqa: PLC0415
    from nbclient.exceptions import CellExecutionError  # noqa: PLC0415

    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    code = 0
    with tempfile.TemporaryDirectory() as work:
        try:
            NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", record_timing=False,
                           resources={"metadata": {"path": work}}).execute()
        except CellExecutionError as error:
            print(str(error)[-3000:], flush=True)
            code = 1
        finally:
            nbformat.write(nb, executed)
    return code


def _joined(text: str | list[str]) -> str:
    """A notebook's text as JSON holds it: a string or a list of lines."""
    return "".join(text) if isinstance(text, list) else text


def _printed(cell: dict) -> str:
    """What a code cell printed: its streams and its results' text."""
    return "".join(_joined(o.get("text", "")) if o.get("output_type") == "stream"
                   else _joined(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", []))


def _cell_numbers(cell: dict) -> list[float]:
    return [float(n) for n in NUMBER.findall(DURATION.sub(" ", _printed(cell)))]


def _text(cell: dict) -> str:
    return _joined(cell["source"])


def compare(executed: dict, committed: dict) -> tuple[int, float | None, list[str]]:
    """(claims asserted, max relative difference, lines for the log) of an executed notebook against the committed
    CPU run of the same notebook."""
    cpu = {c.get("id"): c for c in committed["cells"] if c["cell_type"] == "code"}
    claims, worst, lines = 0, None, []
    for index, cell in enumerate(c for c in executed["cells"] if c["cell_type"] == "code"):
        failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        if cell.get("execution_count") is None or failed:
            continue
        try:
            tree = ast.parse(_text(cell))
        except SyntaxError:  # a magic line: no claim counted in it
            tree = ast.Module(body=[], type_ignores=[])
        claims += sum(isinstance(n, ast.Assert) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                      and isinstance(n.func.value, ast.Name) and n.func.value.id == "check") for n in ast.walk(tree))
        here, there = _cell_numbers(cell), _cell_numbers(cpu.get(cell.get("id"), {}))
        timed = TIMING.search(_text(cell)) or TIMED.search(_printed(cell))
        if index == 0 or timed or not here or len(here) != len(there):
            continue
        diff = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(here, there, strict=True))
        lines.append(f"cell {cell.get('id')}: {len(here)} numbers, max relative difference {diff:.3g}")
        worst = diff if worst is None else max(worst, diff)
    return claims, worst, lines


def run_notebooks(paths: list[Path], out: Path, device: str, jobs: int, deadline: float) -> list[dict]:
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = environment(device, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // max(1, jobs))))

    def one(path: Path) -> dict:
        name = path.parent.name
        executed, log = logs / f"{name}.ipynb", logs / f"{name}.log"
        start = time.monotonic()
        budget = max(1, int(deadline - start))
        with log.open("w") as stream:
            child = subprocess.Popen([sys.executable, __file__, "--execute", str(path), str(executed), str(budget)],
                                     cwd=ROOT, env=env, stdout=stream, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            try:
                code = child.wait(timeout=budget)
                ran = "yes" if code == 0 else None
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the kernel too: it is in the child's process group
                child.wait()
                code, ran = -1, f"timed out after {budget} s"
        seconds = time.monotonic() - start
        row = {"notebook": name, "ran": ran, "seconds": round(seconds, 1), "claims": 0, "max_difference": None}
        if executed.exists():
            nb = json.loads(executed.read_text())
            row["claims"], row["max_difference"], lines = compare(nb, json.loads(path.read_text()))
            if ran is None:
                errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
                row["ran"] = (f"{errors[0]['ename']}: {errors[0]['evalue']}"[:120] if errors else f"exit {code}")
            with log.open("a") as stream:
                stream.write("\n" + "\n".join(lines) + "\n")
        elif ran is None:
            row["ran"] = f"exit {code}: see logs/{name}.log"
        return row

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, paths))


def run_step(name: str, command: list[str], out: Path, device: str, seconds: float) -> dict:
    """A step of the run as a subprocess (its own process group), its output in <out>/<name>.log."""
    start = time.monotonic()
    env = environment(device)
    with (out / f"{name}.log").open("w") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            code = child.wait(timeout=max(1.0, seconds))
            ran = "yes" if code == 0 else f"exit {code}: see {name}.log"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            ran = f"timed out after {seconds:.0f} s"
    return {"notebook": f"({name})", "ran": ran, "seconds": round(time.monotonic() - start, 1), "claims": None,
            "max_difference": None}


def grade_command(out: Path) -> list[str]:
    """README's first command on the sample class; --no-sandbox where bwrap cannot run (the samples are the
    course's own work)."""
    sys.path.insert(0, str(ROOT))  # run as a script, the repository is not on the path (nor installed there)
    from autograder import sandbox  # noqa: PLC0415 - imports nbgrader's stack, which only this step needs

    return [sys.executable, "-m", "autograder", "grade", "samples", "--out", str(out / "graded"),
            *(["--no-sandbox"] if sandbox.available() else [])]


def complete_marks(grades: Path) -> str | None:
    """For the grading row: how many of sample-complete's assignments (the solutions) got full marks."""
    if not grades.exists():
        return None
    with grades.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["student"] == "sample-complete"]
    full = sum(r["status"] == "graded" and float(r["score"]) == float(r["max_score"]) for r in rows)
    return f"{full}/{len(rows)} solutions at full marks"


def table(rows: list[dict], device: str) -> str:
    lines = [f"device: {device}", "notebook | ran | seconds | claims asserted | max difference against the CPU run",
             "--- | --- | --- | --- | ---"]
    for r in rows:
        diff = "-" if r["max_difference"] is None else f"{r['max_difference']:.3g}"
        claims = "-" if r["claims"] is None else str(r["claims"])
        lines.append(f"{r['notebook']} | {r['ran']} | {r['seconds']:.1f} | {claims} | {diff}")
    return "\n".join(lines) + "\n"


def fetch_wheels(folder: Path) -> int:
    """Download benchmarks/gpu_wheels.txt's pins for the device machine's Python 3.12 (x86-64) into folder."""
    return subprocess.call([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp",
                            *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(folder), "-r", str(WHEELS)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="COURSE_DEVICE for the notebooks and the grading")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-run", help="folder for the table and the logs")
    parser.add_argument("--only", nargs="*", default=[], help="assignments to execute (default: all nine)")
    parser.add_argument("--jobs", type=int, default=9, help="notebooks executed at once")
    parser.add_argument("--budget", type=float, default=540, help="seconds for the whole run")
    parser.add_argument("--no-tests", action="store_true", help="skip the suite's device tests")
    parser.add_argument("--no-grade", action="store_true", help="skip grading the sample class")
    parser.add_argument("--fetch-wheels", type=Path, help="only download the device machine's wheels here")
    parser.add_argument("--execute", nargs=3, help=argparse.SUPPRESS)  # (child) source executed cell-timeout
    args = parser.parse_args(argv)
    if args.execute:
        return execute_one(Path(args.execute[0]), Path(args.execute[1]), int(args.execute[2]))
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    deadline = time.monotonic() + args.budget
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    rows = []
    if not args.no_tests:  # --noconftest: tests/conftest.py imports nbgrader; -o: pyproject's options name it too
        tests = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/test_device_*.py"))
        pytest = [sys.executable, "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider", "-o", "addopts=",
                  "-o", "filterwarnings=", "-n", "4", *tests]
        rows.append(run_step("tests", pytest, out, args.device, min(120, deadline - time.monotonic())))
    with ThreadPoolExecutor(max_workers=1) as grading:  # the grading beside the notebooks: both fit the budget
        graded = None
        if not args.no_grade:
            try:
                command = grade_command(out)
                graded = grading.submit(run_step, "grade", command, out, args.device, deadline - time.monotonic())
            except ImportError as missing:
                rows.append({"notebook": "(grade)", "ran": f"not run: {missing}", "seconds": 0.0, "claims": None,
                             "max_difference": None})
        rows += run_notebooks(notebooks(args.only), out, args.device, args.jobs, deadline)
        if graded is not None:
            rows.append({**graded.result(), "claims": complete_marks(out / "graded" / "grades.csv")})
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    text = table(rows, args.device)
    (out / "table.txt").write_text(text)
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path.suffix in (".log", ".ipynb", ".txt", ".json") and "graded" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(out)))
    print(text, end="")
    return 0 if all(r["ran"] == "yes" for r in rows) else 1  # the table says which


if __name__ == "__main__":
    sys.exit(main())
