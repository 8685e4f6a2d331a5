"""HLO instructions evaluated with `jax.lax`: the one opcode table of the TPU target.

HLO maps to `lax` almost one to one, so a fused computation is evaluated instruction by
instruction on JAX values, inside a Pallas kernel (on a block's values) or outside one (an XLA
operation). This module knows nothing of kernels: `evaluate_op` computes one non-control
instruction from its operands' values; `shape_of` gives the shape a value has where a kernel
evaluates a block rather than the whole array (the element-wise tiling, `kernels.py`).

What the table has no `lax` form for (sort with a general comparator, a scatter of several
arrays or with a general update computation, convolution, the linear-algebra library calls)
is evaluated by the reference interpreter on the host (`jax.pure_callback`): `HOST_OPS`
names them, and the kernel listing says so. A scatter of one array that adds, multiplies,
takes the max or min, or replaces is `lax`'s scatter (an XLA operation, not in a kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.reducers import reducer_op
from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.rnglib import PARITY, THREEFRY_TARGET, threefry2x32_ops

Value = Any  # a JAX array, or a tuple of values (tuple-shaped instructions)
# The block index 0 in a BlockSpec's index map: an int32, as Mosaic requires (a Python 0
# becomes i64 when a program with 64-bit values runs with x64 enabled, and Mosaic refuses the
# index map on the chip: "failed to legalize operation 'func.return'").
BLOCK_ZERO = np.int32(0)


def whole_block(ndim: int, memory_space: Any) -> Any:
    """A BlockSpec that takes an array of `ndim` dimensions as one block in `memory_space`
    (VMEM or SMEM), under any grid. Its index map returns int32 zeros: Pallas's default index
    map (a BlockSpec with no index map) returns Python zeros, which are i64 under x64, the
    same refusal as above (found on the chip for whole-array kernels and SMEM inputs)."""
    from jax.experimental import pallas as pl

    return pl.BlockSpec(None, lambda *_: (BLOCK_ZERO,) * ndim, memory_space=memory_space)

# Instructions evaluated by the reference interpreter on the host: no `lax` form here.
HOST_OPS = frozenset({Op.SCATTER, Op.SORT, Op.TOPK, Op.CONVOLUTION, Op.SELECT_AND_SCATTER,
                      Op.CHOLESKY, Op.TRIANGULAR_SOLVE, Op.REDUCE_WINDOW, Op.MAP})

_ROUNDING = {Op.ROUND_NEAREST_AFZ: lax.RoundingMethod.AWAY_FROM_ZERO,
             Op.ROUND_NEAREST_EVEN: lax.RoundingMethod.TO_NEAREST_EVEN}


def _sign(x: Value) -> Value:
    return lax.sign(x) if x.dtype != jnp.bool_ else x


def _not(x: Value) -> Value:
    return lax.bitwise_not(x)


UNARY: dict[Op, Callable[[Value], Value]] = {
    Op.ABS: lax.abs, Op.CBRT: lax.cbrt, Op.CEIL: lax.ceil, Op.CLZ: lax.clz,
    Op.COSINE: lax.cos, Op.ERF: lax.erf, Op.EXPONENTIAL: lax.exp,
    Op.EXPONENTIAL_MINUS_ONE: lax.expm1, Op.FLOOR: lax.floor, Op.IS_FINITE: lax.is_finite,
    Op.LOG: lax.log, Op.LOG_PLUS_ONE: lax.log1p, Op.LOGISTIC: lax.logistic, Op.NEGATE: lax.neg,
    Op.NOT: _not, Op.POPCNT: lax.population_count, Op.RSQRT: lax.rsqrt, Op.SIGN: _sign,
    Op.SINE: lax.sin, Op.SQRT: lax.sqrt, Op.TAN: lax.tan, Op.TANH: lax.tanh,
}

BINARY: dict[Op, Callable[[Value, Value], Value]] = {
    Op.ADD: lax.add, Op.AND: lax.bitwise_and, Op.ATAN2: lax.atan2, Op.DIVIDE: lax.div,
    Op.MAXIMUM: lax.max, Op.MINIMUM: lax.min, Op.MULTIPLY: lax.mul, Op.OR: lax.bitwise_or,
    Op.POWER: lax.pow, Op.REMAINDER: lax.rem, Op.SHIFT_LEFT: lax.shift_left,
    Op.SHIFT_RIGHT_ARITHMETIC: lax.shift_right_arithmetic,
    Op.SHIFT_RIGHT_LOGICAL: lax.shift_right_logical, Op.SUBTRACT: lax.sub,
    Op.XOR: lax.bitwise_xor,
}

_COMPARE: dict[str, Callable[[Value, Value], Value]] = {
    "EQ": lax.eq, "NE": lax.ne, "LT": lax.lt, "LE": lax.le, "GT": lax.gt, "GE": lax.ge}

# Reducer ops with a `lax` reduction of their own (and a Mosaic lowering for add/max/min).
REDUCTIONS: dict[Op, Callable[[Value, Sequence[int]], Value]] = {
    Op.ADD: lax.reduce_sum, Op.MAXIMUM: lax.reduce_max, Op.MINIMUM: lax.reduce_min,
    Op.MULTIPLY: lax.reduce_prod, Op.AND: lax.reduce_and, Op.OR: lax.reduce_or,
    Op.XOR: lax.reduce_xor,
}

ELEMENTWISE = frozenset(UNARY) | frozenset(BINARY) | {
    Op.COMPARE, Op.SELECT, Op.CLAMP, Op.CONVERT, Op.BITCAST_CONVERT, Op.ROUND_NEAREST_AFZ,
    Op.ROUND_NEAREST_EVEN, Op.REDUCE_PRECISION}


def numpy_dtype(inst: Instruction) -> np.dtype:
    return np.dtype(inst.dtype.numpy)


def _broadcast_scalars(values: list[Value]) -> list[Value]:
    """Element-wise operands of one shape; a 0-d one (a scalar read from SMEM in a tiled
    kernel) is broadcast to the others' shape."""
    shapes = [jnp.shape(v) for v in values]
    target = max(shapes, key=len)
    return [v if jnp.shape(v) == target else jnp.broadcast_to(v, target) for v in values]


