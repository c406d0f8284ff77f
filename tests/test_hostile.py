"""A class with hostile and broken submissions graded by real nbgrader, in the sandbox, beside honest ones.

The attacks run inside the student's kernel, where the student controls everything: they rewrite the checks,
PyTorch, the tests' `check` name, the evidence writer, write evidence files directly (forged, oversized,
malicious), and register kernel hooks. Each carries the same wrong answer as its honest twin
('twin-no-softmax'), and none may score more than the twin: the verdict is the judge's, reached outside the
kernel from plain data. Honest submissions and bad input keep exactly the grades and statuses they earn.
"""

import copy
import csv
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import hostile_allowlist
import hostile_containment
import hostile_content
import nbformat
import pytest
from conftest import (
    complete_submission,
    feedback_text,
    release_notebook,
    source_answers,
    use_sandbox,
    variant_submission,
    write_submission,
)
from forgery import CLAIM_CUDA, IMPORT_JUDGES, MEMORISED
from replay import grade as replay_grade

from autograder.grade import grade
from autograder.notebooks import grade_id
from autograder.results import csv_text
from catalogue import mistakes
from course.checks import multi_head as multi_head_checks
from course.checks import self_attention as self_attention_checks
from course.checks.check import checks_of

A, NB = "01_self_attention", "self_attention.ipynb"
NO_SOFTMAX = "def attention_weights(x):\n    return x @ x.transpose(1, 2)\n"
UNFINISHED = "def basic_self_attention(x):\n    raise NotImplementedError()\n"
CHECKS = tuple(checks_of(self_attention_checks))  # every check of 01, each an attack's target
#: what the honest twins score, from the in-process replay (the catalogue tests show it equals real grading)
TWIN_SCORE = replay_grade(A, {"attention_weights": NO_SOFTMAX}).score
FIRST_ONLY_POINTS = replay_grade(A, {"basic_self_attention": UNFINISHED}).score  # the tests of attention_weights
A04 = "04_multi_head"
MISTAKE_04 = mistakes(A04)[0]  # its honest twin 'twin-04' scores what this mistake alone earns
PWNED = "/tmp/course-hostile-pickle-ran"  # the grader's /tmp: a kernel's /tmp is private

# Writes a record as a probe would, with whatever tensors and facts the attacker chooses.
FORGE = '''
import json as _json, pathlib as _pathlib
from safetensors.torch import save as _save
def forge(name, tensors, facts, device="cpu"):
    folder = _pathlib.Path(".evidence") / name
    folder.mkdir(parents=True, exist_ok=True)
    record = {"format": "course-evidence/1", "check": name, "device": device, "facts": facts}
    (folder / "record.json").write_text(_json.dumps(record))
    (folder / "tensors.safetensors").write_bytes(_save(tensors))
def fact(t, grad=False):
    return {"kind": "tensor", "type": "Tensor", "dtype": "float32", "shape": list(t.shape), "device": "cpu",
            "requires_grad": grad}
def plausible():
    """Records that look right to a careless judge: uniform weights (rows sum to 1), zeros, right shapes."""
    u = lambda b, t: torch.full((b, t, t), 1.0 / t)
    shapes = ((3, 5, 4), (2, 7, 3), (1, 1, 6), (4, 6, 1))
    out = {"attention_weights_by_hand": {"w": u(1, 3)}, "attention_weights_rows": {"w": u(2, 5)},
           "attention_weights_oracle": {f"w{i}": u(b, t) for i, (b, t, k) in enumerate(shapes)},
           "basic_self_attention_by_hand": {"y": torch.zeros(1, 3, 2)},
           "basic_self_attention_oracle": {**{f"y{i}": torch.zeros(b, t, k) for i, (b, t, k) in enumerate(shapes)},
                                           "y_grad": torch.zeros(2, 5, 3), "grad.x": torch.ones(2, 5, 3)},
           "permutation_equivariance": {"y": torch.zeros(2, 6, 4), "y_perm": torch.zeros(2, 6, 4)}}
    for name, tensors in out.items():
        forge(name, tensors, {k: fact(v, grad=k == "y_grad") for k, v in tensors.items()})
'''

