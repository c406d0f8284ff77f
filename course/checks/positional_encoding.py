"""Checks for assignment 06: sinusoidal_positional_encoding, PositionalEncoding and LearnedPositionalEmbedding."""

import math
from collections.abc import Callable
from types import MappingProxyType

import torch
from torch import nn

from course.checks.compare import close, expect_close, expect_tensor, fail, randn, run

TABLE_NAME = "sinusoidal_positional_encoding(max_len, k)"
MODULE_NAME = "PositionalEncoding"
LEARNED_NAME = "LearnedPositionalEmbedding"

# float32 sines of angles up to ~100 rad, computed in different but correct ways, differ by ~1e-5
TABLE_TOLERANCE = MappingProxyType({"rtol": 1e-4, "atol": 2e-4})


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


def _table_mistakes(max_len: int, k: int) -> dict[str, torch.Tensor]:
    row0 = _formula(1, k).expand(max_len, k)
    return {
        "sin and cos are swapped: the even columns 0, 2, 4, … hold the sines, the odd ones the cosines.":
            _formula(max_len, k, swap=True),
        "the exponent is i/k instead of 2i/k (i = 0, 1, …, k/2 − 1 counts the sin/cos pairs).":
            _formula(max_len, k, pair_exponent=1.0),
        "the exponent uses 2j/k with j the column index; it is 2i/k with i the pair index, i.e. the column index "
        "of the sine, j = 2i, over k.": _formula(max_len, k, column_index=True),
        "the sines and cosines are concatenated (all sines, then all cosines); they should be interleaved: "
        "column 2i holds a sine, column 2i + 1 the cosine of the same angle.": _formula(max_len, k, concatenate=True),
        "the positions start at 1; the first row is position 0 (sin 0 = 0, cos 0 = 1).": _formula(max_len, k, first=1),
        "every row is the encoding of position 0: are the positions a column (max_len, 1) that broadcasts against "
        "the frequencies (k/2,)?": row0,
    }


def _expect_table(table: torch.Tensor, max_len: int, k: int, case: str) -> None:
    __tracebackhide__ = True
    expected = reference_table(max_len, k)
    if tuple(table.shape) == (k, max_len) and k != max_len:
        fail(f"{TABLE_NAME} returned shape {(k, max_len)}: positions should run down the rows, so the table has "
             f"shape (max_len, k) = {(max_len, k)} and row p is the encoding of position p.")
    expect_tensor(table, what=TABLE_NAME, shape=(max_len, k), device="cpu")
    if table.dtype != torch.float32:
        fail(f"{TABLE_NAME} returned {table.dtype}; it should be torch.float32 like the embeddings it is added to. "
             "(NumPy and math computations give float64: convert with .float().)")
    if close(table, expected, **TABLE_TOLERANCE):
        return
    for explanation, candidate in _table_mistakes(max_len, k).items():
        if close(table, candidate.float(), **TABLE_TOLERANCE):
            fail(f"{TABLE_NAME} is not what was asked: {explanation}", expected, table, case)
    fail(f"{TABLE_NAME} does not match the formula PE[p, 2i] = sin(p / 10000^(2i/k)), PE[p, 2i+1] = cos(p / "
         "10000^(2i/k)).", expected, table, case)


def table_by_hand(sinusoidal_positional_encoding: Callable) -> None:
    """max_len=3, k=4: the frequencies are 1 and 1/100, so the rows are sin/cos of (p, p/100)."""
    __tracebackhide__ = True
    table = run(sinusoidal_positional_encoding, 3, 4, what="sinusoidal_positional_encoding(3, 4)")
    _expect_table(table, 3, 4, case="max_len=3, k=4: row p = [sin p, cos p, sin(p/100), cos(p/100)]")


