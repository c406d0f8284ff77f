"""The trust boundary, in-process: the kernel's side holds no judge, inputs under grading are secret, and the
judge takes the seed, the device and its limits from the grader, never from the record.

The same attacks graded by real nbgrader in the sandbox are in test_hostile.py; here each is shown to work when
the protection is taken away (fixed seeds, a trusted device claim), so the protection is what stops it.
"""

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
from forgery import MEMORISED
from replay import grade as replay_grade

from autograder import course_dir, secret
from autograder.feedback import HIDDEN_BLOCK
from autograder.judging import check_for, checks_module, judge
from course.checks import compare, seeds, weights
from course.checks.check import Check, checks_of
from course.checks.evidence import FOLDER, write
from course.judges import judged

ASSIGNMENTS = course_dir.assignments()
A = "01_self_attention"
NO_SOFTMAX = "def attention_weights(x):\n    return x @ x.transpose(1, 2)\n"



@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_hidden_test_is_one_call_of_a_public_probe_so_its_text_is_no_secret(assignment):
    """A kernel sees the code it runs (an IPython pre_run_cell hook gets every cell's source), so a student's code
    can copy a hidden test's text into an output, encoded past any scrubbing. That is harmless only while a hidden
    test holds nothing the student lacks: one call of a probe of course.checks, the package every student has,
    on names of their own notebook. What a student cannot know is the grading seed and the judge, both outside."""
    module = checks_module(assignment)
    for notebook in course_dir.notebooks(assignment):
        nb = nbformat.read(course_dir.source_dir() / assignment / notebook, as_version=4)
        blocks = [block for cell in nb.cells if cell.cell_type == "code" for block in HIDDEN_BLOCK.findall(cell.source)]
        assert blocks, f"{notebook} has no hidden tests"
        for block in blocks:
            body = ast.parse(block).body
            assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Call), block
            call = body[0].value
            assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name), block
            assert call.func.value.id == "check" and callable(getattr(module, call.func.attr, None)), \
                f"{block.strip()!r} calls no probe of {module.__name__}"
            assert all(isinstance(arg, ast.Name) for arg in [*call.args, *(k.value for k in call.keywords)]), \
                f"{block.strip()!r} passes more than names: a literal there would be a secret a student could print"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_probe_side_holds_no_judge_oracle_or_mistake(assignment):
    module = checks_module(assignment)
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert not any(name and (name.startswith("course.judges") or name.endswith("oracles")) for name in imported), \
        f"{module.__name__} imports the judges' side: {sorted(n for n in imported if n)}"
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "Mistake" not in names, f"{module.__name__} defines mistakes (they belong in course/judges/)"
    checks = checks_of(module)
    assert judged(module.__name__.rsplit(".", 1)[1]) == set(checks), "every check has exactly one registered judge"


def test_grading_seed_changes_every_input_and_a_regrade_draws_the_same():
    public = compare.randn(2, 3, seed=5)
    assert torch.equal(public, torch.randn(2, 3, generator=torch.Generator().manual_seed(5)))
    with seeds.grading_seed(11):
        first, weight = compare.randn(2, 3, seed=5), weights.value(7, "w", (3, 3))
    with seeds.grading_seed(11):
        assert torch.equal(compare.randn(2, 3, seed=5), first) and torch.equal(weights.value(7, "w", (3, 3)), weight)
    with seeds.grading_seed(12):
        other = compare.randn(2, 3, seed=5)
    assert not torch.equal(first, public) and not torch.equal(first, other)
    assert not torch.equal(weight, weights.value(7, "w", (3, 3)))


def test_kernel_takes_its_seed_from_the_environment_only_while_autograding(monkeypatch):
    monkeypatch.setenv(seeds.ENV, "99")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert seeds.current() is None, "nbgrader validate uses the fixed seeds a student works with"
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert seeds.current() == 99
    with seeds.grading_seed(None):
        assert seeds.current() is None, "the judge's seed is the grader's, not the environment's"


