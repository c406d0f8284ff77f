"""How a notebook shows an exercise that is not done yet: one plain sentence instead of a traceback.

In a fresh release notebook every answer cell still holds nbgrader's stub, ``raise NotImplementedError()``, and
the demo cells under it call that code. ``show_unfinished_plainly()``, called by each notebook's setup cell, makes
IPython show that error as one sentence naming the unfinished exercise, so running a notebook from the top meets
the course's own words first, never a traceback through code the student has not written yet.

A cell stopped by an unfinished exercise leaves the names it would have made undefined; a later cell that uses
one of them (a trained model, a list of losses) says so in one sentence too, instead of a bare NameError. Every
other error is shown as usual.
"""

from __future__ import annotations

import ast
import linecache
import textwrap
from types import TracebackType

#: what a demo cell shows when the code it calls is still the stub (filled in with the exercise's name)
MESSAGE = ("{name} is not implemented yet: put your code in its cell instead of\n"
           "`raise NotImplementedError()`. This cell runs once it is.")
#: what a cell shows that uses a name an earlier cell could not make because an exercise is unfinished
BLOCKED = ("`{missing}` does not exist yet: the cell that makes it stopped because {name} is not implemented yet. "
           "Run that cell again once it is.")
#: lines of a message are at most this long, so no one has to scroll sideways
WIDTH = 88


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


def names_made(tb: TracebackType | None) -> set[str]:
    """The names the cell at the bottom of the traceback assigns, defines or imports at any depth outside
    functions and classes (empty when its source cannot be read)."""
    while tb is not None and tb.tb_frame.f_code.co_name != "<module>":  # skip IPython's own frames
        tb = tb.tb_next
    if tb is None:
        return set()
    source = "".join(linecache.getlines(tb.tb_frame.f_code.co_filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            continue
        names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return names


def show_unfinished_plainly() -> None:
    """In IPython (a notebook kernel): show NotImplementedError as the course's one-sentence message, and a
    NameError for a name that an unfinished exercise kept from being made as another."""
    try:
        from IPython import get_ipython  # noqa: PLC0415 - optional: the course also runs without IPython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    blocked: dict[str, str] = {}  # name a stopped cell would have made -> the unfinished exercise

    def handler(shell, etype, value, tb, tb_offset=None):  # IPython's custom exception handler signature
        if issubclass(etype, NotImplementedError):
            name = exercise_name(tb)
            blocked.update({made: name for made in names_made(tb) if made not in shell.user_ns})
            lines = [part for line in MESSAGE.format(name=name).splitlines() for part in textwrap.wrap(line, WIDTH)]
        elif getattr(value, "name", None) in blocked and value.name not in shell.user_ns:
            name = blocked[value.name]
            blocked.update({made: name for made in names_made(tb) if made not in shell.user_ns})  # and so on
            lines = textwrap.wrap(BLOCKED.format(missing=value.name, name=name), WIDTH)
        else:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        # IPython leaves showing the error to the handler; the kernel's _showtraceback sends it as an error output
        # (so the cell is marked failed) whose traceback is just these lines.
        shell._showtraceback(etype, value, lines)
        return lines

    shell.set_custom_exc((NotImplementedError, NameError), handler)