def table_rejects_odd_size(sinusoidal_positional_encoding: Callable) -> None:
    """An odd k has no cosine partner for its last sine: raise a ValueError that says so."""
    __tracebackhide__ = True
    try:
        sinusoidal_positional_encoding(10, 5)
    except NotImplementedError:
        fail(f"{TABLE_NAME} is not implemented yet: replace `raise NotImplementedError()` with your code.")
    except ValueError:
        return
    except Exception as error:
        fail(f"sinusoidal_positional_encoding(10, 5) raised {type(error).__name__}: {error}. An odd k should be "
             "caught first, with a clear message: `if k % 2: raise ValueError(...)`.")
    fail("sinusoidal_positional_encoding(10, 5) returned a table for an odd k = 5. The sines and cosines come in "
         "pairs, so k must be even: raise a ValueError that says so.")


def table_matches_formula(sinusoidal_positional_encoding: Callable) -> None:
    """Several sizes against the formula computed in float64."""
    __tracebackhide__ = True
    for max_len, k in [(50, 16), (7, 6), (1, 2), (100, 64), (12, 10)]:
        table = run(sinusoidal_positional_encoding, max_len, k, what=f"sinusoidal_positional_encoding({max_len}, {k})")
        _expect_table(table, max_len, k, case=f"max_len={max_len}, k={k}")


# ---------------------------------------------------------------- PositionalEncoding

_MODULE_HINT = "forward(x) should return dropout(x + table[:t]) with t = x.shape[1], the table broadcast over the batch."


def _table_buffer(module: nn.Module, max_len: int, k: int, what: str) -> torch.Tensor:
    """The registered buffer that holds the table, as (max_len, k)."""
    __tracebackhide__ = True
    params = [name for name, p in module.named_parameters()]
    if params:
        fail(f"{what} registers parameters {params}. The sinusoidal table is fixed, not a parameter: register it with "
             "self.register_buffer('table', ...), which moves it with .to(device) and saves it, but never trains it.")
    buffers = [b for _, b in module.named_buffers() if b.numel() == max_len * k]
    if not buffers:
        plain = [name for name, v in vars(module).items() if isinstance(v, torch.Tensor)]
        hint = (f" The table is a plain tensor attribute ({', '.join(plain)}), which .to(device) does not move."
                if plain else "")
        fail(f"{what} has no registered buffer holding the ({max_len}, {k}) table.{hint} Use "
             "self.register_buffer('table', sinusoidal_positional_encoding(max_len, k)).")
    table = buffers[0]
    squeezed = table.squeeze()
    if max_len > 1 and tuple(squeezed.shape) == (k, max_len) and k != max_len:
        fail(f"{what}'s table buffer has shape {tuple(table.shape)}: positions should run down the rows, "
             f"(max_len, k) = {(max_len, k)}.")
    return table.reshape(max_len, k)


def module_structure(PositionalEncoding: Callable) -> None:
    """No parameters; the table a registered buffer, shape (max_len, k), holding the sinusoidal encoding."""
    __tracebackhide__ = True
    k, max_len = 8, 20
    what = f"{MODULE_NAME}({k}, max_len={max_len})"
    module = run(PositionalEncoding, k, max_len=max_len, what=what)
    if not isinstance(module, nn.Module):
        fail(f"{what} should create an nn.Module, but gave a {type(module).__name__}.")
    table = _table_buffer(module, max_len, k, what)
    expected = reference_table(max_len, k)
    if not close(table, expected, **TABLE_TOLERANCE):
        fail(f"{what}'s buffer does not hold sinusoidal_positional_encoding({max_len}, {k}). Build it with your "
             "function from exercise 1.", expected, table)


def _module_mistakes(x: torch.Tensor, table: torch.Tensor) -> dict[str, torch.Tensor]:
    b, t, k = x.shape
    candidates = {
        "every position gets the encoding of position 0. The whole table[:t] — one row per position — is "
        "added, not a single row. (A (max_len, 1, k) table indexed by x.shape[0] does this for a batch of 1.)":
            lambda: x + table[0],
        "sequence i of the batch gets the encoding of position i at every position: the table is indexed by the "
        "batch dimension (table[:x.shape[0]]) instead of the positions (table[:x.shape[1]]).":
            lambda: x + table[:b, None],
        "the input is rescaled inside the encoding (x·√k + table). Only the table is added; any scaling of the "
        "embeddings belongs to the embedding layer.": lambda: x * math.sqrt(k) + table[:t],
        "the table is returned instead of added to x: return x + table[:t].": lambda: table[:t].expand(b, t, k),
    }
    mistakes = {}
    for explanation, make in candidates.items():
        try:
            mistakes[explanation] = make()
        except RuntimeError:  # that mistake cannot happen at this shape
            pass
    return mistakes


