"""Shape and element-type rules of HLO operations (XLA's ShapeInference, restated)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.shapes import Shape

if TYPE_CHECKING:
    from hlofuse.ir.hlo import Computation


class ShapeError(ValueError):
    """An operation's operands, attributes or declared shape are inconsistent."""


Attrs = Mapping[str, object]
Calls = Sequence["Computation"]


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ShapeError(message)


def _array(shape: Shape, what: str) -> Shape:
    if not shape.is_array:  # format the message only on failure: this runs per instruction
        raise ShapeError(f"{what} must be an array, got {shape.text(False)}")
    return shape


def _ints(attrs: Attrs, key: str) -> tuple[int, ...]:
    value = attrs.get(key, ())
    assert isinstance(value, tuple)
    return value


def _declared(declared: Shape | None, op: str) -> Shape:
    if declared is None:
        raise ShapeError(f"{op} needs its result shape written out")
    assert declared is not None
    return declared


def _check_dims(dims: tuple[int, ...], rank: int, what: str, unique: bool = True) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{what} {list(dims)} has dimension {d} out of range for rank {rank}")
    if unique:
        if len(set(dims)) != len(dims):
            raise ShapeError(f"{what} {list(dims)} repeats a dimension")


# --- element-wise -------------------------------------------------------------------------


def same_shape_operands(operands: Sequence[Shape], op: str) -> Shape:
    first = _array(operands[0], f"{op} operand")
    for other in operands[1:]:
        _array(other, f"{op} operand")
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
    pred, on_true, on_false = (_array(s, "select operand") for s in operands)
    if pred.dtype is not DType.PRED:
        raise ShapeError(f"select predicate must be pred, got {pred.dtype.text}")
    out = same_shape_operands([on_true, on_false], op)
    if not (pred.dims == out.dims or pred.is_scalar):
        raise ShapeError(f"select predicate shape {pred.text(False)} does not match "
                         f"{out.text(False)}")
    return out


def clamp(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
          op: str = "clamp") -> Shape:
    low, x, high = (_array(s, "clamp operand") for s in operands)
    for bound in (low, high):
        if not (bound.dtype == x.dtype and (bound.dims == x.dims or bound.is_scalar)):
            raise ShapeError(f"clamp bound {bound.text(False)} does not match operand "
                             f"{x.text(False)}")
    return Shape.array(x.dtype, x.dims)


def convert(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "convert") -> Shape:
    x = _array(operands[0], f"{op} operand")
    target = _declared(declared, op)
    if not (target.is_array and target.dims == x.dims):
        raise ShapeError(f"{op} result {target.text(False)} must have the operand's dimensions "
                         f"{list(x.dims)}")
    return Shape.array(target.dtype, x.dims)


def bitcast_convert(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                    declared: Shape | None, op: str = "bitcast-convert") -> Shape:
    x = _array(operands[0], f"{op} operand")
    target = _declared(declared, op)
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


# --- leaves -------------------------------------------------------------------------------


def declared_array(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                   op: str = "op") -> Shape:
    return _declared(declared, op)


def iota(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "iota") -> Shape:
    out = _declared(declared, op)
    _require(out.is_array and out.rank >= 1, "iota needs an array result of rank >= 1")
    dim = attrs.get("iota_dimension")
    assert isinstance(dim, int)
    if not 0 <= dim < out.rank:
        raise ShapeError(f"iota_dimension={dim} out of range for rank {out.rank}")
    _require(not out.dtype.is_pred, "iota cannot produce pred")
    return out


def constant(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
             op: str = "constant") -> Shape:
    out = _declared(declared, op)
    literal = attrs.get("literal")
    shape = getattr(literal, "shape", None)
    if shape != out.dims:
        raise ShapeError(f"constant literal has shape {shape}, declared {list(out.dims)}")
    literal_dtype = getattr(literal, "dtype", None)
    if not (out.is_array and literal_dtype == out.dtype.numpy):
        raise ShapeError(f"constant literal has element type {literal_dtype}, declared "
                         f"{out.dtype.text}")
    return out


# --- data movement ------------------------------------------------------------------------


