"""Judges for assignment 06 (probes in course/checks/positional_encoding.py): the sinusoidal table from its formula in
float64, PositionalEncoding as x + that table, LearnedPositionalEmbedding as x + the check's embedding weights, and
the typical mistakes they can name: those seen in an output written as a student writes them
(course/judges/variants.py), each before the judges that run it; those seen in a structure (a dtype, a buffer, an
error) declared beside the judge that names them."""

import math
import re
from collections.abc import Iterator
from functools import partial
from itertools import chain
from types import MappingProxyType

import torch

from course.checks import modules
from course.checks import positional_encoding as probes
from course.checks.compare import (
    Mistake,
    OnGpus,
    expect_close,
    expect_on_gpus,
    expect_value_error,
    fail,
    matches_any,
    output,
    tensor,
)
from course.checks.evidence import Evidence, fact_key, gradient_key
from course.checks.kinds import Built, Case, drawn
from course.judges import judge, kinds
from course.judges.kinds import Advice, ForwardOracle, against_forward, each_case, expect_forward_case
from course.judges.variants import Simulator, Variants, simulators

TABLE_NAME = "sinusoidal_positional_encoding(max_len, k)"
MODULE_NAME = "PositionalEncoding"
LEARNED_NAME = "LearnedPositionalEmbedding"

# float32 sines of angles up to ~100 rad, computed in different but correct ways, differ by ~1e-5
TABLE_TOLERANCE = MappingProxyType({"rtol": 1e-4, "atol": 2e-4})

# ---------------------------------------------------------------- typical mistakes
# Edits change the reference answers of course/positional_encoding.py:
#     sinusoidal_positional_encoding:
#         positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
#         frequencies = torch.exp(torch.arange(0, k, 2, dtype=torch.float32) * (-math.log(10000.0) / k))  # (k/2,)
#         table[:, 0::2] = torch.sin(positions * frequencies); table[:, 1::2] = torch.cos(positions * frequencies)
# When an output matches two of them, the first declared is named. The code of the mistakes named by a structure, not
# an output, and of those every check names (a wrong shape, an error, a detached output) is in
# catalogue/positional_encoding.py.

WRITTEN = Variants(__name__, reference="course.positional_encoding")
edit, rewrite = WRITTEN.edit, WRITTEN.rewrite

# ---------------------------------------------------------------- the table: mistakes and oracle

TABLE = "sinusoidal_positional_encoding"
SINES, COSINES = "table[:, 0::2] = torch.sin(", "table[:, 1::2] = torch.cos("
ANGLES = "positions * frequencies"

edit("table-sin-cos-swapped", TABLE, (SINES, "table[:, 0::2] = torch.cos("), (COSINES, "table[:, 1::2] = torch.sin("),
     mistake="sin-cos-swapped",
     says="sin and cos are swapped: the even columns 0, 2, 4, … hold the sines, the odd ones the cosines.")
edit("table-exponent-i", TABLE, ("torch.arange(0, k, 2, dtype", "torch.arange(k // 2, dtype"),
     mistake="exponent-i-over-k",
     says="the exponent is i/k instead of 2i/k (i = 0, 1, …, k/2 − 1 counts the sin/cos pairs).")
edit("table-exponent-column-index", TABLE, ("torch.exp(torch.arange(0, k, 2", "torch.exp(2 * torch.arange(0, k, 2"),
     mistake="exponent-column-index",
     says="the exponent uses 2j/k with j the column index; it is 2i/k with i the pair index, i.e. the column index "
          "of the sine, j = 2i, over k.")
edit("table-concatenated", TABLE,
     (f"{SINES}{ANGLES})  # (max_len, k/2)\n    {COSINES}{ANGLES})",
      f"table = torch.cat([torch.sin({ANGLES}), torch.cos({ANGLES})], dim=1)"),
     mistake="concatenated",
     says="the sines and cosines are concatenated (all sines, then all cosines); they should be interleaved: column "
          "2i holds a sine, column 2i + 1 the cosine of the same angle.")
edit("table-positions-from-1", TABLE, ("torch.arange(max_len, dtype", "torch.arange(1, max_len + 1, dtype"),
     mistake="positions-from-1", says="the positions start at 1; the first row is position 0 (sin 0 = 0, cos 0 = 1).")


