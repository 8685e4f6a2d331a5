"""Shapes of the ops that move elements without computing: broadcast, reshape and bitcast,
transpose, slice, dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, copy."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_dims,
    declared_shape,
    int_attrs,
    require_array,
)
from hlofuse.ir.shapes import Shape


def broadcast(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "broadcast") -> Shape:
    x = require_array(operands[0], "broadcast operand")
    out = declared_shape(declared, op)
    dims = int_attrs(attrs, "dimensions")
    if out.dtype != x.dtype:
        raise ShapeError(f"broadcast changes element type {x.dtype.text} to "
                         f"{out.dtype.text}")
    if len(dims) != x.rank:
        raise ShapeError(f"broadcast dimensions={list(dims)} must have one entry per "
                         f"operand dimension (rank {x.rank})")
    check_dims(dims, out.rank, "broadcast dimensions")
    for i, d in enumerate(dims):
        if not (x.dims[i] == out.dims[d] or x.dims[i] == 1):
            raise ShapeError(f"broadcast operand dimension {i} (size {x.dims[i]}) does not match "
                             f"result dimension {d} (size {out.dims[d]})")
    return Shape.array(out.dtype, out.dims)


def reshape(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "reshape") -> Shape:
    x = require_array(operands[0], f"{op} operand")
    out = declared_shape(declared, op)
    # XLA's optimised HLO turns a bitcast-convert between types of one width into a bitcast:
    # the bytes stay, so only the width must agree.
    same_bytes = op == "bitcast" and out.dtype.bits == x.dtype.bits
    if out.dtype != x.dtype and not same_bytes:
        raise ShapeError(f"{op} changes element type {x.dtype.text} to {out.dtype.text}")
    if out.num_elements != x.num_elements:
        raise ShapeError(f"{op} from {x.text(False)} to {out.text(False)} changes the number of "
                         "elements")
    return Shape.array(out.dtype, out.dims)


def transpose(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "transpose") -> Shape:
    x = require_array(operands[0], "transpose operand")
    perm = int_attrs(attrs, "dimensions")
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose dimensions={list(perm)} is not a permutation of rank {x.rank}")
    return Shape.array(x.dtype, tuple(x.dims[p] for p in perm))


def slice_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "slice") -> Shape:
    x = require_array(operands[0], "slice operand")
    spec = attrs.get("slice")
    assert isinstance(spec, tuple)
    if len(spec) != x.rank:
        raise ShapeError(f"slice has {len(spec)} ranges for an operand of rank {x.rank}")
    dims = []
    for axis, s in enumerate(spec):
        assert isinstance(s, SliceDim)
        if not (0 <= s.start <= s.limit <= x.dims[axis] and s.stride >= 1):
            raise ShapeError(f"slice [{s.start}:{s.limit}:{s.stride}] is out of bounds for "
                             f"dimension {axis} of size {x.dims[axis]}")
        dims.append((s.limit - s.start + s.stride - 1) // s.stride)
    return Shape.array(x.dtype, tuple(dims))


def _scalar_indices(indices: Sequence[Shape], op: str) -> None:
    for idx in indices:
        if not (idx.is_array and idx.is_scalar and idx.dtype.is_integer):
            raise ShapeError(f"{op} start indices must be integer scalars, got {idx.text(False)}")


def dynamic_slice(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                  op: str = "dynamic-slice") -> Shape:
    x = require_array(operands[0], "dynamic-slice operand")
    sizes = int_attrs(attrs, "dynamic_slice_sizes")
    if len(operands) != 1 + x.rank:
        raise ShapeError(f"dynamic-slice needs {x.rank} start indices, got {len(operands) - 1}")
    _scalar_indices(operands[1:], op)
    if not (len(sizes) == x.rank and all(0 <= s <= d for s, d in zip(sizes, x.dims))):
        raise ShapeError(f"dynamic_slice_sizes={list(sizes)} does not fit operand {x.text(False)}")
    return Shape.array(x.dtype, sizes)


def dynamic_update_slice(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                         declared: Shape | None, op: str = "dynamic-update-slice") -> Shape:
    x = require_array(operands[0], "dynamic-update-slice operand")
    update = require_array(operands[1], "dynamic-update-slice update")
    if len(operands) != 2 + x.rank:
        raise ShapeError(f"dynamic-update-slice needs {x.rank} start indices, got "
                         f"{len(operands) - 2}")
    _scalar_indices(operands[2:], op)
    if not (update.dtype == x.dtype and update.rank == x.rank
            and all(u <= d for u, d in zip(update.dims, x.dims))):
        raise ShapeError(f"dynamic-update-slice update {update.text(False)} does not fit "
                         f"{x.text(False)}")
    return Shape.array(x.dtype, x.dims)


def concatenate(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "concatenate") -> Shape:
    dims = int_attrs(attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"concatenate needs exactly one dimension, got {list(dims)}")
    first = require_array(operands[0], "concatenate operand")
    axis = dims[0]
    check_dims(dims, first.rank, "concatenate dimensions")
    total = 0
    for s in operands:
        require_array(s, "concatenate operand")
        same = s.dtype == first.dtype and s.rank == first.rank and all(
            a == b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != axis)
        if not same:
            raise ShapeError(f"concatenate operands {first.text(False)} and {s.text(False)} differ "
                             f"outside dimension {axis}")
        total += s.dims[axis]
    out = list(first.dims)
    out[axis] = total
    return Shape.array(first.dtype, tuple(out))


def pad(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
        op: str = "pad") -> Shape:
    x = require_array(operands[0], "pad operand")
    value = require_array(operands[1], "pad value")
    if not (value.is_scalar and value.dtype == x.dtype):
        raise ShapeError(f"pad value must be a {x.dtype.text} scalar, got {value.text(False)}")
    config = attrs.get("padding")
    assert isinstance(config, tuple)
    if len(config) != x.rank:
        raise ShapeError(f"padding has {len(config)} entries for rank {x.rank}")
    dims = []
    for axis, p in enumerate(config):
        assert isinstance(p, PaddingDim)
        if p.interior < 0:
            raise ShapeError(f"pad interior padding must be >= 0, got {p.interior}")
        size = x.dims[axis]
        new = p.low + p.high + size + max(size - 1, 0) * p.interior
        if new < 0:
            raise ShapeError(f"padding {p.low}_{p.high}_{p.interior} makes dimension {axis} "
                             "negative")
        dims.append(new)
    return Shape.array(x.dtype, tuple(dims))


def reverse(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "reverse") -> Shape:
    x = require_array(operands[0], "reverse operand")
    check_dims(int_attrs(attrs, "dimensions"), x.rank, "reverse dimensions")
    return Shape.array(x.dtype, x.dims)


def copy(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "copy") -> Shape:
    return operands[0]
