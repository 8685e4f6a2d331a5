"""Modules that exercise every op of the op table for every element type it accepts.

Element-wise ops are enumerated from OP_TABLE (an op joins when shape inference accepts the
element type), fed with special values (signed zeros, NaN, infinities, denormals, integer
extremes, shift amounts past the bit width) in all pairs. Ops that are not element-wise get
one sample each in STRUCTURAL_SAMPLES, run for every element type.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from hlofuse.codegen.op_expressions import ELEMENTWISE
from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import ARRAY_DTYPES, DType
from hlofuse.ir.hlo import Computation, Instruction, Module, make_module
from hlofuse.ir.ops import ELEMENTWISE_OPS, OP_TABLE, Op, OpKind
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shape_inference.elementwise import COMPARE_DIRECTIONS
from hlofuse.ir.shapes import Shape


def special_values(dtype: DType) -> np.ndarray:
    if dtype.is_pred:
        return np.array([False, True])
    if dtype.is_float:
        info = np.finfo(dtype.numpy) if dtype is not DType.BF16 else None
        tiny = float(info.tiny) if info is not None else 1.1754944e-38
        big = float(info.max) if info is not None else 3.0e38
        values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, 100.0, -7.25,
                  np.nan, np.inf, -np.inf, tiny, -tiny, big, -big, 1e-3, 42.0, 0.75, -3.5]
        if dtype in (DType.F32, DType.F64):
            values += [tiny / 8, -tiny / 4]  # denormals: flushed, as XLA's CPU backend runs
        with np.errstate(over="ignore"):
            return np.array(values, dtype=np.float64).astype(dtype.numpy)
    info = np.iinfo(dtype.numpy)
    bits = dtype.bits
    values = [0, 1, -1, 2, 3, -3, 7, -8, bits - 1, bits, bits + 1, 100, -100,
              int(info.min), int(info.max), int(info.min) + 1, int(info.max) - 1]
    kept = sorted({v for v in values if info.min <= v <= info.max})
    return np.array(kept, dtype=dtype.numpy)


def pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special values, as two arrays of the same length."""
    values = special_values(dtype)
    x, y = zip(*itertools.product(values, values))
    return np.array(x, dtype=dtype.numpy), np.array(y, dtype=dtype.numpy)