def _compare(inst: Instruction, x: Value, y: Value) -> Value:
    direction = str(inst.attrs["direction"])
    kind = inst.attrs.get("type")
    if kind == "TOTALORDER" and jnp.issubdtype(x.dtype, jnp.floating):
        x, y = _total_order_key(x), _total_order_key(y)
    elif kind == "UNSIGNED" and jnp.issubdtype(x.dtype, jnp.signedinteger):
        unsigned = jnp.dtype(f"uint{x.dtype.itemsize * 8}")
        x, y = lax.bitcast_convert_type(x, unsigned), lax.bitcast_convert_type(y, unsigned)
    elif kind == "SIGNED" and jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        signed = jnp.dtype(f"int{x.dtype.itemsize * 8}")
        x, y = lax.bitcast_convert_type(x, signed), lax.bitcast_convert_type(y, signed)
    return _COMPARE[direction](x, y)


def _total_order_key(x: Value) -> Value:
    """A signed integer that orders floats as IEEE's total order does (-NaN < -inf < ... <
    -0 < +0 < ... < NaN)."""
    signed = jnp.dtype(f"int{x.dtype.itemsize * 8}")
    bits = lax.bitcast_convert_type(x, signed)
    flipped = lax.bitwise_xor(bits, jnp.asarray(np.iinfo(signed).max, signed))
    return lax.select(bits < 0, flipped, bits)


def elementwise(inst: Instruction, ops: list[Value]) -> Value:
    op = inst.op
    ops = _broadcast_scalars(ops)
    if op in UNARY:
        return UNARY[op](ops[0])
    if op in BINARY:
        return BINARY[op](ops[0], ops[1])
    if op is Op.COMPARE:
        return _compare(inst, ops[0], ops[1])
    if op is Op.SELECT:
        return lax.select(ops[0], ops[1], ops[2])
    if op is Op.CLAMP:
        return lax.clamp(ops[0], ops[1], ops[2])
    if op is Op.CONVERT:
        return _convert(ops[0], numpy_dtype(inst))
    if op is Op.BITCAST_CONVERT:
        return lax.bitcast_convert_type(ops[0], numpy_dtype(inst))
    if op in _ROUNDING:
        return lax.round(ops[0], _ROUNDING[op])
    if op is Op.REDUCE_PRECISION:
        exponent, mantissa = inst.attrs["exponent_bits"], inst.attrs["mantissa_bits"]
        assert isinstance(exponent, int) and isinstance(mantissa, int)
        return lax.reduce_precision(ops[0], exponent, mantissa)
    raise NotImplementedError(f"%{inst.name}: no lax form for {op.text}")


def _convert(x: Value, target: np.dtype) -> Value:
    """XLA's convert: to pred means != 0; float to int saturates (NaN gives 0)."""
    if target == np.bool_:
        return x != jnp.zeros((), x.dtype)
    return lax.convert_element_type(x, target)