def module_adds_table(PositionalEncoding: Callable, device: torch.device | str = "cpu") -> None:
    """Zeros in give the table out; the same table row is added at one position of every sequence."""
    __tracebackhide__ = True
    k, max_len = 4, 10
    module = run(PositionalEncoding, k, max_len=max_len, what=f"{MODULE_NAME}({k}, max_len={max_len})").to(device)
    table = reference_table(max_len, k).to(device)
    for x, case in ((torch.zeros(1, 3, k, device=device), "x = zeros of shape (1, 3, 4): the output is the table's "
                     "first 3 rows"),
                    (torch.ones(2, 5, k, device=device), "x = ones of shape (2, 5, 4): the output is 1 + the table's "
                     "first 5 rows, in both sequences")):
        with torch.no_grad():
            y = run(module, x.clone(), what=f"{MODULE_NAME}.forward(x)", hint=_MODULE_HINT)
        expect_tensor(y, what=f"{MODULE_NAME}.forward(x)", shape=tuple(x.shape), device=device)
        expect_close(y, x + table[: x.shape[1]], what=f"{MODULE_NAME}.forward(x)",
                     mistakes=_module_mistakes(x, table), otherwise=_MODULE_HINT, case=case)


def module_rejects_long_sequences(PositionalEncoding: Callable) -> None:
    """A sequence longer than max_len has no row in the table: a ValueError that says so."""
    __tracebackhide__ = True
    module = run(PositionalEncoding, 4, max_len=6, what=f"{MODULE_NAME}(4, max_len=6)")
    x = torch.zeros(2, 7, 4)
    try:
        y = module(x)
    except NotImplementedError:
        fail(f"{MODULE_NAME} is not implemented yet: replace `raise NotImplementedError()` with your code.")
    except ValueError:
        return
    except Exception as error:
        fail(f"{MODULE_NAME}(4, max_len=6) on a sequence of length 7 raised {type(error).__name__}: {error}. Check "
             "the length first and raise a ValueError that names it and max_len.")
    fail(f"{MODULE_NAME}(4, max_len=6) accepted a sequence of length 7 and returned shape "
         f"{tuple(getattr(y, 'shape', ()))}. The table has no row for position 6: raise a ValueError.")


def module_matches_oracle(PositionalEncoding: Callable, device: torch.device | str = "cpu") -> None:
    """Random inputs of several shapes on the device: x + the sinusoidal table; the buffer moved with .to(device)."""
    __tracebackhide__ = True
    for i, (b, t, k, max_len) in enumerate([(3, 5, 8, 16), (2, 16, 6, 16), (4, 1, 4, 10), (2, 9, 10, 50)]):
        what = f"{MODULE_NAME}({k}, max_len={max_len})"
        module = run(PositionalEncoding, k, max_len=max_len, what=what)
        _table_buffer(module, max_len, k, what)
        module = module.to(device)
        buffer = _table_buffer(module, max_len, k, what)
        if buffer.device.type != torch.device(device).type:
            fail(f"After .to({device}) the table of {what} is still on {buffer.device}. Register it as a buffer.")
        x = randn(b, t, k, seed=3000 + i, device=device)
        table = reference_table(max_len, k).to(device)
        with torch.no_grad():
            y = run(module, x.clone(), what=f"{MODULE_NAME}.forward(x)", hint=_MODULE_HINT)
        expect_tensor(y, what=f"{MODULE_NAME}.forward(x)", shape=(b, t, k), device=device)
        if close(y, x + table[:t], **TABLE_TOLERANCE):
            continue
        expect_close(y, x + table[:t], what=f"{MODULE_NAME}.forward(x)", mistakes=_module_mistakes(x, table),
                     otherwise=_MODULE_HINT, case=f"x of shape {(b, t, k)}, max_len={max_len}")


