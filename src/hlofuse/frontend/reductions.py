"""NumPy reductions (sum, mean, max, min, prod, all, any, argmax, argmin) and products (dot,
matmul) on traced arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.eager import eager
from hlofuse.frontend.elementwise import promote_operands, to_bool
from hlofuse.frontend.shape_ops import normalize_axes, normalize_axis, shape_text
from hlofuse.frontend.tracer import Tracer, to_tracer
from hlofuse.frontend.tracing import located
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op


def _keep(x: Tracer, axes: tuple[int, ...], keepdims: bool, in_shape: tuple[int, ...]) -> Tracer:
    if not keepdims:
        return x
    return prim.reshape(x, [1 if i in axes else d for i, d in enumerate(in_shape)])


def _sum_dtype(dtype: DType) -> DType:
    """Booleans and narrow integers are summed in the default integer type, as JAX does."""
    if dtype.is_pred or (dtype.is_signed_int and dtype.bits < 32):
        return DType.S32
    if dtype.is_unsigned_int and dtype.bits < 32:
        return DType.U32
    return dtype


def _reduce(x: Tracer, axes: tuple[int, ...], op: Op, init: object) -> Tracer:
    return prim.reduce(x, init, op, axes)


@eager
def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:  # noqa: A001
    x = to_tracer(x)
    axes = normalize_axes(axis, x.ndim, "hnp.sum")
    dtype = _sum_dtype(x.hlo_dtype)
    out = _reduce(prim.convert(x, dtype, x.weak and dtype is x.hlo_dtype), axes, Op.ADD, 0)
    return _keep(out, axes, keepdims, x.shape)


@eager
def prod(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:
    x = to_tracer(x)
    axes = normalize_axes(axis, x.ndim, "hnp.prod")
    dtype = _sum_dtype(x.hlo_dtype)
    out = _reduce(prim.convert(x, dtype, x.weak and dtype is x.hlo_dtype), axes, Op.MULTIPLY, 1)
    return _keep(out, axes, keepdims, x.shape)


@eager
def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:
    x = to_tracer(x)
    axes = normalize_axes(axis, x.ndim, "hnp.mean")
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    dtype = x.hlo_dtype if x.hlo_dtype.is_float else DType.F32
    total = _reduce(prim.convert(x, dtype, x.weak), axes, Op.ADD, 0)
    divisor = prim.full(total.shape, count, dtype)
    return _keep(prim.binary(Op.DIVIDE, total, divisor), axes, keepdims, x.shape)


def _extreme(dtype: DType, largest: bool) -> object:
    """The identity of max (largest=False gives -inf) or min (largest=True gives +inf)."""
    if dtype.is_float:
        return np.inf if largest else -np.inf
    if dtype.is_pred:
        return largest
    info = np.iinfo(dtype.numpy)
    return info.max if largest else info.min


def _check_nonempty(x: Tracer, axes: tuple[int, ...], name: str) -> None:
    if 0 in [x.shape[a] for a in axes]:
        raise ValueError(located(f"{name}: zero-size array {shape_text(x.shape)} has no "
                                 "identity for this reduction"))


@eager
def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:  # noqa: A001
    x = to_tracer(x)
    axes = normalize_axes(axis, x.ndim, "hnp.max")
    _check_nonempty(x, axes, "hnp.max")
    op = Op.OR if x.hlo_dtype.is_pred else Op.MAXIMUM
    out = _reduce(x, axes, op, _extreme(x.hlo_dtype, largest=False))
    return _keep(out, axes, keepdims, x.shape)


@eager
def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:  # noqa: A001
    x = to_tracer(x)
    axes = normalize_axes(axis, x.ndim, "hnp.min")
    _check_nonempty(x, axes, "hnp.min")
    op = Op.AND if x.hlo_dtype.is_pred else Op.MINIMUM
    out = _reduce(x, axes, op, _extreme(x.hlo_dtype, largest=True))
    return _keep(out, axes, keepdims, x.shape)


amax, amin = max, min


@eager
def all(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:  # noqa: A001
    x = to_bool(x, "hnp.all")
    axes = normalize_axes(axis, x.ndim, "hnp.all")
    return _keep(_reduce(x, axes, Op.AND, True), axes, keepdims, x.shape)


@eager
def any(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:  # noqa: A001
    x = to_bool(x, "hnp.any")
    axes = normalize_axes(axis, x.ndim, "hnp.any")
    return _keep(_reduce(x, axes, Op.OR, False), axes, keepdims, x.shape)


def _argreduce(x: Any, axis: Any, keepdims: bool, direction: str, name: str) -> Tracer:
    x = to_tracer(x)
    if axis is None:
        flat = prim.reshape(x, (x.size,))
        out = _argreduce(flat, 0, False, direction, name)
        return prim.reshape(out, (1,) * x.ndim) if keepdims else out
    a = normalize_axis(axis, x.ndim, name)
    _check_nonempty(x, (a,), name)
    if x.hlo_dtype.is_pred:
        x = prim.convert(x, DType.S32)
    init = _extreme(x.hlo_dtype, largest=direction == "LT")
    out = prim.argreduce(x, a, direction, init)
    return _keep(out, (a,), keepdims, x.shape)


@eager
def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:
    return _argreduce(x, axis, keepdims, "GT", "hnp.argmax")


@eager
def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Tracer:
    return _argreduce(x, axis, keepdims, "LT", "hnp.argmin")


# --- products -------------------------------------------------------------------------------


def _product_operands(name: str, a: Any, b: Any) -> tuple[Tracer, Tracer]:
    x, y = promote_operands(name, a, b, shape=False)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(located(f"{name}: operands must be at least 1-D, got shapes "
                                 f"{shape_text(x.shape)} and {shape_text(y.shape)}"))
    return x, y


def _contraction_error(name: str, x: Tracer, y: Tracer, xa: int, ya: int) -> ValueError:
    return ValueError(located(f"{name}: shapes {shape_text(x.shape)} and {shape_text(y.shape)} "
                              f"do not align: axis {xa} (size {x.shape[xa]}) != axis {ya} "
                              f"(size {y.shape[ya]})"))


@eager
def matmul(a: Any, b: Any) -> Tracer:
    """NumPy's matmul: 1-D operands are promoted to matrices; batch dimensions broadcast."""
    x, y = _product_operands("hnp.matmul", a, b)
    if x.shape[-1] != y.shape[(y.ndim - 2 if y.ndim > 1 else 0)]:
        raise _contraction_error("hnp.matmul", x, y, x.ndim - 1, (y.ndim - 2 if y.ndim > 1 else 0))
    x_vec, y_vec = x.ndim == 1, y.ndim == 1
    if x_vec:
        x = prim.reshape(x, (1, x.shape[0]))
    if y_vec:
        y = prim.reshape(y, (y.shape[0], 1))
    batch_x, batch_y = x.shape[:-2], y.shape[:-2]
    if batch_x or batch_y:
        from hlofuse.frontend.shape_ops import broadcast_shapes, broadcast_to

        batch = broadcast_shapes([batch_x, batch_y], "hnp.matmul")
        x = broadcast_to(x, batch + x.shape[-2:])
        y = broadcast_to(y, batch + y.shape[-2:])
    n = len(x.shape) - 2
    batch_dims = tuple(range(n))
    out = prim.dot_general(x, y, ((n + 1,), (n,)), (batch_dims, batch_dims))
    if x_vec:
        out = prim.reshape(out, out.shape[:-2] + out.shape[-1:])
    if y_vec:
        out = prim.reshape(out, out.shape[:-1])
    return out


@eager
def dot(a: Any, b: Any) -> Tracer:
    """NumPy's dot: scalars multiply; otherwise the last axis of `a` meets the second-to-last
    axis of `b` (its only axis if it is 1-D)."""
    x = to_tracer(a)
    y = to_tracer(b)
    if x.ndim == 0 or y.ndim == 0:
        from hlofuse.frontend.elementwise import multiply

        return multiply(x, y)
    x, y = _product_operands("hnp.dot", x, y)
    y_axis = 0 if y.ndim == 1 else y.ndim - 2
    if x.shape[-1] != y.shape[y_axis]:
        raise _contraction_error("hnp.dot", x, y, x.ndim - 1, y_axis)
    return prim.dot_general(x, y, ((x.ndim - 1,), (y_axis,)))


@eager
def vdot(a: Any, b: Any) -> Tracer:
    x, y = promote_operands("hnp.vdot", a, b, shape=False)
    return dot(prim.reshape(x, (x.size,)), prim.reshape(y, (y.size,)))
