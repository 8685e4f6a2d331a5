"""Basic indexing of traced arrays (`x[:, 0]`, `x[1:3]`, `x[::2]`, `x[None]`, `x[i]` with a traced
integer `i`) and functional updates (`x.at[i].set(v)`, `.add(v)`, ...).

Static indices become a slice (and a reverse for negative steps) followed by a reshape, as in
JAX's HLO; a traced integer index becomes a dynamic-slice. Updates write the region back with
dynamic-update-slice, or with pad + select when the region has strides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.shape_ops import broadcast_to, shape_text
from hlofuse.frontend.tracer import Tracer, constant, to_tracer
from hlofuse.frontend.tracing import located
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op


@dataclass(frozen=True, slots=True)
class _Dim:
    """How one dimension of the operand is indexed, in ascending (start, limit, stride) form."""

    start: int
    limit: int
    stride: int
    count: int  # elements selected
    keep: bool  # False for an integer index: the dimension is squeezed out
    reverse: bool = False
    dynamic: Tracer | None = None


def _is_int(e: object) -> bool:
    return isinstance(e, int | np.integer) and not isinstance(e, bool | np.bool_)


def _advanced(e: object) -> NotImplementedError:
    return NotImplementedError(located(
        f"indexing with {type(e).__name__} (advanced indexing, a gather) is not implemented; "
        "use integers, slices, None, ... or a traced integer scalar"))


def _static_slice(s: slice, size: int) -> _Dim:
    for bound in (s.start, s.stop, s.step):
        if isinstance(bound, Tracer):
            raise TypeError(located("slice bounds must be known while tracing (the result's "
                                    "shape depends on them); use hlofuse.lax.dynamic_slice"))
    start, stop, step = s.indices(size)
    count = len(range(start, stop, step))
    if count == 0:
        return _Dim(0, 0, 1, 0, True)
    if step > 0:
        return _Dim(start, start + (count - 1) * step + 1, step, count, True)
    first = start + (count - 1) * step
    return _Dim(first, start + 1, -step, count, True, reverse=True)


def _dynamic_index(e: Tracer, size: int) -> _Dim:
    if e.shape or not e.hlo_dtype.is_integer:
        raise _advanced(e) if e.shape else TypeError(located(
            f"array indices must be integers, got a traced {e.hlo_dtype.numpy} scalar"))
    i = prim.convert(e, DType.S32)
    zero = constant(0, DType.S32)
    wrapped = prim.binary(Op.ADD, i, constant(size, DType.S32))
    i = prim.select(prim.compare(i, zero, "LT"), wrapped, i)
    return _Dim(0, size, 1, 1, False, dynamic=i)


def _parse(x: Tracer, index: Any) -> tuple[list[_Dim], tuple[int, ...]]:
    """Per-dimension indexing and the result shape (with None axes inserted)."""
    entries = list(index) if isinstance(index, tuple) else [index]
    for e in entries:
        if isinstance(e, Tracer) and e.shape or isinstance(e, list | np.ndarray | bool):
            raise _advanced(e)
    consumed = sum(1 for e in entries if e is not None and e is not Ellipsis)
    if sum(1 for e in entries if e is Ellipsis) > 1:
        raise IndexError(located("an index can only have a single ellipsis ('...')"))
    if consumed > x.ndim:
        raise IndexError(located(f"too many indices for array of shape {shape_text(x.shape)}: "
                                 f"{consumed} were given"))
    # Identity tests only: `in` and `index` would compare traced entries with ==.
    at = next((i for i, e in enumerate(entries) if e is Ellipsis), None)
    if at is not None:
        entries[at:at + 1] = [slice(None)] * (x.ndim - consumed)
    else:
        entries += [slice(None)] * (x.ndim - consumed)
    dims: list[_Dim] = []
    out_shape: list[int] = []
    for e in entries:
        if e is None:
            out_shape.append(1)
            continue
        size = x.shape[len(dims)]
        if isinstance(e, slice):
            dims.append(_static_slice(e, size))
            out_shape.append(dims[-1].count)
        elif _is_int(e):
            i = int(e)
            if not -size <= i < size:
                raise IndexError(located(f"index {i} is out of bounds for axis {len(dims)} with "
                                         f"size {size}"))
            i %= size
            dims.append(_Dim(i, i + 1, 1, 1, False))
        elif isinstance(e, Tracer):
            dims.append(_dynamic_index(e, size))
        else:
            raise _advanced(e)
    return dims, tuple(out_shape)


def _read_region(x: Tracer, dims: list[_Dim]) -> Tracer:
    """The selected region, every dimension kept, in ascending order."""
    region = prim.slice_(x, [d.start for d in dims], [d.limit for d in dims],
                         [d.stride for d in dims])
    if any(d.dynamic is not None for d in dims):
        starts: list[Tracer | int] = [d.dynamic if d.dynamic is not None else 0 for d in dims]
        sizes = [1 if d.dynamic is not None else region.shape[i] for i, d in enumerate(dims)]
        region = prim.dynamic_slice(region, starts, sizes)
    return region


def getitem(x: Tracer, index: Any) -> Tracer:
    from hlofuse.frontend import gather_scatter  # x[idx] with an integer array: a gather

    advanced = gather_scatter.array_index(x, index)
    if advanced is not None:
        return gather_scatter.gather_axis(x, *advanced)
    dims, out_shape = _parse(x, index)
    region = _read_region(x, dims)
    region = prim.rev(region, [i for i, d in enumerate(dims) if d.reverse])
    return prim.reshape(region, out_shape)


_UPDATE_OPS = {"add": Op.ADD, "multiply": Op.MULTIPLY, "min": Op.MINIMUM, "max": Op.MAXIMUM}


def update(x: Tracer, index: Any, value: Any, mode: str) -> Tracer:
    """x with the indexed region replaced by (or combined under `mode` with) `value`."""
    from hlofuse.frontend import gather_scatter  # x.at[idx] with an integer array: a scatter

    advanced = gather_scatter.array_index(x, index)
    if advanced is not None:
        return gather_scatter.scatter_axis(x, *advanced, value, mode)
    dims, out_shape = _parse(x, index)
    if any(d.count == 0 for d in dims):
        return x
    v = prim.convert(to_tracer(value, f".at[].{mode} value"), x.hlo_dtype, x.weak)
    try:
        v = broadcast_to(v, out_shape)
    except ValueError:
        raise ValueError(located(f".at[].{mode}: value of shape {shape_text(v.shape)} does not "
                                 f"fit the indexed region {shape_text(out_shape)}")) from None
    v = prim.reshape(v, [d.count for d in dims])
    v = prim.rev(v, [i for i, d in enumerate(dims) if d.reverse])
    if mode != "set":
        op = _UPDATE_OPS[mode]
        if x.hlo_dtype.is_pred and op in (Op.ADD, Op.MAXIMUM):
            op = Op.OR
        elif x.hlo_dtype.is_pred:
            op = Op.AND
        v = prim.binary(op, _read_region(x, dims), v)
    if all(d.stride == 1 for d in dims):
        starts: list[Tracer | int] = [d.dynamic if d.dynamic is not None else d.start
                                      for d in dims]
        return prim.dynamic_update_slice(x, v, starts)
    if any(d.dynamic is not None for d in dims):
        raise NotImplementedError(located("an update that mixes a traced index with a strided "
                                          "slice is not implemented"))
    config = [(d.start, x.shape[i] - d.limit, d.stride - 1) for i, d in enumerate(dims)]
    spread = prim.pad(v, constant(0, x.hlo_dtype), config)
    mask = prim.pad(prim.full(v.shape, True, DType.PRED), constant(False, DType.PRED), config)
    return prim.select(mask, spread, x)


class IndexUpdateRef:
    """`x.at[index]`: functional updates of the indexed region."""

    def __init__(self, x: Tracer, index: Any) -> None:
        self.x = x
        self.index = index

    def get(self) -> Tracer:
        return getitem(self.x, self.index)

    def set(self, value: Any) -> Tracer:
        return update(self.x, self.index, value, "set")

    def add(self, value: Any) -> Tracer:
        return update(self.x, self.index, value, "add")

    def multiply(self, value: Any) -> Tracer:
        return update(self.x, self.index, value, "multiply")

    def min(self, value: Any) -> Tracer:
        return update(self.x, self.index, value, "min")

    def max(self, value: Any) -> Tracer:
        return update(self.x, self.index, value, "max")


class IndexUpdateHelper:
    """`x.at`: indexing it gives an IndexUpdateRef."""

    def __init__(self, x: Tracer) -> None:
        self.x = x

    def __getitem__(self, index: Any) -> IndexUpdateRef:
        return IndexUpdateRef(self.x, index)
