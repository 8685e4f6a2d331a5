"""NumPy-style shape operations on traced arrays: broadcasting, reshape, transpose, joins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.dtype_rules import promote
from hlofuse.frontend.eager import eager
from hlofuse.frontend.tracer import Tracer, to_tracer, value_type
from hlofuse.frontend.tracing import located


def shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(shapes: Sequence[Sequence[int]], name: str) -> tuple[int, ...]:
    """NumPy broadcasting; the error names the operation, every shape and the user's line."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        size = 1
        for shape in shapes:
            pos = axis - (rank - len(shape))
            if pos < 0 or shape[pos] in (1, size):
                continue
            if size != 1:
                listed = " and ".join(shape_text(s) for s in shapes)
                raise ValueError(located(f"{name}: shapes {listed} cannot be broadcast "
                                         "together"))
            size = shape[pos]
        out.append(size)
    return tuple(out)


def normalize_axis(axis: int, rank: int, name: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(located(f"{name}: axis must be an int, got {type(axis).__name__}"))
    if not -rank <= axis < rank:
        raise ValueError(located(f"{name}: axis {axis} is out of bounds for an array of rank "
                                 f"{rank}"))
    return axis % rank


def normalize_axes(axis: Any, rank: int, name: str) -> tuple[int, ...]:
    """None means every axis; an int or a sequence of ints otherwise."""
    if axis is None:
        return tuple(range(rank))
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    out = tuple(normalize_axis(a, rank, name) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(located(f"{name}: repeated axis in {axis}"))
    return out


def _to_shape(shape: Any, name: str) -> tuple[int, ...]:
    dims = tuple(shape) if isinstance(shape, tuple | list) else (shape,)
    for d in dims:
        if isinstance(d, Tracer):
            raise TypeError(located(f"{name}: shapes must be known while tracing, got a traced "
                                    "value; pass the size as a static argument"))
        if not isinstance(d, int) or isinstance(d, bool) or d < -1:
            raise TypeError(located(f"{name}: invalid dimension {d!r} in shape {shape!r}"))
    return tuple(int(d) for d in dims)


@eager
def broadcast_to(x: Any, shape: Any) -> Tracer:
    x = to_tracer(x)
    shape = _to_shape(shape, "hnp.broadcast_to")
    if broadcast_shapes([x.shape, shape], "hnp.broadcast_to") != shape:
        raise ValueError(located(f"hnp.broadcast_to: cannot broadcast {shape_text(x.shape)} to "
                                 f"{shape_text(shape)}"))
    offset = len(shape) - x.ndim
    return prim.broadcast_in_dim(x, shape, tuple(range(offset, len(shape))))


@eager
def reshape(x: Any, shape: Any) -> Tracer:
    x = to_tracer(x)
    dims = list(_to_shape(shape, "hnp.reshape"))
    if dims.count(-1) > 1:
        raise ValueError(located("hnp.reshape: only one dimension can be -1"))
    known = 1
    for d in dims:
        known *= d if d != -1 else 1
    if -1 in dims:
        if known == 0 or x.size % known:
            raise ValueError(located(f"hnp.reshape: cannot reshape {shape_text(x.shape)} into "
                                     f"{shape_text(tuple(dims))}"))
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise ValueError(located(f"hnp.reshape: cannot reshape {shape_text(x.shape)} "
                                 f"({x.size} elements) into {shape_text(tuple(dims))}"))
    return prim.reshape(x, dims)


@eager
def ravel(x: Any) -> Tracer:
    x = to_tracer(x)
    return prim.reshape(x, (x.size,))


@eager
def transpose(x: Any, axes: Any = None) -> Tracer:
    x = to_tracer(x)
    if axes is None:
        perm = tuple(range(x.ndim - 1, -1, -1))
    else:
        perm = tuple(normalize_axis(a, x.ndim, "hnp.transpose") for a in axes)
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(located(f"hnp.transpose: axes {tuple(axes)} are not a permutation "
                                     f"of {x.ndim} axes"))
    return prim.transpose(x, perm)


@eager
def expand_dims(x: Any, axis: Any) -> Tracer:
    x = to_tracer(x)
    axes = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
    rank = x.ndim + len(axes)
    new = sorted(normalize_axis(a, rank, "hnp.expand_dims") for a in axes)
    dims = list(x.shape)
    for a in new:
        dims.insert(a, 1)
    return prim.reshape(x, dims)


@eager
def squeeze(x: Any, axis: Any = None) -> Tracer:
    x = to_tracer(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = normalize_axes(axis, x.ndim, "hnp.squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(located(f"hnp.squeeze: axis {a} of shape {shape_text(x.shape)} has "
                                     f"size {x.shape[a]}, not 1"))
    return prim.reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


def _joinable(arrays: Sequence[Any], name: str) -> list[Tracer]:
    if isinstance(arrays, Tracer) or not isinstance(arrays, tuple | list) or not arrays:
        raise TypeError(located(f"{name} needs a non-empty list or tuple of arrays"))
    types = [value_type(a, name)[1:] for a in arrays]
    dtype, weak = promote(*types)
    return [prim.convert(to_tracer(a), dtype, weak) for a in arrays]


@eager
def concatenate(arrays: Sequence[Any], axis: int = 0) -> Tracer:
    xs = _joinable(arrays, "hnp.concatenate")
    rank = xs[0].ndim
    if rank == 0:
        raise ValueError(located("hnp.concatenate: zero-dimensional arrays cannot be "
                                 "concatenated"))
    axis = normalize_axis(axis, rank, "hnp.concatenate")
    for x in xs[1:]:
        same = x.ndim == rank and all(a == b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape))
                                      if i != axis)
        if not same:
            raise ValueError(located(f"hnp.concatenate: shapes {shape_text(xs[0].shape)} and "
                                     f"{shape_text(x.shape)} differ outside axis {axis}"))
    return prim.concatenate(xs, axis)


@eager
def stack(arrays: Sequence[Any], axis: int = 0) -> Tracer:
    xs = _joinable(arrays, "hnp.stack")
    for x in xs[1:]:
        if x.shape != xs[0].shape:
            raise ValueError(located(f"hnp.stack: all arrays need the same shape, got "
                                     f"{shape_text(xs[0].shape)} and {shape_text(x.shape)}"))
    axis = normalize_axis(axis, xs[0].ndim + 1, "hnp.stack")
    return prim.concatenate([expand_dims(x, axis) for x in xs], axis)


@eager
def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Tracer]:
    x = to_tracer(x)
    axis = normalize_axis(axis, x.ndim, "hnp.split")
    size = x.shape[axis]
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0 or size % sections:
            raise ValueError(located(f"hnp.split: axis {axis} of size {size} cannot be split "
                                     f"into {sections} equal sections"))
        cuts = [size // sections * i for i in range(1, sections)]
    else:
        cuts = [min(max(int(c) + (size if c < 0 else 0), 0), size)
                for c in indices_or_sections]
    bounds = [0, *cuts, size]
    out = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        starts = [0] * x.ndim
        limits = list(x.shape)
        starts[axis], limits[axis] = start, max(start, stop)
        out.append(prim.slice_(x, starts, limits))
    return out
