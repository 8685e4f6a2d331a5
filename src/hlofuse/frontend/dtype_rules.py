"""JAX's dtype rules with 64-bit types disabled: canonical types, weak types and promotion.

Python scalars are weakly typed: they take the type of the array they meet (`x * 2.0` stays
float16 for a float16 `x`). Promotion is the join on JAX's type lattice, in which the weak
integer `i*` sits below every integer type and the weak float `f*` below every float type:

    b -> i* -> u8 -> u16 -> u32 -> u64 -> f* -> bf16, f16 -> f32 -> f64
          \\-> i8 -> i16 -> i32 -> i64 --/
    (u8 -> i16, u16 -> i32, u32 -> i64)

64-bit results are then narrowed to 32 bits, as JAX does while `jax_enable_x64` is off.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from hlofuse.frontend.tracing import located
from hlofuse.ir.dtypes import DType


@dataclass(frozen=True, slots=True)
class AbstractValue:
    """What tracing knows about an array: its shape, element type, and whether it is weak."""

    shape: tuple[int, ...]
    dtype: DType
    weak: bool = False

    def text(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.dtype.text}[{dims}]" + (" (weak)" if self.weak else "")


_CANONICAL = {DType.S64: DType.S32, DType.U64: DType.U32, DType.F64: DType.F32}

_EDGES: dict[str, tuple[str, ...]] = {
    "pred": ("i*",),
    "i*": ("u8", "s8"),
    "u8": ("u16", "s16"),
    "u16": ("u32", "s32"),
    "u32": ("u64", "s64"),
    "u64": ("f*",),
    "s8": ("s16",),
    "s16": ("s32",),
    "s32": ("s64",),
    "s64": ("f*",),
    "f*": ("bf16", "f16"),
    "bf16": ("f32",),
    "f16": ("f32",),
    "f32": ("f64",),
    "f64": (),
}


@cache
def _upper(node: str) -> frozenset[str]:
    """`node` and every type it promotes to."""
    out = {node}
    for parent in _EDGES[node]:
        out |= _upper(parent)
    return frozenset(out)


def canonical(dtype: DType) -> DType:
    """The type JAX uses for `dtype` with 64-bit types disabled."""
    return _CANONICAL.get(dtype, dtype)


def _node(dtype: DType, weak: bool) -> str:
    if weak and dtype.is_integer:
        return "i*"
    if weak and dtype.is_float:
        return "f*"
    return dtype.text


def _from_node(node: str) -> tuple[DType, bool]:
    if node == "i*":
        return DType.S32, True
    if node == "f*":
        return DType.F32, True
    return canonical(DType.from_text(node)), False


@cache
def _join(a: str, b: str) -> str:
    common = _upper(a) & _upper(b)
    for candidate in common:
        if common <= _upper(candidate):
            return candidate
    raise TypeError(f"no common type for {a} and {b}")


def promote(*types: tuple[DType, bool]) -> tuple[DType, bool]:
    """The (dtype, weak) that arrays of the given (dtype, weak) types combine to."""
    node = _node(*types[0])
    for dtype, weak in types[1:]:
        node = _join(node, _node(dtype, weak))
    return _from_node(node)


def python_scalar_type(value: bool | int | float) -> tuple[DType, bool]:
    """Python scalars: bool is bool; int and float are weak int32 and float32."""
    if isinstance(value, bool):
        return DType.PRED, False
    if isinstance(value, int):
        return DType.S32, True
    return DType.F32, True


def to_dtype(dtype: object) -> DType:
    """A user's dtype (NumPy dtype, type, name, or hlofuse DType) as a canonical DType."""
    if isinstance(dtype, DType):
        return canonical(dtype)
    if dtype is float:
        return DType.F32
    if dtype is int:
        return DType.S32
    if dtype is bool:
        return DType.PRED
    try:
        return canonical(DType.from_numpy(np.dtype(dtype)))  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(located(f"{dtype!r} is not a supported dtype (bool, integers and "
                                "floats are)")) from None
