"""Judges for assignment 06 (probes in course/checks/positional_encoding.py): the sinusoidal table from its formula in
float64, PositionalEncoding as x + that table, LearnedPositionalEmbedding as x + the check's embedding weights, and
the typical mistakes they can name."""

import math
from collections.abc import Iterable
from types import MappingProxyType

import torch

from course.checks import modules
from course.checks.compare import (
    NOT_IMPLEMENTED,
    WRONG_SHAPE,
    Mistake,
    close,
    expect_close,
    fail,
    output,
    tensor,
    tolerance,
)
from course.checks.evidence import Evidence
from course.checks.positional_encoding import (
    ADDS_CASES,
    ADDS_MAX_LEN,
    BUFFER_CASE,
    DROPOUT_CASE,
    GRAD_CASE,
    LEARNED_CASES,
    LEARNED_STRUCTURE,
    LONG_MAX_LEN,
    ODD_ANCHOR,
    ORACLE_CASES,
    TABLE_SIZES,
    buffer_x,
    dropout_x,
    grad_inputs,
    learned_x,
    long_x,
    oracle_x,
    secret_adds_x,
    secret_buffer_case,
    secret_sizes,
)
from course.checks.seeds import grading
from course.judges import judge

TABLE_NAME = "sinusoidal_positional_encoding(max_len, k)"
MODULE_NAME = "PositionalEncoding"
LEARNED_NAME = "LearnedPositionalEmbedding"

# float32 sines of angles up to ~100 rad, computed in different but correct ways, differ by ~1e-5
TABLE_TOLERANCE = MappingProxyType({"rtol": 1e-4, "atol": 2e-4})

# ---------------------------------------------------------------- typical mistakes

SIN_COS_SWAPPED = Mistake("sin-cos-swapped", "sin and cos are swapped: the even columns 0, 2, 4, … hold the sines, "
                          "the odd ones the cosines.")
EXPONENT_I = Mistake("exponent-i-over-k", "the exponent is i/k instead of 2i/k (i = 0, 1, …, k/2 − 1 counts the "
                     "sin/cos pairs).")
EXPONENT_COLUMN = Mistake("exponent-column-index", "the exponent uses 2j/k with j the column index; it is 2i/k with "
                          "i the pair index, i.e. the column index of the sine, j = 2i, over k.")
CONCATENATED = Mistake("concatenated", "the sines and cosines are concatenated (all sines, then all cosines); they "
                       "should be interleaved: column 2i holds a sine, column 2i + 1 the cosine of the same angle.")
POSITIONS_FROM_1 = Mistake("positions-from-1", "the positions start at 1; the first row is position 0 (sin 0 = 0, "
                           "cos 0 = 1).")
ONE_POSITION = Mistake("every-row-position-0", "every row is the encoding of position 0: are the positions a column "
                       "(max_len, 1) that broadcasts against the frequencies (k/2,)?")
TABLE_TRANSPOSED = Mistake("table-transposed", "positions should run down the rows: the table has shape (max_len, k) "
                           "and row p is the encoding of position p.")
FLOAT64 = Mistake("float64", "it should be torch.float32 like the embeddings it is added to. (NumPy and math "
                  "computations give float64: convert with .float().)")
ODD_ACCEPTED = Mistake("odd-k-accepted", "sinusoidal_positional_encoding(10, 5) returned a table for an odd k = 5. "
                       "The sines and cosines come in pairs, so k must be even: raise a ValueError that says so.")
ODD_WRONG_ERROR = Mistake("odd-k-wrong-error", "An odd k should be caught first, with a clear message: "
                          "`if k % 2: raise ValueError(...)`.")

TABLE_IS_PARAMETER = Mistake("table-is-parameter", "The sinusoidal table is fixed, not a parameter: register it with "
                             "self.register_buffer('table', ...), which moves it with .to(device) and saves it, but "
                             "never trains it.")
