"""Element values of reduce and reduce-window: accumulation loops in the reference's order.

A reduce's element is its reduced values accumulated by a loop inside the current scope
(written out with literal indices when there are at most UNROLL_ELEMENTS of them). How it
accumulates (`Accumulation`) follows the reference interpreter (NumPy) wherever the order
shows in the result. Library results (dot, custom-call) are computed whole by the kernel and
read back here (`materialized`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hlofuse.analysis.reducers import identity, in_index_order, reducer_op
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.emitter_types import (
    Index,
    UnsupportedInstruction,
    Value,
    conjunction,
)
from hlofuse.ir.attrs import Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.codegen.elemental import ElementalEmitter


def simple_reducer(reducer: Computation) -> Op | None:
    """The op of a reducer that is one binary op of its two parameters, else None."""
    return reducer_op(reducer)


_SIMD_REDUCTIONS = {Op.ADD: "+", Op.MULTIPLY: "*", Op.AND: "&", Op.OR: "|", Op.XOR: "^"}
# Float reductions that start from the op's identity and apply the initial value last.
_FROM_IDENTITY = frozenset({Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM})


@dataclass(frozen=True)
class Accumulation:
    """How a reduce accumulates, following the reference (NumPy) where order shows.

    Integer add/mul/and/or/xor are associative: the reduced loop may be vectorised (OpenMP
    simd reduction). Float sums and products of f16 and bf16, and of f32/f64 over at most
    32 elements (`analysis/reducers.in_index_order`: XLA's order), apply the reducer element
    by element from the initial value, rounding to the type at every step, as every reducer
    that is not one op does. Longer f32/f64 sums and products, and float max/min, reduce the
    values from the op's identity and combine the total with the initial value last, as the
    reference does (`ufunc.reduce`, then `ufunc(init, total)`): sums in NumPy's pairwise
    order (`pairwise`: a walk of the row's leaves, codegen/pairwise_rows.py), the rest in
    order. Without -ffast-math nothing is reassociated.
    """

    register: DType
    simd_op: str | None = None
    identity: Expr | None = None  # start here and apply the initial value last
    pairwise: bool = False  # an f32/f64 sum: NumPy's pairwise order when rows are contiguous
    op: Op | None = None  # the reducer's one op, when it is one


def accumulation(em: ElementalEmitter, reducer: Computation, dtype: DType, count: int,
                 extent: int) -> Accumulation:
    """How a reduce of `count` arrays of `dtype` over `extent` elements per result
    accumulates."""
    op = simple_reducer(reducer)
    register = em.lang.register_type(dtype)
    if count != 1 or op is None or in_index_order(op, dtype, extent):
        return Accumulation(register, op=op)
    if op in _SIMD_REDUCTIONS and (dtype.is_integer or dtype.is_pred):
        return Accumulation(register, _SIMD_REDUCTIONS[op], op=op)
    start = identity(op, dtype) if dtype.is_float and op in _FROM_IDENTITY else None
    if start is not None:
        start_value = em.lang.literal(dtype, float(start))
        pairwise = op is Op.ADD and dtype in (DType.F32, DType.F64)
        return Accumulation(register, None, start_value, pairwise, op)
    return Accumulation(register, op=op)


def reduction_order(in_dims: tuple[int, ...], dimensions: tuple[int, ...]) -> str:
    """"pairwise" or "sequential": how the reference sums the rows of this reduce.

    The reference moves the reduced dimensions last (in `dimensions` order) and calls
    `np.add.reduce(..., axis=-1)`, which sums pairwise when the rows end up contiguous or at
    unit stride and one element after another otherwise. Only which dimensions exceed one
    matters, so a tiny array of the same pattern answers the question.
    """
    small = tuple(min(d, 2) for d in in_dims)
    x = np.empty(small, np.float32)
    kept = [d for d in range(len(in_dims)) if d not in dimensions]
    moved = np.transpose(x, kept + list(dimensions)).reshape(
        tuple(small[d] for d in kept) + (-1,))
    if moved.flags.c_contiguous or moved.strides[-1] == x.itemsize:
        return "pairwise"
    return "sequential"


def start_accumulators(em: ElementalEmitter, plan: Accumulation,
                       inits: tuple[Instruction, ...]) -> list[Expr]:
    """One variable per reduced array, at the identity or the initial value."""
    out: list[Expr] = []
    for init in inits:
        start = plan.identity if plan.identity is not None else em.scalar(init)
        out.append(em.body.variable(em.lang.register_type(init.dtype), "acc", start))
    return out


def accumulate(em: ElementalEmitter, reducer: Computation, plan: Accumulation,
               accumulators: list[Expr], values: list[Expr]) -> None:
    """accumulators = reducer(accumulators, values), in place."""
    for acc, new in zip(accumulators, em.apply_reducer(reducer, accumulators, values)):
        em.body.assign(acc, new)


def reduce(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    reduced = inst.ints("dimensions")
    in_dims = inputs[0].shape.dims
    reducer = inst.calls[0]
    extent = math.prod(in_dims[d] for d in reduced)
    plan = accumulation(em, reducer, inputs[0].dtype, count, extent)
    if plan.pairwise and em.materialize is not None and extent >= 8:
        return materialized(em, inst, index)  # the whole reduce, summed pairwise first
    if 0 < extent <= em.unrolled_reduction:
        return _reduce_written_out(em, inst, index, plan)
    out_multi = iter(em.multi_of(index) if inst.shape.leaves()[0].dims else ())
    accumulators = start_accumulators(em, plan, inits)
    multi: list[Expr] = [cir.Int(0)] * len(in_dims)
    for d in range(len(in_dims)):
        if d not in reduced:
            multi[d] = next(out_multi)
    loops: list[tuple[str, int]] = []
    for d in reduced:  # row-major in `dimensions` order, as the reference walks them
        if in_dims[d] == 1:
            continue
        var = em.body.fresh("red")
        loops.append((var, in_dims[d]))
        multi[d] = cir.Var(var)
    if not any(in_dims[d] == 0 for d in reduced):
        with contextlib.ExitStack() as stack:
            for k, (var, size) in enumerate(loops):
                how = cir.SEQUENTIAL
                if k == len(loops) - 1 and plan.simd_op is not None and em.simd_reductions:
                    assert isinstance(accumulators[0], cir.Var)
                    how = cir.Loop(reduction=(plan.simd_op, accumulators[0].name))
                stack.enter_context(em.body.loop(var, 0, size, how))
            input_index = Index(in_dims, None, tuple(multi), None)
            values = [em.array_value(x, input_index) for x in inputs]
            accumulate(em, reducer, plan, accumulators, values)
    return reduced_value(em, reducer, inits, plan, accumulators)


def reduced_value(em: ElementalEmitter, reducer: Computation, inits: tuple[Instruction, ...],
                  plan: Accumulation, accumulators: list[Expr]) -> Value:
    """The reduce's result from its accumulators: an accumulation started at the reducer's
    identity combines with the init at the end."""
    if plan.identity is not None:
        return em.apply_reducer(reducer, [em.scalar(inits[0])], [accumulators[0]])[0]
    return accumulators[0] if len(accumulators) == 1 else tuple(accumulators)


def _reduce_written_out(em: ElementalEmitter, inst: Instruction, index: Index,
                        plan: Accumulation) -> Value:
    """A small reduce with a literal index per reduced element instead of a loop, in the
    loop's order: one output element's values then share their subexpressions (CartPole's
    any(|state| > limits) over a packed row of four), and an enclosing loop vectorises."""
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    reduced = inst.ints("dimensions")
    in_dims = inputs[0].shape.dims
    reducer = inst.calls[0]
    out_multi = iter(em.multi_of(index) if inst.shape.leaves()[0].dims else ())
    base: list[Expr] = [cir.Int(0) if d in reduced else next(out_multi)
                        for d in range(len(in_dims))]
    accumulators: list[Expr]
    if plan.identity is not None:
        accumulators = [plan.identity]
    else:
        accumulators = [em.scalar(init) for init in inits]
    # Row-major in `dimensions` order, as the reference walks them.
    for position in itertools.product(*(range(in_dims[d]) for d in reduced)):
        multi = list(base)
        for d, p in zip(reduced, position):
            multi[d] = cir.Int(p)
        input_index = Index(in_dims, None, tuple(multi), None)
        values = [em.array_value(x, input_index) for x in inputs]
        accumulators = em.apply_reducer(reducer, accumulators, values)
    return reduced_value(em, reducer, inits, plan, accumulators)


def reduce_window(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    if 0 < math.prod(window.size) <= em.unrolled_reduction:
        return _reduce_window_written_out(em, inst, index, window)
    in_dims = inputs[0].shape.dims
    out_multi = em.multi_of(index)
    accumulators: list[Expr] = [
        em.body.variable(em.lang.register_type(init.dtype), "acc", em.scalar(init))
        for init in inits]
    with contextlib.ExitStack() as stack:
        padded: list[Expr] = []
        for d in range(len(in_dims)):
            terms: list[Expr | int] = [cir.mul(out_multi[d], window.stride[d])]
            if window.size[d] > 1:
                var = em.body.fresh("w")
                stack.enter_context(em.body.loop(var, 0, window.size[d]))
                terms.append(cir.mul(cir.Var(var), window.rhs_dilate[d]))
            terms.append(-window.pad_low[d])
            padded.append(em.index_let(cir.add(*terms)))
        values = _window_element(em, inputs, inits, window, padded)
        updated = em.apply_reducer(inst.calls[0], accumulators, values)
        for acc, new in zip(accumulators, updated):
            em.body.assign(acc, new)
    return accumulators[0] if count == 1 else tuple(accumulators)


def _reduce_window_written_out(em: ElementalEmitter, inst: Instruction, index: Index,
                               window: Window) -> Value:
    """A small window with a literal offset per window position instead of loops, in the
    loops' order: a cumulative sum of a lane's few values in lane code then keeps the loop over
    the lanes a vector loop, and positions known to fall in the padding take the init alone."""
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    out_multi = em.multi_of(index)
    accumulators: list[Expr] = [em.scalar(init) for init in inits]
    for offsets in itertools.product(*(range(size) for size in window.size)):
        padded = [em.index_let(cir.add(cir.mul(out_multi[d], window.stride[d]),
                                       offsets[d] * window.rhs_dilate[d] - window.pad_low[d]))
                  for d in range(len(offsets))]
        values = _window_element(em, inputs, inits, window, padded)
        accumulators = em.apply_reducer(inst.calls[0], accumulators, values)
    return accumulators[0] if count == 1 else tuple(accumulators)


def _window_element(em: ElementalEmitter, inputs: tuple[Instruction, ...],
                    inits: tuple[Instruction, ...], window: Window,
                    padded: list[Expr]) -> list[Expr]:
    """The inputs' values at one window position, given its position in the padded and
    dilated operand per dimension: the init where it falls in the padding or between dilated
    elements (known here for a literal position, else tested when the kernel runs)."""
    in_dims = inputs[0].shape.dims
    zero = cir.Int(0)
    positions: list[Expr] = []
    conditions: list[Expr] = []
    for d, (size, position) in enumerate(zip(in_dims, padded)):
        dilate = window.lhs_dilate[d]
        if isinstance(position, cir.Int):
            p = position.value
            if p < 0 or p % dilate or p // dilate >= size:
                return [em.scalar(init) for init in inits]
            positions.append(cir.Int(p // dilate))
            continue
        if dilate > 1:
            conditions += [Binary(">=", position, zero),
                           Binary("==", cir.mod(position, dilate), zero),
                           Binary("<", cir.div(position, dilate), cir.Int(size))]
            position = em.index_let(cir.div(position, dilate))
        elif window.pad_low[d] > 0 or window.pad_high[d] > 0:
            conditions += [Binary(">=", position, zero),
                           Binary("<", position, cir.Int(size))]
        positions.append(position)
    input_index = Index(in_dims, None, tuple(positions), None)
    if not conditions:
        return [em.array_value(x, input_index) for x in inputs]
    condition = conjunction(conditions)
    return [em.branch(x.dtype, condition,
                      lambda x=x: em.array_value(x, input_index),  # type: ignore[misc]
                      lambda init=init: em.scalar(init))  # type: ignore[misc]
            for x, init in zip(inputs, inits)]


def materialized(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """Library results (dot, custom-call) are computed whole into temporaries, then read."""
    if em.materialize is None:
        raise UnsupportedInstruction(f"%{inst.name}: {inst.op.text} inside this kernel")
    pointers = em.materialize(inst)
    leaves = inst.shape.leaves()
    values = [em.load(leaf.dtype, pointer, Index(leaf.dims, em.linear_of(index), None,
                                                 index.flat_group))
              for leaf, pointer in zip(leaves, pointers)]
    return values[0] if not inst.shape.is_tuple else tuple(values)
