"""Probes for assignment 06: sinusoidal_positional_encoding, PositionalEncoding and LearnedPositionalEmbedding,
judged in course/judges/positional_encoding.py from the cases declared here; the checks of a table that depends on
its sizes alone, or worked by hand, add a case of secret sizes or a secret random input under grading."""

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from course.checks import device, kinds, modules, weights
from course.checks.check import Check, when_graded  # noqa: F401 - hidden-test cells call it
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder, fact_key
from course.checks.kinds import Built, Case, Runs, builds_and_runs, calls, drawn, given, property_check, random_case
from course.checks.seeds import salted


def _secret_sizes(seed: int) -> dict[str, int]:
    """Under grading, secret table sizes drawn from the grader's secret: 5 ≤ max_len ≤ 40 and an even 4 ≤ k ≤ 32
    (at least two sin/cos pairs, so that every typical mistake shows), max_len ≠ k (a transposed table shows)."""
    g = generator(seed)
    max_len = int(torch.randint(5, 41, (), generator=g))
    k = 2 * int(torch.randint(2, 17, (), generator=g))
    return {"max_len": max_len + 1 if max_len == k else max_len, "k": k}


# ---------------------------------------------------------------- sinusoidal_positional_encoding

def sizes(key: str, max_len: int, k: int, label: str = "") -> Case:
    """sinusoidal_positional_encoding(max_len, k), its table recorded under key."""
    return Case(key, partial(dict, max_len=max_len, k=k), label or f"max_len={max_len}, k={k}")


def secret_table(seed: int) -> Case:
    """Under grading, the table of secret sizes (:func:`_secret_sizes`), recorded under table_secret."""
    return Case("table_secret", partial(_secret_sizes, seed), "secret sizes", secret=True)


ODD = sizes("odd", 10, 5)  # must raise a ValueError

table_by_hand = calls("table_by_hand", (
    sizes("table", 3, 4, "max_len=3, k=4: row p = [sin p, cos p, sin(p/100), cos(p/100)]"), secret_table(2800)))
table_odd_size = calls("table_odd_size", (ODD, sizes("table", 7, 6), secret_table(2810)))
table_oracle = calls("table_oracle", (
    *(sizes(f"table{i}", *size) for i, size in enumerate(((50, 16), (7, 6), (1, 2), (100, 64), (12, 10)))),
    secret_table(2820)))


# ---------------------------------------------------------------- PositionalEncoding

def _tensors(module: nn.Module) -> dict:
    """Its parameters (names and shapes, left as they are), buffers, and tensors kept as plain attributes."""
    return {"params": [[name, list(p.shape)] for name, p in module.named_parameters()],
            "buffers": weights.buffers(module),
            "plain": sorted(name for name, v in vars(module).items() if isinstance(v, torch.Tensor))}


#: PositionalEncoding's default max_len, which the exercise gives
DEFAULT_MAX_LEN = 5000


def _make_encoding(cls: Callable, rec: Recorder, key: str, k: int, max_len: int, default: bool = False,
                   **kwargs: Any) -> nn.Module | None:
    """cls(k, max_len=max_len, ...) built on the CPU (default: cls(k), max_len being DEFAULT_MAX_LEN), its
    parameters, buffers and plain tensors recorded, moved to the device; the buffer holding max_len·k values (the
    table) recorded as key.table."""
    sizes = {} if default else {"max_len": max_len}
    module = modules.build(rec, key, cls, k, **sizes, **kwargs, facts=_tensors)
    tables = [b for _, b in module.named_buffers() if b.numel() == max_len * k] if module is not None else []
    if tables:
        rec.tensor(fact_key(key, "table"), tables[0])
    return module


def _sized(module: str, k: int, max_len: int, x: Callable[[], torch.Tensor], default: bool = False) -> dict[str, Any]:
    return {"module": module, "k": k, "max_len": max_len, "x": x()} | ({"default": True} if default else {})


def encoding(module: str, key: str, k: int, max_len: int, x: Callable[[], torch.Tensor], label: str, *,
             secret: bool = False) -> Case:
    """PositionalEncoding(k, max_len=max_len) built under the key module (inputs()["module"]), called on x() (its
    output under key)."""
    return Case(key, partial(_sized, module, k, max_len, x), label, secret)


def default_encoding(module: str, key: str, k: int, x: Callable[[], torch.Tensor], label: str) -> Case:
    """PositionalEncoding(k), max_len left at its default (inputs()["default"]), built under the key module and
    called on x() (its output under key)."""
    return Case(key, partial(_sized, module, k, DEFAULT_MAX_LEN, x, default=True), label)


def _secret_sized(seed: int) -> dict[str, Any]:
    """Under grading: secret sizes (:func:`_secret_sizes`) and a random x of shape (2, 5, k), module "secret"."""
    found = _secret_sizes(seed)
    return {"module": "secret", **found, "x": randn(2, 5, found["k"], seed=seed + 1)}