def broadcast(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "broadcast") -> Shape:
    x = _array(operands[0], "broadcast operand")
    out = _declared(declared, op)
    dims = _ints(attrs, "dimensions")
    if out.dtype != x.dtype:
        raise ShapeError(f"broadcast changes element type {x.dtype.text} to "
                         f"{out.dtype.text}")
    if len(dims) != x.rank:
        raise ShapeError(f"broadcast dimensions={list(dims)} must have one entry per "
                         f"operand dimension (rank {x.rank})")
    _check_dims(dims, out.rank, "broadcast dimensions")
    for i, d in enumerate(dims):
        if not (x.dims[i] == out.dims[d] or x.dims[i] == 1):
            raise ShapeError(f"broadcast operand dimension {i} (size {x.dims[i]}) does not match "
                             f"result dimension {d} (size {out.dims[d]})")
    return Shape.array(out.dtype, out.dims)


def reshape(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "reshape") -> Shape:
    x = _array(operands[0], f"{op} operand")
    out = _declared(declared, op)
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
    x = _array(operands[0], "transpose operand")
    perm = _ints(attrs, "dimensions")
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose dimensions={list(perm)} is not a permutation of rank {x.rank}")
    return Shape.array(x.dtype, tuple(x.dims[p] for p in perm))


def slice_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "slice") -> Shape:
    x = _array(operands[0], "slice operand")
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
    x = _array(operands[0], "dynamic-slice operand")
    sizes = _ints(attrs, "dynamic_slice_sizes")
    if len(operands) != 1 + x.rank:
        raise ShapeError(f"dynamic-slice needs {x.rank} start indices, got {len(operands) - 1}")
    _scalar_indices(operands[1:], op)
    if not (len(sizes) == x.rank and all(0 <= s <= d for s, d in zip(sizes, x.dims))):
        raise ShapeError(f"dynamic_slice_sizes={list(sizes)} does not fit operand {x.text(False)}")
    return Shape.array(x.dtype, sizes)


def dynamic_update_slice(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                         declared: Shape | None, op: str = "dynamic-update-slice") -> Shape:
    x = _array(operands[0], "dynamic-update-slice operand")
    update = _array(operands[1], "dynamic-update-slice update")
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
    dims = _ints(attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"concatenate needs exactly one dimension, got {list(dims)}")
    first = _array(operands[0], "concatenate operand")
    axis = dims[0]
    _check_dims(dims, first.rank, "concatenate dimensions")
    total = 0
    for s in operands:
        _array(s, "concatenate operand")
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
    x = _array(operands[0], "pad operand")
    value = _array(operands[1], "pad value")
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
    x = _array(operands[0], "reverse operand")
    _check_dims(_ints(attrs, "dimensions"), x.rank, "reverse dimensions")
    return Shape.array(x.dtype, x.dims)


def copy(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "copy") -> Shape:
    return operands[0]


# --- reductions ---------------------------------------------------------------------------


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
    _require(len(operands) % 2 == 0 and bool(operands),
             "reduce needs as many initial values as inputs")
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    first = _array(inputs[0], "reduce input")
    for s in inputs:
        if _array(s, "reduce input").dims != first.dims:
            raise ShapeError(f"reduce inputs {first.text(False)} and {s.text(False)} differ in "
                             "shape")
    for s, init in zip(inputs, inits):
        if not (init.is_array and init.is_scalar and init.dtype == s.dtype):
            raise ShapeError(f"reduce initial value {init.text(False)} must be a {s.dtype.text} "
                             "scalar")
    dims = _ints(attrs, "dimensions")
    _check_dims(dims, first.rank, "reduce dimensions")
    _reducer_signature(calls, inputs, op)
    kept = tuple(d for i, d in enumerate(first.dims) if i not in dims)
    outs = [Shape.array(s.dtype, kept) for s in inputs]
    return outs[0] if n == 1 else Shape.tuple_of(outs)