# appended to 04's answer cell that holds its wrong answer: every in-kernel route at once
ATTACK_04 = FORGE + f"""
import course.checks.check as _cc
_cc.recording = lambda: False
for _n, _c in _cc.checks_of(check).items():
    _c.judge = lambda ev: None
    setattr(check, _n, lambda *a, **k: None)
def _zeros(r):
    for _n in {tuple(checks_of(multi_head_checks))!r}:
        forge(_n, {{"y": torch.zeros(2, 5, 16)}}, {{"y": fact(torch.zeros(2, 5, 16))}})
get_ipython().events.register("post_run_cell", _zeros)
"""

# appended to 04's wrong answer: every record claims parameters of 4096^4 and 4096^2 values, for the judge to allocate
HUGE_CLAIMS = """
import json as _json, pathlib as _pathlib
def _claim(_r):
    for _p in _pathlib.Path('.evidence').glob('*/record.json'):
        _rec = _json.loads(_p.read_text())
        for _k in [k for k in _rec['facts'] if k.endswith('.params')]:
            _rec['facts'][_k] = ([[f'p{i}', [4096] * 4] for i in range(50)]
                                 + [[f'q{i}', [4096, 4096]] for i in range(300)])
        _p.write_text(_json.dumps(_rec))
get_ipython().events.register('post_run_cell', _claim)
"""

# attack -> code appended to the attention_weights answer cell (which holds the wrong answer)
ATTACKS = {
    "attack-rewrite-checks": "for _n in " + repr(CHECKS) + ":\n    setattr(check, _n, lambda *a, **k: None)",
    "attack-rewrite-compare": "import sys\n_c = sys.modules['course.checks.compare']\n"
                              "_c.expect_close = _c.fail = _c.matches_any = lambda *a, **k: True",
    "attack-rewrite-torch": "import torch.nn.functional as _F\ntorch.allclose = lambda *a, **k: True\n"
                            "_F.scaled_dot_product_attention = lambda q, k, v, **kw: attention_weights(q) @ v\n"
                            "_F.softmax = lambda x, dim=-1, **kw: x\ntorch.Tensor.detach = lambda self: self",
    "attack-rebind-check": "import types\ncheck = types.SimpleNamespace(**{_n: (lambda *a, **k: None) for _n in "
                           + repr(CHECKS) + "})",
    "attack-in-kernel-verdict": "import course.checks.check as _cc\n_cc.recording = lambda: False\n"
                                "for _c in _cc.checks_of(check).values():\n    _c.judge = lambda ev: None",
    "attack-rewrite-writer": FORGE + "import course.checks.evidence as _ev, course.checks.check as _cc\n"
                             "def _writer(evidence, folder):\n    plausible()\n_ev.write = _cc.write = _writer",
    "attack-forged-records-hook": FORGE + "get_ipython().events.register('post_run_cell', lambda r: plausible())",
    "attack-forged-claims-cuda": FORGE + "def _again(r):\n    for _n in " + repr(CHECKS) + ":\n"
                                 "        _p = _pathlib.Path('.evidence') / _n / 'record.json'\n"
                                 "        if _p.exists():\n            _r = _json.loads(_p.read_text())\n"
                                 "            _r['device'] = 'cuda'\n            _p.write_text(_json.dumps(_r))\n"
                                 "get_ipython().events.register('post_run_cell', _again)",
    "attack-bad-records": (
        "import pathlib, pickle, os\n"
        "class _Boom:\n    def __reduce__(self):\n        return (os.system, ('touch " + PWNED + "',))\n"
        "def _bad(r):\n"
        "    root = pathlib.Path('.evidence')\n"
        "    files = {'attention_weights_by_hand': {'record.json': b'{\"format\": ', 'tensors.safetensors': b''},\n"
        "             'attention_weights_rows': {'tensors.safetensors': pickle.dumps(_Boom())},\n"
        "             'attention_weights_oracle': {'tensors.safetensors': b'\\0' * (40 << 20)},\n"
        "             'basic_self_attention_by_hand': {'extra.py': b'import os'}}\n"
        "    for name, content in files.items():\n"
        "        (root / name).mkdir(parents=True, exist_ok=True)\n"
        "        for f, data in content.items():\n"
        "            (root / name / f).write_bytes(data)\n"
        "    for name in ('basic_self_attention_oracle', 'permutation_equivariance'):\n"
        "        target = root / name / 'tensors.safetensors'\n"
        "        if target.is_symlink() or target.exists():\n            target.unlink()\n"
        "        if (root / name).exists():\n            target.symlink_to('/etc/passwd')\n"
        "get_ipython().events.register('post_run_cell', _bad)"),
    "attack-leak-hidden-tests": "get_ipython().events.register('pre_run_cell',"
                                " lambda info: print('LEAK', info.raw_cell))\n"
                                "print('HISTORY', get_ipython().user_ns.get('In'))",
    "attack-ast-transformer": "import ast\nclass _Noop(ast.NodeTransformer):\n"
                              "    def visit_Call(self, node):\n        return ast.Constant(None)\n"
                              "get_ipython().ast_transformers.append(_Noop())",
    # right on every public input (a table of outputs and gradients made offline), wrong elsewhere
    "attack-memorised-outputs": MEMORISED,
    # the oracle itself, through every import route there is (the sandbox hides course/judges)
    "attack-import-judges": IMPORT_JUDGES,
}
#: an answer off by 0.1 %: wrong on the CPU, within a GPU's tolerance; its attack claims every record ran on a GPU
SLIGHTLY_OFF = "def attention_weights(x):\n    return torch.softmax(x @ x.transpose(1, 2), dim=-1) * 1.001\n"