def _probe_encodings(cases: tuple[Case, ...], PositionalEncoding: Callable, rec: Recorder) -> None:
    built: dict[str, nn.Module | None] = {}
    for case in drawn(cases):
        inputs = case.inputs()
        name = inputs["module"]
        if name not in built:
            built[name] = _make_encoding(PositionalEncoding, rec, name, inputs["k"], inputs["max_len"],
                                         inputs.get("default", False))
        if built[name] is not None:
            with torch.no_grad():
                rec.call(case.key, built[name], inputs["x"].to(rec.device))


positional_encoding_buffer = property_check("positional_encoding_buffer", _probe_encodings, (
    encoding("module", "y", 8, 20, partial(randn, 2, 5, 8, seed=2900), "x of shape (2, 5, 8)"),
    Case("y_secret", partial(_secret_sized, 2910), "secret sizes, x of shape (2, 5, k)", secret=True)))
positional_encoding_adds = property_check("positional_encoding_adds", _probe_encodings, (
    encoding("module", "y0", 4, 10, partial(torch.zeros, 1, 3, 4),
             "x = zeros of shape (1, 3, 4): the output is the table's first 3 rows"),
    encoding("module", "y1", 4, 10, partial(torch.ones, 2, 5, 4),
             "x = ones of shape (2, 5, 4): the output is 1 + the table's first 5 rows, in both sequences"),
    encoding("module", "y_secret", 4, 10, partial(randn, 3, 7, 4, seed=2920), "x of shape (3, 7, 4), max_len=10",
             secret=True)))
positional_encoding_too_long = property_check("positional_encoding_too_long", _probe_encodings, (
    encoding("module", "long", 4, 6, partial(torch.zeros, 2, 7, 4), "a sequence of length 7"),  # must raise
    encoding("module", "y", 4, 6, partial(randn, 2, 6, 4, seed=2950), "x of shape (2, 6, 4)")))
positional_encoding_oracle = property_check("positional_encoding_oracle", _probe_encodings, (*(
    encoding(f"module{i}", f"y{i}", k, max_len, partial(randn, b, t, k, seed=3000 + i),
             f"x of shape {(b, t, k)}, max_len={max_len}")
    for i, (b, t, k, max_len) in enumerate(((3, 5, 8, 16), (2, 16, 6, 16), (4, 1, 4, 10), (2, 9, 10, 50)))),
    default_encoding("module_default", "y_default", 4, partial(randn, 2, 7, 4, seed=3010),
                     "x of shape (2, 7, 4), max_len left at its default")))

DROPOUT = encoding("dropout", "y", 8, 32, partial(randn, 4, 32, 8, seed=3100), "x of shape (4, 32, 8)")


def _probe_dropout(PositionalEncoding: Callable, rec: Recorder) -> None:
    inputs = DROPOUT.inputs()
    module = _make_encoding(PositionalEncoding, rec, inputs["module"], inputs["k"], inputs["max_len"], dropout=0.5)
    if module is not None:
        with torch.no_grad():
            rec.call("y_eval", module.eval(), inputs["x"].to(rec.device))
            torch.manual_seed(salted(3101))
            rec.call("y_train", module.train(), inputs["x"].to(rec.device))


positional_encoding_dropout = Check("positional_encoding_dropout", _probe_dropout)

# ---------------------------------------------------------------- LearnedPositionalEmbedding

ONES = given("y", partial(torch.ones, 2, 4, 6), "x = ones of shape (2, 4, 6): the output is 1 + the embedding's "
             "first 4 rows")
#: LearnedPositionalEmbedding(10, 6) moved to each stand-in GPU and called: are the positions made on x's device?
LEARNED_ON_GPU = "LearnedPositionalEmbedding(10, 6).to(device)(x of shape (2, 4, 6) on device)"
learned_structure = builds_and_runs("learned_structure", (Runs(Built(key="module", args=(10, 6), seed=3300), (ONES,)),))
learned_structure.probe = device.on_gpus(learned_structure.probe, "module",  # then on the stand-in GPUs
                                         lambda cls, d: cls(10, 6).to(d)(torch.randn(2, 4, 6, device=d)))
learned_oracle = builds_and_runs("learned_oracle", tuple(
    Runs(Built(key=f"module{i}", args=(max_len, k), seed=3200 + i), (random_case(f"y{i}", (b, t, k), 3210 + i),))
    for i, (b, t, max_len, k) in enumerate(((3, 5, 8, 4), (2, 8, 8, 6), (4, 1, 20, 3)))))
learned_gradients = kinds.builds_and_runs_backward("learned_gradients", (
    Runs(Built(key="grad_module", args=(8, 4), seed=3230),
         (random_case("y_grad", (2, 5, 4), 3220, upstream=((2, 5, 4), 3221)),)),))
