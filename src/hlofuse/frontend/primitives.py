"""Primitive operations on tracers, one HLO instruction (or a fixed few) each, like jax.lax.

These are strict: operands already have the shapes and element types the instruction needs.
`hlofuse.numpy` does the broadcasting and type promotion on top of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hlofuse.frontend.tracer import Tracer, bind, constant, to_tracer
from hlofuse.frontend.tracing import current_trace, located
from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape


def convert(x: Tracer, dtype: DType, weak: bool = False) -> Tracer:
    if x.hlo_dtype is dtype:
        return x if x.weak == weak else Tracer(x.trace, x.instruction, weak)
    return bind(Op.CONVERT, [x], shape=Shape.array(dtype, x.shape), weak=weak)


def bitcast_convert(x: Tracer, dtype: DType) -> Tracer:
    return bind(Op.BITCAST_CONVERT, [x], shape=Shape.array(dtype, x.shape))


def unary(op: Op, x: Tracer) -> Tracer:
    return bind(op, [x], weak=x.weak)


def binary(op: Op, x: Tracer, y: Tracer) -> Tracer:
    return bind(op, [x, y], weak=x.weak and y.weak)


def compare(x: Tracer, y: Tracer, direction: str) -> Tracer:
    return bind(Op.COMPARE, [x, y], attrs={"direction": direction})


def select(pred: Tracer, on_true: Tracer, on_false: Tracer) -> Tracer:
    return bind(Op.SELECT, [pred, on_true, on_false], weak=on_true.weak and on_false.weak)


def reshape(x: Tracer, shape: Sequence[int]) -> Tracer:
    shape = tuple(shape)
    if shape == x.shape:
        return x
    return bind(Op.RESHAPE, [x], shape=Shape.array(x.hlo_dtype, shape), weak=x.weak)


def broadcast_in_dim(x: Tracer, shape: Sequence[int], dims: Sequence[int]) -> Tracer:
    """Operand dimension i becomes result dimension dims[i]; size-1 dimensions expand.

    As JAX's HLO does, dimensions that expand from size 1 are first dropped with a reshape, so
    the broadcast itself maps every remaining operand dimension to one of the same size.
    """
    shape, dims = tuple(shape), tuple(dims)
    if shape == x.shape and dims == tuple(range(len(shape))):
        return x
    kept = [i for i, d in enumerate(dims) if not (x.shape[i] == 1 and shape[d] != 1)]
    if len(kept) != len(dims):
        x = reshape(x, [x.shape[i] for i in kept])
        dims = tuple(dims[i] for i in kept)
    return bind(Op.BROADCAST, [x], attrs={"dimensions": dims},
                shape=Shape.array(x.hlo_dtype, shape), weak=x.weak)


def transpose(x: Tracer, perm: Sequence[int]) -> Tracer:
    perm = tuple(perm)
    if perm == tuple(range(x.ndim)):
        return x
    return bind(Op.TRANSPOSE, [x], attrs={"dimensions": perm}, weak=x.weak)


def slice_(x: Tracer, starts: Sequence[int], limits: Sequence[int],
           strides: Sequence[int] | None = None) -> Tracer:
    strides = strides or [1] * x.ndim
    if tuple(starts) == (0,) * x.ndim and tuple(limits) == x.shape and set(strides) <= {1}:
        return x
    spec = tuple(SliceDim(s, lim, st) for s, lim, st in zip(starts, limits, strides))
    return bind(Op.SLICE, [x], attrs={"slice": spec}, weak=x.weak)


def _index_scalars(indices: Sequence[Tracer | int]) -> list[Tracer]:
    out = []
    for i in indices:
        t = to_tracer(i, "start index")
        if t.shape or not t.hlo_dtype.is_integer:
            raise TypeError(located(f"start indices must be integer scalars, got "
                                    f"{t.aval.text()}"))
        out.append(convert(t, DType.S32) if t.hlo_dtype is not DType.S32 else t)
    return out


def dynamic_slice(x: Tracer, starts: Sequence[Tracer | int], sizes: Sequence[int]) -> Tracer:
    """The window of `sizes` at `starts`; starts are clamped to keep it inside, as in XLA."""
    return bind(Op.DYNAMIC_SLICE, [x, *_index_scalars(starts)],
                attrs={"dynamic_slice_sizes": tuple(sizes)}, weak=x.weak)


def dynamic_update_slice(x: Tracer, update: Tracer, starts: Sequence[Tracer | int]) -> Tracer:
    return bind(Op.DYNAMIC_UPDATE_SLICE, [x, update, *_index_scalars(starts)], weak=x.weak)


def concatenate(xs: Sequence[Tracer], axis: int) -> Tracer:
    if len(xs) == 1:
        return xs[0]
    return bind(Op.CONCATENATE, list(xs), attrs={"dimensions": (axis,)},
                weak=all(x.weak for x in xs))


def pad(x: Tracer, value: Tracer, config: Sequence[tuple[int, int, int]]) -> Tracer:
    padding = tuple(PaddingDim(lo, hi, interior) for lo, hi, interior in config)
    return bind(Op.PAD, [x, value], attrs={"padding": padding}, weak=x.weak)


def rev(x: Tracer, dims: Sequence[int]) -> Tracer:
    if not dims:
        return x
    return bind(Op.REVERSE, [x], attrs={"dimensions": tuple(dims)}, weak=x.weak)


def iota(dtype: DType, shape: Sequence[int], dimension: int = 0) -> Tracer:
    trace = current_trace()
    instruction = trace.emit(Op.IOTA, attrs={"iota_dimension": dimension},
                             shape=Shape.array(dtype, tuple(shape)))
    return Tracer(trace, instruction)


def full(shape: Sequence[int], value: object, dtype: DType, weak: bool = False) -> Tracer:
    """A constant scalar broadcast to `shape`, as JAX writes fills."""
    scalar = constant(value, dtype, weak)
    return broadcast_in_dim(scalar, tuple(shape), ())


def get_tuple_element(t: Tracer, index: int, weak: bool = False) -> Tracer:
    return bind(Op.GET_TUPLE_ELEMENT, [t], attrs={"index": index}, weak=weak)


def custom_call(target: str, operands: Sequence[Tracer], shape: Shape) -> Tracer:
    return bind(Op.CUSTOM_CALL, list(operands), attrs={"custom_call_target": target},
                shape=shape)


def dot_general(lhs: Tracer, rhs: Tracer, contracting: tuple[Sequence[int], Sequence[int]],
                batch: tuple[Sequence[int], Sequence[int]] = ((), ())) -> Tracer:
    attrs: dict[str, object] = {}
    if batch[0]:
        attrs["lhs_batch_dims"] = tuple(batch[0])
        attrs["rhs_batch_dims"] = tuple(batch[1])
    attrs["lhs_contracting_dims"] = tuple(contracting[0])
    attrs["rhs_contracting_dims"] = tuple(contracting[1])
    lb, lc = tuple(batch[0]), tuple(contracting[0])
    rb, rc = tuple(batch[1]), tuple(contracting[1])
    dims = [lhs.shape[d] for d in lb]
    dims += [n for i, n in enumerate(lhs.shape) if i not in lb + lc]
    dims += [n for i, n in enumerate(rhs.shape) if i not in rb + rc]
    shape = Shape.array(lhs.hlo_dtype, dims)
    return bind(Op.DOT, [lhs, rhs], attrs=attrs, shape=shape, weak=lhs.weak and rhs.weak)


# --- reductions -----------------------------------------------------------------------------


def scalar_computation(key: tuple[str, ...],
                       build: Callable[[ComputationBuilder], Instruction]) -> Computation:
    """A small computation over scalars (a reducer), built once per module."""
    context = current_trace().context
    found = context.reducers.get(key)
    if found is not None:
        return found
    builder = ComputationBuilder(context.computation_name(key[0]), context.names)
    root = build(builder)
    computation = builder.build(root)
    context.reducers[key] = computation
    return computation


def binary_reducer(op: Op, dtype: DType) -> Computation:
    def build(b: ComputationBuilder) -> Instruction:
        lhs = b.parameter(0, Shape.scalar(dtype))
        rhs = b.parameter(1, Shape.scalar(dtype))
        return b.add(op, [lhs, rhs])

    return scalar_computation((f"{op.text}_{dtype.text}", op.text, dtype.text), build)


def reduce(x: Tracer, init: object, op: Op, dims: Sequence[int]) -> Tracer:
    """Reduce dimensions `dims` of `x` with the binary `op`, starting from `init`."""
    reducer = binary_reducer(op, x.hlo_dtype)
    init_value = constant(init, x.hlo_dtype)
    return bind(Op.REDUCE, [x, init_value], attrs={"dimensions": tuple(sorted(dims))},
                calls=[reducer], weak=x.weak)


def arg_reducer(dtype: DType, direction: str) -> Computation:
    """(value, index) pairs: keep the greater (GT) or smaller (LT) value, NaN first, and on
    ties the lower index; the rule JAX's argmax and argmin reduce with."""

    def build(b: ComputationBuilder) -> Instruction:
        value, index = Shape.scalar(dtype), Shape.scalar(DType.S32)
        acc_v = b.parameter(0, value)
        acc_i = b.parameter(1, index)
        new_v = b.parameter(2, value)
        new_i = b.parameter(3, index)
        better = b.add(Op.COMPARE, [acc_v, new_v], attrs={"direction": direction})
        if dtype.is_float:
            is_nan = b.add(Op.COMPARE, [acc_v, acc_v], attrs={"direction": "NE"})
            better = b.add(Op.OR, [better, is_nan])
        tie = b.add(Op.COMPARE, [acc_v, new_v], attrs={"direction": "EQ"})
        lower = b.add(Op.COMPARE, [acc_i, new_i], attrs={"direction": "LT"})
        keep_index = b.add(Op.OR, [better, b.add(Op.AND, [tie, lower])])
        out_v = b.add(Op.SELECT, [better, acc_v, new_v])
        out_i = b.add(Op.SELECT, [keep_index, acc_i, new_i])
        return b.add(Op.TUPLE, [out_v, out_i])

    name = "argmax" if direction == "GT" else "argmin"
    return scalar_computation((f"{name}_{dtype.text}", name, dtype.text), build)


