"""How a notebook shows an exercise that is not done yet: one plain sentence instead of a traceback.

In a fresh release notebook every answer cell still holds nbgrader's stub, ``raise NotImplementedError()``, and
the demo cells under it call that code. ``show_unfinished_plainly()``, called by each notebook's setup cell, makes
IPython show that error as one sentence naming the unfinished exercise, so running a notebook from the top meets
the course's own words first, never a traceback through code the student has not written yet. Every other error
is shown as usual.
"""

from __future__ import annotations

from types import TracebackType

#: what a demo cell shows when the code it calls is still the stub (filled in with the exercise's name)
MESSAGE = ("{name} is not implemented yet: put your code in its cell instead of\n"
           "`raise NotImplementedError()`. This cell runs once it is.")


def exercise_name(tb: TracebackType | None) -> str:
    """The function (or Class.method) whose body raised: the innermost frame of the traceback."""
    frame = None
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
    if frame is None:
        return "This exercise"
    name = frame.f_code.co_name
    owner = frame.f_locals.get("self")
    if owner is not None and name != "<module>":
        return f"{type(owner).__name__}.{name}"
    return name if name != "<module>" else "This exercise"


def show_unfinished_plainly() -> None:
    """In IPython (a notebook kernel): show NotImplementedError as the course's one-sentence message."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def handler(shell, etype, value, tb, tb_offset=None):  # IPython's custom exception handler signature
        lines = MESSAGE.format(name=exercise_name(tb)).splitlines()
        # IPython leaves showing the error to the handler; the kernel's _showtraceback sends it as an error output
        # (so the cell is marked failed) whose traceback is just these lines.
        shell._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc((NotImplementedError,), handler)
