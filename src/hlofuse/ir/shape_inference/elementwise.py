"""Shapes of element-wise ops: same-shape operands, compare, select, clamp, convert,
bitcast-convert, reduce-precision, and map (XLA counts map as element-wise)."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_scalar_computation,
    declared_shape,
    int_attrs,
    require_array,
)
from hlofuse.ir.shapes import Shape


def same_shape_operands(operands: Sequence[Shape], op: str) -> Shape:
    first = require_array(operands[0], f"{op} operand")
    for other in operands[1:]:
        require_array(other, f"{op} operand")
        if other.dims != first.dims or other.dtype != first.dtype:
            raise ShapeError(f"{op} operands must have the same shape, got "
                             f"{first.text(False)} and {other.text(False)}")
    return Shape.array(first.dtype, first.dims)


def elementwise(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "elementwise op") -> Shape:
    return same_shape_operands(operands, op)


def elementwise_float(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                      declared: Shape | None, op: str = "op") -> Shape:
    out = same_shape_operands(operands, op)
    if not out.dtype.is_float:
        raise ShapeError(f"{op} needs a floating-point operand, got {out.dtype.text}")
    return out


def elementwise_int(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                    declared: Shape | None, op: str = "op") -> Shape:
    out = same_shape_operands(operands, op)
    if not out.dtype.is_integer:
        raise ShapeError(f"{op} needs an integer operand, got {out.dtype.text}")
    return out


def elementwise_int_or_pred(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                            declared: Shape | None, op: str = "op") -> Shape:
    out = same_shape_operands(operands, op)
    if not (out.dtype.is_integer or out.dtype.is_pred):
        raise ShapeError(f"{op} needs an integer or pred operand, got {out.dtype.text}")
    return out


def elementwise_numeric(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                        declared: Shape | None, op: str = "op") -> Shape:
    out = same_shape_operands(operands, op)
    if out.dtype.is_pred:
        raise ShapeError(f"{op} does not accept pred operands")
    return out


def is_finite(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "is-finite") -> Shape:
    out = elementwise_float(operands, attrs, calls, declared, op)
    return out.with_dtype(DType.PRED)


COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARE_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def compare(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "compare") -> Shape:
    out = same_shape_operands(operands, op)
    if attrs.get("direction") not in COMPARE_DIRECTIONS:
        raise ShapeError(f"compare direction must be one of {', '.join(COMPARE_DIRECTIONS)}")
    kind = attrs.get("type")
    if not (kind is None or kind in COMPARE_TYPES):
        raise ShapeError(f"compare type must be one of {', '.join(COMPARE_TYPES)}, got {kind}")
    # As XLA's verifier: floats take FLOAT or TOTALORDER, integers and pred only their own.
    if out.dtype.is_float:
        allowed: tuple[object, ...] = (None, "FLOAT", "TOTALORDER")
    else:
        allowed = (None, "SIGNED" if out.dtype.is_signed_int else "UNSIGNED")
    if kind not in allowed:
        raise ShapeError(f"compare type={kind} does not fit {out.dtype.text} operands")
    return out.with_dtype(DType.PRED)


def select(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "select") -> Shape:
    pred, on_true, on_false = (require_array(s, "select operand") for s in operands)
    if pred.dtype is not DType.PRED:
        raise ShapeError(f"select predicate must be pred, got {pred.dtype.text}")
    out = same_shape_operands([on_true, on_false], op)
    if not (pred.dims == out.dims or pred.is_scalar):
        raise ShapeError(f"select predicate shape {pred.text(False)} does not match "
                         f"{out.text(False)}")
    return out


def clamp(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
          op: str = "clamp") -> Shape:
    low, x, high = (require_array(s, "clamp operand") for s in operands)
    for bound in (low, high):
        if not (bound.dtype == x.dtype and (bound.dims == x.dims or bound.is_scalar)):
            raise ShapeError(f"clamp bound {bound.text(False)} does not match operand "
                             f"{x.text(False)}")
    return Shape.array(x.dtype, x.dims)


def convert(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "convert") -> Shape:
    x = require_array(operands[0], f"{op} operand")
    target = declared_shape(declared, op)
    if not (target.is_array and target.dims == x.dims):
        raise ShapeError(f"{op} result {target.text(False)} must have the operand's dimensions "
                         f"{list(x.dims)}")
    return Shape.array(target.dtype, x.dims)


def bitcast_convert(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                    declared: Shape | None, op: str = "bitcast-convert") -> Shape:
    x = require_array(operands[0], f"{op} operand")
    target = declared_shape(declared, op)
    if not target.is_array:
        raise ShapeError(f"{op} result must be an array")
    small, large = sorted((x.dtype.bits, target.dtype.bits))
    if large % small:
        raise ShapeError(f"{op} from {x.text(False)} to {target.text(False)}: the bit widths "
                         f"{x.dtype.bits} and {target.dtype.bits} must be equal or one a "
                         "multiple of the other")
    expected = bitcast_convert_dims(x.dtype.bits, x.dims, target.dtype.bits)
    if expected is None or target.dims != expected:
        ratio = large // small
        what = ("the operand's dimensions" if ratio == 1 else
                f"the operand's dimensions without the last, which must be {ratio}"
                if target.dtype.bits > x.dtype.bits else
                f"the operand's dimensions with one more of size {ratio}")
        raise ShapeError(f"{op} from {x.text(False)} to {target.text(False)}: the result must "
                         f"have {what}")
    return Shape.array(target.dtype, expected)


def bitcast_convert_dims(source_bits: int, dims: tuple[int, ...], target_bits: int
                         ) -> tuple[int, ...] | None:
    """XLA's rule: equal widths keep the dimensions; a wider result drops a last dimension of
    size target/source bits; a narrower one adds a last dimension of size source/target bits.
    None when the widths do not divide or the last dimension does not fit."""
    if source_bits == target_bits:
        return tuple(dims)
    if target_bits > source_bits:
        if target_bits % source_bits or not dims or dims[-1] != target_bits // source_bits:
            return None
        return tuple(dims[:-1])
    if source_bits % target_bits:
        return None
    return (*dims, source_bits // target_bits)


def map_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "map") -> Shape:
    inputs = [require_array(s, "map operand") for s in operands]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            raise ShapeError(f"map operands {inputs[0].text(False)} and {s.text(False)} differ in "
                             "shape")
    dims = int_attrs(attrs, "dimensions")
    if dims and list(dims) != list(range(inputs[0].rank)):
        raise ShapeError(f"map dimensions={list(dims)} must be every dimension in order")
    if len(calls) != 1:
        raise ShapeError("map needs a to_apply computation")
    comp = calls[0]
    root = comp.root.shape
    if not (root.is_array and root.is_scalar):
        raise ShapeError(f"map computation %{comp.name} must return a scalar, returns "
                         f"{root.text(False)}")
    check_scalar_computation(comp, [Shape.scalar(s.dtype) for s in inputs], root, op, "computation")
    return Shape.array(root.dtype, inputs[0].dims)


def reduce_precision(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                     declared: Shape | None, op: str = "reduce-precision") -> Shape:
    out = elementwise_float(operands, attrs, calls, declared, op)
    exponent, mantissa = attrs.get("exponent_bits"), attrs.get("mantissa_bits")
    if not (isinstance(exponent, int) and exponent >= 1):
        raise ShapeError(f"reduce-precision exponent_bits must be >= 1, got {exponent}")
    if not (isinstance(mantissa, int) and mantissa >= 0):
        raise ShapeError(f"reduce-precision mantissa_bits must be >= 0, got {mantissa}")
    return out