def iota(inst: Instruction, shape: tuple[int, ...]) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    wanted = numpy_dtype(inst)
    if wanted.kind in "iu":
        return lax.broadcasted_iota(wanted, shape, dim)
    # Mosaic's iota makes integers only: a float ramp is an integer one converted.
    return lax.convert_element_type(lax.broadcasted_iota(np.int32, shape, dim), wanted)


def constant(inst: Instruction) -> Value:
    literal = inst.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return jnp.asarray(np.asarray(literal, numpy_dtype(inst)))


def _slice(inst: Instruction, x: Value) -> Value:
    attr = inst.attrs["slice"]
    assert isinstance(attr, tuple)
    spec = [s for s in attr if isinstance(s, SliceDim)]
    return lax.slice(x, [s.start for s in spec], [s.limit for s in spec],
                     [s.stride for s in spec])


def _pad(inst: Instruction, x: Value, value: Value) -> Value:
    attr = inst.attrs["padding"]
    assert isinstance(attr, tuple)
    config = [p for p in attr if isinstance(p, PaddingDim)]
    return lax.pad(x, value, [(p.low, p.high, p.interior) for p in config])


def _clamped_starts(starts: Sequence[Value], dims: Sequence[int],
                    sizes: Sequence[int]) -> list[Value]:
    """XLA clamps a start so the window stays inside the operand."""
    out = []
    for start, dim, size in zip(starts, dims, sizes):
        start = lax.convert_element_type(start, np.int32)
        out.append(lax.clamp(np.int32(0), start, np.int32(dim - size)))
    return out


def _dynamic_slice(inst: Instruction, ops: list[Value]) -> Value:
    x = ops[0]
    sizes = inst.ints("dynamic_slice_sizes")
    return lax.dynamic_slice(x, _clamped_starts(ops[1:], x.shape, sizes), sizes)


def _dynamic_update_slice(inst: Instruction, ops: list[Value]) -> Value:
    x, update = ops[0], ops[1]
    return lax.dynamic_update_slice(x, update, _clamped_starts(ops[2:], x.shape, update.shape))