def _with(answers: dict[str, str], extra: str = "", cell: str = "attention_weights") -> nbformat.NotebookNode:
    """A submission of 01 with these answers, extra code appended to one answer cell."""
    merged = {**source_answers(A, NB), **answers}
    merged[cell] = merged[cell] + "\n" + extra
    nb = release_notebook(A, NB)
    for c in nb.cells:
        if grade_id(c) in merged:
            c.source = merged[grade_id(c)]
    return nb


def _tests(nb: nbformat.NotebookNode) -> list:
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def _build(batch: Path) -> dict[str, tuple]:
    """student -> (expected score, or 'twin' for at most the twin's, expected status, words in the message)."""
    expect: dict[str, tuple] = {}
    complete = complete_submission(A, NB)
    write_submission(batch, "honest-complete", A, NB, complete)
    expect["honest-complete"] = (8, "graded", "")
    write_submission(batch, "honest-untouched", A, NB, release_notebook(A, NB))
    expect["honest-untouched"] = (0, "graded", "")
    first_only = _with({"basic_self_attention": UNFINISHED})
    write_submission(batch, "honest-first-only", A, NB, first_only)
    expect["honest-first-only"] = (FIRST_ONLY_POINTS, "graded", "")
    write_submission(batch, "twin-no-softmax", A, NB, _with({"attention_weights": NO_SOFTMAX}))
    expect["twin-no-softmax"] = (TWIN_SCORE, "graded", "")

    for name, code in ATTACKS.items():
        write_submission(batch, name, A, NB, _with({"attention_weights": NO_SOFTMAX}, code))
        expect[name] = ("twin", "twin-no-softmax", "")
    write_submission(batch, "twin-slightly-off", A, NB, _with({"attention_weights": SLIGHTLY_OFF}))
    expect["twin-slightly-off"] = (replay_grade(A, {"attention_weights": SLIGHTLY_OFF}).score, "graded", "")
    write_submission(batch, "attack-claims-cuda", A, NB, _with({"attention_weights": SLIGHTLY_OFF}, CLAIM_CUDA))
    expect["attack-claims-cuda"] = ("twin", "twin-slightly-off", "")
    # 04 too: its most catalogued answer with the checks, the judge switch and the records all rewritten
    notebook, twin = variant_submission(MISTAKE_04)
    write_submission(batch, "twin-04", A04, notebook, twin)
    expect["twin-04"] = (replay_grade(A04, {MISTAKE_04.cell: MISTAKE_04.code}).score, "graded", "")
    attacked = copy.deepcopy(twin)
    cell = next(c for c in attacked.cells if grade_id(c) == MISTAKE_04.cell)
    cell.source += "\n" + ATTACK_04
    write_submission(batch, "attack-04-everything", A04, notebook, attacked)
    expect["attack-04-everything"] = ("twin", "twin-04", "")
    claims = copy.deepcopy(twin)
    cell = next(c for c in claims.cells if grade_id(c) == MISTAKE_04.cell)
    cell.source += "\n" + HUGE_CLAIMS
    write_submission(batch, "attack-04-huge-claims", A04, notebook, claims)
    expect["attack-04-huge-claims"] = ("twin", "twin-04", "")
    copied = _with({"attention_weights": "from course.self_attention import attention_weights\n"})
    write_submission(batch, "copy-reference", A, NB, copied)
    expect["copy-reference"] = (0, "flagged", "imports course.self_attention")

    deleted = _with({"attention_weights": NO_SOFTMAX})
    tests = _tests(deleted)
    deleted.cells = [c for c in deleted.cells if c not in tests]
    write_submission(batch, "tamper-deleted-tests", A, NB, deleted)
    expect["tamper-deleted-tests"] = (TWIN_SCORE, "graded", f"put back {len(tests)} deleted cell(s)")
    emptied = _with({"attention_weights": NO_SOFTMAX})
    for c in _tests(emptied):
        c.source = "pass"
    write_submission(batch, "tamper-emptied-tests", A, NB, emptied)
    expect["tamper-emptied-tests"] = (TWIN_SCORE, "graded", "")
    points = _with({"attention_weights": NO_SOFTMAX})
    for c in _tests(points):
        c.metadata["nbgrader"]["points"] = 100
    _tests(points)[0].metadata["nbgrader"]["grade_id"] = "my_own_test"
    _tests(points)[0].source = "pass"
    write_submission(batch, "tamper-metadata", A, NB, points)
    expect["tamper-metadata"] = (TWIN_SCORE, "graded", "")
    impostor = _with({"attention_weights": "class Anything(torch.Tensor):\n    def __eq__(self, other):\n"
                                           "        return True\n\ndef attention_weights(x):\n"
                                           "    return torch.zeros(x.shape[0], x.shape[1], x.shape[1])"
                                           ".as_subclass(Anything)\n"})
    write_submission(batch, "tamper-impostor", A, NB, impostor)
    expect["tamper-impostor"] = (0, "graded", "")
    shadow = complete_submission(A, NB)
    write_submission(batch, "tamper-shadow-package", A, NB, shadow)
    (batch / "tamper-shadow-package" / A / "course").mkdir()
    (batch / "tamper-shadow-package" / A / "course" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    expect["tamper-shadow-package"] = (8, "graded", "ignored 1 extra file")

    # limits: a cell that never ends is interrupted; the rest of the notebook is graded
    looping = _with({}, "while True:\n    pass", cell="basic_self_attention")
    write_submission(batch, "limit-infinite-loop", A, NB, looping)
    expect["limit-infinite-loop"] = (8, "graded", "")
    segfault = "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(10**6,), strides=(10**7,)).sum()"
    crash = _with({"basic_self_attention": f"import numpy as np\n{segfault}\n"
                                           "def basic_self_attention(x):\n    return x\n"})
    write_submission(batch, "crash-in-answer", A, NB, crash)
    expect["crash-in-answer"] = (FIRST_ONLY_POINTS, "crashed", "the kernel died in 1 cell(s)")
    crash = _with({"basic_self_attention": "import numpy as np\ndef basic_self_attention(x):\n"
                                           f"    {segfault}\n    return x\n"})
    write_submission(batch, "crash-in-tests", A, NB, crash)
    expect["crash-in-tests"] = (FIRST_ONLY_POINTS, "crashed", "test_basic_self_attention_by_hand")
    if use_sandbox():  # without the sandbox these would really exhaust the grader's machine
        hog = _with({}, "hog = torch.ones(10 * 2**30)  # 40 GB", cell="basic_self_attention")
        write_submission(batch, "limit-memory", A, NB, hog)
        expect["limit-memory"] = (8, "graded", "")
        flood = _with({}, "print('x' * 100_000_000)", cell="basic_self_attention")
        write_submission(batch, "limit-output", A, NB, flood)
        expect["limit-output"] = (8, "graded", "")

    # bad input
    for student, data, words in (("broken-json", nbformat.writes(complete)[:500].encode(), "not valid JSON"),
                                 ("broken-empty", b"", "is empty"),
                                 ("broken-bytes", b"\xff\xfe\x00garbage\x81", "not UTF-8"),
                                 ("broken-not-a-notebook", json.dumps({"hello": "world"}).encode(),
                                  "not a Jupyter notebook")):
        (batch / student / A).mkdir(parents=True)
        (batch / student / A / NB).write_bytes(data)
        expect[student] = (0, "invalid-notebook", words)
    (batch / "renamed-copy" / A).mkdir(parents=True)
    nbformat.write(complete, batch / "renamed-copy" / A / f"Copy of {NB}")
    expect["renamed-copy"] = (8, "graded", "graded 'Copy of self_attention.ipynb'")
    (batch / "wrong-notebook" / A).mkdir(parents=True)
    nbformat.write(complete, batch / "wrong-notebook" / A / "homework.ipynb")
    nbformat.write(complete, batch / "wrong-notebook" / A / "other.ipynb")
    expect["wrong-notebook"] = (0, "missing-notebook", "expected self_attention.ipynb")
    (batch / "old-format" / A).mkdir(parents=True)
    with warnings.catch_warnings():  # format 3 has no cell ids; nbformat warns while downgrading
        warnings.simplefilter("ignore")
        old = nbformat.convert(copy.deepcopy(complete), 3)
        (batch / "old-format" / A / NB).write_text(nbformat.writes(old, version=3))
    expect["old-format"] = (8, "graded", "converted from notebook format 3")
    write_submission(batch, "Twice", A, NB, release_notebook(A, NB))
    write_submission(batch, "twice", A, NB, complete)
    os.utime(batch / "Twice" / A / NB, (1, 1))  # the untouched one is older
    expect["twice"] = (8, "graded", "also submitted as ['Twice']")
    hostile_content.build(batch, expect)
    hostile_containment.build(batch, expect)
    hostile_allowlist.build(batch, expect)
    return expect


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    batch = tmp_path_factory.mktemp("hostile")
    expect = _build(batch)
    out = tmp_path_factory.mktemp("hostile-graded")
    with hostile_allowlist.other_checkout():  # another checkout of the course on the grading host
        graded = grade(batch, out, [A, A04], workers=2, cell_seconds=15, sandbox=use_sandbox(), progress=False,
                       notebook_seconds=hostile_containment.NOTEBOOK_SECONDS)
    rows = {g.student: g for g in graded if g.status != "missing"}  # each student hands in one assignment
    return expect, rows, out, batch


def test_every_student_gets_exactly_one_row(hostile):
    expect, rows, _, _ = hostile
    assert set(rows) == set(expect)


def _students() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        return sorted(_build(Path(tmp)))


@pytest.mark.parametrize("student", _students())
def test_submission_scores_what_its_code_computes(hostile, student):
    expect, rows, _, _ = hostile
    score, status, words = expect[student]
    row = rows[student]
    if score == "twin":  # an attack: never more than the same wrong answer without it
        twin = rows[status]
        assert twin.status == "graded" and twin.score == expect[status][0] < twin.max_score
        assert row.score <= twin.score, f"{student} gained: {row.score} > {twin.score} ({row.status}: {row.message})"
        assert row.status in ("graded", "flagged", "crashed"), f"{student}: {row.status} ({row.message})"
        return
    assert row.score == score, f"{student}: {row.score} instead of {score} ({row.status}: {row.message})"
    assert row.status == status, f"{student}: {row.status} ({row.message})"
    assert words in row.message, f"{student}: message {row.message!r} does not say {words!r}"


def test_no_evidence_file_was_ever_executed(hostile):
    assert not os.path.exists(PWNED), "a pickle in a record was unpickled by the grader"


def test_bad_records_score_zero_with_plain_messages(hostile):
    _, rows, out, _ = hostile
    text = feedback_text(out, "attack-bad-records", A)
    for words in ("record.json is not valid JSON", "is not a safetensors file", "more than the",
                  "holds files no probe writes", "tensors.safetensors is missing"):
        assert words in text, f"the feedback does not say {words!r}"
    assert rows["attack-bad-records"].score == 0


def test_flagged_code_is_named_but_left_in_place(hostile):
    _, rows, _, _ = hostile
    assert rows["attack-rewrite-torch"].status == "flagged"
    assert "assigns to torch.allclose" in rows["attack-rewrite-torch"].message
    assert "left in place" in rows["attack-rewrite-torch"].message


def test_feedback_shows_the_judges_diagnoses_and_no_hidden_test_code(hostile):
    _, _, out, _ = hostile
    text = feedback_text(out, "twin-no-softmax", A)
    assert "the softmax is missing" in text
    for student in ("twin-no-softmax", "attack-leak-hidden-tests"):
        text = feedback_text(out, student, A)
        assert "check.attention_weights_oracle" not in text and "BEGIN HIDDEN TESTS" not in text, student
    assert "LEAK" in feedback_text(out, "attack-leak-hidden-tests", A), "the leak attempt did not run at all"


def test_regrading_reuses_unchanged_grades_regrades_changed_ones_and_loses_no_result(hostile, tmp_path):
    _, rows, out, batch = hostile
    again = tmp_path / "out"
    shutil.copytree(out, again)
    small = tmp_path / "batch"
    for student in ("honest-complete", "twin-no-softmax", "broken-json"):
        shutil.copytree(batch / student, small / student)
    nbformat.write(complete_submission(A, NB), small / "twin-no-softmax" / A / NB)  # the student fixed it
    regraded = {(g.student, g.assignment): g
                for g in grade(small, again, [A], cell_seconds=15, sandbox=use_sandbox(), progress=False)}
    assert regraded["honest-complete", A].score == 8
    assert regraded["twin-no-softmax", A].score == 8, "a changed submission kept its stale score"
    # everyone else's results stay, rows and feedback: this run graded three students of one assignment
    assert {s for s, _ in regraded} >= set(rows)
    assert regraded["attack-rewrite-torch", A].score == rows["attack-rewrite-torch"].score
    assert (again / "feedback" / "attack-rewrite-torch" / A).is_dir(), "a result of a student not in the batch was lost"
    assert (again / "feedback" / "twin-04" / A04).is_dir(), "a result of an assignment not in the batch was lost"
    with (again / "grades.csv").open() as f:
        assert {r["student"] for r in csv.DictReader(f)} >= {csv_text(student) for student in rows}
    # removing them is an explicit act
    pruned = grade(small, again, [A], cell_seconds=15, sandbox=use_sandbox(), progress=False, prune=True)
    assert {g.student for g in pruned} == {"honest-complete", "twin-no-softmax", "broken-json"}
    assert not (again / "feedback" / "attack-rewrite-torch").exists(), "--prune kept a departed student's feedback"
    state = json.loads((again / ".grading-state.json").read_text())
    assert set(state) == {f"{s}/{A}" for s in ("honest-complete", "twin-no-softmax", "broken-json")}


def test_output_flood_is_cut(hostile):
    _, rows, out, _ = hostile
    if "limit-output" not in rows:
        pytest.skip("output limits need the sandbox")
    pages = list((out / "feedback" / "limit-output" / A).glob("*.html"))
    assert pages and sum(p.stat().st_size for p in pages) < 30_000_000


def test_class_report_names_the_commonest_mistakes_by_id(hostile):
    _, _, out, _ = hostile
    report = (out / "report.md").read_text()
    assert "## 01_self_attention" in report
    assert "the softmax is missing" in report
    assert "| no-softmax |" in report.replace("| test_attention_weights_by_hand ", "")
    assert "| test_attention_weights_by_hand |" in report


def test_student_scripts_and_formulas_stay_inert(hostile):
    _, _, out, _ = hostile
    hostile_content.assert_inert(out)
