"""What a reader must open to understand one test may shrink, never grow: benchmarks/reading_closure.py measures it
(run it to see the figures: `.venv/bin/python benchmarks/reading_closure.py --quiet`), and this ratchet holds the
worst closure and the functions with more than 8 parameters to today's. When a change shrinks them, lower the
figure here and take the names off the list; when it would grow them, make the change smaller instead."""

import sys

import pytest

from autograder import course_dir

sys.path.insert(0, str(course_dir.ROOT / "benchmarks"))

import reading_closure  # noqa: E402 - benchmarks/ is no package

#: the largest reading closure of any graded test cell, in lines (see the script's docstring for what is counted).
#: 1,756 when first measured; 1,867 once 07's model check also ran on the stand-in GPU (issue 36) and judged where
#: its dropout goes (issue 41): specification clauses, read where the check is. Lower it as issue 40's rewrite lands:
#: 1,865 once 07's model mistakes were written as code (its gradients and dropout judged apart, read by their checks);
#: 1,863 at 8af4ba5, once 08 had moved too; 1,857 once the wide records of course/checks/ were grouped (w1); 1,794
#: once 07's checks no longer read the course's classes their parts are named after, nor the GPU checks and the
#: properties they do not judge (c7); then higher once the script counted the mistakes written with a named cell
#: (``edit(name, LM, ...)``), which it had missed: 1,835 (08's lm_cache); 1,771 once the prerequisites left `Check`,
#: 08's two model oracles became one and the wide oracle records went (core, c8, wo); 1,732 once a check reads the
#: probe's gradient code only when it records gradients (core2); 1,648 once 08's and 09's model checks read
#: the judge's gradient code only where they judge gradients (l8);
#: 1,618 once each_case judged the stand-in GPUs only where a check names them (kinds2).
WORST_LINES = 1618

#: (file, name) of the functions and dataclasses of the check machinery with more than 8 parameters or fields,
#: frozen as they are today: to be shrunk, never added to
WIDE: set[tuple[str, str]] = set()


def test_the_script_prints_every_graded_cell_and_the_figures(capsys):
    figures = reading_closure.report(quiet=False)
    printed = capsys.readouterr().out
    assert figures["checks"] == len(reading_closure.test_cells()) > 100
    for assignment, check in reading_closure.EXAMPLES:
        assert f"{assignment} {check}:" in printed
    assert "Reading closure: median" in printed and "per graded test cell" in printed
    assert "Shared core" in printed and figures["core_lines"] > 0 and figures["beyond_median"] < figures["median_lines"]


def test_the_worst_reading_closure_never_grows():
    found = reading_closure.closures()
    worst = max(found, key=lambda c: c.lines)
    assert worst.lines <= WORST_LINES, (
        f"{worst.cell.assignment} {worst.cell.check} now needs {worst.lines} lines of reading, more than the "
        f"{WORST_LINES} allowed: follow what it reaches with benchmarks/reading_closure.py and cut it down")


def test_no_new_function_or_dataclass_takes_more_than_8_parameters():
    wide = {(where.split(":")[0], name) for where, name, _ in reading_closure.wide_definitions()}
    assert not wide - WIDE, f"more than 8 parameters or fields: {sorted(wide - WIDE)}; pass a case or a record"


def test_a_closure_follows_imports_into_the_machinery_and_stops_at_torch():
    """The check worked by hand in assignment 01 reaches its probe, its judge, the generic kinds and its mistakes
    (written as code beside its judge), and never a file outside course/ and catalogue/."""
    (cell,) = [c for c in reading_closure.test_cells() if c.check == "attention_weights_by_hand"]
    reached = reading_closure.closure(reading_closure.starts(cell))
    files = {unit.path for unit in reached}
    assert {"course/checks/self_attention.py", "course/judges/self_attention.py", "course/checks/kinds.py",
            "course/judges/kinds.py", "course/judges/variants.py"} <= files
    assert all(path.startswith(("course/", "catalogue/")) for path in files)
    assert any(unit.name.startswith('edit("weights-softmax-dim1"') for unit in reached)  # a mistake it can name


def test_a_class_s_written_mistakes_are_in_the_closure_of_its_cell_s_checks():
    """A mistake written in a judges module names the class (DecoderBlock); the notebook's cell has a grade id
    (decoder_block): the catalogue's written(WRITTEN, cells=...) joins the two."""
    (cell,) = [c for c in reading_closure.test_cells() if c.check == "decoder_block_oracle"]
    reached = reading_closure.closure(reading_closure.starts(cell))
    assert any(unit.path == "course/judges/seq2seq.py" and unit.name.startswith('edit("block-no-residual"')
               for unit in reached)


def test_nothing_in_the_check_machinery_inspects_the_callers_frame():
    """Where a check, a mistake or a catalogue edit belongs is said where it is written (or found from where it is
    bound), never guessed from the frame that called: a reader follows names, not the call stack."""
    found = [f"{path.relative_to(course_dir.ROOT)}:{number}"
             for folder in ("course", "catalogue") for path in sorted((course_dir.ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "_getframe" in line or "inspect.stack" in line or "currentframe" in line]
    assert not found, f"frame inspection in {found}"


def _records() -> set[str]:
    """The dataclasses and NamedTuples the check machinery defines (its case tables among them)."""
    import ast  # noqa: PLC0415

    return {node.name for folder in ("course/checks", "course/judges")
            for path in (course_dir.ROOT / folder).glob("*.py")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef) and reading_closure._is_record(node)}


def _numbers(node) -> bool:
    """node is a number, or a tuple or arithmetic holding one (a call's own arguments are that call's business)."""
    import ast  # noqa: PLC0415

    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    return isinstance(node, ast.Tuple | ast.BinOp | ast.UnaryOp) and any(
        _numbers(child) for child in ast.iter_child_nodes(node))


def test_case_tables_name_their_numbers():
    """A case written ModernCase(3, 7, 11, 24, 6, 3, 2, 12) hides what each number is; the machinery's records are
    built with keywords wherever a number is passed: ModernCase(b=3, t=7, vocab=11, ...)."""
    import ast  # noqa: PLC0415

    records, found = _records(), []
    for folder in ("course", "catalogue", "tests"):
        for path in sorted((course_dir.ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in records
                        and any(_numbers(arg) for arg in node.args)):
                    found.append(f"{path.relative_to(course_dir.ROOT)}:{node.lineno} {node.func.id}")
    assert not found, f"numbers passed by position: {found}"


def test_the_reading_list_of_one_check_is_its_closure_in_three_parts():
    """`--check 01:attention_weights_by_hand` lists what a reviewer reads: where the check starts, what it reaches
    beyond the shared core, then the core; together exactly its closure, each unit once. A name two assignments
    use is refused with both places."""
    parts = reading_closure.reading_list("01:attention_weights_by_hand")
    (item,) = [c for c in reading_closure.closures() if c.cell.check == "attention_weights_by_hand"]
    listed = [unit for _, units in parts for unit in units]
    assert len(listed) == len(set(listed)) and set(listed) == item.units
    assert any(u.path == "course/checks/self_attention.py" and u.name == "attention_weights_by_hand"
               for u in parts[0][1])
    with pytest.raises(SystemExit, match="07_seq2seq:loss_oracle, 08_language_model:loss_oracle"):
        reading_closure.reading_list("loss_oracle")