NOT_A_BUFFER = Mistake("table-not-a-buffer",
                       "Use self.register_buffer('table', sinusoidal_positional_encoding(max_len, k)).")
BUFFER_TRANSPOSED = Mistake("buffer-transposed", "positions should run down the rows of the table buffer: "
                            "(max_len, k).")
FIRST_ROW_ONLY = Mistake("first-row-everywhere", "every position gets the encoding of position 0. The whole "
                         "table[:t] — one row per position — is added, not a single row. (A (max_len, 1, k) table "
                         "indexed by x.shape[0] does this for a batch of 1.)")
BATCH_INDEXED = Mistake("batch-indexed", "sequence i of the batch gets the encoding of position i at every position: "
                        "the table is indexed by the batch dimension (table[:x.shape[0]]) instead of the positions "
                        "(table[:x.shape[1]]).")
RESCALED = Mistake("input-rescaled", "the input is rescaled inside the encoding (x·√k + table). Only the table is "
                   "added; any scaling of the embeddings belongs to the embedding layer.")
TABLE_RETURNED = Mistake("table-returned", "the table is returned instead of added to x: return x + table[:t].")
NO_LENGTH_CHECK = Mistake("no-length-check", "Check the length first and raise a ValueError that names it and "
                          "max_len.")
DROPOUT_IGNORED = Mistake("dropout-ignored", "Apply nn.Dropout(dropout) to the sum x + table.")
DROPOUT_IN_EVAL = Mistake("dropout-in-eval", "use nn.Dropout (or F.dropout(..., training=self.training)), which is "
                          "off in eval mode.")

EMB_RETURNED = Mistake("embedding-returned", "the position embeddings are returned instead of added to x: return "
                       "x + embedding(positions).")
EMB_FIRST_ROW = Mistake("embedding-first-row-everywhere", "every position gets the embedding of position 0: look up "
                        "torch.arange(t), one row per position.")
EMB_FROM_1 = Mistake("embedding-positions-from-1", "the positions start at 1; the first position is 0: "
                     "torch.arange(t).")
EMB_BATCH = Mistake("embedding-batch-indexed", "sequence i of the batch gets the embedding of position i: the "
                    "positions come from x.shape[0] (the batch) instead of x.shape[1].")
EMB_RESCALED = Mistake("embedding-input-rescaled", "the input is rescaled (x·√k + embedding): only the position "
                       "embedding is added.")
NOT_ONE_EMBEDDING = Mistake("not-one-embedding", "it should hold one nn.Embedding(max_len, k).")
EMB_SWAPPED = Mistake("embedding-sizes-swapped", "The arguments are swapped: nn.Embedding(number of positions, size).")
EMB_SIZE = Mistake("embedding-size", "it should be nn.Embedding(max_len, k): one learned row per position.")
PARAMETER_COUNT = Mistake("parameter-count", "one embedding of max_len × k values is all it needs.")
EMB_CUT_OFF = Mistake("embedding-cut-off", "the embedding receives no gradient, so it never learns. Look up "
                      "torch.arange(t) in the embedding (or slice embedding.weight, without .data or .detach()) and "
                      "add the result to x.")


# ---------------------------------------------------------------- comparing with the table's tolerance

def _tolerance(device: str) -> dict[str, float]:
    """The looser of the table's tolerance and the device's (float32 sines of large angles differ by ~1e-5)."""
    tol = tolerance(device)
    return {name: max(tol[name], TABLE_TOLERANCE[name]) for name in tol}


def _close(actual: torch.Tensor, expected: torch.Tensor, device: str) -> bool:
    return close(actual, expected, **_tolerance(device))


