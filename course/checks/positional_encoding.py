"""Probes for assignment 06: sinusoidal_positional_encoding, PositionalEncoding and LearnedPositionalEmbedding.

Each check runs the student's code on inputs chosen here and records what it gives; its judge (in
course/judges/positional_encoding.py, hidden under grading) decides. The sinusoidal table is fully determined by
(max_len, k), so the judge computes it from the formula in float64; the learned embedding gets the check's weights
(course.checks.weights), which the judge recreates. Under grading every random input and weight comes from the
grader's secret seed, and the checks of a table that depends on its sizes alone, or worked by hand, add a case of
secret sizes or a secret random input (see course/checks/seeds.py).
"""

from collections.abc import Callable

import torch
from torch import nn

from course.checks import modules, weights
from course.checks.check import Check
from course.checks.compare import generator, randn
from course.checks.evidence import Recorder
from course.checks.seeds import grading, salted


def secret_sizes(seed: int) -> tuple[int, int]:
    """Under grading, secret table sizes (max_len, k) drawn from the grader's secret: 5 ≤ max_len ≤ 40 and an even
    4 ≤ k ≤ 32 (at least two sin/cos pairs, so that every typical mistake shows), max_len ≠ k (a transposed table
    shows)."""
    g = generator(seed)
    max_len = int(torch.randint(5, 41, (), generator=g))
    k = 2 * int(torch.randint(2, 17, (), generator=g))
    return (max_len + 1 if max_len == k else max_len), k


# ---------------------------------------------------------------- sinusoidal_positional_encoding

def _probe_table_by_hand(sinusoidal_positional_encoding: Callable, rec: Recorder) -> None:
    rec.call("table", sinusoidal_positional_encoding, 3, 4)
    if grading():
        rec.call("table_secret", sinusoidal_positional_encoding, *secret_sizes(2800))


table_by_hand = Check("table_by_hand", _probe_table_by_hand)

ODD_ANCHOR = (7, 6)


def _probe_table_odd_size(sinusoidal_positional_encoding: Callable, rec: Recorder) -> None:
    rec.call("odd", sinusoidal_positional_encoding, 10, 5)
    rec.call("table", sinusoidal_positional_encoding, *ODD_ANCHOR)
    if grading():
        rec.call("table_secret", sinusoidal_positional_encoding, *secret_sizes(2810))


table_odd_size = Check("table_odd_size", _probe_table_odd_size)

TABLE_SIZES = ((50, 16), (7, 6), (1, 2), (100, 64), (12, 10))


def _probe_table_oracle(sinusoidal_positional_encoding: Callable, rec: Recorder) -> None:
    for i, (max_len, k) in enumerate(TABLE_SIZES):
        rec.call(f"table{i}", sinusoidal_positional_encoding, max_len, k)
    if grading():
        rec.call("table_secret", sinusoidal_positional_encoding, *secret_sizes(2820))


table_oracle = Check("table_oracle", _probe_table_oracle)


# ---------------------------------------------------------------- PositionalEncoding

def _tensors(module: nn.Module) -> dict:
    """Its parameters (names and shapes, left as they are), buffers, and tensors kept as plain attributes."""
    return {"params": [[name, list(p.shape)] for name, p in module.named_parameters()],
            "buffers": weights.buffers(module),
            "plain": sorted(name for name, v in vars(module).items() if isinstance(v, torch.Tensor))}


def _make_encoding(cls: Callable, rec: Recorder, key: str, k: int, **kwargs) -> nn.Module | None:
    """Build the student's module on the CPU, record its parameters and buffers, move it to the device and record
    where its buffers went."""
    module = modules.build(rec, key, cls, k, **kwargs, facts=_tensors)
    if module is not None:
        rec.fact(f"{key}.buffer_devices", [b.device.type for _, b in module.named_buffers()])
    return module


def _forward(rec: Recorder, key: str, module: nn.Module | None, x: torch.Tensor) -> None:
    if module is not None:
        with torch.no_grad():
            rec.call(key, module, x.to(rec.device))


BUFFER_CASE = (8, 20)  # k, max_len
SECRET_BUFFER_T = 5  # under grading, the secret-sized module's input is (2, SECRET_BUFFER_T, k)


def buffer_x() -> torch.Tensor:
    return randn(2, 5, 8, seed=2900)


def secret_buffer_case() -> tuple[int, int, torch.Tensor]:
    """Under grading, the case of secret sizes the buffer check adds: k, max_len and an input (2, 5, k)."""
    max_len, k = secret_sizes(2910)
    return k, max_len, randn(2, SECRET_BUFFER_T, k, seed=2911)


def _record_table(rec: Recorder, key: str, module: nn.Module, max_len: int, k: int) -> None:
    for _, b in module.named_buffers():
        if b.numel() == max_len * k:
            rec.tensor(f"{key}.table", b)
            break


def _probe_buffer(PositionalEncoding: Callable, rec: Recorder) -> None:
    k, max_len = BUFFER_CASE
    module = _make_encoding(PositionalEncoding, rec, "module", k, max_len=max_len)
    if module is None:
        return
    _record_table(rec, "module", module, max_len, k)
    _forward(rec, "y", module, buffer_x())
    if grading():
        k, max_len, x = secret_buffer_case()
        module = _make_encoding(PositionalEncoding, rec, "secret", k, max_len=max_len)
        if module is not None:
            _record_table(rec, "secret", module, max_len, k)
            _forward(rec, "y_secret", module, x)


