"""Shapes of the windowed ops besides reduce-window: select-and-scatter and convolution."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.attrs import ConvDimLabels, Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_scalar_computation,
    require_array,
)
from hlofuse.ir.shapes import Shape


def _window_output_dims(dims: tuple[int, ...], window: Window, op: str) -> tuple[int, ...]:
    if window.rank != len(dims):
        raise ShapeError(f"{op} window has rank {window.rank}, operand rank {len(dims)}")
    out = []
    for axis, size in enumerate(dims):
        if not (window.size[axis] >= 1 and window.stride[axis] >= 1
                and window.lhs_dilate[axis] >= 1 and window.rhs_dilate[axis] >= 1):
            raise ShapeError(f"{op} window size, stride and dilations must be >= 1 in "
                             f"dimension {axis}")
        base = (size - 1) * window.lhs_dilate[axis] + 1 if size else 0
        padded = base + window.pad_low[axis] + window.pad_high[axis]
        extent = (window.size[axis] - 1) * window.rhs_dilate[axis] + 1
        out.append(0 if padded < extent else (padded - extent) // window.stride[axis] + 1)
    return tuple(out)


def select_and_scatter(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                       declared: Shape | None, op: str = "select-and-scatter") -> Shape:
    x = require_array(operands[0], "select-and-scatter operand")
    source = require_array(operands[1], "select-and-scatter source")
    init = require_array(operands[2], "select-and-scatter initial value")
    if not (init.is_scalar and init.dtype == source.dtype):
        raise ShapeError(f"select-and-scatter initial value {init.text(False)} must be a "
                         f"{source.dtype.text} scalar")
    window = attrs.get("window")
    assert isinstance(window, Window)
    expected = _window_output_dims(x.dims, window, op)
    if source.dims != expected:
        raise ShapeError(f"select-and-scatter source {source.text(False)} must have the "
                         f"window's output dimensions {list(expected)}")
    if len(calls) != 2:
        raise ShapeError("select-and-scatter needs select= and scatter=")
    scalar = Shape.scalar(x.dtype)
    check_scalar_computation(calls[0], [scalar, scalar], Shape.scalar(DType.PRED), op,
                             "select computation")
    s = Shape.scalar(source.dtype)
    check_scalar_computation(calls[1], [s, s], s, op, "scatter computation")
    return Shape.array(source.dtype, x.dims)


def convolution(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "convolution") -> Shape:
    lhs = require_array(operands[0], "convolution input")
    rhs = require_array(operands[1], "convolution kernel")
    labels = attrs.get("dim_labels")
    if not isinstance(labels, ConvDimLabels):
        raise ShapeError("convolution needs dim_labels=")
    spatial = labels.spatial_rank
    if not (lhs.rank == rhs.rank == spatial + 2):
        raise ShapeError(f"convolution dim_labels {labels.text()} need operands of rank "
                         f"{spatial + 2}, got {lhs.text(False)} and {rhs.text(False)}")
    window = attrs.get("window", Window.of((1,) * spatial))
    assert isinstance(window, Window)
    if window.rank != spatial:
        raise ShapeError(f"convolution window has rank {window.rank}, but dim_labels name "
                         f"{spatial} spatial dimensions")
    groups = attrs.get("feature_group_count", 1)
    batch_groups = attrs.get("batch_group_count", 1)
    assert isinstance(groups, int) and isinstance(batch_groups, int)
    if groups < 1 or batch_groups < 1 or (groups > 1 and batch_groups > 1):
        raise ShapeError(f"convolution feature_group_count={groups} and batch_group_count="
                         f"{batch_groups} must be >= 1 and not both above 1")
    batch = lhs.dims[labels.input_batch]
    features = lhs.dims[labels.input_feature]
    kernel_in = rhs.dims[labels.kernel_input_feature]
    kernel_out = rhs.dims[labels.kernel_output_feature]
    if features != kernel_in * groups:
        raise ShapeError(f"convolution input features ({features}) must be the kernel's input "
                         f"features ({kernel_in}) times feature_group_count ({groups})")
    if kernel_out % groups or kernel_out % batch_groups or batch % batch_groups:
        raise ShapeError(f"convolution kernel output features ({kernel_out}) and batch "
                         f"({batch}) must divide by the group counts")
    for i in range(spatial):
        if window.size[i] != rhs.dims[labels.kernel_spatial[i]]:
            raise ShapeError(f"convolution window size {window.size[i]} in spatial dimension "
                             f"{i} does not match the kernel's "
                             f"{rhs.dims[labels.kernel_spatial[i]]}")
    spatial_out = _window_output_dims(tuple(lhs.dims[d] for d in labels.input_spatial),
                                      window, op)
    out = [0] * (spatial + 2)
    out[labels.output_batch] = batch // batch_groups
    out[labels.output_feature] = kernel_out
    for i, d in enumerate(labels.output_spatial):
        out[d] = spatial_out[i]
    if lhs.dtype != rhs.dtype and declared is None:
        raise ShapeError(f"convolution operands differ in element type: {lhs.dtype.text} and "
                         f"{rhs.dtype.text}")
    dtype = declared.dtype if declared is not None and declared.is_array else lhs.dtype
    return Shape.array(dtype, tuple(out))