def _expect(actual: torch.Tensor, expected: torch.Tensor, *, what: str, device: str,
            mistakes: Iterable[tuple[Mistake, torch.Tensor]] = (), otherwise: str, case: str = "") -> None:
    """expect_close with the table's tolerance: fail unless actual matches, naming the mistake it matches."""
    __tracebackhide__ = True
    if _close(actual, expected, device):
        return
    if not bool(torch.isfinite(actual.detach()).all()):
        fail(f"{what} contains NaN or infinite values. {otherwise}", expected, actual, case)
    for mistake, candidate in mistakes:
        if _close(actual, candidate, device):
            fail(f"{what} is not what was asked: {mistake.explanation}", expected, actual, case, mistake.id)
    fail(f"{what} does not match the reference. {otherwise}", expected, actual, case)


def _matches_any(actual: torch.Tensor, candidates: Iterable[torch.Tensor], device: str) -> bool:
    return any(_close(actual, candidate, device) for candidate in candidates)


# ---------------------------------------------------------------- the table by the formula

def _formula(max_len: int, k: int, first: int = 0, pair_exponent: float = 2.0, column_index: bool = False,
             swap: bool = False, concatenate: bool = False) -> torch.Tensor:
    """The table by the formula in float64, or one of its typical distortions (for naming mistakes)."""
    p = torch.arange(first, first + max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    i = torch.arange(k // 2, dtype=torch.float64)  # (k/2,) pair index
    exponent = (4 * i if column_index else pair_exponent * i) / k  # column_index: 2j/k with j = 2i
    angles = p / torch.pow(torch.tensor(10000.0, dtype=torch.float64), exponent)  # (max_len, k/2)
    sin, cos = torch.sin(angles), torch.cos(angles)
    if swap:
        sin, cos = cos, sin
    if concatenate:
        return torch.cat([sin, cos], dim=1)  # (max_len, k)
    return torch.stack([sin, cos], dim=2).reshape(max_len, k)  # (max_len, k): sin, cos interleaved


def reference_table(max_len: int, k: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(same), computed in float64 and returned as float32."""
    return _formula(max_len, k).float()


def _table_mistakes(max_len: int, k: int) -> list[tuple[Mistake, torch.Tensor]]:
    return [
        (SIN_COS_SWAPPED, _formula(max_len, k, swap=True)),
        (EXPONENT_I, _formula(max_len, k, pair_exponent=1.0)),
        (EXPONENT_COLUMN, _formula(max_len, k, column_index=True)),
        (CONCATENATED, _formula(max_len, k, concatenate=True)),
        (POSITIONS_FROM_1, _formula(max_len, k, first=1)),
        (ONE_POSITION, _formula(1, k).expand(max_len, k)),
    ]


_TABLE_HINT = "It does not match the formula PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(p / 10000^(2i/k))."


def _table_output(ev: Evidence, key: str, max_len: int, k: int) -> torch.Tensor:
    """The recorded table, after checking it is a float32 tensor of shape (max_len, k) (positions down the rows)."""
    __tracebackhide__ = True
    what = f"sinusoidal_positional_encoding({max_len}, {k})"
    table = output(ev, key, what=what, device=False)
    if tuple(table.shape) == (k, max_len) and k != max_len:
        fail(f"{what} returned shape {(k, max_len)}: positions should run down the rows, so the table has shape "
             f"(max_len, k) = {(max_len, k)} and row p is the encoding of position p.", mistake=TABLE_TRANSPOSED.id)
    if tuple(table.shape) != (max_len, k):
        fail(f"{what} returned shape {tuple(table.shape)}, expected (max_len, k) = {(max_len, k)}.",
             mistake=WRONG_SHAPE)
    if table.dtype != torch.float32:
        fail(f"{what} returned {table.dtype}; {FLOAT64.explanation}", mistake=FLOAT64.id)
    return table


def _expect_table(ev: Evidence, key: str, max_len: int, k: int, case: str) -> None:
    __tracebackhide__ = True
    table = _table_output(ev, key, max_len, k)
    _expect(table, _formula(max_len, k), what=TABLE_NAME, device="cpu", mistakes=_table_mistakes(max_len, k),
            otherwise=_TABLE_HINT, case=case)


# ---------------------------------------------------------------- sinusoidal_positional_encoding


@judge("table_by_hand")
def _judge_table_by_hand(ev: Evidence) -> None:
    """max_len=3, k=4: the frequencies are 1 and 1/100, so the rows are sin/cos of (p, p/100)."""
    _expect_table(ev, "table", 3, 4, case="max_len=3, k=4: row p = [sin p, cos p, sin(p/100), cos(p/100)]")
    if grading():
        _expect_secret_table(ev, secret_sizes(2800))


def _expect_secret_table(ev: Evidence, sizes: tuple[int, int]) -> None:
    """Under grading, the table of secret sizes recorded under table_secret against the formula."""
    __tracebackhide__ = True
    max_len, k = sizes
    _expect_table(ev, "table_secret", max_len, k, case=f"max_len={max_len}, k={k}")


def _expect_value_error(ev: Evidence, key: str, what: str, call: str, wrong: Mistake, accepted: str,
                        accepted_mistake: str) -> None:
    """The call recorded under key raised a ValueError; accepted is the message when it raised nothing."""
    __tracebackhide__ = True
    fact = ev.facts.get(key)
    if not isinstance(fact, dict):
        fail(f"The test recorded nothing for {call}: the check did not run to the end.")
    if fact.get("kind") != "raised":
        fail(accepted, mistake=accepted_mistake)
    if fact.get("not_implemented"):
        fail(f"{what} is not implemented yet: replace `raise NotImplementedError()` with your code.",
             mistake=NOT_IMPLEMENTED)
    if fact.get("type") != "ValueError":
        fail(f"{call} raised {str(fact.get('type'))[:80]}: {str(fact.get('message'))[:300]}. {wrong.explanation}",
             mistake=wrong.id)


@judge("table_odd_size")
def _judge_table_odd_size(ev: Evidence) -> None:
    """An odd k has no cosine partner for its last sine: raise a ValueError that says so."""
    _expect_value_error(ev, "odd", TABLE_NAME, "sinusoidal_positional_encoding(10, 5)", ODD_WRONG_ERROR,
                        ODD_ACCEPTED.explanation, ODD_ACCEPTED.id)
    _anchor_table(ev, "table", *ODD_ANCHOR)
    if grading():
        _anchor_table(ev, "table_secret", *secret_sizes(2810))


def _anchor_table(ev: Evidence, key: str, max_len: int, k: int) -> None:
    """The table recorded under key is the sinusoidal table (or one of its typical mistakes) of these sizes."""
    __tracebackhide__ = True
    table = output(ev, key, what=f"sinusoidal_positional_encoding({max_len}, {k})", device=False)
    expected = _formula(max_len, k)
    candidates = [expected, expected.T, *(m for _, m in _table_mistakes(max_len, k))]
    if not _matches_any(table, candidates, "cpu"):
        fail(f"{TABLE_NAME} raises a ValueError for an odd k, but for an even k it does not compute the sinusoidal "
             f"table. {_TABLE_HINT}", expected, table, case=f"max_len={max_len}, k={k}")


@judge("table_oracle")
def _judge_table_oracle(ev: Evidence) -> None:
    """Several sizes against the formula computed in float64."""
    for i, (max_len, k) in enumerate(TABLE_SIZES):
        _expect_table(ev, f"table{i}", max_len, k, case=f"max_len={max_len}, k={k}")
    if grading():
        _expect_secret_table(ev, secret_sizes(2820))


# ---------------------------------------------------------------- PositionalEncoding

_MODULE_HINT = ("forward(x) should return dropout(x + table[:t]) with t = x.shape[1], the table broadcast over the "
                "batch.")


def _shape_of(entry: object) -> tuple[int, ...] | None:
    if isinstance(entry, list) and len(entry) >= 2 and isinstance(entry[1], list) and all(
            isinstance(n, int) for n in entry[1]):
        return tuple(entry[1])
    return None


def _table_buffer(ev: Evidence, key: str, max_len: int, k: int, what: str) -> int:
    """No parameters, and a registered buffer holding max_len·k values with positions down the rows; its index."""
    __tracebackhide__ = True
    modules.built(ev, key, what)
    params = ev.facts.get(f"{key}.params")
    buffers = ev.facts.get(f"{key}.buffers")
    if not isinstance(params, list) or not isinstance(buffers, list):
        fail(f"The test recorded nothing about the buffers of {what}: the check did not run to the end.")
    if params:
        names = [str(p[0])[:40] for p in params if isinstance(p, list) and p]
        fail(f"{what} registers parameters {names[:4]}. {TABLE_IS_PARAMETER.explanation}",
             mistake=TABLE_IS_PARAMETER.id)
    found = [i for i, b in enumerate(buffers)
             if (shape := _shape_of(b)) is not None and math.prod(shape) == max_len * k]
    if not found:
        plain = [str(name)[:40] for name in ev.facts.get(f"{key}.plain") or []]
        hint = (f" The table is a plain tensor attribute ({', '.join(plain)}), which .to(device) does not move."
                if plain else "")
        fail(f"{what} has no registered buffer holding the ({max_len}, {k}) table.{hint} {NOT_A_BUFFER.explanation}",
             mistake=NOT_A_BUFFER.id)
    shape = _shape_of(buffers[found[0]])
    squeezed = tuple(n for n in shape if n != 1)
    if max_len > 1 and squeezed == (k, max_len) and k != max_len:
        fail(f"{what}'s table buffer has shape {shape}: {BUFFER_TRANSPOSED.explanation} = {(max_len, k)}.",
             mistake=BUFFER_TRANSPOSED.id)
    devices = ev.facts.get(f"{key}.buffer_devices")
    if isinstance(devices, list) and found[0] < len(devices) and devices[found[0]] != ev.device:
        fail(f"After .to({ev.device}) the table of {what} is still on {str(devices[found[0]])[:20]}. Register it as "
             "a buffer.")
    return found[0]


def _module_mistakes(x: torch.Tensor, max_len: int) -> list[tuple[Mistake, torch.Tensor]]:
    """What typical mistakes of PositionalEncoding (or a typically wrong table inside it) give on x."""
    b, t, k = x.shape
    table = _formula(max_len, k)
    found = [(FIRST_ROW_ONLY, x + table[0])]
    if b <= max_len:
        found.append((BATCH_INDEXED, x + table[:b, None]))
    found += [(RESCALED, x * math.sqrt(k) + table[:t]), (TABLE_RETURNED, table[:t].expand(b, t, k))]
    found += [(Mistake(m.id, f"the table it adds is not the sinusoidal encoding: {m.explanation}"), x + bad[:t])
              for m, bad in _table_mistakes(max_len, k)]
    return found


def _expect_encoded(ev: Evidence, key: str, x: torch.Tensor, max_len: int, case: str) -> torch.Tensor:
    __tracebackhide__ = True
    y = output(ev, key, what=f"{MODULE_NAME}.forward(x)", shape=tuple(x.shape), hint=_MODULE_HINT)
    _expect(y, x + _formula(max_len, x.shape[-1])[: x.shape[1]], what=f"{MODULE_NAME}.forward(x)", device=ev.device,
            mistakes=_module_mistakes(x, max_len), otherwise=_MODULE_HINT, case=case)
    return y


def _anchor(ev: Evidence, key: str, x: torch.Tensor, max_len: int, claim: str, case: str) -> None:
    """The module's output on x is what PositionalEncoding (or one of its typical mistakes) computes."""
    __tracebackhide__ = True
    y = output(ev, key, what=f"{MODULE_NAME}.forward(x)", shape=tuple(x.shape), hint=_MODULE_HINT)
    expected = x + _formula(max_len, x.shape[-1])[: x.shape[1]]
    if not _matches_any(y, [expected, *(m for _, m in _module_mistakes(x, max_len))], ev.device):
        fail(f"{claim}, but it is not the positional encoding: {_MODULE_HINT}", expected, y, case=case)


# ---------------------------------------------------------------- PositionalEncoding: checks


@judge("positional_encoding_buffer")
def _judge_buffer(ev: Evidence) -> None:
    """No parameters; the table a registered buffer, shape (max_len, k), holding the sinusoidal encoding."""
    k, max_len = BUFFER_CASE
    _expect_buffer(ev, "module", "y", k, max_len, buffer_x())
    if grading():
        k, max_len, x = secret_buffer_case()
        _expect_buffer(ev, "secret", "y_secret", k, max_len, x)


def _expect_buffer(ev: Evidence, key: str, y_key: str, k: int, max_len: int, x: torch.Tensor) -> None:
    """The module recorded under key has the table buffer, and its output on x (under y_key) is the encoding."""
    __tracebackhide__ = True
    what = f"{MODULE_NAME}({k}, max_len={max_len})"
    _table_buffer(ev, key, max_len, k, what)
    table = tensor(ev, f"{key}.table")
    if table is None or table.numel() != max_len * k:
        fail(f"The test recorded no table buffer of {what}: the check did not run to the end.")
    _expect(table.reshape(max_len, k), _formula(max_len, k), what=f"{what}'s table buffer", device="cpu",
            mistakes=_table_mistakes(max_len, k), case=f"max_len={max_len}, k={k}",
            otherwise=f"Build it with your function from exercise 1: sinusoidal_positional_encoding({max_len}, {k}).")
    _anchor(ev, y_key, x, max_len, f"{what} holds the right table buffer", f"x of shape {tuple(x.shape)}")


@judge("positional_encoding_adds")
def _judge_adds(ev: Evidence) -> None:
    """Zeros in give the table out; the same table row is added at one position of every sequence."""
    modules.built(ev, "module", f"{MODULE_NAME}(4, max_len={ADDS_MAX_LEN})")
    for i, (shape, fill, case) in enumerate(ADDS_CASES):
        _expect_encoded(ev, f"y{i}", torch.full(shape, fill), ADDS_MAX_LEN, case)
    if grading():
        x = secret_adds_x()
        _expect_encoded(ev, "y_secret", x, ADDS_MAX_LEN, f"x of shape {tuple(x.shape)}, max_len={ADDS_MAX_LEN}")


@judge("positional_encoding_too_long")
def _judge_too_long(ev: Evidence) -> None:
    """A sequence longer than max_len has no row in the table: a ValueError that says so."""
    what = f"{MODULE_NAME}(4, max_len={LONG_MAX_LEN})"
    modules.built(ev, "module", what)
    fact = ev.facts.get("long")
    shape = fact.get("shape") if isinstance(fact, dict) and fact.get("kind") == "tensor" else None
    _expect_value_error(ev, "long", MODULE_NAME, f"{what} on a sequence of length 7", NO_LENGTH_CHECK,
                        f"{what} accepted a sequence of length 7 and returned "
                        f"{f'shape {tuple(shape)}' if isinstance(shape, list) else 'a value'}. The table has no row "
                        f"for position 6: raise a ValueError. {NO_LENGTH_CHECK.explanation}", NO_LENGTH_CHECK.id)
    _anchor(ev, "y", long_x(), LONG_MAX_LEN, f"{what} raises a ValueError for a sequence of length 7",
            "x of shape (2, 6, 4)")


@judge("positional_encoding_oracle")
def _judge_oracle(ev: Evidence) -> None:
    """Random inputs of several shapes on the device: x + the sinusoidal table, the buffer moved with .to(device)."""
    for i, (b, t, k, max_len) in enumerate(ORACLE_CASES):
        _table_buffer(ev, f"module{i}", max_len, k, f"{MODULE_NAME}({k}, max_len={max_len})")
        _expect_encoded(ev, f"y{i}", oracle_x(i, b, t, k), max_len, f"x of shape {(b, t, k)}, max_len={max_len}")


@judge("positional_encoding_dropout")
def _judge_dropout(ev: Evidence) -> None:
    """With dropout=0.5, training zeroes about half of x + table and scales the rest by 2; evaluation does not."""
    b, t, k, max_len = DROPOUT_CASE
    what = f"{MODULE_NAME}({k}, max_len={max_len}, dropout=0.5)"
    modules.built(ev, "dropout", what)
    x = dropout_x()
    expected = x + _formula(max_len, k)[:t]
    y_eval = output(ev, "y_eval", what=f"{MODULE_NAME}.forward(x) in eval mode", shape=(b, t, k), hint=_MODULE_HINT)
    if not _close(y_eval, expected, ev.device):
        dropped = float((y_eval == 0).to(torch.float64).mean())
        fail(f"In eval mode {what} should return x + table unchanged: {DROPOUT_IN_EVAL.explanation}", expected,
             y_eval, mistake=DROPOUT_IN_EVAL.id if dropped > 0.2 else None)
    y_train = output(ev, "y_train", what=f"{MODULE_NAME}.forward(x) in training mode", shape=(b, t, k),
                     hint=_MODULE_HINT)
    zeros = float((y_train == 0).to(torch.float64).mean())
    kept = y_train != 0
    if not 0.35 < zeros < 0.65 or not _close(y_train[kept], 2 * expected[kept], ev.device):
        fail(f"In training mode {what} should zero about half of x + table and double the rest; {zeros:.0%} of the "
             f"outputs are zero. {DROPOUT_IGNORED.explanation}", 2 * expected, y_train,
             case="training mode: each value 0 or 2·(x + table)",
             mistake=DROPOUT_IGNORED.id if _close(y_train, expected, ev.device) else None)


# ---------------------------------------------------------------- LearnedPositionalEmbedding

_LEARNED_HINT = ("forward(x) should return x + embedding(positions) with positions = torch.arange(t, device=x.device) "
                 "and t = x.shape[1].")


def _embedding_weight(ev: Evidence, key: str, max_len: int, k: int, seed: int) -> tuple[str, torch.Tensor]:
    """One nn.Embedding(max_len, k) and nothing else; its parameter's name and the values the probe loaded."""
    __tracebackhide__ = True
    what = f"{LEARNED_NAME}({max_len}, {k})"
    modules.built(ev, key, what)
    described = ev.facts.get(f"{key}.modules")
    if not isinstance(described, list) or not isinstance(ev.facts.get(f"{key}.params"), list):
        fail(f"The test recorded nothing about the layers of {what}: the check did not run to the end.")
    embeddings = [m for m in described if isinstance(m, dict) and "num_embeddings" in m]
    if len(embeddings) != 1:
        fail(f"{what} should hold one nn.Embedding(max_len, k); found {len(embeddings)}.",
             mistake=NOT_ONE_EMBEDDING.id)
    emb = embeddings[0]
    sizes = (emb.get("num_embeddings"), emb.get("embedding_dim"))
    if sizes != (max_len, k):
        swapped = sizes == (k, max_len)
        fail(f"{what} holds nn.Embedding({sizes[0]}, {sizes[1]}); it should be nn.Embedding(max_len, k) = "
             f"nn.Embedding({max_len}, {k}): one learned row per position."
             + (f" {EMB_SWAPPED.explanation}" if swapped else ""),
             mistake=EMB_SWAPPED.id if swapped else EMB_SIZE.id)
    count = modules.parameter_count(ev, key)
    if count != max_len * k:
        fail(f"{what} has {count} parameters; {PARAMETER_COUNT.explanation} (= {max_len * k})",
             mistake=PARAMETER_COUNT.id)
    name = f"{emb.get('name')}.weight" if emb.get("name") else "weight"
    loaded = modules.loaded(ev, key, seed)
    if name not in loaded or tuple(loaded[name].shape) != (max_len, k):
        fail(f"{what}'s embedding has no registered weight {name} of shape {(max_len, k)}.")
    return name, loaded[name]


def _learned_mistakes(x: torch.Tensor, weight: torch.Tensor) -> list[tuple[Mistake, torch.Tensor]]:
    b, t, k = x.shape
    found = [(EMB_RETURNED, weight[:t].expand(b, t, k)), (EMB_FIRST_ROW, x + weight[0])]
    if t + 1 <= weight.shape[0]:
        found.append((EMB_FROM_1, x + weight[1: t + 1]))
    if b <= weight.shape[0]:
        found.append((EMB_BATCH, x + weight[:b, None]))
    found.append((EMB_RESCALED, x * math.sqrt(k) + weight[:t]))
    return found


def _expect_learned(ev: Evidence, key: str, x: torch.Tensor, weight: torch.Tensor, case: str) -> None:
    __tracebackhide__ = True
    y = output(ev, key, what=f"{LEARNED_NAME}.forward(x)", shape=tuple(x.shape), hint=_LEARNED_HINT)
    expect_close(y, x + weight[: x.shape[1]], what=f"{LEARNED_NAME}.forward(x)", device=ev.device,
                 mistakes=_learned_mistakes(x, weight), otherwise=_LEARNED_HINT, case=case)


@judge("learned_structure")
def _judge_learned_structure(ev: Evidence) -> None:
    """One nn.Embedding(max_len, k); ones in give 1 + its first t rows."""
    max_len, k = LEARNED_STRUCTURE
    _, weight = _embedding_weight(ev, "module", max_len, k, 3300)
    _expect_learned(ev, "y", torch.ones(2, 4, k), weight,
                    "x = ones of shape (2, 4, 6): the output is 1 + the embedding's first 4 rows")


@judge("learned_oracle")
def _judge_learned_oracle(ev: Evidence) -> None:
    """The check's weights and random inputs of several shapes on the device: x + weight[:t]."""
    for i, (b, t, max_len, k) in enumerate(LEARNED_CASES):
        _, weight = _embedding_weight(ev, f"module{i}", max_len, k, 3200 + i)
        _expect_learned(ev, f"y{i}", learned_x(i, b, t, k), weight, f"x of shape {(b, t, k)}, max_len={max_len}")


@judge("learned_gradients")
def _judge_learned_gradients(ev: Evidence) -> None:
    """A small case: x + weight[:t], and the gradient of a loss reaches the input unchanged and exactly the rows
    of the positions used, as autograd through the oracle says."""
    b, t, max_len, k = GRAD_CASE
    name, weight = _embedding_weight(ev, "grad_module", max_len, k, 3230)
    x, upstream = grad_inputs()
    case = f"x of shape {(b, t, k)}, max_len={max_len}"
    _expect_learned(ev, "y_grad", x, weight, case)
    modules.expect_attached(ev, "y_grad", f"{LEARNED_NAME}.forward")
    w_grad = tensor(ev, f"grad.{name}", shape=(max_len, k))
    if w_grad is None or not bool(w_grad.any()):
        fail(f"{LEARNED_NAME}: {EMB_CUT_OFF.explanation}", mistake=EMB_CUT_OFF.id)
    expected = modules.autograd(lambda leaves, x: x + leaves[name][:t], {name: weight}, {"x": x}, upstream)
    modules.expect_gradients(ev, expected, owner=f"{LEARNED_NAME}.forward", case=case,
                             oracle=f"x + weight[:t], which reaches exactly the rows of positions 0 … {t - 1}",
                             hints={"x": "The input x should pass through unchanged (gradient 1): return x + …."})
