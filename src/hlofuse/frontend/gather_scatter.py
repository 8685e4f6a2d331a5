"""JAX's indexing idioms that need gather, scatter or sort: `x[idx]` and `x.at[idx].set/add/...`
with an integer array `idx` on one axis, `take`, `take_along_axis`, `sort` and `argsort`.

As in JAX: negative indices count from the end; a read with an index out of range clamps it
(gather's rule); an update with an index out of range is dropped (scatter's rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.eager import eager
from hlofuse.frontend.shape_ops import broadcast_to, normalize_axis, reshape, shape_text
from hlofuse.frontend.tracer import Tracer, bind, to_tracer
from hlofuse.frontend.tracing import located
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape


def _is_index_array(e: object) -> bool:
    if isinstance(e, Tracer):
        return bool(e.shape)
    if isinstance(e, list):
        return True
    return isinstance(e, np.ndarray) and e.ndim > 0 and e.dtype != np.bool_


def array_index(x: Tracer, index: Any) -> tuple[int, Tracer] | None:
    """(axis, s32 indices) when `index` is one integer array among full slices, else None."""
    entries = list(index) if isinstance(index, tuple) else [index]
    if not any(_is_index_array(e) for e in entries):
        return None
    arrays = [i for i, e in enumerate(entries) if _is_index_array(e)]
    ellipsis = [i for i, e in enumerate(entries) if e is Ellipsis]
    if len(arrays) != 1 or len(ellipsis) > 1 or any(
            not (e is Ellipsis or _is_index_array(e) or e == slice(None)) for e in entries):
        raise NotImplementedError(located(
            "advanced indexing is implemented for one integer array among full slices "
            "(x[idx], x[:, idx], x[..., idx]); split the indexing into steps"))
    position = arrays[0]
    if ellipsis and ellipsis[0] < position:
        axis = x.ndim - (len(entries) - position)
    else:
        axis = position
    if not 0 <= axis < x.ndim:
        raise IndexError(located(f"too many indices for array of shape {shape_text(x.shape)}"))
    idx = to_tracer(np.asarray(entries[position]) if isinstance(entries[position], list)
                    else entries[position], "index")
    if not idx.hlo_dtype.is_integer:
        raise TypeError(located(f"array indices must be integers, got {idx.hlo_dtype.numpy}"))
    return axis, _wrapped(idx, x.shape[axis])


def _wrapped(idx: Tracer, size: int) -> Tracer:
    i = prim.convert(idx, DType.S32)
    zero = prim.full(i.shape, 0, DType.S32)
    return prim.select(prim.compare(i, zero, "LT"),
                       prim.binary(Op.ADD, i, prim.full(i.shape, size, DType.S32)), i)


def gather_axis(x: Tracer, axis: int, idx: Tracer) -> Tracer:
    """x[..., idx, ...] on `axis`: shape x.shape[:axis] + idx.shape + x.shape[axis+1:]."""
    rank = idx.ndim
    indices = reshape(idx, idx.shape + (1,))
    offset = tuple(range(axis)) + tuple(range(axis + rank, x.ndim - 1 + rank))
    sizes = tuple(1 if d == axis else n for d, n in enumerate(x.shape))
    return bind(Op.GATHER, [x, indices], attrs={
        "offset_dims": offset, "collapsed_slice_dims": (axis,), "start_index_map": (axis,),
        "index_vector_dim": rank, "slice_sizes": sizes}, weak=x.weak)


def _update_computation(mode: str, dtype: DType) -> Computation:
    op = {"add": Op.ADD, "multiply": Op.MULTIPLY, "min": Op.MINIMUM, "max": Op.MAXIMUM}.get(mode)
    if op is not None and dtype.is_pred:
        op = Op.OR if op in (Op.ADD, Op.MAXIMUM) else Op.AND

    def build(b: ComputationBuilder) -> Instruction:
        old = b.parameter(0, Shape.scalar(dtype))
        new = b.parameter(1, Shape.scalar(dtype))
        return new if op is None else b.add(op, [old, new])

    name = "replace" if op is None else op.text
    return prim.scalar_computation((f"scatter_{name}_{dtype.text}", name, dtype.text), build)


def scatter_axis(x: Tracer, axis: int, idx: Tracer, value: Any, mode: str) -> Tracer:
    """x.at[..., idx, ...].set/add/multiply/min/max(value) on `axis`."""
    rank = idx.ndim
    region = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    v = prim.convert(to_tracer(value, f".at[].{mode} value"), x.hlo_dtype, x.weak)
    try:
        v = broadcast_to(v, region)
    except ValueError:
        raise ValueError(located(f".at[].{mode}: value of shape {shape_text(v.shape)} does not "
                                 f"fit the indexed region {shape_text(region)}")) from None
    indices = reshape(idx, idx.shape + (1,))
    window = tuple(range(axis)) + tuple(range(axis + rank, x.ndim - 1 + rank))
    return bind(Op.SCATTER, [x, indices, v], attrs={
        "update_window_dims": window, "inserted_window_dims": (axis,),
        "scatter_dims_to_operand_dims": (axis,), "index_vector_dim": rank},
        calls=[_update_computation(mode, x.hlo_dtype)], weak=x.weak)


@eager
def take(a: Any, indices: Any, axis: int | None = None) -> Tracer:
    x = to_tracer(a, "hnp.take")
    if axis is None:
        x = reshape(x, (x.size,))
        axis = 0
    axis = normalize_axis(axis, x.ndim, "hnp.take")
    idx = to_tracer(indices, "hnp.take indices")
    return gather_axis(x, axis, _wrapped(idx, x.shape[axis]))


@eager
def take_along_axis(arr: Any, indices: Any, axis: int) -> Tracer:
    x = to_tracer(arr, "hnp.take_along_axis")
    idx = to_tracer(indices, "hnp.take_along_axis indices")
    axis = normalize_axis(axis, x.ndim, "hnp.take_along_axis")
    if idx.ndim != x.ndim:
        raise ValueError(located(f"hnp.take_along_axis: indices of shape "
                                 f"{shape_text(idx.shape)} must have the array's rank {x.ndim}"))
    shape = tuple(n if d == axis else max(n, m)
                  for d, (n, m) in enumerate(zip(idx.shape, x.shape)))
    idx = _wrapped(broadcast_to(idx, shape), x.shape[axis])
    x = broadcast_to(x, tuple(m if d == axis else shape[d] for d, m in enumerate(x.shape)))
    batch = tuple(d for d in range(x.ndim) if d != axis)
    return bind(Op.GATHER, [x, reshape(idx, idx.shape + (1,))], attrs={
        "offset_dims": (), "collapsed_slice_dims": (axis,), "start_index_map": (axis,),
        "operand_batching_dims": batch, "start_indices_batching_dims": batch,
        "index_vector_dim": x.ndim, "slice_sizes": (1,) * x.ndim}, weak=x.weak)


def _less_than(dtype: DType, operands: int) -> Computation:
    """Ascending on the first operand; floats in total order (NaN last, as JAX sorts them)."""

    def build(b: ComputationBuilder) -> Instruction:
        params = [b.parameter(i, Shape.scalar(dtype if i < 2 else DType.S32))
                  for i in range(2 * operands)]
        lhs, rhs = params[0], params[1]
        if not dtype.is_float:
            return b.add(Op.COMPARE, [lhs, rhs], attrs={"direction": "LT"})
        lt = b.add(Op.COMPARE, [lhs, rhs], attrs={"direction": "LT"})
        lhs_nan = b.add(Op.COMPARE, [lhs, lhs], attrs={"direction": "NE"})
        rhs_nan = b.add(Op.COMPARE, [rhs, rhs], attrs={"direction": "NE"})
        lhs_number = b.add(Op.NOT, [lhs_nan])
        return b.add(Op.OR, [lt, b.add(Op.AND, [lhs_number, rhs_nan])])

    return prim.scalar_computation((f"less_{dtype.text}_{operands}", "less", dtype.text,
                                    str(operands)), build)


def _sort(x: Tracer, axis: int, with_indices: bool) -> Tracer:
    comparator = _less_than(x.hlo_dtype, 2 if with_indices else 1)
    attrs = {"dimensions": (axis,), "is_stable": True}
    if not with_indices:
        return bind(Op.SORT, [x], attrs=attrs, calls=[comparator], weak=x.weak)
    iota = prim.iota(DType.S32, x.shape, axis)
    shape = Shape.tuple_of([Shape.array(x.hlo_dtype, x.shape), Shape.array(DType.S32, x.shape)])
    pair = bind(Op.SORT, [x, iota], attrs=attrs, calls=[comparator], shape=shape)
    return prim.get_tuple_element(pair, 1)


@eager
def sort(a: Any, axis: int = -1) -> Tracer:
    x = to_tracer(a, "hnp.sort")
    return _sort(x, normalize_axis(axis, x.ndim, "hnp.sort"), with_indices=False)


@eager
def argsort(a: Any, axis: int = -1) -> Tracer:
    x = to_tracer(a, "hnp.argsort")
    return _sort(x, normalize_axis(axis, x.ndim, "hnp.argsort"), with_indices=True)
