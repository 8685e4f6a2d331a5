"""Tracers: the abstract arrays a traced function computes with, and constants.

A Tracer stands for an array whose value is not known while tracing: it holds the instruction
that computes it, the trace it belongs to, and whether it is weakly typed. Operators and
methods forward to `hlofuse.numpy`, so a traced function reads like NumPy code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from hlofuse.frontend.dtype_rules import AbstractValue, python_scalar_type, to_dtype
from hlofuse.frontend.tracing import (
    Trace,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    current_trace,
    located,
)
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _hnp() -> ModuleType:
    from hlofuse.frontend import numpy as hnp  # numpy.py builds on this module

    return hnp


class Tracer:
    """An array being traced."""

    __slots__ = ("trace", "instruction", "weak")
    __array_priority__ = 1000
    __hash__ = None  # type: ignore[assignment]  # == builds an array, as in NumPy

    def __init__(self, trace: Trace, instruction: Instruction, weak: bool = False) -> None:
        self.trace = trace
        self.instruction = instruction
        self.weak = weak

    # --- abstract value -----------------------------------------------------------------

    @property
    def aval(self) -> AbstractValue:
        return AbstractValue(self.instruction.shape.dims, self.instruction.dtype, self.weak)

    @property
    def hlo_dtype(self) -> DType:
        return self.instruction.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.instruction.shape.dims

    @property
    def dtype(self) -> np.dtype:
        return self.instruction.dtype.numpy

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(located("len() of a 0-d traced array"))
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tracer<{self.aval.text()}>"

    # --- conversions that need a value -------------------------------------------------

    def __bool__(self) -> bool:
        raise TracerBoolConversionError(located(
            f"the truth value of a traced array ({self.aval.text()}) is not known while "
            "tracing, so Python control flow (if/while/and/or/not, bool()) cannot depend on "
            "it; use hlofuse.lax.cond or hlofuse.lax.while_loop for control flow, or "
            "hnp.where to select values"))

    def _no_value(self, what: str) -> TracerIntegerConversionError:
        return TracerIntegerConversionError(located(
            f"{what} of a traced array ({self.aval.text()}) is not known while tracing; "
            "keep the value an array (use hnp.where or hlofuse.lax.cond instead of branching "
            "on it), or mark the argument static with static_argnums"))

    def __int__(self) -> int:
        raise self._no_value("int()")

    def __float__(self) -> float:
        raise self._no_value("float()")

    def __complex__(self) -> complex:
        raise self._no_value("complex()")

    def __index__(self) -> int:
        raise self._no_value("use as a Python index")

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        raise TracerArrayConversionError(located(
            f"a traced array ({self.aval.text()}) was passed to NumPy, which needs its value; "
            "use the hlofuse.numpy function instead (import hlofuse.numpy as hnp)"))

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # NumPy calls this for `np.float32(2) * x` as well as `np.sin(x)`: both mean the
        # hlofuse.numpy function of the same name.
        name = getattr(ufunc, "__name__", "")
        fn = getattr(_hnp(), name, None) if method == "__call__" and not kwargs else None
        if fn is None:
            raise TracerArrayConversionError(located(
                f"numpy.{name}{'.' + method if method != '__call__' else ''} was called on a "
                f"traced array ({self.aval.text()}) and has no hlofuse.numpy equivalent"))
        return fn(*inputs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        name = getattr(func, "__name__", "")
        fn = getattr(_hnp(), name, None) if name in _hnp().__all__ else None
        if fn is None:
            raise TracerArrayConversionError(located(
                f"numpy.{name} was called on a traced array and hlofuse.numpy has no {name}"))
        return fn(*args, **kwargs)

    def __iter__(self) -> Iterator[Tracer]:
        if not self.shape:
            raise TypeError(located("iteration over a 0-d traced array"))
        return (self[i] for i in range(self.shape[0]))

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_") and hasattr(np.ndarray, name):
            raise NotImplementedError(located(
                f"the ndarray method or attribute .{name} is not implemented by hlofuse "
                "traced arrays"))
        raise AttributeError(f"'Tracer' object has no attribute {name!r}")

    # --- operators ------------------------------------------------------------------------

    def __neg__(self) -> Tracer:
        return _hnp().negative(self)

    def __pos__(self) -> Tracer:
        return self

    def __abs__(self) -> Tracer:
        return _hnp().abs(self)

    def __invert__(self) -> Tracer:
        return _hnp().invert(self)

    def __add__(self, other: Any) -> Tracer:
        return _hnp().add(self, other)

    def __radd__(self, other: Any) -> Tracer:
        return _hnp().add(other, self)

    def __sub__(self, other: Any) -> Tracer:
        return _hnp().subtract(self, other)

    def __rsub__(self, other: Any) -> Tracer:
        return _hnp().subtract(other, self)

    def __mul__(self, other: Any) -> Tracer:
        return _hnp().multiply(self, other)

    def __rmul__(self, other: Any) -> Tracer:
        return _hnp().multiply(other, self)

    def __truediv__(self, other: Any) -> Tracer:
        return _hnp().true_divide(self, other)

    def __rtruediv__(self, other: Any) -> Tracer:
        return _hnp().true_divide(other, self)

    def __floordiv__(self, other: Any) -> Tracer:
        return _hnp().floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tracer:
        return _hnp().floor_divide(other, self)

    def __mod__(self, other: Any) -> Tracer:
        return _hnp().remainder(self, other)

    def __rmod__(self, other: Any) -> Tracer:
        return _hnp().remainder(other, self)

    def __pow__(self, other: Any) -> Tracer:
        return _hnp().power(self, other)

    def __rpow__(self, other: Any) -> Tracer:
        return _hnp().power(other, self)

    def __matmul__(self, other: Any) -> Tracer:
        return _hnp().matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tracer:
        return _hnp().matmul(other, self)

    def __and__(self, other: Any) -> Tracer:
        return _hnp().bitwise_and(self, other)

    def __rand__(self, other: Any) -> Tracer:
        return _hnp().bitwise_and(other, self)

    def __or__(self, other: Any) -> Tracer:
        return _hnp().bitwise_or(self, other)

    def __ror__(self, other: Any) -> Tracer:
        return _hnp().bitwise_or(other, self)

    def __xor__(self, other: Any) -> Tracer:
        return _hnp().bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tracer:
        return _hnp().bitwise_xor(other, self)

    def __lshift__(self, other: Any) -> Tracer:
        return _hnp().left_shift(self, other)

    def __rlshift__(self, other: Any) -> Tracer:
        return _hnp().left_shift(other, self)

    def __rshift__(self, other: Any) -> Tracer:
        return _hnp().right_shift(self, other)

    def __rrshift__(self, other: Any) -> Tracer:
        return _hnp().right_shift(other, self)

    def __lt__(self, other: Any) -> Tracer:
        return _hnp().less(self, other)

    def __le__(self, other: Any) -> Tracer:
        return _hnp().less_equal(self, other)

    def __gt__(self, other: Any) -> Tracer:
        return _hnp().greater(self, other)

    def __ge__(self, other: Any) -> Tracer:
        return _hnp().greater_equal(self, other)

    def __eq__(self, other: Any) -> Tracer:  # type: ignore[override]
        return _hnp().equal(self, other)

    def __ne__(self, other: Any) -> Tracer:  # type: ignore[override]
        return _hnp().not_equal(self, other)

    def __getitem__(self, index: Any) -> Tracer:
        from hlofuse.frontend import indexing

        return indexing.getitem(self, index)

    # --- methods --------------------------------------------------------------------------

    @property
    def at(self) -> Any:
        from hlofuse.frontend import indexing

        return indexing.IndexUpdateHelper(self)

    @property
    def T(self) -> Tracer:  # noqa: N802 - NumPy's name
        return _hnp().transpose(self)

    def astype(self, dtype: object) -> Tracer:
        return _hnp().astype(self, dtype)

    def reshape(self, *shape: Any) -> Tracer:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return _hnp().reshape(self, shape)

    def transpose(self, *axes: Any) -> Tracer:
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return _hnp().transpose(self, axes or None)

    def flatten(self) -> Tracer:
        return _hnp().ravel(self)

    def ravel(self) -> Tracer:
        return _hnp().ravel(self)

    def squeeze(self, axis: Any = None) -> Tracer:
        return _hnp().squeeze(self, axis)

    def sum(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().min(self, axis=axis, keepdims=keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().prod(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().all(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().any(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: Any = None, keepdims: bool = False) -> Tracer:
        return _hnp().argmin(self, axis=axis, keepdims=keepdims)

    def clip(self, min: Any = None, max: Any = None) -> Tracer:  # noqa: A002 - NumPy's names
        return _hnp().clip(self, min, max)

    def round(self, decimals: int = 0) -> Tracer:
        return _hnp().round(self, decimals)

    def dot(self, other: Any) -> Tracer:
        return _hnp().dot(self, other)


# --- making tracers -----------------------------------------------------------------------


def bind(op: Op, operands: Sequence[Tracer], *, attrs: Mapping[str, object] | None = None,
         calls: Sequence[Computation] = (), shape: Shape | None = None,
         weak: bool = False) -> Tracer:
    """Emit one instruction in the innermost trace; operands of outer traces are captured."""
    trace = current_trace()
    instructions = [trace.lift(t.instruction, t.trace) for t in operands]
    instruction = trace.emit(op, instructions, attrs=attrs, calls=calls, shape=shape)
    return Tracer(trace, instruction, weak)


def constant(value: object, dtype: DType, weak: bool = False) -> Tracer:
    """A literal array in the innermost trace."""
    literal = np.asarray(value).astype(dtype.numpy)
    trace = current_trace()
    instruction = trace.emit(Op.CONSTANT, attrs={"literal": literal},
                             shape=Shape.array(dtype, literal.shape))
    return Tracer(trace, instruction, weak)


def is_array_like(x: object) -> bool:
    return isinstance(x, Tracer | np.ndarray | np.generic | bool | int | float)


def value_type(x: object, what: str = "argument") -> tuple[tuple[int, ...], DType, bool]:
    """(shape, dtype, weak) of a tracer, NumPy array or Python scalar, canonicalised."""
    if isinstance(x, Tracer):
        return x.shape, x.hlo_dtype, x.weak
    if isinstance(x, np.ndarray | np.generic):  # before Python scalars: np.float64 is a float
        if x.dtype.kind not in "biuf" and x.dtype.name != "bfloat16":
            raise TypeError(located(f"{what}: arrays of dtype {x.dtype} are not supported"))
        return tuple(np.shape(x)), to_dtype(x.dtype), False
    if isinstance(x, bool | int | float):
        dtype, weak = python_scalar_type(x)
        return (), dtype, weak
    if isinstance(x, list | tuple):
        raise TypeError(located(f"{what}: got a Python {type(x).__name__}; convert it with "
                                "hnp.asarray first"))
    raise TypeError(located(f"{what}: expected an array or a number, got "
                            f"{type(x).__name__}"))


def to_tracer(x: object, what: str = "operand") -> Tracer:
    """`x` as a tracer: tracers pass through; NumPy arrays and Python scalars become constants."""
    if isinstance(x, Tracer):
        return x
    if isinstance(x, complex):
        raise TypeError(located(f"{what}: complex numbers are not supported"))
    if type(x) is int and not _INT32_MIN <= x <= _INT32_MAX:
        raise OverflowError(located(f"{what}: Python int {x} does not fit in int32"))
    _, dtype, weak = value_type(x, what)
    return constant(x, dtype, weak)