def reduce_window(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                  declared: Shape | None, op: str = "reduce-window") -> Shape:
    _require(len(operands) % 2 == 0 and bool(operands),
             "reduce-window needs as many initial values as inputs")
    n = len(operands) // 2
    inputs, inits = operands[:n], operands[n:]
    first = _array(inputs[0], "reduce-window input")
    for s, init in zip(inputs, inits):
        _require(_array(s, "reduce-window input").dims == first.dims,
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
    lhs = _array(operands[0], "dot lhs")
    rhs = _array(operands[1], "dot rhs")
    lb, rb = _ints(attrs, "lhs_batch_dims"), _ints(attrs, "rhs_batch_dims")
    lc, rc = _ints(attrs, "lhs_contracting_dims"), _ints(attrs, "rhs_contracting_dims")
    _check_dims(lb + lc, lhs.rank, "dot lhs batch+contracting dims")
    _check_dims(rb + rc, rhs.rank, "dot rhs batch+contracting dims")
    _require(len(lb) == len(rb) and len(lc) == len(rc),
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


# --- tuples and control flow --------------------------------------------------------------


def tuple_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "tuple") -> Shape:
    return Shape.tuple_of(list(operands))


def get_tuple_element(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                      declared: Shape | None, op: str = "get-tuple-element") -> Shape:
    t = operands[0]
    if not t.is_tuple:
        raise ShapeError(f"get-tuple-element operand must be a tuple, got {t.text(False)}")
    index = attrs.get("index")
    assert isinstance(index, int)
    if not 0 <= index < len(t.elements):
        raise ShapeError(f"get-tuple-element index={index} out of range for {t.text(False)}")
    return t.elements[index]


def _signature(comp: Computation) -> tuple[list[Shape], Shape]:
    return [p.shape for p in comp.parameters], comp.root.shape


def while_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "while") -> Shape:
    _require(len(calls) == 2, "while needs condition= and body=")
    state = operands[0]
    cond_params, cond_root = _signature(calls[0])
    body_params, body_root = _signature(calls[1])
    if cond_params != [state]:
        raise ShapeError(f"while condition %{calls[0].name} must take {state.text(False)}")
    if cond_root != Shape.scalar(DType.PRED):
        raise ShapeError(f"while condition %{calls[0].name} must return pred[]")
    if not (body_params == [state] and body_root == state):
        raise ShapeError(f"while body %{calls[1].name} must map {state.text(False)} to itself")
    return state


def conditional(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "conditional") -> Shape:
    selector = operands[0]
    if not (selector.is_array and selector.is_scalar
            and selector.dtype in (DType.PRED, DType.S32)):
        raise ShapeError("conditional selector must be pred[] or s32[], got "
                         f"{selector.text(False)}")
    if not (len(calls) >= 1 and len(operands) == len(calls) + 1):
        raise ShapeError(f"conditional has {len(calls)} branches and {len(operands) - 1} branch "
                         "operands")
    if selector.dtype is DType.PRED:
        _require(len(calls) == 2, "a pred conditional needs exactly two branches")
    result = calls[0].root.shape
    for comp, arg in zip(calls, operands[1:]):
        params, root = _signature(comp)
        if params != [arg]:
            raise ShapeError(f"conditional branch %{comp.name} must take {arg.text(False)}")
        if root != result:
            raise ShapeError(f"conditional branches return different shapes: "
                             f"{result.text(False)} and {root.text(False)}")
    return result


def call(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "call") -> Shape:
    if len(calls) != 1:
        raise ShapeError(f"{op} needs exactly one called computation")
    params, root = _signature(calls[0])
    if params != list(operands):
        raise ShapeError(f"{op} passes ({', '.join(s.text(False) for s in operands)}) to "
                         f"%{calls[0].name} "
                         f"which takes ({', '.join(s.text(False) for s in params)})")
    return root


def rng_bit_generator(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                      declared: Shape | None, op: str = "rng-bit-generator") -> Shape:
    state = _array(operands[0], "rng-bit-generator state")
    out = _declared(declared, op)
    if not (out.is_tuple and len(out.elements) == 2 and out.elements[0] == state):
        raise ShapeError(f"rng-bit-generator must return (state, bits), got {out.text(False)}")
    if not (state.dtype is DType.U64 and state.rank == 1):
        raise ShapeError(f"rng-bit-generator state must be u64[n], got {state.text(False)}")
    bits = out.elements[1]
    _require(bits.is_array and bits.dtype.is_unsigned_int or bits.dtype.is_signed_int,
             "rng-bit-generator bits must be integers")
    return out


def opt_barrier(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "opt-barrier") -> Shape:
    return operands[0]


def after_all(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
              op: str = "after-all") -> Shape:
    return Shape.token()


# --- indexing: gather, scatter -------------------------------------------------------------


