"""How large a notebook's demonstrations run: as its text describes them, or cut short while nbgrader grades it.

Grading executes every cell of a notebook but scores only the tests; the training runs, samples and timings between
them illustrate the text. While nbgrader runs a notebook (it sets NBGRADER_EXECUTION to "autograde" or "validate")
they take the short sizes of SHORT, so that grading stays fast; a reader who runs the notebook gets the sizes its
text describes. The notebooks ask here rather than read the environment, so that a reader meets no grading
machinery in their code.
"""

import os
from collections.abc import Callable
from typing import Any

#: name -> what a grading run uses instead of the full size the notebook passes
SHORT: dict[str, Callable[[Any], Any]] = {
    "steps": lambda full: min(full, 20),  # training steps
    "seeds": lambda full: tuple(full)[:1],  # one seed: a spread needs two, and grading needs none
    "examples": lambda full: full[:200],  # held-out sentences or pairs evaluated
    "draws": lambda full: min(full, 40),  # samples drawn per setting
    "lengths": lambda full: (16, 32),  # generation lengths timed
    # (b, t, k, h) of each timed setting: two sequences of at most 50 positions
    "timing shapes": lambda full: {name: (2, min(t, 50), k, h) for name, (_, t, k, h) in full.items()},
}


def grading_run() -> bool:
    """True while nbgrader executes the notebook (to grade or to validate it)."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def demo_size(name: str, full: Any) -> Any:
    """`full`, the size the notebook's text describes; while nbgrader grades, the short size SHORT[name] makes of it."""
    if name not in SHORT:
        raise KeyError(f"no short size for {name!r}; known: {sorted(SHORT)}")
    return SHORT[name](full) if grading_run() else full


def assert_after_training(condition: bool, message: str) -> None:
    """Assert what the text says about the fully trained models; a grading run trains too briefly to hold them to it."""
    if not grading_run():
        assert condition, message
