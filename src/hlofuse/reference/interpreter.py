"""Reference evaluation of any HLO module with NumPy: the oracle for every later stage.

Simple rather than fast. Element types are kept exactly (the element-wise semantics live in
`ir/elementwise_ref.py`, read through the op table). Reducers of reduce and reduce-window are
evaluated on whole arrays at once (their instructions are element-wise over scalars), so only
the reduced extent is a Python loop.

Element-wise float32/float64 arithmetic treats denormal inputs as zero and flushes denormal
results to zero (DAZ/FTZ), as XLA's CPU backend runs: `log(1e-45)` is -inf, as in JAX. The
exceptions are XLA's too: moves and sign-bit operations keep a denormal, maximum(x, x) is x
unflushed, pow reads its operands as the C library's pow does under DAZ
(`ir/elementwise_ref.power`), remainder (the C library's fmod) flushes only its divisor, and
convert between bf16 and f32 (bit work) flushes nothing.
maximum and minimum order -0 below +0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hlofuse.analysis.reducers import identity, in_index_order, reducer_op
from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.ir.shapes import Shape
from hlofuse.reference import dot, indexing, linalg
from hlofuse.reference.common import (
    CustomCallFn,
    InterpreterError,
    Value,
    as_array,
    combine,
    flush_denormals,
    pad_axis,
)
from hlofuse.reference.rnglib import THREEFRY_TARGET


def _threefry_custom_call(instruction: Instruction, operands: Sequence[Value]) -> Value:
    from hlofuse.reference import rnglib  # a library of ours, like the runtime's; pure NumPy

    return rnglib.threefry2x32_custom_call(instruction, operands)


# Library functions behind custom-call targets that hlofuse itself emits.
CUSTOM_CALL_TARGETS: dict[str, CustomCallFn] = {
    THREEFRY_TARGET: _threefry_custom_call,
}


def coerce_argument(value: object, shape: Shape, index: int) -> np.ndarray:
    """Check (and for Python scalars, convert) one entry argument against its parameter."""
    expected = shape.dtype.numpy
    if not isinstance(value, np.ndarray | np.generic):
        if isinstance(value, bool | int | float) and shape.is_scalar:
            return np.asarray(value, dtype=expected)
        raise TypeError(f"argument {index}: expected a NumPy array of {shape.text(False)}, got "
                        f"{type(value).__name__}")
    array = np.asarray(value)
    if array.dtype != expected or array.shape != shape.dims:
        raise TypeError(f"argument {index}: expected {shape.text(False)}, got "
                        f"{array.dtype}{list(array.shape)}")
    return array


def evaluate(module: Module, arguments: Sequence[object]) -> Value:
    """Run the entry computation on `arguments` (one per parameter, in order)."""
    params = module.entry.parameters
    if len(arguments) != len(params):
        raise TypeError(f"{module.name} takes {len(params)} argument(s), got {len(arguments)}")
    args = [coerce_argument(a, p.shape, i) for i, (a, p) in enumerate(zip(arguments, params))]
    try:
        return Interpreter().run(module.entry, args)
    except RecursionError:
        # Each nested call/while/fusion level is a few Python frames.
        raise InterpreterError(f"{module.name}: computations call each other too deeply for "
                               "the reference interpreter") from None


def flatten_value(value: Value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for element in value:
            out.extend(flatten_value(element))
        return out
    return [] if value is None else [value]


# One instruction of a computation's plan: the instruction, what evaluates it, the positions
# of its operands' values, and its parameter number (None for any other instruction).
_Step = tuple[Instruction, "_Handler", tuple[int, ...], int | None]
_Handler = Callable[["Interpreter", Instruction, list[Value]], Value]


class Interpreter:
    def __init__(self, custom_calls: dict[str, CustomCallFn] | None = None) -> None:
        self.custom_calls = dict(CUSTOM_CALL_TARGETS)
        self.custom_calls.update(custom_calls or {})
        # Per computation (by identity; computations are immutable), its steps and the
        # position of its root: a loop body runs once per trip, planned once.
        self._plans: dict[int, tuple[Computation, list[_Step], int]] = {}

    def _plan(self, computation: Computation) -> tuple[list[_Step], int]:
        found = self._plans.get(id(computation))
        if found is None or found[0] is not computation:
            position: dict[int, int] = {}
            steps: list[_Step] = []
            for inst in computation.instructions:
                slots = tuple(position[id(o)] for o in inst.operands)
                parameter = inst.parameter_number if inst.op is Op.PARAMETER else None
                position[id(inst)] = len(steps)
                steps.append((inst, _handler(inst), slots, parameter))
            found = (computation, steps, position[id(computation.root)])
            self._plans[id(computation)] = found
        return found[1], found[2]

    def run(self, computation: Computation, arguments: Sequence[Value]) -> Value:
        steps, root = self._plan(computation)
        values: list[Value] = []
        append = values.append
        for inst, handler, slots, parameter in steps:
            try:
                if parameter is not None:
                    append(arguments[parameter])
                    continue
                append(handler(self, inst, [values[s] for s in slots]))
            except InterpreterError:
                raise
            except (ValueError, TypeError, IndexError, KeyError) as e:
                raise InterpreterError(f"evaluating %{inst.name} ({inst.op.text}): {e}") from e
        return values[root]

    def evaluate_instruction(self, inst: Instruction, operands: list[Value]) -> Value:
        """One instruction's value from its operands' (a target that has no code of its own
        for an op evaluates it here: the TPU target's host operations)."""
        return self._evaluate(inst, operands)

    def _evaluate(self, inst: Instruction, operands: list[Value]) -> Value:
        return _handler(inst)(self, inst, operands)


def _handler(inst: Instruction) -> _Handler:
    definition = inst.definition
    if definition.kind is OpKind.ELEMENTWISE and definition.numpy is not None:
        return _elementwise_handler
    return _HANDLERS.get(inst.op, _cannot_evaluate)


def _cannot_evaluate(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    raise InterpreterError(f"%{inst.name}: the interpreter cannot evaluate {inst.op.text}")


def _elementwise_handler(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return _elementwise(inst, ops)


# Moves and sign-bit operations (negate and abs flip or clear one bit, in XLA's CPU code and
# ours) leave a denormal as it is.
_NO_FLUSH = frozenset({Op.SELECT, Op.BITCAST_CONVERT, Op.NEGATE, Op.ABS})
# XLA's CPU pow is the C library's, which reads its operands' bits rather than through DAZ;
# ir/elementwise_ref.power models how (its result is flushed as any other).
_UNFLUSHED_OPERANDS = _NO_FLUSH | {Op.POWER}
# XLA's CPU remainder is the C library's fmod: exact integer work on the dividend and the
# result, which stay unflushed; only the divisor meets a floating-point comparison with zero,
# so a denormal divisor reads as zero (NaN).
_EXACT_RESULT = _NO_FLUSH | {Op.REMAINDER}
# XLA's CPU convert between bf16 and f32 is integer work on the bits (bf16 -> f32 a shift,
# f32 -> bf16 rounding away the low half), so a denormal passes unflushed (fuzz seed 3667).
_BIT_CONVERTS = frozenset({(np.dtype(DType.BF16.numpy), np.dtype(np.float32)),
                           (np.dtype(np.float32), np.dtype(DType.BF16.numpy))})
# XLA's CPU max and min (and clamp) prefer +0 and -0 respectively when both operands are
# zeros, whatever their order (NumPy returns the first).
_SIGNED_ZERO_RULES = frozenset({Op.MAXIMUM, Op.MINIMUM, Op.CLAMP})


def _elementwise(inst: Instruction, operands: list[Value]) -> np.ndarray:
    fn = inst.definition.numpy
    assert fn is not None
    raw = arrays = [np.asarray(o) for o in operands]
    if inst.op in (Op.MAXIMUM, Op.MINIMUM) and inst.operands[0] is inst.operands[1]:
        return raw[0]  # XLA's CPU compiler turns max(x, x) into x: nothing flushed
    bit_convert = inst.op is Op.CONVERT and (raw[0].dtype, np.dtype(inst.dtype.numpy)) in \
        _BIT_CONVERTS
    if inst.op is Op.REMAINDER:
        arrays = [arrays[0], flush_denormals(arrays[1])]
    elif inst.op not in _UNFLUSHED_OPERANDS and not bit_convert:
        arrays = [flush_denormals(a) for a in arrays]
    if inst.op is Op.COMPARE:
        result = fn(*arrays, direction=inst.attrs["direction"], kind=inst.attrs.get("type"))
    elif inst.op in (Op.CONVERT, Op.BITCAST_CONVERT):
        result = fn(arrays[0], inst.dtype.numpy)
    else:
        result = fn(*arrays)
    result = np.asarray(result).astype(inst.dtype.numpy, copy=False)
    if inst.op in _SIGNED_ZERO_RULES and _is_float(result.dtype):
        # NumPy gives 0-d operands back as scalars (clamp(x, x, x) of f32[] crashed, seed 1675).
        result = np.asarray(_zero_signs(inst.op, result, arrays))
    return result if inst.op in _EXACT_RESULT or bit_convert else flush_denormals(result)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _zero_signs(op: Op, result: np.ndarray, arrays: list[np.ndarray]) -> np.ndarray:
    """max(+-0, -+0) = +0 and min(+-0, -+0) = -0, as XLA's CPU code gives them."""
    if op is Op.CLAMP:
        low, x, high = arrays
        with np.errstate(invalid="ignore"):
            raised = _zero_signs(Op.MAXIMUM, np.maximum(x, low).astype(x.dtype), [x, low])
            return _zero_signs(Op.MINIMUM, np.minimum(raised, high).astype(x.dtype),
                               [raised, high])
    a, b = np.broadcast_arrays(*arrays)
    both_zero = (a == 0) & (b == 0)
    if not both_zero.any():
        return result
    zero = np.zeros((), result.dtype)
    if op is Op.MAXIMUM:  # +0 unless both are -0
        negative = np.signbit(a) & np.signbit(b)
    else:  # -0 if either is
        negative = np.signbit(a) | np.signbit(b)
    signed = np.where(negative, np.copysign(zero, -1), zero)
    return np.where(both_zero, signed, result).astype(result.dtype)


# --- structural handlers -----------------------------------------------------------------

def _constant(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    literal = inst.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return literal


def _iota(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    dims = inst.shape.dims
    ramp = np.arange(dims[dim]).astype(inst.dtype.numpy)
    view = [1] * len(dims)
    view[dim] = dims[dim]
    return np.asarray(np.broadcast_to(ramp.reshape(view), dims), order="C")


def _broadcast(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    operand = as_array(ops[0])
    dims = inst.ints("dimensions")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(operand, order)
    view = [1] * inst.shape.rank
    for i in order:
        view[dims[i]] = operand.shape[i]
    # Copied by assignment (bit for bit, in C order): np.broadcast_to costs more per call,
    # and a rollout broadcasts tens of thousands of times.
    out = np.empty(inst.shape.dims, operand.dtype)
    out[...] = x.reshape(view)
    return out


def _reshape(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    value = as_array(ops[0]).reshape(inst.shape.dims)
    if inst.op is Op.BITCAST and value.dtype != inst.shape.dtype.numpy:
        return value.view(inst.shape.dtype.numpy)  # same width: the bits reinterpreted
    return value


def _transpose(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return np.asarray(np.transpose(as_array(ops[0]), inst.ints("dimensions")), order="C")


def _slice(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    index = tuple(slice(s.start, s.limit, s.stride) for s in spec if isinstance(s, SliceDim))
    return np.asarray(as_array(ops[0])[index], order="C")


def _clamped_starts(starts: Sequence[Value], dims: Sequence[int],
                    sizes: Sequence[int]) -> list[int]:
    """XLA clamps start indices so the window stays inside the operand."""
    out = []
    for start, dim, size in zip(starts, dims, sizes):
        value = int(as_array(start))
        out.append(min(max(value, 0), dim - size))
    return out


def _dynamic_slice(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    x = as_array(ops[0])
    sizes = inst.ints("dynamic_slice_sizes")
    starts = _clamped_starts(ops[1:], x.shape, sizes)
    index = tuple(slice(s, s + n) for s, n in zip(starts, sizes))
    return np.asarray(x[index], order="C")


def _dynamic_update_slice(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    x = as_array(ops[0]).copy()
    update = as_array(ops[1])
    starts = _clamped_starts(ops[2:], x.shape, update.shape)
    index = tuple(slice(s, s + n) for s, n in zip(starts, update.shape))
    x[index] = update
    return x


def _concatenate(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return np.concatenate([as_array(o) for o in ops], axis=inst.ints("dimensions")[0])


def _pad(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    x, value = as_array(ops[0]), as_array(ops[1])
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    for axis, p in enumerate(config):
        assert isinstance(p, PaddingDim)
        x = pad_axis(x, axis, p, value)
    return np.asarray(x, order="C")


def _reverse(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    dims = inst.ints("dimensions")
    x = as_array(ops[0])
    return np.asarray(np.flip(x, axis=dims)) if dims else x


# Reducers that are one binary op over (parameter 0, parameter 1) run as NumPy reductions.
_UFUNC_REDUCERS: dict[Op, np.ufunc] = {
    Op.ADD: np.add, Op.MULTIPLY: np.multiply, Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum,
    Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor,
}


def _simple_reducer(comp: Computation) -> np.ufunc | None:
    op = reducer_op(comp)
    if op is None:
        return None
    dtype = comp.root.dtype
    # NumPy's add and multiply of booleans are or and and, not XLA's wrap-around.
    if dtype.is_pred and op in (Op.ADD, Op.MULTIPLY):
        return None
    if dtype.is_float and op in (Op.AND, Op.OR, Op.XOR):
        return None
    return _UFUNC_REDUCERS[op]


def _reduced_zero_signs(is_max: bool, result: np.ndarray, values: np.ndarray,
                        base: np.ndarray) -> np.ndarray:
    """A max (min) reduction that ends at zero is +0 (-0) if any zero reduced is, as the
    element-wise max and min give it."""
    at_zero = result == 0
    if not at_zero.any():
        return result
    every = np.concatenate([values, base[..., None]], axis=-1)
    zeros = every == 0
    if is_max:
        negative = ~(zeros & ~np.signbit(every)).any(axis=-1)
    else:
        negative = (zeros & np.signbit(every)).any(axis=-1)
    zero = np.zeros((), result.dtype)
    signed = np.where(negative, np.copysign(zero, -1), zero)
    return np.where(at_zero, signed, result).astype(result.dtype)


def _from_identity(reducer: Computation, init: np.ndarray) -> bool:
    """Whether the reducer is one op and `init` its identity, bit for bit."""
    op = reducer_op(reducer)
    start = None if op is None else identity(op, reducer.root.dtype)
    return start is not None and np.asarray(init, start.dtype).tobytes() == start.tobytes()


def _in_index_order(ufunc: np.ufunc, values: np.ndarray, base: np.ndarray) -> np.ndarray:
    """`base` combined with `values[..., 0]`, then with `values[..., 1]`, ..., each step
    rounded to the type and flushed (`analysis/reducers.in_index_order`). `ufunc.accumulate`
    runs in that order and rounds every step (NumPy's pairwise order and f32 accumulation of
    f16 are for `reduce` only); only a partial result that is denormal needs the loop that
    flushes it before the next step."""
    stacked = np.concatenate([base[..., None], values], axis=-1)
    with np.errstate(all="ignore"):
        partial = ufunc.accumulate(stacked, axis=-1)
        between = partial[..., 1:-1]
        if flush_denormals(between) is not between:
            acc = base
            for k in range(values.shape[-1]):
                acc = flush_denormals(ufunc(acc, values[..., k]))
            return np.asarray(acc)
    return np.asarray(flush_denormals(partial[..., -1]))


def _reduce(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    n = len(ops) // 2
    inputs = [as_array(o) for o in ops[:n]]
    inits = [as_array(o) for o in ops[n:]]
    dims = inst.ints("dimensions")
    reducer = inst.calls[0]
    kept = [d for d in range(inputs[0].ndim) if d not in dims]
    out_dims = tuple(inputs[0].shape[d] for d in kept)
    moved = [np.transpose(x, kept + list(dims)).reshape(out_dims + (-1,)) for x in inputs]
    if n == 1 and inputs[0].size == int(np.prod(out_dims)) and _from_identity(reducer, inits[0]):
        # XLA's simplifier makes this reduce a reshape (HandleReduce takes the initial value
        # to be the reducer's identity): no arithmetic, so nothing is flushed (fuzz seed 4292).
        return np.array(moved[0].reshape(out_dims), order="C")  # 0-d stays 0-d
    ufunc = _simple_reducer(reducer) if n == 1 else None
    if ufunc is not None:
        # Denormals are flushed as in the reducer's element-wise operation.
        values, base = flush_denormals(moved[0]), flush_denormals(inits[0])
        if in_index_order(reducer_op(reducer), inst.dtype, values.shape[-1]):
            base = np.broadcast_to(base, out_dims)
            return np.asarray(_in_index_order(ufunc, values, base), order="C")
        with np.errstate(all="ignore"):
            total = ufunc.reduce(values, axis=-1) if values.shape[-1] else None
            base = np.broadcast_to(base, out_dims)
            result = base if total is None else ufunc(base, total)
        result = np.asarray(result).astype(inst.dtype.numpy)
        if ufunc in (np.maximum, np.minimum) and _is_float(result.dtype):
            result = _reduced_zero_signs(ufunc is np.maximum, result, values, base)
        return np.asarray(flush_denormals(result), order="C")
    acc = [np.asarray(np.broadcast_to(init, out_dims)) for init in inits]
    for k in range(moved[0].shape[-1]):
        acc = [np.broadcast_to(a, out_dims) for a in
               combine(self, reducer, acc, [m[..., k] for m in moved])]
    acc = [np.asarray(a, order="C") for a in acc]
    return acc[0] if n == 1 else tuple(acc)


def _reduce_window(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    n = len(ops) // 2
    inputs = [as_array(o) for o in ops[:n]]
    inits = [as_array(o) for o in ops[n:]]
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    reducer = inst.calls[0]
    padded = [_window_input(x, init, window) for x, init in zip(inputs, inits)]
    out_shape = inst.shape.elements[0] if inst.shape.is_tuple else inst.shape
    out_dims = out_shape.dims
    acc = [np.asarray(np.broadcast_to(init, out_dims)) for init in inits]
    for offset in np.ndindex(*window.size):
        index = tuple(
            slice(o * window.rhs_dilate[a], o * window.rhs_dilate[a] +
                  (out_dims[a] - 1) * window.stride[a] + 1, window.stride[a])
            if out_dims[a] else slice(0, 0)
            for a, o in enumerate(offset))
        values = [p[index] for p in padded]
        acc = [np.broadcast_to(a, out_dims) for a in combine(self, reducer, acc, values)]
    acc = [np.asarray(a, order="C") for a in acc]
    return acc[0] if n == 1 else tuple(acc)


def _window_input(x: np.ndarray, init: np.ndarray, window: Window) -> np.ndarray:
    """Base-dilate and pad with the initial value, as XLA does for reduce-window."""
    for axis in range(x.ndim):
        p = PaddingDim(window.pad_low[axis], window.pad_high[axis], window.lhs_dilate[axis] - 1)
        x = pad_axis(x, axis, p, init)
    return x


def _tuple(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return tuple(ops)


def _get_tuple_element(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    value = ops[0]
    assert isinstance(value, tuple)
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return value[index]


def _while(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    condition, body = inst.calls
    state = ops[0]
    while bool(as_array(self.run(condition, [state]))):
        state = self.run(body, [state])
    return state


def _conditional(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    selector = as_array(ops[0])
    branches = inst.calls
    if selector.dtype == np.bool_:
        index = 0 if bool(selector) else 1
    else:
        index = int(selector)
        if not 0 <= index < len(branches):
            index = len(branches) - 1  # XLA: an out-of-range index runs the last branch
    return self.run(branches[index], [ops[index + 1]])


def _call(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return self.run(inst.calls[0], ops)


def _custom_call(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    target = inst.attrs["custom_call_target"]
    assert isinstance(target, str)
    fn = self.custom_calls.get(target)
    if fn is None:
        raise InterpreterError(f"%{inst.name}: no library function for custom-call target "
                               f"{target!r}")
    return fn(inst, ops)


def _copy(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return as_array(ops[0]).copy()


def _identity(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return ops[0]


def _token(self: Interpreter, inst: Instruction, ops: list[Value]) -> Value:
    return None


# The handlers here read the interpreter itself (its custom calls); those of the other
# modules only run computations (`common.Handler`).
_HANDLERS: dict[Op, _Handler] = {
    Op.AFTER_ALL: _token,
    Op.BITCAST: _reshape,
    Op.BROADCAST: _broadcast,
    Op.CALL: _call,
    Op.CONCATENATE: _concatenate,
    Op.CONDITIONAL: _conditional,
    Op.CONSTANT: _constant,
    Op.COPY: _copy,
    Op.CUSTOM_CALL: _custom_call,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.FUSION: _call,
    Op.GET_TUPLE_ELEMENT: _get_tuple_element,
    Op.IOTA: _iota,
    Op.OPT_BARRIER: _identity,
    Op.PAD: _pad,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.RESHAPE: _reshape,
    Op.REVERSE: _reverse,
    Op.SLICE: _slice,
    Op.TRANSPOSE: _transpose,
    Op.TUPLE: _tuple,
    Op.WHILE: _while,
}

_HANDLERS.update(indexing.HANDLERS)  # gather, scatter, sort, ...
_HANDLERS.update(dot.HANDLERS)  # dot: XLA's CPU summation order
_HANDLERS.update(linalg.HANDLERS)  # cholesky, triangular-solve
CUSTOM_CALL_TARGETS.update(linalg.CUSTOM_CALLS)  # JAX's LAPACK and cuSOLVER calls (ir/linalg.py)

# Ops that are neither element-wise nor handled above; the completeness test lists them.
UNSUPPORTED_OPS = frozenset({Op.PARAMETER, Op.RNG_BIT_GENERATOR})
