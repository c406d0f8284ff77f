"""The probe of the worked example (docs/contributors.md): in the course, one declaration in
course/checks/<assignment>.py, which the student's kernel imports. It calls the student's function on each case and
records what it returns."""

from functools import partial

from course.checks.compare import randn
from course.checks.kinds import Case, calls


def _inputs(shape: tuple[int, int, int], window: int, seed: int) -> dict:
    return {"x": randn(*shape, seed=seed), "window": window}  # passed in this order: fn(x, window)


def case(key: str, shape: tuple[int, int, int], window: int, seed: int) -> Case:
    return Case(key, partial(_inputs, shape, window, seed), f"x of shape {shape}, window {window}")


# a window of 1 (only itself), one shorter than the sequence, one longer than it
sliding_window_oracle = calls("sliding_window_oracle", (
    case("w0", (2, 6, 3), window=2, seed=9100), case("w1", (1, 5, 4), window=1, seed=9101),
    case("w2", (2, 4, 3), window=9, seed=9102)))
