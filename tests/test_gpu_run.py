"""benchmarks/gpu_run.py, the one prepared GPU run, proven here on the CPU: the same script, --device cpu, on the
smallest notebook, must reproduce the committed CPU run (solutions/ was executed by `autograder build` on a CPU),
count the claims that held, and write what the device tool brings back."""

import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_run  # noqa: E402 - benchmarks/ is no package

NOTEBOOK = ROOT / "solutions" / "01_self_attention" / "self_attention.ipynb"


def test_the_dry_run_on_the_cpu_reproduces_the_committed_cpu_outputs(tmp_path):
    """About 10 s (a real kernel runs 01 top to bottom): the only proof that the script itself works before a GPU
    machine, with its 15 minutes, runs it."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "benchmarks/gpu_run.py", "--device", "cpu", "--only", "01_self_attention",
                           "--no-tests", "--no-grade", "--out", str(out), "--budget", "120"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads((out / "results.json").read_text())
    assert row["notebook"] == "01_self_attention" and row["ran"] == "yes", row
    assert row["claims"] >= 5, row  # its asserts and visible tests, each of which held
    assert row["max_difference"] is not None and row["max_difference"] <= 1e-4, row
    assert "01_self_attention | yes |" in (out / "table.txt").read_text() in done.stdout
    assert {p.name for p in out.iterdir()} >= {"table.txt", "results.json", "logs.tar.gz", "logs"}


def test_a_number_that_differs_from_the_cpu_run_is_reported_and_a_failed_cell_claims_nothing():
    committed = json.loads(NOTEBOOK.read_text())
    claims, same, _ = gpu_run.compare(committed, committed)
    assert same == 0 and claims > 0
    changed = copy.deepcopy(committed)
    cell = next(c for c in changed["cells"][1:] if c["cell_type"] == "code" and "assert" in gpu_run._text(c)
                and c["outputs"] and c["outputs"][0].get("output_type") == "stream" and gpu_run._cell_numbers(c)
                and not gpu_run.TIMING.search(gpu_run._text(c)))
    number, stream = gpu_run._cell_numbers(cell)[0], cell["outputs"][0]
    text = gpu_run._joined(stream["text"])
    stream["text"] = text.replace(gpu_run.NUMBER.search(text).group(), str(number + 0.5), 1)
    _, differs, lines = gpu_run.compare(changed, committed)
    assert differs is not None and differs >= 0.5 / max(1, abs(number)) * 0.99, lines
    cell["outputs"].append({"output_type": "error", "ename": "AssertionError", "evalue": "", "traceback": []})
    fewer, _, _ = gpu_run.compare(changed, committed)
    assert fewer < claims
