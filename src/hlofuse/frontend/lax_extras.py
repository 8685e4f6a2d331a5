"""Public wrappers of a few primitives for `hlofuse.lax`, with argument checking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.dtype_rules import to_dtype
from hlofuse.frontend.eager import eager
from hlofuse.frontend.elementwise import promote_operands
from hlofuse.frontend.shape_ops import shape_text
from hlofuse.frontend.tracer import Tracer, to_tracer
from hlofuse.frontend.tracing import located
from hlofuse.ir.ops import Op


@eager
def convert_element_type(x: Any, dtype: Any) -> Tracer:
    return prim.convert(to_tracer(x), to_dtype(dtype))


@eager
def bitcast_convert_type(x: Any, dtype: Any) -> Tracer:
    t = to_tracer(x)
    target = to_dtype(dtype)
    if target.bits != t.hlo_dtype.bits:
        raise TypeError(located(f"bitcast_convert_type from {t.hlo_dtype.numpy} to "
                                f"{target.numpy}: the widths differ"))
    return prim.bitcast_convert(t, target)


@eager
def broadcast_in_dim(x: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Tracer:
    t = to_tracer(x)
    shape, dims = tuple(shape), tuple(broadcast_dimensions)
    ok = len(dims) == t.ndim and all(
        0 <= d < len(shape) and t.shape[i] in (1, shape[d]) for i, d in enumerate(dims))
    if not ok or list(dims) != sorted(set(dims)):
        raise ValueError(located(f"broadcast_in_dim: cannot map {shape_text(t.shape)} to "
                                 f"{shape_text(shape)} with dimensions {dims}"))
    return prim.broadcast_in_dim(t, shape, dims)


@eager
def iota(dtype: Any, size: int) -> Tracer:
    return prim.iota(to_dtype(dtype), (int(size),))


def _starts(x: Tracer, starts: Sequence[Any], what: str) -> list[Tracer | int]:
    if len(starts) != x.ndim:
        raise ValueError(located(f"{what}: {len(starts)} start indices for an array of rank "
                                 f"{x.ndim}"))
    return list(starts)


@eager
def dynamic_slice(x: Any, start_indices: Sequence[Any], slice_sizes: Sequence[int]) -> Tracer:
    """The window of `slice_sizes` at `start_indices`, clamped to stay inside `x`."""
    t = to_tracer(x)
    sizes = tuple(int(s) for s in slice_sizes)
    if len(sizes) != t.ndim or any(not 0 <= s <= d for s, d in zip(sizes, t.shape)):
        raise ValueError(located(f"dynamic_slice: sizes {sizes} do not fit "
                                 f"{shape_text(t.shape)}"))
    return prim.dynamic_slice(t, _starts(t, start_indices, "dynamic_slice"), sizes)


@eager
def dynamic_update_slice(x: Any, update: Any, start_indices: Sequence[Any]) -> Tracer:
    t, u = to_tracer(x), to_tracer(update)
    u = prim.convert(u, t.hlo_dtype, t.weak)
    if u.ndim != t.ndim or any(a > b for a, b in zip(u.shape, t.shape)):
        raise ValueError(located(f"dynamic_update_slice: update {shape_text(u.shape)} does not "
                                 f"fit {shape_text(t.shape)}"))
    return prim.dynamic_update_slice(t, u, _starts(t, start_indices, "dynamic_update_slice"))


@eager
def shift_right_logical(x: Any, y: Any) -> Tracer:
    a, b = promote_operands("shift_right_logical", x, y)
    if not a.hlo_dtype.is_integer:
        raise TypeError(located(f"shift_right_logical needs integers, got {a.hlo_dtype.numpy}"))
    return prim.binary(Op.SHIFT_RIGHT_LOGICAL, a, b)


@eager
def erf_inv(x: Any) -> Tracer:
    t = to_tracer(x)
    if not t.hlo_dtype.is_float:
        raise TypeError(located(f"erf_inv needs floats, got {t.hlo_dtype.numpy}"))
    return prim.erf_inv(t)