def argreduce(x: Tracer, axis: int, direction: str, init: object) -> Tracer:
    indices = iota(DType.S32, x.shape, axis)
    reducer = arg_reducer(x.hlo_dtype, direction)
    out_dims = tuple(d for i, d in enumerate(x.shape) if i != axis)
    shape = Shape.tuple_of([Shape.array(x.hlo_dtype, out_dims), Shape.array(DType.S32, out_dims)])
    pair = bind(Op.REDUCE, [x, indices, constant(init, x.hlo_dtype), constant(0, DType.S32)],
                attrs={"dimensions": (axis,)}, calls=[reducer], shape=shape)
    return get_tuple_element(pair, 1)


def bind_clamp(low: Tracer, x: Tracer, high: Tracer) -> Tracer:
    return bind(Op.CLAMP, [low, x, high])


# Giles' single-precision erfinv polynomials (XLA's ErfInv32), highest degree first: in
# w - 2.5 where w = -log1p(-x*x) < 5, else in sqrt(w) - 3.
_ERF_INV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                    0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERF_INV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                 -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def erf_inv(x: Tracer) -> Tracer:
    """The inverse error function of float32 `x`, written as XLA expands it."""
    shape, dtype = x.shape, x.hlo_dtype

    def c(value: float) -> Tracer:
        return full(shape, value, dtype)

    w = unary(Op.NEGATE, unary(Op.LOG_PLUS_ONE, binary(Op.MULTIPLY, x, unary(Op.NEGATE, x))))
    central = compare(w, c(5.0), "LT")
    t = select(central, binary(Op.SUBTRACT, w, c(2.5)),
               binary(Op.SUBTRACT, unary(Op.SQRT, w), c(3.0)))
    p = select(central, c(_ERF_INV_CENTRAL[0]), c(_ERF_INV_TAIL[0]))
    for a, b in zip(_ERF_INV_CENTRAL[1:], _ERF_INV_TAIL[1:]):
        p = binary(Op.ADD, select(central, c(a), c(b)), binary(Op.MULTIPLY, p, t))
    result = binary(Op.MULTIPLY, p, x)
    is_one = compare(unary(Op.ABS, x), c(1.0), "EQ")
    return select(is_one, binary(Op.MULTIPLY, x, c(np.inf)), result)
