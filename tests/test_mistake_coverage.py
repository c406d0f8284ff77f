"""Every mistake a judge can name is produced by a catalogued variant, and every mistake the catalogue expects is one
a judge declares.

Importing course/checks and course/judges declares every Mistake they hold (a module-level Mistake, or one a judges
module's variants declare beside their code, adds itself to course.checks.compare.declared());
catalogue/ says which variants should be diagnosed with which id, and test_catalogue.py grades each variant and checks
that its judge names that id. Nothing here runs a notebook."""

import importlib
import pkgutil

import pytest

import course.checks
import course.judges
from catalogue import expected_mistakes
from course.checks import compare
from course.checks.compare import Mistake


def _declared() -> dict[str, dict[str, Mistake]]:
    """id -> {declaring module: Mistake}, once every module of course/checks and course/judges is imported (the
    course's only: not the worked example's of tests/example_check/, if a test imported it in this process)."""
    for package in (course.checks, course.judges):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    found = {i: {m: v for m, v in by.items() if m.startswith("course.")} for i, by in compare.declared().items()}
    return {i: by for i, by in found.items() if by}


def _catalogued() -> dict[str, list[str]]:
    """id -> the catalogue's variants that should be diagnosed with it, as assignment:name."""
    found: dict[str, list[str]] = {}
    for assignment, name, mistake_id in expected_mistakes():
        found.setdefault(mistake_id, []).append(f"{assignment}:{name}")
    return found


#: mistakes only a GPU can show, so no variant replayed on the CPU produces them: id -> why
ONLY_ON_A_GPU: dict[str, str] = {}  # (07's mask-wrong-device is seen on course/checks/device.py's stand-in GPU now)


def test_every_mistake_a_judge_can_name_is_produced_by_a_catalogued_variant():
    declared, catalogued = _declared(), _catalogued()
    assert set(ONLY_ON_A_GPU) <= set(declared), "a GPU-only mistake that no judge declares any more"
    missing = sorted(set(declared) - set(catalogued) - set(ONLY_ON_A_GPU))
    assert not missing, (
        f"{len(missing)} mistakes a judge can name are produced by no variant in catalogue/; write the mistake "
        "as a student would (or, if no real answer can reach it, delete it):\n"
        + "\n".join(f"  {i}  (declared in {', '.join(sorted(declared[i]))})" for i in missing))


def test_every_catalogued_mistake_is_declared_by_a_judge():
    declared, catalogued = _declared(), _catalogued()
    unknown = sorted(set(catalogued) - set(declared))
    assert not unknown, (
        f"{len(unknown)} ids the catalogue expects are declared by no Mistake in course/checks or "
        "course/judges:\n"
        + "\n".join(f"  {i}  (expected of {', '.join(catalogued[i])})" for i in unknown))


# ---------------------------------------------------------------- how a Mistake declares itself

def _at_module_level(source: str, module: str) -> dict:
    namespace = {"__name__": module, "Mistake": Mistake}
    exec(compile(source, f"<{module}>", "exec"), namespace)
    return namespace


ONE_WAY = 'Mistake("made-up", "one way", declared_in=__name__)'


def test_a_module_level_mistake_declares_itself_under_its_module(monkeypatch):
    monkeypatch.setattr(compare, "_DECLARED", {})
    _at_module_level(f"A = {ONE_WAY}\nB = {ONE_WAY}", "judges_one")
    _at_module_level('A = Mistake("made-up", "another assignment\'s way", declared_in=__name__)', "judges_two")
    assert {module: m.explanation for module, m in compare.declared()["made-up"].items()} == {
        "judges_one": "one way", "judges_two": "another assignment's way"}


def test_one_module_cannot_explain_an_id_two_ways(monkeypatch):
    monkeypatch.setattr(compare, "_DECLARED", {})
    with pytest.raises(ValueError, match="declares the mistake 'made-up' twice"):
        _at_module_level(f'A = {ONE_WAY}\nB = Mistake("made-up", "another way", declared_in=__name__)', "judges_one")


def test_a_mistake_made_without_declaring_it_must_reuse_a_declared_id(monkeypatch):
    """Only a Mistake that says where it is declared declares its id (no frame is inspected to guess): one made in a
    function, or at module level without declared_in, is a message composed for one failure."""
    monkeypatch.setattr(compare, "_DECLARED", {})
    _at_module_level(f"A = {ONE_WAY}", "judges_one")
    several = Mistake("made-up", "this failure's own words")  # a message composed for one failure
    assert several.id == "made-up" and compare.declared()["made-up"]["judges_one"].explanation == "one way"
    assert several == Mistake("made-up", "this failure's own words", declared_in="judges_two")  # where: no field
    with pytest.raises(ValueError, match="declared nowhere"):
        Mistake("never-declared", "words")
    with pytest.raises(ValueError, match="declared nowhere"):
        _at_module_level('A = Mistake("undeclared-at-module-level", "words")', "judges_one")

