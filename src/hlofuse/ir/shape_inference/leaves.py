"""Shapes of leaves, the instructions without operands that make values: parameter,
constant, iota, after-all."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    declared_shape,
    require,
)
from hlofuse.ir.shapes import Shape


def declared_array(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                   op: str = "op") -> Shape:
    return declared_shape(declared, op)


def iota(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "iota") -> Shape:
    out = declared_shape(declared, op)
    require(out.is_array and out.rank >= 1, "iota needs an array result of rank >= 1")
    dim = attrs.get("iota_dimension")
    assert isinstance(dim, int)
    if not 0 <= dim < out.rank:
        raise ShapeError(f"iota_dimension={dim} out of range for rank {out.rank}")
    require(not out.dtype.is_pred, "iota cannot produce pred")
    return out


def constant(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
             op: str = "constant") -> Shape:
    out = declared_shape(declared, op)
    literal = attrs.get("literal")
    shape = getattr(literal, "shape", None)
    if shape != out.dims:
        raise ShapeError(f"constant literal has shape {shape}, declared {list(out.dims)}")
    literal_dtype = getattr(literal, "dtype", None)
    if not (out.is_array and literal_dtype == out.dtype.numpy):
        raise ShapeError(f"constant literal has element type {literal_dtype}, declared "
                         f"{out.dtype.text}")
    return out


def after_all(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "after-all") -> Shape:
    return Shape.token()
