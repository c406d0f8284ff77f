"""Seeds are written by hand in course/checks/ (100 to 8,700): two cases of one assignment that draw from the same seed
get the same random numbers, which is meant when they share an input (the same x, scaled or with an upstream
gradient) and a mistake when they draw different inputs. Here every declared case of every check draws its inputs
and its upstream gradient with fixed seeds (nothing of the student's runs), and each seed's draws are compared: the
state of the generator after the case drew from it says how much it drew, and from which seed.

Under grading each seed is salted with the grader's secret (course/checks/seeds.py), so seeds that differ here differ
then too, and seeds that collide here collide then."""

import hashlib
import sys
from collections import defaultdict
from contextlib import contextmanager

import pytest
from conftest import ASSIGNMENTS

from autograder.judging import checks_module
from course.checks import compare
from course.checks.check import checks_of
from course.checks.kinds import Case

#: (assignment, seed) drawn for different inputs and meant to be: none today
KNOWN: set[tuple[str, int]] = set()


def _cases(check) -> list[Case]:
    """The cases a check declares (secret ones too), directly or in the modules it builds."""
    found = list(getattr(check, "cases", ()) or ())
    for run in getattr(check, "runs", ()) or ():
        found += list(run.cases)
    return [case for case in found if isinstance(case, Case)]


@contextmanager
def _generators(made: list):
    """Every generator compare.generator makes while inside, with its seed, appended to made."""
    real = compare.generator

    def generator(seed, device="cpu"):
        made.append((int(seed), found := real(seed, device)))
        return found

    bound = [(module, name) for module in list(sys.modules.values())
             if getattr(module, "__name__", "").startswith("course.checks")
             for name, value in list(vars(module).items()) if value is real]
    for module, name in bound:
        setattr(module, name, generator)
    try:
        yield
    finally:
        for module, name in bound:
            setattr(module, name, real)


def _draws(assignment: str) -> dict[int, dict[str, frozenset[str]]]:
    """seed -> {the case that drew from it: what it drew (the generators' states after drawing)}."""
    draws: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, check in checks_of(checks_module(assignment)).items():
        for case in _cases(check):
            for part, make in (("inputs", case.inputs), ("upstream", case.upstream)):
                made: list = []
                with _generators(made):
                    if make is not None:
                        make()
                for seed, generator in made:
                    state = hashlib.sha256(generator.get_state().numpy().tobytes()).hexdigest()
                    draws[seed][f"{name}:{case.key}"].add(f"{part} {state}")
    return {seed: {case: frozenset(states) for case, states in by_case.items()} for seed, by_case in draws.items()}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_two_cases_draw_different_inputs_from_one_seed(assignment):
    draws = _draws(assignment)
    assert draws, f"no case of {assignment} draws from a seed: the test no longer sees the draws"
    collisions = {seed: sorted(by_case) for seed, by_case in draws.items()
                  if len(set(by_case.values())) > 1 and (assignment, seed) not in KNOWN}
    assert not collisions, (
        f"cases of {assignment} draw different inputs from one seed (give each its own): {collisions}")


def test_a_seed_drawn_for_two_different_inputs_is_found(monkeypatch):
    """The detector itself: two cases of other shapes drawn from one seed collide; the same draw twice does not."""
    from course.checks.kinds import random_case  # noqa: PLC0415

    class Fake:
        cases = (random_case("a", (2, 3), 7), random_case("b", (2, 3), 7), random_case("c", (4, 5), 7))

    monkeypatch.setattr(sys.modules[__name__], "checks_module", lambda _: Fake)
    monkeypatch.setattr(sys.modules[__name__], "checks_of", lambda module: {"fake": module})
    by_case = _draws("any")[7]
    assert by_case["fake:a"] == by_case["fake:b"] != by_case["fake:c"]
