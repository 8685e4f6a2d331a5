"""Shapes of sort (with its comparator's signature) and top-k."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_dims,
    check_scalar_computation,
    int_attrs,
    require_array,
)
from hlofuse.ir.shapes import Shape


def sort(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "sort") -> Shape:
    inputs = [require_array(s, "sort operand") for s in operands]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            raise ShapeError(f"sort operands {inputs[0].text(False)} and {s.text(False)} differ "
                             "in shape")
    dims = int_attrs(attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"sort needs exactly one dimension, got {list(dims)}")
    check_dims(dims, max(inputs[0].rank, 1), "sort dimensions")
    if len(calls) != 1:
        raise ShapeError("sort needs a comparator (to_apply=)")
    params = [Shape.scalar(s.dtype) for s in inputs for _ in range(2)]
    check_scalar_computation(calls[0], params, Shape.scalar(DType.PRED), op, "comparator")
    outs = [Shape.array(s.dtype, s.dims) for s in inputs]
    return outs[0] if len(outs) == 1 else Shape.tuple_of(outs)


def topk(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "topk") -> Shape:
    x = require_array(operands[0], "topk operand")
    k = attrs.get("k")
    assert isinstance(k, int)
    if x.rank < 1 or not 0 <= k <= x.dims[-1]:
        raise ShapeError(f"topk k={k} does not fit the last dimension of {x.text(False)}")
    dims = x.dims[:-1] + (k,)
    return Shape.tuple_of([Shape.array(x.dtype, dims), Shape.array(DType.S32, dims)])
