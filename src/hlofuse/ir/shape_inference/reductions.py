"""Shapes of reductions: reduce, reduce-window (each with its reducer's signature), and dot,
a reduction over the contracting dimensions."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.attrs import Window
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_dims,
    int_attrs,
    require,
    require_array,
)
from hlofuse.ir.shapes import Shape


def _reducer_signature(calls: Calls, inputs: Sequence[Shape], op: str) -> None:
    """The reducer takes 2N scalars (accumulators, then values) and returns N scalars."""
    if not calls:
        raise ShapeError(f"{op} needs a to_apply computation")
    comp = calls[0]
    n = len(inputs)
    params = [p.shape for p in comp.parameters]
    expected = [Shape.scalar(s.dtype) for s in inputs] * 2
    if params != expected:
        raise ShapeError(f"{op} reducer %{comp.name} must take {len(expected)} scalars "
                         f"({', '.join(s.text(False) for s in expected)}), takes "
                         f"({', '.join(s.text(False) for s in params)})")
    root = comp.root.shape
    want = expected[0] if n == 1 else Shape.tuple_of(expected[:n])
    if n == 1 and root.is_tuple and len(root.elements) == 1:
        root = root.elements[0]
    if root != want:
        raise ShapeError(f"{op} reducer %{comp.name} must return {want.text(False)}, "
                         f"returns {root.text(False)}")


def reduce(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "reduce") -> Shape:
    require(len(operands) % 2 == 0 and bool(operands),
            "reduce needs as many initial values as inputs")
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    first = require_array(inputs[0], "reduce input")
    for s in inputs:
        if require_array(s, "reduce input").dims != first.dims:
            raise ShapeError(f"reduce inputs {first.text(False)} and {s.text(False)} differ in "
                             "shape")
    for s, init in zip(inputs, inits):
        if not (init.is_array and init.is_scalar and init.dtype == s.dtype):
            raise ShapeError(f"reduce initial value {init.text(False)} must be a {s.dtype.text} "
                             "scalar")
    dims = int_attrs(attrs, "dimensions")
    check_dims(dims, first.rank, "reduce dimensions")
    _reducer_signature(calls, inputs, op)
    kept = tuple(d for i, d in enumerate(first.dims) if i not in dims)
    outs = [Shape.array(s.dtype, kept) for s in inputs]
    return outs[0] if n == 1 else Shape.tuple_of(outs)


def reduce_window(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                  declared: Shape | None, op: str = "reduce-window") -> Shape:
    require(len(operands) % 2 == 0 and bool(operands),
            "reduce-window needs as many initial values as inputs")
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    first = require_array(inputs[0], "reduce-window input")
    for s, init in zip(inputs, inits):
        require(require_array(s, "reduce-window input").dims == first.dims,
                "reduce-window inputs differ in shape")
        if not (init.is_array and init.is_scalar and init.dtype == s.dtype):
            raise ShapeError(f"reduce-window initial value {init.text(False)} must be a "
                             f"{s.dtype.text} scalar")
    window = attrs.get("window")
    assert isinstance(window, Window)
    if window.rank != first.rank:
        raise ShapeError(f"reduce-window window has rank {window.rank}, operand "
                         f"{first.text(False)}")
    _reducer_signature(calls, inputs, op)
    dims = []
    for axis in range(first.rank):
        size = window.size[axis]
        stride = window.stride[axis]
        base = (first.dims[axis] - 1) * window.lhs_dilate[axis] + 1 if first.dims[axis] else 0
        padded = base + window.pad_low[axis] + window.pad_high[axis]
        extent = (size - 1) * window.rhs_dilate[axis] + 1
        if not (size >= 1 and stride >= 1):
            raise ShapeError(f"reduce-window size and stride must be >= 1 in "
                             f"dimension {axis}")
        dims.append(0 if padded < extent else (padded - extent) // stride + 1)
    outs = [Shape.array(s.dtype, tuple(dims)) for s in inputs]
    return outs[0] if n == 1 else Shape.tuple_of(outs)


def dot(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
        op: str = "dot") -> Shape:
    lhs = require_array(operands[0], "dot lhs")
    rhs = require_array(operands[1], "dot rhs")
    lb, rb = int_attrs(attrs, "lhs_batch_dims"), int_attrs(attrs, "rhs_batch_dims")
    lc, rc = int_attrs(attrs, "lhs_contracting_dims"), int_attrs(attrs, "rhs_contracting_dims")
    check_dims(lb + lc, lhs.rank, "dot lhs batch+contracting dims")
    check_dims(rb + rc, rhs.rank, "dot rhs batch+contracting dims")
    require(len(lb) == len(rb) and len(lc) == len(rc),
            "dot needs as many lhs as rhs batch and contracting dimensions")
    for a, b in zip(lb + lc, rb + rc):
        if lhs.dims[a] != rhs.dims[b]:
            raise ShapeError(f"dot dimension {a} of lhs {lhs.text(False)} does not match "
                             f"dimension {b} of rhs {rhs.text(False)}")
    if not (lhs.dtype == rhs.dtype or (declared is not None)):
        raise ShapeError(f"dot operands differ in element type: {lhs.dtype.text} and "
                         f"{rhs.dtype.text}")
    out_dims = [lhs.dims[d] for d in lb]
    out_dims += [s for i, s in enumerate(lhs.dims) if i not in lb + lc]
    out_dims += [s for i, s in enumerate(rhs.dims) if i not in rb + rc]
    dtype = declared.dtype if declared is not None and declared.is_array else lhs.dtype
    return Shape.array(dtype, tuple(out_dims))