def module_applies_dropout(PositionalEncoding: Callable, device: torch.device | str = "cpu") -> None:
    """With dropout=0.5, training zeroes about half of x + table and scales the rest by 2; evaluation does not."""
    __tracebackhide__ = True
    module = run(PositionalEncoding, 8, max_len=32, dropout=0.5, what=f"{MODULE_NAME}(8, max_len=32, dropout=0.5)")
    module = module.to(device)
    x = randn(4, 32, 8, seed=3100, device=device)
    expected = x + reference_table(32, 8).to(device)
    with torch.no_grad():
        y_eval = run(module.eval(), x.clone(), what=f"{MODULE_NAME}.forward(x) in eval mode", hint=_MODULE_HINT)
        torch.manual_seed(3101)
        y_train = run(module.train(), x.clone(), what=f"{MODULE_NAME}.forward(x) in training mode", hint=_MODULE_HINT)
    expect_tensor(y_eval, what=f"{MODULE_NAME}.forward(x)", shape=(4, 32, 8), device=device)
    if not close(y_eval, expected, **TABLE_TOLERANCE):
        fail(f"In eval mode {MODULE_NAME}(..., dropout=0.5) should return x + table unchanged: use nn.Dropout "
             "(or F.dropout(..., training=self.training)), which is off in eval mode.", expected, y_eval)
    expect_tensor(y_train, what=f"{MODULE_NAME}.forward(x)", shape=(4, 32, 8), device=device)
    zeros = float((y_train == 0).float().mean())
    kept = y_train != 0
    if not 0.35 < zeros < 0.65 or not close(y_train[kept], 2 * expected[kept], **TABLE_TOLERANCE):
        fail(f"In training mode {MODULE_NAME}(..., dropout=0.5) should zero about half of x + table and double the "
             f"rest; {zeros:.0%} of the outputs are zero. Apply nn.Dropout(dropout) to the sum.")


# ---------------------------------------------------------------- LearnedPositionalEmbedding

_LEARNED_HINT = ("forward(x) should return x + embedding(positions) with positions = torch.arange(t, device=x.device) "
                 "and t = x.shape[1].")


def _position_embedding(module: nn.Module, max_len: int, k: int, what: str) -> nn.Embedding:
    __tracebackhide__ = True
    embeddings = [m for m in module.modules() if isinstance(m, nn.Embedding)]
    if len(embeddings) != 1:
        fail(f"{what} should hold one nn.Embedding(max_len, k); found {len(embeddings)}.")
    emb = embeddings[0]
    if (emb.num_embeddings, emb.embedding_dim) != (max_len, k):
        hint = " The arguments are swapped: nn.Embedding(number of positions, size)." if (
            emb.num_embeddings, emb.embedding_dim) == (k, max_len) else ""
        fail(f"{what} holds nn.Embedding({emb.num_embeddings}, {emb.embedding_dim}); it should be "
             f"nn.Embedding(max_len, k) = nn.Embedding({max_len}, {k}): one learned row per position.{hint}")
    count = sum(p.numel() for p in module.parameters())
    if count != max_len * k:
        fail(f"{what} has {count} parameters; one embedding of max_len × k = {max_len * k} values is all it needs.")
    return emb


def learned_structure(LearnedPositionalEmbedding: Callable, device: torch.device | str = "cpu") -> None:
    """One nn.Embedding(max_len, k); zeros in give its first t rows out."""
    __tracebackhide__ = True
    max_len, k = 10, 6
    what = f"{LEARNED_NAME}({max_len}, {k})"
    module = run(LearnedPositionalEmbedding, max_len, k, what=what)
    if not isinstance(module, nn.Module):
        fail(f"{what} should create an nn.Module, but gave a {type(module).__name__}.")
    emb = _position_embedding(module, max_len, k, what)
    module = module.to(device)
    x = torch.ones(2, 4, k, device=device)
    with torch.no_grad():
        y = run(module, x.clone(), what=f"{LEARNED_NAME}.forward(x)", hint=_LEARNED_HINT)
        mistakes = _learned_mistakes(x, emb.weight)
    expect_tensor(y, what=f"{LEARNED_NAME}.forward(x)", shape=(2, 4, k), device=device)
    expect_close(y, x + emb.weight[:4], what=f"{LEARNED_NAME}.forward(x)", mistakes=mistakes, otherwise=_LEARNED_HINT,
                 case="x = ones of shape (2, 4, 6): the output is 1 + the embedding's first 4 rows")