@rewrite(TABLE, "every-row-position-0",
         says="every row is the encoding of position 0: are the positions a column (max_len, 1) that broadcasts "
              "against the frequencies (k/2,)?")
def table_position_never_advances(max_len, k):
    if k % 2:
        raise ValueError(f"k must be even, got {k}")
    frequencies = 1.0 / 10000 ** (torch.arange(0, k, 2, dtype=torch.float32) / k)
    table = torch.zeros(max_len, k)
    position = 0
    for row in table:
        row[0::2] = torch.sin(position * frequencies)
        row[1::2] = torch.cos(position * frequencies)
    return table


def _formula(max_len: int, k: int) -> torch.Tensor:
    """The table (max_len, k) by the formula, in float64."""
    p = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    i = torch.arange(k // 2, dtype=torch.float64)  # (k/2,) pair index; the column index of the sine is j = 2i
    angles = p / torch.pow(torch.tensor(10000.0, dtype=torch.float64), 2 * i / k)  # (max_len, k/2)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=2).reshape(max_len, k)  # sin, cos interleaved


def _table_mistakes(max_len: int, k: int) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """What the written mistakes of the table give for these sizes, lazily, in declaration order."""
    return WRITTEN.outputs(TABLE, max_len=max_len, k=k)


_TABLE_HINT = "It does not match the formula PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(p / 10000^(2i/k))."


TABLE_TRANSPOSED = WRITTEN.mistake("table-transposed", "positions should run down the rows: the table has shape "
                                   "(max_len, k) and row p is the encoding of position p.")
FLOAT64 = WRITTEN.mistake("float64", "it should be torch.float32 like the embeddings it is added to. (NumPy and math "
                          "computations give float64: convert with .float().)")


def _expect_table(ev: Evidence, case: Case, anchor: bool = False) -> None:
    """The table recorded for case: a float32 tensor of shape (max_len, k) (positions down the rows) holding the
    formula's values; anchor: only the formula's values, right or typically wrong (in any shape or dtype)."""
    __tracebackhide__ = True
    max_len, k = case.inputs().values()
    what, label = f"sinusoidal_positional_encoding({max_len}, {k})", f"max_len={max_len}, k={k}"
    expected, typical = _formula(max_len, k), _table_mistakes(max_len, k)
    if anchor:
        table = output(ev, case.key, what=what, device=False)
        if not matches_any(table, chain([expected, expected.T], (m for _, m in typical)), "cpu", TABLE_TOLERANCE):
            fail(f"{TABLE_NAME} raises a ValueError for an odd k, but for an even k it does not compute the "
                 f"sinusoidal table. {_TABLE_HINT}", expected, table, case=label)
        return
    table = output(ev, case.key, what=what, device=False, shape=(max_len, k),
                   shape_hints={(k, max_len): TABLE_TRANSPOSED})
    if table.dtype != torch.float32:
        fail(f"{what} returned {table.dtype}; {FLOAT64.explanation}", mistake=FLOAT64)
    expect_close(table, expected, what=TABLE_NAME, device="cpu", mistakes=typical, otherwise=_TABLE_HINT,
                 case=label if case.secret else case.label, looser=TABLE_TOLERANCE)


# ---------------------------------------------------------------- sinusoidal_positional_encoding: the checks

each_case(probes.table_by_hand, _expect_table,
          passed="max_len=3, k=4: the frequencies are 1 and 1/100, so the rows are sin/cos of (p, p/100).")


ODD_K_ACCEPTED = WRITTEN.mistake("odd-k-accepted", "an odd k was accepted. The sines and cosines come in pairs, so k "
                                 "must be even: raise a ValueError that says so.")
ODD_K_WRONG_ERROR = WRITTEN.mistake("odd-k-wrong-error", "An odd k should be caught first, with a clear message: `if "
                                    "k % 2: raise ValueError(...)`.")


@judge("table_odd_size")
def _judge_table_odd_size(ev: Evidence) -> None:
    """An odd k has no cosine partner for its last sine: raise a ValueError that says so."""
    expect_value_error(ev, probes.ODD.key, "sinusoidal_positional_encoding(10, 5)", ODD_K_ACCEPTED,
                       ODD_K_WRONG_ERROR)
    for case in drawn(probes.table_odd_size.cases[1:]):
        _expect_table(ev, case, anchor=True)


each_case(probes.table_oracle, _expect_table, passed="Several sizes against the formula computed in float64.")


# ---------------------------------------------------------------- PositionalEncoding

_MODULE_HINT = ("forward(x) should return dropout(x + table[:t]) with t = x.shape[1], the table broadcast over the "
                "batch.")

# Edits change the reference's forward: return self.dropout(x + self.table[:t]), t = x.shape[1]
ADDED = "x + self.table[:t]"

edit("pe-first-row", MODULE_NAME, ("self.table[:t]", "self.table[0]"), mistake="first-row-everywhere",
     says="every position gets the encoding of position 0. The whole table[:t] — one row per position — is added, "
          "not a single row. (A (max_len, 1, k) table indexed by x.shape[0] does this for a batch of 1.)")
# (b, 1, k): row i in sequence i; a batch longer than the table does not broadcast, and matches nothing
edit("pe-batch-indexed", MODULE_NAME, ("self.table[:t]", "self.table[:x.shape[0]].unsqueeze(1)"),
     mistake="batch-indexed",
     says="sequence i of the batch gets the encoding of position i at every position: the table is indexed by the "
          "batch dimension (table[:x.shape[0]]) instead of the positions (table[:x.shape[1]]).")
edit("pe-rescaled", MODULE_NAME, (ADDED, "x * math.sqrt(x.shape[-1]) + self.table[:t]"), mistake="input-rescaled",
     says="the input is rescaled inside the encoding (x·√k + table). Only the table is added; any scaling of the "
          "embeddings belongs to the embedding layer.")
edit("pe-returns-table", MODULE_NAME, (ADDED, "self.table[:t].expand_as(x)"), mistake="table-returned",
     says="the table is returned instead of added to x: return x + table[:t].")


TABLE_IS_PARAMETER = WRITTEN.mistake("table-is-parameter", "The sinusoidal table is fixed, not a parameter: register "
                                     "it with self.register_buffer('table', ...), which moves it with .to(device) and "
                                     "saves it, but never trains it.")
TABLE_NOT_A_BUFFER = WRITTEN.mistake("table-not-a-buffer", "Use self.register_buffer('table', "
                                     "sinusoidal_positional_encoding(max_len, k)).")
BUFFER_TRANSPOSED = WRITTEN.mistake("buffer-transposed", "positions should run down the rows of the table buffer: "
                                    "(max_len, k).")


def _table_buffer(ev: Evidence, key: str, max_len: int, k: int, what: str) -> None:
    """No parameters, and a registered buffer holding max_len·k values with positions down the rows."""
    __tracebackhide__ = True
    modules.built(ev, key, what)
    params, buffers = ev.facts.get(fact_key(key, "params")), ev.facts.get(fact_key(key, "buffers"))
    if not isinstance(params, list) or not isinstance(buffers, list):
        fail(f"The test recorded nothing about the buffers of {what}: the check did not run to the end.")
    if params:
        fail(f"{what} registers parameters. {TABLE_IS_PARAMETER.explanation}", mistake=TABLE_IS_PARAMETER)
    found = [tuple(b[1]) for b in buffers if isinstance(b, list) and len(b) >= 2 and isinstance(b[1], list)
             and all(isinstance(n, int) for n in b[1]) and math.prod(b[1]) == max_len * k]
    if not found:
        plain = ", ".join(str(name)[:40] for name in ev.facts.get(fact_key(key, "plain")) or [])
        fail(f"{what} has no registered buffer holding the ({max_len}, {k}) table."
             + (f" The table is a plain tensor attribute ({plain}), which .to(device) does not move." if plain else "")
             + f" {TABLE_NOT_A_BUFFER.explanation}", mistake=TABLE_NOT_A_BUFFER)
    if max_len > 1 and tuple(n for n in found[0] if n != 1) == (k, max_len) and k != max_len:
        fail(f"{what}'s table buffer has shape {found[0]}: {BUFFER_TRANSPOSED.explanation}",
             mistake=BUFFER_TRANSPOSED)


OTHER_DEFAULT = WRITTEN.mistake("default-max-len", "built without max_len, the module should hold the table of the "
                                "default the exercise gives, max_len=5000: keep the signature PositionalEncoding(k, "
                                "max_len=5000, dropout=0.0).")


def _expect_default_rows(ev: Evidence, key: str, max_len: int, k: int, what: str) -> None:
    """Built without max_len, the module's buffers hold a table of the default max_len rows (else no table of k
    columns at all, which _table_buffer names)."""
    __tracebackhide__ = True
    buffers = ev.facts.get(fact_key(key, "buffers"))
    shapes = [b[1] for b in buffers if isinstance(b, list) and len(b) >= 2 and isinstance(b[1], list)
              and all(isinstance(n, int) for n in b[1])] if isinstance(buffers, list) else []
    tables = [shape for shape in shapes if shape and shape[-1] == k]
    if tables and all(math.prod(shape) != max_len * k for shape in tables):
        fail(f"{what} holds a table buffer of shape {tuple(tables[0])}: {OTHER_DEFAULT.explanation}",
             mistake=OTHER_DEFAULT)


def _encoding_mistakes(x: torch.Tensor, max_len: int) -> Iterator[tuple[Mistake, torch.Tensor]]:
    """What the written mistakes of PositionalEncoding, built with (k, max_len), give on x, then the reference with
    each written mistake of the table inside it; lazily, in that order. A variant that cannot run on x (a batch
    longer than the table indexed by it) matches nothing."""
    k, t = x.shape[-1], x.shape[1]
    for written in WRITTEN.of(MODULE_NAME):
        try:
            with torch.no_grad():
                found = written.run(k, max_len=max_len)(x)
        except Exception:  # noqa: BLE001 - a variant that cannot run on these inputs matches nothing
            continue
        yield written.mistake, found
    for m, bad in _table_mistakes(max_len, k):
        yield Mistake(m.id, f"the table it adds is not the sinusoidal encoding: {m.explanation}"), x + bad[:t]


def _expect_encoding(ev: Evidence, case: Case, buffer: bool = True, table: bool = False, claim: str = "") -> None:
    """The module built for case (buffer: with no parameters and its table a buffer; table: that buffer against the
    formula) and its output on the case's x against x + table[:t], naming the typical mistake it matches; with a
    claim (a property the check awards: the table buffer, an error), it need only be one of those: right or
    typically wrong."""
    __tracebackhide__ = True
    inputs = case.inputs()
    key, x, max_len, k = inputs["module"], inputs["x"], inputs["max_len"], inputs["k"]
    what = f"{MODULE_NAME}({k}, max_len={max_len})"
    if inputs.get("default"):
        what = f"{MODULE_NAME}({k})"
        _expect_default_rows(ev, key, max_len, k, what)
    if buffer:
        _table_buffer(ev, key, max_len, k, what)
    else:
        modules.built(ev, key, what)
    if table:
        found = tensor(ev, fact_key(key, "table"))
        if found is None or found.numel() != max_len * k:
            fail(f"The test recorded no table buffer of {what}: the check did not run to the end.")
        expect_close(found.reshape(max_len, k), _formula(max_len, k), what=f"{what}'s table buffer",
                     device="cpu", mistakes=_table_mistakes(max_len, k), case=f"max_len={max_len}, k={k}",
                     looser=TABLE_TOLERANCE, otherwise=f"Build it with sinusoidal_positional_encoding({max_len}, {k}).")
        claim = f"{what} holds the right table buffer"
    y = output(ev, case.key, what=f"{MODULE_NAME}.forward(x)", shape=tuple(x.shape), hint=_MODULE_HINT)
    # the default table's 5,000 rows are judged by their shape above; its output needs only the rows x reaches
    rows = x.shape[1] if inputs.get("default") else max_len
    expected, typical = x + _formula(rows, k)[: x.shape[1]], _encoding_mistakes(x, rows)
    if not claim:
        expect_close(y, expected, what=f"{MODULE_NAME}.forward(x)", device=ev.device, mistakes=typical,
                     otherwise=_MODULE_HINT, case=case.label, looser=TABLE_TOLERANCE)
    elif not matches_any(y, chain([expected], (m for _, m in typical)), ev.device, TABLE_TOLERANCE):
        fail(f"{claim}, but it is not the positional encoding: {_MODULE_HINT}", expected, y, case=case.label)


# ---------------------------------------------------------------- PositionalEncoding: the checks

each_case(probes.positional_encoding_buffer, partial(_expect_encoding, table=True),
          passed="No parameters; the table a registered buffer, shape (max_len, k), holding the sinusoidal encoding.")
each_case(probes.positional_encoding_adds, partial(_expect_encoding, buffer=False),
          passed="Zeros in give the table out; the same table row is added at one position of every sequence.")
each_case(probes.positional_encoding_oracle, _expect_encoding,
          passed="Random inputs of several shapes on the device: x + the sinusoidal table, the buffer moved with "
                 ".to(device); max_len 5,000 by default.")


NO_LENGTH_CHECK = WRITTEN.mistake("no-length-check", "Check the length first and raise a ValueError that names it and "
                                  "max_len.")
LENGTH_ERROR_UNNAMED = WRITTEN.mistake("length-error-unnamed", "the ValueError should name both lengths, the "
                                       'sequence\'s t and max_len, e.g. f"sequence length {t} is longer than '
                                       'max_len={max_len}", so that whoever meets it knows what to change.')


@judge("positional_encoding_too_long")
def _judge_too_long(ev: Evidence) -> None:
    """A sequence longer than max_len has no row in the table: a ValueError that says so."""
    long, right = probes.positional_encoding_too_long.cases
    inputs = long.inputs()
    what = f"{MODULE_NAME}({inputs['k']}, max_len={inputs['max_len']})"
    modules.built(ev, inputs["module"], what)
    expect_value_error(ev, long.key, f"{what} on {long.label}", NO_LENGTH_CHECK)
    message = str(ev.facts[long.key].get("message", ""))
    if not {str(inputs["x"].shape[1]), str(inputs["max_len"])} <= set(re.findall(r"\d+", message)):
        fail(f"{what} on {long.label} raises ValueError({message[:200]!r}): "
             f"{LENGTH_ERROR_UNNAMED.explanation}", mistake=LENGTH_ERROR_UNNAMED)
    _expect_encoding(ev, right, buffer=False, claim=f"{what} raises a ValueError for {long.label}")


def _dropped_alone(found: torch.Tensor, part: torch.Tensor, device: str) -> bool:
    """found is part after a dropout of 0.5: between 35 % and 65 % of it zeroed, the rest doubled."""
    zeros, kept = float((found.abs() < 1e-5).to(torch.float64).mean()), found.abs() >= 1e-5
    return 0.35 < zeros < 0.65 and matches_any(found[kept], [2 * part[kept]], device, TABLE_TOLERANCE)


DROPOUT_IGNORED = WRITTEN.mistake("dropout-ignored", "Apply nn.Dropout(dropout) to the sum x + table.")
DROPOUT_IN_EVAL = WRITTEN.mistake("dropout-in-eval", "use nn.Dropout (or F.dropout(..., training=self.training)), "
                                  "which is off in eval mode.")
DROPOUT_BEFORE_SUM = WRITTEN.mistake("dropout-before-sum", "the dropout sits on one term of the sum. Apply it to the "
                                     "sum itself, dropout(x + table[:t]), as the original transformer does with the "
                                     "sums of the embeddings and the positional encodings.")


@judge("positional_encoding_dropout")
def _judge_dropout(ev: Evidence) -> None:
    """With dropout=0.5, training zeroes about half of x + table and scales the rest by 2; evaluation does not."""
    inputs = probes.DROPOUT.inputs()
    x, k, max_len = inputs["x"], inputs["k"], inputs["max_len"]
    what = f"{MODULE_NAME}({k}, max_len={max_len}, dropout=0.5)"
    modules.built(ev, inputs["module"], what)
    expected = x + _formula(max_len, k)[: x.shape[1]]
    y_eval = output(ev, "y_eval", what=f"{what} in eval mode", shape=tuple(x.shape), hint=_MODULE_HINT)
    if not matches_any(y_eval, [expected], ev.device, TABLE_TOLERANCE):
        fail(f"In eval mode {what} should return x + table unchanged: {DROPOUT_IN_EVAL.explanation}", expected,
             y_eval, mistake=DROPOUT_IN_EVAL if float((y_eval == 0).double().mean()) > 0.2 else None)
    y_train = output(ev, "y_train", what=f"{what} in training mode", shape=tuple(x.shape), hint=_MODULE_HINT)
    zeros, kept = float((y_train == 0).to(torch.float64).mean()), y_train != 0
    if not 0.35 < zeros < 0.65 or not matches_any(y_train[kept], [2 * expected[kept]], ev.device, TABLE_TOLERANCE):
        table = expected - x
        for part, rest, name in ((x, table, "x"), (table, x, "the table")):
            if _dropped_alone(y_train - rest, part, ev.device):
                fail(f"In training mode {what} drops {name} alone, before it is added: about half of {name} is "
                     f"zeroed and the rest doubled, and the other term is added whole. "
                     f"{DROPOUT_BEFORE_SUM.explanation}", 2 * expected, y_train, mistake=DROPOUT_BEFORE_SUM)
        fail(f"In training mode {what} should zero about half of x + table and double the rest; {zeros:.0%} of the "
             f"outputs are zero. {DROPOUT_IGNORED.explanation}", 2 * expected, y_train,
             mistake=DROPOUT_IGNORED if matches_any(y_train, [expected], ev.device, TABLE_TOLERANCE) else None)


# ---------------------------------------------------------------- LearnedPositionalEmbedding

_LEARNED_HINT = ("forward(x) should return x + embedding(positions) with positions = torch.arange(t, device=x.device) "
                 "and t = x.shape[1].")


NOT_ONE_EMBEDDING = WRITTEN.mistake("not-one-embedding", "it should hold one nn.Embedding(max_len, k).")
EMBEDDING_SIZES_SWAPPED = WRITTEN.mistake("embedding-sizes-swapped", "the arguments are swapped: nn.Embedding(number "
                                          "of positions, size).")
EMBEDDING_SIZE = WRITTEN.mistake("embedding-size", "it should be nn.Embedding(max_len, k): one learned row per "
                                 "position.")
PARAMETER_COUNT = WRITTEN.mistake("parameter-count", "one embedding of max_len × k values is all it needs.")


def _embedding_weight(ev: Evidence, built: Built) -> dict[str, torch.Tensor]:
    """One nn.Embedding(max_len, k) and nothing else: {its parameter's name: the values the probe loaded}."""
    __tracebackhide__ = True
    max_len, k = built.args
    what = f"{LEARNED_NAME}({max_len}, {k})"
    modules.built(ev, built.key, what)
    embeddings = [m for m in modules.described(ev, built.key).values() if "num_embeddings" in m]
    if len(embeddings) != 1:
        fail(f"{what} holds {len(embeddings)} nn.Embedding layers: {NOT_ONE_EMBEDDING.explanation}",
             mistake=NOT_ONE_EMBEDDING)
    sizes = (embeddings[0].get("num_embeddings"), embeddings[0].get("embedding_dim"))
    if sizes != (max_len, k):
        wrong = EMBEDDING_SIZES_SWAPPED if sizes == (k, max_len) else EMBEDDING_SIZE
        fail(f"{what} holds nn.Embedding{sizes}: {wrong.explanation}", mistake=wrong)
    if modules.parameter_count(ev, built.key) != max_len * k:
        fail(f"{what} has {modules.parameter_count(ev, built.key)} parameter values; "
             f"{PARAMETER_COUNT.explanation} (= {max_len * k})", mistake=PARAMETER_COUNT)
    name = f"{embeddings[0].get('name')}.weight" if embeddings[0].get("name") else "weight"
    return modules.expect_parameters(ev, built.key, what, {name: (max_len, k)}, built.seed)


def _learned(w: dict[str, torch.Tensor], max_len: int, k: int, x: torch.Tensor) -> torch.Tensor:
    """x (b, t, k) + the embedding (max_len, k) of positions 0 … t − 1."""
    (weight,) = w.values()
    return x + weight[: x.shape[1]]


# Edits change the reference's forward: return x + self.embedding(torch.arange(t, device=x.device)), t = x.shape[1]
LOOKED_UP = "x + self.embedding(torch.arange(t, device=x.device))"

edit("learned-returned-not-added", LEARNED_NAME,
     (LOOKED_UP, "self.embedding(torch.arange(t, device=x.device)).expand_as(x)"), mistake="embedding-returned",
     says="the position embeddings are returned instead of added to x: return x + embedding(positions).")
edit("learned-first-row", LEARNED_NAME, (LOOKED_UP, "x + self.embedding.weight[0]"),
     mistake="embedding-first-row-everywhere",
     says="every position gets the embedding of position 0: look up torch.arange(t), one row per position.")
# positions 1 … t need t + 1 rows, and a batch indexed needs b rows: where the table is shorter, it raises
edit("learned-positions-from-1", LEARNED_NAME, ("torch.arange(t, device", "torch.arange(1, t + 1, device"),
     mistake="embedding-positions-from-1", says="the positions start at 1; the first position is 0: torch.arange(t).")
edit("learned-batch-indexed", LEARNED_NAME,
     (LOOKED_UP, "x + self.embedding(torch.arange(x.shape[0], device=x.device)).unsqueeze(1)"),
     mistake="embedding-batch-indexed",
     says="sequence i of the batch gets the embedding of position i: the positions come from x.shape[0] (the batch) "
          "instead of x.shape[1].")
edit("learned-rescaled", LEARNED_NAME, ("x + self.embedding", "x * math.sqrt(x.shape[-1]) + self.embedding"),
     mistake="embedding-input-rescaled",
     says="the input is rescaled (x·√k + embedding): only the position embedding is added.")

_LEARNED_VARIANTS = simulators(WRITTEN, LEARNED_NAME)


def _as_reference(simulate: Simulator, w: dict[str, torch.Tensor], *args: object, **inputs: torch.Tensor
                  ) -> torch.Tensor:
    """simulate run with the student's embedding weight under the reference's name (embedding.weight); a variant
    that cannot run on these inputs (a position past the table) gives an empty tensor, which matches nothing."""
    (weight,) = w.values()
    try:
        return simulate({"embedding.weight": weight}, *args, **inputs)
    except Exception:  # noqa: BLE001 - a variant that cannot run on these inputs matches nothing
        return torch.empty(0)


def _learned_simulators(*_: object, **__: object) -> list[tuple[Mistake, Simulator]]:
    return [(m, partial(_as_reference, simulate)) for m, simulate in _LEARNED_VARIANTS]


LEARNED = ForwardOracle(LEARNED_NAME, "the learned positional embedding", _embedding_weight, _learned,
                        "x + weight[:t]", simulators=_learned_simulators,
                        advice=Advice(otherwise=_LEARNED_HINT, hint=_LEARNED_HINT))

POSITIONS_ON_THE_CPU = WRITTEN.mistake("positions-on-the-cpu", "the positions are made on the CPU (torch.arange(t) "
                                       "with no device=): make them where x is, with torch.arange(t, "
                                       "device=x.device). A CPU grader would pass it; on a GPU the embedding refuses "
                                       "CPU indices.")
against_forward(probes.learned_structure, LEARNED,
                passed="One nn.Embedding(max_len, k); ones in give 1 + its first t rows; on a stand-in CUDA and MPS, "
                       "positions made on x's device.",
                then=partial(expect_on_gpus, seen_on=OnGpus("module", probes.LEARNED_ON_GPU,
                                                            POSITIONS_ON_THE_CPU)))
against_forward(probes.learned_oracle, LEARNED,
                passed="The check's weights and random inputs of several shapes on the device: x + weight[:t].")


EMBEDDING_CUT_OFF = WRITTEN.mistake("embedding-cut-off", "the embedding receives no gradient, so it never learns. "
                                    "Look up torch.arange(t) in the embedding (or slice embedding.weight, without "
                                    ".data or .detach()) and add the result to x.")


@judge("learned_gradients")
def _judge_learned_gradients(ev: Evidence) -> None:
    """A small case: x + weight[:t], and the gradient of a loss reaches the input unchanged and exactly the rows
    of the positions used, as autograd through the oracle says."""
    (run,) = probes.learned_gradients.runs
    (case,) = run.cases
    w = _embedding_weight(ev, run.module)
    expect_forward_case(ev, w, run.module, case, LEARNED)
    modules.expect_attached(ev, case.key, f"{LEARNED_NAME}.forward")
    ((name, weight),) = w.items()
    w_grad = tensor(ev, gradient_key(name), shape=tuple(weight.shape))
    if w_grad is None or not bool(w_grad.any()):
        fail(f"{LEARNED_NAME}: {EMBEDDING_CUT_OFF.explanation}", mistake=EMBEDDING_CUT_OFF)
    kinds.expect_forward_gradients(ev, w, run.module, case, LEARNED)