def dot(inst: Instruction, lhs: Value, rhs: Value, wanted: np.dtype | None = None) -> Value:
    """HLO's dot, its result in `wanted` (the instruction's type unless given: narrow
    integers are summed in int32 words, words.py)."""
    numbers = ((inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims")),
               (inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")))
    wanted = numpy_dtype(inst) if wanted is None else wanted
    exact = lax.Precision.HIGHEST  # f32 stays f32 on the TPU's matrix unit (not bf16 passes)
    if wanted.kind in "iub":
        return lax.dot_general(lhs, rhs, numbers, preferred_element_type=wanted)
    return lax.dot_general(lhs, rhs, numbers, precision=(exact, exact),
                           preferred_element_type=wanted).astype(wanted)


def reduce(inst: Instruction, ops: list[Value], run: Callable[..., Value]) -> Value:
    """A reduce: a one-op reducer as `lax`'s own reduction combined with the initial value;
    a variadic or general reducer as `lax.reduce` over the reducer computation."""
    dims = inst.ints("dimensions")
    half = len(ops) // 2
    inputs, inits = ops[:half], ops[half:]
    reducer = inst.calls[0]
    op = reducer_op(reducer)
    if half == 1 and op in REDUCTIONS:
        reduced = (exact_int_sum(inputs[0], dims) if _byte_summed(op, inputs[0], dims)
                   else REDUCTIONS[op](inputs[0], dims))
        return BINARY[op](reduced, jnp.broadcast_to(inits[0], reduced.shape)) \
            if op in BINARY else reduced

    def combine(a: Any, b: Any) -> Any:
        values = run(reducer, [*a, *b]) if half > 1 else run(reducer, [a, b])
        return tuple(values) if half > 1 else values

    if half == 1:
        return lax.reduce(inputs[0], inits[0], combine, dims)
    return tuple(lax.reduce(tuple(inputs), tuple(inits), combine, dims))


# Values one byte sum may add exactly in f32: 2^24 / 255.
BYTE_SUM_MAX = (1 << 24) // 255


def _byte_summed(op: Op | None, x: Value, dims: Sequence[int]) -> bool:
    """Whether a 32-bit integer sum is computed as byte sums: with x64 enabled (programs
    with 64-bit values run so) Pallas lowers an int32 `reduce_sum` through a 64-bit sum that
    Mosaic refuses ("64-bit types are not supported"); outside kernels XLA does not care,
    and the byte sums are exact there too."""
    return (op is Op.ADD and bool(jax.config.read("jax_enable_x64"))
            and np.dtype(x.dtype) in (np.dtype(np.int32), np.dtype(np.uint32))
            and int(np.prod([x.shape[d] for d in dims])) <= BYTE_SUM_MAX)


def exact_int_sum(x: Value, dims: Sequence[int]) -> Value:
    """A 32-bit integer sum over `dims`, wrapping as 32-bit addition does, without an
    integer reduction: each byte of the words summed in f32 (exact while at most
    BYTE_SUM_MAX values are summed), the four byte sums combined with 32-bit shifts and
    adds."""
    words = lax.bitcast_convert_type(x, np.uint32)
    total: Value = None
    for k in range(4):
        byte = lax.bitwise_and(lax.shift_right_logical(words, np.uint32(8 * k)), np.uint32(255))
        summed = lax.reduce_sum(lax.convert_element_type(byte, np.float32), tuple(dims))
        part = lax.shift_left(lax.convert_element_type(summed, np.uint32), np.uint32(8 * k))
        total = part if total is None else total + part
    return lax.bitcast_convert_type(total, x.dtype)


def _gather(inst: Instruction, operand: Value, indices: Value) -> Value:
    """HLO's gather as `lax.gather` (starts clamped into the operand, as XLA does)."""
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    if ivd == indices.ndim:
        indices = indices[..., None]
    elif ivd != indices.ndim - 1:
        indices = jnp.moveaxis(indices, ivd, -1)
    numbers = lax.GatherDimensionNumbers(
        offset_dims=inst.ints("offset_dims"),
        collapsed_slice_dims=inst.ints("collapsed_slice_dims"),
        start_index_map=inst.ints("start_index_map"),
        operand_batching_dims=inst.ints("operand_batching_dims"),
        start_indices_batching_dims=inst.ints("start_indices_batching_dims"))
    return lax.gather(operand, indices, numbers, inst.ints("slice_sizes"),
                      indices_are_sorted=False, mode=lax.GatherScatterMode.CLIP)


_SCATTERS: dict[Op, Callable[..., Value]] = {
    Op.ADD: lax.scatter_add, Op.MULTIPLY: lax.scatter_mul, Op.MAXIMUM: lax.scatter_max,
    Op.MINIMUM: lax.scatter_min}


def scatter_form(inst: Instruction) -> Callable[..., Value] | None:
    """The `lax` scatter of a one-array scatter whose update computation is a reducer (add,
    multiply, max, min) or takes the update (replace); None for any other (the host)."""
    if inst.op is not Op.SCATTER or len(inst.operands) != 3:
        return None
    comp = inst.calls[0]
    op = reducer_op(comp)
    if op is not None:
        return _SCATTERS.get(op)
    params = comp.parameters
    return lax.scatter if len(params) == 2 and comp.root is params[1] else None


def _scatter(inst: Instruction, ops: list[Value], form: Callable[..., Value]) -> Value:
    """HLO's scatter as `lax`'s: an update window whose start is out of bounds is skipped, as
    XLA does (`FILL_OR_DROP`); the index vector moved last, as `lax` wants it."""
    operand, indices, updates = ops
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    batching = inst.ints("scatter_indices_batching_dims")
    if ivd == indices.ndim:
        indices = indices[..., None]
    elif ivd != indices.ndim - 1:
        indices = jnp.moveaxis(indices, ivd, -1)
        batching = tuple(d - (d > ivd) for d in batching)
    numbers = lax.ScatterDimensionNumbers(
        update_window_dims=inst.ints("update_window_dims"),
        inserted_window_dims=inst.ints("inserted_window_dims"),
        scatter_dims_to_operand_dims=inst.ints("scatter_dims_to_operand_dims"),
        operand_batching_dims=inst.ints("input_batching_dims"),
        scatter_indices_batching_dims=batching)
    # The HLO's indices_are_sorted / unique_indices are promises about speed, not meaning:
    # they are not passed on (XLA:TPU trusting them skips updates; docs/tpu.md).
    return form(operand, indices, updates, numbers, indices_are_sorted=False,
                unique_indices=False, mode=lax.GatherScatterMode.FILL_OR_DROP)


def threefry(inst: Instruction, ops: list[Value]) -> Value:
    """hlofuse's opaque Threefry-2x32 call (`reference/rnglib.py`) as u32 lax operations."""
    k0, k1, x0, x1 = _broadcast_scalars(list(ops))
    shape = jnp.shape(x0)

    def binary(op: Op, a: Value, b: Value) -> Value:
        return BINARY[op](a, b)

    def const(v: int) -> Value:
        return jnp.full(shape, v, jnp.uint32)

    keys = (k0, k1, lax.bitwise_xor(lax.bitwise_xor(k0, k1), const(PARITY)))
    return threefry2x32_ops(binary, const, keys, x0, x1)


def host(inst: Instruction, ops: list[Value]) -> Value:
    """The instruction evaluated by the reference interpreter on the host: the result's
    shapes are static, so the call is an ordinary (pure) operation of the program."""
    from hlofuse.reference.interpreter import Interpreter, flatten_value
    from hlofuse.runtime.program import leaf_paths

    paths = leaf_paths(inst.shape)
    shapes = []
    for path in paths:
        leaf = inst.shape
        for k in path:
            leaf = leaf.elements[k]
        shapes.append(jax.ShapeDtypeStruct(leaf.dims, np.dtype(leaf.dtype.numpy)))

    def on_host(*arrays: np.ndarray) -> list[np.ndarray]:
        result = Interpreter().evaluate_instruction(inst, [np.asarray(a) for a in arrays])
        return [np.asarray(r, s.dtype) for r, s in zip(flatten_value(result), shapes)]

    leaves = jax.pure_callback(on_host, shapes, *ops)
    if not inst.shape.is_tuple:
        return leaves[0]
    return _rebuild(inst.shape, iter(leaves))


def _rebuild(shape: Any, leaves: Any) -> Value:
    if shape.is_tuple:
        return tuple(_rebuild(e, leaves) for e in shape.elements)
    return next(leaves) if shape.is_array else None


def evaluate_op(inst: Instruction, ops: list[Value], shape: tuple[int, ...],
                run: Callable[..., Value]) -> Value:
    """The value of one instruction that calls no computation but a reducer. `shape` is the
    shape its value takes where it is evaluated (a block in a tiled kernel); `run(comp,
    args)` evaluates a reducer computation."""
    op = inst.op
    if op in ELEMENTWISE:
        return elementwise(inst, ops)
    if op is Op.CONSTANT:
        return constant(inst)
    if op is Op.IOTA:
        return iota(inst, shape)
    if op is Op.BROADCAST:
        x = ops[0]
        if jnp.ndim(x) == 0:
            return jnp.broadcast_to(x, shape)
        return lax.broadcast_in_dim(x, shape, inst.ints("dimensions"))
    if op in (Op.RESHAPE, Op.BITCAST):
        x = ops[0]
        if jnp.shape(x) == shape:
            return x
        if op is Op.BITCAST and x.dtype != numpy_dtype(inst):
            x = lax.bitcast_convert_type(x, numpy_dtype(inst))
        return jnp.reshape(x, shape)
    if op in (Op.COPY, Op.OPT_BARRIER):
        return ops[0]
    if op is Op.TRANSPOSE:
        return lax.transpose(ops[0], inst.ints("dimensions"))
    if op is Op.SLICE:
        return _slice(inst, ops[0])
    if op is Op.CONCATENATE:
        return lax.concatenate(ops, inst.ints("dimensions")[0])
    if op is Op.PAD:
        return _pad(inst, ops[0], ops[1])
    if op is Op.REVERSE:
        return lax.rev(ops[0], inst.ints("dimensions"))
    if op is Op.DYNAMIC_SLICE:
        return _dynamic_slice(inst, ops)
    if op is Op.DYNAMIC_UPDATE_SLICE:
        return _dynamic_update_slice(inst, ops)
    if op is Op.DOT:
        return dot(inst, ops[0], ops[1])
    if op is Op.REDUCE:
        return reduce(inst, ops, run)
    if op is Op.GATHER:
        return _gather(inst, ops[0], ops[1])
    form = scatter_form(inst)
    if form is not None:
        return _scatter(inst, ops, form)
    if op is Op.TUPLE:
        return tuple(ops)
    if op is Op.GET_TUPLE_ELEMENT:
        index = inst.attrs["index"]
        assert isinstance(index, int)
        return ops[0][index]
    if op is Op.AFTER_ALL:
        return None
    if op is Op.CUSTOM_CALL and inst.attrs.get("custom_call_target") == THREEFRY_TARGET:
        return threefry(inst, ops)
    return host(inst, ops)


def runs_on_host(inst: Instruction) -> bool:
    """Whether `evaluate_op` hands the instruction to the reference interpreter."""
    if inst.op is Op.CUSTOM_CALL:
        return inst.attrs.get("custom_call_target") != THREEFRY_TARGET
    if scatter_form(inst) is not None:
        return False
    return inst.op in HOST_OPS or inst.op is Op.RNG_BIT_GENERATOR