def _learned_mistakes(x: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    b, t, k = x.shape
    candidates = {
        "the position embeddings are returned instead of added to x: return x + embedding(positions).":
            lambda: weight[:t].expand(b, t, k),
        "every position gets the embedding of position 0: look up torch.arange(t), one row per position.":
            lambda: x + weight[0],
        "the positions start at 1; the first position is 0: torch.arange(t).": lambda: x + weight[1 : t + 1],
        "sequence i of the batch gets the embedding of position i: the positions come from x.shape[0] (the batch) "
        "instead of x.shape[1].": lambda: x + weight[:b, None],
        "the input is rescaled (x·√k + embedding): only the position embedding is added.":
            lambda: x * math.sqrt(k) + weight[:t],
    }
    mistakes = {}
    for explanation, make in candidates.items():
        try:
            mistakes[explanation] = make()
        except RuntimeError:  # that mistake cannot happen at this shape
            pass
    return mistakes


def learned_matches_oracle(LearnedPositionalEmbedding: Callable, device: torch.device | str = "cpu") -> None:
    """Random weights and inputs on the device: x + weight[:t]; the gradient reaches exactly the rows used."""
    __tracebackhide__ = True
    for i, (b, t, max_len, k) in enumerate([(3, 5, 8, 4), (2, 8, 8, 6), (4, 1, 20, 3)]):
        what = f"{LEARNED_NAME}({max_len}, {k})"
        module = run(LearnedPositionalEmbedding, max_len, k, what=what)
        emb = _position_embedding(module, max_len, k, what)
        module = module.to(device)
        with torch.no_grad():
            emb.weight.copy_(randn(max_len, k, seed=3200 + i, device=device))
        x = randn(b, t, k, seed=3210 + i, device=device)
        with torch.no_grad():
            y = run(module, x.clone(), what=f"{LEARNED_NAME}.forward(x)", hint=_LEARNED_HINT)
            mistakes = _learned_mistakes(x, emb.weight)
        expect_tensor(y, what=f"{LEARNED_NAME}.forward(x)", shape=(b, t, k), device=device)
        expect_close(y, x + emb.weight[:t], what=f"{LEARNED_NAME}.forward(x)", mistakes=mistakes,
                     otherwise=_LEARNED_HINT, case=f"x of shape {(b, t, k)}, max_len={max_len}")
    module = run(LearnedPositionalEmbedding, 8, 4, what=f"{LEARNED_NAME}(8, 4)").to(device)
    emb = _position_embedding(module, 8, 4, f"{LEARNED_NAME}(8, 4)")
    x = randn(2, 5, 4, seed=3220, device=device).requires_grad_(True)
    y = run(module, x, what=f"{LEARNED_NAME}.forward(x)", hint=_LEARNED_HINT)
    expect_tensor(y, what=f"{LEARNED_NAME}.forward(x)", shape=(2, 5, 4), device=device)
    if not y.requires_grad:
        fail(f"{LEARNED_NAME}.forward is cut off from autograd: avoid .detach(), .data or torch.no_grad() inside it.")
    y.sum().backward()
    used = emb.weight.grad is not None and bool((emb.weight.grad[:5] != 0).all()) and bool((emb.weight.grad[5:] == 0).all())
    if not used:
        fail(f"The gradient of {LEARNED_NAME}'s embedding should reach exactly the rows of positions 0 … t−1 "
             "(here 0 … 4). Look up torch.arange(t) in the embedding and add the result to x.")
    if x.grad is None or not torch.allclose(x.grad, torch.ones_like(x.grad)):
        fail(f"The input x of {LEARNED_NAME}.forward should pass through unchanged (gradient 1): return x + ….")