def test_submission_seeds_are_stable_distinct_and_secret(tmp_path, monkeypatch):
    monkeypatch.delenv(secret.ENV, raising=False)
    made = secret.course_secret(tmp_path)
    assert secret.course_secret(tmp_path) == made and len(bytes.fromhex(made)) == 32
    assert oct((tmp_path / secret.FILE).stat().st_mode & 0o777) == "0o600"
    seed = secret.submission_seed(made, "alice", A, "cells")
    assert seed == secret.submission_seed(made, "alice", A, "cells"), "a regrade must draw the same inputs"
    others = {secret.submission_seed(made, "bob", A, "cells"), secret.submission_seed(made, "alice", A, "cells 2"),
              secret.submission_seed(os.urandom(32).hex(), "alice", A, "cells")}
    assert seed not in others and len(others) == 3, "another student, submission or secret draws other inputs"
    monkeypatch.setenv(secret.ENV, "ab" * 32)
    assert secret.course_secret(tmp_path) == "ab" * 32


def test_memorised_public_outputs_earn_what_the_wrong_code_earns():
    twin = replay_grade(A, {"attention_weights": NO_SOFTMAX})
    fixed = replay_grade(A, {"attention_weights": MEMORISED})
    assert fixed.score == fixed.max_score > twin.score, "the attack does not even work on the public seeds"
    for seed in (1, 2):
        graded = replay_grade(A, {"attention_weights": MEMORISED}, seed=seed)
        assert graded.score <= replay_grade(A, {"attention_weights": NO_SOFTMAX}, seed=seed).score, graded.failures()


def test_a_claimed_gpu_does_not_loosen_the_tolerance(tmp_path, monkeypatch):
    check = check_for(A, "test_attention_weights_oracle")
    off = "def attention_weights(x):\n    return torch.softmax(x @ x.transpose(1, 2), dim=-1) * 1.001\n"
    namespace: dict = {"torch": torch}
    exec(off, namespace)
    evidence = check.record(namespace["attention_weights"])
    evidence.device = "cuda"  # what a later cell writes into the record, with every output's device
    for fact in evidence.facts.values():
        if isinstance(fact, dict) and "device" in fact:
            fact["device"] = "cuda"
    write(evidence, tmp_path / FOLDER / check.name)
    assert judge(check, tmp_path / FOLDER).passed, "the claim would have loosened the tolerance"
    assert not judge(check, tmp_path / FOLDER, device="cpu").passed


def test_claimed_parameter_shapes_allocate_nothing_large():
    huge = [[f"p{i}", [4096, 4096, 4096, 4096]] for i in range(50)] + [[f"q{i}", [4096, 4096]] for i in range(300)]
    started = time.perf_counter()
    made = weights.recreate(huge, seed=1)
    assert time.perf_counter() - started < 5
    assert sum(v.numel() for v in made.values()) <= weights.MAX_TOTAL
    assert weights.recreate([["w", [3, 4]]], seed=1)["w"].shape == (3, 4)


def test_a_judge_past_its_time_limit_fails_only_its_own_test(tmp_path):
    check = Check("slow", lambda student, rec: rec.fact("x", 1))
    check.judge = lambda ev: time.sleep(30)
    write(check.record(None), tmp_path / FOLDER / "slow")
    started = time.perf_counter()
    verdict = judge(check, tmp_path / FOLDER, seconds=0.5)
    assert time.perf_counter() - started < 5
    assert not verdict.passed and "more than 0.5 s" in verdict.message


def test_every_probe_runs_with_the_judges_unimportable(tmp_path):
    """As in the sandbox: with course.judges refusing to import, every checks module imports and the probes of
    07, 08 and 09 (checks with prerequisites, models, generation) record the solution's evidence; 09's with its
    reference answers (course.modern_decoder) refusing to import too, as while 09 is graded."""
    script = (
        "import importlib, sys\n"
        "sys.modules['course.judges'] = None  # import course.judges... raises ImportError\n"
        "sys.modules['course.modern_decoder'] = None  # hidden while 09 is graded\n"
        "sys.path.insert(0, 'tests')\n"
        "from replay import records\nfrom autograder.course_dir import module_name\n"
        f"for a in {ASSIGNMENTS!r}:\n"
        "    importlib.import_module('course.checks.' + module_name(a))\n"
        "for a, nb in (('07_seq2seq', 'seq2seq.ipynb'), ('08_language_model', 'language_model.ipynb'),\n"
        "              ('09_modern_decoder', 'modern_decoder.ipynb')):\n"
        "    print(a, len(records(a, nb)))\n"
        "print('judges imported:', any(m.startswith('course.judges.') for m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=course_dir.ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "judges imported: False" in done.stdout
    counts = dict(line.split() for line in done.stdout.splitlines() if line.startswith("0"))
    assert counts == {"07_seq2seq": "26", "08_language_model": "19", "09_modern_decoder": "17"}, done.stdout