def _sorted_unique_in_range(dims: tuple[int, ...], rank: int, what: str,
                            need_sorted: bool = True) -> None:
    _check_dims(dims, rank, what)
    if need_sorted and list(dims) != sorted(dims):
        raise ShapeError(f"{what} {list(dims)} must be sorted")


def _index_vector(indices: Shape, index_vector_dim: int, op: str) -> tuple[int, list[int]]:
    """(length of the index vectors, the indices' other dimensions = the batch dimensions)."""
    if not indices.dtype.is_integer:
        raise ShapeError(f"{op} indices must be integers, got {indices.text(False)}")
    if not 0 <= index_vector_dim <= indices.rank:
        raise ShapeError(f"{op} index_vector_dim={index_vector_dim} out of range for indices "
                         f"{indices.text(False)} (0..{indices.rank})")
    if index_vector_dim == indices.rank:
        return 1, list(range(indices.rank))
    return (indices.dims[index_vector_dim],
            [d for d in range(indices.rank) if d != index_vector_dim])


def _batching(operand_dims: tuple[int, ...], index_dims: tuple[int, ...], operand: Shape,
              indices: Shape, index_vector_dim: int, names: tuple[str, str], op: str) -> None:
    if len(operand_dims) != len(index_dims):
        raise ShapeError(f"{op} {names[0]}={list(operand_dims)} and {names[1]}="
                         f"{list(index_dims)} must have the same length")
    _sorted_unique_in_range(operand_dims, operand.rank, f"{op} {names[0]}", need_sorted=False)
    _check_dims(index_dims, indices.rank, f"{op} {names[1]}")
    if index_vector_dim in index_dims:
        raise ShapeError(f"{op} {names[1]}={list(index_dims)} contains index_vector_dim="
                         f"{index_vector_dim}")
    for a, b in zip(operand_dims, index_dims):
        if operand.dims[a] != indices.dims[b]:
            raise ShapeError(f"{op} batching dimension {a} of the operand (size "
                             f"{operand.dims[a]}) does not match dimension {b} of the indices "
                             f"(size {indices.dims[b]})")


def gather(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "gather") -> Shape:
    operand = _array(operands[0], "gather operand")
    indices = _array(operands[1], "gather indices")
    offset_dims = _ints(attrs, "offset_dims")
    collapsed = _ints(attrs, "collapsed_slice_dims")
    start_index_map = _ints(attrs, "start_index_map")
    operand_batching = _ints(attrs, "operand_batching_dims")
    indices_batching = _ints(attrs, "start_indices_batching_dims")
    slice_sizes = _ints(attrs, "slice_sizes")
    ivd = attrs.get("index_vector_dim")
    assert isinstance(ivd, int)
    vector_size, batch_dims = _index_vector(indices, ivd, op)
    if len(slice_sizes) != operand.rank:
        raise ShapeError(f"gather slice_sizes={list(slice_sizes)} must have one entry per "
                         f"operand dimension (rank {operand.rank})")
    for d, (size, bound) in enumerate(zip(slice_sizes, operand.dims)):
        if not 0 <= size <= bound:
            raise ShapeError(f"gather slice_sizes[{d}]={size} out of range for operand "
                             f"{operand.text(False)}")
    if len(start_index_map) != vector_size:
        raise ShapeError(f"gather start_index_map={list(start_index_map)} must have one entry "
                         f"per index vector component ({vector_size})")
    _check_dims(start_index_map, operand.rank, "gather start_index_map")
    _sorted_unique_in_range(collapsed, operand.rank, "gather collapsed_slice_dims")
    _batching(operand_batching, indices_batching, operand, indices, ivd,
              ("operand_batching_dims", "start_indices_batching_dims"), op)
    for d in collapsed + operand_batching:
        if slice_sizes[d] > 1:
            raise ShapeError(f"gather collapses or batches operand dimension {d}, so its "
                             f"slice size must be at most 1, got {slice_sizes[d]}")
    overlap = set(collapsed) & set(operand_batching) or set(start_index_map) & set(
        operand_batching)
    if overlap:
        raise ShapeError(f"gather operand_batching_dims={list(operand_batching)} overlaps "
                         f"collapsed_slice_dims or start_index_map at {sorted(overlap)}")
    window = [d for d in range(operand.rank) if d not in collapsed and d not in operand_batching]
    if len(offset_dims) != len(window):
        raise ShapeError(f"gather offset_dims={list(offset_dims)} must have {len(window)} "
                         f"entries (operand rank {operand.rank} minus collapsed and batching "
                         "dimensions)")
    out_rank = len(batch_dims) + len(offset_dims)
    _sorted_unique_in_range(offset_dims, out_rank, "gather offset_dims")
    out: list[int] = []
    window_iter = iter(window)
    batch_iter = iter(batch_dims)
    for i in range(out_rank):
        if i in offset_dims:
            out.append(slice_sizes[next(window_iter)])
        else:
            out.append(indices.dims[next(batch_iter)])
    return Shape.array(operand.dtype, tuple(out))


