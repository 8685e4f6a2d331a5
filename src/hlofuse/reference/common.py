"""What the reference interpreter and its handler modules share: the value type, errors,
denormal flushing as XLA's CPU backend does it, and small helpers over NumPy arrays.

Handlers (`dot.py`, `indexing.py`, `linalg.py`) take the interpreter as a `Runner`, so they
import this module and never the interpreter itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

import numpy as np

from hlofuse.ir.attrs import PaddingDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction

Value: TypeAlias = np.ndarray | tuple["Value", ...] | None


class InterpreterError(RuntimeError):
    """Evaluation failed; the message names the instruction."""


CustomCallFn = Callable[[Instruction, Sequence[Value]], Value]


class Runner(Protocol):
    """What a handler may ask of the interpreter: evaluate a called computation."""

    def run(self, computation: Computation, arguments: Sequence[Value]) -> Value: ...


Handler = Callable[[Runner, Instruction, list[Value]], Value]


# bf16 is computed in f32 registers, where its denormals are f32 denormals; f16's are normal
# f32 numbers there, so f16 is never flushed.
_FLUSHED_TYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(DType.BF16.numpy))
_SMALLEST_NORMAL = {np.dtype(np.float32): float(np.finfo(np.float32).tiny),
                    np.dtype(np.float64): float(np.finfo(np.float64).tiny),
                    np.dtype(DType.BF16.numpy): 2.0**-126}
def flush_denormals(x: np.ndarray) -> np.ndarray:
    """Denormal float32/float64 (and bfloat16) values become zeros of the same sign."""
    if x.dtype not in _FLUSHED_TYPES:
        return x
    tiny = _SMALLEST_NORMAL[x.dtype]
    with np.errstate(invalid="ignore"):
        is_denormal = (x != 0) & (np.abs(x) < tiny)
    if not is_denormal.any():
        return x
    return np.where(is_denormal, np.copysign(np.zeros((), x.dtype), x), x).astype(x.dtype)


def as_array(value: Value) -> np.ndarray:
    assert isinstance(value, np.ndarray), value
    return value


def pad_axis(x: np.ndarray, axis: int, p: PaddingDim, value: np.ndarray) -> np.ndarray:
    n = x.shape[axis]
    if p.interior and n > 1:
        dilated_shape = list(x.shape)
        dilated_shape[axis] = (n - 1) * (p.interior + 1) + 1
        dilated = np.full(dilated_shape, value, dtype=x.dtype)
        index = [slice(None)] * x.ndim
        index[axis] = slice(None, None, p.interior + 1)
        dilated[tuple(index)] = x
        x = dilated
    widths = [(0, 0)] * x.ndim
    widths[axis] = (max(p.low, 0), max(p.high, 0))
    x = np.pad(x, widths, constant_values=value)
    index = [slice(None)] * x.ndim
    index[axis] = slice(max(-p.low, 0), x.shape[axis] - max(-p.high, 0))
    return x[tuple(index)]


def combine(self: Runner, reducer: Computation, acc: list[np.ndarray],
            values: list[np.ndarray]) -> list[np.ndarray]:
    result = self.run(reducer, [*acc, *values])
    if isinstance(result, tuple):
        return [as_array(r) for r in result]
    return [as_array(result)]
