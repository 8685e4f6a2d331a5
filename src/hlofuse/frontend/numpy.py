"""`hlofuse.numpy`: the NumPy-like API of the front end (import hlofuse.numpy as hnp).

Functions build HLO when called inside `hlofuse.jit` and run eagerly (through the reference
interpreter) on NumPy arrays outside it. Types follow JAX with 64-bit types disabled: float32
and int32 by default, Python scalars weakly typed.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as _np

from hlofuse.frontend.creation import (
    arange,
    array,
    asarray,
    full,
    full_like,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from hlofuse.frontend.elementwise import (
    abs,
    absolute,
    add,
    around,
    astype,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    clip,
    cos,
    divide,
    equal,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    invert,
    isfinite,
    left_shift,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mod,
    multiply,
    negative,
    not_equal,
    power,
    remainder,
    right_shift,
    round,
    sign,
    sin,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    true_divide,
    where,
)
from hlofuse.frontend.gather_scatter import argsort, sort, take, take_along_axis
from hlofuse.frontend.reductions import (
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    dot,
    matmul,
    max,
    mean,
    min,
    prod,
    sum,
    vdot,
)
from hlofuse.frontend.shape_ops import (
    broadcast_to,
    concatenate,
    expand_dims,
    ravel,
    reshape,
    split,
    squeeze,
    stack,
    transpose,
)
from hlofuse.frontend.tracer import Tracer

ndarray = Tracer

bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
bfloat16 = ml_dtypes.bfloat16
dtype = _np.dtype

pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None


def shape(x: Any) -> tuple[int, ...]:
    return tuple(_np.shape(x)) if not isinstance(x, Tracer) else x.shape


def ndim(x: Any) -> int:
    return len(shape(x))


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and hasattr(_np, name):
        raise NotImplementedError(f"hlofuse.numpy.{name} is not implemented (numpy.{name} "
                                  "exists, but hlofuse does not support it yet)")
    raise AttributeError(f"module 'hlofuse.numpy' has no attribute {name!r}")


__all__ = [
    "abs", "absolute", "add", "all", "amax", "amin", "any", "arange", "argmax", "argmin",
    "argsort", "sort", "take", "take_along_axis",
    "around", "array", "asarray", "astype", "bfloat16", "bitwise_and", "bitwise_not",
    "bitwise_or", "bitwise_xor", "bool_", "broadcast_to", "ceil", "clip", "concatenate", "cos",
    "divide", "dot", "dtype", "e", "equal", "exp", "expand_dims", "expm1", "float16", "float32",
    "float64", "floor", "floor_divide", "full", "full_like", "greater", "greater_equal", "inf",
    "int16", "int32", "int64", "int8", "invert", "isfinite", "left_shift", "less",
    "less_equal", "log", "log1p", "logical_and", "logical_not", "logical_or", "logical_xor",
    "matmul", "max", "maximum", "mean", "min", "minimum", "mod", "multiply", "nan", "ndarray",
    "ndim", "negative", "newaxis", "not_equal", "ones", "ones_like", "pi", "power", "prod",
    "ravel", "remainder", "reshape", "right_shift", "round", "shape", "sign", "sin", "split",
    "sqrt", "square", "squeeze", "stack", "subtract", "sum", "tan", "tanh", "transpose",
    "true_divide", "uint16", "uint32", "uint64", "uint8", "vdot", "where", "zeros",
    "zeros_like",
]