positional_encoding_buffer = Check("positional_encoding_buffer", _probe_buffer)

ADDS_CASES = (((1, 3, 4), 0.0, "x = zeros of shape (1, 3, 4): the output is the table's first 3 rows"),
              ((2, 5, 4), 1.0, ("x = ones of shape (2, 5, 4): the output is 1 + the table's first 5 rows, in "
                                "both sequences")))
ADDS_MAX_LEN = 10


def secret_adds_x() -> torch.Tensor:
    """Under grading, the random input the check worked by hand adds: (3, 7, 4)."""
    return randn(3, 7, 4, seed=2920)


def _probe_adds(PositionalEncoding: Callable, rec: Recorder) -> None:
    module = _make_encoding(PositionalEncoding, rec, "module", 4, max_len=ADDS_MAX_LEN)
    for i, (shape, fill, _) in enumerate(ADDS_CASES):
        _forward(rec, f"y{i}", module, torch.full(shape, fill))
    if grading():
        _forward(rec, "y_secret", module, secret_adds_x())


positional_encoding_adds = Check("positional_encoding_adds", _probe_adds)

LONG_MAX_LEN = 6


def long_x() -> torch.Tensor:
    return randn(2, 6, 4, seed=2950)


def _probe_too_long(PositionalEncoding: Callable, rec: Recorder) -> None:
    module = _make_encoding(PositionalEncoding, rec, "module", 4, max_len=LONG_MAX_LEN)
    _forward(rec, "long", module, torch.zeros(2, 7, 4))
    _forward(rec, "y", module, long_x())


positional_encoding_too_long = Check("positional_encoding_too_long", _probe_too_long)

ORACLE_CASES = ((3, 5, 8, 16), (2, 16, 6, 16), (4, 1, 4, 10), (2, 9, 10, 50))  # b, t, k, max_len
DROPOUT_CASE = (4, 32, 8, 32)


def oracle_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=3000 + i)


def dropout_x() -> torch.Tensor:
    b, t, k, _ = DROPOUT_CASE
    return randn(b, t, k, seed=3100)


def _probe_oracle(PositionalEncoding: Callable, rec: Recorder) -> None:
    for i, (b, t, k, max_len) in enumerate(ORACLE_CASES):
        module = _make_encoding(PositionalEncoding, rec, f"module{i}", k, max_len=max_len)
        _forward(rec, f"y{i}", module, oracle_x(i, b, t, k))


positional_encoding_oracle = Check("positional_encoding_oracle", _probe_oracle)


def _probe_dropout(PositionalEncoding: Callable, rec: Recorder) -> None:
    _, _, k, max_len = DROPOUT_CASE
    module = _make_encoding(PositionalEncoding, rec, "dropout", k, max_len=max_len, dropout=0.5)
    if module is not None:
        _forward(rec, "y_eval", module.eval(), dropout_x())
        torch.manual_seed(salted(3101))
        _forward(rec, "y_train", module.train(), dropout_x())


positional_encoding_dropout = Check("positional_encoding_dropout", _probe_dropout)


# ---------------------------------------------------------------- LearnedPositionalEmbedding

LEARNED_STRUCTURE = (10, 6)  # max_len, k


def _probe_learned_structure(LearnedPositionalEmbedding: Callable, rec: Recorder) -> None:
    max_len, k = LEARNED_STRUCTURE
    module = modules.build(rec, "module", LearnedPositionalEmbedding, max_len, k, seed=3300)
    if module is not None:
        with torch.no_grad():
            rec.call("y", module, torch.ones(2, 4, k, device=rec.device))


learned_structure = Check("learned_structure", _probe_learned_structure)

LEARNED_CASES = ((3, 5, 8, 4), (2, 8, 8, 6), (4, 1, 20, 3))  # b, t, max_len, k
GRAD_CASE = (2, 5, 8, 4)


def learned_x(i: int, b: int, t: int, k: int) -> torch.Tensor:
    return randn(b, t, k, seed=3210 + i)


def _probe_learned_oracle(LearnedPositionalEmbedding: Callable, rec: Recorder) -> None:
    for i, (b, t, max_len, k) in enumerate(LEARNED_CASES):
        module = modules.build(rec, f"module{i}", LearnedPositionalEmbedding, max_len, k, seed=3200 + i)
        if module is not None:
            with torch.no_grad():
                rec.call(f"y{i}", module, learned_x(i, b, t, k).to(rec.device))


learned_oracle = Check("learned_oracle", _probe_learned_oracle)


def grad_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    b, t, _, k = GRAD_CASE
    return randn(b, t, k, seed=3220), randn(b, t, k, seed=3221)


def _probe_learned_gradients(LearnedPositionalEmbedding: Callable, rec: Recorder) -> None:
    _, _, max_len, k = GRAD_CASE
    module = modules.build(rec, "grad_module", LearnedPositionalEmbedding, max_len, k, seed=3230)
    if module is not None:
        x, upstream = (v.to(rec.device) for v in grad_inputs())
        x.requires_grad_(True)
        modules.record_backward(rec, "y_grad", module, x, loss=lambda y: (y * upstream).sum(), inputs={"x": x})


learned_gradients = Check("learned_gradients", _probe_learned_gradients)
