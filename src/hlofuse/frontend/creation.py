"""NumPy array creation inside traced functions: zeros, ones, full, arange, asarray, ..."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.dtype_rules import python_scalar_type, to_dtype
from hlofuse.frontend.eager import eager
from hlofuse.frontend.shape_ops import _to_shape, stack
from hlofuse.frontend.tracer import Tracer, constant, to_tracer, value_type
from hlofuse.frontend.tracing import located
from hlofuse.ir.dtypes import DType


def _nonnegative_shape(shape: Any, name: str) -> tuple[int, ...]:
    dims = _to_shape(shape, name)
    if any(d < 0 for d in dims):
        raise ValueError(located(f"{name}: negative dimension in shape {shape!r}"))
    return dims


@eager
def full(shape: Any, fill_value: Any, dtype: Any = None) -> Tracer:
    dims = _nonnegative_shape(shape, "hnp.full")
    value = to_tracer(fill_value, "hnp.full fill value")
    if dtype is not None:
        value = prim.convert(value, to_dtype(dtype))
    from hlofuse.frontend.shape_ops import broadcast_to

    return broadcast_to(value, dims)


@eager
def zeros(shape: Any, dtype: Any = None) -> Tracer:
    dtype = DType.F32 if dtype is None else to_dtype(dtype)
    return prim.full(_nonnegative_shape(shape, "hnp.zeros"), 0, dtype)


@eager
def ones(shape: Any, dtype: Any = None) -> Tracer:
    dtype = DType.F32 if dtype is None else to_dtype(dtype)
    return prim.full(_nonnegative_shape(shape, "hnp.ones"), 1, dtype)


def _like(x: Any, dtype: Any, shape: Any) -> tuple[tuple[int, ...], DType, bool]:
    x_shape, x_dtype, weak = value_type(x, "array")
    dims = x_shape if shape is None else _nonnegative_shape(shape, "hnp.*_like")
    if dtype is not None:
        return dims, to_dtype(dtype), False
    return dims, x_dtype, weak


@eager
def zeros_like(x: Any, dtype: Any = None, shape: Any = None) -> Tracer:
    dims, dt, weak = _like(x, dtype, shape)
    return prim.full(dims, 0, dt, weak)


@eager
def ones_like(x: Any, dtype: Any = None, shape: Any = None) -> Tracer:
    dims, dt, weak = _like(x, dtype, shape)
    return prim.full(dims, 1, dt, weak)


@eager
def full_like(x: Any, fill_value: Any, dtype: Any = None, shape: Any = None) -> Tracer:
    dims, dt, weak = _like(x, dtype, shape)
    return prim.convert(full(dims, fill_value), dt, weak and dtype is None)


def _concrete_number(x: Any, name: str) -> int | float:
    if isinstance(x, Tracer):
        raise TypeError(located(f"{name}: its arguments must be known while tracing (the "
                                "result's size depends on them), got a traced value"))
    if isinstance(x, np.generic | np.ndarray):
        return x.item()
    if not isinstance(x, int | float):
        raise TypeError(located(f"{name}: expected a number, got {type(x).__name__}"))
    return x


@eager
def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None) -> Tracer:
    """`arange(n)` is an iota, as in JAX; other forms become a constant."""
    first = _concrete_number(start, "hnp.arange")
    if stop is None and step is None:
        out_dtype = to_dtype(dtype) if dtype is not None else python_scalar_type(first)[0]
        return prim.iota(out_dtype, (max(int(math.ceil(first)), 0),))
    low: int | float
    high: int | float
    if stop is None:
        low, high = 0, first
    else:
        low, high = first, _concrete_number(stop, "hnp.arange")
    delta = 1 if step is None else _concrete_number(step, "hnp.arange")
    array = np.arange(low, high, delta)
    out_dtype = to_dtype(dtype) if dtype is not None else to_dtype(array.dtype)
    return constant(array, out_dtype)


@eager
def asarray(x: Any, dtype: Any = None) -> Tracer:
    if isinstance(x, list | tuple):
        if any(isinstance(e, Tracer | list | tuple) for e in x):
            out = stack([asarray(e) for e in x]) if x else constant(np.zeros(0), DType.F32)
        else:
            literal = np.asarray(x)
            out = constant(literal, to_dtype(literal.dtype))
    else:
        out = to_tracer(x, "hnp.asarray")
    if dtype is not None:
        out = prim.convert(out, to_dtype(dtype))
    return out


@eager
def array(x: Any, dtype: Any = None) -> Tracer:
    return asarray(x, dtype)