def _scalar_computation(comp: Computation, params: list[Shape], result: Shape, op: str,
                        role: str) -> None:
    got = [p.shape for p in comp.parameters]
    if got != params:
        raise ShapeError(f"{op} {role} %{comp.name} must take "
                         f"({', '.join(s.text(False) for s in params)}), takes "
                         f"({', '.join(s.text(False) for s in got)})")
    root = comp.root.shape
    if root.is_tuple and len(root.elements) == 1 and not result.is_tuple:
        root = root.elements[0]
    if root != result:
        raise ShapeError(f"{op} {role} %{comp.name} must return {result.text(False)}, returns "
                         f"{root.text(False)}")


def scatter(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "scatter") -> Shape:
    if len(operands) < 3 or len(operands) % 2 == 0:
        raise ShapeError(f"scatter takes N operands, the indices and N updates; got "
                         f"{len(operands)} operands")
    n = (len(operands) - 1) // 2
    inputs = [_array(s, "scatter operand") for s in operands[:n]]
    indices = _array(operands[n], "scatter indices")
    updates = [_array(s, "scatter update") for s in operands[n + 1:]]
    first = inputs[0]
    for s in inputs[1:]:
        if s.dims != first.dims:
            raise ShapeError(f"scatter operands {first.text(False)} and {s.text(False)} differ "
                             "in shape")
    for s, upd in zip(inputs, updates):
        if s.dtype != upd.dtype:
            raise ShapeError(f"scatter update {upd.text(False)} must have the element type of "
                             f"its operand {s.text(False)}")
        if upd.dims != updates[0].dims:
            raise ShapeError("scatter updates differ in shape")
    update = updates[0]
    window_dims = _ints(attrs, "update_window_dims")
    inserted = _ints(attrs, "inserted_window_dims")
    to_operand = _ints(attrs, "scatter_dims_to_operand_dims")
    input_batching = _ints(attrs, "input_batching_dims")
    indices_batching = _ints(attrs, "scatter_indices_batching_dims")
    ivd = attrs.get("index_vector_dim")
    assert isinstance(ivd, int)
    vector_size, batch_dims = _index_vector(indices, ivd, op)
    _sorted_unique_in_range(window_dims, update.rank, "scatter update_window_dims")
    _sorted_unique_in_range(inserted, first.rank, "scatter inserted_window_dims")
    if len(to_operand) != vector_size:
        raise ShapeError(f"scatter scatter_dims_to_operand_dims={list(to_operand)} must have one "
                         f"entry per index vector component ({vector_size})")
    _check_dims(to_operand, first.rank, "scatter scatter_dims_to_operand_dims")
    _batching(input_batching, indices_batching, first, indices, ivd,
              ("input_batching_dims", "scatter_indices_batching_dims"), op)
    overlap = set(inserted) & set(input_batching) or set(to_operand) & set(input_batching)
    if overlap:
        raise ShapeError(f"scatter input_batching_dims={list(input_batching)} overlaps "
                         f"inserted_window_dims or scatter_dims_to_operand_dims at "
                         f"{sorted(overlap)}")
    if len(window_dims) + len(inserted) + len(input_batching) != first.rank:
        raise ShapeError(f"scatter update_window_dims ({len(window_dims)}), "
                         f"inserted_window_dims ({len(inserted)}) and input_batching_dims "
                         f"({len(input_batching)}) must add up to the operand rank {first.rank}")
    if update.rank != len(batch_dims) + len(window_dims):
        raise ShapeError(f"scatter update {update.text(False)} must have rank "
                         f"{len(batch_dims) + len(window_dims)} ({len(batch_dims)} scatter and "
                         f"{len(window_dims)} window dimensions)")
    operand_window = [d for d in range(first.rank) if d not in inserted
                      and d not in input_batching]
    for u, d in zip(window_dims, operand_window):
        if update.dims[u] > first.dims[d]:
            raise ShapeError(f"scatter update window dimension {u} (size {update.dims[u]}) is "
                             f"larger than operand dimension {d} (size {first.dims[d]})")
    scatter_dims = [d for d in range(update.rank) if d not in window_dims]
    for u, b in zip(scatter_dims, batch_dims):
        if update.dims[u] != indices.dims[b]:
            raise ShapeError(f"scatter update dimension {u} (size {update.dims[u]}) does not "
                             f"match indices dimension {b} (size {indices.dims[b]})")
    if len(calls) != 1:
        raise ShapeError("scatter needs a to_apply computation")
    scalars = [Shape.scalar(s.dtype) for s in inputs]
    _scalar_computation(calls[0], scalars * 2,
                        scalars[0] if n == 1 else Shape.tuple_of(scalars), op,
                        "update computation")
    outs = [Shape.array(s.dtype, s.dims) for s in inputs]
    return outs[0] if n == 1 else Shape.tuple_of(outs)


