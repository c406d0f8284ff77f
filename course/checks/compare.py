"""Comparing a student's result with an oracle, and naming the mistake when they differ."""

import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

# Bound at import, before any student cell runs, so that a cell rebinding torch's functions
# does not change how results are compared.
_Tensor = torch.Tensor
_isfinite = torch.isfinite
_abs = torch.abs
_as_tensor = torch.as_tensor


_CHECKS_DIR = str(Path(__file__).resolve().parent)


class CheckFailed(AssertionError):
    """A test failed; the message says what is probably wrong and where to look."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for this error: the student's own frames, then the diagnosis — not the checker's code."""
        lines = []
        cause = self.__cause__
        if cause is not None:
            lines.append("Your code raised an error:")
            for frame in traceback.extract_tb(cause.__traceback__):
                if frame.filename.startswith(_CHECKS_DIR):
                    continue
                where = "a notebook cell" if "ipykernel_" in frame.filename else frame.filename
                lines += [f"  {where}, line {frame.lineno}, in {frame.name}", f"    {frame.line}"]
            lines += [*traceback.format_exception_only(cause), ""]
        lines.append(f"{type(self).__name__}: {self}")
        return [line.rstrip("\n") for line in lines]


def fail(message: str, expected: Any = None, actual: Any = None, case: str = "") -> NoReturn:
    """Raise CheckFailed with the message and, if given, expected vs actual on a small case."""
    __tracebackhide__ = True
    text = message.strip()
    if expected is not None or actual is not None:
        text += f"\n\nOn a small case{(' (' + case + ')') if case else ''}:"
        text += f"\n  expected:\n{_show(expected)}\n  actual:\n{_show(actual)}"
    raise CheckFailed(text) from None


def _show(value: Any) -> str:
    if isinstance(value, _Tensor):
        v = value.detach().to("cpu", torch.float64)
        while v.dim() > 2:  # show the first matrix of a batch
            v = v[0]
        if v.dim() == 2:
            v = v[:4, :6]
        elif v.dim() == 1:
            v = v[:6]
        body = "\n".join("    " + line for line in _format(v).splitlines())
        return body
    return f"    {value!r}"


def _format(v: torch.Tensor) -> str:
    if v.dim() == 0:
        return f"{float(v):.4f}"
    if v.dim() == 1:
        return "[" + ", ".join(f"{float(x):8.4f}" for x in v) + "]"
    return "\n".join(_format(row) for row in v)


def tolerance(device: torch.device | str) -> dict[str, float]:
    """rtol and atol for float32 results compared on one device (loose enough for GPU kernels)."""
    if torch.device(device).type == "cpu":
        return {"rtol": 1e-4, "atol": 1e-5}
    return {"rtol": 2e-3, "atol": 2e-4}


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    """True when both have one shape and agree elementwise within the tolerances (NaN never agrees)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not bool(_isfinite(a).all()) or not bool(_isfinite(e).all()):
        return bool(((a == e) | (a.isnan() & e.isnan())).all())
    return bool((_abs(a - e) <= atol + rtol * _abs(e)).all())


def run(fn: Callable[..., Any], *args: Any, what: str, hint: str = "", **kwargs: Any) -> Any:
    """Call the student's code; a NotImplementedError or a crash becomes a plain-words failure (plus hint)."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(f"{what} is not implemented yet: replace `raise NotImplementedError()` with your code.") from None
    except CheckFailed:
        raise
    except Exception as error:
        raise CheckFailed(
            f"{what} raised {type(error).__name__}: {error}\n"
            f"The traceback above points at the line in your code where it happened. {hint}".rstrip()
        ) from error


def expect_tensor(
    value: Any,
    *,
    what: str,
    shape: tuple[int, ...],
    device: torch.device | str | None = None,
    shape_hints: Mapping[tuple[int, ...], str] | None = None,
) -> torch.Tensor:
    """Fail unless value is a plain floating-point torch.Tensor of this shape on this device."""
    __tracebackhide__ = True
    if type(value) is not _Tensor:  # subclasses could redefine comparisons, so only the real class counts
        fail(f"{what} should return a torch.Tensor, but returned {type(value).__name__}.")
    if not value.is_floating_point():
        fail(f"{what} returned a tensor of dtype {value.dtype}; a floating-point tensor is expected.")
    if tuple(value.shape) != tuple(shape):
        hint = (shape_hints or {}).get(tuple(value.shape), "")
        fail(f"{what} returned shape {tuple(value.shape)}, expected {tuple(shape)}. {hint}".strip())
    if device is not None and value.device.type != torch.device(device).type:
        fail(
            f"{what} returned a tensor on {value.device}, but its input was on {torch.device(device)}. "
            "Create new tensors with device=x.device (or use torch.*_like) so the code runs on any device."
        )
    return value


def expect_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    what: str,
    mistakes: Mapping[str, torch.Tensor] = {},
    otherwise: str,
    case: str = "",
) -> None:
    """Fail unless actual matches expected; name the first typical mistake that actual matches instead."""
    __tracebackhide__ = True
    tol = tolerance(expected.device)
    if close(actual, expected, **tol):
        return
    if not bool(_isfinite(actual.detach()).all()):
        fail(f"{what} contains NaN or infinite values. {otherwise}", expected, actual, case)
    for explanation, candidate in mistakes.items():
        if close(actual, candidate, **tol):
            fail(f"{what} is not what was asked: {explanation}", expected, actual, case)
    fail(f"{what} does not match the reference. {otherwise}", expected, actual, case)


def generator(seed: int) -> torch.Generator:
    """A CPU generator with a fixed seed, so a check draws the same inputs every time it runs."""
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, device: torch.device | str) -> torch.Tensor:
    """Standard-normal float32 values drawn on the CPU (the same on every machine), then moved."""
    return torch.randn(*shape, generator=generator(seed)).to(device)


def expect_linear(module: nn.Module, owner: str, name: str, n_in: int, n_out: int, bias: bool, spec: str,
                  bias_hint: str = "") -> nn.Linear:
    """Fail unless module.<name> is an nn.Linear(n_in, n_out) with (or without) a bias; spec is how to write it."""
    __tracebackhide__ = True
    layer = getattr(module, name, None)
    if layer is None:
        fail(f"{owner} has no attribute `{name}`. Create it in __init__: self.{name} = {spec}.")
    if not isinstance(layer, nn.Linear):
        fail(f"{owner}.{name} is a {type(layer).__name__}; it should be {spec}.")
    if (layer.in_features, layer.out_features) != (n_in, n_out):
        fail(f"{owner}.{name} maps {layer.in_features} -> {layer.out_features} features; here it should map "
             f"{n_in} -> {n_out}: {spec}.")
    if bias and layer.bias is None:
        fail(f"{owner}.{name} has no bias. {bias_hint or 'It is an ordinary linear layer'}: {spec}.")
    if not bias and layer.bias is not None:
        fail(f"{owner}.{name} has a bias. {bias_hint or 'It is a plain matrix'}: {spec}.")
    return layer