def triples(dtype: DType, size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    values = special_values(dtype)
    return [values[rng.integers(0, len(values), size)] for _ in range(3)]


def _try(b: ComputationBuilder, op: Op, operands: list[Instruction],
         **kwargs: object) -> Instruction | None:
    try:
        return b.add(op, operands, **kwargs)  # type: ignore[arg-type]
    except ShapeError:
        return None


def elementwise_module(dtype: DType) -> tuple[Module, list[np.ndarray], list[str]]:
    """Every element-wise op (every compare direction and type, every conversion target)
    applied to `dtype` operands: one unfused instruction (one kernel) each."""
    x_values, y_values = pairs(dtype)
    n = len(x_values)
    low, mid, high = triples(dtype, n)
    b = ComputationBuilder("entry")
    shape = Shape.array(dtype, (n,))
    x, y = b.parameter(0, shape), b.parameter(1, shape)
    lo, hi = b.parameter(2, shape), b.parameter(3, shape)
    pred = b.parameter(4, Shape.array(DType.PRED, (n,)))
    middle = b.parameter(5, shape)
    results: list[Instruction] = []
    labels: list[str] = []

    def keep(inst: Instruction | None, label: str) -> None:
        if inst is not None:
            results.append(inst)
            labels.append(label)

    for op in sorted(ELEMENTWISE_OPS, key=lambda o: o.text):
        definition = OP_TABLE[op]
        if op not in ELEMENTWISE:
            continue  # no C expression yet: the completeness test names the op
        if op is Op.COMPARE:
            kinds: list[str | None] = [None]
            kinds += ["TOTALORDER"] if dtype.is_float else []
            kinds += ["UNSIGNED"] if dtype.is_signed_int else []
            kinds += ["SIGNED"] if dtype.is_unsigned_int else []
            for direction, kind in itertools.product(COMPARE_DIRECTIONS, kinds):
                attrs: dict[str, object] = {"direction": direction}
                if kind:
                    attrs["type"] = kind
                keep(_try(b, op, [x, y], attrs=attrs), f"compare {direction} {kind}")
        elif op is Op.CONVERT:
            for target in ARRAY_DTYPES:
                keep(_try(b, op, [x], shape=Shape.array(target, (n,))), f"convert {target.text}")
        elif op is Op.BITCAST_CONVERT:
            for target in ARRAY_DTYPES:
                if target.bits == dtype.bits and target is not dtype:
                    keep(_try(b, op, [x], shape=Shape.array(target, (n,))),
                         f"bitcast-convert {target.text}")
        elif op is Op.SELECT:
            keep(_try(b, op, [pred, x, y]), "select")
        elif op is Op.CLAMP:
            keep(_try(b, op, [lo, middle, hi]), "clamp")
        elif definition.arity == 1:
            keep(_try(b, op, [x]), op.text)
        elif definition.arity == 2:
            keep(_try(b, op, [x, y]), op.text)
        else:
            raise AssertionError(f"no sample for element-wise {op.text}")
    b.add(Op.TUPLE, results)
    module = make_module(f"elementwise_{dtype.text}", b.build())
    rng = np.random.default_rng(5)
    inputs = [x_values, y_values, low, high, rng.random(n) < 0.5, mid]
    return module, inputs, labels


# --- ops that are not element-wise -----------------------------------------------------------

Sample = Callable[[ComputationBuilder, DType, Callable[[tuple[int, ...], DType], Instruction]],
                  list[Instruction]]


def _binary_computation(name: str, op: Op, dtype: DType, names: NameUniquer) -> Computation:
    b = ComputationBuilder(name, names)
    a = b.parameter(0, Shape.scalar(dtype))
    c = b.parameter(1, Shape.scalar(dtype))
    b.add(op, [a, c])
    return b.build()


def _broadcast(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
               ) -> list[Instruction]:
    p = param((3, 4), dtype)
    s = param((), dtype)
    return [b.add(Op.BROADCAST, [p], attrs={"dimensions": (0, 2)},
                  shape=Shape.array(dtype, (3, 2, 4))),
            b.add(Op.BROADCAST, [s], attrs={"dimensions": ()}, shape=Shape.array(dtype, (2, 3)))]


def _reshape(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
             ) -> list[Instruction]:
    p = param((2, 3, 4), dtype)
    t = b.add(Op.TRANSPOSE, [p], attrs={"dimensions": (2, 0, 1)})
    return [b.add(Op.RESHAPE, [t], shape=Shape.array(dtype, (8, 3))),
            b.add(Op.BITCAST, [p], shape=Shape.array(dtype, (6, 4)))]


def _transpose(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
               ) -> list[Instruction]:
    p = param((2, 3, 4), dtype)
    return [b.add(Op.TRANSPOSE, [p], attrs={"dimensions": (1, 2, 0)})]


def _slice(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
           ) -> list[Instruction]:
    p = param((5, 7), dtype)
    spec = (SliceDim(1, 5, 2), SliceDim(2, 7, 1))
    return [b.add(Op.SLICE, [p], attrs={"slice": spec})]


def _concatenate(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
                 ) -> list[Instruction]:
    p, q, r = param((2, 3), dtype), param((2, 1), dtype), param((2, 0), dtype)
    return [b.add(Op.CONCATENATE, [p, r, q, p], attrs={"dimensions": (1,)})]


def _pad(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
         ) -> list[Instruction]:
    p, v = param((3, 4), dtype), param((), dtype)
    config = (PaddingDim(1, 2, 1), PaddingDim(-1, 1, 0))
    return [b.add(Op.PAD, [p, v], attrs={"padding": config})]


def _reverse(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
             ) -> list[Instruction]:
    p = param((3, 4), dtype)
    return [b.add(Op.REVERSE, [p], attrs={"dimensions": (0, 1)})]


def _copy(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
          ) -> list[Instruction]:
    return [b.add(Op.COPY, [param((3, 2), dtype)])]


def _iota(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
          ) -> list[Instruction]:
    if dtype.is_pred:
        return []
    return [b.add(Op.IOTA, attrs={"iota_dimension": 1}, shape=Shape.array(dtype, (2, 5)))]


def _index(b: ComputationBuilder, value: int, dtype: DType = DType.S32) -> Instruction:
    return b.constant(value, dtype)


def _dynamic_slice(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
                   ) -> list[Instruction]:
    p = param((5, 6), dtype)
    i = param((), DType.S32)
    starts = [i, _index(b, 9, DType.U32)]
    return [b.add(Op.DYNAMIC_SLICE, [p, *starts], attrs={"dynamic_slice_sizes": (2, 3)})]


def _dynamic_update_slice(b: ComputationBuilder, dtype: DType,
                          param: Callable[..., Instruction]) -> list[Instruction]:
    p, u = param((5, 6), dtype), param((2, 3), dtype)
    i = param((), DType.S32)
    return [b.add(Op.DYNAMIC_UPDATE_SLICE, [p, u, i, _index(b, -4)])]


def _reduce(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
            ) -> list[Instruction]:
    p = param((4, 3, 5), dtype)
    init = param((), dtype)
    add = _binary_computation("red_add", Op.ADD, dtype, b.names)
    maximum = _binary_computation("red_max", Op.MAXIMUM, dtype, b.names)
    return [b.add(Op.REDUCE, [p, init], attrs={"dimensions": (2,)}, calls=[add]),
            b.add(Op.REDUCE, [p, init], attrs={"dimensions": (0,)}, calls=[maximum]),
            b.add(Op.REDUCE, [p, init], attrs={"dimensions": (0, 2)}, calls=[add])]


def _reduce_window(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
                   ) -> list[Instruction]:
    p = param((5, 6), dtype)
    init = param((), dtype)
    maximum = _binary_computation("rw_max", Op.MAXIMUM, dtype, b.names)
    window = Window((2, 3), (2, 1), (1, 0), (0, 1), (1, 2), (1, 1))
    return [b.add(Op.REDUCE_WINDOW, [p, init], attrs={"window": window}, calls=[maximum])]


def _dot(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
         ) -> list[Instruction]:
    if dtype in (DType.F16, DType.BF16):
        return []  # the interpreter's einsum has no bf16 and rounds f16 per step: see test_dot
    lhs, rhs = param((2, 3, 4), dtype), param((2, 4, 5), dtype)
    batched = b.add(Op.DOT, [lhs, rhs], attrs={
        "lhs_batch_dims": (0,), "rhs_batch_dims": (0,),
        "lhs_contracting_dims": (2,), "rhs_contracting_dims": (1,)},
        shape=Shape.array(dtype, (2, 3, 5)))
    transposed = b.add(Op.DOT, [rhs, lhs], attrs={
        "lhs_batch_dims": (), "rhs_batch_dims": (),
        "lhs_contracting_dims": (0, 1), "rhs_contracting_dims": (0, 2)},
        shape=Shape.array(dtype, (5, 3)))
    return [batched, transposed]


def _control(b: ComputationBuilder, dtype: DType, param: Callable[..., Instruction]
             ) -> list[Instruction]:
    """while, conditional, call, fusion, tuple, get-tuple-element, opt-barrier, after-all."""
    names = b.names
    x = param((4,), dtype)
    state_shape = Shape.tuple_of([Shape.scalar(DType.S32), Shape.array(dtype, (4,))])
    cond = ComputationBuilder("w_cond", names)
    s = cond.parameter(0, state_shape)
    counter = cond.add(Op.GET_TUPLE_ELEMENT, [s], attrs={"index": 0})
    cond.add(Op.COMPARE, [counter, cond.constant(3, DType.S32)], attrs={"direction": "LT"})
    body = ComputationBuilder("w_body", names)
    s = body.parameter(0, state_shape)
    counter = body.add(Op.GET_TUPLE_ELEMENT, [s], attrs={"index": 0})
    value = body.add(Op.GET_TUPLE_ELEMENT, [s], attrs={"index": 1})
    rotated = body.add(Op.CONCATENATE, [
        body.add(Op.SLICE, [value], attrs={"slice": (SliceDim(1, 4, 1),)}),
        body.add(Op.SLICE, [value], attrs={"slice": (SliceDim(0, 1, 1),)})],
        attrs={"dimensions": (0,)})
    next_counter = body.add(Op.ADD, [counter, body.constant(1, DType.S32)])
    body.add(Op.TUPLE, [next_counter, rotated])
    init = b.add(Op.TUPLE, [b.constant(0, DType.S32), x])
    loop = b.add(Op.WHILE, [init], calls=[cond.build(), body.build()])
    looped = b.add(Op.GET_TUPLE_ELEMENT, [loop], attrs={"index": 1})

    branches = []
    for k in range(3):
        branch = ComputationBuilder(f"branch{k}", names)
        p = branch.parameter(0, Shape.array(dtype, (4,)))
        branch.add(Op.REVERSE, [p], attrs={"dimensions": (0,)}) if k == 1 else \
            branch.add(Op.COPY, [p])
        branches.append(branch.build())
    selector = param((), DType.S32)
    chosen = b.add(Op.CONDITIONAL, [selector, x, looped, x], calls=branches)
    flag = param((), DType.PRED)
    two = b.add(Op.CONDITIONAL, [flag, looped, x], calls=branches[1:])

    callee = ComputationBuilder("callee", names)
    p = callee.parameter(0, Shape.array(dtype, (4,)))
    callee.add(Op.SLICE, [callee.add(Op.REVERSE, [p], attrs={"dimensions": (0,)})],
               attrs={"slice": (SliceDim(1, 3, 1),)})
    called = b.add(Op.CALL, [x], calls=[callee.build()])

    fused = ComputationBuilder("fused", names)
    p0 = fused.parameter(0, Shape.array(dtype, (4,)))
    p1 = fused.parameter(1, Shape.array(dtype, (4,)))
    rev = fused.add(Op.REVERSE, [p0], attrs={"dimensions": (0,)})
    fused.add(Op.TUPLE, [fused.add(Op.SELECT, [
        fused.add(Op.BROADCAST, [fused.constant(True, DType.PRED)], attrs={"dimensions": ()},
                  shape=Shape.array(DType.PRED, (4,))), rev, p1]), p1])
    fusion = b.add(Op.FUSION, [x, looped], calls=[fused.build()], attrs={"kind": "kLoop"})
    first = b.add(Op.GET_TUPLE_ELEMENT, [fusion], attrs={"index": 0})
    barrier = b.add(Op.OPT_BARRIER, [b.add(Op.TUPLE, [first, called])])
    token = b.add(Op.AFTER_ALL, [])
    return [looped, chosen, two, b.add(Op.GET_TUPLE_ELEMENT, [barrier], attrs={"index": 0}),
            b.add(Op.GET_TUPLE_ELEMENT, [barrier], attrs={"index": 1}), token]


STRUCTURAL_SAMPLES: dict[Op, Sample] = {
    Op.BROADCAST: _broadcast,
    Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape,
    Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice,
    Op.CONCATENATE: _concatenate,
    Op.PAD: _pad,
    Op.REVERSE: _reverse,
    Op.COPY: _copy,
    Op.IOTA: _iota,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.DOT: _dot,
    Op.WHILE: _control,
    Op.CONDITIONAL: _control,
    Op.CALL: _control,
    Op.FUSION: _control,
    Op.TUPLE: _control,
    Op.GET_TUPLE_ELEMENT: _control,
    Op.OPT_BARRIER: _control,
    Op.AFTER_ALL: _control,
    Op.PARAMETER: _copy,
    Op.CONSTANT: _dynamic_slice,
}

# Ops the CPU backend does not compile, with the reason. custom-call has its own test (the one
# target hlofuse emits, the Threefry library call).
UNSUPPORTED: dict[Op, str] = {
    Op.RNG_BIT_GENERATOR: "no reference semantics: the interpreter refuses it as well",
    Op.CUSTOM_CALL: "only the hlofuse_threefry2x32 target exists; tested in test_library.py",
    # The interpreter evaluates these; compiling one is refused naming the instruction.
    Op.SELECT_AND_SCATTER: "no C code yet: interpreter only",
    Op.CONVOLUTION: "no C code yet: interpreter only",
}

# Ops with called computations and index vectors, sampled in HLO text in
# tests/codegen/test_indexing_codegen.py (several dimension-number forms each).
SAMPLED_IN_TEXT: frozenset[Op] = frozenset({
    Op.GATHER, Op.SCATTER, Op.SORT, Op.TOPK, Op.MAP, Op.REDUCE_PRECISION})


def structural_module(dtype: DType) -> tuple[Module, list[np.ndarray]]:
    b = ComputationBuilder("entry")
    rng = np.random.default_rng(11)
    inputs: list[np.ndarray] = []

    def param(dims: tuple[int, ...], param_dtype: DType) -> Instruction:
        inst = b.parameter(len(inputs), Shape.array(param_dtype, dims))
        if param_dtype is DType.S32 and not dims:
            inputs.append(np.array(rng.integers(-2, 8), np.int32))
        elif param_dtype is DType.PRED and not dims:
            inputs.append(np.array(bool(rng.integers(0, 2))))
        else:
            values = special_values(param_dtype)
            if param_dtype.is_float:
                values = values[np.isfinite(values.astype(np.float64))]
                values = values[np.abs(values.astype(np.float64)) < 1e4]
            inputs.append(values[rng.integers(0, len(values), dims)].astype(param_dtype.numpy))
        return inst

    results: list[Instruction] = []
    for sample in dict.fromkeys(STRUCTURAL_SAMPLES.values()):
        results.extend(sample(b, dtype, param))
    b.add(Op.TUPLE, results)
    return make_module(f"structural_{dtype.text}", b.build()), inputs


def non_elementwise_ops() -> list[Op]:
    return [op for op, d in OP_TABLE.items() if d.kind is not OpKind.ELEMENTWISE]
