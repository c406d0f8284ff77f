"""A class with broken and hostile submissions graded in one batch beside honest ones.

Every honest grade must come out exactly right; every hostile submission must score what its honest code
earns (its 'twin': the same answers without the tampering), with a status that says what happened.
"""

import copy
import json
import os
import warnings
from pathlib import Path

import nbformat
import pytest

from autograder.grade import grade
from autograder.notebooks import grade_id

from conftest import complete_submission, feedback_text, release_notebook, source_answers, use_sandbox, write_submission

A, NB = "01_self_attention", "self_attention.ipynb"
NO_SOFTMAX = "def attention_weights(x):\n    return x @ x.transpose(1, 2)\n"
FIRST_ONLY_POINTS = 4  # the three test cells of attention_weights


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
    """student -> (expected score or twin name, expected status, words the message must contain)."""
    expect: dict[str, tuple] = {}
    complete = complete_submission(A, NB)
    write_submission(batch, "honest-complete", A, NB, complete); expect["honest-complete"] = (8, "graded", "")
    write_submission(batch, "honest-untouched", A, NB, release_notebook(A, NB)); expect["honest-untouched"] = (0, "graded", "")
    first_only = _with({"basic_self_attention": "def basic_self_attention(x):\n    raise NotImplementedError()\n"})
    write_submission(batch, "honest-first-only", A, NB, first_only)
    expect["honest-first-only"] = (FIRST_ONLY_POINTS, "graded", "")
    write_submission(batch, "twin-no-softmax", A, NB, _with({"attention_weights": NO_SOFTMAX}))
    expect["twin-no-softmax"] = (None, "graded", "")

    tampering = {
        "tamper-allclose": "torch.allclose = lambda *a, **k: True\ntorch.testing.assert_close = lambda *a, **k: None",
        "tamper-check-module": "check.attention_weights_by_hand = lambda f: None\ncheck.attention_weights_match_oracle = print",
        "tamper-sys-modules": "import sys\nsys.modules['course.checks.compare'].expect_close = lambda *a, **k: None",
        "tamper-dunder": "vars(check).update(attention_weights_rows_sum_to_one=print)\ncheck.__dict__['fail'] = print",
        "tamper-in-body": "def attention_weights(x):\n    import course.checks.compare as c\n    c.expect_close = lambda *a, **k: None\n"
                          "    c.fail = lambda *a, **k: None\n    return x @ x.transpose(1, 2)",
        "tamper-assert": "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})",
        "tamper-ipython": "get_ipython().run_line_magic('config', 'InteractiveShell.ast_node_interactivity = \"none\"')",
        "tamper-magic": "%env COURSE_DEVICE=cpu\n!echo hi",
        "tamper-shapes": "check.SHAPES = ()",
    }
    for name, code in tampering.items():
        write_submission(batch, name, A, NB, _with({"attention_weights": NO_SOFTMAX}, code))
        expect[name] = ("twin-no-softmax", "tampered", "removed")

    copied = _with({"attention_weights": "from course.attention import attention_weights\n"})
    write_submission(batch, "copy-reference", A, NB, copied); expect["copy-reference"] = (0, "tampered", "imports course.attention")
    via_check = _with({"attention_weights": "import course\nattention_weights = course.attention.attention_weights\n"})
    write_submission(batch, "copy-reference-attribute", A, NB, via_check)
    expect["copy-reference-attribute"] = (0, "tampered", "course's reference course.attention")

    deleted = _with({"attention_weights": NO_SOFTMAX})
    deleted.cells = [c for c in deleted.cells if c not in _tests(deleted)]
    write_submission(batch, "tamper-deleted-tests", A, NB, deleted); expect["tamper-deleted-tests"] = ("twin-no-softmax", "graded", "")
    emptied = _with({"attention_weights": NO_SOFTMAX})
    for c in _tests(emptied):
        c.source = "pass"
    write_submission(batch, "tamper-emptied-tests", A, NB, emptied); expect["tamper-emptied-tests"] = ("twin-no-softmax", "graded", "")
    points = _with({"attention_weights": NO_SOFTMAX})
    for c in _tests(points):
        c.metadata["nbgrader"]["points"] = 100
    _tests(points)[0].metadata["nbgrader"]["grade_id"] = "my_own_test"
    _tests(points)[0].source = "pass"
    write_submission(batch, "tamper-metadata", A, NB, points); expect["tamper-metadata"] = ("twin-no-softmax", "graded", "")
    impostor = _with({"attention_weights": "class Anything(torch.Tensor):\n    def __eq__(self, other):\n        return True\n\n"
                                           "def attention_weights(x):\n    return torch.zeros(x.shape[0], x.shape[1], x.shape[1]).as_subclass(Anything)\n"})
    write_submission(batch, "tamper-impostor", A, NB, impostor); expect["tamper-impostor"] = (0, "graded", "")
    shadow = complete_submission(A, NB)
    write_submission(batch, "tamper-shadow-package", A, NB, shadow)
    (batch / "tamper-shadow-package" / A / "course").mkdir()
    (batch / "tamper-shadow-package" / A / "course" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    expect["tamper-shadow-package"] = (8, "graded", "ignored 1 extra file")

    # limits: a cell that never ends is interrupted; the rest of the notebook is graded
    looping = _with({}, "while True:\n    pass", cell="basic_self_attention")
    write_submission(batch, "limit-infinite-loop", A, NB, looping); expect["limit-infinite-loop"] = (8, "graded", "")
    sleeping = _with({}, "import time\ntime.sleep(10_000)", cell="basic_self_attention")
    write_submission(batch, "limit-sleep", A, NB, sleeping); expect["limit-sleep"] = (8, "graded", "")

    segfault = "np.lib.stride_tricks.as_strided(np.zeros(1), shape=(10**6,), strides=(10**7,)).sum()"
    crash = _with({"basic_self_attention": f"import numpy as np\n{segfault}\ndef basic_self_attention(x):\n    return x\n"})
    write_submission(batch, "crash-in-answer", A, NB, crash)
    expect["crash-in-answer"] = (FIRST_ONLY_POINTS, "crashed", "the kernel died in 1 cell(s)")
    crash = _with({"basic_self_attention": f"import numpy as np\ndef basic_self_attention(x):\n    {segfault}\n    return x\n"})
    write_submission(batch, "crash-in-tests", A, NB, crash)
    expect["crash-in-tests"] = (FIRST_ONLY_POINTS, "crashed", "test_basic_self_attention_by_hand")

    if use_sandbox():  # without the sandbox these would really exhaust the grader's machine
        hog = _with({}, "hog = torch.ones(10 * 2**30)  # 40 GB", cell="basic_self_attention")
        write_submission(batch, "limit-memory", A, NB, hog); expect["limit-memory"] = (8, "graded", "")
        flood = _with({}, "print('x' * 100_000_000)", cell="basic_self_attention")
        write_submission(batch, "limit-output", A, NB, flood); expect["limit-output"] = (8, "graded", "")

    # bad input
    (batch / "broken-json" / A).mkdir(parents=True)
    (batch / "broken-json" / A / NB).write_text(nbformat.writes(complete)[:500])
    expect["broken-json"] = (0, "invalid-notebook", "not valid JSON")
    (batch / "broken-empty" / A).mkdir(parents=True)
    (batch / "broken-empty" / A / NB).write_bytes(b"")
    expect["broken-empty"] = (0, "invalid-notebook", "is empty")
    (batch / "broken-bytes" / A).mkdir(parents=True)
    (batch / "broken-bytes" / A / NB).write_bytes(b"\xff\xfe\x00garbage\x81")
    expect["broken-bytes"] = (0, "invalid-notebook", "not UTF-8")
    (batch / "broken-not-a-notebook" / A).mkdir(parents=True)
    (batch / "broken-not-a-notebook" / A / NB).write_text(json.dumps({"hello": "world"}))
    expect["broken-not-a-notebook"] = (0, "invalid-notebook", "not a Jupyter notebook")
    (batch / "renamed-copy" / A).mkdir(parents=True)
    nbformat.write(complete, batch / "renamed-copy" / A / f"Copy of {NB}")
    expect["renamed-copy"] = (8, "graded", "graded 'Copy of self_attention.ipynb'")
    (batch / "renamed-number" / A).mkdir(parents=True)
    nbformat.write(complete, batch / "renamed-number" / A / "self_attention (1).ipynb")
    expect["renamed-number"] = (8, "graded", "as self_attention.ipynb")
    (batch / "wrong-notebook" / A).mkdir(parents=True)
    nbformat.write(complete, batch / "wrong-notebook" / A / "homework.ipynb")
    nbformat.write(complete, batch / "wrong-notebook" / A / "other.ipynb")
    expect["wrong-notebook"] = (0, "missing-notebook", "expected self_attention.ipynb")
    (batch / "old-format" / A).mkdir(parents=True)
    with warnings.catch_warnings():  # format 3 has no cell ids; nbformat warns while downgrading
        warnings.simplefilter("ignore")
        (batch / "old-format" / A / NB).write_text(nbformat.writes(nbformat.convert(copy.deepcopy(complete), 3), version=3))
    expect["old-format"] = (8, "graded", "converted from notebook format 3")
    write_submission(batch, "Twice", A, NB, release_notebook(A, NB))
    write_submission(batch, "twice", A, NB, complete)
    os.utime(batch / "Twice" / A / NB, (1, 1))  # the untouched one is older
    expect["twice"] = (8, "graded", "also submitted as ['Twice']")
    return expect


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    batch = tmp_path_factory.mktemp("hostile")
    expect = _build(batch)
    out = tmp_path_factory.mktemp("hostile-graded")
    rows = {g.student: g for g in grade(batch, out, [A], cell_seconds=15, sandbox=use_sandbox(), progress=False)}
    return expect, rows, out, batch


def test_every_student_gets_exactly_one_row(hostile):
    expect, rows, _, _ = hostile
    assert set(rows) == set(expect)


def _students() -> list[str]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return sorted(_build(Path(tmp)))


@pytest.mark.parametrize("student", _students())
def test_submission_gets_the_score_and_status_its_honest_code_earns(hostile, student):
    expect, rows, out, _ = hostile
    score, status, words = expect[student]
    row = rows[student]
    if isinstance(score, str):  # the score of its honest twin
        assert rows[score].status == "graded"
        score = rows[score].score
    if score is not None:
        assert row.score == score, f"{student}: {row.score} instead of {score} ({row.status}: {row.message})"
    assert row.max_score == 8
    assert row.status == status, f"{student}: {row.status} ({row.message})"
    assert words in row.message, f"{student}: message {row.message!r} does not say {words!r}"


def test_tampering_is_named_in_the_message(hostile):
    _, rows, _, _ = hostile
    assert "assigns to torch.allclose" in rows["tamper-allclose"].message
    assert "imports sys" in rows["tamper-sys-modules"].message


def test_feedback_shows_diagnoses_but_not_hidden_test_code(hostile):
    _, _, out, _ = hostile
    text = feedback_text(out, "twin-no-softmax", A)
    assert "the softmax is missing" in text
    assert "attention_weights_match_oracle" not in text and "BEGIN HIDDEN TESTS" not in text


def test_regrading_reuses_unchanged_grades_and_regrades_changed_ones(hostile, tmp_path):
    _, rows, out, batch = hostile
    import shutil

    again = tmp_path / "out"
    shutil.copytree(out, again)
    small = tmp_path / "batch"
    for student in ("honest-complete", "twin-no-softmax", "broken-json"):
        shutil.copytree(batch / student, small / student)
    nbformat.write(complete_submission(A, NB), small / "twin-no-softmax" / A / NB)  # the student fixed it
    regraded = {g.student: g for g in grade(small, again, [A], cell_seconds=15, sandbox=use_sandbox(), progress=False)}
    assert set(regraded) == {"honest-complete", "twin-no-softmax", "broken-json"}
    assert regraded["honest-complete"].score == 8
    assert regraded["twin-no-softmax"].score == 8, "a changed submission kept its stale score"
    assert not (again / "feedback" / "tamper-allclose").exists(), "feedback of a student no longer in the batch was kept"
    state = json.loads((again / ".grading-state.json").read_text())
    assert set(state) == {"honest-complete/01_self_attention", "twin-no-softmax/01_self_attention"}


def test_output_flood_is_cut(hostile):
    _, rows, out, _ = hostile
    if "limit-output" not in rows:
        pytest.skip("output limits need the sandbox")
    pages = list((out / "feedback" / "limit-output" / A).glob("*.html"))
    assert pages and sum(p.stat().st_size for p in pages) < 30_000_000


def test_class_report_names_the_commonest_mistake(hostile):
    _, _, out, _ = hostile
    report = (out / "report.md").read_text()
    assert "## 01_self_attention" in report
    assert "the softmax is missing" in report
    assert "| test_attention_weights_by_hand |" in report