# --- sort, top-k, map, reduce-precision ----------------------------------------------------


def sort(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "sort") -> Shape:
    inputs = [_array(s, "sort operand") for s in operands]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            raise ShapeError(f"sort operands {inputs[0].text(False)} and {s.text(False)} differ "
                             "in shape")
    dims = _ints(attrs, "dimensions")
    if len(dims) != 1:
        raise ShapeError(f"sort needs exactly one dimension, got {list(dims)}")
    _check_dims(dims, max(inputs[0].rank, 1), "sort dimensions")
    if len(calls) != 1:
        raise ShapeError("sort needs a comparator (to_apply=)")
    params = [Shape.scalar(s.dtype) for s in inputs for _ in range(2)]
    _scalar_computation(calls[0], params, Shape.scalar(DType.PRED), op, "comparator")
    outs = [Shape.array(s.dtype, s.dims) for s in inputs]
    return outs[0] if len(outs) == 1 else Shape.tuple_of(outs)


def topk(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "topk") -> Shape:
    x = _array(operands[0], "topk operand")
    k = attrs.get("k")
    assert isinstance(k, int)
    if x.rank < 1 or not 0 <= k <= x.dims[-1]:
        raise ShapeError(f"topk k={k} does not fit the last dimension of {x.text(False)}")
    dims = x.dims[:-1] + (k,)
    return Shape.tuple_of([Shape.array(x.dtype, dims), Shape.array(DType.S32, dims)])


def map_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "map") -> Shape:
    inputs = [_array(s, "map operand") for s in operands]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            raise ShapeError(f"map operands {inputs[0].text(False)} and {s.text(False)} differ in "
                             "shape")
    dims = _ints(attrs, "dimensions")
    if dims and list(dims) != list(range(inputs[0].rank)):
        raise ShapeError(f"map dimensions={list(dims)} must be every dimension in order")
    if len(calls) != 1:
        raise ShapeError("map needs a to_apply computation")
    comp = calls[0]
    root = comp.root.shape
    if not (root.is_array and root.is_scalar):
        raise ShapeError(f"map computation %{comp.name} must return a scalar, returns "
                         f"{root.text(False)}")
    _scalar_computation(comp, [Shape.scalar(s.dtype) for s in inputs], root, op, "computation")
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


# --- windows: select-and-scatter, convolution ---------------------------------------------


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
    x = _array(operands[0], "select-and-scatter operand")
    source = _array(operands[1], "select-and-scatter source")
    init = _array(operands[2], "select-and-scatter initial value")
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
    _scalar_computation(calls[0], [scalar, scalar], Shape.scalar(DType.PRED), op,
                        "select computation")
    s = Shape.scalar(source.dtype)
    _scalar_computation(calls[1], [s, s], s, op, "scatter computation")
    return Shape.array(source.dtype, x.dims)


def convolution(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "convolution") -> Shape:
    from hlofuse.ir.attrs import ConvDimLabels

    lhs = _array(operands[0], "convolution input")
    rhs = _array(operands[1], "convolution kernel")
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
