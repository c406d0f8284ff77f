"""Each assignment's notebook budget comes from its reference solution's measured grading (autograder/budgets.py)."""

from autograder import budgets, course_dir
from autograder.workspace import Options, notebook_budget


def test_every_assignment_has_a_measured_budget():
    """budgets.json is generated (python -m autograder budgets): a new assignment needs its measurement."""
    seconds = budgets.measured()
    assert set(seconds) == set(course_dir.assignments()), "run python -m autograder budgets for the new assignments"
    assert all(0 < s < 600 for s in seconds.values()), seconds


def test_the_budget_is_a_multiple_of_the_measurement_and_never_below_the_floor():
    seconds = {"fast": 2.0, "slow": 30.0}
    assert budgets.budget("fast", 120, seconds) == budgets.FLOOR
    assert budgets.budget("slow", 120, seconds) == budgets.MULTIPLE * 30
    assert budgets.budget("never-measured", 120, seconds) == 10 * 120


def test_notebook_timeout_overrides_the_budget():
    assert notebook_budget(Options(("01_self_attention",), notebook_seconds=500), "01_self_attention") == 500
    default = notebook_budget(Options(("01_self_attention",)), "01_self_attention")
    assert default == budgets.budget("01_self_attention", 120) < 10 * 120
